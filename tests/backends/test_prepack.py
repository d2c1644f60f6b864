"""Constant GEMM operands pre-packed at compile time (prepack.py, panels.PackedPanels).

Each case compiles a module whose dot or convolution weights are constants for the
host, runs it on random inputs and compares with numpy in float64 (rtol 1e-4, atol
1e-4 of the largest magnitude, as test_gemm.py); `_packed` checks that the emitted
plan reads the operand from a pre-packed copy, so that a case cannot pass by packing
at run time unnoticed.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_gemm import _close, _conv_reference

from aotc.backends.cpu import parse_target
from aotc.backends.cpu.blocking import blocking
from aotc.backends.cpu.codegen import optimized_module
from aotc.backends.cpu.contraction import contraction_plans
from aotc.backends.cpu.gemm_config import gemm_config
from aotc.backends.cpu.prepack import DROPPED, prepack
from aotc.backends.cpu.prepackable import PackedShape, StridedLayout, pack_operand
from aotc.backends.llvm.elf import section_headers
from aotc.buffers import BufferKind, Slice, assign_buffers
from aotc.ir import (
    ComputationBuilder,
    ConvDims,
    Direction,
    DotDims,
    DType,
    Module,
    Op,
    Shape,
    TupleShape,
    Window,
)

HOST = parse_target("host")
F32 = DType.F32


def _packed(compiled, instr) -> tuple[bool, bool]:
    """Which operands (A, B) of `instr`'s last contraction the object reads pre-packed."""
    _, plans = contraction_plans(HOST, prepack(HOST, compiled.plan), instr)
    return plans[-1].is_packed


def _plan(compiled, instr):
    return contraction_plans(HOST, prepack(HOST, compiled.plan), instr)[1][-1]


