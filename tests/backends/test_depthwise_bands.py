"""Depthwise convolutions in bands of output rows (cpu/depthwise_bands.py): the row
bands and column tiles planned at compile time, and the kernels against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

from aotc.backends.cpu import parse_target
from aotc.backends.cpu.contraction import contraction_kind
from aotc.backends.cpu.depthwise_bands import LOOPED_BANDS, row_bands
from aotc.backends.cpu.row_chunks import RowChunks
from aotc.ir import ComputationBuilder, ConvDims, DType, Module, Op, Shape, Window

# host: AVX-512 here; x86-64-v3: AVX2's 16 registers; x86-64-v2: SSE without FMA
TARGETS = ["host", "x86_64:x86-64-v3", "x86_64:x86-64-v2"]


def _geometry(k, stride=1, pad=0, dilation=1, height=8):
    """The image fields row_bands reads, of a k x k window over a square image."""
    window = {"kh": k, "kw": k, "sh": stride, "sw": stride, "dh": dilation, "dw": dilation}
    return {**window, "ph": pad, "pw": pad, "height": height, "width": height}


def _inside(p, oh):
    """The kernel rows of output row `oh` that land inside the image."""
    top = oh * p["sh"] - p["ph"]
    return [kh for kh in range(p["kh"]) if 0 <= top + kh * p["dh"] < p["height"]]


@pytest.mark.parametrize(
    "p, out_height",
    [
        (_geometry(7, pad=3, height=56), 56),  # ConvNeXt: 3 rows each side reach padding
        (_geometry(7, pad=3, height=7), 7),  # every row reaches padding
        (_geometry(3, pad=5, height=6), 14),  # rows wholly in the padding: no kernel row
        (_geometry(7, pad=3, height=3), 3),  # a window taller than the image
        (_geometry(3, stride=2, pad=1, dilation=2, height=29), 14),
        (_geometry(5, stride=2, pad=2, height=56), 28),
    ],
)
@pytest.mark.parametrize("rows", [1, 3, 4])
def test_row_bands_cover_each_row_once_with_its_kernel_rows(p, out_height, rows):
    """Every output row in exactly one band, in order, with the kernel rows that land
    inside the image; loops only over runs of like rows, unrolled bands at most `rows`."""
    covered = []
    for bands in row_bands(p, out_height, rows):
        assert len(bands.live) <= rows
        if bands.count > 1:
            assert bands.count >= LOOPED_BANDS and len(bands.live) == rows
            assert len(set(bands.live)) == 1
        for t in range(bands.count):
            for r, live in enumerate(bands.live):
                oh = bands.first + t * len(bands.live) + r
                assert list(live) == _inside(p, oh), oh
                covered.append(oh)
    assert covered == list(range(out_height))


def test_long_interior_runs_loop():
    """ConvNeXt's 56 rows in bands of 4: the 50 interior rows as 12 looped bands."""
    bands = row_bands(_geometry(7, pad=3, height=56), 56, 4)
    looped = [b for b in bands if b.count > 1]
    assert [(b.first, b.count) for b in looped] == [(3, 12)]
    assert sum(len(b.live) for b in bands if b.count == 1) == 6 + 2


@pytest.mark.parametrize(
    "width, lanes, size",
    [(56, 16, 2), (56, 16, 4), (112, 16, 2), (7, 8, 2), (200, 16, 3), (40, 8, 1), (28, 16, 2)],
)
def test_row_chunk_tiles(width, lanes, size):
    """Tiles cover every chunk once: clean chunks up to `size` a tile (in the loop those
    that fill whole tiles), edge chunks alone with their masks."""
    chunks = RowChunks((-3, -2, -1, 0, 1, 2, 3), 1, width, width, lanes)
    function = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f")
    b = ir.IRBuilder(function.append_basic_block())
    tiles = []
    chunks.emit_tiles(b, size, tiles.append)
    begin, end = chunks.clean
    static, looped = [], 0
    for tile in tiles:
        assert 1 <= len(tile) <= size
        for ow0, masks, count in tile:
            if not isinstance(ow0, ir.Constant):  # the loop's tile: clean chunks only
                assert masks == [None] * 7 and count == lanes
                looped += 1
                continue
            c = ow0.constant // lanes
            static.append(c)
            assert (masks == [None] * 7) == (begin <= c < end)
            assert len(tile) == 1 or begin <= c < end
            assert count == min(lanes, width - c * lanes)
    loop_turns = (end - begin) // size if end - begin >= size else 0
    assert looped in (0, size)
    assert sorted(static) == static and len(set(static)) == len(static)
    assert len(static) + loop_turns * size == chunks.count


