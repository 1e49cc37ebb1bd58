"""alk.Tensor: creation, dtypes, numpy in and out, indexing, operators, repr."""
import gc

import numpy as np
import pytest

import alk


def test_import_and_print():
    alk.manual_seed(0)
    s = repr(alk.randn(2, 3))
    assert s.startswith("tensor([[") and s.count("\n") == 1


@pytest.mark.parametrize("dt,npdt", [(alk.float32, np.float32), (alk.float64, np.float64), (alk.int64, np.int64),
                                     (alk.int32, np.int32), (alk.uint8, np.uint8), (alk.bool, np.bool_),
                                     (alk.float16, np.float16)])
def test_numpy_round_trip_every_dtype(dt, npdt, rng):
    a = (rng.standard_normal((3, 4)) * 10).astype(npdt)
    t = alk.from_numpy(a)
    assert t.dtype == dt and t.shape == (3, 4)
    b = t.numpy()
    assert b.dtype == npdt
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert t.tolist() == a.tolist()


def test_bfloat16_widens_to_float32():
    t = alk.tensor([1.5, -2.25]).to(alk.bfloat16)
    assert t.dtype == alk.bfloat16
    a = t.numpy()
    assert a.dtype == np.float32 and a.tolist() == [1.5, -2.25]


def test_tensor_from_python_data_follows_torch_defaults():
    assert alk.tensor([1.0, 2.0]).dtype == alk.float32
    assert alk.tensor([1, 2]).dtype == alk.int64
    assert alk.tensor([True, False]).dtype == alk.bool
    assert alk.tensor(np.array([1.0])).dtype == alk.float64
    assert alk.tensor([[1, 2]], dtype=alk.float64).dtype == alk.float64
    assert alk.tensor(3.5).shape == () and alk.tensor(3.5).item() == 3.5


def test_numpy_out_is_zero_copy_and_keeps_the_buffer_alive():
    t = alk.arange(12).reshape(3, 4).realize()
    a = t.numpy()
    b = t.numpy()
    assert np.shares_memory(a, b)  # both view the tensor's own buffer
    view = t[:, 1:3].numpy()  # a strided view, still no copy
    assert np.shares_memory(view, a) and view.tolist() == [[1, 2], [5, 6], [9, 10]]
    del t
    gc.collect()
    assert a.sum() == 66  # the array holds the buffer after the tensor is gone


def test_numpy_writes_are_seen_by_alk_like_torch():
    t = (alk.arange(3) * 0).realize()
    t.numpy()[1] = 5
    assert t.tolist() == [0, 5, 0]
    # a broadcast (zeros is one value viewed with stride 0) comes out read-only
    z = alk.zeros(3).numpy()
    assert not z.flags.writeable and z.tolist() == [0, 0, 0]


def test_lazy_tensor_numpy_realizes():
    x = alk.tensor([1.0, 2.0, 3.0])
    y = x * 2 + 1
    assert not y.is_realized
    np.testing.assert_array_equal(y.numpy(), [3, 5, 7])


def test_properties():
    x = alk.arange(6, dtype=alk.float64).reshape(2, 3)
    assert x.shape == (2, 3) and x.ndim == 2 and x.dim() == 2 and x.numel() == 6 and len(x) == 2
    assert x.size() == (2, 3) and x.size(1) == 3 and x.size(-1) == 3
    assert x.device == "cpu" and x.dtype == alk.float64 and repr(x.dtype) == "alk.float64"
    assert x.stride() == (3, 1) and x.is_contiguous() and not x.t().is_contiguous()
    assert alk.zeros((4, 5)).shape == (4, 5) and alk.ones([2]).shape == (2,)


