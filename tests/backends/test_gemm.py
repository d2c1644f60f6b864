"""GEMM-based dot and convolution kernels (gemm.py, contraction.py, dot.py, conv.py).

Each case is compiled for the host and for x86-64-v2 (SSE only, no FMA), run
on random inputs, and compared with numpy in float64 (rtol 1e-4, atol 1e-4 of
the largest magnitude); `contraction_kind` checks which path computed it, so
a case cannot pass by falling back to the element rules unnoticed.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from aotc_testing import parsed_dot_fusion

from aotc.backends.cpu import emit_llvm_ir, emit_object, parse_target
from aotc.backends.cpu.blocking import blocking
from aotc.backends.cpu.contraction import contraction_kind
from aotc.backends.cpu.gemm_config import gemm_config
from aotc.backends.cpu.tiles import edge_form, fuses_edge
from aotc.buffers import assign_buffers
from aotc.ir import ComputationBuilder, ConvDims, DotDims, DType, Module, Op, Shape, Window
from aotc.ir.text import parse_module

TARGETS = ["host", "x86_64:x86-64-v2"]
# the AVX2 tiles run here too (the shape tests only)
ALL_TARGETS = [*TARGETS, "x86_64:x86-64-v3"]
F32 = DType.F32


def _close(got, expected, what="", rtol=1e-4):
    expected = np.asarray(expected, np.float64)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * scale, err_msg=what)


def _kind(compiled, target: str, instr) -> str | None:
    return contraction_kind(parse_target(target), compiled.plan, instr)


def _normal(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _dot(b, x, y, lhs_contracting=(1,), rhs_contracting=(0,), lhs_batch=(), rhs_batch=()):
    return b.dot(x, y, DotDims(lhs_batch, rhs_batch, lhs_contracting, rhs_contracting))


def _matrix_pairs(b, rng, shapes):
    """Parameters x [M, K] and y [K, N] per (M, N, K) of `shapes`, and random values
    for them in parameter order."""
    pairs, args = [], []
    for i, (m, n, k) in enumerate(shapes):
        pairs.append(
            (b.parameter(2 * i, Shape(F32, (m, k))), b.parameter(2 * i + 1, Shape(F32, (k, n))))
        )
        args += [_normal(rng, (m, k)), _normal(rng, (k, n))]
    return pairs, args


# -- dot -------------------------------------------------------------------------

# (M, N, K) -> the path expected: M == 1 or N == 1 without packing, else the GEMM
DOT_SHAPES = {
    (1, 1, 1): "gemv.axpy",
    (7, 13, 17): "gemm",
    (1, 33, 40): "gemv.axpy",
    (45, 1, 29): "gemv.dot",
    (43, 1, 300): "gemv.dot",
    (5, 37, 1): "gemm",
    (12, 32, 64): "gemm",
    (13, 33, 385): "gemm",
    (256, 512, 300): "gemm",
}


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_dot_shapes(compile_module, rng, target):
    module = Module("dots")
    b = ComputationBuilder(module, "main")
    pairs, args = _matrix_pairs(b, rng, DOT_SHAPES)
    outputs = [_dot(b, x, y) for x, y in pairs]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module, target=target)
    got = compiled.run(*args)
    for i, shape in enumerate(DOT_SHAPES):
        _close(got[i], args[2 * i].astype(np.float64) @ args[2 * i + 1], str(shape))
    assert [_kind(compiled, target, o) for o in outputs] == list(DOT_SHAPES.values())
    assert compiled.plan.workspace_bytes > 0


@pytest.mark.parametrize("target", TARGETS)
def test_dot_layouts(compile_module, rng, target):
    """Transposed operands, batch dims anywhere, several free or contracting dims."""
    cases = [
        # (lhs dims, rhs dims, DotDims, einsum of the same contraction)
        ((19, 11), (19, 23), DotDims((), (), (0,), (0,)), "km,kn->mn"),
        ((11, 19), (23, 19), DotDims((), (), (1,), (1,)), "mk,nk->mn"),
        ((1, 19), (23, 19), DotDims((), (), (1,), (1,)), "mk,nk->mn"),  # gemv.dot
        ((17, 3, 9), (3, 10, 17), DotDims((1,), (0,), (0,), (2,)), "kbm,bnk->bmn"),
        ((2, 3, 21), (21, 4, 5), DotDims((), (), (2,), (0,)), "abk,kcd->abcd"),
        ((9, 3, 4), (3, 4, 14), DotDims((), (), (1, 2), (0, 1)), "mij,ijn->mn"),
        # contracting dims that do not merge: packed through the generator
        ((5, 9, 6), (5, 6, 7), DotDims((), (), (0, 2), (0, 1)), "imj,ijn->mn"),
    ]
    module = Module("layouts")
    b = ComputationBuilder(module, "main")
    outputs, args = [], []
    for i, (lhs, rhs, dims, _) in enumerate(cases):
        x = b.parameter(2 * i, Shape(F32, lhs))
        y = b.parameter(2 * i + 1, Shape(F32, rhs))
        outputs.append(b.dot(x, y, dims))
        args += [_normal(rng, lhs), _normal(rng, rhs)]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module, target=target)
    got = compiled.run(*args)
    for i, case in enumerate(cases):
        expected = np.einsum(case[3], args[2 * i].astype(np.float64), args[2 * i + 1])
        _close(got[i], expected, case[3])
    kinds = [_kind(compiled, target, o) for o in outputs]
    assert kinds == ["gemm", "gemm", "gemv.dot", "gemm", "gemm", "gemm", "gemm"]


@pytest.mark.parametrize("target", TARGETS)
def test_dot_epilogues(compile_module, fuse, rng, target):
    """bias + relu, a residual computed in place over the output, a narrower output
    type, fused transpose/convert/broadcast operands, two dots summed, matrix-vector
    with epilogue."""
    module = Module("epi")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (37, 70)))
    w = b.parameter(1, Shape(F32, (70, 45)))
    bias = b.parameter(2, Shape(F32, (45,)))
    r = b.parameter(3, Shape(F32, (37, 45)))
    wt = b.parameter(4, Shape(F32, (45, 70)))
    h = b.parameter(5, Shape(DType.F16, (70, 45)))
    v = b.parameter(6, Shape(F32, (70,)))
    row = b.parameter(7, Shape(F32, (1, 70)))

    def bias_relu(fb, p):
        y = fb.binary(Op.ADD, _dot(fb, p[0], p[1]), fb.broadcast(p[2], (1,), (37, 45)))
        return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), (37, 45)))

    def residual(fb, p):
        return fb.binary(Op.ADD, _dot(fb, p[0], p[1]), p[2])

    def to_f16(fb, p):
        return fb.convert(_dot(fb, p[0], p[1]), DType.F16)

    def transposed(fb, p):  # a fused transpose: read from memory with swapped strides
        return _dot(fb, p[0], fb.transpose(p[1], (1, 0)))

    def widened(fb, p):  # a fused convert: packed through the generator
        return _dot(fb, p[0], fb.convert(p[1], F32))

    def two_dots(fb, p):
        return fb.binary(Op.ADD, transposed(fb, p[:2]), widened(fb, [p[0], p[2]]))

    def broadcast_lhs(fb, p):
        return _dot(fb, fb.broadcast(p[0], (1,), (37, 70)), p[1])

    def vector_bias(fb, p):
        y = fb.binary(Op.ADD, _dot(fb, p[0], p[1]), fb.reshape(p[2], (1, 45)))
        return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), (1, 45)))

    staged = b.unary(Op.EXP, r)  # an arena value that dies at the fusion: reused in place
    fused = [
        fuse(b, [x, w, bias], bias_relu),
        fuse(b, [x, w, staged], residual),
        fuse(b, [x, w], to_f16),
        fuse(b, [x, wt], transposed),
        fuse(b, [x, h], widened),
        fuse(b, [x, wt, h], two_dots),
        fuse(b, [v, w], broadcast_lhs),
        fuse(b, [row, w, bias], vector_bias),
    ]
    # the residual's result feeds another kernel, so it stays in the arena
    outputs = [fused[0], b.unary(Op.NEGATE, fused[1]), *fused[2:]]
    b.build(b.tuple(outputs), entry=True)
    args = [
        _normal(rng, (37, 70)),
        _normal(rng, (70, 45)),
        _normal(rng, (45,)),
        _normal(rng, (37, 45)) * 0.5,
        _normal(rng, (45, 70)),
        _normal(rng, (70, 45), np.float16),
        _normal(rng, (70,)),
        _normal(rng, (1, 70)),
    ]
    compiled = compile_module(module, target=target)
    assert compiled.plan.slice_of(fused[1]) == compiled.plan.slice_of(staged)
    got = compiled.run(*args)
    xd, wd = args[0].astype(np.float64), args[1].astype(np.float64)
    _close(got[0], np.maximum(xd @ wd + args[2], 0), "bias relu")
    _close(got[1], -(xd @ wd + np.exp(args[3].astype(np.float64))), "residual in place")
    _close(got[2], xd @ wd, "f16 output", rtol=2e-3)
    transposed_product = xd @ args[4].T.astype(np.float64)
    widened_product = xd @ args[5].astype(np.float64)
    _close(got[3], transposed_product, "fused transpose")
    _close(got[4], widened_product, "fused convert", rtol=2e-3)
    _close(got[5], transposed_product + widened_product, "two dots", rtol=2e-3)
    _close(got[6], np.broadcast_to(args[6].astype(np.float64), (37, 70)) @ wd, "broadcast")
    _close(got[7], np.maximum(args[7].astype(np.float64) @ wd + args[2], 0), "gemv epilogue")
    kinds = [_kind(compiled, target, f) for f in fused]
    # two dots summed in one fusion (a ResNet shortcut block): both GEMMs, the first
    # one's values in the workspace
    assert kinds == ["gemm"] * 7 + ["gemv.axpy"]


PARSED_DOT_FUSION = parsed_dot_fusion(6, 40, 24)


def test_a_parsed_fusions_recorded_kind_is_not_trusted(check, rng):
    """The kernel follows the fusion's body (aotc/ir/fusion_kinds.py): a GEMM."""
    module = parse_module(PARSED_DOT_FUSION)
    args = [_normal(rng, (6, 40)), _normal(rng, (40, 24)), _normal(rng, (6, 24))]
    compiled = check(module, args, rtol=1e-4, atol=1e-4)
    assert _kind(compiled, "host", module.entry.root) == "gemm"


