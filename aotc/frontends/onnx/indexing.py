"""Index-driven ops: GatherElements, GatherND, ReverseSequence, TensorScatter,
ScatterElements (and the deprecated Scatter), ScatterND, MaxUnpool, OneHot,
EyeLike, CumProd.

Most of them are a "point gather" or "point scatter": every element goes to or
comes from one element of the data, at coordinates built from iotas and the
index input, so they lower onto one HLO gather or scatter with every dim
collapsed and one full index vector per element.  Negative indices count from
the end of their axis, as ONNX says; what is still out of range (undefined in
ONNX) is clamped by gather and skipped by scatter, never read out of bounds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import (
    Computation,
    ComputationBuilder,
    Direction,
    DType,
    GatherDims,
    Instruction,
    Module,
    Op,
    ScatterDims,
    Shape,
    Window,
    replacer,
    scalar_reducer,
)
from . import extents
from .dtypes import to_dtype
from .helpers import REDUCE_INIT, full, full_like, normalize_axis
from .registry import NodeContext, onnx_op

INDEX = DType.S64


def check_indices(indices: Instruction) -> None:
    if not indices.array_shape.dtype.is_int:
        raise ShapeError(f"indices must be integers, got {indices.array_shape.dtype.text}")


def wrap_negative(b: ComputationBuilder, indices: Instruction, sizes: Instruction) -> Instruction:
    """s64 indices with negative ones moved up by `sizes` (the axis lengths, same shape)."""
    indices = b.convert(indices, INDEX)
    negative = b.compare(indices, full_like(b, 0, indices), Direction.LT)
    return b.select(negative, b.binary(Op.ADD, indices, sizes), indices)


def _extent(b: ComputationBuilder, data: Instruction, dim: int) -> Instruction:
    """Dim `dim` of `data` as an s64 scalar: a bounded dim's run-time extent."""
    if data.array_shape.is_dynamic(dim):
        return b.convert(b.get_dimension_size(data, dim), INDEX)
    return b.scalar(data.array_shape.dims[dim], INDEX)


def wrap_along(b: ComputationBuilder, indices: Instruction, data: Instruction, axis: int):
    """Indices into `data`'s dim `axis`, negative ones counted from its (run-time) end."""
    size = b.broadcast(_extent(b, data, axis), [], indices.array_shape.dims)
    return wrap_negative(b, indices, size)


def iota(b: ComputationBuilder, dims: Sequence[int], dim: int) -> Instruction:
    return b.iota(Shape(INDEX, tuple(dims)), dim)


def index_vectors(b: ComputationBuilder, coords: list[Instruction]) -> Instruction:
    """s64[*dims, len(coords)]: the (equal-shaped) coordinate arrays as index vectors."""
    dims = coords[0].array_shape.dims
    vectors = [b.reshape(b.convert(c, INDEX), (*dims, 1)) for c in coords]
    return b.concatenate(vectors, len(dims))


def gather_points(b: ComputationBuilder, data: Instruction, coords: list[Instruction]):
    """data[coords[0][i], coords[1][i], ...] for every position i of the (equal) coord shapes."""
    rank = data.array_shape.rank
    gather = GatherDims(
        offset_dims=(),
        collapsed_slice_dims=tuple(range(rank)),
        start_index_map=tuple(range(rank)),
        index_vector_dim=coords[0].array_shape.rank,
        slice_sizes=(1,) * rank,
    )
    return b.gather(data, index_vectors(b, coords), gather)


def wrap_vectors(b: ComputationBuilder, indices: Instruction, data: Instruction, first: int):
    """Index vectors along indices' last dim into `data`'s dims from `first` on,
    component i wrapped by dim first + i's (run-time) extent."""
    count = indices.array_shape.dims[-1]
    extents = [b.reshape(_extent(b, data, first + i), [1]) for i in range(count)]
    limits = b.concatenate(extents, 0) if extents else b.constant(np.zeros(0, np.int64), INDEX)
    dims = indices.array_shape.dims
    return wrap_negative(b, indices, b.broadcast(limits, [len(dims) - 1], dims))


