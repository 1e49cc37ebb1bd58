"""The same idiom on alk and on PyTorch (Debian's torch 1.13): values, dtypes, shapes, and the
exception type on misuse (issue 42). Each test writes the idiom once, as a function of the
module (alk or torch), and runs it on both."""
import copy
import math
import os
import pickle

import numpy as np
import pytest

import alk
from conftest import this_line

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")

DTYPES = {alk.float32: torch.float32, alk.float64: torch.float64, alk.int64: torch.int64,
          alk.int32: torch.int32, alk.bool: torch.bool, alk.uint8: torch.uint8}


def to_np(x):
    if isinstance(x, alk.Tensor):
        return np.asarray(x.detach().numpy())
    return x.detach().numpy()


def same(a, t, tol=1e-5):
    """alk result a matches torch result t: type structure, dtype, shape and values."""
    if isinstance(t, (tuple, list)):
        assert isinstance(a, (tuple, list)) and len(a) == len(t), (a, t)
        for x, y in zip(a, t):
            same(x, y, tol)
        return
    if isinstance(t, torch.Tensor):
        assert isinstance(a, alk.Tensor), f"expected a tensor, got {type(a).__name__}"
        assert DTYPES[a.dtype] == t.dtype, (a.dtype, t.dtype)
        assert tuple(a.shape) == tuple(t.shape), (a.shape, t.shape)
        np.testing.assert_allclose(to_np(a).astype(np.float64), t.detach().numpy().astype(np.float64),
                                   rtol=tol, atol=tol, equal_nan=True)
        return
    assert type(a) is type(t) and (a == t or (isinstance(t, float) and math.isclose(a, t, rel_tol=tol))), (a, t)


def both(idiom, tol=1e-5):
    same(idiom(alk), idiom(torch), tol)


def raises_same(idiom):
    """Both raise, and alk's exception is (a subclass of) the type torch raises."""
    with pytest.raises(Exception) as t_err:
        idiom(torch)
    with pytest.raises(type(t_err.value)):
        idiom(alk)


DATA = np.random.default_rng(42).standard_normal((3, 4, 5)).astype(np.float32)


def T(m, a=DATA, **kw):  # noqa: N802
    return m.tensor(np.array(a), **kw)


# ---- writes through views and .data reach the base ----

def test_write_through_chained_index():
    def idiom(m):
        b = m.zeros(2, 3)
        b[0][1] = 7.0
        return b
    both(idiom)


def test_zero_through_a_column_view_and_aliases_see_it():
    def idiom(m):
        x = T(m, DATA[0])
        row = x[1]
        x[:, 0].zero_()
        return x, row
    both(idiom)


def test_data_and_grad_data_writes():
    def idiom(m):
        lin = m.nn.Linear(3, 2)
        lin.weight.data.mul_(0)
        w = m.ones(3, requires_grad=True)
        (w * 2).sum().backward()
        w.grad.data.mul_(0.5)
        return lin.weight, w.grad
    a, t = idiom(alk), idiom(torch)
    same(a[0], t[0].detach())
    same(a[1], t[1])


def test_write_to_base_reaches_views():
    def idiom(m):
        x = T(m, DATA[0])
        v = x.view(20)
        t = x.t()
        x.add_(1)
        d = x.detach()
        d[0, 0] = 100.0
        return v, t, x
    both(idiom)


def test_inplace_ops_on_views_and_transposes():
    def idiom(m):
        x = T(m, DATA[0])
        x.t()[1:3].mul_(-2)
        x.transpose(0, 1)[0] += 1
        x[::2, 1] = m.tensor([5.0, 6.0])
        return x
    both(idiom)


def test_gradient_through_a_write_into_a_view():
    def idiom(m):
        a = T(m, DATA[0], requires_grad=True)
        b = a * 1
        b[0].mul_(3)
        b.sum().backward()
        return a.grad
    both(idiom)


def test_view_of_leaf_refuses_inplace():
    def idiom(m):
        a = m.ones(3, requires_grad=True)
        a[0].mul_(2)
    raises_same(idiom)