# -- convolution -------------------------------------------------------------------


def _conv_reference(x, w, stride, pad_low, pad_high, dilation, groups):
    """NCHW x OIHW -> NCHW, in float64, by summing shifted slices per tap."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    pads = [(0, 0), (0, 0)] + list(zip(pad_low, pad_high))
    xp = np.pad(x, pads)
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    out_h = (xp.shape[2] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    out_w = (xp.shape[3] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    og = o // groups
    out = np.zeros((n, o, out_h, out_w))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                top, left = i * dilation[0], j * dilation[1]
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    top : top + stride[0] * (out_h - 1) + 1 : stride[0],
                    left : left + stride[1] * (out_w - 1) + 1 : stride[1],
                ]
                out[:, g * og : (g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * og : (g + 1) * og, :, i, j]
                )
    return out


# x dims, w dims, stride, pad low, pad high, dilation, groups, expected path
CONVS = [
    ((2, 4, 9, 8), (6, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "gemm"),
    ((1, 3, 17, 19), (5, 3, 3, 3), (2, 2), (1, 0), (0, 1), (1, 1), 1, "gemm"),
    ((1, 4, 12, 11), (3, 4, 3, 3), (1, 1), (2, 2), (2, 2), (2, 2), 1, "gemm"),
    ((2, 6, 7, 7), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2, "gemm"),
    ((1, 8, 10, 9), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 8, "depthwise"),
    ((2, 4, 9, 8), (8, 1, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 4, "depthwise"),
    ((2, 16, 7, 5), (12, 16, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1, "gemm"),
    ((1, 8, 9, 9), (4, 8, 1, 1), (2, 2), (0, 0), (0, 0), (1, 1), 1, "gemm"),
    ((1, 3, 8, 10), (4, 3, 1, 5), (1, 1), (0, 2), (0, 2), (1, 1), 1, "gemm"),
    ((1, 32, 28, 28), (64, 32, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "gemm"),
    ((1, 5, 20, 70), (8, 5, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "gemm"),
    ((1, 3, 32, 32), (8, 3, 7, 7), (2, 2), (3, 3), (3, 3), (1, 1), 1, "gemm"),
    # 16 output channels: 8 x 48 tiles on AVX-512, im2col panels of 48 pixels in three
    # vector parts; 420 and 1450 pixels: a last panel of 36 and of 10 pixels
    ((1, 5, 24, 24), (16, 5, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "gemm"),
    ((1, 3, 41, 40), (16, 3, 7, 7), (2, 2), (3, 3), (3, 3), (1, 1), 1, "gemm"),
    ((1, 4, 29, 50), (16, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "gemm"),
]


# (M, N) -> (MR, NR, edge columns) on AVX-512: the tile that costs least (8-row tiles
# 4% dearer per multiply-add when they hold fewer accumulators), N's columns past its
# last whole panel taken by the edge kernel where that beats a zero-padded tile
AVX512_TILES = {
    (64, 3136): (8, 48, 16),  # 64 channels at 56 x 56: 8 rows pad nothing in M
    (256, 49): (8, 48, 1),  # 49 pixels: one 48-wide panel and a 1-column edge
    (512, 196): (12, 32, 4),
    (16, 1450): (8, 48, 10),
    (5, 7): (5, 16, 0),  # cut down to the product: one tile beats 7 column vectors
}


@pytest.mark.parametrize("shape, tile", AVX512_TILES.items())
def test_blocking_picks_the_tile_that_pads_least(shape, tile):
    config = gemm_config(parse_target("x86_64:skylake-avx512"), F32)
    blocks = blocking(config, *shape, 64)
    assert (blocks.mr, blocks.nr, blocks.edge) == tile
    assert blocks.kc == 64 and blocks.nb % blocks.nr == 0 and blocks.mb % blocks.mr == 0
    avx2 = blocking(gemm_config(parse_target("x86_64:x86-64-v3"), F32), *shape, 64)
    assert (avx2.mr, avx2.nr) == (min(6, shape[0]), min(16, -(-shape[1] // 8) * 8))


# (M, N, K) whose last columns take the edge kernel on every target: one column (its
# k split over 8 accumulators, K not a multiple of 8, or below it), a few, all of N,
# and (with AVX) enough for a narrower tile; K past one slice (the edge accumulates)
# and M past whole row panels (partial rows)
EDGE_SHAPES = [(20, 49, 700), (37, 196, 130), (64, 20, 33), (9, 17, 5), (30, 119, 50)]


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_dot_edge_columns(compile_module, fuse, rng, target):
    """The GEMM's last columns by the edge kernel, a fused relu over them."""
    config = gemm_config(parse_target(target), F32)
    blocks = [blocking(config, *shape) for shape in EDGE_SHAPES]
    assert all(block.edge for block in blocks)
    assert any(block.k > block.kc for block in blocks)
    forms = {edge_form(config, block.mr, block.edge) for block in blocks}
    assert forms == ({"columns"} if config.lanes == 4 else {"columns", "tile"})
    # some edges ride along with the last whole panel's kernel call, where the registers
    # hold their columns beside the tile: not AVX2's 16 beside a 6 x 16 tile
    fused = [fuses_edge(config, block.mr, block.nr, block.edge) for block in blocks]
    assert not all(fused)
    if target != "host":
        assert any(fused) == (target == "x86_64:x86-64-v2")
    module = Module("edges")
    b = ComputationBuilder(module, "main")
    pairs, args = _matrix_pairs(b, rng, EDGE_SHAPES)
    outputs = []
    for i, ((m, n, _), (x, y)) in enumerate(zip(EDGE_SHAPES, pairs)):

        def relu(fb, p, m=m, n=n):
            zeros = fb.broadcast(fb.scalar(0.0, F32), (), (m, n))
            return fb.binary(Op.MAXIMUM, _dot(fb, p[0], p[1]), zeros)

        outputs.append(fuse(b, [x, y], relu, name=f"relu{i}"))
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module, target=target)
    got = compiled.run(*args)
    for i, shape in enumerate(EDGE_SHAPES):
        want = np.maximum(args[2 * i].astype(np.float64) @ args[2 * i + 1], 0)
        _close(got[i], want, str(shape))
    assert [_kind(compiled, target, o) for o in outputs] == ["gemm"] * len(EDGE_SHAPES)


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_convolutions(compile_module, rng, target):
    module = Module("convs")
    b = ComputationBuilder(module, "main")
    outputs, args = [], []
    for i, (xs, ws, stride, low, high, dilation, groups, _) in enumerate(CONVS):
        x = b.parameter(2 * i, Shape(F32, xs))
        w = b.parameter(2 * i + 1, Shape(F32, ws))
        window = Window.make(ws[2:], stride, low, high, rhs_dilation=dilation)
        outputs.append(b.convolution(x, w, window, ConvDims.nchw(2), groups))
        args += [_normal(rng, xs), _normal(rng, ws)]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module, target=target)
    got = compiled.run(*args)
    for i, (_, _, stride, low, high, dilation, groups, _) in enumerate(CONVS):
        expected = _conv_reference(
            args[2 * i], args[2 * i + 1], stride, low, high, dilation, groups
        )
        _close(got[i], expected, str(CONVS[i][:2]))
    # "gemm" cases whose tiles waste little run on image planes (plane_conv.py) instead;
    # which ones depends on the target's tile width, but both paths are covered
    kinds = [_kind(compiled, target, o) for o in outputs]
    expected = [c[-1] for c in CONVS]
    assert [k if k != "planes" else "gemm" for k in kinds] == expected
    assert {"gemm", "planes"} <= set(kinds)


