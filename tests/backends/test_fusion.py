"""Loop fusions: producers inlined into one loop nest, multi-output, constants inside."""

from __future__ import annotations

import sys

import numpy as np

from aotc.ir import ComputationBuilder, DType, Module, Op, Shape, scalar_reducer


def test_fused_chain_deeper_than_the_recursion_limit(check, fuse, rng):
    """A kernel of 1,000 members each read by the next, elementwise ops and every pure
    index map (ir/index_maps.py's INDEX_MAP_OPS) among them, emits under a recursion limit
    of 400: those are evaluated on an explicit stack, not a Python call per member."""
    module = Module("deep")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (4, 6)))

    def body(f, p):
        t = p[0]
        for _ in range(100):  # 10 members a step
            t = f.reverse(f.unary(Op.NEGATE, f.transpose(t, [1, 0])), [0])  # [6, 4]
            t = f.slice(f.broadcast(f.reshape(t, [4, 6]), [1, 2], [2, 4, 6]), [1, 0, 0], [2, 4, 6])
            t = f.reshape(t, [4, 6])
            t = f.convert(f.get_tuple_element(f.tuple([t, t]), 1), DType.F32)
        return t

    b.build(fuse(b, [x], body), entry=True)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        check(module, [rng.standard_normal((4, 6)).astype(np.float32)], rtol=0, atol=0)
    finally:
        sys.setrecursionlimit(limit)


def test_fusion_chain_with_broadcast_constant_and_diamond(check, fuse, rng):
    module = Module("fz")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (3, 4)))
    bias = b.parameter(1, Shape(DType.F32, (4,)))

    def body(f, p):
        scale = f.constant(np.arange(12, dtype=np.float32).reshape(3, 4) / 7)  # non-scalar
        t = f.binary(Op.ADD, p[0], f.broadcast(p[1], [1], [3, 4]))
        for _ in range(30):  # a deep diamond chain: must not blow up exponentially
            t = f.binary(Op.MULTIPLY, f.unary(Op.TANH, t), f.unary(Op.LOGISTIC, t))
        quarter = f.broadcast(f.scalar(0.25, DType.F32), [], [3, 4])
        return f.binary(Op.ADD, f.binary(Op.MULTIPLY, t, scale), quarter)

    b.build(b.tuple([fuse(b, [x, bias], body)]), entry=True)
    args = [
        rng.standard_normal((3, 4)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    ]
    check(module, args, rtol=1e-5, atol=1e-6)


def test_multi_output_fusions(check, fuse, rng):
    module = Module("mo")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (5, 6)))
    add = scalar_reducer(module, Op.ADD, DType.F32)
    same = fuse(b, [x], lambda f, p: f.tuple([f.unary(Op.EXP, p[0]), f.unary(Op.NEGATE, p[0])]))
    mixed = fuse(
        b,
        [x],
        lambda f, p: f.tuple(
            [
                f.unary(Op.ABS, p[0]),
                f.reduce(p[0], f.scalar(0.0, DType.F32), [1], add),
                f.transpose(p[0], [1, 0]),
            ]
        ),
        name="mixed",
    )
    outputs = [b.get_tuple_element(same, i) for i in range(2)]
    outputs += [b.get_tuple_element(mixed, i) for i in range(3)]
    b.build(b.tuple(outputs), entry=True)
    check(module, [rng.standard_normal((5, 6)).astype(np.float32)], rtol=1e-5, atol=1e-6)


def test_fused_reduce_of_elementwise(check, fuse, rng):
    """softmax-like: exp(x - max) / sum, with the reductions inside fusions."""
    module = Module("sm")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.BF16, (4, 9)))
    mx = scalar_reducer(module, Op.MAXIMUM, DType.BF16)
    add = scalar_reducer(module, Op.ADD, DType.BF16)

    def body(f, p):
        peak = f.reduce(p[0], f.scalar(-np.inf, DType.BF16), [1], mx)
        e = f.unary(Op.EXP, f.binary(Op.SUBTRACT, p[0], f.broadcast(peak, [0], [4, 9])))
        total = f.reduce(e, f.scalar(0.0, DType.BF16), [1], add)
        return f.binary(Op.DIVIDE, e, f.broadcast(total, [0], [4, 9]))

    b.build(b.tuple([fuse(b, [x], body)]), entry=True)
    xv = rng.standard_normal((4, 9)).astype(np.float32)
    from aotc.ir.types import bf16_round

    check(module, [bf16_round(xv)], rtol=1.6e-2, atol=1e-3)


