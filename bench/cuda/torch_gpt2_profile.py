"""Where torch.compile's GPT-2 124M step (the anchor, ../shared/anchors/torch_gpt2_cuda.py) spends
its GPU time, kernel by kernel, to set beside alk's `ALK_DEBUG=timing bench_cuda_gpt2 --eager`:
  python3 bench/cuda/torch_gpt2_profile.py [path/to/torch_gpt2_cuda.py] [steps]
Prints the step's median time, then each kernel name's GPU time per step (ms), its launches per
step and its share, largest first (names cut to 110 characters)."""
import importlib.util
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

path = sys.argv[1] if len(sys.argv) > 1 else '.devcarry/torch_gpt2_cuda.py'
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
spec = importlib.util.spec_from_file_location('anchor', path)
anchor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(anchor)

torch.backends.cuda.matmul.allow_tf32 = True
torch.manual_seed(0)
B, T = 16, 1024
m = anchor.GPT(T=T).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
fwd = torch.compile(m)
idx = torch.randint(0, 50257, (B, T), device='cuda')
tgt = torch.randint(0, 50257, (B, T), device='cuda')


def step():
    with torch.autocast('cuda', dtype=torch.bfloat16):
        loss = fwd(idx, tgt)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for _ in range(5):
    step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
total = defaultdict(float)
count = defaultdict(int)
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        total[e.name] += e.device_time_total / 1000.0  # us -> ms
        count[e.name] += 1
all_ms = sum(total.values()) / steps
print(f'torch.compile GPT-2 step: {all_ms:.2f} ms of GPU kernel time per step ({steps} steps profiled)')
for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:45]:
    print(f'{ms / steps:8.3f} ms {count[name] / steps:6.1f}x {100 * ms / steps / all_ms:5.1f}%  {name[:110]}')
