"""dot (general dimension numbers, mixed dtypes) and convolution (groups, dilation, layouts)."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.ir import ComputationBuilder, ConvDims, DotDims, DType, Module, Shape, Window
from aotc.ir.types import cast_array


def test_dot_forms(check, rng):
    module = Module("dot")
    b = ComputationBuilder(module, "main")
    a = b.parameter(0, Shape(DType.F32, (5, 7)))
    c = b.parameter(1, Shape(DType.F32, (7, 3)))
    batched_l = b.parameter(2, Shape(DType.F32, (4, 2, 6)))  # contract dim 1, batch dim 2
    batched_r = b.parameter(3, Shape(DType.F32, (3, 6, 4)))  # batch dim 1, contract dim 2
    v = b.parameter(4, Shape(DType.F32, (7,)))
    outputs = [
        b.dot(a, c, DotDims((), (), (1,), (0,))),
        b.dot(batched_l, batched_r, DotDims((2,), (1,), (0,), (2,))),
        b.dot(a, v, DotDims((), (), (1,), (0,))),
        b.dot(v, v, DotDims((), (), (0,), (0,))),
    ]
    b.build(b.tuple(outputs), entry=True)
    args = [
        rng.standard_normal(s).astype(np.float32)
        for s in [(5, 7), (7, 3), (4, 2, 6), (3, 6, 4), (7,)]
    ]
    got = check(module, args, rtol=1e-5, atol=1e-5).run(*args)
    np.testing.assert_allclose(got[0], args[0] @ args[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        got[1], np.einsum("kib,jbk->bij", args[2], args[3]), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    "in_dtype,out_dtype,rtol",
    [
        (DType.S8, DType.S32, 0),
        (DType.U8, DType.U8, 0),
        (DType.F16, DType.F16, 2e-3),
        (DType.BF16, DType.F32, 1e-5),
        (DType.F64, DType.F64, 1e-12),
        (DType.S64, DType.S64, 0),
    ],
    ids=lambda v: getattr(v, "text", str(v)),
)
def test_dot_dtypes(check, rng, in_dtype, out_dtype, rtol):
    module = Module("dotty")
    b = ComputationBuilder(module, "main")
    lhs = b.parameter(0, Shape(in_dtype, (3, 16)))
    rhs = b.parameter(1, Shape(in_dtype, (16, 4)))
    b.build(b.tuple([b.dot(lhs, rhs, DotDims((), (), (1,), (0,)), out_dtype)]), entry=True)
    if in_dtype.is_float:
        args = [cast_array(rng.uniform(-2, 2, s), in_dtype) for s in [(3, 16), (16, 4)]]
    else:
        args = [rng.integers(0, 40, s).astype(in_dtype.numpy) for s in [(3, 16), (16, 4)]]
    check(module, args, rtol=rtol, atol=rtol)


def _conv(b, lhs, rhs, window, dims, groups=1, batch_groups=1):
    from aotc.ir import Op

    return b.add(
        Op.CONVOLUTION,
        [lhs, rhs],
        window=window,
        conv=dims,
        feature_group_count=groups,
        batch_group_count=batch_groups,
    )


def test_convolutions(check, rng):
    module = Module("conv")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (2, 4, 9, 8)))  # NCHW
    w = b.parameter(1, Shape(DType.F32, (6, 4, 3, 3)))  # OIHW
    depthwise = b.parameter(2, Shape(DType.F32, (8, 1, 3, 3)))  # 4 groups, multiplier 2
    nhwc = b.parameter(3, Shape(DType.F32, (2, 7, 6, 3)))
    hwio = b.parameter(4, Shape(DType.F32, (2, 2, 3, 5)))
    nchw = ConvDims.nchw(2)
    outputs = [
        _conv(b, x, w, Window.make((3, 3), (1, 1), (1, 1), (1, 1)), nchw),
        _conv(b, x, w, Window.make((3, 3), (2, 3), (0, 2), (1, 0), rhs_dilation=(2, 1)), nchw),
        _conv(b, x, depthwise, Window.make((3, 3), (1, 2), (1, 1), (1, 1)), nchw, groups=4),
        # transposed-convolution form: base (lhs) dilation
        _conv(b, x, w, Window.make((3, 3), (1, 1), (2, 2), (2, 2), lhs_dilation=(2, 2)), nchw),
        # NHWC input, HWIO kernel, NHWC output
        _conv(
            b,
            nhwc,
            hwio,
            Window.make((2, 2), (1, 1)),
            ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2)),
        ),
    ]
    b.build(b.tuple(outputs), entry=True)
    shapes = [(2, 4, 9, 8), (6, 4, 3, 3), (8, 1, 3, 3), (2, 7, 6, 3), (2, 2, 3, 5)]
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = check(module, args, rtol=1e-5, atol=1e-5).run(*args)
    # the plain case against a direct numpy loop
    xp = np.pad(args[0], [(0, 0), (0, 0), (1, 1), (1, 1)])
    expected = np.zeros((2, 6, 9, 8), np.float32)
    for i in range(9):
        for j in range(8):
            patch = xp[:, :, i : i + 3, j : j + 3]
            expected[:, :, i, j] = np.einsum("nchw,ochw->no", patch, args[1])
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-5)


def test_convolution_batch_groups_and_1d(check, rng):
    module = Module("conv1d")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (4, 3, 10)))
    w = b.parameter(1, Shape(DType.F32, (6, 3, 3)))
    nc = ConvDims.nchw(1)
    outputs = [
        _conv(b, x, w, Window.make((3,), (2,), (1,), (0,)), nc),
        _conv(b, x, w, Window.make((3,)), nc, batch_groups=2),
    ]
    b.build(b.tuple(outputs), entry=True)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(4, 3, 10), (6, 3, 3)]]
    check(module, args, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "image, window",
    [
        ((1, 6, 7, 7), Window.make((3, 3), (1, 1), (1, 1), (1, 1))),  # ShuffleNet's 7x7
        ((2, 5, 14, 14), Window.make((3, 3), (2, 2), (1, 1), (1, 1))),  # strided
        ((1, 3, 9, 13), Window.make((3, 3), (2, 2), (2, 1), (2, 0), rhs_dilation=(2, 2))),
        ((1, 4, 6, 32), Window.make((5, 5), (1, 1), (2, 2), (2, 2))),  # 32 wide: one vector
        ((1, 2, 5, 3), Window.make((3, 3), (1, 1), (2, 2), (2, 2))),  # taps off both sides
        # wider than a vector: edge chunks, a loop of clean chunks, a partial last chunk
        ((1, 3, 11, 113), Window.make((3, 3), (1, 1), (1, 1), (1, 1))),
        ((2, 2, 13, 111), Window.make((3, 3), (2, 2), (1, 1), (1, 1))),  # strided, odd
        ((1, 3, 12, 70), Window.make((5, 5), (2, 2), (2, 2), (2, 2))),
        ((1, 2, 9, 67), Window.make((3, 3), (1, 1), (0, 2), (2, 0), rhs_dilation=(2, 2))),
        ((1, 5, 7, 7), Window.make((5, 5), (1, 1), (2, 2), (2, 2))),  # 7 wide: 8 lanes
        ((1, 3, 6, 40), Window.make((3, 3), (1, 1), (0, 0), (0, 0))),  # no padding
    ],
)
def test_depthwise_rows_as_vectors(check, rng, image, window):
    """Depthwise convolutions a vector of output columns at a time (masked loads per
    edge tap, a loop over the chunks every tap fills; strided windows through a
    shuffle), padding and dilation included, against the evaluator."""
    channels = image[1]
    module = Module("dwrow")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, image))
    w = b.parameter(1, Shape(DType.F32, (channels, 1, *window.size)))
    b.build(_conv(b, x, w, window, ConvDims.nchw(2), groups=channels), entry=True)
    args = [rng.standard_normal(s).astype(np.float32) for s in (image, (channels, 1, *window.size))]
    check(module, args, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "image, cout, window",
    [
        # stride 2, 28 and 20 output columns: 32-pixel panels span 2-3 output rows
        ((1, 5, 56, 56), 7, Window.make((3, 3), (2, 2), (1, 1), (1, 1))),
        ((1, 3, 40, 41), 4, Window.make((7, 7), (2, 2), (3, 3), (2, 3))),
        ((2, 6, 30, 30), 5, Window.make((1, 1), (2, 2))),  # strided pointwise
        ((1, 4, 18, 13), 3, Window.make((3, 3), (2, 2), (0, 1), (1, 0), rhs_dilation=(1, 2))),
        # stride 1 without padding: out_width != width, rows read one by one
        ((1, 4, 19, 23), 6, Window.make((3, 3), (1, 1))),
        # 7 output columns: a panel spans too many rows, gathered
        ((1, 4, 14, 14), 6, Window.make((3, 3), (2, 2), (1, 1), (1, 1))),
    ],
)
def test_convolution_panels_read_row_by_row(check, rng, image, cout, window):
    """Implicit im2col panels that cross output rows: each row's run read with a masked
    load (every other element at stride 2), or gathered when they span too many."""
    module = Module("rows")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, image))
    w = b.parameter(1, Shape(DType.F32, (cout, image[1], *window.size)))
    b.build(_conv(b, x, w, window, ConvDims.nchw(2)), entry=True)
    args = [
        rng.standard_normal(s).astype(np.float32) for s in (image, (cout, image[1], *window.size))
    ]
    check(module, args, rtol=1e-5, atol=1e-5)