KEYS = [
    0, -1, 2, slice(None), slice(1, None), slice(None, None, 2), slice(-3, -1), slice(5, 1), slice(-100, 100),
    (1, 2), (0, slice(1, 3)), (slice(None), -1), (Ellipsis, 1), (1, Ellipsis), (None, 1), (slice(None), None, 2),
    (Ellipsis, None), (None, Ellipsis, None), (-2, slice(None, None, 3), 0), (slice(None), slice(None), 3),
    (1, 2, 3), (Ellipsis,), (),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem_matches_numpy(key, rng):
    a = rng.standard_normal((4, 5, 6))
    t = alk.from_numpy(a)
    np.testing.assert_array_equal(t[key].numpy(), a[key])


def test_tensor_and_list_and_mask_indices(rng):
    a = rng.standard_normal((5, 4))
    t = alk.from_numpy(a)
    idx = np.array([[0, -1], [2, 2]])
    np.testing.assert_array_equal(t[alk.from_numpy(idx)].numpy(), a[idx])
    np.testing.assert_array_equal(t[:, [3, 0, -2]].numpy(), a[:, [3, 0, -2]])
    mask = a > 0
    np.testing.assert_array_equal(t[alk.from_numpy(mask)].numpy(), a[mask])
    np.testing.assert_array_equal(t[alk.from_numpy(a[:, 0] > 0)].numpy(), a[a[:, 0] > 0])


def test_getitem_is_a_differentiable_view():
    x = alk.arange(6, dtype=alk.float64).reshape(2, 3).requires_grad_()
    (x[1, 1:] * 2).sum().backward()
    assert x.grad.tolist() == [[0, 0, 0], [0, 2, 2]]


@pytest.mark.parametrize("key", [1, (slice(None), 2), (Ellipsis, slice(0, 2)), [0, 2], (1, -1)])
def test_setitem_matches_numpy(key, rng):
    a = rng.standard_normal((3, 4))
    t = alk.from_numpy(a.copy())
    a[key] = 7.5
    t[key] = 7.5
    np.testing.assert_array_equal(t.numpy(), a)
    v = rng.standard_normal(a[key].shape)
    a[key] = v
    t[key] = alk.from_numpy(v)
    np.testing.assert_array_equal(t.numpy(), a)


def test_setitem_gradient_flows_to_both_sides():
    x = alk.ones(4, dtype=alk.float64).requires_grad_()
    v = alk.tensor([5.0, 6.0], dtype=alk.float64).requires_grad_()
    y = x * 3
    y[1:3] = v * 2
    y.sum().backward()
    assert x.grad.tolist() == [3, 0, 0, 3] and v.grad.tolist() == [2, 2]


def test_iteration_uses_the_first_dim():
    rows = [r.tolist() for r in alk.arange(6).reshape(3, 2)]
    assert rows == [[0, 1], [2, 3], [4, 5]]


BINOPS = ["__add__", "__sub__", "__mul__", "__truediv__", "__pow__", "__floordiv__", "__mod__", "__lt__", "__le__",
          "__gt__", "__ge__", "__eq__", "__ne__"]


@pytest.mark.parametrize("op", BINOPS)
def test_operators_and_reflected_against_numpy(op, rng):
    a = rng.uniform(0.5, 2.0, (3, 4))
    b = rng.uniform(0.5, 2.0, (4,))
    ta, tb = alk.from_numpy(a), alk.from_numpy(b)
    np.testing.assert_allclose(getattr(ta, op)(tb).numpy(), getattr(a, op)(b), rtol=1e-12)
    np.testing.assert_allclose(getattr(ta, op)(1.5).numpy(), getattr(a, op)(1.5), rtol=1e-12)
    rop = "__r" + op[2:]
    if hasattr(a, rop) and op not in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
        np.testing.assert_allclose(getattr(ta, rop)(1.5).numpy(), getattr(a, rop)(1.5), rtol=1e-12)


def test_reflected_with_python_and_numpy_scalars():
    t = alk.tensor([1.0, 2.0, 4.0])
    assert (2 - t).tolist() == [1, 0, -2]
    assert (2 / t).tolist() == [2, 1, 0.5]
    assert (2 ** t).tolist() == [2, 4, 16]
    r = np.float32(3) * t
    assert isinstance(r, alk.Tensor) and r.tolist() == [3, 6, 12]
    assert (t @ alk.tensor([1.0, 1.0, 1.0])).item() == 7
    assert ((t > 1) & (t < 4)).tolist() == [False, True, False]
    assert (~(t > 1)).tolist() == [True, False, False]
    assert (-t).tolist() == [-1, -2, -4] and abs(-t).tolist() == [1, 2, 4]


def test_weak_scalars_keep_the_tensor_dtype():
    assert (alk.ones(2, dtype=alk.float16) * 2.5).dtype == alk.float16
    assert (alk.ones(2, dtype=alk.int32) + 1).dtype == alk.int32
    assert (alk.ones(2, dtype=alk.int32) * 1.5).dtype == alk.float32
    assert (alk.ones(2, dtype=alk.int32) / 2).dtype == alk.float32


def test_in_place_operators_and_methods():
    x = alk.tensor([1.0, 2.0])
    same = x
    x += 1
    x *= alk.tensor([2.0, 3.0])
    x -= 0.5
    x /= 2
    assert same is x and x.tolist() == [1.75, 4.25]
    x.relu_().neg_()
    assert x.tolist() == [-1.75, -4.25]
    x.zero_()
    assert x.tolist() == [0, 0]
    x.fill_(3).copy_(alk.tensor([1.0, 9.0]))
    assert x.tolist() == [1, 9]
    i = alk.tensor([1, 2])
    with pytest.raises(RuntimeError, match="can't be cast"):
        i += 0.5


def test_views_and_conversions():
    x = alk.arange(24).reshape(2, 3, 4)
    assert x.permute(2, 0, 1).shape == (4, 2, 3) and x.transpose(0, 2).shape == (4, 3, 2)
    assert x.view(6, 4).shape == (6, 4) and x.reshape(-1).shape == (24,) and x.flatten(1).shape == (2, 12)
    assert x.unsqueeze(0).shape == (1, 2, 3, 4) and x[:, :1].squeeze(1).shape == (2, 4)
    assert x.T.shape == (4, 3, 2) and x.mT.shape == (2, 4, 3)
    assert x[:1].expand(5, 3, 4).shape == (5, 3, 4) and x.narrow(2, 1, 2).shape == (2, 3, 2)
    assert x.float().dtype == alk.float32 and x.double().dtype == alk.float64 and x.half().dtype == alk.float16
    assert x.to(alk.bfloat16).dtype == alk.bfloat16 and x.bool().dtype == alk.bool and x.int().dtype == alk.int32
    assert x.to("cpu") is x and x.cpu() is x
    np.testing.assert_array_equal(x.permute(1, 2, 0).contiguous().numpy(), np.arange(24).reshape(2, 3, 4).transpose(1, 2, 0))


def test_item_and_python_conversions():
    assert alk.tensor(2.5).item() == 2.5 and isinstance(alk.tensor(3).item(), int)
    assert alk.tensor(True).item() is True
    assert float(alk.tensor([1.5])) == 1.5 and int(alk.tensor(7)) == 7 and bool(alk.tensor(1.0))
    assert [10, 20, 30][alk.tensor(1)] == 20


def test_repr_is_jupyter_friendly():
    x = alk.arange(3, dtype=alk.float32).requires_grad_()
    assert repr(x) == "tensor([0., 1., 2.], requires_grad=True)"
    html = x._repr_html_()
    assert "alk.Tensor [3] f32 cpu requires_grad" in html and "<pre>" in html
    big = repr(alk.zeros(100, 100))
    assert "..." in big and len(big) < 1000  # summarized like PyTorch
    assert repr(alk.float32) == "alk.float32"


def test_tensors_hash_by_identity():
    a, b = alk.zeros(2), alk.zeros(2)
    assert len({a, b, a}) == 2


def test_devices():
    assert "cpu" in alk.devices() and alk.default_device() == "cpu"
    assert alk.device_info("cpu")["kind"] == "cpu"
    x = alk.ones(2)
    assert x.to("cpu").device == "cpu" and x.to("auto").device in alk.devices()
    assert alk.zeros(2, device="cpu").device == "cpu"
    with alk.device("cpu") as name:
        assert name == "cpu" and alk.randn(3).device == "cpu"


@pytest.mark.parametrize("dev", [d for d in alk.devices() if d != "cpu"])
def test_every_other_device_round_trips_and_computes_like_the_cpu(dev, rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    t = alk.from_numpy(a).to(dev)
    assert t.device == dev
    np.testing.assert_array_equal(t.numpy(), a)
    assert repr(t).endswith(f", device='{dev}')")
    y = (alk.gelu(t) * 2).sum(1)
    np.testing.assert_allclose(y.cpu().numpy(), (alk.gelu(alk.from_numpy(a)) * 2).sum(1).numpy(), rtol=1e-5)
