"""Sampling an image at computed positions: GridSample, AffineGrid, RoiAlign,
DeformConv.

Where the positions are runtime values, every output point reads a few taps
per spatial dim (1 nearest, 2 linear, 4 cubic) with runtime weights.
`gather_taps` turns per-dim taps into one gather of whole channel rows from
the image laid out as (batch * spatial, channels), so the ops differ only in
how they compute positions and weights, and in how they combine the taps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ...ir import Direction, DotDims, DType, GatherDims, Instruction, Op, Shape, scalar_reducer
from .helpers import Formula, full, full_like, lowest
from .registry import NodeContext, onnx_op

CUBIC_A = -0.75  # GridSample's cubic convolution constant (Keys, as PyTorch)


class Arith(Formula):
    """Formula with subtraction and scalars of the like's dtype."""

    def sub(self, x, y) -> Instruction:
        return self.b.binary(Op.SUBTRACT, self._lift(x), self._lift(y))

    def cmp(self, x, direction: Direction, y) -> Instruction:
        return self.b.compare(self._lift(x), self._lift(y), direction)

    def lt(self, x, y) -> Instruction:
        return self.cmp(x, Direction.LT, y)

    def gt(self, x, y) -> Instruction:
        return self.cmp(x, Direction.GT, y)

    def select(self, pred: Instruction, on_true, on_false) -> Instruction:
        return self.b.select(pred, self._lift(on_true), self._lift(on_false))


@dataclass(frozen=True)
class Taps:
    """Per point, K source positions along one spatial dim and their weights."""

    index: Instruction  # s64 [points..., K]; may lie outside the dim
    weight: Instruction  # float [points..., K]


def stack_last(ctx: NodeContext, parts: Sequence[Instruction]) -> Instruction:
    """Arrays of one shape stacked along a new last dim."""
    dims = parts[0].array_shape.dims
    return ctx.b.concatenate([ctx.b.reshape(p, [*dims, 1]) for p in parts], len(dims))


def gather_taps(
    ctx: NodeContext, x: Instruction, batch: Instruction, taps: Sequence[Taps], zeros: bool
) -> tuple[Instruction, Instruction]:
    """(values [points..., T, C], weights [points..., T]) of every combination of the
    per-dim taps (T = product of the K's) for x of N x C x spatial dims; `batch`
    (s64 [points...]) picks the image.  Outside positions read 0 if `zeros`, else the
    nearest edge element."""
    b = ctx.b
    n, channels, *spatial = x.array_shape.dims
    points = list(taps[0].index.array_shape.dims[:-1])
    p = len(points)
    counts = [t.index.array_shape.dims[-1] for t in taps]
    full_dims = [*points, *counts]
    image_start = b.binary(Op.MULTIPLY, batch, full_like(b, math.prod(spatial), batch))
    flat = b.broadcast(image_start, list(range(p)), full_dims)
    weight = valid = None
    stride = math.prod(spatial)
    for i, (tap, size) in enumerate(zip(taps, spatial)):
        stride //= size
        index = b.broadcast(tap.index, [*range(p), p + i], full_dims)
        w = b.broadcast(tap.weight, [*range(p), p + i], full_dims)
        f = Arith(b, index)
        if zeros:
            inside = b.binary(Op.AND, f.cmp(index, Direction.GE, 0), f.lt(index, size))
            valid = inside if valid is None else b.binary(Op.AND, valid, inside)
        clamped = b.clamp(b.scalar(0, DType.S64), index, b.scalar(size - 1, DType.S64))
        flat = f.add(flat, f.mul(clamped, stride))
        weight = w if weight is None else b.binary(Op.MULTIPLY, weight, w)
    tap_dims = [*points, math.prod(counts)]
    flat, weight = b.reshape(flat, tap_dims), b.reshape(weight, tap_dims)
    table = b.transpose(x, [0, *range(2, 2 + len(spatial)), 1])
    table = b.reshape(table, [n * math.prod(spatial), channels])
    dims = GatherDims(
        offset_dims=[p + 1],
        collapsed_slice_dims=[0],
        start_index_map=[0],
        index_vector_dim=p + 1,
        slice_sizes=[1, channels],
    )
    values = b.gather(table, flat, dims)
    if valid is not None:
        valid = b.broadcast(b.reshape(valid, tap_dims), list(range(p + 1)), values.shape.dims)
        values = b.select(valid, values, full_like(b, 0, values))
    return values, b.convert(weight, x.array_shape.dtype)


