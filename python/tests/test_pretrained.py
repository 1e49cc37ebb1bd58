"""alk.nn.from_pretrained and GPT.save_pretrained: a GPT-2 written in transformers' layout and read
back gives the same logits; the tokenizer.json path gives the BPE's ids. (The comparison with
transformers itself is scripts/check_hf_export.py and the C++ fixture tests.)"""
import json

import numpy as np

import alk
import alk.nn as nn


def _tiny_gpt2(tmp_path):
    alk.manual_seed(3)
    tok = alk.Tokenizer.train("the cat sat on the mat; the dog ate the cat's food. 123 456 ", 280,
                                    ["<|endoftext|>"])
    model = nn.GPT(vocab=tok.vocab_size, ctx=16, dim=16, heads=2, layers=1)
    model.eval()
    model.save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_text(tok.to_tokenizer_json())
    return model, tok


def test_from_pretrained_round_trip(tmp_path):
    model, tok = _tiny_gpt2(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["n_embd"] == 16
    loaded = nn.from_pretrained(tmp_path, device="cpu")
    assert loaded.config["model_type"] == "gpt2"
    text = "the dog sat<|endoftext|>the cat"
    ids = loaded.tokenizer.encode(text, add_special_tokens=True)
    assert ids == tok.encode(text)
    x = alk.tensor(np.array([ids], dtype=np.int64))
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    assert loaded.tokenizer.decode(ids) == text


def test_save_pretrained_bf16(tmp_path):
    _tiny_gpt2(tmp_path)
    loaded = nn.from_pretrained(tmp_path)
    out = tmp_path / "bf16"
    loaded.save_pretrained(out, dtype=alk.bfloat16)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert (out / "tokenizer.json").exists()
    again = nn.from_pretrained(out)
    w = again.state_dict()["wte.weight"].numpy()
    np.testing.assert_allclose(w, loaded.state_dict()["wte.weight"].numpy(), rtol=1e-2, atol=1e-2)


_HF = __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "..", "tests", "fixtures", "hf")


def test_from_pretrained_gpt2_fixture_matches_transformers():
    model = nn.from_pretrained(f"{_HF}/gpt2")
    ref = alk.load_safetensors(f"{_HF}/reference/gpt2.safetensors")
    i = 0
    while f"input_ids.{i}" in ref:
        ids = ref[f"input_ids.{i}"].numpy()
        got = model(alk.tensor(ids.reshape(1, -1))).numpy()[0]
        np.testing.assert_allclose(got, ref[f"logits.{i}"].numpy(), atol=1e-4, rtol=0)
        out = model.generate(ids.tolist(), max_new_tokens=16)
        assert out[len(ids):] == ref[f"greedy.{i}"].numpy().tolist()
        i += 1
    assert i >= 2
    cases = json.load(open(f"{_HF}/reference/tokenizers.json"))["gpt2"]
    for c in cases:
        assert model.tokenizer.encode(c["text"], add_special_tokens=True) == c["ids"], c["text"]