@pytest.mark.parametrize("target", TARGETS)
def test_convolution_layouts(check, rng, target):
    """1-D and 3-D windows, NHWC input and HWIO kernel into an NCHW output, base
    dilation (through generators), an NHWC output (element rules): vs the evaluator."""
    module = Module("convl")
    b = ComputationBuilder(module, "main")
    x1 = b.parameter(0, Shape(F32, (2, 3, 30)))
    w1 = b.parameter(1, Shape(F32, (5, 3, 4)))
    x3 = b.parameter(2, Shape(F32, (1, 2, 5, 6, 7)))
    w3 = b.parameter(3, Shape(F32, (4, 2, 2, 3, 2)))
    nhwc = b.parameter(4, Shape(F32, (2, 7, 6, 3)))
    hwio = b.parameter(5, Shape(F32, (3, 2, 3, 5)))
    x = b.parameter(6, Shape(F32, (1, 4, 6, 5)))
    w = b.parameter(7, Shape(F32, (3, 4, 3, 3)))
    nhwc_to_nchw = ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 1, (2, 3))
    nhwc_to_nhwc = ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    outputs = [
        b.convolution(x1, w1, Window.make((4,), (3,), (2,), (1,)), ConvDims.nchw(1)),
        b.convolution(
            x3, w3, Window.make((2, 3, 2), (1, 2, 1), (1, 1, 0), (0, 1, 1)), ConvDims.nchw(3)
        ),
        b.convolution(nhwc, hwio, Window.make((3, 2), (1, 2), (1, 0), (1, 1)), nhwc_to_nchw),
        b.convolution(
            x, w, Window.make((3, 3), (1, 1), (2, 2), (2, 2), lhs_dilation=(2, 2)), ConvDims.nchw(2)
        ),
        b.convolution(nhwc, hwio, Window.make((3, 2)), nhwc_to_nhwc),
    ]
    b.build(b.tuple(outputs), entry=True)
    shapes = [
        (2, 3, 30),
        (5, 3, 4),
        (1, 2, 5, 6, 7),
        (4, 2, 2, 3, 2),
        (2, 7, 6, 3),
        (3, 2, 3, 5),
        (1, 4, 6, 5),
        (3, 4, 3, 3),
    ]
    args = [_normal(rng, s) for s in shapes]
    compiled = check(module, args, rtol=1e-4, atol=1e-4, target=target)
    assert [_kind(compiled, target, o) for o in outputs] == ["gemm"] * 4 + ["direct"]