def _normal(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _dot(b, x, y, lhs_contracting=(1,), rhs_contracting=(0,), batch=()):
    return b.dot(x, y, DotDims(batch, batch, lhs_contracting, rhs_contracting))


def test_pack_operand_matches_the_panel_layout():
    """numpy's packing, element by element: slice by slice of kc, panels of `width`."""
    values = np.arange(2 * 5 * 7, dtype=np.float32)  # two [5, 7] matrices, transposed read
    layout = StridedLayout(Slice(BufferKind.CONSTANT, 0, 0, values.nbytes), ((0, 35),), 1, 7)
    shape = PackedShape(count=7, k=5, kc=3, width=4, batch=(0,), extents=(2,))
    got = pack_operand(values, layout, shape)
    assert got.size == shape.elements == 2 * 8 * 5
    for element in range(2):
        matrix = values[35 * element : 35 * (element + 1)].reshape(5, 7).T  # [p, k]
        base = element * 8 * 5
        for p in range(8):
            for k in range(5):
                k0, kc = (0, 3) if k < 3 else (3, 2)
                at = base + 8 * k0 + (p // 4) * 4 * kc + (k - k0) * 4 + p % 4
                assert got[at] == (matrix[p, k] if p < 7 else 0), (element, p, k)


# name -> (x dims, weight dims, contracting (lhs, rhs), batch, weights as A?, dtype)
DOTS = {
    "B [K, N], K > kc, N ragged": ((7, 1000), (1000, 45), ((1,), (0,)), (), False, F32),
    "A [M, K]": ((300, 20), (13, 300), ((1,), (0,)), (), True, F32),
    "B transposed [N, K]": ((9, 70), (33, 70), ((1,), (1,)), (), False, F32),
    "batch of weights": ((3, 5, 40), (3, 40, 24), ((2,), (1,)), (0,), False, F32),
    "f64": ((6, 50), (50, 17), ((1,), (0,)), (), False, DType.F64),
}


def test_dots(compile_module, rng):
    module = Module("pdots")
    b = ComputationBuilder(module, "main")
    outputs, args, expected = [], [], []
    for n, (xs, ws, (lc, rc), batch, weights_a, dtype) in enumerate(DOTS.values()):
        x_value = _normal(rng, xs, dtype.numpy)
        w_value = _normal(rng, ws, dtype.numpy)
        x = b.parameter(n, Shape(dtype, xs))
        w = b.constant(w_value)
        if weights_a:
            outputs.append(_dot(b, w, x, lc, rc, batch))
            expected.append(w_value.astype(np.float64) @ x_value)
        else:
            outputs.append(_dot(b, x, w, lc, rc, batch))
            y = w_value if rc[0] == w_value.ndim - 2 else np.swapaxes(w_value, -1, -2)
            expected.append(np.matmul(x_value.astype(np.float64), y))
        args.append(x_value)
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module)
    got = compiled.run(*args)
    for name, g, e, out, case in zip(DOTS, got, expected, outputs, DOTS.values()):
        _close(g, e, name)
        assert _packed(compiled, out) == ((True, False) if case[4] else (False, True)), name
    # micro-kernels that prefetch A where it is pre-packed weights, and others for the rest
    kernels = set(re.findall(rb"gemm\.kernel\.[a-z0-9x+.]+", compiled.obj))
    assert any(k.endswith(b".stream") for k in kernels)
    assert any(not k.endswith(b".stream") for k in kernels)


# x dims, w dims, stride, pad, groups: 1x1, 3x3 padded and strided, grouped, K > kc
CONVS = [
    ((2, 16, 7, 5), (12, 16, 1, 1), (1, 1), (0, 0), 1),
    ((1, 3, 17, 19), (5, 3, 3, 3), (2, 2), (1, 1), 1),
    ((2, 6, 7, 7), (4, 3, 3, 3), (1, 1), (1, 1), 2),
    ((1, 64, 9, 9), (12, 64, 3, 3), (1, 1), (1, 1), 1),  # im2col: 12 outputs, K = 576
    ((1, 16, 10, 10), (64, 16, 3, 3), (1, 1), (1, 1), 1),  # Winograd: U packed
]


def test_convolutions(compile_module, fuse, rng):
    """Plain and fused (bias, relu) convolutions; the kernels only they read are dropped."""
    module = Module("pconvs")
    b = ComputationBuilder(module, "main")
    outputs, args, weights, biases = [], [], [], []

    def bias_relu(fb, p):
        y = fb.convolution(p[0], p[1], p[3], ConvDims.nchw(2), p[4])
        y = fb.binary(Op.ADD, y, fb.broadcast(p[2], (1,), y.shape.dims))
        return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), y.shape.dims))

    for i, (xs, ws, stride, pad, groups) in enumerate(CONVS):
        x = b.parameter(i, Shape(F32, xs))
        weights.append(_normal(rng, ws))
        biases.append(_normal(rng, ws[:1]))
        w, bias = b.constant(weights[-1]), b.constant(biases[-1])
        window = Window.make(ws[2:], stride, pad, pad)
        outputs.append(b.convolution(x, w, window, ConvDims.nchw(2), groups))
        body = lambda fb, p, window=window, groups=groups: bias_relu(fb, [*p, window, groups])
        outputs.append(fuse(b, [x, w, bias], body))
        args.append(_normal(rng, xs))
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module)
    got = compiled.run(*args)
    for i, (_, _, stride, pad, groups) in enumerate(CONVS):
        expected = _conv_reference(args[i], weights[i], stride, pad, pad, (1, 1), groups)
        _close(got[2 * i], expected, str(CONVS[i][:2]))
        _close(got[2 * i + 1], np.maximum(expected + biases[i][:, None, None], 0), "fused")
        assert _packed(compiled, outputs[2 * i]) == (True, False)
        assert _packed(compiled, outputs[2 * i + 1]) == (True, False)
    assert _plan(compiled, outputs[7]).blocks.kc < 64 * 9  # several K slices
    assert _plan(compiled, outputs[-1]).kind == "winograd"
    section = _weights_section(compiled)
    assert not any(w.tobytes()[:256] in section for w in weights)  # originals dropped
    assert all(bias.tobytes() in section for bias in biases)


