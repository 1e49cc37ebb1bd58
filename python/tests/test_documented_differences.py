"""Every place docs/pytorch.md says alk differs from PyTorch has a test proving the documented
behaviour: each row of its two tables ("Deliberate differences", "What still differs") names,
in DIFFERENCES below, the test that checks it (here, in another test file, a C++ test, or a
case of the PyTorch parity fixture that carries alk's own answer), and a row without one fails
test_every_documented_difference_has_a_test. The rows no other test covered are tested here."""
import io
import json
import os
import pickle
import re

import pytest

import alk
from conftest import this_line

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = "python/tests/test_documented_differences.py"

# The start of a row's first cell -> where it is checked: "path::test_function" (pytest),
# "path::Suite.Name" (a C++ test), "tests/fixtures/torch_parity.json::case" (a case marked
# "differs", whose alk answer TorchParity.EveryCaseMatches checks), or "not a behaviour: why".
DIFFERENCES = {
    # Deliberate differences (the C++ API and the ops)
    "`clamp(x, lo, hi)` gradient": "tests/fixtures/torch_parity.json::clamp/edges",
    "`softsign` gradient": "tests/fixtures/torch_parity.json::softsign/edges",
    "`max_pool2d` window with several NaN": "tests/fixtures/torch_parity.json::max_pool2d/nans",
    "errors": "tests/core/test_errors.cpp::ErrorsPublicApi.EveryEntryNamesTheOpTheValuesAndTheCallersLine",
    # What still differs (the Python API)
    "views made inside C++": HERE + "::test_views_made_inside_cpp_do_not_follow_writes",
    "a view held across a write made by C++": HERE + "::test_a_view_misses_a_write_made_by_unwrapped_cpp",
    "`numpy()` of a tensor": "python/tests/test_nn.py::test_optimizer_updates_in_place_but_earlier_arrays_keep_their_values",
    "`sort`, `argsort`, `topk`": "python/tests/test_pytorch_conformance.py::test_sort_topk_argsort",
    "`register_hook`, `retain_grad` on a tensor already used":
        "python/tests/test_pytorch_conformance.py::test_hook_after_use_and_on_leaf_raise",
    "`register_hook` on a leaf": "python/tests/test_pytorch_conformance.py::test_hook_after_use_and_on_leaf_raise",
    "`backward(create_graph=True)`": HERE + "::test_backward_create_graph_and_inputs_raise",
    "`backward(retain_graph=True)`":
        "python/tests/test_pytorch_conformance.py::test_second_backward_raises_like_torch_without_retain_graph",
    "optimizer options other than `lr`": HERE + "::test_optimizer_options_fixed_at_construction",
    "`OneCycleLR(cycle_momentum=True)`": HERE + "::test_optimizer_options_fixed_at_construction",
    "`state_dict()` of an optimizer with several param groups": HERE + "::test_optimizer_options_fixed_at_construction",
    "`add_param_group`": HERE + "::test_optimizer_options_fixed_at_construction",
    "assigning a Parameter to a composite built-in layer": HERE + "::test_parameter_assigned_to_a_native_layer_raises",
    "`Conv2d`/`MaxPool2d`/`AvgPool2d` with non-square": HERE + "::test_unsupported_layer_and_function_options_raise",
    "`F.interpolate` modes": HERE + "::test_unsupported_layer_and_function_options_raise",
    "`F.pad` modes": HERE + "::test_unsupported_layer_and_function_options_raise",
    "`F.scaled_dot_product_attention`":
        "python/tests/test_pytorch_conformance.py::test_scaled_dot_product_attention_defaults",
    "`torch.save`/`torch.load`": HERE + "::test_save_takes_paths_and_writes_safetensors",
    "pickle of two views of one tensor": HERE + "::test_pickled_views_come_back_with_their_own_values",
    "`DataLoader(num_workers>0)`": HERE + "::test_unsupported_layer_and_function_options_raise",
    "a shape argument of the wrong type":
        "python/tests/test_pytorch_conformance.py::test_wrong_arguments_name_the_argument_and_the_line",
    "the cost of a Python call": "not a behaviour: a cost (tests never assert speed)",
    "`optimizer.state_dict()`": HERE + "::test_state_dict_layouts",
    "`module.state_dict()` values": HERE + "::test_state_dict_layouts",
    "`repr(tensor)`": HERE + "::test_repr_names_alks_dtype",
}