# -- direct channels-last convolution (direct_conv.py) ---------------------------------

# x [N, H, W, C], kernel [KH, KW, C, O], stride, pad low, pad high, dilation: padded copies,
# in-place reads (flat tiles for a pointwise one), rows with a shorter last tile, output
# channels below one vector and past a panel, input channels over several blocks
DIRECT_CONVS = [
    ((2, 9, 8, 4), (3, 3, 4, 6), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((1, 17, 19, 3), (3, 3, 3, 5), (2, 2), (1, 0), (0, 1), (1, 1)),
    ((1, 12, 30, 4), (3, 3, 4, 40), (1, 1), (2, 2), (2, 2), (2, 2)),
    ((2, 7, 5, 16), (1, 1, 16, 12), (1, 1), (0, 0), (0, 0), (1, 1)),
    ((1, 9, 9, 8), (1, 1, 8, 4), (2, 2), (0, 0), (0, 0), (1, 1)),
    ((1, 10, 26, 40), (3, 3, 40, 20), (1, 1), (0, 0), (0, 0), (1, 1)),
    ((1, 20, 70, 5), (3, 3, 5, 33), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((1, 11, 53, 70), (1, 1, 70, 17), (1, 1), (0, 0), (0, 0), (1, 1)),
]


def _bias_residual_relu(window, dims: ConvDims, out):
    """A fusion body: relu(conv(p0, p1) + bias p2 along the output feature + p3)."""

    def body(fb, p):
        y = fb.convolution(p[0], p[1], window, dims)
        y = fb.binary(Op.ADD, y, fb.broadcast(p[2], (dims.output_feature,), out))
        y = fb.binary(Op.ADD, y, p[3])
        return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), out))

    return body