# -- gathers ---------------------------------------------------------------------------


@onnx_op("GatherElements", since=11)
def gather_elements(ctx: NodeContext, data: Instruction, indices: Instruction) -> Instruction:
    b = ctx.b
    check_indices(indices)
    rank = data.array_shape.rank
    axis = normalize_axis(ctx.attr("axis"), rank)
    dims = indices.array_shape.dims
    if len(dims) != rank:
        raise ShapeError(f"indices have rank {len(dims)}, data has rank {rank}")
    coords = [iota(b, dims, d) for d in range(rank)]
    coords[axis] = wrap_along(b, indices, data, axis)
    return gather_points(b, data, coords)


@onnx_op("GatherND", since=11)
def gather_nd(ctx: NodeContext, data: Instruction, indices: Instruction) -> Instruction:
    b = ctx.b
    check_indices(indices)
    batch = ctx.attr("batch_dims", 0)
    r, q = data.array_shape.rank, indices.array_shape.rank
    k = indices.array_shape.dims[-1] if q else 0
    if q < 1 or batch >= min(r, q) or k > r - batch:
        raise ShapeError(
            f"GatherND of data {list(data.array_shape.dims)} with indices "
            f"{list(indices.array_shape.dims)} and batch_dims={batch}"
        )
    if data.array_shape.dims[:batch] != indices.array_shape.dims[:batch]:
        raise ShapeError("data and indices differ in their batch dims")
    indices = wrap_vectors(b, indices, data, batch)
    # batch dims join the index vector as iotas: one collapsed gather does it all
    lead = (*indices.array_shape.dims[:-1], 1)
    vector = b.concatenate([iota(b, lead, d) for d in range(batch)] + [indices], q - 1)
    picked = batch + k
    gather = GatherDims(
        offset_dims=tuple(range(q - 1, q - 1 + r - picked)),
        collapsed_slice_dims=tuple(range(picked)),
        start_index_map=tuple(range(picked)),
        index_vector_dim=q - 1,
        slice_sizes=(1,) * picked + data.array_shape.dims[picked:],
    )
    return b.gather(data, vector, gather)


@onnx_op("ReverseSequence", since=10)
def reverse_sequence(ctx: NodeContext, data: Instruction, lens: Instruction) -> Instruction:
    b = ctx.b
    dims = data.array_shape.dims
    batch_axis = normalize_axis(ctx.attr("batch_axis"), data.array_shape.rank)
    time_axis = normalize_axis(ctx.attr("time_axis"), data.array_shape.rank)
    if batch_axis == time_axis or lens.array_shape.dims != (dims[batch_axis],):
        raise ShapeError(
            f"sequence_lens {list(lens.array_shape.dims)} does not fit data "
            f"{list(dims)} with batch_axis={batch_axis}"
        )
    coords = [iota(b, dims, d) for d in range(len(dims))]
    t = coords[time_axis]
    length = b.broadcast(b.convert(lens, INDEX), [batch_axis], dims)
    # the first `length` steps of each sequence are read backwards, the rest stay
    mirrored = b.binary(Op.SUBTRACT, b.binary(Op.SUBTRACT, length, full_like(b, 1, t)), t)
    coords[time_axis] = b.select(b.compare(t, length, Direction.LT), mirrored, t)
    return gather_points(b, data, coords)


