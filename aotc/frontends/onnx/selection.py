"""Sorting and selection: TopK, Unique, NonZero, Compress.

They lower onto stable HLO sorts that carry positions along with the keys.
NonZero, Compress and Unique have output shapes that depend on input values:
the count that decides the shape is built in HLO and read with `ctx.value`,
which asks to specialise on the inputs it depends on where it is not constant.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ...ir import (
    ComputationBuilder,
    Direction,
    DType,
    GatherDims,
    Instruction,
    Op,
    comparator,
    scalar_reducer,
)
from ...ir.evaluate import evaluate_constant, evaluate_extents
from . import extents
from .extents import shape_value
from .helpers import full, normalize_axis
from .indexing import INDEX, cumulative, iota
from .registry import NodeContext, onnx_op


def sort_along(
    b: ComputationBuilder,
    keys: Instruction,
    carried: list[Instruction],
    dim: int,
    descending: bool = False,
) -> list[Instruction]:
    """Stable sort of `keys` along `dim` (floats in total order: NaN above +inf),
    with `carried` permuted alike; returns the sorted keys then the carried arrays."""
    direction = Direction.GT if descending else Direction.LT
    order = comparator(
        b.module, keys.array_shape.dtype, direction, [c.array_shape.dtype for c in carried]
    )
    result = b.sort([keys, *carried], dim, order, is_stable=True)
    if not carried:
        return [result]
    return [b.get_tuple_element(result, i) for i in range(1 + len(carried))]


def take(b: ComputationBuilder, x: Instruction, positions: Instruction, axis: int):
    """x's slices at the 1-D s64 `positions` along `axis` (in range by construction)."""
    rank = x.array_shape.rank
    gather = GatherDims(
        offset_dims=tuple(d for d in range(rank) if d != axis),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
        index_vector_dim=1,
        slice_sizes=tuple(1 if d == axis else n for d, n in enumerate(x.array_shape.dims)),
    )
    return b.gather(x, positions, gather)


def count_true(ctx: NodeContext, mask: Instruction) -> int | Instruction:
    """The number of true entries of `mask`: an int where it is known at compile time,
    else an s32 scalar computed at run time (a bounded result's extent)."""
    b = ctx.b
    ones = b.convert(mask, INDEX)
    total = b.reduce(
        ones,
        b.scalar(0, INDEX),
        range(mask.array_shape.rank),
        scalar_reducer(b.module, Op.ADD, INDEX),
    )
    known = evaluate_constant(total)
    if known is not None:
        return int(np.asarray(known))
    return b.convert(total, DType.S32)


def true_positions(
    b: ComputationBuilder, mask: Instruction, count: int | Instruction, most: int | None = None
):
    """s64[count]: the positions of the true entries of the 1-D `mask`, ascending; for a
    count known only at run time, bounded by the mask's length; the first `most` of
    them at most (NodeContext.count_bound)."""
    n = mask.array_shape.dims[0]
    most = n if most is None else min(most, n)
    keys = b.select(mask, full(b, 0, DType.S32, (n,)), full(b, 1, DType.S32, (n,)))
    _, positions = sort_along(b, keys, [iota(b, (n,), 0)], 0)
    if isinstance(count, int):
        return b.slice(positions, [0], [min(count, most)])
    if most < n:
        positions = b.slice(positions, [0], [most])
        count = b.binary(Op.MINIMUM, count, b.scalar(most, DType.S32))
    return b.set_dimension_size(positions, count, 0)


# -- TopK ------------------------------------------------------------------------------