def weigh(ctx: NodeContext, values: Instruction, weights: Instruction) -> Instruction:
    """values [..., T, C] times weights [..., T], per tap."""
    rank = weights.array_shape.rank
    return ctx.b.binary(
        Op.MULTIPLY, values, ctx.b.broadcast(weights, list(range(rank)), values.array_shape.dims)
    )


def reduce_dims(ctx: NodeContext, x: Instruction, op: Op, dims: Sequence[int]) -> Instruction:
    """x reduced over `dims` with `op` (ADD, MAXIMUM or OR)."""
    b = ctx.b
    dtype = x.array_shape.dtype
    init = {Op.ADD: 0, Op.MAXIMUM: lowest(dtype), Op.OR: False}[op]
    return b.reduce(x, b.scalar(init, dtype), dims, scalar_reducer(b.module, op, dtype))


def s64_shape(dims: Sequence[int]) -> Shape:
    """The s64 array type of `dims` (iotas and indices)."""
    return Shape(DType.S64, tuple(dims))


def _floor_index(f: Arith, pos: Instruction) -> tuple[Instruction, Instruction]:
    """(floor(pos) as s64, pos - floor(pos))."""
    low = f.f(Op.FLOOR, pos)
    return f.b.convert(low, DType.S64), f.sub(pos, low)


def _tap_run(ctx: NodeContext, first: Instruction, count: int) -> Instruction:
    """s64 [points..., count]: first, first + 1, ..."""
    b = ctx.b
    dims = [*first.array_shape.dims, count]
    ramp = b.iota(s64_shape(dims), len(dims) - 1)
    return b.binary(Op.ADD, b.broadcast(first, list(range(len(dims) - 1)), dims), ramp)


def cubic_weights(ctx: NodeContext, t: Instruction, a: float) -> Instruction:
    """Keys' cubic convolution weights [points..., 4] of taps floor-1 .. floor+2."""
    f = Arith(ctx.b, t)

    def near(x):  # |x| <= 1
        return f.add(f.mul(f.mul(f.sub(f.mul(x, a + 2), a + 3), x), x), 1)

    def far(x):  # 1 < |x| < 2
        return f.sub(f.mul(f.add(f.mul(f.sub(f.mul(x, a), 5 * a), x), 8 * a), x), 4 * a)

    one_minus = f.sub(1, t)
    return stack_last(ctx, [far(f.add(t, 1)), near(t), near(one_minus), far(f.add(one_minus, 1))])


def reflect(f: Arith, v: Instruction, lo: float, hi: float) -> Instruction:
    """v folded back into [lo, hi] by reflecting at the borders (GridSample)."""
    span = hi - lo
    below = f.lt(v, lo)
    distance = f.select(below, f.sub(lo, v), f.sub(v, hi))
    flips = f.f(Op.FLOOR, f.div(distance, span))
    rest = f.sub(distance, f.mul(flips, span))
    odd = f.cmp(f.sub(flips, f.mul(f.f(Op.FLOOR, f.mul(flips, 0.5)), 2)), Direction.NE, 0)
    # below with an even count of flips, or above with an odd one, measures from lo
    from_low = f.b.binary(Op.XOR, below, odd)
    folded = f.select(from_low, f.add(lo, rest), f.sub(hi, rest))
    outside = f.b.binary(Op.OR, below, f.gt(v, hi))
    return f.select(outside, folded, v)


# -- GridSample -----------------------------------------------------------------------

GRID_MODES = {
    "bilinear": "linear",
    "linear": "linear",
    "nearest": "nearest",
    "bicubic": "cubic",
    "cubic": "cubic",
}


