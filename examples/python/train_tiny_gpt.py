"""A tiny byte-level GPT trained in Python with alk: python3 train_tiny_gpt.py [corpus.txt] [steps]
(default corpus: the King James Bible from Debian's bible-kjv). The step is traced once, then replayed."""
import subprocess, sys, time  # noqa: E401
import numpy as np
import alk
import alk.nn as nn
import alk.nn.functional as F

V, T, C, H, L, B = 256, 128, 128, 4, 4, 8  # byte vocabulary, context, width, heads, layers, batch


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList([nn.TransformerBlock(C, H) for _ in range(L)])
        self.ln, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(alk.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


bible = ["bible", "-l", "100000", "Gen1:1-Rev22:21"]
corpus, steps = (sys.argv[1:] + ["", "300"])[:2]  # corpus "" = the Bible
text = open(corpus, "rb").read() if corpus else subprocess.run(bible, capture_output=True).stdout
data = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
alk.manual_seed(0)
rng = np.random.default_rng(0)
model = TinyGPT()
opt = alk.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)


@alk.compile
def step(x, y):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())  # class dim 1, as PyTorch
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


t0 = time.time()
for i in range(int(steps)):
    at = rng.integers(0, len(data) - T - 1, B)
    batch = np.stack([data[a:a + T + 1] for a in at])
    loss = step(alk.from_numpy(batch[:, :-1]), alk.from_numpy(batch[:, 1:]))
    if i % 50 == 0 or i == int(steps) - 1:
        print(f"step {i:4d}  loss {loss.item():.3f}  {(time.time() - t0) / (i + 1) * 1e3:.0f} ms/step")

model.eval()
ids = list(b"In the beginning")
with alk.no_grad():
    for _ in range(120):  # greedy sampling, one byte at a time
        logits = model(alk.tensor([ids[-T:]]))
        ids.append(logits[0, -1].argmax().item())
print(bytes(ids).decode("utf-8", "replace"))