@onnx_op("TopK", since=1)
def top_k(ctx: NodeContext, x: Instruction, k: Instruction | None = None):
    """The k largest (smallest) along the axis, sorted, and their indices; k a constant,
    a value computed from bounded extents, or data (then the results are bounded by the
    axis, k clamped to it)."""
    b = ctx.b
    dims = x.array_shape.dims
    axis = normalize_axis(ctx.attr("axis", -1), x.array_shape.rank)
    data_k = _data_k(ctx, k, dims[axis]) if ctx.opset >= 10 and k is not None else None
    k_value = None if ctx.opset < 10 or data_k is not None else shape_value(ctx, 1)
    if data_k is not None:
        count = ctx.count_bound(dims[axis])
        data_k = b.binary(Op.MINIMUM, data_k, b.scalar(count, DType.S32))
    elif k_value is None:
        count = ctx.required_attr("k")
    else:  # k may vary with a bounded dim's extent (min(k, rows) in detectors)
        if len(k_value.bounds) != 1:
            raise ShapeError(f"k must hold one value, got {k_value.bounds}")
        count = k_value.bounds[0]
    if not 0 <= count <= dims[axis]:
        raise ShapeError(f"k={count} is out of range for an axis of size {dims[axis]}")
    # stable: equal values keep the lower index first, as ONNX asks ('sorted' may be ignored)
    largest = bool(ctx.attr("largest", 1))
    values, indices = sort_along(b, x, [iota(b, dims, axis)], axis, descending=largest)
    limits = [count if d == axis else n for d, n in enumerate(dims)]
    results = [b.slice(r, [0] * len(dims), limits) for r in (values, indices)]
    if k_value is not None and not k_value.is_constant:  # k at run time, at most its bound
        k = k_value.extent(ctx, 0)
        results = [b.set_dimension_size(r, k, axis) for r in results]
    if data_k is not None:
        results = [b.set_dimension_size(r, data_k, axis) for r in results]
    return results


def _data_k(ctx: NodeContext, k: Instruction, n: int) -> Instruction | None:
    """TopK's k as an s32 scalar within [0, n] where it is data (neither a constant nor
    computed from extents), else None."""
    if k.array_shape.size != 1 or evaluate_constant(k) is not None:
        return None
    if evaluate_extents(k, lambda bound: bound) is not None:
        return None
    b = ctx.b
    value = b.convert(b.reshape(k, []), DType.S32)
    low, high = b.scalar(0, DType.S32), b.scalar(n, DType.S32)
    return b.binary(Op.MINIMUM, b.binary(Op.MAXIMUM, value, low), high)


# -- value-dependent shapes ------------------------------------------------------------


@onnx_op("NonZero", since=9)
def non_zero(ctx: NodeContext, x: Instruction) -> Instruction:
    """The coordinates of x's non-zero entries in row-major order; of a bounded x, of
    those within its extents (the padded grid's coordinates are the actual ones, in the
    same order), their count known at run time."""
    b = ctx.b
    dims, rank = x.array_shape.dims, x.array_shape.rank
    inside = None
    for d in x.array_shape.bounded_dims:
        within = extents.inside(ctx, x, d, dims, d)
        inside = within if inside is None else b.binary(Op.AND, inside, within)
    x = extents.unbounded(ctx, x)
    found = b.compare(x, full(b, 0, x.array_shape.dtype, dims), Direction.NE)
    if inside is not None:
        found = b.binary(Op.AND, found, inside)
    mask = b.reshape(found, (x.array_shape.size,))
    count = count_true(ctx, mask)
    most = ctx.count_bound(mask.array_shape.dims[0])
    if isinstance(count, int) and (rank == 0 or count == 0):
        return b.constant(np.zeros((rank, count), np.int64))
    positions = true_positions(b, mask, count, most)
    found = positions.array_shape.dims[0]  # the count, or its bound
    rows = []
    for d in range(rank):
        stride = full(b, math.prod(dims[d + 1 :]), INDEX, (found,))
        coord = b.binary(Op.DIVIDE, positions, stride)
        coord = b.binary(Op.REMAINDER, coord, full(b, dims[d], INDEX, (found,)))
        rows.append(b.reshape(coord, (1, found)))
    return b.concatenate(rows, 0)


