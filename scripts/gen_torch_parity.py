#!/usr/bin/python3
"""Generates tests/fixtures/torch_parity.json: PyTorch's answers, in float64, for alk's ops.

Run with Debian's python3-torch (1.13):  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/gen_torch_parity.py

The elementwise cases come from the op table itself: every line of include/alk/elementwise.def is
read here, and an op with no PyTorch counterpart in TORCH_EW below stops the script, so a new op
cannot be added without its parity cases. Each op runs over a grid of edge values (NaN, +-inf,
zeros, ties, negative numbers outside the domain) and its gradient is taken against a fixed
random seed gradient. Reductions, template ops, losses and layers follow, by hand, all in float64.
Then the same ops in float32 and bfloat16 (PyTorch computing in that dtype, as alk does), and
torch.nn's modules (Linear, LayerNorm, Embedding, Conv2d, MultiheadAttention, GELU,
CrossEntropyLoss; Linear and BatchNorm2d in float64 too) called with the case's parameters,
forward and gradients, which the test runs through alk's nn modules. tests/ops/test_torch_parity.cpp runs every case through alk and
compares (NaN matches NaN; the tolerance is the case's dtype's, see there).
Cases where alk deliberately differs from PyTorch are listed in docs/pytorch.md and marked
"differs" here, with alk's documented answer ("alk_grads" at the elements "grad_differs" marks),
which the test checks there instead of PyTorch's.
"""
import json
import math
import os
import re
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# alk op name -> PyTorch function (operands in table order).
TORCH_EW = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "log1p": torch.log1p,
    "expm1": torch.expm1, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "erf": torch.erf, "sin": torch.sin,
    "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "softplus": F.softplus,
    "square": torch.square, "reciprocal": torch.reciprocal, "softsign": F.softsign, "sign": torch.sign,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "logical_not": torch.logical_not,
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt,
    "le": torch.le, "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or, "logical_xor": torch.logical_xor, "where": torch.where,
    "clamp": torch.clamp, "bitwise_not": torch.bitwise_not, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "bitwise_left_shift": torch.bitwise_left_shift, "bitwise_right_shift": torch.bitwise_right_shift,
    # PyTorch has no rotation: the low 32 bits rotated (amount mod 32), as the u32's value.
    "rotl": lambda a, b: (((a & 0xFFFFFFFF) << (b & 31)) | ((a & 0xFFFFFFFF) >> ((32 - (b & 31)) & 31))) & 0xFFFFFFFF,
    "rotr": lambda a, b: (((a & 0xFFFFFFFF) >> (b & 31)) | ((a & 0xFFFFFFFF) << ((32 - (b & 31)) & 31))) & 0xFFFFFFFF,
}

# Where alk's gradient deliberately differs (docs/pytorch.md, "Deliberate differences"), per op:
# which elements (a predicate over one element's operand values) and alk's documented answer
# there (a function of the operands and the seed gradient, as tensors: every operand's
# gradient). The test compares those elements with alk's answer, the others with PyTorch's.
def clamp_when_bounds_meet(x, lo, hi, g):
    """lo == hi: x below gives lo the gradient, x above gives hi, x equal to both gives x."""
    zero = torch.zeros_like(g)
    return [torch.where((x >= lo) & (x <= hi), g, zero), torch.where(x < lo, g, zero), torch.where(x > hi, g, zero)]


GRAD_DIFFERS = {
    "clamp": (lambda x, lo, hi: lo == hi, clamp_when_bounds_meet),  # PyTorch: nobody gets it
    # At +-inf PyTorch's composite softsign backward computes inf/inf = NaN; alk's table rule
    # g / (1 + |x|)^2 gives the limit, 0.
    "softsign": (lambda x: math.isinf(x), lambda x, g: [torch.zeros_like(g)]),
}

EDGE_UNARY = [-3.7, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 2.5, 3.0, 20.0, -20.0, math.nan, math.inf, -math.inf]
EDGE_BINARY = [-2.0, -0.5, 0.0, 0.5, 2.0, 3.0, math.nan, math.inf, -math.inf]