def _direct_reference(x, w, stride, low, high, dilation):
    """NHWC x HWIO -> NHWC through the NCHW reference."""
    out = _conv_reference(
        x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), stride, low, high, dilation, 1
    )
    return out.transpose(0, 2, 3, 1)


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_direct_convolutions(compile_module, rng, target):
    module = Module("direct")
    b = ComputationBuilder(module, "main")
    outputs, args = [], []
    for i, (xs, ws, stride, low, high, dilation) in enumerate(DIRECT_CONVS):
        x = b.parameter(2 * i, Shape(F32, xs))
        w = b.parameter(2 * i + 1, Shape(F32, ws))
        window = Window.make(ws[:2], stride, low, high, rhs_dilation=dilation)
        outputs.append(b.convolution(x, w, window, ConvDims.nhwc(2)))
        args += [_normal(rng, xs), _normal(rng, ws)]
    # a 1-D convolution: [N, W, C] by [KW, C, O]
    x1 = b.parameter(len(args), Shape(F32, (2, 40, 6)))
    w1 = b.parameter(len(args) + 1, Shape(F32, (5, 6, 10)))
    outputs.append(b.convolution(x1, w1, Window.make((5,), (2,), (2,), (1,)), ConvDims.nhwc(1)))
    args += [_normal(rng, (2, 40, 6)), _normal(rng, (5, 6, 10))]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module, target=target)
    got = compiled.run(*args)
    for i, (_, _, stride, low, high, dilation) in enumerate(DIRECT_CONVS):
        expected = _direct_reference(args[2 * i], args[2 * i + 1], stride, low, high, dilation)
        _close(got[i], expected, str(DIRECT_CONVS[i][:2]))
    expected = _direct_reference(args[-2][:, None], args[-1][None], (1, 2), (0, 2), (0, 1), (1, 1))
    _close(got[-1], expected[:, 0], "1-D")
    assert [_kind(compiled, target, o) for o in outputs] == ["direct"] * len(outputs)