def _depthwise(b, x, w, window, groups):
    conv = {"window": window, "conv": ConvDims.nchw(2), "feature_group_count": groups}
    return b.add(Op.CONVOLUTION, [x, w], **conv)


def _reference(x, w, stride, pad_low, pad_high, dilation):
    """NCHW depthwise convolution in float64: shifted slices of the input per tap, the
    padding adding nothing (not weight x 0: NaN for an infinite weight)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x, [(0, 0), (0, 0), *zip(pad_low, pad_high)], constant_values=np.nan)
    kh, kw = w.shape[2:]
    out_h = (xp.shape[2] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    out_w = (xp.shape[3] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((x.shape[0], x.shape[1], out_h, out_w))
    for i in range(kh):
        for j in range(kw):
            top, left = i * dilation[0], j * dilation[1]
            patch = xp[:, :, top : top + stride[0] * out_h : stride[0]]
            patch = patch[:, :, :, left : left + stride[1] * out_w : stride[1]]
            with np.errstate(invalid="ignore"):
                out += np.where(np.isnan(patch), 0.0, patch * w[None, :, 0, i, j, None, None])
    return out


CASES = [
    # (image, window size, stride, pad low, pad high, dilation)
    ((1, 4, 56, 56), (7, 7), (1, 1), (3, 3), (3, 3), (1, 1)),  # ConvNeXt's stage 1
    ((2, 3, 14, 14), (7, 7), (1, 1), (3, 3), (3, 3), (1, 1)),  # one chunk per row
    ((1, 5, 7, 7), (7, 7), (1, 1), (3, 3), (3, 3), (1, 1)),  # every row reaches padding
    ((1, 2, 5, 5), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # narrower than a vector
    ((1, 2, 3, 4), (7, 7), (1, 1), (3, 3), (3, 3), (1, 1)),  # window over the whole image
    ((1, 3, 23, 37), (7, 7), (2, 2), (3, 3), (3, 3), (1, 1)),  # stride 2, odd sizes
    ((1, 2, 19, 45), (5, 5), (1, 1), (5, 4), (5, 6), (1, 1)),  # padding past the window
    ((1, 2, 17, 150), (3, 3), (1, 1), (3, 3), (3, 3), (3, 3)),  # dilated, a tile loop
    ((1, 3, 30, 201), (5, 5), (2, 1), (2, 0), (1, 2), (1, 2)),  # mixed strides, dilation
    ((1, 3, 16, 112), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),  # MobileNet's stride 2
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("image, size, stride, low, high, dilation", CASES)
def test_depthwise_bands_match_numpy(
    compile_module, rng, target, image, size, stride, low, high, dilation
):
    """Against a float64 numpy loop, 1e-5 relative to the largest output."""
    channels = image[1]
    module = Module("bands")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, image))
    w = b.parameter(1, Shape(DType.F32, (channels, 1, *size)))
    window = Window.make(size, stride, low, high, rhs_dilation=dilation)
    conv = _depthwise(b, x, w, window, channels)
    b.build(conv, entry=True)
    args = [rng.standard_normal(s).astype(np.float32) for s in (image, (channels, 1, *size))]
    compiled = compile_module(module, target=target)
    assert contraction_kind(parse_target(target), compiled.plan, conv) == "depthwise"
    expected = _reference(*args, stride, low, high, dilation)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(compiled.run(*args)[0], expected, rtol=1e-5, atol=1e-5 * scale)


def test_depthwise_bands_f64(check, rng):
    """f64 rows: 8 lanes a vector, the same bands."""
    module = Module("bands64")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F64, (1, 3, 20, 27)))
    w = b.parameter(1, Shape(DType.F64, (3, 1, 7, 7)))
    b.build(_depthwise(b, x, w, Window.make((7, 7), (1, 1), (3, 3), (3, 3)), 3), entry=True)
    args = [rng.standard_normal(s) for s in ((1, 3, 20, 27), (3, 1, 7, 7))]
    check(module, args, rtol=1e-12, atol=1e-12)


def test_depthwise_bands_with_an_epilogue(compile_module, fuse, rng):
    """ConvNeXt's 7x7 with its bias and a ReLU6 fused after it, on the finished plane."""
    shape = (1, 6, 28, 28)
    module = Module("bandsepi")
    b = ComputationBuilder(module, "main")
    params = [
        b.parameter(0, Shape(DType.F32, shape)),
        b.parameter(1, Shape(DType.F32, (6, 1, 7, 7))),
        b.parameter(2, Shape(DType.F32, (6,))),
    ]
    window = Window.make((7, 7), (1, 1), (3, 3), (3, 3))

    def body(fb, p):
        y = fb.convolution(p[0], p[1], window, ConvDims.nchw(2), 6)
        y = fb.binary(Op.ADD, y, fb.broadcast(p[2], (1,), shape))
        zero = fb.broadcast(fb.scalar(0.0, DType.F32), (), shape)
        six = fb.broadcast(fb.scalar(6.0, DType.F32), (), shape)
        return fb.binary(Op.MINIMUM, fb.binary(Op.MAXIMUM, y, zero), six)

    fused = fuse(b, params, body)
    b.build(fused, entry=True)
    args = [rng.standard_normal(s).astype(np.float32) for s in (shape, (6, 1, 7, 7), (6,))]
    compiled = compile_module(module)
    assert contraction_kind(parse_target("host"), compiled.plan, fused) == "depthwise"
    conv = _reference(args[0], args[1], (1, 1), (3, 3), (3, 3), (1, 1))
    expected = np.clip(conv + args[2][None, :, None, None], 0, 6)
    np.testing.assert_allclose(compiled.run(*args)[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_infinite_weights_never_meet_the_padding(compile_module, rng, target):
    """A corner tap of infinity: infinite outputs where it reads the image, finite ones
    where it reads padding (masked lanes add 0 x 0, never infinity x 0), in the edge
    chunks of wide rows and in rows narrower than a vector."""
    for image in ((1, 2, 9, 40), (1, 2, 6, 6)):
        module = Module("infw")
        b = ComputationBuilder(module, "main")
        x = b.parameter(0, Shape(DType.F32, image))
        w = b.parameter(1, Shape(DType.F32, (2, 1, 7, 7)))
        b.build(_depthwise(b, x, w, Window.make((7, 7), (1, 1), (3, 3), (3, 3)), 2), entry=True)
        args = [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in (image, (2, 1, 7, 7))]
        args[1][:, 0, 0, 6] = np.inf  # reads up and to the right: padding on two sides
        got = compile_module(module, target=target).run(*args)[0]
        expected = _reference(*args, (1, 1), (3, 3), (3, 3), (1, 1))
        assert np.isinf(expected).any() and np.isfinite(expected).any()
        np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_depthwise_bands_1d(check, rng):
    """A 1-d depthwise convolution: one output row a plane, kernel rows of one tap."""
    module = Module("bands1d")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (2, 4, 50)))
    w = b.parameter(1, Shape(DType.F32, (4, 1, 7)))
    conv = {"window": Window.make((7,), (1,), (3,), (3,)), "conv": ConvDims.nchw(1)}
    b.build(b.add(Op.CONVOLUTION, [x, w], feature_group_count=4, **conv), entry=True)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 50), (4, 1, 7))]
    compiled = check(module, args, rtol=1e-5, atol=1e-5)
    assert contraction_kind(parse_target("host"), compiled.plan, module.entry.root) == "depthwise"