def enc(v):
    """A number as JSON: NaN and infinities as strings."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def flat(t):
    return [enc(x) for x in t.detach().reshape(-1).tolist()]


def dtype_name(t):
    return {torch.float64: "f64", torch.float32: "f32", torch.bfloat16: "bf16", torch.int64: "i64",
            torch.bool: "bool"}[t.dtype]


def tensor_json(t, grad=False):
    return {"shape": list(t.shape), "dtype": dtype_name(t), "data": flat(t), "grad": grad}


cases = []


def add_case(name, op, inputs, fn, params=None, grad_mask=None, differs=None, no_grad=(), alk_grads=None,
             module=None):
    """inputs: list of tensors (floating ones get gradients unless listed in no_grad); fn(*inputs) -> tensor.
    Where alk deliberately differs: grad_mask marks the elements (of every gradient) where alk's
    documented answer, alk_grads(inputs, seed) -> a gradient per input, replaces PyTorch's.
    module: a torch.nn module fn calls; its buffers after the forward (running statistics) are
    recorded too."""
    ins = [t.detach().clone().requires_grad_(t.is_floating_point() and i not in no_grad) for i, t in enumerate(inputs)]
    out = fn(*ins)
    case = {"name": name, "op": op, "params": params or {}, "inputs": [tensor_json(t, t.requires_grad) for t in ins],
            "out": tensor_json(out)}
    if out.is_floating_point() and any(t.requires_grad for t in ins) and out.requires_grad:
        g = (torch.rand(out.shape, dtype=out.dtype) + 0.5)
        grads = torch.autograd.grad([out], [t for t in ins if t.requires_grad], [g], allow_unused=True)
        case["seed"] = flat(g)
        it = iter(grads)
        case["grads"] = []
        for t in ins:
            gr = next(it) if t.requires_grad else None
            if t.requires_grad and gr is None:
                gr = torch.zeros_like(t)  # an input the output does not depend on
            case["grads"].append(flat(gr) if gr is not None else None)
        if grad_mask is not None:
            case["grad_differs"] = grad_mask
            case["alk_grads"] = [flat(a) if t.requires_grad else None
                                 for t, a in zip(ins, alk_grads([t.detach() for t in ins], g))]
    if differs:
        case["differs"] = differs
    if module is not None:
        case["buffers"] = {n: flat(b) for n, b in module.named_buffers() if b.is_floating_point()}
    cases.append(case)


def read_op_table():
    text = open(os.path.join(ROOT, "include/alk/elementwise.def")).read()
    ops = []
    for m in re.finditer(r'^ALK_EW\((\w+),\s*(\d),\s*"([^"]*)",\s*(\w+),\s*(\w+),', text, re.M):
        ops.append({"name": m.group(1), "arity": int(m.group(2)), "inputs": m.group(3).split(), "rule": m.group(4),
                    "domain": m.group(5)})
    return ops


def t64(vals, shape=None, grad=True):
    t = torch.tensor(vals, dtype=torch.float64)
    if shape is not None:
        t = t.reshape(shape)
    return t.requires_grad_(grad)


def elementwise_cases():
    table = read_op_table()
    missing = [op["name"] for op in table if op["name"] not in TORCH_EW]
    if missing:
        sys.exit("gen_torch_parity.py: no PyTorch counterpart for op(s) %s: add them to TORCH_EW" % missing)
    for op in table:
        name, arity, rule = op["name"], op["arity"], op["rule"]
        fn = TORCH_EW[name]
        logical = rule == "Logical"
        if rule == "Integer":  # bitwise ops: integers (i64, i32, u8) and bools, no gradient
            ints = [-7, -2, -1, 0, 1, 3, 9, 12345, -99999]
            if arity == 1:
                add_case(name + "/i64", "ew:" + name, [torch.tensor(ints, dtype=torch.int64)], fn)
                add_case(name + "/bool", "ew:" + name, [torch.tensor([True, False, True])], fn)
            else:
                shifts = "shift" in name or name in ("rotl", "rotr")
                a = [p for p in ints for _ in range(6)]
                b = [q for _ in ints for q in ([0, 1, 3, 7, 31, 40] if shifts else [0, -1, 5, 6, 255, -128])]
                add_case(name + "/i64", "ew:" + name, [torch.tensor(a, dtype=torch.int64), torch.tensor(b, dtype=torch.int64)], fn)
                if not shifts:
                    add_case(name + "/bool", "ew:" + name, [torch.tensor([True, True, False, False]),
                                                              torch.tensor([True, False, True, False])], fn)
            continue
        if arity == 1:
            x = t64(EDGE_UNARY)
            if logical:
                x = x.detach()
            mask, why, answer = None, None, None
            if name in GRAD_DIFFERS:
                mask = [1 if GRAD_DIFFERS[name][0](v) else 0 for v in EDGE_UNARY]
                why, answer = "gradient at some edge values (docs/pytorch.md)", GRAD_DIFFERS[name][1]
            add_case(name + "/edges", "ew:" + name, [x], fn, grad_mask=mask, differs=why,
                     alk_grads=answer and (lambda ins, g, answer=answer: answer(*ins, g)))
            if rule == "Same" and name not in ("logical_not",):
                xi = torch.tensor([-7, -2, -1, 0, 1, 3, 9], dtype=torch.int64)
                add_case(name + "/i64", "ew:" + name, [xi], fn)
        elif arity == 2:
            a = [p for p in EDGE_BINARY for _ in EDGE_BINARY]
            b = [q for _ in EDGE_BINARY for q in EDGE_BINARY]
            ta, tb = t64(a), t64(b)
            if logical or rule == "Compare":
                ta, tb = ta.detach(), tb.detach()
            skip = None
            if name == "pow":
                # d/db a^b = a^b log(a): PyTorch masks a == 0 (and b >= 0) to 0; at a < 0 log(a) is NaN.
                pass
            add_case(name + "/edges", "ew:" + name, [ta, tb], fn, grad_mask=skip)
            # Broadcasting [3, 1] with [4].
            add_case(name + "/broadcast", "ew:" + name,
                     [t64([1.0, -2.0, 0.5], [3, 1], not (logical or rule == "Compare")),
                      t64([0.5, 1.0, -2.0, 3.0], [4], not (logical or rule == "Compare"))], fn)
            if rule in ("Same", "Compare"):
                ia = torch.tensor([-7, -2, 0, 3, 5, 5], dtype=torch.int64)
                ib = torch.tensor([2, -3, 4, 3, 2, 5], dtype=torch.int64)
                add_case(name + "/i64", "ew:" + name, [ia, ib], fn)
        else:
            if name == "where":
                c = torch.tensor([True, False, True, False, True, False])
                add_case("where/edges", "ew:where", [c, t64([1.0, math.nan, math.inf, 2.0, -0.5, 3.0]),
                                                      t64([math.nan, 5.0, 1.0, -math.inf, 7.0, 0.0])], fn)
            else:  # clamp(x, lo, hi) over tensors: ties with either bound, lo > hi, NaN
                xs = [-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, math.nan, 1.0, 0.5, 3.0]
                lo = [-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 2.0]
                hi = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 2.0]
                mask = [1 if GRAD_DIFFERS["clamp"][0](x, l, h) else 0 for x, l, h in zip(xs, lo, hi)]
                add_case("clamp/edges", "ew:clamp", [t64(xs), t64(lo), t64(hi)], fn, grad_mask=mask,
                         differs="lo == hi, x outside: PyTorch gives no operand the gradient, alk gives it to lo or hi",
                         alk_grads=lambda ins, g: GRAD_DIFFERS["clamp"][1](*ins, g))
    # Zero-size operands broadcast to an empty result.
    add_case("add/empty", "ew:add", [t64([], [0, 3]), t64([1.0, 2.0, 3.0])], torch.add)
    add_case("relu/empty", "ew:relu", [t64([], [2, 0])], torch.relu)


def reduction_cases():
    x = t64([1.0, 3.0, 3.0, -2.0, 0.0, 5.0, 5.0, 5.0, 0.5, -1.0, 2.0, 0.0], [3, 4])
    for name, fn in [("sum", torch.sum), ("mean", torch.mean), ("prod", torch.prod)]:
        add_case(name + "/all", name, [x], lambda t, fn=fn: fn(t))
        add_case(name + "/dim1", name, [x], lambda t, fn=fn: fn(t, 1, keepdim=True), {"axes": [1], "keepdim": True})
    # max/min: ties share the gradient (amax/amin).
    add_case("max/ties", "max", [x], lambda t: torch.amax(t, 1), {"axes": [1]})
    add_case("min/ties", "min", [x], lambda t: torch.amin(t, 0), {"axes": [0]})
    add_case("max/all", "max", [x], lambda t: torch.amax(t))
    xn = t64([1.0, math.nan, 3.0, 2.0, -math.inf, 0.0], [2, 3])
    add_case("max/nan", "max", [xn], lambda t: torch.amax(t, 1), {"axes": [1]})
    add_case("sum/nan", "sum", [xn], lambda t: torch.sum(t, 1), {"axes": [1]})
    # prod with zeros: one zero in a slice, two zeros, none (PyTorch's rule).
    xz = t64([2.0, 0.0, 3.0, 0.0, 0.0, 4.0, 1.5, -2.0, 3.0], [3, 3])
    add_case("prod/zeros", "prod", [xz], lambda t: torch.prod(t, 1), {"axes": [1]})
    add_case("prod/one_zero", "prod", [t64([2.0, 0.0, 3.0])], lambda t: torch.prod(t))
    add_case("prod/all_zeros_all", "prod", [xz], lambda t: torch.prod(t))
    for corr in (0, 1):
        add_case("var/c%d" % corr, "var", [x], lambda t, c=corr: torch.var(t, 1, unbiased=bool(c)),
                 {"axes": [1], "correction": corr})
        add_case("std/c%d" % corr, "std", [x], lambda t, c=corr: torch.std(t, 0, unbiased=bool(c)),
                 {"axes": [0], "correction": corr})
    add_case("logsumexp/dim1", "logsumexp", [x], lambda t: torch.logsumexp(t, 1), {"axes": [1]})
    add_case("logsumexp/inf", "logsumexp", [t64([-math.inf, -math.inf, 1.0, 2.0], [2, 2])],
             lambda t: torch.logsumexp(t, 1), {"axes": [1]})
    add_case("argmax/ties", "argmax", [x.detach()], lambda t: torch.argmax(t, 1), {"dim": 1})
    add_case("argmin/ties", "argmin", [x.detach()], lambda t: torch.argmin(t, 1), {"dim": 1})
    add_case("argmax/nan", "argmax", [xn.detach()], lambda t: torch.argmax(t, 1), {"dim": 1})
    # Empty tensors: sums of nothing are 0, products 1, means NaN.
    e = t64([], [0, 3])
    add_case("sum/empty", "sum", [e], lambda t: torch.sum(t, 0), {"axes": [0]})
    add_case("prod/empty", "prod", [e], lambda t: torch.prod(t, 0), {"axes": [0]})
    add_case("mean/empty", "mean", [e], lambda t: torch.mean(t, 0), {"axes": [0]})
    add_case("cumsum/dim1", "cumsum", [x], lambda t: torch.cumsum(t, 1), {"dim": 1})


def template_cases():
    a = torch.randn(2, 3, 5, dtype=torch.float64).requires_grad_()
    b = torch.randn(5, 4, dtype=torch.float64).requires_grad_()
    add_case("matmul/batched", "matmul", [a, b], torch.matmul)
    add_case("matmul/vec", "matmul", [torch.randn(5, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)],
             torch.matmul)
    add_case("matmul/empty_k", "matmul", [t64([], [2, 0]), t64([], [0, 3])], torch.matmul)
    x = torch.randn(3, 6, dtype=torch.float64) * 3
    x[0, 2] = math.inf * -1
    x[1, :] = 2.0
    add_case("softmax/dim1", "softmax", [x], lambda t: torch.softmax(t, 1), {"dim": 1})
    add_case("log_softmax/dim0", "log_softmax", [x], lambda t: torch.log_softmax(t, 0), {"dim": 0})
    w, bb = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    add_case("layer_norm/affine", "layer_norm", [torch.randn(4, 6, dtype=torch.float64), w, bb],
             lambda t, w, b: F.layer_norm(t, [6], w, b, 1e-5), {"eps": 1e-5})
    add_case("layer_norm/constant_rows", "layer_norm", [t64([2.0] * 6 + [1.0, 2, 3, 4, 5, 6], [2, 6]), w, bb],
             lambda t, w, b: F.layer_norm(t, [6], w, b, 1e-5), {"eps": 1e-5})
    xr = torch.randn(4, 6, dtype=torch.float64)
    add_case("rms_norm/affine", "rms_norm", [xr, w],
             lambda t, w: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w, {"eps": 1e-6})
    src = torch.randn(3, 4, dtype=torch.float64)
    idx = torch.tensor([[0, 0, 3], [1, 2, 1], [3, 3, 3]])
    add_case("gather/dim1", "gather", [src, idx], lambda t, i: torch.gather(t, 1, i), {"dim": 1})
    add_case("index_select/dim0", "index_select", [src, torch.tensor([2, 0, 2])],
             lambda t, i: torch.index_select(t, 0, i), {"dim": 0})
    add_case("embedding/repeats", "embedding", [torch.randn(5, 3, dtype=torch.float64), torch.tensor([[1, 4], [1, 1]])],
             lambda w, i: F.embedding(i, w))
    add_case("scatter_add/dim0", "scatter_add",
             [torch.randn(3, 2, dtype=torch.float64), torch.tensor([[0, 2], [0, 0]]), torch.randn(2, 2, dtype=torch.float64)],
             lambda t, i, s: torch.scatter_add(t, 0, i, s), {"dim": 0})
    add_case("one_hot", "one_hot", [torch.tensor([0, 3, 1])], lambda i: F.one_hot(i, 4), {"n": 4})
    m = torch.randn(4, 5, dtype=torch.float64)
    for k in (-1, 0, 2):
        add_case("tril/k%d" % k, "tril", [m], lambda t, k=k: torch.tril(t, k), {"k": k})
        add_case("triu/k%d" % k, "triu", [m], lambda t, k=k: torch.triu(t, k), {"k": k})
    add_case("pad/2d", "pad", [torch.randn(2, 3, dtype=torch.float64)], lambda t: F.pad(t, (1, 2, 0, 1), value=-1.5),
             {"pads": [1, 2, 0, 1], "value": -1.5})
    p, q = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 2, dtype=torch.float64)
    add_case("cat/dim1", "cat", [p, q], lambda a, b: torch.cat([a, b], 1), {"dim": 1})
    add_case("stack/dim1", "stack", [p, torch.randn(2, 3, dtype=torch.float64)], lambda a, b: torch.stack([a, b], 1),
             {"dim": 1})
    # Attention: softmax(q k^T / sqrt(D) + causal mask) v.
    qq, kk, vv = (torch.randn(2, 5, 4, dtype=torch.float64) for _ in range(3))

    def sdpa(q, k, v):
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mask = torch.ones(5, 5, dtype=torch.bool).tril()
        return torch.softmax(s.masked_fill(~mask, -math.inf), -1) @ v
    add_case("attention/causal", "attention", [qq, kk, vv], sdpa, {"causal": True})
    # Convolution and pooling.
    img = torch.randn(2, 4, 7, 6, dtype=torch.float64)
    wt, bs = torch.randn(6, 2, 3, 3, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    add_case("conv2d/groups", "conv2d", [img, wt, bs], lambda x, w, b: F.conv2d(x, w, b, 2, 1, 1, 2),
             {"stride": 2, "padding": 1, "dilation": 1, "groups": 2})
    add_case("conv2d/dilation", "conv2d", [img, torch.randn(3, 4, 2, 2, dtype=torch.float64), torch.randn(3, dtype=torch.float64)],
             lambda x, w, b: F.conv2d(x, w, b, 1, 0, 2, 1), {"stride": 1, "padding": 0, "dilation": 2, "groups": 1})
    add_case("max_pool2d/k3s2p1", "max_pool2d", [img], lambda x: F.max_pool2d(x, 3, 2, 1),
             {"kernel": 3, "stride": 2, "padding": 1})
    # Ties, as ReLU's zeros make them: the whole gradient goes to the first maximum.
    ties = torch.relu(torch.randn(1, 2, 6, 6, dtype=torch.float64))
    ties[0, 0, 0:2, 0:2] = 1.0
    add_case("max_pool2d/ties", "max_pool2d", [ties], lambda x: F.max_pool2d(x, 2), {"kernel": 2, "stride": 2, "padding": 0})
    # Windows with several NaN (docs/pytorch.md): PyTorch sends the gradient to the last NaN,
    # alk to the first (its rule for ties): alk's answer is PyTorch's gradient with the NaN
    # ranked, the first of a window highest.
    nans = torch.randn(1, 1, 4, 4, dtype=torch.float64)
    nans[0, 0, 0, 0] = nans[0, 0, 1, 1] = nans[0, 0, 0, 3] = nans[0, 0, 1, 2] = nans[0, 0, 3, 3] = math.nan

    def first_nan_wins(ins, g):
        ranked = ins[0].clone()
        flat_view = ranked.view(-1)
        for k, at in enumerate(torch.nonzero(torch.isnan(flat_view)).flatten().tolist()):
            flat_view[at] = 1e300 / (k + 1)
        ranked.requires_grad_()
        return torch.autograd.grad([F.max_pool2d(ranked, 2)], [ranked], [g])
    add_case("max_pool2d/nans", "max_pool2d", [nans], lambda x: F.max_pool2d(x, 2),
             {"kernel": 2, "stride": 2, "padding": 0}, grad_mask=[1] * 16, alk_grads=first_nan_wins,
             differs="a window with several NaN: PyTorch's gradient goes to the last, alk's to the first")
    add_case("avg_pool2d/k2", "avg_pool2d", [img], lambda x: F.avg_pool2d(x, 2), {"kernel": 2, "stride": 2, "padding": 0})


def loss_and_layer_cases():
    logits = torch.randn(5, 4, dtype=torch.float64)
    tgt = torch.tensor([1, 0, 3, -100, 2])
    add_case("cross_entropy/ignore", "cross_entropy", [logits, tgt], lambda l, t: F.cross_entropy(l, t, ignore_index=-100),
             {"ignore_index": -100, "label_smoothing": 0.0})
    add_case("cross_entropy/smoothing", "cross_entropy", [logits, torch.tensor([1, 0, 3, 2, 2])],
             lambda l, t: F.cross_entropy(l, t, label_smoothing=0.1), {"ignore_index": -100, "label_smoothing": 0.1})
    add_case("cross_entropy/3d", "cross_entropy", [torch.randn(2, 3, 4, dtype=torch.float64), torch.tensor([[1, 2, 3], [0, 0, 1]])],
             lambda l, t: F.cross_entropy(l.reshape(-1, 4), t.reshape(-1)), {"ignore_index": -100, "label_smoothing": 0.0})
    x, y = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    add_case("mse_loss", "mse_loss", [x, y], F.mse_loss)
    add_case("bce_with_logits", "bce_logits", [t64([-50.0, -1.0, 0.0, 2.0, 60.0, 3.0]), t64([0.0, 1.0, 0.5, 1.0, 0.0, 1.0])],
             F.binary_cross_entropy_with_logits)
    # torch.nn's Linear and BatchNorm2d (training mode: batch statistics) with these parameters;
    # the test runs alk's nn modules.
    add_case("linear", "nn:Linear", [torch.randn(2, 3, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64),
                                     torch.randn(4, dtype=torch.float64)],
             module_call(torch.nn.Linear(5, 4, dtype=torch.float64)))
    bn = torch.nn.BatchNorm2d(3, eps=1e-5, momentum=0.1, dtype=torch.float64)
    add_case("batch_norm/train", "nn:BatchNorm2d",
             [torch.randn(4, 3, 2, 2, dtype=torch.float64), torch.randn(3, dtype=torch.float64),
              torch.randn(3, dtype=torch.float64)],
             module_call(bn), {"eps": 1e-5, "momentum": 0.1}, module=bn)


# Values an op of the table is sampled at in the low-precision cases, per domain
# (elementwise.def): finite, away from the edges the float64 grid covers.
def domain_values(domain, n, dtype):
    u = torch.rand(n, dtype=torch.float64)
    if domain == "Positive":
        v = 0.1 + 2.9 * u
    elif domain == "NonZero":
        v = torch.where(u < 0.5, -0.3 - 2.7 * u * 2, 0.3 + 2.7 * (u - 0.5) * 2)
    elif domain == "Frac":  # rounding: halves and quarters among them
        v = torch.floor((u - 0.5) * 12) / 4
    else:
        v = (u - 0.5) * 6
    return v.to(dtype)


def low_precision_cases():
    """The table's ops and the template ops in float32 and bfloat16 (PyTorch 1.13 on the CPU
    computes bfloat16 ops in float32 and rounds each op's result, as alk does)."""
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        for op in read_op_table():
            name, rule = op["name"], op["rule"]
            if rule in ("Logical", "Select", "Integer"):
                continue  # bool or integer operands: no floating dtype to vary
            fn = TORCH_EW[name]
            grad = rule not in ("Compare",)
            ins = [domain_values(op["domain"], 12, dtype).reshape(3, 4) for _ in range(op["arity"])]
            if name == "clamp":  # lo <= hi
                ins[1], ins[2] = torch.minimum(ins[1], ins[2]), torch.maximum(ins[1], ins[2])
            if name == "pow":  # a positive base (the float64 grid has the rest)
                ins[0] = ins[0].abs() + 0.25
            add_case("%s/%s" % (name, tag), "ew:" + name, ins, fn, no_grad=() if grad else (0, 1, 2))
        x = torch.randn(3, 6, dtype=dtype)
        a, b = torch.randn(2, 3, 17, dtype=dtype), torch.randn(17, 5, dtype=dtype)
        add_case("matmul/" + tag, "matmul", [a, b], torch.matmul)
        add_case("sum/" + tag, "sum", [x], lambda t: torch.sum(t, 1), {"axes": [1]})
        add_case("mean/" + tag, "mean", [x], lambda t: torch.mean(t, 0), {"axes": [0]})
        add_case("max/" + tag, "max", [x], lambda t: torch.amax(t, 1), {"axes": [1]})
        add_case("softmax/" + tag, "softmax", [x], lambda t: torch.softmax(t, 1), {"dim": 1})
        add_case("log_softmax/" + tag, "log_softmax", [x], lambda t: torch.log_softmax(t, 1), {"dim": 1})
        add_case("logsumexp/" + tag, "logsumexp", [x], lambda t: torch.logsumexp(t, 1), {"axes": [1]})