@pytest.mark.parametrize("target", TARGETS)
def test_direct_convolution_epilogue_on_threads(
    compile_module, fuse, rng, target, same_across_threads
):
    """bias + residual + relu fused on a channels-last convolution, shared out to
    two threads: the same bits as on one."""
    module = Module("directepi")
    b = ComputationBuilder(module, "main")
    xs, ws, out = (2, 30, 33, 24), (3, 3, 24, 40), (2, 15, 17, 40)
    x = b.parameter(0, Shape(F32, xs))
    w = b.parameter(1, Shape(F32, ws))
    bias = b.parameter(2, Shape(F32, (40,)))
    r = b.parameter(3, Shape(F32, out))
    window = Window.make((3, 3), (2, 2), (1, 1), (1, 1))

    fused = fuse(b, [x, w, bias, r], _bias_residual_relu(window, ConvDims.nhwc(2), out))
    b.build(b.tuple([fused]), entry=True)
    args = [_normal(rng, xs), _normal(rng, ws), _normal(rng, (40,)), _normal(rng, out)]
    compiled = compile_module(module, target=target)
    (got,) = same_across_threads(compiled, args)
    conv = _direct_reference(args[0], args[1], (2, 2), (1, 1), (1, 1), (1, 1))
    _close(got, np.maximum(conv + args[2] + args[3], 0), "bias + residual + relu")
    assert _kind(compiled, target, fused) == "direct"


