"""alk.kernel: a kernel from source text, from Python. Known answers of a C++ body, the SHA-256
twin (examples/python/sha256.py) against hashlib on FIPS 180-4's vectors and random messages,
on the CPU and on Vulkan where there is one; errors name the kernel."""
import hashlib
import importlib.util
import os
import random

import numpy as np
import pytest

import alk

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def sha256_example():
    spec = importlib.util.spec_from_file_location("sha256_example", os.path.join(ROOT, "examples", "python", "sha256.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def devices():
    return ["cpu"] + [d for d in alk.devices() if d.startswith("vulkan")]


def test_cpp_body_known_answer():
    axpy = alk.kernel("axpy", inputs=[("x", alk.float32), ("y", alk.float32)], output=("res", alk.float32),
                      attrs=[("a", alk.float32)], cpp="res[i] = a * x[i] + y[i];")
    x = np.arange(10, dtype=np.float32)
    y = np.full(10, 0.5, dtype=np.float32)
    out = axpy(alk.tensor(x), alk.tensor(y), a=3.0)
    np.testing.assert_array_equal(out.numpy(), 3 * x + y)
    np.testing.assert_array_equal(axpy(alk.tensor(x), alk.tensor(y), 2.0).numpy(), 2 * x + y)


def test_shape_and_count_rules_are_python_callables():
    row_sums = alk.kernel("row_sums", inputs=[("x", alk.int64, 2)], output=("res", alk.int64, 1),
                          output_shape=lambda shapes, attrs: [shapes[0][0]],
                          cpp="int64_t s = 0; for (int64_t c = 0; c < x_size1; ++c) s += x[i * x_size1 + c]; res[i] = s;")
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(row_sums(alk.tensor(x)).numpy(), x.sum(axis=1))


def test_errors_name_the_kernel():
    with pytest.raises(Exception, match="needs a C\\+\\+ body"):
        alk.kernel("nobody", inputs=[("x", alk.float32)], output=("res", alk.float32), cpp="")
    k = alk.kernel("typed", inputs=[("x", alk.float32)], output=("res", alk.float32), cpp="res[i] = x[i];")
    with pytest.raises(Exception, match="input x must be f32, got i64"):
        k(alk.tensor([1, 2, 3]))
    broken = alk.kernel("broken", inputs=[("x", alk.float32)], output=("res", alk.float32),
                        cpp="res[i] = x[i];\nres[i] += undeclared_name;")
    with pytest.raises(Exception, match="body line 2"):
        broken(alk.tensor(np.ones(3, dtype=np.float32))).numpy()


@pytest.mark.parametrize("device", devices())
def test_sha256_twin_matches_hashlib(device):
    sha = sha256_example()
    rnd = random.Random(5)
    messages = [b"abc", b"", b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"]
    messages += [bytes(rnd.randrange(256) for _ in range(rnd.randrange(200))) for _ in range(300)]
    assert sha.hex_digests(messages, device) == [hashlib.sha256(m).hexdigest() for m in messages]
    assert sha.hex_digests([b"abc"], device)[0] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_bitwise_operators_match_numpy():
    """& | ^ ~ << >> on integer tensors (numpy's answers in each dtype's width), logical on bools,
    a TypeError-like error on floats."""
    rng = np.random.default_rng(1)
    for dt, npdt in ((alk.int64, np.int64), (alk.int32, np.int32), (alk.uint8, np.uint8)):
        a = rng.integers(np.iinfo(npdt).min, np.iinfo(npdt).max, 50, dtype=npdt)
        b = rng.integers(np.iinfo(npdt).min, np.iinfo(npdt).max, 50, dtype=npdt)
        s = rng.integers(0, 8 * np.dtype(npdt).itemsize, 50).astype(npdt)
        ta, tb, ts = alk.tensor(a, dtype=dt), alk.tensor(b, dtype=dt), alk.tensor(s, dtype=dt)
        np.testing.assert_array_equal((ta & tb).numpy(), a & b)
        np.testing.assert_array_equal((ta | tb).numpy(), a | b)
        np.testing.assert_array_equal((ta ^ tb).numpy(), a ^ b)
        np.testing.assert_array_equal((~ta).numpy(), ~a)
        np.testing.assert_array_equal((ta << ts).numpy(), a << s)
        np.testing.assert_array_equal((ta >> ts).numpy(), a >> s)
        np.testing.assert_array_equal((ta & 7).numpy(), a & npdt(7))
    p, q = alk.tensor([True, True, False, False]), alk.tensor([True, False, True, False])
    assert (p & q).tolist() == [True, False, False, False]
    assert (p ^ q).tolist() == [False, True, True, False]
    assert (~p).tolist() == [False, False, True, True]
    with pytest.raises(Exception, match="integer or bool"):
        alk.tensor([1.0, 2.0]) & alk.tensor([1.0, 2.0])
