"""Winograd F(2x2, 3x3) rewrite of 3x3 stride-1 NCHW convolutions (passes/winograd.py).

The channel and size thresholds are patched down so that small convolutions take the
rewrite; results are compared with the evaluator on the module as written (rtol
1e-5 of the largest magnitude: the transforms reassociate the sums).
"""

from __future__ import annotations

import numpy as np
import pytest

from aotc.ir import ComputationBuilder, ConvDims, DType, Module, Op, Shape, Window
from aotc.ir.evaluate import evaluate
from aotc.ir.verify import verify
from aotc.passes import winograd
from aotc.passes.winograd import Winograd

F32 = DType.F32


@pytest.fixture
def small_thresholds(monkeypatch):
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 4)
    monkeypatch.setattr(winograd, "MIN_OUTPUT_SIZE", 2)


def _conv_module(x_dims, w_dims, low=(1, 1), high=(1, 1), stride=(1, 1), dilation=(1, 1),
                 groups=1, dtype=F32):  # fmt: skip
    module = Module("conv")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(dtype, x_dims))
    w = b.parameter(1, Shape(dtype, w_dims))
    window = Window.make(w_dims[2:], stride, low, high, rhs_dilation=dilation)
    b.build(b.convolution(x, w, window, ConvDims.nchw(2), groups), entry=True)
    return module


def _ops(module) -> list[Op]:
    return [i.op for i in module.entry.instructions]


# x dims, w dims, pad low, pad high: even and odd outputs, asymmetric and no padding,
# more outputs than inputs
CASES = [
    ((1, 4, 8, 8), (4, 4, 3, 3), (1, 1), (1, 1)),
    ((1, 5, 9, 7), (6, 5, 3, 3), (1, 1), (1, 1)),
    ((1, 4, 10, 11), (4, 4, 3, 3), (0, 2), (1, 0)),
    ((1, 6, 7, 9), (4, 6, 3, 3), (0, 0), (0, 0)),
    ((1, 4, 6, 6), (9, 4, 3, 3), (2, 2), (2, 2)),
]


@pytest.mark.parametrize("x_dims, w_dims, low, high", CASES)
def test_same_values_as_the_convolution(small_thresholds, x_dims, w_dims, low, high):
    module = _conv_module(x_dims, w_dims, low, high)
    reference = _conv_module(x_dims, w_dims, low, high)
    rng = np.random.default_rng(1)
    args = [rng.uniform(-2, 2, d).astype(np.float32) for d in (x_dims, w_dims)]
    assert Winograd().run(module)
    verify(module)
    assert Op.CONVOLUTION in _ops(module) and Op.DOT in _ops(module)  # depthwise V, then M
    (depthwise,) = [i for i in module.entry.instructions if i.op is Op.CONVOLUTION]
    assert depthwise.feature_group_count == x_dims[1] and depthwise.window.stride == (2, 2)
    got, want = np.asarray(evaluate(module, args)), np.asarray(evaluate(reference, args))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.max(np.abs(want)))


# not rewritten: stride 2, a 5x5 window, two groups, dilation, f64, two images, cropping
OTHERS = [
    {"x_dims": (1, 4, 8, 8), "w_dims": (4, 4, 3, 3), "stride": (2, 2)},
    {"x_dims": (1, 4, 8, 8), "w_dims": (4, 4, 5, 5)},
    {"x_dims": (1, 4, 8, 8), "w_dims": (4, 2, 3, 3), "groups": 2},
    {"x_dims": (1, 4, 8, 8), "w_dims": (4, 4, 3, 3), "dilation": (2, 2)},
    {"x_dims": (1, 4, 8, 8), "w_dims": (4, 4, 3, 3), "dtype": DType.F64},
    {"x_dims": (2, 4, 8, 8), "w_dims": (4, 4, 3, 3)},
    {"x_dims": (1, 4, 8, 8), "w_dims": (4, 4, 3, 3), "low": (-1, 0)},
]


@pytest.mark.parametrize("spec", OTHERS)
def test_other_convolutions_are_left_alone(small_thresholds, spec):
    module = _conv_module(**spec)
    assert not Winograd().run(module)
    assert _ops(module).count(Op.CONVOLUTION) == 1 and Op.DOT not in _ops(module)


def test_few_channels_or_small_outputs_keep_the_direct_form():
    """The default thresholds: 256 channels, or 512 at 7x7, are not worth the transforms."""
    for x_dims, w_dims in [
        ((1, 256, 14, 14), (256, 256, 3, 3)),
        ((1, 512, 7, 7), (512, 512, 3, 3)),
    ]:
        module = _conv_module(x_dims, w_dims)
        assert not Winograd().run(module)
    assert Winograd().run(_conv_module((1, 512, 14, 14), (512, 512, 3, 3)))


def test_compiled_with_bias_relu_and_constant_weights(small_thresholds, tmp_path):
    """The whole pipeline: the kernel's transform folded into constants, the depthwise
    input transform, the batched GEMM, the output transform with the bias and relu;
    the numbers those of the convolution as written."""
    import aotc
    from aotc.ir.text import print_module
    from aotc.runner import LoadedModel

    rng = np.random.default_rng(2)
    weights = rng.uniform(-1, 1, (12, 8, 3, 3)).astype(np.float32)
    bias = rng.uniform(-1, 1, (12,)).astype(np.float32)
    module = Module("wino")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (1, 8, 15, 16)))
    window = Window.make((3, 3), (1, 1), (1, 1), (1, 1))
    y = b.convolution(x, b.constant(weights), window, ConvDims.nchw(2))
    y = b.binary(Op.ADD, y, b.broadcast(b.constant(bias), (1,), (1, 12, 15, 16)))
    y = b.binary(Op.MAXIMUM, y, b.broadcast(b.scalar(0.0, F32), (), (1, 12, 15, 16)))
    b.build(y, entry=True)
    path = tmp_path / "wino.hlo"
    path.write_text(print_module(module))
    compiled = aotc.compile(path)
    ops = [i.op for k in compiled.module.entry.instructions
           for i in (k.called[0].instructions if k.called else [k])]  # fmt: skip
    assert Op.DOT in ops and ops.count(Op.CONVOLUTION) == 1  # the depthwise transform
    image = rng.uniform(-2, 2, (1, 8, 15, 16)).astype(np.float32)
    got = LoadedModel(compiled).run([image])[0]
    want = np.asarray(evaluate(module, [image]))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))
