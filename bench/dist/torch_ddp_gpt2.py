"""PyTorch DDP anchor for bench/dist: GPT-2 124M (vocab 50304, ctx 1024, 12 layers, d 768,
12 heads, tied embeddings), AdamW, bf16 autocast, B sequences per GPU, one process per GPU.
Run with torchrun (NCCL_NVLS_ENABLE=0):
  python3 -m torch.distributed.run --standalone --nproc_per_node N bench/dist/torch_ddp_gpt2.py [B] [steps]
Rank 0 prints: torch-ddp gpt2 bf16 world=N ... ms/step=X tok/s=Y"""
import os, sys
import torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V=50304, T=1024, L=12, d=768, h=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(L))
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, V, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))


def main():
    B = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    T = 1024
    dist.init_process_group("nccl")
    rank, world, local = dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    model = DDP(GPT(T=T).cuda(), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    torch.manual_seed(1 + rank)
    idx = torch.randint(0, 50257, (B, T), device="cuda")
    tgt = torch.randint(0, 50257, (B, T), device="cuda")
    times = []
    for i in range(steps + 3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        e1.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(e0.elapsed_time(e1))
    times.sort()
    ms = torch.tensor([times[len(times) // 2]], device="cuda")
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    if rank == 0:
        ms = ms.item()
        print(f"torch-ddp gpt2 bf16 world={world} B={B}/rank T={T} ms/step={ms:.1f} tok/s={world * B * T / (ms / 1e3):.0f}"
              f" last_loss={loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