def documented_rows():
    """The first cell of every row of docs/pytorch.md's difference tables."""
    text = open(os.path.join(ROOT, "docs/pytorch.md")).read()
    rows = []
    for heading in ("## Deliberate differences", "### What still differs"):
        section = text[text.index(heading):]
        table = re.search(r"\n\|.*\|\n\|[-| ]+\|\n((?:\|.*\|\n?)+)", section)
        rows += [line.split(" | ")[0].lstrip("| ").strip() for line in table.group(1).splitlines()]
    return rows


def test_every_documented_difference_has_a_test():
    rows = documented_rows()
    assert len(rows) >= 25, rows  # both tables were found
    fixture = {c["name"]: c for c in json.load(open(os.path.join(ROOT, "tests/fixtures/torch_parity.json")))["cases"]}
    for row in rows:
        keys = [k for k in DIFFERENCES if row.startswith(k)]
        assert len(keys) == 1, f"docs/pytorch.md row {row!r} names no test in DIFFERENCES (or several)"
        where = DIFFERENCES[keys[0]]
        if where.startswith("not a behaviour: "):
            continue
        path, name = where.split("::")
        if path.endswith(".json"):
            assert "differs" in fixture[name] and "alk_grads" in fixture[name], f"{row}: {name} carries no alk answer"
        elif path.endswith(".cpp"):
            suite, test = name.split(".")
            assert f"TEST({suite}, {test})" in open(os.path.join(ROOT, path)).read(), f"{row}: no {name} in {path}"
        else:
            assert re.search(rf"^def {name}\(", open(os.path.join(ROOT, path)).read(), re.M), f"{row}: no {name}"
    assert all(any(r.startswith(k) for r in rows) for k in DIFFERENCES), "a DIFFERENCES entry names no row"


def test_views_made_inside_cpp_do_not_follow_writes():
    # PyTorch's diagonal() is a view: it sees a later write to the base. alk's is made in
    # C++ (not one of the view methods the bindings track): it keeps the values.
    x = alk.zeros(3, 3)
    d = x.diagonal()
    v = x.t()  # a view made from Python follows
    x.add_(1.0)
    assert d.tolist() == [0.0, 0.0, 0.0]
    assert v.tolist() == [[1.0] * 3] * 3


def test_a_view_misses_a_write_made_by_unwrapped_cpp():
    # alk.nn.init wraps the C++ initializers and tells the views; the raw C++ one does not.
    w = alk.zeros(2, 3)
    row = w[0]
    alk._C.nn.init.ones_(w)
    assert w.tolist() == [[1.0] * 3] * 2
    assert row.tolist() == [0.0] * 3
    alk.nn.init.zeros_(w)
    assert row.tolist() == [0.0] * 3 and w[1].tolist() == [0.0] * 3
    alk.nn.init.ones_(w)
    assert row.tolist() == [1.0] * 3


def test_backward_create_graph_and_inputs_raise():
    x = alk.randn(3, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"alk\.grad\(create_graph=True\)"):
        (x * x).sum().backward(create_graph=True)
    with pytest.raises(NotImplementedError, match="inputs"):
        (x * x).sum().backward(inputs=[x])


def test_optimizer_options_fixed_at_construction():
    p, q = alk.nn.Parameter(alk.randn(2)), alk.nn.Parameter(alk.randn(2))
    sgd = alk.optim.SGD([p], lr=0.1, momentum=0.9)
    with pytest.raises(NotImplementedError, match="'momentum' cannot change"):
        sgd.param_groups[0]["momentum"] = 0.5
    sgd.param_groups[0]["lr"] = 0.05  # lr can
    before = p.tolist()
    (p * p).sum().backward()
    sgd.step()
    assert p.tolist() == pytest.approx([b - 0.05 * 2 * b for b in before], rel=1e-6)
    with pytest.raises(NotImplementedError, match="cycle_momentum=False"):
        alk.optim.lr_scheduler.OneCycleLR(sgd, max_lr=0.2, total_steps=8)
    alk.optim.lr_scheduler.OneCycleLR(sgd, max_lr=0.2, total_steps=8, cycle_momentum=False)
    with pytest.raises(NotImplementedError, match="pass every group to the constructor"):
        sgd.add_param_group({"params": [q]})
    two = alk.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.01}], lr=0.1)
    with pytest.raises(NotImplementedError, match="several param groups"):
        two.state_dict()


