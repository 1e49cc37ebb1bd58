"""alk.remote: ops called by name on a server (alk.serve_ops, in this process, on 127.0.0.1),
the remote device from Python, and refusals; results equal the local CPU's bit for bit."""
import numpy as np
import pytest

import alk

TOKEN = "python-test-token-0123456789"


@pytest.fixture
def server(tmp_path, monkeypatch):
    if not hasattr(alk._C, "_RemoteServer"):
        pytest.fail("alk was built without gRPC (make deps installs libgrpc++-dev)")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    monkeypatch.setenv("ALK_REMOTE_TOKEN_FILE", str(token_file))
    s = alk.serve_ops([TOKEN])
    yield s
    s.shutdown()


def test_ops_are_called_by_name_on_the_peer(server):
    peer = alk.remote(f"127.0.0.1:{server.port}")
    alk.manual_seed(3)
    a, b = alk.randn(5, 7), alk.randn(7, 3)
    assert np.array_equal(peer.call("matmul", a, b).numpy(), (a @ b).numpy())
    assert np.array_equal(peer.call("softmax", a, dim=-1).numpy(), alk.softmax(a, -1).numpy())
    assert np.array_equal(peer.call("sum", a, axes=[1], keepdim=True).numpy(), a.sum(1, keepdim=True).numpy())
    specs = peer.ops()
    assert any(op["name"] == "layer_norm" for op in specs["ops"])
    assert peer.describe("matmul")["$schema"].startswith("https://json-schema.org/")
    with pytest.raises(RuntimeError, match="softmax"):
        peer.call("softmax", a)  # dim is required


def test_the_remote_device_runs_programs_with_the_cpus_bits(server):
    dev = f"remote:127.0.0.1:{server.port}/cpu"
    alk.manual_seed(4)
    x = alk.randn(16, 8)
    w = alk.randn(8, 4, requires_grad=True)
    wr = w.detach().to(dev).requires_grad_()
    local = alk.gelu(x @ w).sum()
    far = alk.gelu(x.to(dev) @ wr).sum()
    local.backward()
    far.backward()
    assert far.item() == local.item()
    assert np.array_equal(wr.grad.to("cpu").numpy(), w.grad.numpy())


def test_a_wrong_token_is_refused(server, tmp_path, monkeypatch):
    bad = tmp_path / "bad"
    bad.write_text("not-the-token-0123456789\n")
    monkeypatch.setenv("ALK_REMOTE_TOKEN_FILE", str(bad))
    with pytest.raises(RuntimeError, match="token"):
        alk.remote(f"127.0.0.1:{server.port}").call("relu", alk.ones(2))
