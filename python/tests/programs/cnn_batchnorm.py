"""A plain PyTorch program: a small CNN with BatchNorm on MNIST, 20 steps of Adam, then an
evaluation in eval mode (the running statistics). The layers before a BatchNorm have no bias
(it would only learn rounding noise: BatchNorm removes it, and Adam scales its ~0 gradient up).

Run as it is with PyTorch, or with alk by replacing the imports only (test_programs.py does
that). argv[1]: the directory of the MNIST idx files."""
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load(directory, count):
    images = np.fromfile(f"{directory}/train-images-idx3-ubyte", dtype=np.uint8, offset=16)[:count * 784]
    labels = np.fromfile(f"{directory}/train-labels-idx1-ubyte", dtype=np.uint8, offset=8)[:count]
    x = torch.from_numpy(images.reshape(count, 1, 28, 28).astype(np.float32)) / 255.0
    return x, torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=(3, 3), padding=(1, 1), bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 7 * 7, 32, bias=False), nn.BatchNorm1d(32),
                                        nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def init_weights(model):
    with torch.no_grad():
        for i, (name, p) in enumerate(model.named_parameters()):
            if name.endswith("bias"):
                p.zero_()
            elif p.dim() > 1:
                fan_in = p[0].numel()
                wave = torch.cos(torch.arange(p.numel(), dtype=torch.float32) * 1.3 + i)
                p.copy_(wave.reshape(p.shape) / math.sqrt(fan_in))


def main():
    batch, steps = 16, 20
    x, y = load(sys.argv[1], batch * (steps + 1))
    model = Net()
    init_weights(model)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(steps):
        xb, yb = x[step * batch:(step + 1) * batch], y[step * batch:(step + 1) * batch]
        loss = loss_fn(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}")
    model.eval()
    with torch.no_grad():
        xb, yb = x[steps * batch:], y[steps * batch:]
        print(f"eval loss {F.cross_entropy(model(xb), yb).item():.6f}")
    bn = model.features[1]
    print(f"running_mean {bn.running_mean.sum().item():.6f} running_var {bn.running_var.sum().item():.6f}")


if __name__ == "__main__":
    main()