def test_direct_convolutions(compile_module, fuse, rng):
    """A channels-last convolution's kernel packed as B panels (direct_conv.py), plain and
    with a fused bias and relu; the kernel is in the object only as its panels."""
    module = Module("pdirect")
    b = ComputationBuilder(module, "main")
    xs, ws = (2, 10, 21, 24), (3, 3, 24, 40)
    x = b.parameter(0, Shape(F32, xs))
    w_value, bias_value = _normal(rng, ws), _normal(rng, (40,))
    w, bias = b.constant(w_value), b.constant(bias_value)
    window = Window.make((3, 3), (1, 1), (1, 1), (1, 1))

    def bias_relu(fb, p):
        y = fb.convolution(p[0], p[1], window, ConvDims.nhwc(2))
        y = fb.binary(Op.ADD, y, fb.broadcast(p[2], (3,), y.shape.dims))
        return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), y.shape.dims))

    outputs = [b.convolution(x, w, window, ConvDims.nhwc(2)), fuse(b, [x, w, bias], bias_relu)]
    b.build(b.tuple(outputs), entry=True)
    arg = _normal(rng, xs)
    compiled = compile_module(module)
    got = compiled.run(arg)
    nchw = _conv_reference(
        arg.transpose(0, 3, 1, 2), w_value.transpose(3, 2, 0, 1), (1, 1), (1, 1), (1, 1), (1, 1), 1
    )
    expected = nchw.transpose(0, 2, 3, 1)
    _close(got[0], expected, "plain")
    _close(got[1], np.maximum(expected + bias_value, 0), "fused")
    for out in outputs:
        plan = _plan(compiled, out)
        assert plan.kind == "direct" and plan.packed[0] is None and plan.packed[1] is not None
    section = _weights_section(compiled)
    assert w_value.tobytes()[:256] not in section and bias_value.tobytes() in section


def test_split_results_do_not_depend_on_the_thread_count(compile_module, fuse, same_across_threads):
    """Pre-packed operands in GEMMs shared out to threads (over M with B shared, over N
    with A shared, whole GEMMs of a batch; over M with several N blocks and K slices, A's
    rows packed at the first N block for all of them): bitwise equal at 1, 2 and 3
    threads, close to numpy, and the shared operand's packing region is gone."""
    rng = np.random.default_rng(7)
    module = Module("psplit")
    b = ComputationBuilder(module, "main")
    w = [_normal(rng, s) for s in [(300, 256), (256, 300), (9, 64, 72), (64, 32, 3, 3), (784, 512)]]
    shapes = [(384, 300), (300, 2048), (9, 48, 64), (1, 32, 56, 56), (64, 784)]
    x = [b.parameter(i, Shape(F32, s)) for i, s in enumerate(shapes)]
    # dilated: im2col (a 3x3 stride-1 one would be Winograd)
    window = Window.make((3, 3), (1, 1), (2, 2), (2, 2), rhs_dilation=(2, 2))
    outputs = [
        _dot(b, x[0], b.constant(w[0])),
        _dot(b, b.constant(w[1]), x[1]),
        _dot(b, x[2], b.constant(w[2]), (2,), (1,), (0,)),
        b.convolution(x[3], b.constant(w[3]), window, ConvDims.nchw(2)),
        _dot(b, x[4], b.constant(w[4])),  # an MLP layer at batch 64
    ]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module)
    splits = [_plan(compiled, out).split for out in outputs]
    assert [s.mode for s in splits] == ["m", "n", "batch", "n", "m"]
    assert [s.shared_bytes for s in splits] == [0, 0, 0, 0, 0]
    last = splits[-1].blocks
    assert last.nb < last.n and last.kc < last.k
    args = [_normal(rng, s) for s in shapes]
    results = same_across_threads(compiled, args)
    expected = [
        args[0].astype(np.float64) @ w[0],
        w[1].astype(np.float64) @ args[1],
        np.einsum("bmk,bkn->bmn", args[2].astype(np.float64), w[2]),
        _conv_reference(args[3], w[3], (1, 1), (2, 2), (2, 2), (2, 2), 1),
        args[4].astype(np.float64) @ w[4],
    ]
    for k, (got, want) in enumerate(zip(results, expected)):
        _close(got, want, f"output {k}")


