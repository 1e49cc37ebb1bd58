"""make_hf_fixtures.py --local: the Hugging Face fixtures without transformers (see its docstring).

Everything a Hugging Face directory holds is written here in the layout save_pretrained writes;
the answers come from sources independent of alk's C++: token ids from Hugging Face's JavaScript
tokenizers (scripts/hf_tokenizer_reference.mjs), logits from the modeling files' formulas
(GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM) evaluated in float64 below.
"""
import collections
import json
import math
import os
import struct
import subprocess
import unicodedata

import regex
import torch

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
DTYPE_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64"}
VERSION = "local (torch %s float64 reference, @huggingface/tokenizers ids)" % torch.__version__


# ---- files ----

def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def save_safetensors(path, tensors):
    """The safetensors layout: u64 header size, JSON header (8-byte aligned), the data."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, t in tensors.items():
        data = tensor_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)


def save_weights(directory, tensors, max_shard_bytes=None):
    """model.safetensors, or shards plus model.safetensors.index.json as save_pretrained names them."""
    if max_shard_bytes is None:
        save_safetensors(f"{directory}/model.safetensors", tensors)
        return
    shards, current, size = [], {}, 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        if current and size + n > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name], size = t, size + n
    shards.append(current)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_safetensors(f"{directory}/{file}", shard)
        for name, t in shard.items():
            weight_map[name] = file
            total += t.numel() * t.element_size()
    write_json(f"{directory}/model.safetensors.index.json",
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


# ---- tokenizers: a BPE trainer and tokenizer.json as the tokenizers library writes it ----

def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def train_bpe(words, alphabet, first_ids, vocab_size):
    """Merges the most frequent adjacent pair (ties: the smallest pair) until vocab_size tokens."""
    vocab = dict(first_ids)
    for ch in sorted(alphabet):
        vocab.setdefault(ch, len(vocab))
    seqs = {tuple(w): c for w, c in words.items()}
    merges = []
    while len(vocab) < vocab_size:
        pairs = collections.Counter()
        for seq, c in seqs.items():
            for a, b in zip(seq, seq[1:]):
                if a in vocab and b in vocab:
                    pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], tuple(-ord(ch) for ch in kv[0][0] + "\0" + kv[0][1])))[0]
        merged = best[0] + best[1]
        merges.append(best)
        vocab.setdefault(merged, len(vocab))
        new = {}
        for seq, c in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        seqs = new
    return vocab, merges


def added_token(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def template_processor(bos, bos_id):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


def byte_level_tokenizer_json(corpus, pattern, specials, vocab_size, merges_as_strings=False, bos=None,
                              ignore_merges=False, nfc=False):
    """Byte-level BPE: GPT-2's ByteLevel regex (pattern None) or a Split by `pattern` then ByteLevel;
    nfc: an NFC normalizer first (Qwen2's), which training applies to the corpus too."""
    table = bytes_to_unicode()
    words = collections.Counter()
    for text in corpus:
        if nfc:
            text = unicodedata.normalize("NFC", text)
        for w in regex.findall(pattern or GPT2_PATTERN, text):
            words["".join(table[b] for b in w.encode())] += 1
    vocab, merges = train_bpe(words, set(table.values()), {s: i for i, s in enumerate(specials)}, vocab_size)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": pattern is None}
    if pattern is None:
        pre = byte_level
    else:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}, byte_level]}
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    if bos is not None:
        post = {"type": "Sequence", "processors": [post, template_processor(bos, vocab[bos])]}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added_token(vocab[s], s) for s in specials],
        "normalizer": {"type": "NFC"} if nfc else None, "pre_tokenizer": pre, "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab,
                  "merges": [f"{a} {b}" for a, b in merges] if merges_as_strings else [[a, b] for a, b in merges]},
    }