@onnx_op("TensorScatter", since=24)
def tensor_scatter(
    ctx: NodeContext,
    past: Instruction,
    update: Instruction,
    write_indices: Instruction | None = None,
) -> Instruction:
    b = ctx.b
    dims, rank = past.array_shape.dims, past.array_shape.rank
    axis = normalize_axis(ctx.attr("axis", -2), rank)
    mode = ctx.choice("mode", ("linear", "circular"))
    if axis == 0:
        raise UnsupportedError("TensorScatter along axis 0 (write indices are per batch)")
    fits = all(u == d or i == axis for i, (u, d) in enumerate(zip(update.array_shape.dims, dims)))
    seq, size = update.array_shape.dims[axis], dims[axis]
    if update.array_shape.rank != rank or not fits or seq > size:
        raise ShapeError(f"update {list(update.array_shape.dims)} does not fit cache {list(dims)}")
    if seq == 0:
        return past
    # each cache position p reads update step p - write_index (mod size if circular)
    coords = [iota(b, dims, d) for d in range(rank)]
    start = full(b, 0, INDEX, dims)
    if write_indices is not None:
        start = b.broadcast(b.convert(write_indices, INDEX), [0], dims)
    step = b.binary(Op.SUBTRACT, coords[axis], start)
    if mode == "circular":
        size_k = full(b, size, INDEX, dims)
        step = b.binary(Op.REMAINDER, step, size_k)
        negative = b.compare(step, full(b, 0, INDEX, dims), Direction.LT)
        step = b.select(negative, b.binary(Op.ADD, step, size_k), step)
    zero, last = full(b, 0, INDEX, dims), full(b, seq - 1, INDEX, dims)
    inside = b.binary(
        Op.AND,
        b.compare(step, zero, Direction.GE),
        b.compare(step, last, Direction.LE),
    )
    coords[axis] = b.clamp(zero, step, last)
    return b.select(inside, gather_points(b, update, coords), past)


# -- scatters --------------------------------------------------------------------------

REDUCTIONS = {"add": Op.ADD, "mul": Op.MULTIPLY, "max": Op.MAXIMUM, "min": Op.MINIMUM}


def combiner(module: Module, reduction: str, dtype: DType) -> Computation:
    """`(current, update) -> stored` of an ONNX scatter reduction; "none" stores the update."""
    if reduction != "none":
        return scalar_reducer(module, REDUCTIONS[reduction], dtype)
    return replacer(module, dtype)


def reduction(ctx: NodeContext) -> str:
    options = ("none", "add", "mul", "max", "min")[: 5 if ctx.opset >= 18 else 3]
    return ctx.choice("reduction", options) if "reduction" in ctx.attrs else "none"


def scatter_points(ctx: NodeContext, data: Instruction, coords: list[Instruction], updates):
    """`updates` combined into data at coordinates `coords`, one element each, in order
    (so with reduction "none" the last of repeated targets wins, as in onnx.reference)."""
    b = ctx.b
    rank = data.array_shape.rank
    dims = ScatterDims(
        update_window_dims=(),
        inserted_window_dims=tuple(range(rank)),
        scatter_dims_to_operand_dims=tuple(range(rank)),
        index_vector_dim=coords[0].array_shape.rank,
    )
    update = combiner(b.module, reduction(ctx), data.array_shape.dtype)
    return b.scatter(data, index_vectors(b, coords), updates, dims, update)


@onnx_op("Scatter", since=9)
@onnx_op("ScatterElements", since=11)
def scatter_elements(ctx: NodeContext, data: Instruction, indices: Instruction, updates):
    b = ctx.b
    check_indices(indices)
    rank = data.array_shape.rank
    axis = normalize_axis(ctx.attr("axis", 0), rank)
    dims = indices.array_shape.dims
    if len(dims) != rank or updates.shape.dims != dims:
        raise ShapeError(
            f"indices {list(dims)} and updates {list(updates.shape.dims)} "
            f"do not fit data {list(data.array_shape.dims)}"
        )
    coords = [iota(b, dims, d) for d in range(rank)]
    coords[axis] = wrap_along(b, indices, data, axis)
    return scatter_points(ctx, data, coords, updates)


