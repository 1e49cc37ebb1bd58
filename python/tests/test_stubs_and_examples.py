"""The committed type stub is what python/gen_stubs.py writes from the built module, every public
name has a docstring, and the Python example trains."""
import ast
import inspect
import os
import re
import subprocess
import sys

import alk

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def test_stub_is_current_and_parses(tmp_path):
    out = tmp_path / "_C.pyi"
    subprocess.run([sys.executable, os.path.join(ROOT, "python", "gen_stubs.py"), str(out)], check=True,
                   env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(alk.__file__))))
    text = out.read_text()
    ast.parse(text)
    assert "class Tensor:" in text and "def matmul(" in text and "def gelu(" in text
    committed = open(os.path.join(ROOT, "python", "alk", "_C.pyi")).read()
    assert committed == text, "python/alk/_C.pyi is stale: run python/gen_stubs.py python/alk/_C.pyi"


def described(obj):
    """The docstring beyond pybind11's signature lines."""
    lines = [ln for ln in (getattr(obj, "__doc__", None) or "").splitlines() if ln.strip()]
    return [ln for ln in lines if not re.match(r"^(\d+\. )?\w+\(.*\) -> ", ln) and ln != "Overloaded function."]


def test_every_public_name_has_a_docstring():
    missing = []
    for mod in (alk, alk.nn, alk.nn.functional, alk.optim):
        for name, obj in vars(mod).items():
            if name.startswith("_") or inspect.ismodule(obj) or not callable(obj):
                continue
            if not described(obj):
                missing.append(f"{mod.__name__}.{name}")
    for name, obj in vars(alk.Tensor).items():
        if not name.startswith("_") and callable(obj) and not described(obj):
            missing.append(f"Tensor.{name}")
    assert not missing, missing


def test_tiny_gpt_example_trains(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("In the beginning God created the heaven and the earth. " * 200)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(alk.__file__)))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "train_tiny_gpt.py"), str(corpus), "4"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    losses = [float(line.split()[3]) for line in r.stdout.splitlines() if line.startswith("step")]
    assert len(losses) == 2 and all(l > 0 for l in losses)
    assert r.stdout.splitlines()[-1].startswith("In the beginning")
    assert len(open(os.path.join(ROOT, "examples", "python", "train_tiny_gpt.py")).read().splitlines()) < 60
