#!/usr/bin/python3
"""Generates tests/fixtures/torch_optim.json: torch.optim's trajectories (PyTorch 1.13, float64)
for every optimizer alk has, in every configuration alk supports: SGD (plain, momentum,
dampening, Nesterov, weight decay), Adam (betas, eps, L2 weight decay) and AdamW (decoupled
decay, on a matrix that decays and a vector that does not, alk's default filter).

Run with Debian's python3-torch:  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/gen_torch_optim.py
Each case: the parameters' start values, the loss 0.5 * sum(a * p^2) + sum(c * p) (its gradient
changes with p, so moments see a new gradient every step), and the parameters after each of
8 steps. tests/optim/test_torch_optim.cpp runs alk's optimizers over the same steps.
"""
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 8
A = [1.0, 2.0, 0.5, 3.0, 0.25, 1.5]
C = [0.3, -0.7, 1.1, 0.2, -0.4, 0.9]
P0 = [0.5, -1.25, 2.0, 0.75, -0.3, 1.1]

# name, torch class, lr, options (torch's names), and for AdamW whether the vector decays.
CONFIGS = [
    ("sgd", "SGD", 0.1, {}),
    ("sgd_momentum", "SGD", 0.05, {"momentum": 0.9}),
    ("sgd_dampening", "SGD", 0.05, {"momentum": 0.9, "dampening": 0.3}),
    ("sgd_nesterov", "SGD", 0.05, {"momentum": 0.8, "nesterov": True}),
    ("sgd_weight_decay", "SGD", 0.05, {"momentum": 0.5, "weight_decay": 0.2}),
    ("adam", "Adam", 0.05, {}),
    ("adam_betas_eps", "Adam", 0.02, {"betas": (0.8, 0.95), "eps": 1e-3}),
    ("adam_l2", "Adam", 0.05, {"weight_decay": 0.1}),
    ("adamw", "AdamW", 0.05, {"weight_decay": 0.1}),
    ("adamw_betas", "AdamW", 0.03, {"betas": (0.85, 0.99), "eps": 1e-6, "weight_decay": 0.3}),
]


def trajectory(cls, lr, opts, decay_vector):
    a, c = torch.tensor(A, dtype=torch.float64), torch.tensor(C, dtype=torch.float64)
    w = torch.tensor(P0, dtype=torch.float64).reshape(2, 3).requires_grad_()  # rank 2
    b = torch.tensor(P0[::-1], dtype=torch.float64).requires_grad_()  # rank 1
    if cls == "AdamW" and not decay_vector:
        groups = [{"params": [w]}, {"params": [b], "weight_decay": 0.0}]
    else:
        groups = [{"params": [w]}, {"params": [b]}]
    opt = getattr(torch.optim, cls)(groups, lr=lr, **opts)
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = (0.5 * a * w.reshape(-1) ** 2 + c * w.reshape(-1)).sum() + (0.5 * a * b ** 2 + c * b).sum()
        loss.backward()
        opt.step()
        out.append({"w": w.detach().reshape(-1).tolist(), "b": b.detach().tolist()})
    return out


def main():
    cases = []
    for name, cls, lr, opts in CONFIGS:
        o = {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()}
        cases.append({"name": name, "optimizer": cls, "lr": lr, "options": o, "steps": trajectory(cls, lr, opts, False)})
    out = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/torch_optim.json")
    with open(out, "w") as f:
        f.write('{"torch": "%s", "a": %s, "c": %s, "p0": %s, "cases": [\n' %
                (torch.__version__, json.dumps(A), json.dumps(C), json.dumps(P0)))
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print("wrote %d cases to %s" % (len(cases), out))


if __name__ == "__main__":
    main()
