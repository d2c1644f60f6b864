"""Shapes computed from bounded dims: ONNX's Shape and Size of a bounded input give the
run-time extents (get-dimension-size), and the ops that take a shape as data (Reshape,
Expand, ConstantOfShape, Range, Slice) read it through `shape_value`: its value at the
bounds (the largest each entry takes, which sizes the result) and which entries vary
with an extent, whose run-time values the result's dims then take
(set-dimension-size, `with_extents`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import UnsupportedError
from ...ir import Direction, DType, GatherDims, Instruction, Op, Shape
from ...ir.evaluate import evaluate_constant, evaluate_extents
from .registry import NodeContext


@dataclass(frozen=True)
class ShapeValue:
    """An integer vector input: its entries at the bounds, which of them vary with a
    bounded dim's extent, and the instruction that computes them at run time."""

    bounds: list[int]
    varies: list[bool]
    runtime: Instruction

    @property
    def is_constant(self) -> bool:
        return not any(self.varies)

    def extent(self, ctx: NodeContext, index: int) -> Instruction:
        """Entry `index` at run time, as an s32 scalar."""
        b = ctx.b
        vector = b.reshape(self.runtime, [len(self.bounds)])
        entry = b.reshape(b.slice(vector, [index], [index + 1]), [])
        return entry if entry.array_shape.dtype is DType.S32 else b.convert(entry, DType.S32)


def shape_value(ctx: NodeContext, index: int) -> ShapeValue | None:
    """Input `index` (an integer vector) as a ShapeValue; None if omitted.  Refused where
    it depends on data other than extents, or an entry shrinks as an extent grows (its
    value at the bounds would not be its largest)."""
    instr = ctx.inputs[index] if index < len(ctx.inputs) else None
    if instr is None:
        return None
    known = evaluate_constant(instr)
    if known is not None:
        values = [int(v) for v in np.asarray(known).reshape(-1)]
        return ShapeValue(values, [False] * len(values), instr)
    high = evaluate_extents(instr, lambda bound: bound)
    if high is None:
        ctx.const(index)  # raises: the value depends on data, naming the inputs
    highs = [int(v) for v in np.asarray(high).reshape(-1)]
    varies = [False] * len(highs)
    for fraction in PROBES:
        value = evaluate_extents(instr, lambda bound, f=fraction: int(bound * f))
        for k, v in enumerate(int(v) for v in np.asarray(value).reshape(-1)):
            if v > highs[k]:
                raise UnsupportedError(
                    f"input '{ctx.input_name(index)}' entry {k} is larger at an extent "
                    "below the bound than at the bound (its bound is unknown)"
                )
            varies[k] = varies[k] or v != highs[k]
    return ShapeValue(highs, varies, instr)


# the extents, as fractions of the bounds, at which a shape computed from bounded dims
# is evaluated besides the bounds: an entry that differs at any varies with them, and
# none may pass its value at the bounds (which sizes the result)
PROBES = (0.0, 1 / 7, 0.25, 0.5, 0.61, 0.75, 0.9, 0.999)


def with_extents(
    ctx: NodeContext, x: Instruction, value: ShapeValue, dims: Sequence[int]
) -> Instruction:
    """`x` with each dim d bounded by the run-time value of entry `dims[d]` of `value`
    (-1: none) where that entry varies and the dim is not bounded already."""
    for d, entry in enumerate(dims):
        if entry < 0 or not value.varies[entry] or x.array_shape.is_dynamic(d):
            continue
        x = ctx.b.set_dimension_size(x, value.extent(ctx, entry), d)
    return x


def unbounded(ctx: NodeContext, x: Instruction) -> Instruction:
    """`x` as a static array at its bounds (a copy: each element gathered), for a
    lowering that masks the padding itself; `x` where it is static already."""
    shape = x.array_shape
    if shape.is_static:
        return x
    b = ctx.b
    grid = Shape(DType.S64, shape.dims)
    coords = [b.reshape(b.iota(grid, d), (*shape.dims, 1)) for d in range(shape.rank)]
    indices = b.concatenate(coords, shape.rank) if coords else None
    assert indices is not None
    rank = shape.rank
    dims = GatherDims((), tuple(range(rank)), tuple(range(rank)), rank, (1,) * rank)
    return b.gather(x, indices, dims)


def inside(ctx: NodeContext, x: Instruction, dim: int, dims: Sequence[int], at: int):
    """pred of `dims`: whether position `at` of it lies within the run-time extent of
    `x`'s dim `dim` (all true where that dim is static)."""
    b = ctx.b
    if not x.array_shape.is_dynamic(dim):
        return b.broadcast(b.constant(True), [], dims)
    extent = b.broadcast(b.get_dimension_size(x, dim), [], dims)
    return b.compare(b.iota(Shape(DType.S32, tuple(dims)), at), extent, Direction.LT)


def dimension_extents(ctx: NodeContext, x: Instruction) -> list[Instruction]:
    """Each dim of `x` as an s64 scalar: a constant, or a bounded dim's run-time extent."""
    b = ctx.b
    shape = x.array_shape
    return [
        b.convert(b.get_dimension_size(x, d), DType.S64)
        if shape.is_dynamic(d)
        else b.scalar(shape.dims[d], DType.S64)
        for d in range(shape.rank)
    ]


def product(ctx: NodeContext, values: Sequence[Instruction], dtype: DType) -> Instruction:
    """The product of scalars (1 for none)."""
    b = ctx.b
    result = b.scalar(1, dtype)
    for v in values:
        result = b.binary(Op.MULTIPLY, result, v)
    return result