def test_chunk_and_split_pieces_write_through():
    def idiom(m):
        x = m.zeros(6)
        a, b = x.chunk(2)
        b.fill_(1.0)
        c = x.split(2)[0]
        c.add_(3)
        return x
    both(idiom)


# ---- modules use the parameters assigned to them ----

def test_assigned_parameter_is_used_and_weight_tying():
    def idiom(m):
        m.manual_seed(0)
        lin = m.nn.Linear(4, 3)
        lin.weight = m.nn.Parameter(T(m, DATA[0, :3, :4]))
        lin.bias = m.nn.Parameter(m.zeros(3))
        emb = m.nn.Embedding(3, 4)
        head = m.nn.Linear(4, 3, bias=False)
        head.weight = emb.weight
        x = T(m, DATA[1, :2, :4])
        return lin(x), head.weight is emb.weight, head(x).shape == emb.weight.t().shape[:0] + (2, 3)
    a, t = idiom(alk), idiom(torch)
    same(a[0], t[0])
    assert a[1] and t[1] and a[2] == t[2]


def test_tied_gradients_accumulate_into_one_tensor():
    class Net:
        def __init__(self, m):
            self.emb = m.nn.Embedding(5, 4)
            self.head = m.nn.Linear(4, 5, bias=False)
            with m.no_grad():
                self.emb.weight.copy_(T(m, np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)))
            self.head.weight = self.emb.weight

    def idiom(m):
        net = Net(m)
        ids = m.tensor([1, 3, 3])
        loss = m.nn.functional.cross_entropy(net.head(net.emb(ids)), m.tensor([0, 2, 4]))
        loss.backward()
        return loss, net.emb.weight.grad
    both(idiom)


# ---- PyTorch's defaults, argument orders and layouts ----

def test_max_min_along_dim_return_values_and_indices():
    def idiom(m):
        x = T(m)
        v, i = x.max(1)
        r = m.min(x, dim=2, keepdim=True)
        return v, i, r.values, r.indices, x.max(), m.max(x, T(m) * 0)
    both(idiom)


def test_max_along_dim_gradient_goes_to_the_index():
    def idiom(m):
        x = m.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], requires_grad=True)
        x.max(1).values.sum().backward()
        return x.grad
    both(idiom)


def test_cross_entropy_class_dim_is_1():
    logits = np.random.default_rng(1).standard_normal((2, 5, 7)).astype(np.float32)
    target = np.random.default_rng(2).integers(0, 5, (2, 7))
    weight = np.linspace(0.5, 2, 5).astype(np.float32)

    def idiom(m):
        x = m.tensor(logits, requires_grad=True)
        y = m.tensor(target)
        F = m.nn.functional
        a = F.cross_entropy(x, y)
        b = F.cross_entropy(x, y, reduction="none")
        c = F.cross_entropy(x, y, weight=m.tensor(weight), label_smoothing=0.1)
        d = F.cross_entropy(x, y, ignore_index=2, reduction="sum")
        e = m.nn.CrossEntropyLoss(weight=m.tensor(weight))(x, y)
        f = F.nll_loss(F.log_softmax(x, 1), y, reduction="none")
        (a + c + e).backward()
        return a, b, c, d, e, f, x.grad
    both(idiom)


def test_cross_entropy_with_class_probabilities_and_1d_input():
    probs = np.random.default_rng(3).random((4, 3)).astype(np.float32)
    probs /= probs.sum(1, keepdims=True)

    def idiom(m):
        x = T(m, DATA[0, :4, :3])
        F = m.nn.functional
        return F.cross_entropy(x, m.tensor(probs)), F.cross_entropy(x[0], m.tensor(2))
    both(idiom)


def test_cross_entropy_wrong_target_shape_raises():
    def idiom(m):
        m.nn.functional.cross_entropy(T(m)[:, :, 0], m.zeros(4).long())
    raises_same(idiom)


