"""A run directory with GPT-2 124M's shapes (or others) and random weights, for `alk serve` benchmarks on a
machine without the network: the layout (config.json, tokenizer/, model.safetensors) is taken
from a tiny run that `alk train` wrote (dim 16, ctx 128, vocab 280, one layer), scaled up.

    python3 bench/serve/make_run.py TINY_RUN OUT_DIR [--dim 768 --layers 12 --heads 12 --ctx 1024 --vocab 50257]

The tokenizer has GPT-2's 50257 entries: the 256 byte tokens and 50001 synthetic merges (the
benchmark sends token ids; their text does not matter). Weights ~ N(0, 0.02), f32.
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

TINY = {"dim": 16, "ctx": 128, "vocab": 280, "layers": 1}
GPT2 = {"dim": 768, "ctx": 1024, "vocab": 50257, "layers": 12, "heads": 12}


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tiny")
    ap.add_argument("out")
    for k, v in GPT2.items():
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    GPT2.update(dim=a.dim, ctx=a.ctx, vocab=a.vocab, layers=a.layers, heads=a.heads)
    tiny, out = a.tiny, a.out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "tokenizer"))
    config = json.load(open(os.path.join(tiny, "config.json")))
    assert (config["dim"], config["ctx"], config["layers"]) == (TINY["dim"], TINY["ctx"], TINY["layers"]), config
    config.update(dim=GPT2["dim"], ctx=GPT2["ctx"], layers=GPT2["layers"], heads=GPT2["heads"], vocab_size=GPT2["vocab"])
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)

    # Tokenizer: the tiny run's 256 byte keys, then merges of existing tokens into new keys.
    vocab = json.load(open(os.path.join(tiny, "tokenizer", "vocab.json")))
    keys = [k for k, _ in sorted(vocab.items(), key=lambda kv: kv[1])][:256]
    seen = set(keys)
    merges = []
    i = 0
    while len(keys) < GPT2["vocab"]:
        a, b = keys[(i * 7) % len(keys)], keys[(i * 13 + 1) % min(len(keys), 256)]
        i += 1
        if a + b in seen or len(a + b) > 12:
            continue
        seen.add(a + b)
        keys.append(a + b)
        merges.append(a + " " + b)
    json.dump({k: n for n, k in enumerate(keys)}, open(os.path.join(out, "tokenizer", "vocab.json"), "w"), ensure_ascii=False)
    with open(os.path.join(out, "tokenizer", "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")

    # Weights: every tensor of the tiny model, its dimensions scaled, block 0 repeated per layer.
    with open(os.path.join(tiny, "checkpoint.json")) as f:
        sub = json.load(f)["dir"]
    header = read_header(os.path.join(tiny, sub, "model.safetensors"))
    scale = {TINY["dim"]: GPT2["dim"], 3 * TINY["dim"]: 3 * GPT2["dim"], 4 * TINY["dim"]: 4 * GPT2["dim"],
             TINY["ctx"]: GPT2["ctx"], TINY["vocab"]: GPT2["vocab"]}
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info)
        shape = [scale[d] for d in info["shape"]]
        names = [name.replace("blocks.0.", "blocks.%d." % l) for l in range(GPT2["layers"])] if name.startswith("blocks.0.") else [name]
        for n in names:
            tensors.append((n, shape))
    rng = np.random.default_rng(0)
    entries, offset = {}, 0
    for n, shape in tensors:
        size = int(np.prod(shape)) * 4
        entries[n] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(entries, separators=(",", ":")).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for n, shape in tensors:
            if n.endswith(".weight") and len(shape) == 1:
                a = np.ones(shape, np.float32)  # norm scales
            elif len(shape) == 1:
                a = np.zeros(shape, np.float32)
            else:
                a = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
            f.write(a.tobytes())
    print("wrote", out, "(%d tensors, %.0f MB)" % (len(tensors), offset / 1e6))


if __name__ == "__main__":
    main()