def test_per_channel_operands_leave_the_pixels_one_loop(check, fuse, rng):
    """A batch norm + relu over NCHW (per-channel operands broadcast along dim 1, a
    scalar zero): the loop runs over (batch, channel) then the pixels as one merged,
    vectorizable loop (37 pixels: a vector tail); so do scales computed in the kernel
    from a reshaped operand (a squeeze-excite's sigmoid gates); broadcasting along a
    pixel dim keeps the nest; with scalars only, one loop over all.  Against the
    evaluator."""
    from aotc.backends.cpu.program import _elementwise_from

    module = Module("bn")
    b = ComputationBuilder(module, "main")
    dims = (2, 5, 37, 3)
    x = b.parameter(0, Shape(DType.F32, dims))
    scale = b.parameter(1, Shape(DType.F32, (5,)))
    shift = b.parameter(2, Shape(DType.F32, (5,)))
    row = b.parameter(3, Shape(DType.F32, (37,)))
    gates = b.parameter(4, Shape(DType.F32, (10,)))

    def batch_norm_relu(f, p):
        y = f.binary(Op.MULTIPLY, p[0], f.broadcast(p[1], [1], dims))
        y = f.binary(Op.ADD, y, f.broadcast(p[2], [1], dims))
        return f.binary(Op.MAXIMUM, y, f.broadcast(f.scalar(0.0, DType.F32), [], dims))

    def squeeze_excite(f, p):
        gate = f.unary(Op.LOGISTIC, f.reshape(p[1], (2, 5)))
        return f.binary(Op.MULTIPLY, p[0], f.broadcast(gate, [0, 1], dims))

    def by_row(f, p):
        return f.binary(Op.MULTIPLY, p[0], f.broadcast(p[1], [2], dims))

    def relu(f, p):
        return f.binary(Op.MAXIMUM, p[0], f.broadcast(f.scalar(0.0, DType.F32), [], dims))

    per_channel = fuse(b, [x, scale, shift], batch_norm_relu, name="bnr")
    excited = fuse(b, [x, gates], squeeze_excite, name="se")
    per_row = fuse(b, [x, row], by_row, name="rows")
    flat = fuse(b, [x], relu, name="relu")
    outputs = [per_channel, excited, per_row, flat]
    b.build(b.tuple(outputs), entry=True)
    assert [_elementwise_from(out) for out in outputs] == [2, 2, 3, 0]
    shapes = (dims, (5,), (5,), (37,), (10,))
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    check(module, args, rtol=1e-6, atol=1e-6)


def test_reshaped_operands_are_read_at_the_output_index(check, fuse, rng):
    """An operand reshaped inside the kernel, [2,10,8,8] read as [2,10,64] (SegFormer's
    GELU after its depthwise convolution): its buffer is read at the output's own index,
    so one loop over all elements serves (a nest over the 8 x 8 digits would not
    vectorize); merged with a reshape of a second operand and a per-row scale.  Against
    the evaluator."""
    from aotc.backends.cpu.program import _elementwise_from

    module = Module("rs")
    b = ComputationBuilder(module, "main")
    dims = (2, 10, 64)
    image = b.parameter(0, Shape(DType.F32, (2, 10, 8, 8)))
    other = b.parameter(1, Shape(DType.F32, (2, 640)))
    scale = b.parameter(2, Shape(DType.F32, (10,)))

    def gelu(f, p):
        x = f.reshape(p[0], dims)
        erf = f.unary(
            Op.ERF, f.binary(Op.MULTIPLY, x, f.broadcast(f.scalar(0.7, DType.F32), [], dims))
        )
        return f.binary(Op.MULTIPLY, x, f.binary(Op.ADD, erf, f.reshape(p[1], dims)))

    def scaled(f, p):
        return f.binary(Op.MULTIPLY, f.reshape(p[0], dims), f.broadcast(p[1], [1], dims))

    flat = fuse(b, [image, other], gelu, name="gelu")
    rows = fuse(b, [image, scale], scaled, name="scaled")
    b.build(b.tuple([flat, rows]), entry=True)
    assert [_elementwise_from(out) for out in (flat, rows)] == [0, 2]
    shapes = ((2, 10, 8, 8), (2, 640), (10,))
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    check(module, args, rtol=1e-5, atol=1e-6)