def test_losses_with_reduction():
    p = 1 / (1 + np.exp(-DATA))
    t = (np.random.default_rng(5).random(DATA.shape) > 0.5).astype(np.float32)

    def idiom(m):
        F = m.nn.functional
        x, y, pr, tt = T(m), T(m) * 0.5, T(m, p), T(m, t)
        return (F.mse_loss(x, y, reduction="sum"), F.mse_loss(x, y, reduction="none"), F.l1_loss(x, y),
                F.smooth_l1_loss(x, y, beta=0.5), F.binary_cross_entropy(pr, tt),
                F.binary_cross_entropy_with_logits(x, tt, reduction="none"),
                F.binary_cross_entropy_with_logits(x, tt, pos_weight=m.ones(5) * 2),
                m.nn.MSELoss(reduction="sum")(x, y), m.nn.BCEWithLogitsLoss()(x, tt), m.nn.L1Loss()(x, y))
    both(idiom)


def test_float_arange_and_integer_division():
    def idiom(m):
        a = m.tensor([7, -7, 5, -5])
        b = m.tensor([2, 2, -3, -3])
        return (m.arange(5.), m.arange(0, 1, 0.25), m.arange(5), a // b, a % b, a // 2, a % 3, 7 // b,
                m.div(a, b, rounding_mode="floor"), m.div(a, b, rounding_mode="trunc"),
                T(m) // 0.3, T(m) % 0.7)
    both(idiom)


def test_integer_division_by_zero_raises():
    raises_same(lambda m: m.tensor([1, 2]) // 0)
    raises_same(lambda m: m.tensor([1, 2]) % m.tensor([1, 0]))


def test_matmul_of_mixed_dtypes_raises():
    raises_same(lambda m: T(m, DATA[0]) @ T(m, DATA[0].T).double())
    raises_same(lambda m: m.mm(T(m, DATA[0]), T(m, DATA[0].T).double()))


def test_scaled_dot_product_attention_defaults():
    # torch 1.13 has no F.scaled_dot_product_attention: compared with the formula in torch.
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 3, 4, 8)).astype(np.float32) for _ in range(3))
    mask = rng.random((4, 4)) > 0.3
    np.fill_diagonal(mask, True)

    def reference(mask_add):
        s = torch.tensor(q) @ torch.tensor(k).transpose(-2, -1) / math.sqrt(8) + mask_add
        return torch.softmax(s, -1) @ torch.tensor(v)

    F = alk.nn.functional
    aq, ak, av = alk.tensor(q), alk.tensor(k), alk.tensor(v)
    same(F.scaled_dot_product_attention(aq, ak, av), reference(0))
    causal = torch.triu(torch.full((4, 4), -math.inf), 1)
    same(F.scaled_dot_product_attention(aq, ak, av, is_causal=True), reference(causal))
    bool_mask = torch.where(torch.tensor(mask), 0.0, -math.inf)
    same(F.scaled_dot_product_attention(aq, ak, av, attn_mask=alk.tensor(mask)), reference(bool_mask))
    same(F.scaled_dot_product_attention(aq, ak, av, alk.tensor(causal.numpy())), reference(causal))


# ---- the everyday ops ----

def test_sort_topk_argsort():
    def idiom(m):
        x = T(m)
        s = x.sort(dim=1, descending=True)
        k = m.topk(x, 2, dim=-1)
        return s.values, s.indices, k.values, k.indices, x.argsort(0), m.sort(x[0, 0]).values
    both(idiom)


def test_topk_gradient():
    def idiom(m):
        x = T(m, DATA[0], requires_grad=True)
        x.topk(2, 1).values.sum().backward()
        return x.grad
    both(idiom)


def test_masking_and_predicates():
    def idiom(m):
        x = T(m)
        mask = x > 0.5
        y = x.masked_fill(mask, -1.0)
        z = x.clone() if hasattr(x, "clone") else x * 1
        z.masked_fill_(~mask, 0.0)
        n = x / (x - x)
        return (y, z, m.isnan(n), n.isnan().any(), mask.all(), mask.any(1), m.all(mask, 2),
                m.allclose(x, x + 1e-7), x.allclose(x + 1))
    both(idiom)