@onnx_op("Compress", since=9)
def compress(ctx: NodeContext, x: Instruction, condition: Instruction) -> Instruction:
    """The slices of x along the axis where the condition holds; of bounded operands,
    among the entries within both extents (numpy.compress: a short condition selects
    among the first entries only), their count known at run time."""
    b = ctx.b
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = b.reshape(x, (x.array_shape.size,)), 0
    axis = normalize_axis(axis, x.array_shape.rank)
    n = x.array_shape.dims[axis]
    if condition.array_shape.rank != 1:
        raise ShapeError(f"condition must be 1-D, got {list(condition.array_shape.dims)}")
    length = min(condition.array_shape.dims[0], n)
    mask = b.convert(extents.unbounded(ctx, b.slice(condition, [0], [length])), DType.PRED)
    for value, dim in ((condition, 0), (x, axis)):
        if value.array_shape.is_dynamic(dim):
            mask = b.binary(Op.AND, mask, extents.inside(ctx, value, dim, (length,), 0))
    count = count_true(ctx, mask)
    most = ctx.count_bound(length)
    if isinstance(count, int) and count == 0:
        dims = [0 if d == axis else s for d, s in enumerate(x.array_shape.dims)]
        return b.constant(np.zeros(dims, x.array_shape.dtype.numpy), x.array_shape.dtype)
    return take(b, x, true_positions(b, mask, count, most), axis)


def _group_ends(
    ctx: NodeContext, starts: Instruction, count, n: int, items: Instruction | None = None
) -> Instruction:
    """Where each group of sorted items ends: the next group's start, the number of
    items for the last (n, or the s64 scalar `items` of a bounded axis)."""
    b = ctx.b
    end = b.constant(np.array([n], np.int64))
    if isinstance(count, int):
        return b.concatenate([b.slice(starts, [1], [count]), end], 0)
    # at the bound n: the starts moved one place up, the items' end where the last ends
    whole = extents.unbounded(ctx, starts)
    shifted = b.concatenate([b.slice(whole, [1], [n]), end], 0)
    last = b.broadcast(b.binary(Op.SUBTRACT, b.convert(count, INDEX), b.scalar(1, INDEX)), [], (n,))
    before = b.compare(iota(b, (n,), 0), last, Direction.LT)
    final = full(b, n, INDEX, (n,)) if items is None else b.broadcast(items, [], (n,))
    ends = b.select(before, shifted, final)
    return b.set_dimension_size(ends, count, 0)


def _counted(ctx: NodeContext, n: int, count: Instruction) -> Instruction:
    """0, 1, ..., count - 1 (s64), bounded by n."""
    return ctx.b.set_dimension_size(iota(ctx.b, (n,), 0), count, 0)


def _differs(b: ComputationBuilder, x: Instruction, y: Instruction) -> Instruction:
    """x != y, NaNs equal to each other (numpy.unique folds them into one)."""
    unequal = b.compare(x, y, Direction.NE)
    if not x.array_shape.dtype.is_float:
        return unequal
    nans = b.binary(Op.AND, b.compare(x, x, Direction.NE), b.compare(y, y, Direction.NE))
    return b.binary(Op.AND, unequal, b.unary(Op.NOT, nans))


