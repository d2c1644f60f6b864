"""im2col + GEMM of convolutions of 3 and 4 spatial dims, their columns packed from the
image by im2col.py (not element by element), against the evaluator on the host and on
x86-64-v3 (AVX2) and x86-64-v2 (SSE) targets."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.backends.cpu import im2col, parse_target
from aotc.backends.cpu.contraction import contraction_kind
from aotc.ir import ComputationBuilder, ConvDims, DType, Module, Op, Shape, Window

F32 = DType.F32
TARGETS = ["host", "x86_64:x86-64-v3", "x86_64:x86-64-v2"]

# x dims, w dims, stride, pad low, pad high, dilation, groups
CONVS = [
    # batch 2, odd sizes, padding on every dim
    ((2, 3, 5, 7, 9), (4, 3, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    # strides on every dim, uneven padding (a side cropped: negative pad high)
    ((1, 4, 6, 9, 11), (5, 4, 3, 3, 3), (2, 2, 2), (1, 0, 1), (0, -1, 1), (1, 1, 1), 1),
    # dilations, groups, a window of unequal extents
    ((1, 4, 7, 8, 9), (6, 2, 3, 2, 3), (1, 2, 1), (2, 0, 1), (2, 1, 2), (2, 1, 2), 2),
    # wide rows: panels of several vector parts, segments across row ends
    ((1, 3, 4, 10, 70), (16, 3, 1, 3, 3), (1, 1, 1), (0, 1, 1), (0, 1, 1), (1, 1, 1), 1),
    # a temporal window only (r2plus1d's), strided in space
    ((1, 5, 6, 9, 10), (7, 5, 3, 1, 1), (1, 2, 2), (1, 0, 0), (1, 0, 0), (1, 1, 1), 1),
    # 4 spatial dims
    ((1, 2, 3, 4, 5, 6), (3, 2, 2, 3, 2, 3), (1, 1, 2, 1), (1, 1, 0, 1), (0, 1, 1, 1),
     (1, 1, 1, 2), 1),
]  # fmt: skip


def _bias_relu(fb, x, w, bias, window, groups, rank, out):
    y = fb.convolution(x, w, window, ConvDims.nchw(rank), groups)
    y = fb.binary(Op.ADD, y, fb.broadcast(bias, (1,), out))
    return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), out))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_nd_convolution_with_bias_relu(check, fuse, rng, monkeypatch, target, case):
    xs, ws, stride, low, high, dilation, groups = CONVS[case]
    rank = len(stride)
    packed = []
    packer = im2col._packer

    def recording(ctx, cfg, width, geometry):
        packed.append(geometry.rank)
        return packer(ctx, cfg, width, geometry)

    monkeypatch.setattr(im2col, "_packer", recording)
    module = Module("convnd")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, xs))
    w = b.parameter(1, Shape(F32, ws))
    bias = b.parameter(2, Shape(F32, (ws[0],)))
    window = Window.make(ws[2:], stride, low, high, rhs_dilation=dilation)
    out = b.convolution(x, w, window, ConvDims.nchw(rank), groups).shape.dims

    def body(fb, p):
        return _bias_relu(fb, p[0], p[1], p[2], window, groups, rank, out)

    fused = fuse(b, [x, w, bias], body)
    b.build(fused, entry=True)
    inputs = [
        rng.standard_normal(xs).astype(np.float32),
        rng.standard_normal(ws).astype(np.float32),
        rng.standard_normal(ws[0]).astype(np.float32),
    ]
    compiled = check(module, inputs, rtol=1e-4, atol=1e-4, target=target)
    assert contraction_kind(parse_target(target), compiled.plan, fused) == "gemm"
    assert packed and set(packed) == {rank}, "columns packed by im2col.py"