def test_gemv_matrices_are_packed_as_panels_of_outputs(compile_module, same_across_threads):
    """A constant gemv matrix, read along the outputs (batch-1 MLP layers) or along K
    (Gemm with transB, a pointwise convolution of one pixel: a squeeze-excite block's
    layers), is pre-packed as panels of outputs, each read as one stream: shared out to
    threads in whole panels (a ragged last one), fewer outputs than a panel, an odd
    depth, a batch of them, feature groups; bitwise equal at 1, 2 and 3 threads and
    close to numpy.  A matrix that is not a constant is read in place (gemv.dot)."""
    rng = np.random.default_rng(8)
    module = Module("pgemv")
    b = ComputationBuilder(module, "main")
    w = [
        _normal(rng, s)
        for s in [(700, 2003), (513, 10), (3, 200, 300), (300, 257), (1000, 1024), (576, 144)]
    ]
    w += [_normal(rng, (96, 8, 1, 1))]
    shapes = [(1, 700), (1, 513), (3, 1, 200), (300, 1), (1, 1024), (1, 144, 1, 1)]
    shapes += [(2, 24, 1, 1), (1, 40), (29, 40)]
    x = [b.parameter(i, Shape(F32, s)) for i, s in enumerate(shapes)]
    pointwise = Window.make((1, 1), (1, 1), (0, 0), (0, 0))
    outputs = [
        _dot(b, x[0], b.constant(w[0])),
        _dot(b, x[1], b.constant(w[1])),
        _dot(b, x[2], b.constant(w[2]), (2,), (1,), (0,)),
        _dot(b, b.constant(w[3]), x[3], (0,), (0,)),  # N = 1: the matrix is A, transposed
        _dot(b, x[4], b.constant(w[4]), (1,), (1,)),  # rows along K: a classifier's Gemm
        b.convolution(x[5], b.constant(w[5][:, :, None, None]), pointwise, ConvDims.nchw(2)),
        b.convolution(x[6], b.constant(w[6]), pointwise, ConvDims.nchw(2), 3),
        _dot(b, x[7], x[8], (1,), (1,)),  # not a constant: read in place
    ]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module)
    kinds = [_plan(compiled, out).kind for out in outputs]
    assert kinds == ["gemv.axpy"] * 7 + ["gemv.dot"]
    packed = [(False, True)] * 3 + [(True, False)] + [(False, True)] + [(True, False)] * 2
    assert [_packed(compiled, out) for out in outputs] == [*packed, (False, False)]
    assert _plan(compiled, outputs[0]).split is not None
    assert _plan(compiled, outputs[4]).split is not None
    args = [_normal(rng, s) for s in shapes]
    results = same_across_threads(compiled, args)
    expected = [
        args[0].astype(np.float64) @ w[0],
        args[1].astype(np.float64) @ w[1],
        np.einsum("bmk,bkn->bmn", args[2].astype(np.float64), w[2]),
        w[3].T.astype(np.float64) @ args[3],
        args[4].astype(np.float64) @ w[4].T,
        _conv_reference(args[5], w[5][:, :, None, None], (1, 1), (0, 0), (0, 0), (1, 1), 1),
        _conv_reference(args[6], w[6], (1, 1), (0, 0), (0, 0), (1, 1), 3),
        args[7].astype(np.float64) @ args[8].T,
    ]
    for k, (got, want) in enumerate(zip(results, expected)):
        _close(got, want, f"output {k}")


