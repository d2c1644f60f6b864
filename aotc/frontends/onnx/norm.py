"""Normalizations in inference form: BatchNormalization, InstanceNormalization,
LayerNormalization, LRN."""

from __future__ import annotations

from ...errors import ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Instruction, Op, Window, scalar_reducer
from .dtypes import to_dtype
from .helpers import Formula, element_count, full_like, normalize_axis, reduce, unidirectional
from .registry import NodeContext, onnx_op


def _channel_vector(b: ComputationBuilder, v: Instruction, like: Instruction) -> Instruction:
    """A per-channel (C,) input in `like`'s dtype, checked against `like`'s dim 1."""
    if v.shape.dims != (like.shape.dims[1],):
        expected = [like.shape.dims[1]]
        raise ShapeError(f"per-channel input has shape {list(v.shape.dims)}, not {expected}")
    return b.convert(v, like.shape.dtype)


def _per_channel(b: ComputationBuilder, v: Instruction, like: Instruction) -> Instruction:
    """A (C,) vector broadcast along dim 1 of `like`."""
    return b.broadcast(v, [1], like.shape.dims)


@onnx_op("BatchNormalization")
def batch_norm(ctx: NodeContext, x, scale, bias, mean, var) -> Instruction:
    if ctx.attr("training_mode", 0):
        raise UnsupportedError("training_mode=1 is not supported (inference only)")
    if ctx.attr("spatial", 1) == 0:
        raise UnsupportedError("spatial=0 is not supported")
    if any(ctx.output_used(i) for i in range(1, 5)):
        raise UnsupportedError("the running/saved mean and variance outputs are training-only")
    if x.shape.rank < 2:
        raise ShapeError("input must be N x C x ...")
    b = ctx.b
    scale, bias, mean, var = (_channel_vector(b, v, x) for v in (scale, bias, mean, var))
    # y = (x - mean) * scale / sqrt(var + eps) + bias as one multiply-add, whose
    # per-channel factors are computed on (C,) vectors
    eps = full_like(b, ctx.attr("epsilon"), var)
    inv = b.binary(Op.MULTIPLY, scale, b.unary(Op.RSQRT, b.binary(Op.ADD, var, eps)))
    shift = b.binary(Op.SUBTRACT, bias, b.binary(Op.MULTIPLY, mean, inv))
    scaled = b.binary(Op.MULTIPLY, x, _per_channel(b, inv, x))
    return b.binary(Op.ADD, scaled, _per_channel(b, shift, x))


def _normalize(
    b: ComputationBuilder, x: Instruction, axes: list[int], epsilon: float
) -> tuple[Instruction, Instruction, Instruction]:
    """(x - mean) / sqrt(var + eps) over `axes`, with mean and 1/std (dims kept)."""
    count = element_count(x.shape.dims, axes)
    mean = reduce(b, x, Op.ADD, axes, keepdims=True)
    mean = b.binary(Op.DIVIDE, mean, full_like(b, count, mean))
    centered = b.binary(Op.SUBTRACT, x, b.broadcast_to(mean, x.shape.dims))
    var = reduce(b, b.binary(Op.MULTIPLY, centered, centered), Op.ADD, axes, keepdims=True)
    var = b.binary(Op.DIVIDE, var, full_like(b, count, var))
    inv_std = b.unary(Op.RSQRT, b.binary(Op.ADD, var, full_like(b, epsilon, var)))
    normalized = b.binary(Op.MULTIPLY, centered, b.broadcast_to(inv_std, x.shape.dims))
    return normalized, mean, inv_std


@onnx_op("LayerNormalization", since=17)
def layer_norm(ctx: NodeContext, x: Instruction, scale: Instruction, bias=None):
    b = ctx.b
    axis = normalize_axis(ctx.attr("axis"), x.shape.rank)
    # stash_type is the precision of mean and variance (float32 by default)
    stash = to_dtype(ctx.attr("stash_type"), "stash_type")
    dtype = x.shape.dtype
    wide = b.convert(x, stash) if stash.is_float and stash.bits > dtype.bits else x
    normalized, mean, inv_std = _normalize(
        b, wide, list(range(axis, x.shape.rank)), ctx.attr("epsilon")
    )
    y = b.convert(normalized, dtype)
    y = b.binary(Op.MULTIPLY, y, unidirectional(b, scale, x.shape.dims))
    if bias is not None:
        y = b.binary(Op.ADD, y, unidirectional(b, bias, x.shape.dims))
    return [y, mean, inv_std]


@onnx_op("InstanceNormalization")
def instance_norm(ctx: NodeContext, x: Instruction, scale: Instruction, bias: Instruction):
    b = ctx.b
    if x.shape.rank < 3:
        raise ShapeError("input must be N x C x spatial dims")
    normalized, _, _ = _normalize(b, x, list(range(2, x.shape.rank)), ctx.attr("epsilon"))
    scale, bias = (_per_channel(b, _channel_vector(b, v, x), x) for v in (scale, bias))
    return b.binary(Op.ADD, b.binary(Op.MULTIPLY, normalized, scale), bias)


@onnx_op("LRN")
def local_response_norm(ctx: NodeContext, x: Instruction) -> Instruction:
    """x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ^ beta."""
    b = ctx.b
    size = ctx.required_attr("size")
    if x.shape.rank < 3:
        raise ShapeError("input must be N x C x spatial dims")
    f = Formula(b, x)
    ones = [1] * x.shape.rank
    # the channel window runs from c - floor((size-1)/2) to c + ceil((size-1)/2)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    window = Window.make(
        [size if i == 1 else 1 for i in range(x.shape.rank)],
        ones,
        [before if i == 1 else 0 for i in range(x.shape.rank)],
        [after if i == 1 else 0 for i in range(x.shape.rank)],
    )
    dtype = x.shape.dtype
    adder = scalar_reducer(b.module, Op.ADD, dtype)
    square_sum = b.reduce_window(f.mul(x, x), b.scalar(0, dtype), window, adder)
    scale = f.add(f.mul(square_sum, ctx.attr("alpha") / size), ctx.attr("bias"))
    return f.div(x, b.binary(Op.POWER, scale, f.k(ctx.attr("beta"))))