def sentencepiece_tokenizer_json(corpus, vocab_size, alphabet_limit=120):
    """LLaMA-2 / TinyLlama style: spaces as "▁", BPE over characters, other bytes as <0xNN>."""
    specials = ["<unk>", "<s>", "</s>"]
    first = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        first[f"<0x{b:02X}>"] = len(first)
    normalized = ["▁" + t.replace(" ", "▁") for t in corpus]
    counts = collections.Counter(ch for t in normalized for ch in t)
    alphabet = {ch for ch, _ in counts.most_common(alphabet_limit)}
    words = collections.Counter()
    for t in normalized:
        for w in regex.findall(r"▁[^▁]*|[^▁]+", t):
            words[w] += 1
    vocab, merges = train_bpe(words, alphabet, first, vocab_size)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added_token(i, s) for i, s in enumerate(specials)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": template_processor("<s>", 1),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


def added_tokens_decoder(tok_json):
    return {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in tok_json["added_tokens"]}


# ---- models: weights in the transformers layout, and their forward in float64 ----

def randn(*shape, std):
    return torch.randn(*shape, dtype=torch.float32) * std


def gpt2_weights(cfg):
    c, v, n, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    w = {"transformer.wte.weight": randn(v, c, std=0.2), "transformer.wpe.weight": randn(n, c, std=0.1)}
    for i in range(L):
        p = f"transformer.h.{i}."
        w[p + "ln_1.weight"] = 1 + randn(c, std=0.1)
        w[p + "ln_1.bias"] = randn(c, std=0.1)
        w[p + "attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)  # the mask buffer old checkpoints hold
        w[p + "attn.masked_bias"] = torch.tensor(-1e4)
        w[p + "attn.c_attn.weight"] = randn(c, 3 * c, std=c ** -0.5)  # Conv1D: [in, out]
        w[p + "attn.c_attn.bias"] = randn(3 * c, std=0.1)
        w[p + "attn.c_proj.weight"] = randn(c, c, std=c ** -0.5)
        w[p + "attn.c_proj.bias"] = randn(c, std=0.1)
        w[p + "ln_2.weight"] = 1 + randn(c, std=0.1)
        w[p + "ln_2.bias"] = randn(c, std=0.1)
        w[p + "mlp.c_fc.weight"] = randn(c, 4 * c, std=c ** -0.5)
        w[p + "mlp.c_fc.bias"] = randn(4 * c, std=0.1)
        w[p + "mlp.c_proj.weight"] = randn(4 * c, c, std=(4 * c) ** -0.5)
        w[p + "mlp.c_proj.bias"] = randn(c, std=0.1)
    w["transformer.ln_f.weight"] = 1 + randn(c, std=0.1)
    w["transformer.ln_f.bias"] = randn(c, std=0.1)
    return w


def causal_attention(q, k, v):
    """q [H, T, D], k/v [Hkv, T, D]; query head h reads kv head h // (H / Hkv)."""
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    t = q.shape[1]
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[2])
    scores = scores.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(scores, -1) @ v


def gpt2_forward(w, cfg, ids):
    w = {k: t.double() for k, t in w.items()}
    c, h, L, eps = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
    t = len(ids)
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (c,), w[p + ".weight"], w[p + ".bias"], eps)
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:t]
    for i in range(L):
        p = f"transformer.h.{i}."
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (z.view(t, h, c // h).transpose(0, 1) for z in qkv.split(c, 1))
        y = causal_attention(q, k, v).transpose(0, 1).reshape(t, c)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        a = ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        a = 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))  # gelu_new
        x = x + a @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].t()


