"""IR-building helpers shared by the lowering families: broadcasting, scalars,
axes, reductions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ...errors import ModelError, ShapeError
from ...ir import ComputationBuilder, Direction, DType, Instruction, Op, scalar_reducer


def broadcast_dims(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The numpy (multidirectional) broadcast of `shapes`."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        sizes = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            listed = " and ".join(str(list(s)) for s in shapes)
            raise ShapeError(f"shapes {listed} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_all(b: ComputationBuilder, *xs: Instruction) -> list[Instruction]:
    """The operands broadcast numpy-style to one common shape."""
    dims = broadcast_dims(*(x.array_shape.dims for x in xs))
    return [b.broadcast_to(x, dims) for x in xs]


def unidirectional(b: ComputationBuilder, x: Instruction, dims: Sequence[int]) -> Instruction:
    """`x` broadcast to exactly `dims` (ONNX unidirectional broadcasting)."""
    if broadcast_dims(x.array_shape.dims, dims) != tuple(dims):
        raise ShapeError(f"shape {list(x.array_shape.dims)} does not broadcast to {list(dims)}")
    return b.broadcast_to(x, dims)


def binary(b: ComputationBuilder, op: Op, x: Instruction, y: Instruction) -> Instruction:
    """`op(x, y)` with numpy broadcasting."""
    x, y = broadcast_all(b, x, y)
    return b.binary(op, x, y)


def full(b: ComputationBuilder, value, dtype: DType, dims: Sequence[int]) -> Instruction:
    """An array of `dims` filled with `value`."""
    return b.broadcast(b.scalar(value, dtype), [], dims)


def full_like(
    b: ComputationBuilder, value, x: Instruction, dtype: DType | None = None
) -> Instruction:
    """An array of `x`'s dims (its bounded ones too, at x's extents) filled with `value`
    (a number, or a scalar instruction of that type), of x's element type or `dtype`."""
    shape = x.array_shape
    if isinstance(value, Instruction):
        wanted = dtype or shape.dtype
        if value.array_shape.dtype is not wanted:
            value = b.convert(value, wanted)
        filled = b.broadcast(value, [], shape.dims)
    else:
        filled = full(b, value, dtype or shape.dtype, shape.dims)
    for d in shape.bounded_dims:
        filled = b.set_dimension_size(filled, b.get_dimension_size(x, d), d)
    return filled


def lowest(dtype: DType):
    """The identity of maximum: -inf, or the least value of types without infinities."""
    return dtype.limits[0]


def highest(dtype: DType):
    """The identity of minimum: +inf, or the greatest value of types without infinities."""
    return dtype.limits[1]


# the init value of a reduction with each combining op
REDUCE_INIT = {
    Op.ADD: lambda dtype: 0,
    Op.MULTIPLY: lambda dtype: 1,
    Op.MAXIMUM: lowest,
    Op.MINIMUM: highest,
}


def normalize_axis(axis: int, rank: int) -> int:
    """ONNX axis (negative counts from the end) as an index in [0, rank)."""
    if not -rank <= axis < rank:
        raise ModelError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(axes: Iterable[int], rank: int) -> list[int]:
    result = [normalize_axis(int(a), rank) for a in axes]
    if len(set(result)) != len(result):
        raise ModelError(f"repeated axes {list(axes)}")
    return sorted(result)


def reduce(
    b: ComputationBuilder, x: Instruction, op: Op, axes: Sequence[int], keepdims: bool
) -> Instruction:
    """Reduce `x` over `axes` with `op`; keep them as size-1 dims if `keepdims`."""
    dtype = x.array_shape.dtype
    init = b.scalar(REDUCE_INIT[op](dtype), dtype)
    out = b.reduce(x, init, axes, scalar_reducer(b.module, op, dtype))
    return keep_dims(b, out, x.array_shape.dims, axes) if keepdims else out


def keep_dims(
    b: ComputationBuilder, x: Instruction, dims: Sequence[int], axes: Sequence[int]
) -> Instruction:
    """Reshape a reduction's result back to rank len(dims) with 1s at `axes`."""
    return b.reshape(x, [1 if i in axes else d for i, d in enumerate(dims)])


def element_count(b: ComputationBuilder, x: Instruction, axes: Sequence[int]) -> int | Instruction:
    """The number of elements a reduction over `axes` of `x` takes (a mean's divisor):
    an int, or where an axis is bounded a scalar of x's element type computed from the
    extents at run time."""
    shape = x.array_shape
    count = int(np.prod([shape.dims[a] for a in axes if not shape.is_dynamic(a)], dtype=np.int64))
    bounded = [a for a in axes if shape.is_dynamic(a)]
    if not bounded:
        return count
    total = b.scalar(count, DType.S64)
    for a in bounded:
        extent = b.convert(b.get_dimension_size(x, a), DType.S64)
        total = b.binary(Op.MULTIPLY, total, extent)
    return b.convert(total, shape.dtype)


def softmax(
    b: ComputationBuilder, x: Instruction, axes: Sequence[int], log: bool = False
) -> Instruction:
    """exp(x - max) / sum(exp(x - max)) over `axes` (its log with `log`)."""
    f = Formula(b, x)
    peak = b.broadcast_to(reduce(b, x, Op.MAXIMUM, axes, keepdims=True), x.array_shape.dims)
    shifted = b.binary(Op.SUBTRACT, x, peak)
    exp = f.f(Op.EXP, shifted)
    total = b.broadcast_to(reduce(b, exp, Op.ADD, axes, keepdims=True), x.array_shape.dims)
    if log:
        return b.binary(Op.SUBTRACT, shifted, f.f(Op.LOG, total))
    return b.binary(Op.DIVIDE, exp, total)


class Formula:
    """Elementwise arithmetic on one shape, scalars broadcast on the fly."""

    def __init__(self, b: ComputationBuilder, like: Instruction):
        self.b = b
        self.like = like

    def k(self, value: float) -> Instruction:
        return full_like(self.b, value, self.like)

    def _lift(self, v: Instruction | float) -> Instruction:
        """A number, or a scalar instruction (a run-time count), as `like`'s dims."""
        if isinstance(v, Instruction):
            scalar = v.array_shape.rank == 0 and self.like.array_shape.rank > 0
            return full_like(self.b, v, self.like) if scalar else v
        return self.k(v)

    def add(self, x, y) -> Instruction:
        return self.b.binary(Op.ADD, self._lift(x), self._lift(y))

    def sub(self, x, y) -> Instruction:
        return self.b.binary(Op.SUBTRACT, self._lift(x), self._lift(y))

    def mul(self, x, y) -> Instruction:
        return self.b.binary(Op.MULTIPLY, self._lift(x), self._lift(y))

    def div(self, x, y) -> Instruction:
        return self.b.binary(Op.DIVIDE, self._lift(x), self._lift(y))

    def max(self, x, y) -> Instruction:
        return self.b.binary(Op.MAXIMUM, self._lift(x), self._lift(y))

    def min(self, x, y) -> Instruction:
        return self.b.binary(Op.MINIMUM, self._lift(x), self._lift(y))

    def f(self, op: Op, x) -> Instruction:
        return self.b.unary(op, self._lift(x))

    def where(self, x, direction: Direction, y, on_true, on_false) -> Instruction:
        pred = self.b.compare(self._lift(x), self._lift(y), direction)
        return self.b.select(pred, self._lift(on_true), self._lift(on_false))
