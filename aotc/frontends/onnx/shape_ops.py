"""Data movement: Reshape, Flatten, Transpose, Concat, Squeeze, Unsqueeze,
Slice, Gather, Pad, Expand, Tile, Split, SpaceToDepth, DepthToSpace,
CenterCropPad, Col2Im.

Shape-like inputs (Reshape's shape, Slice's starts, Pad's pads...) must be
compile-time constants; `ctx.const` folds them or refuses the model.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DType, GatherDims, Instruction, Op
from ...ir.evaluate import evaluate_constant
from ...ir.relayout import relayout
from .extents import ShapeValue, shape_value, with_extents
from .helpers import broadcast_dims, full_like, normalize_axes, normalize_axis
from .registry import NodeContext, onnx_op


@onnx_op("Reshape", since=5)
def reshape(ctx: NodeContext, x: Instruction, shape: Instruction) -> Instruction:
    in_dims = x.array_shape.dims
    allow_zero = ctx.attr("allowzero", 0)
    value = shape_value(ctx, 1)
    assert value is not None
    dims = []
    for i, d in enumerate(value.bounds):
        if d == 0 and not allow_zero:
            if i >= len(in_dims):
                raise ShapeError(f"shape entry {i} is 0 but the input has rank {len(in_dims)}")
            d = in_dims[i]  # 0 copies the input's dim
        elif d < -1:
            raise ShapeError(f"invalid shape entry {d}")
        dims.append(d)
    if dims.count(-1) > 1:
        raise ShapeError("at most one shape entry may be -1")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        size = x.array_shape.size
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape {list(in_dims)} to {dims}")
        dims[dims.index(-1)] = size // known
    if int(np.prod(dims, dtype=np.int64)) != x.array_shape.size:
        raise ShapeError(f"cannot reshape {list(in_dims)} to {dims}")
    result = ctx.b.reshape(x, dims)
    if x.array_shape.is_static and value.is_constant:
        return result
    return _reshape_extents(ctx, x, value, result)


def _reshape_extents(ctx: NodeContext, x: Instruction, value: ShapeValue, result: Instruction):
    """A reshape of bounded dims, or to a shape that varies with them.  Where the shape
    bounds a dim that the reshape does not (a split of a bounded dim into several), the
    values move to the new dims' extents (ir/relayout.py); a fixed entry (not 0 or -1)
    where the reshape carries a bounded dim is refused."""
    shape, out = x.array_shape, result.array_shape
    wanted = [
        varies or (entry == 0 and shape.is_dynamic(d)) or (entry == -1 and out.is_dynamic(d))
        for d, (entry, varies) in enumerate(zip(value.bounds, value.varies))
    ]
    fixed = [d for d in range(out.rank) if out.is_dynamic(d) and not wanted[d]]
    if fixed:
        raise UnsupportedError(
            f"shape entry {fixed[0]} is fixed, but the reshape of {shape} bounds dim {fixed[0]}"
        )
    if wanted == [out.is_dynamic(d) for d in range(out.rank)]:
        return result
    b = ctx.b
    in_sizes = [_extent(b, x, d) for d in range(shape.rank)]
    out_sizes = []
    for d, (entry, varies) in enumerate(zip(value.bounds, value.varies)):
        if varies:
            out_sizes.append(value.extent(ctx, d))
        elif entry == 0:
            out_sizes.append(in_sizes[d])
        else:
            out_sizes.append(b.scalar(out.dims[d], DType.S32))
    if -1 in value.bounds and not value.varies[value.bounds.index(-1)]:
        rest = value.bounds.index(-1)  # the elements less the other dims' extents
        total, others = b.scalar(1, DType.S32), b.scalar(1, DType.S32)
        for size in in_sizes:
            total = b.binary(Op.MULTIPLY, total, size)
        for d, size in enumerate(out_sizes):
            if d != rest:
                others = b.binary(Op.MULTIPLY, others, size)
        out_sizes[rest] = b.binary(
            Op.DIVIDE, total, b.binary(Op.MAXIMUM, others, b.scalar(1, DType.S32))
        )
    moved = relayout(b, x, in_sizes, out.dims, out_sizes)
    for d in range(out.rank):
        if wanted[d]:
            moved = b.set_dimension_size(moved, out_sizes[d], d)
    return moved


def _extent(b: ComputationBuilder, x: Instruction, dim: int) -> Instruction:
    """Dim `dim` of `x` at run time as an s32 scalar (a constant where it is static)."""
    if x.array_shape.is_dynamic(dim):
        return b.get_dimension_size(x, dim)
    return b.scalar(x.array_shape.dims[dim], DType.S32)


@onnx_op("Flatten")
def flatten(ctx: NodeContext, x: Instruction) -> Instruction:
    rank = x.array_shape.rank
    axis = ctx.attr("axis")
    if not -rank <= axis <= rank:
        raise ModelError(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    outer = int(np.prod(x.array_shape.dims[:axis], dtype=np.int64))
    return ctx.b.reshape(x, (outer, int(np.prod(x.array_shape.dims[axis:], dtype=np.int64))))


@onnx_op("Transpose")
def transpose(ctx: NodeContext, x: Instruction) -> Instruction:
    perm = ctx.attr("perm") or list(reversed(range(x.array_shape.rank)))
    if sorted(perm) != list(range(x.array_shape.rank)):
        raise ShapeError(f"perm {list(perm)} is not a permutation of {x.array_shape.rank} dims")
    return ctx.b.transpose(x, perm)


@onnx_op("Concat")
def concat(ctx: NodeContext, *xs: Instruction) -> Instruction:
    axis = normalize_axis(ctx.required_attr("axis"), xs[0].array_shape.rank)
    return ctx.b.concatenate(xs, axis)


def _squeeze(ctx: NodeContext, x: Instruction, axes: Sequence[int] | None) -> Instruction:
    dims = x.array_shape.dims
    if axes is None:
        axes = [i for i, d in enumerate(dims) if d == 1]
    axes = normalize_axes(axes, x.array_shape.rank)
    for a in axes:
        if dims[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {dims[a]}")
    return ctx.b.reshape(x, [d for i, d in enumerate(dims) if i not in axes])


def _unsqueeze(ctx: NodeContext, x: Instruction, axes: Sequence[int]) -> Instruction:
    rank = x.array_shape.rank + len(axes)
    axes = normalize_axes(axes, rank)
    rest = iter(x.array_shape.dims)
    return ctx.b.reshape(x, [1 if i in axes else next(rest) for i in range(rank)])


@onnx_op("Squeeze", until=12)
def squeeze_attribute(ctx: NodeContext, x: Instruction) -> Instruction:
    return _squeeze(ctx, x, ctx.attr("axes"))


@onnx_op("Squeeze", since=13)
def squeeze(ctx: NodeContext, x: Instruction, axes=None) -> Instruction:
    return _squeeze(ctx, x, ctx.const_ints(1))


@onnx_op("Unsqueeze", until=12)
def unsqueeze_attribute(ctx: NodeContext, x: Instruction) -> Instruction:
    return _unsqueeze(ctx, x, ctx.required_attr("axes"))


@onnx_op("Unsqueeze", since=13)
def unsqueeze(ctx: NodeContext, x: Instruction, axes: Instruction) -> Instruction:
    return _unsqueeze(ctx, x, ctx.const_ints(1))


def _slice_bounds(d: int, start: int, end: int, step: int) -> tuple[int, int, int, bool]:
    """ONNX's clamped [start:end:step] on a dim of size d, as (begin, limit, stride,
    reversed); a negative step becomes a positive one on the reversed dim."""
    if step == 0:
        raise ModelError("slice step must not be 0")
    start = start + d if start < 0 else start
    end = end + d if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
        count = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
        count = max(0, -(-(start - end) // -step))
        start = d - 1 - start  # index on the reversed dim
    if count == 0:
        return 0, 0, 1, False
    return start, start + (count - 1) * abs(step) + 1, abs(step), step < 0


def _slice(ctx: NodeContext, x: Instruction, starts, ends, axes, steps) -> Instruction:
    rank = x.array_shape.rank
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError("starts, ends, axes and steps must have one length")
    if len(set(axes)) != len(axes):
        raise ModelError(f"repeated axes {axes}")
    begin, limit, stride = [0] * rank, list(x.array_shape.dims), [1] * rank
    flipped = []
    for axis, start, end, step in zip(axes, starts, ends, steps):
        bounds = _slice_bounds(x.array_shape.dims[axis], int(start), int(end), int(step))
        begin[axis], limit[axis], stride[axis], is_reversed = bounds
        if is_reversed:
            flipped.append(axis)
    if flipped:
        x = ctx.b.reverse(x, sorted(flipped))
    if begin == [0] * rank and limit == list(x.array_shape.dims) and stride == [1] * rank:
        return x
    return ctx.b.slice(x, begin, limit, stride)


@onnx_op("Slice", until=9)
def slice_attributes(ctx: NodeContext, x: Instruction) -> Instruction:
    starts, ends = ctx.required_attr("starts"), ctx.required_attr("ends")
    return _slice(ctx, x, starts, ends, ctx.attr("axes"), None)


@onnx_op("Slice", since=10)
def slice_inputs(ctx: NodeContext, x: Instruction, *_: Instruction) -> Instruction:
    ends = shape_value(ctx, 2)
    assert ends is not None
    if ends.is_constant:
        starts = ctx.const_ints(1)
        return _slice(ctx, x, starts, ends.bounds, ctx.const_ints(3), ctx.const_ints(4))
    return _slice_to_extents(ctx, x, ends)


def _slice_to_extents(ctx: NodeContext, x: Instruction, ends: ShapeValue) -> Instruction:
    """A slice whose ends grow with a bounded dim's extent (x[:, :seq]): sliced to the
    ends' bounds, each such axis bounded by its run-time end (at most the axis's
    extent) less its start.  Starts constant and not negative (0 on a bounded axis),
    steps 1."""
    rank = x.array_shape.rank
    starts, axes, steps = ctx.const_ints(1), ctx.const_ints(3), ctx.const_ints(4)
    assert starts is not None  # a required input
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, rank) for a in axes]
    if steps is not None and any(s != 1 for s in steps):
        raise UnsupportedError("a slice whose end varies with a bounded dim needs steps of 1")
    entries = [-1] * rank
    for k, (axis, start, varies) in enumerate(zip(axes, starts, ends.varies)):
        if varies:
            bounded = x.array_shape.is_dynamic(axis)
            if start < 0 or (bounded and start != 0):
                raise UnsupportedError(
                    f"a slice of axis {axis} to an end that varies with a bounded dim needs "
                    "a start of 0 or more (0 on a bounded axis)"
                )
            entries[axis] = k
    result = _slice(ctx, x, starts, ends.bounds, axes, None)
    b = ctx.b
    for axis, k in enumerate(entries):
        if k >= 0:
            end = b.binary(Op.MINIMUM, ends.extent(ctx, k), _extent(b, x, axis))
            end = b.binary(Op.MAXIMUM, end, b.scalar(starts[k], DType.S32))
            extent = b.binary(Op.SUBTRACT, end, b.scalar(starts[k], DType.S32))
            result = b.set_dimension_size(result, extent, axis)
    return result


@onnx_op("Gather")
def gather(ctx: NodeContext, data: Instruction, indices: Instruction) -> Instruction:
    b = ctx.b
    rank, q = data.array_shape.rank, indices.array_shape.rank
    axis = normalize_axis(ctx.attr("axis"), rank)
    if indices.array_shape.dtype.is_float:
        raise ShapeError("indices must be integers")
    known = evaluate_constant(indices)
    if known is None or (np.asarray(known) < 0).any():
        # negative indices count from the end of the axis (a bounded one's extent)
        dim = full_like(b, data.array_shape.dims[axis], indices)
        if data.array_shape.is_dynamic(axis):
            extent = b.convert(b.get_dimension_size(data, axis), indices.array_shape.dtype)
            dim = b.broadcast(extent, [], indices.array_shape.dims)
        negative = b.compare(indices, full_like(b, 0, indices), Direction.LT)
        indices = b.select(negative, b.binary(Op.ADD, indices, dim), indices)
    slice_sizes = [1 if i == axis else d for i, d in enumerate(data.array_shape.dims)]
    dims = GatherDims(
        offset_dims=tuple(range(axis)) + tuple(range(axis + q, rank - 1 + q)),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
        index_vector_dim=q,
        slice_sizes=tuple(slice_sizes),
    )
    return b.gather(data, indices, dims)


def _axis_slice(b: ComputationBuilder, x: Instruction, axis: int, start: int, limit: int):
    starts = [start if i == axis else 0 for i in range(x.array_shape.rank)]
    limits = [limit if i == axis else d for i, d in enumerate(x.array_shape.dims)]
    return b.slice(x, starts, limits)


def _pad_axis(b: ComputationBuilder, x: Instruction, axis: int, low: int, high: int, mode: str):
    """Non-constant padding of one axis, built from slices of `x`."""
    d = x.array_shape.dims[axis]
    # reflect mirrors without the edge element, wrap repeats the axis once at most
    limit = {"reflect": d - 1, "edge": max(low, high), "wrap": d}[mode]
    if d == 0 or max(low, high) > limit:
        raise UnsupportedError(f"{mode} padding by {max(low, high)} of an axis of size {d}")
    parts = []
    for side, amount in (("low", low), ("high", high)):
        if amount == 0:
            parts.append(None)
            continue
        if mode == "edge":
            start = 0 if side == "low" else d - 1
            edge = _axis_slice(b, x, axis, start, start + 1)
            dims = [amount if i == axis else n for i, n in enumerate(x.array_shape.dims)]
            parts.append(b.broadcast_to(edge, dims))
        elif mode == "reflect":
            start, stop = (1, amount + 1) if side == "low" else (d - 1 - amount, d - 1)
            parts.append(b.reverse(_axis_slice(b, x, axis, start, stop), [axis]))
        else:  # wrap
            start, stop = (d - amount, d) if side == "low" else (0, amount)
            parts.append(_axis_slice(b, x, axis, start, stop))
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return b.concatenate(pieces, axis)


def _pad(ctx: NodeContext, x: Instruction, pads, value: Instruction | None, axes, mode: str):
    b = ctx.b
    rank = x.array_shape.rank
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank)
    if len(pads) != 2 * len(axes):
        raise ModelError(f"pads has {len(pads)} values, expected {2 * len(axes)}")
    low, high = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        low[axis], high[axis] = int(pads[i]), int(pads[i + len(axes)])
    if mode == "constant":
        if value is None:
            value = b.scalar(0, x.array_shape.dtype)
        value = b.convert(b.reshape(value, []), x.array_shape.dtype)
        return b.pad(x, value, low, high)
    if min(low + high) < 0:
        # negative pads crop, whatever the mode
        starts = [max(0, -lo) for lo in low]
        limits = [d - max(0, -hi) for d, hi in zip(x.array_shape.dims, high)]
        x = b.slice(x, starts, limits)
        low, high = [max(0, lo) for lo in low], [max(0, hi) for hi in high]
    for axis in range(rank):
        if low[axis] or high[axis]:
            x = _pad_axis(b, x, axis, low[axis], high[axis], mode)
    return x


PAD_MODES = ("constant", "reflect", "edge", "wrap")


@onnx_op("Pad", until=10)
def pad_attributes(ctx: NodeContext, x: Instruction) -> Instruction:
    value = ctx.b.scalar(ctx.attr("value", 0.0), x.array_shape.dtype)
    mode = ctx.choice("mode", PAD_MODES)
    return _pad(ctx, x, ctx.required_attr("pads"), value, None, mode)


@onnx_op("Pad", since=11)
def pad(ctx: NodeContext, x: Instruction, pads, value=None, axes=None) -> Instruction:
    mode = ctx.choice("mode", PAD_MODES)
    return _pad(ctx, x, ctx.const_ints(1), value, ctx.const_ints(3), mode)


@onnx_op("Expand", since=8)
def expand(ctx: NodeContext, x: Instruction, shape: Instruction) -> Instruction:
    value = shape_value(ctx, 1)
    assert value is not None
    result = ctx.b.broadcast_to(x, broadcast_dims(x.array_shape.dims, value.bounds))
    rank, entries = result.array_shape.rank, len(value.bounds)
    # the shape's entries align with the result's last dims
    return with_extents(ctx, result, value, [d - (rank - entries) for d in range(rank)])


@onnx_op("Tile")
def tile(ctx: NodeContext, x: Instruction, repeats: Instruction) -> Instruction:
    counts = ctx.const_ints(1)
    dims = x.array_shape.dims
    if len(counts) != len(dims) or min(counts, default=0) < 0:
        raise ModelError(f"repeats {counts} do not fit an input of rank {len(dims)}")
    if all(c == 1 for c in counts):
        return x
    # broadcast to [r0, d0, r1, d1, ...] then merge each (r, d) pair
    interleaved = [n for pair in zip(counts, dims) for n in pair]
    wide = ctx.b.broadcast(x, [2 * i + 1 for i in range(len(dims))], interleaved)
    return ctx.b.reshape(wide, [c * d for c, d in zip(counts, dims)])


def _split(ctx: NodeContext, x: Instruction, sizes: list[int] | None) -> list[Instruction]:
    axis = normalize_axis(ctx.attr("axis"), x.array_shape.rank)
    d = x.array_shape.dims[axis]
    count = len(ctx.node.output)
    if not sizes:
        parts = ctx.attr("num_outputs") or count
        chunk = -(-d // parts)  # opset 18: the last part may be smaller
        sizes = [chunk] * (parts - 1) + [d - chunk * (parts - 1)]
    if sum(sizes) != d or len(sizes) != count or min(sizes) < 0:
        raise ModelError(f"cannot split an axis of size {d} into {sizes} for {count} outputs")
    offsets = np.cumsum([0, *sizes])
    return [_axis_slice(ctx.b, x, axis, int(lo), int(hi)) for lo, hi in itertools.pairwise(offsets)]


@onnx_op("Split", until=12)
def split_attribute(ctx: NodeContext, x: Instruction) -> list[Instruction]:
    return _split(ctx, x, ctx.attr("split"))


@onnx_op("Split", since=13)
def split(ctx: NodeContext, x: Instruction, sizes=None) -> list[Instruction]:
    return _split(ctx, x, ctx.const_ints(1))


# -- block rearrangements --------------------------------------------------------------


def _blocksize(ctx: NodeContext, x: Instruction) -> int:
    if x.array_shape.rank != 4:
        raise ShapeError(f"input must be N x C x H x W, got {list(x.array_shape.dims)}")
    size = ctx.required_attr("blocksize")
    if size < 1:
        raise ModelError(f"blocksize {size} must be positive")
    return size


@onnx_op("SpaceToDepth", since=1)
def space_to_depth(ctx: NodeContext, x: Instruction) -> Instruction:
    k = _blocksize(ctx, x)
    n, c, h, w = x.array_shape.dims
    if h % k or w % k:
        raise ShapeError(f"H={h} and W={w} must be multiples of blocksize {k}")
    mode = ctx.choice("mode", ("DCR", "CRD")) if "mode" in ctx.attrs else "DCR"
    blocks = ctx.b.reshape(x, (n, c, h // k, k, w // k, k))
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return ctx.b.reshape(ctx.b.transpose(blocks, perm), (n, c * k * k, h // k, w // k))


@onnx_op("DepthToSpace", since=1)
def depth_to_space(ctx: NodeContext, x: Instruction) -> Instruction:
    k = _blocksize(ctx, x)
    n, c, h, w = x.array_shape.dims
    if c % (k * k):
        raise ShapeError(f"C={c} must be a multiple of blocksize {k} squared")
    mode = ctx.choice("mode", ("DCR", "CRD")) if "mode" in ctx.attrs else "DCR"
    if mode == "DCR":
        blocks, perm = (n, k, k, c // (k * k), h, w), (0, 3, 4, 1, 5, 2)
    else:
        blocks, perm = (n, c // (k * k), k, k, h, w), (0, 1, 4, 2, 5, 3)
    moved = ctx.b.transpose(ctx.b.reshape(x, blocks), perm)
    return ctx.b.reshape(moved, (n, c // (k * k), h * k, w * k))


@onnx_op("CenterCropPad", since=18)
def center_crop_pad(ctx: NodeContext, x: Instruction, shape: Instruction) -> Instruction:
    rank = x.array_shape.rank
    sizes = ctx.const_ints(1)
    axes = ctx.attr("axes")
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in axes]
    if len(sizes) != len(axes) or len(set(axes)) != len(axes):
        raise ModelError(f"shape {sizes} does not fit axes {axes}")
    starts, limits = [0] * rank, list(x.array_shape.dims)
    low, high = [0] * rank, [0] * rank
    for axis, size in zip(axes, sizes):
        d = x.array_shape.dims[axis]
        # the odd element of a crop or a pad goes to the end
        if size < d:
            starts[axis] = (d - size) // 2
            limits[axis] = starts[axis] + size
        else:
            low[axis] = (size - d) // 2
            high[axis] = size - d - low[axis]
    x = ctx.b.slice(x, starts, limits)
    if any(low) or any(high):
        x = ctx.b.pad(x, ctx.b.scalar(0, x.array_shape.dtype), low, high)
    return x


@onnx_op("Col2Im", since=18)
def col2im(ctx: NodeContext, x: Instruction, image_shape: Instruction, block_shape: Instruction):
    b = ctx.b
    image, kernel = ctx.const_ints(1), ctx.const_ints(2)
    n = len(image)
    if len(kernel) != n or x.array_shape.rank != 3:
        raise ShapeError(
            f"Col2Im of {list(x.array_shape.dims)} into image {image}, blocks {kernel}"
        )
    strides = ctx.window_ints("strides", n, 1)
    dilations = ctx.window_ints("dilations", n, 1)
    pads = ctx.window_ints("pads", 2 * n, 0)
    blocks = [
        (image[i] + pads[i] + pads[n + i] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1
        for i in range(n)
    ]
    batch, columns, count = x.array_shape.dims
    k_size = int(np.prod(kernel))
    if columns % k_size or count != int(np.prod(blocks)) or min(blocks) < 1:
        raise ShapeError(
            f"input {list(x.array_shape.dims)} does not hold {blocks} blocks of {kernel}"
        )
    channels = columns // k_size
    x = b.reshape(x, (batch, channels, *kernel, *blocks))
    zero = b.scalar(0, x.array_shape.dtype)
    total = None
    # every kernel offset adds its column, strided and shifted, into the image
    for offset in itertools.product(*(range(k) for k in kernel)):
        starts = [0, 0, *offset, *[0] * n]
        limits = [batch, channels, *[o + 1 for o in offset], *blocks]
        part = b.reshape(b.slice(x, starts, limits), (batch, channels, *blocks))
        low = [offset[i] * dilations[i] - pads[i] for i in range(n)]
        high = [image[i] - low[i] - (blocks[i] - 1) * strides[i] - 1 for i in range(n)]
        interior = [s - 1 for s in strides]
        part = b.pad(part, zero, [0, 0, *low], [0, 0, *high], [0, 0, *interior])
        total = part if total is None else b.binary(Op.ADD, total, part)
    return total