def module_call(module):
    """fn(x, *params) calling torch.nn `module` with the case's parameters (in module order)."""
    names = [n for n, _ in module.named_parameters()]

    def fn(x, *params):
        return torch.nn.utils.stateless.functional_call(module, dict(zip(names, params)), (x,))
    return fn


class SelfAttention(torch.nn.Module):
    """nn.MultiheadAttention as causal self-attention (alk's nn::CausalSelfAttention)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        t = x.shape[1]
        future = torch.ones(t, t, dtype=torch.bool).triu(1)  # True: not attended
        return self.mha(x, x, x, attn_mask=future, need_weights=False)[0]


def module_cases():
    """torch.nn modules, called with the case's parameters; the test runs alk's nn modules."""
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        def params(module):
            return [p.detach().to(dtype) for _, p in module.named_parameters()]

        lin = torch.nn.Linear(5, 4)
        add_case("nn.Linear/" + tag, "nn:Linear", [torch.randn(2, 3, 5, dtype=dtype)] + params(lin), module_call(lin))
        ln = torch.nn.LayerNorm(6)
        with torch.no_grad():  # not the identity affine map
            ln.weight.copy_(torch.randn(6))
            ln.bias.copy_(torch.randn(6))
        add_case("nn.LayerNorm/" + tag, "nn:LayerNorm", [torch.randn(4, 6, dtype=dtype) * 2 + 1] + params(ln),
                 module_call(ln), {"eps": ln.eps})
        emb = torch.nn.Embedding(7, 3)
        ids = torch.tensor([[1, 6, 1], [0, 1, 4]])
        add_case("nn.Embedding/" + tag, "nn:Embedding", [params(emb)[0], ids],
                 lambda w, i: torch.nn.utils.stateless.functional_call(emb, {"weight": w}, (i,)))
        conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
        add_case("nn.Conv2d/" + tag, "nn:Conv2d", [torch.randn(2, 4, 7, 6, dtype=dtype)] + params(conv),
                 module_call(conv), {"in": 4, "out": 6, "kernel": 3, "stride": 2, "padding": 1, "dilation": 1,
                                     "groups": 2})
        attn = SelfAttention(8, 2)
        add_case("nn.CausalSelfAttention/" + tag, "nn:CausalSelfAttention",
                 [torch.randn(2, 5, 8, dtype=dtype)] + params(attn), module_call(attn), {"dim": 8, "heads": 2})
        add_case("nn.GELU/" + tag, "nn:GELU", [torch.randn(3, 5, dtype=dtype) * 2], torch.nn.GELU())
        ce = torch.nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
        add_case("nn.CrossEntropyLoss/" + tag, "cross_entropy",
                 [torch.randn(5, 4, dtype=dtype) * 2, torch.tensor([1, 0, 3, -100, 2])], ce,
                 {"ignore_index": -100, "label_smoothing": 0.1})


def main():
    elementwise_cases()
    reduction_cases()
    template_cases()
    loss_and_layer_cases()
    low_precision_cases()
    module_cases()
    out = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/torch_parity.json")
    with open(out, "w") as f:
        f.write('{"torch": "%s", "cases": [\n' % torch.__version__)
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print("wrote %d cases to %s" % (len(cases), out))


if __name__ == "__main__":
    main()