def test_parameter_assigned_to_a_native_layer_raises():
    # A composite layer's parameters live in its C++ layer (named "fc.weight", ...): an
    # assignment is refused, naming the layer and the caller's line, never silently unused.
    for layer in (alk.nn.MLP(4, 8), alk.nn.CausalSelfAttention(8, 2)):
        name = next(n for n, _ in layer.named_parameters())
        with pytest.raises(RuntimeError, match=rf"{type(layer).__name__}: its forward runs alk's C\+\+ layer") as err:
            where = this_line(1)
            setattr(layer, name, alk.nn.Parameter(alk.randn(2)))
        assert where in str(err.value)
    mlp = alk.nn.MLP(4, 8)
    with pytest.raises(AttributeError):  # the C++ Linear inside has no setter either
        mlp.fc.weight = alk.nn.Parameter(alk.randn(8, 4))
    lin = alk.nn.Linear(4, 3)  # computes forward from its attributes: assignment works
    lin.weight = alk.nn.Parameter(alk.zeros(3, 4))
    assert lin(alk.ones(1, 4)).tolist() == [lin.bias.tolist()]


def test_unsupported_layer_and_function_options_raise():
    F = alk.nn.functional
    for make in (lambda: alk.nn.Conv2d(2, 3, (3, 5)), lambda: alk.nn.MaxPool2d((2, 3)), lambda: alk.nn.AvgPool2d((2, 3))):
        with pytest.raises(NotImplementedError, match="square kernel_size only"):
            make()
    assert tuple(alk.nn.Conv2d(2, 3, (3, 3))(alk.randn(1, 2, 5, 5)).shape) == (1, 3, 3, 3)  # square tuples work
    with pytest.raises(NotImplementedError, match="only mode='nearest'"):
        F.interpolate(alk.randn(1, 1, 4, 4), scale_factor=2, mode="bilinear")
    with pytest.raises(NotImplementedError, match="whole-number scale factors"):
        F.interpolate(alk.randn(1, 1, 4, 4), scale_factor=1.5)
    with pytest.raises(NotImplementedError, match="only mode='constant'"):
        F.pad(alk.randn(1, 2, 4), (1, 1), mode="reflect")
    data = alk.utils.data.TensorDataset(alk.randn(4, 2))
    with pytest.raises(NotImplementedError, match="num_workers"):
        alk.utils.data.DataLoader(data, batch_size=2, num_workers=2)
    with pytest.raises(NotImplementedError, match="alk.manual_seed seeds the shuffle"):
        alk.utils.data.DataLoader(data, batch_size=2, generator=object())


def test_save_takes_paths_and_writes_safetensors(tmp_path):
    state = {"w": alk.arange(4.0), "meta": {"n": 3, "name": "x", "none": None}, "items": [alk.ones(2), 1.5]}
    with pytest.raises(TypeError, match="writes to a path") as err:
        where = this_line(1)
        alk.save(state, io.BytesIO())
    assert where in str(err.value)
    path = tmp_path / "state.safetensors"
    alk.save(state, path)
    raw = path.read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])  # a safetensors header: tensors + metadata
    assert "__metadata__" in header and sum("data_offsets" in v for k, v in header.items() if k != "__metadata__") == 2
    back = alk.load(path)
    assert back["w"].tolist() == [0.0, 1.0, 2.0, 3.0] and back["meta"] == {"n": 3, "name": "x", "none": None}
    assert back["items"][0].tolist() == [1.0, 1.0] and back["items"][1] == 1.5


def test_pickled_views_come_back_with_their_own_values():
    base = alk.arange(6.0)
    a, b = pickle.loads(pickle.dumps((base[:3], base[1:4])))
    a[1] = 100.0  # in PyTorch b[0] would see it (one storage)
    assert a.tolist() == [0.0, 100.0, 2.0] and b.tolist() == [1.0, 2.0, 3.0]


def test_state_dict_layouts():
    lin = alk.nn.Linear(2, 3)
    sd = lin.state_dict()
    assert sd["weight"] is lin.weight and sd["weight"].requires_grad  # the parameters themselves
    opt = alk.optim.Adam(lin.parameters(), lr=0.1)
    lin(alk.randn(1, 2)).sum().backward()
    opt.step()
    keys = sorted(opt.state_dict().keys())
    assert "step" in keys and "state" not in keys and "param_groups" not in keys, keys
    assert all(k == "step" or re.fullmatch(r"\w+\.(exp_avg|exp_avg_sq|step)", k) for k in keys), keys
    again = alk.optim.Adam(lin.parameters(), lr=0.1)
    again.load_state_dict(opt.state_dict())  # alk's layout, which alk reads
    assert sorted(again.state_dict().keys()) == keys


def test_repr_names_alks_dtype():
    assert "dtype=f64" in repr(alk.zeros(2, dtype=alk.float64))
    assert "torch" not in repr(alk.zeros(2, dtype=alk.float64))