def test_shape_ops():
    def idiom(m):
        x = T(m)
        return (x.flip(0), m.flip(x, (1, 2)), x[0].repeat(2, 3), x[0, 0].repeat(2, 1, 2), m.unbind(x, 1),
                x.view_as(m.zeros(60)), m.reshape(x, (5, -1)), m.permute(x, (2, 0, 1)), m.transpose(x, 0, 2),
                m.squeeze(x[:1]), m.unsqueeze(x, 1), m.flatten(x, 1))
    both(idiom)


def test_norm_bmm_outer_diag():
    def idiom(m):
        x = T(m)
        return (x.norm(), m.norm(x, dim=1), x.norm(p=1, dim=(0, 2)), m.bmm(x, x.transpose(1, 2)),
                m.outer(x[0, 0], x[0, 1]), m.diag(x[0, 0]), m.diag(x[0]), m.addmm(x[0, 0, :4], x[0], x[1].t()),
                m.numel(x), m.is_tensor(x), m.is_tensor(3))
    both(idiom)


def test_scatter():
    def idiom(m):
        src = T(m, DATA[0])
        index = m.tensor([[0, 1, 2, 0, 1], [2, 0, 1, 2, 0]])
        return m.zeros(3, 5).scatter(0, index, src[:2]), m.zeros(3, 5).scatter(1, index[:, :3], 2.0)
    both(idiom)


def test_leaky_relu_elu_and_modules():
    def idiom(m):
        x = T(m)
        F = m.nn.functional
        return (F.leaky_relu(x), F.leaky_relu(x, 0.2), F.elu(x), m.nn.LeakyReLU(0.1)(x), m.nn.ELU(0.5)(x),
                m.nn.LogSoftmax(1)(x), F.interpolate(x.unsqueeze(0), scale_factor=2), F.one_hot(m.tensor([0, 2])))
    both(idiom)


def test_batchnorm1d_batchnorm2d_groupnorm_train_and_eval():
    x4 = np.random.default_rng(9).standard_normal((4, 3, 5, 5)).astype(np.float32)

    def idiom(m):
        b1, b2, g = m.nn.BatchNorm1d(5), m.nn.BatchNorm2d(3), m.nn.GroupNorm(1, 3)
        x = T(m)
        y1 = b1(x.reshape(3 * 4, 5))
        y2 = b2(m.tensor(x4))
        y3 = b1(x.transpose(1, 2))
        b1.eval()
        b2.eval()
        return (y1, y2, y3, b1(x.reshape(12, 5)), b2(m.tensor(x4)), b1.running_mean, b1.running_var,
                b2.running_var, b2.num_batches_tracked, g(m.tensor(x4)))
    both(idiom)


def test_tuple_kernel_sizes_padding_idx_and_layernorm_shapes():
    def idiom(m):
        m.manual_seed(0)
        conv = m.nn.Conv2d(3, 2, (3, 3), stride=(1, 1), padding=(1, 1))
        with m.no_grad():
            conv.weight.copy_(T(m, np.linspace(-1, 1, 54).reshape(2, 3, 3, 3)))
            conv.bias.zero_()
        emb = m.nn.Embedding(4, 3, padding_idx=1)
        ln = m.nn.LayerNorm((4, 5))
        out = emb(m.tensor([1, 2, 1]))
        out.sum().backward()
        pool = m.nn.MaxPool2d((2, 2))
        return conv(T(m)[None]), pool(T(m)[None]).shape, emb.weight[1], emb.weight.grad[1], ln(T(m)), \
            ln.weight.shape
    a, t = idiom(alk), idiom(torch)
    same(a[0], t[0])
    assert a[1] == tuple(t[1])
    same(a[2], t[2].detach())
    same(a[3], t[3])
    same(a[4], t[4])
    assert a[5] == tuple(t[5])


def test_containers():
    def idiom(m):
        d = m.nn.ModuleDict({"a": m.nn.Linear(2, 3), "b": m.nn.ReLU()})
        pl = m.nn.ParameterList([m.nn.Parameter(m.ones(2)), m.nn.Parameter(m.zeros(3))])
        holder = m.nn.Module()
        holder.d, holder.pl = d, pl
        return sorted(n for n, _ in holder.named_parameters()), list(d.keys()), len(pl)
    assert idiom(alk) == idiom(torch)