def _grid_taps(
    ctx: NodeContext,
    pos: Instruction,
    size: int,
    mode: str,
    padding: str,
    borders: tuple[float, float],
) -> Taps:
    """The taps of one spatial dim at source coordinates `pos` (onnx.reference's GridSample)."""
    b = ctx.b
    f = Arith(b, pos)
    lo, hi = borders
    if mode == "nearest":
        pos = f.f(Op.ROUND_NEAREST_EVEN, pos)  # PyTorch rounds half to even
    # out-of-border coordinates move in (inside ones stay, even past the edge centres)
    outside = b.binary(Op.OR, f.lt(pos, lo), f.gt(pos, hi))
    if padding == "border":
        pos = f.select(outside, f.max(f.min(pos, size - 1), 0), pos)
    elif padding == "reflection":
        pos = reflect(f, pos, lo, hi)
    if mode == "nearest":
        index = b.reshape(b.convert(pos, DType.S64), [*pos.array_shape.dims, 1])
        return Taps(index, full(b, 1, pos.array_shape.dtype, index.array_shape.dims))
    low, t = _floor_index(f, pos)
    if mode == "linear":
        index = _tap_run(ctx, low, 2)
        weight = stack_last(ctx, [f.sub(1, t), t])
    else:
        index = _tap_run(ctx, b.binary(Op.SUBTRACT, low, full_like(b, 1, low)), 4)
        weight = cubic_weights(ctx, t, CUBIC_A)
    if padding == "reflection":  # each tap is reflected again, then truncated
        as_float = b.convert(index, pos.array_shape.dtype)
        index = b.convert(reflect(Arith(b, as_float), as_float, lo, hi), DType.S64)
    return Taps(index, weight)


@onnx_op("GridSample", since=16)
def grid_sample(ctx: NodeContext, x: Instruction, grid: Instruction) -> Instruction:
    b = ctx.b
    mode = GRID_MODES[ctx.choice("mode", tuple(GRID_MODES))]
    padding = ctx.choice("padding_mode", ("zeros", "border", "reflection"))
    align = bool(ctx.attr("align_corners", 0))
    n, _, *spatial = x.array_shape.dims
    r = len(spatial)
    if (
        r < 1
        or grid.array_shape.dims[0] != n
        or grid.array_shape.dims[-1] != r
        or grid.array_shape.rank != r + 2
    ):
        raise ShapeError(
            f"grid {list(grid.array_shape.dims)} does not fit input {list(x.array_shape.dims)}"
        )
    if not x.array_shape.dtype.is_float:
        raise UnsupportedError(f"GridSample of {x.array_shape.dtype.text} data")
    points = list(grid.array_shape.dims[:-1])
    dtype = DType.F64 if grid.array_shape.dtype is DType.F64 else DType.F32
    taps = []
    for i, size in enumerate(spatial):
        # the grid's last dim lists coordinates innermost dim first (x, y[, z])
        k = r - 1 - i
        coord = b.slice(grid, [0] * (r + 1) + [k], [*points, k + 1])
        coord = b.convert(b.reshape(coord, points), dtype)
        f = Arith(b, coord)
        if align:
            pos, borders = f.mul(f.mul(f.add(coord, 1), 0.5), size - 1), (0.0, size - 1.0)
        else:
            pos = f.mul(f.sub(f.mul(f.add(coord, 1), size), 1), 0.5)
            borders = (-0.5, size - 0.5)
        taps.append(_grid_taps(ctx, pos, size, mode, padding, borders))
    batch = b.iota(s64_shape(points), 0)
    values, weights = gather_taps(ctx, x, batch, taps, padding == "zeros")
    out = reduce_dims(ctx, weigh(ctx, values, weights), Op.ADD, [len(points)])
    return b.transpose(out, [0, len(points), *range(1, len(points))])


# -- AffineGrid -----------------------------------------------------------------------


def _grid_line(size: int, align: bool) -> np.ndarray:
    """Normalized coordinates of the element centres (align_corners: of the corners)."""
    if align:
        step = 2.0 / (size - 1) if size > 1 else 0.0
        return -1 + step * np.arange(size)
    step = 2.0 / size
    return -1 + step / 2 + step * np.arange(size)


@onnx_op("AffineGrid", since=20)
def affine_grid(ctx: NodeContext, theta: Instruction, size: Instruction) -> Instruction:
    b = ctx.b
    n, channels, *spatial = ctx.const_ints(1)
    r = len(spatial)
    if r not in (2, 3) or theta.array_shape.dims != (n, r, r + 1):
        shown = [n, channels, *spatial]
        raise ShapeError(f"theta {list(theta.array_shape.dims)} does not fit size {shown}")
    lines = [_grid_line(s, bool(ctx.attr("align_corners", 0))) for s in spatial]
    # homogeneous base grid [*spatial, r + 1]: innermost coordinate first (x, y[, z]), then 1
    mesh = np.meshgrid(*lines, indexing="ij")[::-1]
    base = np.stack([*mesh, np.ones(spatial)], axis=-1).reshape(-1, r + 1)
    # in f64 as the reference, so that coordinates near 0 keep their relative accuracy
    wide = b.convert(theta, DType.F64)
    grid = b.dot(wide, b.constant(base, DType.F64), DotDims([], [], [2], [1]))  # [n, r, M]
    grid = b.reshape(b.transpose(grid, [0, 2, 1]), [n, *spatial, r])
    return b.convert(grid, theta.array_shape.dtype)