@pytest.mark.parametrize("target", TARGETS)
def test_convolution_epilogues(compile_module, fuse, rng, target):
    module = Module("convepi")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (2, 8, 11, 13)))
    w = b.parameter(1, Shape(F32, (16, 8, 3, 3)))
    bias = b.parameter(2, Shape(F32, (16,)))
    r = b.parameter(3, Shape(F32, (2, 16, 11, 13)))
    dw = b.parameter(4, Shape(F32, (8, 1, 3, 3)))
    out = (2, 16, 11, 13)
    window = Window.make((3, 3), (1, 1), (1, 1), (1, 1))

    def depthwise_relu6(fb, p):
        y = fb.convolution(p[0], p[1], window, ConvDims.nchw(2), 8)
        zero = fb.broadcast(fb.scalar(0.0, F32), (), (2, 8, 11, 13))
        six = fb.broadcast(fb.scalar(6.0, F32), (), (2, 8, 11, 13))
        return fb.binary(Op.MINIMUM, fb.binary(Op.MAXIMUM, y, zero), six)

    staged = b.unary(Op.ABS, r)
    fused = [
        fuse(b, [x, w, bias, staged], _bias_residual_relu(window, ConvDims.nchw(2), out)),
        fuse(b, [x, dw], depthwise_relu6),
    ]
    b.build(b.tuple([b.unary(Op.NEGATE, fused[0]), fused[1]]), entry=True)
    args = [
        _normal(rng, (2, 8, 11, 13)),
        _normal(rng, (16, 8, 3, 3)),
        _normal(rng, (16,)),
        _normal(rng, out),
        _normal(rng, (8, 1, 3, 3)) * 3,
    ]
    compiled = compile_module(module, target=target)
    got = compiled.run(*args)
    conv = _conv_reference(args[0], args[1], (1, 1), (1, 1), (1, 1), (1, 1), 1)
    expected = np.maximum(conv + args[2][None, :, None, None] + np.abs(args[3]), 0)
    _close(got[0], -expected, "bias + residual + relu")
    depthwise = _conv_reference(args[0], args[4], (1, 1), (1, 1), (1, 1), (1, 1), 8)
    _close(got[1], np.clip(depthwise, 0, 6), "depthwise relu6")
    assert [_kind(compiled, target, f) for f in fused] == ["gemm", "depthwise"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("groups,per_group,multiplier", [(4, 3, 1), (3, 5, 2), (2, 1, 1)])
def test_depthwise_through_channel_shuffle(
    compile_module, fuse, rng, target, groups, per_group, multiplier
):
    """ShuffleNet's channel shuffle (reshape, transpose, reshape) fused into a depthwise
    convolution: the image is read in place, each channel's plane at its shuffled place."""
    channels = groups * per_group
    image = (2, channels, 9, 7)
    module = Module("shuffle")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, image))
    w = b.parameter(1, Shape(F32, (channels * multiplier, 1, 3, 3)))
    window = Window.make((3, 3), (1, 1), (1, 1), (1, 1))

    def shuffled_depthwise(fb, p):
        split = fb.reshape(p[0], (2, groups, per_group, 9, 7))
        swapped = fb.transpose(split, (0, 2, 1, 3, 4))
        shuffled = fb.reshape(swapped, image)
        return fb.convolution(shuffled, p[1], window, ConvDims.nchw(2), channels)

    fused = fuse(b, [x, w], shuffled_depthwise)
    b.build(b.tuple([fused]), entry=True)
    args = [_normal(rng, image), _normal(rng, (channels * multiplier, 1, 3, 3))]
    compiled = compile_module(module, target=target)
    got = compiled.run(*args)
    shuffled = args[0].reshape(2, groups, per_group, 9, 7).transpose(0, 2, 1, 3, 4)
    expected = _conv_reference(
        shuffled.reshape(image), args[1], (1, 1), (1, 1), (1, 1), (1, 1), channels
    )
    _close(got[0], expected, "shuffled depthwise")
    assert _kind(compiled, target, fused) == "depthwise"


# -- element types, cross-compiling, reentrancy ---------------------------------------


def test_aarch64_objects_build():
    """NEON tiles, masked loads and gathers lower for aarch64 (not run here)."""
    module = Module("neon")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (1, 8, 9, 9)))
    w = b.parameter(1, Shape(F32, (16, 8, 3, 3)))
    y = b.parameter(2, Shape(F32, (25, 7)))
    window = Window.make((3, 3), (2, 2), (1, 1), (1, 1))
    conv = b.convolution(x, w, window, ConvDims.nchw(2))
    b.build(b.tuple([conv, _dot(b, b.reshape(conv, (16, 25)), y)]), entry=True)
    plan = assign_buffers(module)
    obj = emit_object(module, plan, "neon", parse_target("aarch64"))
    assert obj[:4] == b"\x7fELF" and plan.workspace_bytes > 0