@onnx_op("ScatterND", since=11)
def scatter_nd(ctx: NodeContext, data: Instruction, indices: Instruction, updates):
    b = ctx.b
    check_indices(indices)
    r, q = data.array_shape.rank, indices.array_shape.rank
    k = indices.array_shape.dims[-1] if q else 0
    expected = (*indices.array_shape.dims[:-1], *data.array_shape.dims[k:])
    if q < 1 or k > r or updates.shape.dims != expected:
        raise ShapeError(
            f"ScatterND into {list(data.array_shape.dims)} with indices "
            f"{list(indices.array_shape.dims)} needs updates {list(expected)}"
        )
    dims = ScatterDims(
        update_window_dims=tuple(range(q - 1, q - 1 + r - k)),
        inserted_window_dims=tuple(range(k)),
        scatter_dims_to_operand_dims=tuple(range(k)),
        index_vector_dim=q - 1,
    )
    update = combiner(b.module, reduction(ctx), data.array_shape.dtype)
    vectors = wrap_vectors(b, indices, data, 0)
    return b.scatter(data, vectors, updates, dims, update)


@onnx_op("MaxUnpool", since=9)
def max_unpool(ctx: NodeContext, x: Instruction, indices: Instruction, output_shape=None):
    b = ctx.b
    check_indices(indices)
    n = x.array_shape.rank - 2
    if n < 1 or indices.array_shape.dims != x.array_shape.dims:
        raise ShapeError(
            f"MaxUnpool of {list(x.array_shape.dims)} with indices {list(indices.array_shape.dims)}"
        )
    kernel = ctx.window_ints("kernel_shape", n, None)
    strides = ctx.window_ints("strides", n, 1)
    pads = ctx.window_ints("pads", 2 * n, 0)
    spatial = x.array_shape.dims[2:]
    inferred = [*x.array_shape.dims[:2]] + [
        (spatial[i] - 1) * strides[i] - pads[i] - pads[n + i] + kernel[i] for i in range(n)
    ]
    # each value goes to its flat index in the unpooled tensor, the rest are zeros
    size = int(np.prod(inferred))
    flat = full(b, 0, x.array_shape.dtype, (size,))
    dims = ScatterDims((), (0,), (0,), index_vector_dim=1)
    values = b.reshape(x, (x.array_shape.size,))
    positions = b.reshape(b.convert(indices, INDEX), (x.array_shape.size,))
    update = combiner(b.module, "none", x.array_shape.dtype)
    unpooled = b.reshape(b.scatter(flat, positions, values, dims, update), inferred)
    if output_shape is None:
        return unpooled
    # as onnx.reference: the unpooled tensor sits at the start of a larger output
    wanted = ctx.const_ints(2)
    if len(wanted) != len(inferred) or any(w < d for w, d in zip(wanted, inferred)):
        raise ShapeError(f"output_shape {wanted} is smaller than the unpooled {inferred}")
    zero = b.scalar(0, x.array_shape.dtype)
    return b.pad(unpooled, zero, [0] * len(wanted), [w - d for w, d in zip(wanted, inferred)])


# -- generated tensors -----------------------------------------------------------------


@onnx_op("OneHot", since=9)
def one_hot(ctx: NodeContext, indices: Instruction, depth: Instruction, values: Instruction):
    b = ctx.b
    depth_values = ctx.const(1).reshape(-1)
    if depth_values.size != 1 or values.array_shape.dims != (2,):
        raise ShapeError("depth must be a scalar and values a pair [off, on]")
    n = int(depth_values[0])
    if n < 0:
        raise ModelError(f"depth {n} is negative")
    rank = indices.array_shape.rank + 1
    axis = normalize_axis(ctx.attr("axis"), rank)
    out_dims = (*indices.array_shape.dims[:axis], n, *indices.array_shape.dims[axis:])
    dtype = indices.array_shape.dtype
    if ctx.opset >= 11 and not dtype.is_unsigned_int:
        # wrap in-range negatives; others stay out of range and match nothing
        negative = b.compare(indices, full_like(b, 0, indices), Direction.LT)
        indices = b.select(negative, b.binary(Op.ADD, indices, full_like(b, n, indices)), indices)
    spread = b.broadcast(indices, [d for d in range(rank) if d != axis], out_dims)
    hot = b.compare(spread, b.iota(Shape(dtype, out_dims), axis), Direction.EQ)
    off, on = (b.reshape(b.slice(values, [i], [i + 1]), ()) for i in (0, 1))
    return b.select(hot, b.broadcast(on, [], out_dims), b.broadcast(off, [], out_dims))