def test_format_device_and_randperm():
    def idiom(m):
        t = m.tensor(3.14159)
        m.manual_seed(0)
        p = m.randperm(10)
        return f"{t:.3f}", t.device.type, sorted(p.tolist()) == list(range(10)), p.dtype == m.int64
    assert idiom(alk) == idiom(torch)


def test_multinomial_counts():
    alk.manual_seed(0)
    probs = alk.tensor([0.1, 0.0, 0.6, 0.3])
    draws = alk.multinomial(probs, 4000, replacement=True).numpy()
    freq = np.bincount(draws, minlength=4) / 4000
    np.testing.assert_allclose(freq, [0.1, 0.0, 0.6, 0.3], atol=0.03)
    without = alk.multinomial(probs, 3).tolist()
    assert sorted(without) == [0, 2, 3]


def test_pickle_and_deepcopy():
    x = alk.tensor(DATA, dtype=alk.float64)
    y = pickle.loads(pickle.dumps(x))
    assert y.dtype == alk.float64 and np.array_equal(y.numpy(), x.numpy())
    p = alk.nn.Parameter(alk.ones(3))
    q = copy.deepcopy(p)
    assert isinstance(q, alk.nn.Parameter) and q.requires_grad and q is not p
    with alk.no_grad():
        q.mul_(2)
    assert p.tolist() == [1.0, 1.0, 1.0] and q.tolist() == [2.0, 2.0, 2.0]


def test_grad_mode_helpers():
    def idiom(m):
        w = m.ones(2, requires_grad=True)
        out = []
        with m.set_grad_enabled(False):
            out.append((w * 2).requires_grad)
        with m.no_grad():
            out.append((w * 2).requires_grad)
            with m.enable_grad():
                out.append((w * 2).requires_grad)
                with m.no_grad():
                    out.append((w * 2).requires_grad)
                out.append((w * 2).requires_grad)
            out.append((w * 2).requires_grad)
            with m.set_grad_enabled(True):
                out.append((w * 2).requires_grad)
        out.append((w * 2).requires_grad)
        return out
    assert idiom(alk) == idiom(torch) == [False, False, True, False, True, False, True, True]


# ---- optimizers: param groups and lr_scheduler ----

def test_param_groups_and_schedulers_match_torch():
    def idiom(m, make_sched):
        a = m.nn.Parameter(T(m, DATA[0]))
        b = m.nn.Parameter(T(m, DATA[1, 0]))
        opt = m.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.01, "momentum": 0.5}], lr=0.1, momentum=0.9)
        sched = make_sched(m, opt)
        lrs = []
        for _ in range(6):
            loss = (a * a).sum() + (b ** 3).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            lrs.append([g["lr"] for g in opt.param_groups])
        return a, b, lrs

    makers = [
        lambda m, o: m.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
        lambda m, o: m.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.001),
        lambda m, o: m.optim.lr_scheduler.LambdaLR(o, lambda e: 1 / (1 + e)),
        lambda m, o: m.optim.lr_scheduler.OneCycleLR(o, max_lr=[0.2, 0.02], total_steps=8, cycle_momentum=False),
    ]
    for make in makers:
        (aa, ab, al), (ta, tb, tl) = idiom(alk, make), idiom(torch, make)
        same(aa, ta.detach(), 1e-4)
        same(ab, tb.detach(), 1e-4)
        np.testing.assert_allclose(al, tl, rtol=1e-9)


def test_adamw_decays_every_parameter_as_torch():
    def idiom(m):
        w = m.nn.Parameter(T(m, DATA[0, 0]))
        opt = m.optim.AdamW([w], lr=0.1, weight_decay=0.5)
        for _ in range(3):
            (w * w).sum().backward()
            opt.step()
            opt.zero_grad()
        return w.detach()
    both(idiom)


# ---- saving, copying, data loading, einsum ----

