#!/usr/bin/env python3
"""Makes the Hugging Face fixtures of tests/fixtures/hf with transformers and tokenizers.

Nothing can be downloaded from a model hub, so the models are made here: tiny random GPT-2,
LLaMA (grouped-query attention, untied head, llama3 rope scaling, bf16, sharded) and Qwen2
(q/k/v biases, tied head, f16, a ChatML chat template), each with a tokenizer trained on a small
built-in corpus, saved with save_pretrained; plus the answers alk's tests compare against:

  reference/<model>.safetensors  input_ids.{i} i64 [T_i], logits.{i} f32 [T_i, V] (the model in
                                 float32), greedy.{i} i64 [16] (what generate(do_sample=False) adds)
  reference/tokenizers.json      {tokenizer: [{"text", "ids", "decoded"}]} with each tokenizer's
                                 default special tokens
  reference/versions.json        the libraries that made them

Two ways to make them, the same layout either way (reference/versions.json says which made them):
- With transformers + tokenizers (the GPU machine's Python; a CPU is enough): the models are
  transformers' own classes saved with save_pretrained, the tokenizers trained by `tokenizers`,
  the answers transformers' forward and generate. This is the proof against the real library.
    python3 scripts/make_hf_fixtures.py OUT_DIR      (then copy OUT_DIR/* to tests/fixtures/hf/)
- Without them (this development machine: Debian's torch 1.13, python3-regex, Node), the same
  directories written here in the formats save_pretrained writes (config.json fields, safetensors
  with its key names, sharding index, tokenizer.json as the tokenizers library serializes it),
  tokenizers trained by a small BPE trainer below, the token ids from Hugging Face's own
  JavaScript tokenizers (npm @huggingface/tokenizers: `npm install --no-save @huggingface/tokenizers`),
  and the logits from the modeling code's formulas written out below in float64 torch.
    python3 scripts/make_hf_fixtures.py --local OUT_DIR
"""
import json
import os
import sys

import torch

LOCAL = "--local" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--local"]
OUT = ARGS[0] if ARGS else "tests/fixtures/hf"
if not LOCAL:
    import transformers
    import tokenizers
    from safetensors.torch import save_file
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
VOCAB = 512

# A corpus with what tokenizers must get right: words, contractions, digits, whitespace runs,
# accents, CJK, emoji. Repeated so BPE finds merges.
CORPUS = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "It's a test; we're testing what they'll do, isn't it? I'd say you've seen it.",
    "Numbers: 0 1 12 123 1234 12345 3.14159 2026-12-07 1,000,000",
    "Tabs\tand  double  spaces   and\n\nnew lines\r\n end.",
    "Café naïve résumé façade über Straße ÆØÅ",
    "日本語のテキストと中文文本 한국어",
    "Emoji: 🦀 👍🏽 🎉✨ — dashes – and “quotes”.",
    "def f(x):\n    return x * 2  # code\n",
    "To be, or not to be, that is the question.",
]
CORPUS = CORPUS * 20

TEST_STRINGS = [
    "Hello world",
    " leading space and trailing space ",
    "In the beginning God created the heaven and the earth.",
    "multiple   spaces\t\ttabs\n\n\nnewlines",
    "digits 1234567890 and 3.14",
    "It's they're we'll I'd DON'T",
    "Café über 日本語 한국어",
    "emoji 🦀👍🏽🎉 end",
    "zebra quixotic xylophone",  # letters the corpus rarely merges
    "\u00a0non-breaking\u2003em space",
    "  ",  # (not "": Hugging Face's JavaScript tokenizers, the --local reference, throw on it)
    "a",
    # Decomposed letters (e + combining acute, a + ring, Hangul jamo) that an NFC normalizer (Qwen2's)
    # composes, beside a compatibility ligature and a precomposed letter it leaves alone.
    "Cafe\u0301 A\u030a \u1100\u1161\u11a8 \ufb01ne Caf\u00e9",
]


def byte_level_tokenizer(pattern, specials, normalizer=None):
    """Byte-level BPE (GPT-2, LLaMA-3, Qwen2): a Split by `pattern` (None: GPT-2's own), bytes as characters."""
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    if pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def sentencepiece_bpe_tokenizer():
    """LLaMA-2 / TinyLlama style: "▁" for spaces, BPE over characters, unknown bytes as <0xNN>."""
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=VOCAB + 0, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


GPT2_PATTERN = None
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def fast(tok, **kw):
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **kw)


