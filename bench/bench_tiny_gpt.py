"""The tiny-GPT training step from Python, side by side with the C++ bench (bench_tiny_gpt) and
PyTorch 1.13 (../shared/anchors/torch_tiny_gpt_cpu.py), all in one command (make bench-python).

Same workload as bench_tiny_gpt.cpp: V256 T128 d128 H4 L4 B8, untied head, AdamW(lr 3e-4, wd 0.1),
median ms/step over --steps after 3 warm-up steps, the loss read back every step. The model is a
Python alk.nn.Module (the same ops as the C++ GPT). Python and C++ alternate over --rounds rounds
(a shared machine's load changes by the second; each side's median over all rounds is compared).
Prints:
  RATIO python_tiny_gpt_step_vs_cpp  py=<ms> cpp=<ms> ratio=<py/cpp>          (alk.compile both)
  RATIO python_tiny_gpt_step_vs_torch py=<ms> anchor=<ms> ratio=<py/torch>
  RATIO python_tiny_gpt_eager_vs_cpp py=<ms> cpp=<ms> ratio=<py/cpp>          (no compile: per-op cost)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time


import alk
import alk.nn as nn
import alk.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--cpp", default="build/bench_tiny_gpt", help="the C++ bench binary")
p.add_argument("--anchor", default="../shared/anchors/torch_tiny_gpt_cpu.py")
a = p.parse_args()
V, T, C, H, L, B = 256, 128, 128, 4, 4, 8


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList([nn.TransformerBlock(C, H) for _ in range(L)])
        self.ln_f, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(alk.arange(ids.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def make_step(compiled):
    alk.manual_seed(0)
    model = GPT()
    # Weight decay on the matrices only, as the C++ bench (alk's AdamW, as PyTorch's, decays all).
    opt = alk.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, decay=lambda name, t: t.dim() >= 2)

    def step(x, y):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())  # class dim 1, as PyTorch
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    f = alk.compile(step) if compiled else step
    x, y = alk.randint(0, V, (B, T)).realize(), alk.randint(0, V, (B, T)).realize()
    for _ in range(3):
        f(x, y).item()
    alk._C._wait_for_compiled_kernels()
    return lambda: f(x, y).item()


def measure(step, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    return [t * 1e3 for t in ts]


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env).stdout
    sys.stdout.write(out)
    m = re.search(r"ms/step=([0-9.]+)", out)
    return float(m.group(1)) if m else 0.0


compiled, eager = make_step(True), make_step(False)
py, py_eager, cpp, cpp_eager = [], [], [], []
for _ in range(a.rounds):
    py += measure(compiled, a.steps)
    py_eager += measure(eager, a.steps)
    if os.path.exists(a.cpp):
        cpp.append(run([a.cpp, "--steps", str(a.steps)]))
        cpp_eager.append(run([a.cpp, "--steps", str(a.steps), "--eager"]))
med = (lambda v: statistics.median(v) if v else 0.0)
py, py_eager, cpp, cpp_eager = med(py), med(py_eager), med(cpp), med(cpp_eager)
print(f"alk-python tiny-gpt ms/step={py:.2f} eager={py_eager:.2f} threads={alk.num_threads()} rounds={a.rounds}")
env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
env.pop("OPENBLAS_CORETYPE", None)
env.pop("OPENBLAS_L2_SIZE", None)
torch_ms = run(["/usr/bin/python3", a.anchor, "--threads", str(alk.num_threads()), "--steps", str(a.steps)], env) \
    if os.path.exists(a.anchor) else 0.0
r = (lambda x, y: f"{x / y:.3f}" if y else "unavailable")
print(f"RATIO python_tiny_gpt_step_vs_cpp py={py:.2f}ms cpp={cpp:.2f}ms ratio={r(py, cpp)}")
print(f"RATIO python_tiny_gpt_step_vs_torch py={py:.2f}ms anchor={torch_ms:.2f}ms ratio={r(py, torch_ms)}")
print(f"RATIO python_tiny_gpt_eager_vs_cpp py={py_eager:.2f}ms cpp={cpp_eager:.2f}ms ratio={r(py_eager, cpp_eager)}")