# -- DeformConv -----------------------------------------------------------------------


@onnx_op("DeformConv", since=19)
def deform_conv(ctx: NodeContext, x, w, offset, bias=None, mask=None) -> Instruction:
    """Convolution whose every kernel tap reads the input bilinearly at its own offset."""
    b = ctx.b
    n, channels, *spatial = x.shape.dims
    out_channels, group_channels, *kernel = w.shape.dims
    r = len(spatial)
    groups, offset_groups = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    strides, dilations = ctx.window_ints("strides", r, 1), ctx.window_ints("dilations", r, 1)
    pads = ctx.window_ints("pads", 2 * r, 0)
    out = list(offset.shape.dims[2:])
    taps_per_group = math.prod(kernel)
    if (
        channels != group_channels * groups
        or out_channels % groups
        or channels % offset_groups
        or offset.shape.dims[:2] != (n, offset_groups * taps_per_group * r)
        or len(out) != r
    ):
        raise ShapeError(
            f"DeformConv shapes do not fit: X {list(x.shape.dims)}, W "
            f"{list(w.shape.dims)}, offset {list(offset.shape.dims)}"
        )
    dtype = x.shape.dtype
    points = [n, offset_groups, *kernel, *out]
    offsets = b.reshape(b.convert(offset, dtype), [n, offset_groups, *kernel, r, *out])
    taps = []
    for i in range(r):
        start = [0] * len(offsets.array_shape.dims)
        start[2 + r] = i
        limit = list(offsets.array_shape.dims)
        limit[2 + r] = i + 1
        shift = b.reshape(b.slice(offsets, start, limit), points)
        # the kernel tap's undeformed position: -pad + stride * out + dilation * tap
        base = (
            -pads[i]
            + strides[i] * np.arange(out[i])[None, :]
            + dilations[i] * np.arange(kernel[i])[:, None]
        )
        base = b.broadcast(b.constant(base, dtype), [2 + i, 2 + r + i], points)
        f = Arith(b, shift)
        low, t = _floor_index(f, f.add(base, shift))
        taps.append(Taps(_tap_run(ctx, low, 2), stack_last(ctx, [f.sub(1, t), t])))
    # every (image, offset group) pair is one image of channels / offset_groups channels
    per_group = channels // offset_groups
    images = b.reshape(x, [n * offset_groups, per_group, *spatial])
    f = Arith(b, b.iota(s64_shape(points), 0))
    batch = f.add(f.mul(f.like, offset_groups), b.iota(s64_shape(points), 1))
    values, weights = gather_taps(ctx, images, batch, taps, zeros=True)
    cols = reduce_dims(ctx, weigh(ctx, values, weights), Op.ADD, [len(points)])
    if mask is not None:
        scale = b.reshape(b.convert(mask, dtype), points)
        cols = b.binary(
            Op.MULTIPLY, cols, b.broadcast(scale, list(range(len(points))), cols.array_shape.dims)
        )
    # [n, og, k..., o..., cpg] -> [n, o..., og, cpg, k...] -> [n, o..., group, icg, k...]
    cols = b.transpose(cols, [0, *range(2 + r, 2 + 2 * r), 1, 2 + 2 * r, *range(2, 2 + r)])
    cols = b.reshape(cols, [n, *out, groups, group_channels, *kernel])
    weight = b.reshape(
        b.convert(w, dtype), [groups, out_channels // groups, group_channels, *kernel]
    )
    contract = [2 + r, *range(3 + r, 3 + 2 * r)]
    dims = DotDims([1 + r], [0], contract, [2, *range(3, 3 + r)])
    y = b.dot(cols, weight, dims)  # [group, n, o..., ocg]
    y = b.transpose(y, [1, 0, 2 + r, *range(2, 2 + r)])
    y = b.reshape(y, [n, out_channels, *out])
    if bias is not None:
        y = b.binary(Op.ADD, y, b.broadcast(b.convert(bias, dtype), [1], y.array_shape.dims))
    return y