@onnx_op("Unique", since=11)
def unique(ctx: NodeContext, x: Instruction) -> list[Instruction]:
    """The distinct items along the axis (sorted, or in order of first occurrence), their
    first positions, each item's group and the groups' sizes; the number of groups may
    be known only at run time (then the outputs are bounded by the number of items).
    Of a bounded x, the items within the axis's extent, compared by their elements
    within the other dims' extents (the padding's columns are zeros in every item)."""
    b = ctx.b
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = b.reshape(x, (x.array_shape.size,)), 0
    axis = normalize_axis(axis, x.array_shape.rank)
    n = x.array_shape.dims[axis]
    if n == 0:
        raise ShapeError("Unique of an empty axis")
    if ctx.count_cap is not None:
        raise UnsupportedError(
            "Unique's count cannot be capped by --count: its inverse indices need every group"
        )
    keys, items, valid = _unique_keys(ctx, x, axis)
    # the items are the slices along axis; their columns are the sort keys
    moved = b.transpose(keys, [axis] + [d for d in range(x.array_shape.rank) if d != axis])
    table = b.reshape(moved, (n, moved.array_shape.size // n))
    columns = [
        b.reshape(b.slice(table, [0, c], [n, c + 1]), (n,))
        for c in range(table.array_shape.dims[1])
    ]
    # stable sorts from the last column to the first order the items lexicographically
    order = iota(b, (n,), 0)
    for column in reversed(columns):
        _, order = sort_along(b, take(b, column, order, 0), [order], 0)
    if valid is not None:  # the items past the axis's extent last
        padding = b.select(valid, full(b, 0, DType.S32, (n,)), full(b, 1, DType.S32, (n,)))
        _, order = sort_along(b, take(b, padding, order, 0), [order], 0)
    ranked = [take(b, column, order, 0) for column in columns]
    # an item opens a group where it differs from the item sorted before it
    first = b.constant(np.ones(1, bool))
    if n > 1:
        changes = [_differs(b, b.slice(c, [0], [n - 1]), b.slice(c, [1], [n])) for c in ranked]
        change = changes[0]
        for other in changes[1:]:
            change = b.binary(Op.OR, change, other)
        first = b.concatenate([first, change], 0)
    if valid is not None:  # sorted first, the items within the extent open groups
        first = b.binary(Op.AND, first, valid)
    count = count_true(ctx, first)
    starts = true_positions(b, first, count)
    counts = b.binary(Op.SUBTRACT, _group_ends(ctx, starts, count, n, items), starts)
    firsts = take(b, order, starts, 0)  # the stable sort put each first occurrence first
    group = cumulative(b, b.convert(first, INDEX), 0, Op.ADD, exclusive=False, reverse=False)
    group = b.binary(Op.SUBTRACT, group, full(b, 1, INDEX, (n,)))
    _, inverse = sort_along(b, order, [group], 0)  # back to the items' own order
    if items is not None:
        inverse = b.set_dimension_size(inverse, b.get_dimension_size(x, axis), 0)
    if not ctx.attr("sorted", 1):
        # groups in order of first occurrence; inverse indices follow the renumbering
        positions = iota(b, (count,), 0) if isinstance(count, int) else _counted(ctx, n, count)
        firsts, by_occurrence = sort_along(b, firsts, [positions], 0)
        counts = take(b, counts, by_occurrence, 0)
        _, renumbered = sort_along(b, by_occurrence, [positions], 0)
        inverse = take(b, renumbered, inverse, 0)
    distinct = take(b, keys, firsts, axis)
    for d in x.array_shape.bounded_dims:  # the other dims keep their extents
        if d != axis:
            distinct = b.set_dimension_size(distinct, b.get_dimension_size(x, d), d)
    return [distinct, firsts, inverse, counts]


def _unique_keys(ctx: NodeContext, x: Instruction, axis: int):
    """(x at its bounds with zeros in the padding of the dims besides `axis`, the
    axis's extent as an s64 scalar, whether each position along it lies within it: pred
    [n]), the last two None where the axis is static."""
    b = ctx.b
    shape = x.array_shape
    if shape.is_static:
        return x, None, None
    keys = extents.unbounded(ctx, x)
    for d in shape.bounded_dims:
        if d != axis:
            within = extents.inside(ctx, x, d, shape.dims, d)
            keys = b.select(within, keys, full(b, 0, shape.dtype, shape.dims))
    if not shape.is_dynamic(axis):
        return keys, None, None
    n = shape.dims[axis]
    items = b.convert(b.get_dimension_size(x, axis), INDEX)
    return keys, items, extents.inside(ctx, x, axis, (n,), 0)
