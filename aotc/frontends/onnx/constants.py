"""Ops whose value is known at compile time: Constant, ConstantOfShape, Shape,
Size, Range."""

from __future__ import annotations

import numpy as np

from ...errors import ModelError, UnsupportedError
from ...ir import DType, Instruction, Op, Shape
from .dtypes import tensor_constant, tensor_to_array
from .extents import dimension_extents, product, shape_value, with_extents
from .helpers import full
from .registry import NodeContext, onnx_op

# Constant's value attributes other than the tensor `value`: numpy dtype of each
CONSTANT_LISTS = {
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
}


HALF_FLOATS = (DType.F16, DType.BF16)


@onnx_op("Constant")
def constant(ctx: NodeContext) -> Instruction:
    names = [attr.name for attr in ctx.node.attribute]
    if len(names) != 1:
        raise ModelError("Constant needs exactly one value attribute")
    name = names[0]
    if name == "value":
        return tensor_constant(ctx.b, ctx.attr("value"), "attribute 'value'", ctx.arrays)
    if name in CONSTANT_LISTS:
        return ctx.b.constant(np.asarray(ctx.attr(name), dtype=CONSTANT_LISTS[name]))
    raise UnsupportedError(f"attribute '{name}' is not supported")


@onnx_op("ConstantOfShape", since=9)
def constant_of_shape(ctx: NodeContext, shape: Instruction) -> Instruction:
    value_of_shape = shape_value(ctx, 0)
    assert value_of_shape is not None
    dims = value_of_shape.bounds
    if min(dims, default=0) < 0:
        raise ModelError(f"negative dims {dims}")
    tensor = ctx.attr("value")
    if tensor is None:
        value, dtype = np.zeros((), np.float32), DType.F32
    else:
        value, dtype = tensor_to_array(tensor, "attribute 'value'", ctx.arrays)
        if value.size != 1:
            raise ModelError("attribute 'value' must hold one element")
    result = full(ctx.b, value.reshape(()), dtype, dims)
    return with_extents(ctx, result, value_of_shape, range(len(dims)))


@onnx_op("Shape")
def shape(ctx: NodeContext, x: Instruction) -> Instruction:
    rank = x.array_shape.rank
    start, end = ctx.attr("start", 0), ctx.attr("end", rank)
    # negative bounds count from the end; both are clamped to [0, rank]
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    if x.array_shape.is_static or start >= end:
        return ctx.b.constant(np.asarray(x.array_shape.dims[start:end], dtype=np.int64))
    # bounded dims: their run-time extents
    entries = dimension_extents(ctx, x)[start:end]
    return ctx.b.concatenate([ctx.b.reshape(e, [1]) for e in entries], 0)


@onnx_op("Size")
def size(ctx: NodeContext, x: Instruction) -> Instruction:
    if x.array_shape.is_static:
        return ctx.b.constant(np.asarray(x.array_shape.size, dtype=np.int64))
    return product(ctx, dimension_extents(ctx, x), DType.S64)


@onnx_op("Range", since=11)
def range_(ctx: NodeContext, start: Instruction, limit: Instruction, delta: Instruction):
    b = ctx.b
    dtype = start.array_shape.dtype
    values = [shape_value(ctx, i) for i in range(3)]
    if not all(v is not None and v.is_constant for v in values):
        return _bounded_range(ctx, start, limit, values)
    first, stop, step = (ctx.const(i).reshape(()).item() for i in range(3))
    if step == 0:
        raise ModelError("Range delta must not be 0")
    count = max(int(np.ceil((stop - first) / step)), 0)
    # first + i * step; half floats compute in f32 where stash_type (opset 27) asks
    wide = DType.F32 if dtype in HALF_FLOATS and ctx.attr("stash_type", 0) == 1 else dtype
    steps = b.iota(Shape(wide, (count,)), 0)
    scaled = b.binary(Op.MULTIPLY, steps, full(b, step, wide, (count,)))
    return b.convert(b.binary(Op.ADD, scaled, full(b, first, wide, (count,))), dtype)


def _bounded_range(ctx: NodeContext, start, limit, values) -> Instruction:
    """Range to a limit that grows with a bounded dim's extent: integers from a constant
    start by a positive constant step, as many as the limit's bound allows, bounded by
    the run-time count ceil((limit - start) / step)."""
    first, stop, step = values
    dtype = start.array_shape.dtype
    if not (first.is_constant and step.is_constant and dtype.is_int and step.bounds[0] > 0):
        raise UnsupportedError(
            "a Range that varies with a bounded dim needs a constant start and a positive "
            "constant integer delta"
        )
    b = ctx.b
    (low,), (delta,) = first.bounds, step.bounds
    count = max(-(-(stop.bounds[0] - low) // delta), 0)
    steps = b.iota(Shape(dtype, (count,)), 0)
    values_at = b.binary(Op.MULTIPLY, steps, full(b, delta, dtype, (count,)))
    result = b.binary(Op.ADD, values_at, full(b, low, dtype, (count,)))
    # ceil((limit - start) / delta), at least 0
    span = b.binary(Op.SUBTRACT, stop.extent(ctx, 0), b.scalar(low - delta + 1, DType.S32))
    extent = b.binary(
        Op.MAXIMUM, b.binary(Op.DIVIDE, span, b.scalar(delta, DType.S32)), b.scalar(0, DType.S32)
    )
    return b.set_dimension_size(result, extent, 0)
