#!/usr/bin/python3
"""Writes the seed corpora of the libFuzzer harnesses (fuzz/corpus/<harness>/), with plain Python.

Run from the repository root: python3 scripts/gen_fuzz_corpus.py
Multi-file inputs (tokenizer, mnist, rundir) are the files joined by a "\\n----\\n" line, as
fuzz/fuzz_util.h splits them. The expression seeds are every forward and backward text of
the op table (include/alk/elementwise.def).
"""
import json
import os
import re
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")
SEP = b"\n----\n"


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype tag, shape, raw bytes)."""
    header, offset, data = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, tag, shape, raw in tensors:
        header[name] = {"dtype": tag, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable characters (vocab.json keys)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def idx(magic_dims, dims, payload):
    return struct.pack(">I", 0x800 + magic_dims) + b"".join(struct.pack(">I", d) for d in dims) + payload


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    # JSON
    write("json", "object", '{"a": [1, 2.5, -3e10, true, false, null], "b": {"c": "x\\u00e9\\n"}}')
    write("json", "config", '{\n  "task": "gpt",\n  "steps": 10,\n  "lr": 0.002\n}\n')
    write("json", "nested", "[[[[[[[[[[{}]]]]]]]]]]")
    write("json", "numbers", "[0, -0, 1e308, 1e-308, 123456789012345678901234567890, 0.1]")
    write("json", "strings", '["\\ud83d\\ude00", "\\"\\\\\\/\\b\\f\\n\\r\\t", "caf\u00e9"]')
    # safetensors
    write("safetensors", "reference", open(os.path.join(ROOT, "tests/fixtures/safetensors/reference.safetensors"), "rb").read())
    write("safetensors", "small", safetensors(
        [("w", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), ("b", "BF16", [2], b"\x80\x3f\x00\x40"),
         ("i", "I64", [1], struct.pack("<q", -5)), ("m", "BOOL", [3], b"\x00\x01\x02")],
        {"format": "alk", "step": "3"}))
    write("safetensors", "empty", safetensors([]))
    write("safetensors", "zero_dim", safetensors([("s", "F64", [], struct.pack("<d", 2.5)), ("e", "U8", [0, 4], b"")]))
    # vocab.json + merges.txt: the 256 byte tokens and a few merges.
    b2u = bytes_to_unicode()
    keys = [b2u[b] for b in range(256)]
    merges = [("t", "h"), ("th", "e"), ("Ġ", "t"), ("Ġt", "he"), ("a", "n"), ("Ġ", "c")]
    keys += [a + b for a, b in merges] + ["<|endoftext|>"]
    vocab = json.dumps({k: i for i, k in enumerate(keys)})
    merges_txt = "#version: 0.2\n" + "".join("%s %s\n" % m for m in merges)
    write("tokenizer", "tiny", vocab.encode() + SEP + merges_txt.encode() + SEP + b"the cat and then the end")
    write("tokenizer", "no_merges", json.dumps({k: i for i, k in enumerate(keys[:256])}).encode() + SEP + b"#version: 0.2\n")
    # Hugging Face files: tokenizer.json, tokenizer_config.json, config.json,
    # generation_config.json, model.safetensors.index.json, then text.
    hf_tokenizer = json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(keys) - 1, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                   "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                                   "\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {k: i for i, k in enumerate(keys)}, "merges": ["%s %s" % m for m in merges]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>",
                                                                            "ids": [len(keys) - 1],
                                                                            "tokens": ["<|endoftext|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}})
    llama_config = json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 64,
        "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32}, "bos_token_id": 1, "eos_token_id": [2, 3]})
    index = json.dumps({"metadata": {"total_size": 8}, "weight_map": {"a": "model-00001-of-00001.safetensors"}})
    write("hf_files", "llama3_style", SEP.join([hf_tokenizer.encode(), b'{"clean_up_tokenization_spaces": true}',
                                                llama_config.encode(), b'{"eos_token_id": [2, 3], "temperature": 0.6}',
                                                index.encode(), "Hello <|endoftext|> wörld 12345".encode()]))
    # MNIST IDX: train images/labels, test images/labels.
    write("mnist", "tiny", SEP.join([idx(3, [2, 2, 2], bytes(range(8))), idx(1, [2], b"\x03\x09"),
                                     idx(3, [1, 2, 2], b"\x00\xff\x10\x20"), idx(1, [1], b"\x00")]))
    write("mnist", "empty", SEP.join([idx(3, [0, 28, 28], b""), idx(1, [0], b""), idx(3, [0, 1, 1], b""),
                                      idx(1, [0], b"")]))
    # The run directory: config.json, checkpoint.json, metrics.jsonl, a memory budget.
    config = json.dumps({"task": "gpt", "steps": 20, "batch": 4, "ctx": 16, "dim": 32, "heads": 2, "layers": 1,
                         "vocab_size": 300, "lr": 0.002, "memory_budget": "64MB"}, indent=2)
    metrics = "".join(json.dumps({"step": s, "loss": 5.0 - s / 10, "lr": 0.001, "tokens_per_s": 1000.0}) + "\n"
                      for s in range(1, 8)) + '{"step": 8, "lo'
    write("rundir", "run", SEP.join([config.encode(), b'{"step": 20, "dir": "checkpoints/step-00000020"}\n',
                                     metrics.encode(), b"1.5GB"]))
    write("rundir", "legacy", SEP.join([b"{}", b"", b"", b"512"]))
    # Expressions: the op table's texts.
    text = open(os.path.join(ROOT, "include/alk/elementwise.def")).read()
    n = 0
    for m in re.finditer(r'^ALK_EW\((.*?)\)\s*$', text, re.M | re.S):
        for s in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))[1:]:
            if s and s not in ("x", "a b", "c a b", "x lo hi"):
                write("expr", "op%03d" % n, s)
                n += 1
    write("expr", "custom", "select(x > 0, x * tanh(log1p(exp(a))), -b / (1 + abs(x)))")
    # `alk serve` request bodies (fuzz_serve_request): completions, chat, and the edge cases.
    write("serve_request", "completion", json.dumps({"model": "m", "prompt": "Once upon", "max_tokens": 8,
                                                     "temperature": 0.7, "top_p": 0.9, "top_k": 40, "stop": ["\n", "END"],
                                                     "seed": 1, "logprobs": 0, "stream": True,
                                                     "stream_options": {"include_usage": True}}))
    write("serve_request", "chat", json.dumps({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                                               "max_completion_tokens": 4, "logprobs": True, "n": 1}))
    write("serve_request", "ids", '{"prompt": [[1, 2, 3]], "max_tokens": 1e300, "tokens": [5, 6]}')
    write("serve_request", "bad", '{"prompt": "x", "max_tokens": -1, "presence_penalty": "a", "stop": [1]}')
    print("wrote seed corpora to", OUT)


if __name__ == "__main__":
    main()