@onnx_op("EyeLike", since=9)
def eye_like(ctx: NodeContext, x: Instruction) -> Instruction:
    b = ctx.b
    if x.array_shape.rank != 2:
        raise ShapeError(f"EyeLike needs a 2-D input, got {list(x.array_shape.dims)}")
    dtype = x.array_shape.dtype
    if ctx.attr("dtype") is not None:
        dtype = to_dtype(ctx.attr("dtype"), "attribute dtype")
    dims = x.array_shape.dims
    shifted = b.binary(Op.ADD, iota(b, dims, 0), full(b, ctx.attr("k", 0), INDEX, dims))
    return b.convert(b.compare(shifted, iota(b, dims, 1), Direction.EQ), dtype)


# -- scans -----------------------------------------------------------------------------


def cumulative(
    b: ComputationBuilder, x: Instruction, axis: int, op: Op, exclusive: bool, reverse: bool
) -> Instruction:
    """Running `op` along `axis` as a reduce-window as long as the axis."""
    rank, n = x.array_shape.rank, x.array_shape.dims[axis]
    dtype = x.array_shape.dtype
    identity = b.scalar(REDUCE_INIT[op](dtype), dtype)
    if exclusive and n:
        # shift by one step, the identity entering at the start, so no inverse of op is needed
        step = -1 if reverse else 1
        low = [step if i == axis else 0 for i in range(rank)]
        x = b.pad(x, identity, low, [-lo for lo in low])
    before = 0 if reverse else n - 1
    window = Window.make(
        [n if i == axis else 1 for i in range(rank)],
        None,
        [before if i == axis else 0 for i in range(rank)],
        [n - 1 - before if i == axis else 0 for i in range(rank)],
    )
    return b.reduce_window(x, identity, window, scalar_reducer(b.module, op, dtype))


def running(
    ctx: NodeContext, x: Instruction, axis: int, op: Op, exclusive: bool, reverse: bool
) -> Instruction:
    """`cumulative`, of a value with bounded dims too: computed at the bounds, the
    padding along `axis` made the identity where it would run into the values (from
    the end), the result bounded as x."""
    shape = x.array_shape
    if shape.is_static:
        return cumulative(ctx.b, x, axis, op, exclusive, reverse)
    b = ctx.b
    whole = extents.unbounded(ctx, x)
    if reverse and shape.is_dynamic(axis):
        identity = full(b, REDUCE_INIT[op](shape.dtype), shape.dtype, shape.dims)
        whole = b.select(extents.inside(ctx, x, axis, shape.dims, axis), whole, identity)
    out = cumulative(b, whole, axis, op, exclusive, reverse)
    for d in shape.bounded_dims:
        out = b.set_dimension_size(out, b.get_dimension_size(x, d), d)
    return out


@onnx_op("CumProd", since=26)
def cumprod(ctx: NodeContext, x: Instruction, axis: Instruction) -> Instruction:
    axis_values = ctx.const(1).reshape(-1)
    if axis_values.size != 1:
        raise ShapeError("axis must be a scalar")
    dim = normalize_axis(int(axis_values[0]), x.array_shape.rank)
    exclusive, reverse = bool(ctx.attr("exclusive")), bool(ctx.attr("reverse"))
    return running(ctx, x, dim, Op.MULTIPLY, exclusive, reverse)