def llama_weights(cfg, qkv_bias):
    c, v, L, f = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    d = c // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * d
    w = {"model.embed_tokens.weight": randn(v, c, std=0.2)}
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + randn(c, std=0.1)
        w[p + "self_attn.q_proj.weight"] = randn(c, c, std=c ** -0.5)
        w[p + "self_attn.k_proj.weight"] = randn(kv, c, std=c ** -0.5)
        w[p + "self_attn.v_proj.weight"] = randn(kv, c, std=c ** -0.5)
        if qkv_bias:
            w[p + "self_attn.q_proj.bias"] = randn(c, std=0.5)
            w[p + "self_attn.k_proj.bias"] = randn(kv, std=0.5)
            w[p + "self_attn.v_proj.bias"] = randn(kv, std=0.5)
        w[p + "self_attn.o_proj.weight"] = randn(c, c, std=c ** -0.5)
        w[p + "post_attention_layernorm.weight"] = 1 + randn(c, std=0.1)
        w[p + "mlp.gate_proj.weight"] = randn(f, c, std=c ** -0.5)
        w[p + "mlp.up_proj.weight"] = randn(f, c, std=c ** -0.5)
        w[p + "mlp.down_proj.weight"] = randn(c, f, std=f ** -0.5)
    w["model.norm.weight"] = 1 + randn(c, std=0.1)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = randn(v, c, std=0.2)
    return w