def _weights_section(compiled) -> bytes:
    _, header = section_headers(compiled.obj)[f".rodata.{compiled.name}_weights"]
    offset, size = header[4], header[5]
    return compiled.obj[offset : offset + size]


def test_originals_are_dropped(compile_module, rng):
    """A constant only a GEMM reads is in the object once: as its packed panels."""
    module = Module("pdrop")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (64, 784)))
    w = _normal(rng, (784, 500))
    out = _dot(b, x, b.constant(w))
    b.build(b.tuple([out]), entry=True)
    compiled = compile_module(module)
    blocks = _plan(compiled, out).blocks
    padded = -(-500 // blocks.nr) * blocks.nr
    section = _weights_section(compiled)
    assert len(section) == padded * 784 * 4 == compiled.plan.weight_bytes
    assert len(section) < w.nbytes + 64 + 784 * (padded - 500) * 4
    assert w[:, :16].tobytes() not in section  # the original rows are gone
    if blocks.mr != blocks.nr:  # B is never packed at run time
        assert f"gemm.pack.f32.{blocks.nr}".encode() not in compiled.obj
    x_value = _normal(rng, (64, 784))
    (got,) = compiled.run(x_value)
    _close(got, x_value.astype(np.float64) @ w)


def test_constant_also_read_elsewhere_is_kept(compile_module, fuse, rng):
    """A weight also read by an elementwise op, by a fusion body besides its dot, and
    returned as is: all of them see the original, the GEMMs the packed copy."""
    module = Module("pboth")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (40, 40)))
    w_value = _normal(rng, (40, 40))
    w = b.constant(w_value)
    twice = b.binary(Op.ADD, w, w)

    def dot_plus_weights(fb, p):
        return fb.binary(Op.ADD, _dot(fb, p[0], p[1]), p[1])

    def transposed_dot_relu(fb, p):
        y = _dot(fb, p[0], fb.transpose(p[1], (1, 0)))
        return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), y.shape.dims))

    fused = fuse(b, [x, w], dot_plus_weights, "plus")
    relu = fuse(b, [x, w], transposed_dot_relu, "relu")
    b.build(b.tuple([_dot(b, x, w), twice, w, fused, relu]), entry=True)
    compiled = compile_module(module)
    x_value = _normal(rng, (40, 40))
    got = compiled.run(x_value)
    product = x_value.astype(np.float64) @ w_value
    _close(got[0], product, "dot")
    np.testing.assert_array_equal(got[1], w_value + w_value)
    np.testing.assert_array_equal(got[2], w_value)
    _close(got[3], product + w_value, "fused dot + weights")
    _close(got[4], np.maximum(x_value.astype(np.float64) @ w_value.T, 0), "transposed")
    assert _packed(compiled, fused) == (False, True)
    assert _packed(compiled, relu) == (False, True)
    assert w_value.tobytes() in _weights_section(compiled)