def load_kwargs():
    # transformers 5 renamed torch_dtype to dtype.
    major = int(transformers.__version__.split(".")[0])
    return {"dtype": torch.float32} if major >= 5 else {"torch_dtype": torch.float32}


def references(name, model_dir, model_cls, hf_tok, prompts):
    model = model_cls.from_pretrained(model_dir, **load_kwargs()).eval()
    tensors = {}
    for i, text in enumerate(prompts):
        ids = hf_tok(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(ids).logits[0].float()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                                 min_new_tokens=16, pad_token_id=0)
        tensors[f"input_ids.{i}"] = ids[0].to(torch.int64).contiguous()
        tensors[f"logits.{i}"] = logits.contiguous()
        tensors[f"greedy.{i}"] = out[0, ids.shape[1]:].to(torch.int64).contiguous()
    os.makedirs(f"{OUT}/reference", exist_ok=True)
    save_file(tensors, f"{OUT}/reference/{name}.safetensors")


def main():
    torch.manual_seed(1234)
    prompts = ["In the beginning God created", "The quick brown fox", "It's 2026, and 🦀 numbers 12345 are here"]
    tok_cases = {}

    # GPT-2
    gpt2_tok = byte_level_tokenizer(GPT2_PATTERN, ["<|endoftext|>"])
    hf = fast(gpt2_tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    hf.model_max_length = 128
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                                  bos_token_id=hf.bos_token_id, eos_token_id=hf.eos_token_id)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    d = f"{OUT}/gpt2"
    model.save_pretrained(d, safe_serialization=True)
    hf.save_pretrained(d)
    references("gpt2", d, transformers.GPT2LMHeadModel, hf, prompts)
    tok_cases["gpt2"] = hf

    # LLaMA: GQA, untied head, llama3 rope scaling, bf16, sharded.
    sp_tok = sentencepiece_bpe_tokenizer()
    hf = fast(sp_tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    cfg = transformers.LlamaConfig(
        vocab_size=sp_tok.get_vocab_size(), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 32},
        bos_token_id=hf.bos_token_id, eos_token_id=hf.eos_token_id)
    model = transformers.LlamaForCausalLM(cfg).eval()
    d = f"{OUT}/llama"
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True, max_shard_size="150KB")
    hf.save_pretrained(d)
    references("llama", d, transformers.LlamaForCausalLM, hf, prompts)
    tok_cases["llama"] = hf

    # Qwen2: q/k/v biases, tied head, f16, ChatML, an NFC normalizer (as Qwen2's tokenizer.json has).
    q_tok = byte_level_tokenizer(QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], normalizers.NFC())
    hf = fast(q_tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = CHATML
    cfg = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rope_theta=1000000.0, tie_word_embeddings=True,
        use_sliding_window=False, eos_token_id=hf.eos_token_id)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # Qwen2 initializes biases to zero: make them matter
        for layer in model.model.layers:
            for p in (layer.self_attn.q_proj.bias, layer.self_attn.k_proj.bias, layer.self_attn.v_proj.bias):
                p.normal_(0, 0.5)
    d = f"{OUT}/qwen2"
    model.to(torch.float16).save_pretrained(d, safe_serialization=True)
    hf.save_pretrained(d)
    references("qwen2", d, transformers.Qwen2ForCausalLM, hf, prompts)
    tok_cases["qwen2"] = hf

    # A tokenizer alone: LLaMA-3's pre-tokenizer regex.
    l3_tok = byte_level_tokenizer(LLAMA3_PATTERN, ["<|begin_of_text|>", "<|end_of_text|>"])
    l3_tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", l3_tok.token_to_id("<|begin_of_text|>"))])
    hf = fast(l3_tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    hf.save_pretrained(f"{OUT}/tokenizer-llama3")
    tok_cases["tokenizer-llama3"] = hf

    cases = {}
    for name, t in tok_cases.items():
        strings = TEST_STRINGS + [f"{t.eos_token} special {t.eos_token}x"]
        cases[name] = []
        for text in strings:
            ids = t(text)["input_ids"]
            cases[name].append({"text": text, "ids": ids, "decoded": t.decode(ids)})
    with open(f"{OUT}/reference/tokenizers.json", "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    with open(f"{OUT}/reference/versions.json", "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "tokenizers": tokenizers.__version__}, f, indent=1)
    total = sum(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(OUT) for n in ns)
    print(f"fixtures in {OUT}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    if LOCAL:
        import make_hf_fixtures_local
        make_hf_fixtures_local.main(OUT, CORPUS, TEST_STRINGS, VOCAB,
                                    {"gpt2": None, "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN}, CHATML)
    else:
        main()
