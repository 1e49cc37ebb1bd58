"""The anchor of bench_llama_ops.cpp: transformers' LLaMA RMSNorm and rotary embedding in PyTorch
(Debian's 1.13, CPU), the same shapes. Prints one line per case, "name ms" (median of --reps):
  rms_norm_fwd, rms_norm_fwd_bwd, rotary_fwd, rotary_fwd_bwd
The formulas are LlamaRMSNorm.forward and apply_rotary_pos_emb with LlamaRotaryEmbedding's cos/sin
(computed from the positions every call, as the model does)."""
import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--reps", type=int, default=7)
p.add_argument("--rows", type=int, default=2048)
p.add_argument("--dim", type=int, default=1024)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--heads", type=int, default=16)
p.add_argument("--head-dim", type=int, default=64)
p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
a = p.parse_args()
if a.threads > 0:
    torch.set_num_threads(a.threads)
torch.manual_seed(0)


def rms_norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary(x, positions, inv_freq):
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]  # [T, 1, D] over x [B, T, H, D]
    return x * cos + rotate_half(x) * sin


def median_ms(fn):
    fn()
    t = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


x = torch.randn(a.rows, a.dim, requires_grad=True)
w = torch.randn(a.dim, requires_grad=True)
g = torch.randn(a.rows, a.dim)
q = torch.randn(a.batch, a.seq, a.heads, a.head_dim, requires_grad=True)
gq = torch.randn(a.batch, a.seq, a.heads, a.head_dim)
positions = torch.arange(a.seq)
inv_freq = 1.0 / (10000 ** (torch.arange(0, a.head_dim, 2).float() / a.head_dim))


def rms_fwd():
    with torch.no_grad():
        rms_norm(x, w)


def rms_fwd_bwd():
    rms_norm(x, w).backward(g)


def rot_fwd():
    with torch.no_grad():
        rotary(q, positions, inv_freq)


def rot_fwd_bwd():
    rotary(q, positions, inv_freq).backward(gq)


for name, fn in [("rms_norm_fwd", rms_fwd), ("rms_norm_fwd_bwd", rms_fwd_bwd), ("rotary_fwd", rot_fwd),
                 ("rotary_fwd_bwd", rot_fwd_bwd)]:
    print(name, f"{median_ms(fn):.3f}")