def test_identical_operands_are_packed_once(compile_module, rng):
    module = Module("ponce")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (16, 64)))
    y = b.parameter(1, Shape(F32, (32, 64)))
    w_value = _normal(rng, (64, 48))
    w = b.constant(w_value)
    b.build(b.tuple([_dot(b, x, w), _dot(b, y, w)]), entry=True)
    compiled = compile_module(module)
    blocks = _plan(compiled, compiled.module.entry.root.operands[0]).blocks
    assert blocks.nr == _plan(compiled, compiled.module.entry.root.operands[1]).blocks.nr
    assert compiled.plan.weight_bytes == -(-48 // blocks.nr) * blocks.nr * 64 * 4
    x_value, y_value = _normal(rng, (16, 64)), _normal(rng, (32, 64))
    got = compiled.run(x_value, y_value)
    _close(got[0], x_value.astype(np.float64) @ w_value)
    _close(got[1], y_value.astype(np.float64) @ w_value)


@pytest.mark.parametrize("spec", ["x86_64:x86-64-v2", "x86_64:x86-64-v3"])
def test_other_blockings(compile_module, rng, spec):
    """SSE and AVX2 tiles: other widths and kc, the packing follows."""
    module = Module("ptargets")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (2, 8, 9, 9)))
    w_value = _normal(rng, (10, 8, 3, 3))
    conv = b.convolution(
        x, b.constant(w_value), Window.make((3, 3), (1, 1), (1, 1), (1, 1)), ConvDims.nchw(2)
    )
    d_value = _normal(rng, (500, 13))
    y = b.parameter(1, Shape(F32, (11, 500)))
    b.build(b.tuple([conv, _dot(b, y, b.constant(d_value))]), entry=True)
    compiled = compile_module(module, target=spec)
    x_value, y_value = _normal(rng, (2, 8, 9, 9)), _normal(rng, (11, 500))
    got = compiled.run(x_value, y_value)
    _close(got[0], _conv_reference(x_value, w_value, (1, 1), (1, 1), (1, 1), (1, 1), 1))
    _close(got[1], y_value.astype(np.float64) @ d_value)


def test_while_body_reads_its_weights_packed(compile_module, rng):
    """A loop body's dot by a constant (a nested plan): x <- tanh(x W), three times."""
    module = Module("ploop")
    state = TupleShape((Shape(DType.S32, ()), Shape(F32, (16, 40))))
    w_value = _normal(rng, (40, 40)) / 6

    cb = ComputationBuilder(module, "cond")
    p = cb.parameter(0, state)
    three = cb.scalar(3, DType.S32)
    cond = cb.build(cb.compare(cb.get_tuple_element(p, 0), three, Direction.LT))

    bb = ComputationBuilder(module, "body")
    p = bb.parameter(0, state)
    count = bb.binary(Op.ADD, bb.get_tuple_element(p, 0), bb.scalar(1, DType.S32))
    x = bb.unary(Op.TANH, _dot(bb, bb.get_tuple_element(p, 1), bb.constant(w_value)))
    body = bb.build(bb.tuple([count, x]))

    b = ComputationBuilder(module, "main")
    x0 = b.parameter(0, Shape(F32, (16, 40)))
    loop = b.while_loop(cond, body, b.tuple([b.scalar(0, DType.S32), x0]))
    b.build(b.tuple([b.get_tuple_element(loop, 1)]), entry=True)
    compiled = compile_module(module)
    final = prepack(HOST, compiled.plan)
    (nested,) = final.nested.values()
    assert any(key[0] == "packed" for p in nested.plans for key in p.slices)
    # the packed copy (N padded to the tile width) and three scalars, not the original
    nr = blocking(gemm_config(HOST, F32), 16, 40, 40).nr
    assert compiled.plan.weight_bytes <= 40 * (-(-40 // nr) * nr) * 4 + 3 * 64
    x_value = _normal(rng, (16, 40))
    (got,) = compiled.run(x_value)
    want = x_value.astype(np.float64)
    for _ in range(3):
        want = np.tanh(want @ w_value)
    _close(got, want)


def test_reading_a_dropped_constant_is_refused(rng):
    """Should a kernel ever read a constant that prepack dropped from the blob, emission
    stops instead of loading other bytes: here the elementwise reader's slice is forced to
    the dropped marker."""
    module = Module("pdrop")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (24, 40)))
    w = b.constant(_normal(rng, (40, 40)))
    b.build(b.tuple([_dot(b, x, w), b.unary(Op.NEGATE, w)]), entry=True)
    plan = assign_buffers(module)
    target = parse_target("host")
    final = prepack(target, plan)
    assert final.slice_of(w) != DROPPED  # the negate reads it: kept
    final.slices[(id(w), ())] = DROPPED
    with pytest.raises(AssertionError, match="dropped from the weights blob"):
        optimized_module(module, final, "pdrop", target)
