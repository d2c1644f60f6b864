"""aotc.compile_torch and aotc.compile_jax: a framework's model in, compiled in one call,
matching the framework's own outputs (rtol 1e-5, atol 1e-5)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import aotc
import aotc.frameworks
from aotc.errors import AotcError

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _torch_net():
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        """conv, batch norm, relu, a residual add, pooling, flatten, linear, softmax."""

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.norm = torch.nn.BatchNorm2d(8)
            self.head = torch.nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):
            y = torch.relu(self.norm(self.conv(x)))
            y = torch.nn.functional.max_pool2d(y + self.conv(x), 2)
            return torch.softmax(self.head(y.flatten(1)), -1), y.mean()

    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # batch norm statistics that are not the identity
        net.norm.running_mean.uniform_(-0.5, 0.5)
        net.norm.running_var.uniform_(0.5, 2.0)
    return torch, net


@pytest.mark.parametrize("dynamo", [None, False], ids=["dynamo first", "TorchScript"])
def test_compile_torch_matches_torch(dynamo):
    torch, net = _torch_net()
    x = torch.randn(2, 3, 8, 8)
    compiled = aotc.frameworks.compile_torch(net, (x,), dynamo=dynamo)
    assert [t.type_text for t in compiled.inputs] == ["f32[2,3,8,8]"]
    got = compiled.load().run([x.numpy()])
    with torch.no_grad():
        want = [t.numpy() for t in net.eval()(x)]
    assert len(got) == len(want)
    for have, expected in zip(got, want):
        np.testing.assert_allclose(have, expected, **TOLERANCE)


def test_compile_torch_says_why_an_export_failed():
    torch = pytest.importorskip("torch")

    class Data(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]  # a shape only the data gives, at no example size

    with pytest.raises(AotcError, match="torch could not export the module: TorchScript"):
        aotc.frameworks.compile_torch(Data(), ("not a tensor",), dynamo=False)


def test_compile_jax_matches_jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def mlp(params, x):
        (w1, b1), (w2, b2) = params
        h = jax.nn.gelu(x @ w1 + b1)
        return jax.nn.softmax(h @ w2 + b2), jnp.sum(h, axis=0)

    rng = np.random.default_rng(0)
    params = (
        (rng.standard_normal((16, 32), np.float32) / 4, rng.standard_normal(32, np.float32)),
        (rng.standard_normal((32, 4), np.float32) / 6, rng.standard_normal(4, np.float32)),
    )
    x = rng.standard_normal((5, 16), np.float32)
    compiled = aotc.compile_jax(mlp, params, x)
    assert compiled.name == "mlp"
    leaves = jax.tree_util.tree_leaves((params, x))  # the inputs: the arguments' leaves
    assert [t.type_text for t in compiled.inputs] == [
        f"f32{list(a.shape)}".replace(" ", "") for a in leaves
    ]
    got = compiled.load().run(leaves)
    for have, expected in zip(got, mlp(params, x)):
        np.testing.assert_allclose(have, np.asarray(expected), **TOLERANCE)


@pytest.mark.parametrize("package, call", [("torch", "compile_torch"), ("jax", "compile_jax")])
def test_without_the_framework_the_call_says_what_to_install(package, call, monkeypatch):
    monkeypatch.setitem(sys.modules, package, None)  # `import package` raises ImportError
    with pytest.raises(AotcError, match=rf"this needs {package}: pip install 'aotc\[{package}\]'"):
        getattr(aotc, call)(lambda x: x, (np.zeros(2, np.float32),))