def test_save_load_round_trip(tmp_path):
    lin = alk.nn.Linear(3, 2)
    state = {"model": lin.state_dict(), "step": 7, "name": "run", "pair": (lin.weight, lin.weight), "none": None}
    alk.save(state, tmp_path / "ckpt.safetensors")
    back = alk.load(tmp_path / "ckpt.safetensors")
    assert back["step"] == 7 and back["name"] == "run" and back["none"] is None
    assert back["pair"][0] is back["pair"][1] and isinstance(back["pair"], tuple)
    other = alk.nn.Linear(3, 2)
    other.load_state_dict(back["model"])
    x = alk.randn(4, 3)
    np.testing.assert_array_equal(other(x).numpy(), lin(x).numpy())
    with pytest.raises(TypeError, match="path"):
        alk.save(state, open(tmp_path / "f", "wb"))


def test_deepcopy_and_pickle_of_modules():
    net = alk.nn.Sequential(alk.nn.Linear(4, 3), alk.nn.GELU(), alk.nn.LayerNorm(3), alk.nn.TransformerBlock(3, 1))
    x = alk.randn(2, 5, 4)
    for twin in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        np.testing.assert_array_equal(twin(x).numpy(), net(x).numpy())
        assert twin[0].weight is not net[0].weight
        with alk.no_grad():
            twin[0].weight.mul_(0)
        assert not np.array_equal(twin(x).numpy(), net(x).numpy())


def test_dataloader_batches_like_torch():
    def idiom(m):
        ds = m.utils.data.TensorDataset(T(m, DATA[0]), m.arange(4))
        out = []
        for xb, yb in m.utils.data.DataLoader(ds, batch_size=3):
            out += [xb, yb]
        return out, len(m.utils.data.DataLoader(ds, batch_size=3, drop_last=True))
    (a, an), (t, tn) = idiom(alk), idiom(torch)
    same(a, t)
    assert an == tn
    alk.manual_seed(1)
    seen = sorted(int(y) for _, yb in alk.utils.data.DataLoader(
        alk.utils.data.TensorDataset(alk.zeros(10), alk.arange(10)), batch_size=4, shuffle=True) for y in yb.tolist())
    assert seen == list(range(10))


def test_einsum_and_normal():
    def idiom(m):
        x = T(m)
        return (m.einsum("bij,bjk->bik", x, x.transpose(1, 2)), m.einsum("ij->ji", x[0]),
                m.einsum("ii->i", x[0, :4, :4]),
                m.einsum("...j,j", x, x[0, 0]), m.einsum("bij,bij->b", x, x), m.einsum("i,j", x[0, 0], x[0, 1]))
    both(idiom)
    alk.manual_seed(0)
    s = alk.normal(2.0, 3.0, (20000,))
    assert s.dtype == alk.float32 and abs(s.mean().item() - 2) < 0.1 and abs(s.std().item() - 3) < 0.1


def test_backward_accepts_retain_graph():
    def idiom(m):
        w = m.ones(2, requires_grad=True)
        y = (w * 3).sum()
        y.backward(retain_graph=True)
        return w.grad
    both(idiom)


def test_views_follow_an_optimizer_step():
    def idiom(m):
        lin = m.nn.Linear(2, 2)
        with m.no_grad():
            lin.weight.copy_(m.tensor([[1.0, 2.0], [3.0, 4.0]]))
        held, row = lin.weight.data, lin.weight[0]
        opt = m.optim.SGD(lin.parameters(), lr=0.5)
        lin(m.ones(1, 2)).sum().backward()
        opt.step()
        return held, row.detach(), lin.weight.detach()
    both(idiom)


