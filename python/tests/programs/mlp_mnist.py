"""A plain PyTorch program: an MLP on MNIST, 20 steps of SGD with momentum.

Run as it is with PyTorch, or with alk by replacing the imports only (test_programs.py does
that). Weights start from a fixed formula and the batches are taken in order, so both runs
see the same numbers. argv[1]: the directory of the MNIST idx files."""
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load(directory, count):
    images = np.fromfile(f"{directory}/train-images-idx3-ubyte", dtype=np.uint8, offset=16)[:count * 784]
    labels = np.fromfile(f"{directory}/train-labels-idx1-ubyte", dtype=np.uint8, offset=8)[:count]
    x = torch.from_numpy(images.reshape(count, 784).astype(np.float32)) / 255.0
    y = torch.from_numpy(labels.astype(np.int64))
    return (x - 0.1307) / 0.3081, y


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def init_weights(model):
    with torch.no_grad():
        for i, (name, p) in enumerate(model.named_parameters()):
            n = p.numel()
            wave = torch.sin(torch.arange(n, dtype=torch.float32) * 0.7 + i)
            p.copy_(wave.reshape(p.shape) / math.sqrt(p.shape[-1]))


def main():
    batch, steps = 32, 20
    x, y = load(sys.argv[1], batch * steps)
    model = MLP()
    init_weights(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        xb, yb = x[step * batch:(step + 1) * batch], y[step * batch:(step + 1) * batch]
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (logits.argmax(dim=1) == yb).float().mean()
        print(f"step {step} loss {loss.item():.6f} acc {acc.item():.4f}")


if __name__ == "__main__":
    main()
