"""Bad input raises the exception PyTorch would, naming the caller's file and line."""
import re

import numpy as np
import pytest

import alk
from conftest import this_line


def raises_here(exc, fn, line):
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    assert f"(at {line})" in msg, msg
    return msg


def test_shape_mismatch_is_runtime_error_at_the_callers_line():
    a, b = alk.ones(2, 3), alk.ones(4, 5)
    with pytest.raises(RuntimeError) as info:
        a @ b  # noqa: B018
    line = this_line(-1)
    assert f"(at {line})" in str(info.value) and "matmul" in str(info.value)
    with pytest.raises(RuntimeError) as info:
        alk.add(alk.ones(2), alk.ones(3))
    assert f"(at {this_line(-1)})" in str(info.value)


def test_index_errors():
    x = alk.ones(2, 3)
    with pytest.raises(IndexError) as info:
        x[5]  # noqa: B018
    assert "index 5 is out of bounds for dimension 0 with size 2" in str(info.value)
    assert f"(at {this_line(-2)})" in str(info.value)
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]  # noqa: B018
    with pytest.raises(IndexError, match="out of range"):
        x.sum(dim=4)
    with pytest.raises(IndexError):
        x.transpose(0, 7)


def test_type_errors():
    x = alk.ones(2)
    with pytest.raises(TypeError):
        x + "a"  # noqa: B018
    with pytest.raises(TypeError, match="expected an int, slice"):
        x["a"]  # noqa: B018
    with pytest.raises(TypeError, match="has no alk dtype"):
        alk.from_numpy(np.array(["a", "b"]))
    with pytest.raises(TypeError):
        alk.zeros(2, dtype="f32")
    with pytest.raises(TypeError, match="only integer tensors"):
        [1, 2][alk.tensor(0.5)]  # noqa: B018


def test_value_errors():
    with pytest.raises(ValueError, match="Invalid learning rate") as info:
        alk.optim.SGD([alk.ones(1)], lr=-1)
    assert f"(at {this_line(-1)})" in str(info.value)
    with pytest.raises(ValueError, match="no device 'vulkan:7'"):
        alk.ones(2).to("vulkan:7")
    with pytest.raises(ValueError, match="step must be positive"):
        alk.ones(4)[::-1]  # noqa: B018
    with pytest.raises(ValueError, match="Invalid beta"):
        alk.optim.Adam([alk.ones(1)], betas=(1.5, 0.9))


def test_runtime_errors():
    w = alk.ones(2).requires_grad_()
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w += 1
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(alk.ones(3))
    with pytest.raises(RuntimeError, match="cannot view|view"):
        alk.arange(6).reshape(2, 3).t().view(6)
    with pytest.raises(RuntimeError, match="more than|elements cannot"):
        alk.ones(3).item()


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        alk.load_safetensors(tmp_path / "missing.safetensors")
    assert re.search(r"missing\.safetensors", str(info.value))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    with pytest.raises(RuntimeError, match="safetensors"):
        alk.load_safetensors(bad)


def test_errors_inside_a_compiled_step_propagate():
    def step(x):
        return x @ alk.ones(5, 5)

    f = alk.compile(step)
    with pytest.raises(RuntimeError, match="matmul"):
        f(alk.ones(2, 3))


def test_exception_in_python_step_propagates():
    def step(x):
        raise KeyError("mine")

    f = alk.compile(step)
    with pytest.raises(KeyError, match="mine"):
        f(alk.ones(1))