def test_second_backward_raises_like_torch_without_retain_graph():
    def idiom(m):
        w = m.ones(2, requires_grad=True)
        z = (w * w).sum()
        z.backward()
        z.backward()
    raises_same(idiom)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_matches_torch(batch_first):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 5, 8) if batch_first else (5, 2, 8)).astype(np.float32)
    mask = np.triu(np.ones((5, 5), bool), 1)
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    am = alk.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    am.load_state_dict({k: alk.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    assert sorted(am.state_dict()) == sorted(tm.state_dict())
    for kw in ({}, {"attn_mask": mask}, {"key_padding_mask": pad, "average_attn_weights": False}):
        t_out = tm(*(torch.tensor(x),) * 3, **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                                              for k, v in kw.items()})
        a_out = am(*(alk.tensor(x),) * 3, **{k: alk.tensor(v) if isinstance(v, np.ndarray) else v
                                            for k, v in kw.items()})
        same(a_out[0], t_out[0].detach())
        same(a_out[1], t_out[1].detach())


def test_wrong_arguments_name_the_argument_and_the_line():
    with pytest.raises(TypeError) as info:
        alk.softmax(alk.ones(2), "a")
    assert "argument 'dim' (position 2) must be int, not str" in str(info.value)
    assert this_line(-2) in str(info.value)
    with pytest.raises(TypeError) as info:
        alk.ones(2, 3).gather(1, alk.zeros(2, 3).long(), 5)
    assert "takes at most 2 positional arguments but 3 were given" in str(info.value)
    assert this_line(-2) in str(info.value)
    raises_same(lambda m: m.ones(2).softmax(dim=1.5))
    raises_same(lambda m: m.ones(4).view(1.5))
    raises_same(lambda m: m.ones(4).transpose(0, "a"))


def test_hooks_and_retain_grad():
    def idiom(m):
        x = T(m, DATA[0], requires_grad=True)
        h = x * 2
        h.retain_grad()
        seen = []
        g = h.exp()
        g.register_hook(lambda grad: seen.append(grad.sum().item()))
        doubled = g * 1
        handle = doubled.register_hook(lambda grad: grad * 2)
        (doubled.sum() + h.sum()).backward()
        handle.remove()
        return h.grad, x.grad, seen[0]
    both(idiom, 1e-4)


def test_hook_after_use_and_on_leaf_raise():
    h = alk.ones(2, requires_grad=True) * 2
    _ = h + 1
    with pytest.raises(RuntimeError, match="already used"):
        h.register_hook(lambda g: g)
    with pytest.raises(RuntimeError, match="leaf"):
        alk.ones(2, requires_grad=True).register_hook(lambda g: g)


def test_gradients_through_writes_into_views_and_bases():
    def idiom(m):
        a = T(m, DATA[0], requires_grad=True)
        b = T(m, DATA[1, :, 0], requires_grad=True)
        x = a.clone()
        x[:, 1] = b * 2
        v = x.view(-1)
        v[3:5] = b[:2] ** 2
        col = x[:, 2]
        x.mul_(3)
        loss = (x * x).sum() + (col * v[:4]).sum()
        loss.backward()
        return loss, a.grad, b.grad, col
    both(idiom, 1e-4)


def test_writes_through_views_of_bool_int_and_parameters():
    def idiom(m):
        mask = m.zeros(3, 3, dtype=m.bool)
        mask[0] = True
        mask.t()[2].fill_(True)
        ids = m.arange(6).view(2, 3)
        ids[:, 0] += 10
        lin = m.nn.Linear(3, 2)
        with m.no_grad():
            lin.weight.t()[0].fill_(1.0)
            lin.bias[1:] = 5.0
        return mask, ids, lin.weight[:, 0].detach(), lin.bias[1].detach()
    both(idiom)


def test_views_see_initializers_and_load_state_dict():
    lin = alk.nn.Linear(3, 2)
    held, col = lin.weight.data, lin.weight[:, 0]
    alk.nn.init.ones_(lin.weight)
    assert held.tolist() == [[1.0] * 3] * 2 and col.tolist() == [1.0, 1.0]
    lin.load_state_dict({"weight": alk.zeros(2, 3), "bias": alk.zeros(2)})
    assert held.tolist() == [[0.0] * 3] * 2 and col.tolist() == [0.0, 0.0]


def test_var_std_unbiased_and_randint_forms():
    def idiom(m):
        x = T(m)
        return (x.std(1), x.var(1, False), m.std(x, dim=2, unbiased=False, keepdim=True), x.var(),
                m.var(x, (0, 2)), m.randint(0, 10, (5,)).dtype, tuple(m.randint(10, (3, 2)).shape))
    a, t = idiom(alk), idiom(torch)
    same(a[:5], t[:5])
    assert DTYPES[a[5]] == t[5] and a[6] == t[6]