def rope_inverse_frequencies(cfg, d):
    """The inverse frequencies as transformers computes them (float32), llama3 rescaling included."""
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = cfg.get("rope_scaling")
    if s:
        assert s["rope_type"] == "llama3"
        old, low, high, factor = (s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"],
                                  s["factor"])
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def llama_forward(w, cfg, ids):
    w = {k: t.double() for k, t in w.items()}
    c, h, hkv, L, eps = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                         cfg["num_hidden_layers"], cfg["rms_norm_eps"])
    d, t = c // h, len(ids)
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * rope_inverse_frequencies(cfg, d)[None, :]  # f32, as HF
    emb = torch.cat([freqs, freqs], -1).double()
    cos, sin = emb.cos(), emb.sin()

    def rope(z):  # [heads, T, D], rotate-half
        half = torch.cat([-z[..., d // 2:], z[..., :d // 2]], -1)
        return z * cos + half * sin

    def rms(x, name):
        return w[name] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def linear(x, name):
        y = x @ w[name + ".weight"].t()
        return y + w[name + ".bias"] if name + ".bias" in w else y

    x = w["model.embed_tokens.weight"][ids]
    for i in range(L):
        p = f"model.layers.{i}."
        a = rms(x, p + "input_layernorm.weight")
        q = linear(a, p + "self_attn.q_proj").view(t, h, d).transpose(0, 1)
        k = linear(a, p + "self_attn.k_proj").view(t, hkv, d).transpose(0, 1)
        v = linear(a, p + "self_attn.v_proj").view(t, hkv, d).transpose(0, 1)
        y = causal_attention(rope(q), rope(k), v).transpose(0, 1).reshape(t, c)
        x = x + linear(y, p + "self_attn.o_proj")
        m = rms(x, p + "post_attention_layernorm.weight")
        gate = linear(m, p + "mlp.gate_proj")
        x = x + linear(gate * torch.sigmoid(gate) * linear(m, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, "model.norm.weight")
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.t()


def references(out, name, forward, weights, cfg, prompts_ids, new_tokens=16):
    """input_ids.i, logits.i (float64 forward rounded to f32), greedy.i (argmax, full recomputation)."""
    tensors, smallest_margin = {}, float("inf")
    for i, ids in enumerate(prompts_ids):
        logits = forward(weights, cfg, ids)
        seq = list(ids)
        for _ in range(new_tokens):
            last = forward(weights, cfg, seq)[-1]
            top2 = torch.topk(last, 2).values
            smallest_margin = min(smallest_margin, float(top2[0] - top2[1]))
            seq.append(int(torch.argmax(last)))
        tensors[f"input_ids.{i}"] = torch.tensor(ids, dtype=torch.int64)
        tensors[f"logits.{i}"] = logits.float()
        tensors[f"greedy.{i}"] = torch.tensor(seq[len(ids):], dtype=torch.int64)
    os.makedirs(f"{out}/reference", exist_ok=True)
    save_safetensors(f"{out}/reference/{name}.safetensors", tensors)
    # Greedy continuations are only a fair test where the best token wins clearly.
    print(f"{name}: smallest top-2 logit margin over the greedy steps {smallest_margin:.4f}")
    assert smallest_margin > 1e-3, "a near tie: pick another seed"


def tokenizer_reference(out, names, strings_by_name):
    """Ids and decoded text from @huggingface/tokenizers (Node) for each tokenizer directory."""
    here = os.path.dirname(os.path.abspath(__file__))
    request = {"root": os.path.abspath(out), "cases": strings_by_name}
    res = subprocess.run(["node", f"{here}/hf_tokenizer_reference.mjs"], input=json.dumps(request),
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def main(out, corpus, test_strings, vocab_size, patterns, chatml):
    torch.manual_seed(1234)
    os.makedirs(out, exist_ok=True)
    texts = ["In the beginning God created", "The quick brown fox", "It's 2026, and 🦀 numbers 12345 are here"]
    version = {"transformers_version": "none (" + VERSION + ")"}

    # GPT-2: byte-level BPE with GPT-2's own regex, f32, one file, mask buffers present.
    d = f"{out}/gpt2"
    os.makedirs(d, exist_ok=True)
    gpt2_tok = byte_level_tokenizer_json(corpus, patterns["gpt2"], ["<|endoftext|>"], vocab_size)
    write_json(f"{d}/tokenizer.json", gpt2_tok)
    write_json(f"{d}/tokenizer_config.json", {
        "add_prefix_space": False, "added_tokens_decoder": added_tokens_decoder(gpt2_tok),
        "bos_token": "<|endoftext|>", "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>",
        "model_max_length": 128, "tokenizer_class": "GPT2Tokenizer", "unk_token": "<|endoftext|>"})
    write_json(f"{d}/special_tokens_map.json",
               {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})
    gpt2_cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
                "bos_token_id": 0, "embd_pdrop": 0.1, "eos_token_id": 0, "initializer_range": 0.02,
                "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 128, "n_embd": 64, "n_head": 4,
                "n_inner": None, "n_layer": 2, "n_positions": 128, "reorder_and_upcast_attn": False,
                "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
                "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
                "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": "float32",
                "use_cache": True, "vocab_size": vocab_size, **version}
    write_json(f"{d}/config.json", gpt2_cfg)
    write_json(f"{d}/generation_config.json", {"bos_token_id": 0, "eos_token_id": 0, **version})
    gpt2_w = gpt2_weights(gpt2_cfg)
    save_weights(d, gpt2_w)

    # LLaMA: SentencePiece-style BPE with byte fallback; GQA, untied, llama3 rope scaling; bf16, sharded.
    d = f"{out}/llama"
    os.makedirs(d, exist_ok=True)
    sp_tok = sentencepiece_tokenizer_json(corpus, vocab_size)
    write_json(f"{d}/tokenizer.json", sp_tok)
    write_json(f"{d}/tokenizer_config.json", {
        "add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": added_tokens_decoder(sp_tok),
        "bos_token": "<s>", "chat_template": (
            "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + message['content'] + "
            "eos_token + '\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + eos_token + "
            "'\n' }}{% else %}{{ '<|assistant|>\n' + message['content'] + eos_token + '\n' }}{% endif %}"
            "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}"),
        "clean_up_tokenization_spaces": False, "eos_token": "</s>", "legacy": False, "model_max_length": 128,
        "pad_token": None, "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>"})
    llama_cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                 "bos_token_id": 1, "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
                 "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 128,
                 "mlp_bias": False, "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
                 "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
                 "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                  "original_max_position_embeddings": 32, "rope_type": "llama3"},
                 "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
                 "vocab_size": len(sp_tok["model"]["vocab"]), **version}
    write_json(f"{d}/config.json", llama_cfg)
    write_json(f"{d}/generation_config.json", {"bos_token_id": 1, "eos_token_id": 2, "max_length": 128, **version})
    llama_w = {k: t.to(torch.bfloat16) for k, t in llama_weights(llama_cfg, qkv_bias=False).items()}
    save_weights(d, llama_w, max_shard_bytes=150_000)

    # Qwen2: byte-level BPE with Qwen2's regex (merges as "a b" strings) after NFC, ChatML; q/k/v biases, tied, f16.
    d = f"{out}/qwen2"
    os.makedirs(d, exist_ok=True)
    q_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    q_tok = byte_level_tokenizer_json(corpus, patterns["qwen2"], q_specials, vocab_size, merges_as_strings=True,
                                      nfc=True)
    write_json(f"{d}/tokenizer.json", q_tok)
    write_json(f"{d}/tokenizer_config.json", {
        "add_prefix_space": False, "added_tokens_decoder": added_tokens_decoder(q_tok), "bos_token": None,
        "chat_template": chatml, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
        "errors": "replace", "model_max_length": 128, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None})
    qwen_cfg = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 0,
                "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
                "intermediate_size": 128, "max_position_embeddings": 128, "max_window_layers": 2,
                "model_type": "qwen2", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
                "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
                "tie_word_embeddings": True, "torch_dtype": "float16", "use_cache": True,
                "use_sliding_window": False, "vocab_size": vocab_size, **version}
    write_json(f"{d}/config.json", qwen_cfg)
    write_json(f"{d}/generation_config.json", {
        "bos_token_id": 0, "do_sample": True, "eos_token_id": [2, 0], "pad_token_id": 0, "repetition_penalty": 1.05,
        "temperature": 0.7, "top_k": 20, "top_p": 0.8, **version})
    qwen_w = {k: t.to(torch.float16) for k, t in llama_weights(qwen_cfg, qkv_bias=True).items()}
    save_weights(d, qwen_w)

    # LLaMA-3's pre-tokenizer regex, a tokenizer alone (ignore_merges as LLaMA-3 sets it).
    d = f"{out}/tokenizer-llama3"
    os.makedirs(d, exist_ok=True)
    l3_specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    l3_tok = byte_level_tokenizer_json(corpus, patterns["llama3"], l3_specials, vocab_size,
                                       bos="<|begin_of_text|>", ignore_merges=True)
    write_json(f"{d}/tokenizer.json", l3_tok)
    write_json(f"{d}/tokenizer_config.json", {
        "added_tokens_decoder": added_tokens_decoder(l3_tok), "bos_token": "<|begin_of_text|>",
        "clean_up_tokenization_spaces": True, "eos_token": "<|end_of_text|>",
        "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast"})

    # The tokenizers' answers (Hugging Face's JavaScript implementation), then the models'.
    eos = {"gpt2": "<|endoftext|>", "llama": "</s>", "qwen2": "<|im_end|>", "tokenizer-llama3": "<|end_of_text|>"}
    cases = tokenizer_reference(out, list(eos), {n: test_strings + texts + [f"{e} special {e}x"] for n, e in eos.items()})
    os.makedirs(f"{out}/reference", exist_ok=True)
    write_json(f"{out}/reference/tokenizers.json", cases)
    prompt_ids = {n: [c["ids"] for c in cases[n] if c["text"] in texts] for n in ("gpt2", "llama", "qwen2")}
    for n in prompt_ids:
        assert len(prompt_ids[n]) == len(texts), f"{n}: the prompts must be among the tokenizer cases"
    references(out, "gpt2", gpt2_forward, gpt2_w, gpt2_cfg, prompt_ids["gpt2"])
    references(out, "llama", llama_forward, llama_w, llama_cfg, prompt_ids["llama"])
    references(out, "qwen2", llama_forward, qwen_w, qwen_cfg, prompt_ids["qwen2"])
    write_json(f"{out}/reference/versions.json", {"made_by": VERSION})
    total = sum(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(out) for n in ns)
    print(f"fixtures in {out}: {total / 1e6:.2f} MB")
