"""Decode anchor for bench/generate: the GPT of alk train (or GPT-2 124M shapes) decoding with a
static KV cache held in registered buffers (gpt-fast's layout), greedy, prompt P + N new tokens,
batch B. Eager on the CPU (Debian's torch 1.13 has no torch.compile); on a GPU with torch >= 2
`--compile` wraps the one-token step in torch.compile(mode="reduce-overhead") (CUDA graphs).

Run:  /usr/bin/python3 torch_decode.py [--threads 2] [--batch 1] [--prompt 32] [--new 96]
          [--vocab 1024 --ctx 128 --dim 128 --heads 4 --layers 4] [--device cuda --dtype bf16 --compile]
Prints:  torch decode B=<b> ms/token=<per step> tokens/s=<b * new / s> prefill_ms=<...>
"""
import argparse, math, time
import torch, torch.nn as nn, torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--batch", type=int, default=1)
p.add_argument("--prompt", type=int, default=32)
p.add_argument("--new", type=int, default=96)
p.add_argument("--vocab", type=int, default=1024)
p.add_argument("--ctx", type=int, default=128)
p.add_argument("--dim", type=int, default=128)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--device", default="cpu")
p.add_argument("--dtype", default="f32")
p.add_argument("--compile", action="store_true")
p.add_argument("--repeats", type=int, default=3)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
V, T, C, H, L, B = a.vocab, a.ctx, a.dim, a.heads, a.layers, a.batch
D = C // H
dev = torch.device(a.device)
dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.qkv, s.proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.ln2, s.fc, s.fc2 = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        s.register_buffer("k_cache", torch.zeros(B, H, T, D))
        s.register_buffer("v_cache", torch.zeros(B, H, T, D))

    def forward(s, x, pos, mask):
        # x [B, t, C] at positions pos [t]; mask [t, T] (True: attend)
        b, t, _ = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = [z.view(b, t, H, D).transpose(1, 2) for z in (q, k, v)]
        s.k_cache[:, :, pos] = k
        s.v_cache[:, :, pos] = v
        att = (q @ s.k_cache.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = att @ s.v_cache
        x = x + s.proj(y.transpose(1, 2).reshape(b, t, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok, s.pos = nn.Embedding(V, C), nn.Embedding(T, C)
        s.blocks = nn.ModuleList([Block() for _ in range(L)])
        s.lnf = nn.LayerNorm(C)

    def forward(s, idx, pos, mask):
        x = s.tok(idx) + s.pos(pos)
        for blk in s.blocks:
            x = blk(x, pos, mask)
        return s.lnf(x[:, -1]) @ s.tok.weight.t()  # tied head, last row only


m = GPT().to(dev).to(dt).eval()
causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=dev))


def step(tok, pos):  # one new token per sequence at position pos (a 1-element tensor)
    return m(tok, pos, causal[pos])


decode = torch.compile(step, mode="reduce-overhead") if a.compile else step


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run():
    prompt = torch.randint(0, V, (B, a.prompt), device=dev)
    t0 = time.perf_counter()
    pos = torch.arange(a.prompt, device=dev)
    logits = m(prompt, pos, causal[pos])
    tok = logits.argmax(-1, keepdim=True)
    sync()
    t1 = time.perf_counter()
    for i in range(a.new - 1):
        p = torch.tensor([a.prompt + i], device=dev)
        tok = decode(tok, p).argmax(-1, keepdim=True)
    tok.cpu()
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3 / (a.new - 1)


with torch.no_grad():
    run()  # warm-up (compiles with --compile)
    runs = sorted(run() for _ in range(a.repeats))
    prefill, per_token = runs[len(runs) // 2]
print(f"torch decode B={B} ms/token={per_token:.3f} tokens/s={B * 1e3 / per_token:.0f} prefill_ms={prefill:.2f}",
      flush=True)