def test_f64(compile_module, rng):
    module = Module("f64")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F64, (13, 29)))
    y = b.parameter(1, Shape(DType.F64, (29, 17)))
    image = b.parameter(2, Shape(DType.F64, (1, 3, 9, 10)))
    kernel = b.parameter(3, Shape(DType.F64, (4, 3, 3, 3)))
    window = Window.make((3, 3), (1, 1), (1, 1), (1, 1))
    outputs = [_dot(b, x, y), b.convolution(image, kernel, window, ConvDims.nchw(2))]
    b.build(b.tuple(outputs), entry=True)
    args = [_normal(rng, s, np.float64) for s in [(13, 29), (29, 17), (1, 3, 9, 10), (4, 3, 3, 3)]]
    compiled = compile_module(module)
    got = compiled.run(*args)
    np.testing.assert_allclose(got[0], args[0] @ args[1], rtol=1e-12, atol=1e-12)
    conv = _conv_reference(args[2], args[3], (1, 1), (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(got[1], conv, rtol=1e-12, atol=1e-12)
    assert [_kind(compiled, "host", o) for o in outputs] == ["gemm", "gemm"]


def test_other_dtypes_keep_the_rules(compile_module):
    module = Module("ints")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.S32, (4, 5)))
    y = b.parameter(1, Shape(DType.S32, (5, 6)))
    dot = _dot(b, x, y)
    b.build(b.tuple([dot]), entry=True)
    compiled = compile_module(module)
    assert _kind(compiled, "host", dot) is None
    assert compiled.plan.workspace_bytes == 0


def test_concurrent_calls_with_distinct_scratch(compile_module, rng):
    """Packing buffers live in the caller's scratch: two threads share nothing."""
    module = Module("reentrant")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (96, 200)))
    y = b.parameter(1, Shape(F32, (200, 150)))
    b.build(b.tuple([_dot(b, x, y)]), entry=True)
    compiled = compile_module(module)
    inputs = [[_normal(rng, (96, 200)), _normal(rng, (200, 150))] for _ in range(2)]
    results = [[], []]

    def work(k):
        for _ in range(5):
            results[k].append(compiled.run(*inputs[k])[0])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(2):
        expected = inputs[k][0].astype(np.float64) @ inputs[k][1]
        for got in results[k]:
            _close(got, expected)


def _row_norm_kernel(fuse):
    """exp(-(|x|^2 - 2 x.w)): a GEMM epilogue reading a per-row value that another
    kernel leaves in the arena (an RBF kernel's norms), its result read by a second dot,
    so it stays in the arena too."""
    module = Module("rbf")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (24, 10)))
    w = b.parameter(1, Shape(F32, (10, 70)))
    v = b.parameter(2, Shape(F32, (70, 3)))
    squares = b.binary(Op.MULTIPLY, x, x)
    norms = b.add(
        Op.REDUCE,
        [squares, b.scalar(0.0, F32)],
        dimensions=(1,),
        called=(_adder(module),),
    )

    def kernel(fb, p):
        dims = (24, 70)
        two = fb.broadcast(fb.scalar(2.0, F32), (), dims)
        cross = fb.binary(Op.MULTIPLY, _dot(fb, p[0], p[1]), two)
        squared = fb.binary(Op.SUBTRACT, fb.broadcast(p[2], (0,), dims), cross)
        return fb.unary(Op.EXP, fb.unary(Op.NEGATE, squared))

    fused = fuse(b, [x, w, norms], kernel)
    b.build(b.tuple([_dot(b, fused, v)]), entry=True)
    return module, fused


def _adder(module):
    fb = ComputationBuilder(module, "add_f32")
    a, c = fb.parameter(0, Shape(F32, ())), fb.parameter(1, Shape(F32, ()))
    return fb.build(fb.binary(Op.ADD, a, c))


@pytest.mark.parametrize("target", TARGETS)
def test_epilogue_reads_a_row_value_from_the_arena(compile_module, fuse, rng, target):
    module, fused = _row_norm_kernel(fuse)
    args = [_normal(rng, (24, 10)) * 0.3, _normal(rng, (10, 70)) * 0.3, _normal(rng, (70, 3))]
    compiled = compile_module(module, target=target)
    (got,) = compiled.run(*args)
    x, w, v = (a.astype(np.float64) for a in args)
    expected = np.exp(2 * x @ w - (x * x).sum(axis=1, keepdims=True)) @ v
    _close(got, expected, "row value epilogue")
    assert _kind(compiled, target, fused) == "gemm"


def test_epilogue_loads_outside_the_output_vectorize(fuse):
    """The per-row value is loaded as outside the kernel's output (llvm/alias.py), so the
    epilogue's stores do not keep LLVM from vectorizing its loop."""
    module, fused = _row_norm_kernel(fuse)
    text = emit_llvm_ir(module, assign_buffers(module), "rbf", parse_target("x86_64:x86-64-v4"))
    kernel = text.split(f"@rbf.{fused.name}(")[1].split("\n}\n")[0]
    assert "!noalias" in kernel and "!alias.scope" in kernel
    assert re.search(r"<\d+ x float>", kernel), "the epilogue loop did not vectorize"
