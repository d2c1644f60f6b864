"""Detection heads: RoiAlign, MaxRoiPool and NonMaxSuppression.

RoiAlign samples each region bilinearly on a grid of points (sampling.py's
`gather_taps`).  MaxRoiPool's bins have runtime bounds: a masked max per
spatial dim (separable, so [R, C, H, PW, W] is the largest array it builds).
NonMaxSuppression's greedy selection is built in HLO: boxes
ranked by score with comparisons, the pairwise suppression matrix permuted
into rank order, then one unrolled step per rank.  How many boxes it selects
decides the output's shape, so that count is read at compile time
(`ctx.value`), which specialises on the boxes and scores.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ...ir import (
    ComputationBuilder,
    Direction,
    DType,
    GatherDims,
    Instruction,
    Op,
    Shape,
    Window,
    scalar_reducer,
)
from ...ir.evaluate import evaluate_constant
from .extents import inside, unbounded
from .helpers import full, full_like, lowest
from .registry import NodeContext, onnx_op
from .sampling import Arith, Taps, gather_taps, reduce_dims, s64_shape, stack_last, weigh

# -- RoiAlign ------------------------------------------------------------------------


def _roi_taps(ctx: NodeContext, pos: Instruction, size: int) -> Taps:
    """The two bilinear taps of positions `pos` [..., G] along a dim of `size`, as
    onnx.reference's RoiAlign: weights 0 beyond one element outside the image."""
    b = ctx.b
    f = Arith(b, pos)
    beyond = b.binary(Op.OR, f.lt(pos, -1.0), f.gt(pos, size))
    pos = f.max(pos, 0)
    low = f.f(Op.FLOOR, pos)
    at_end = f.cmp(low, Direction.GE, size - 1)
    low = f.select(at_end, size - 1, low)
    pos = f.select(at_end, low, pos)
    high = f.select(at_end, low, f.add(low, 1))
    frac = f.sub(pos, low)
    index = stack_last(ctx, [b.convert(low, DType.S64), b.convert(high, DType.S64)])
    weight = stack_last(ctx, [f.select(beyond, 0, f.sub(1, frac)), f.select(beyond, 0, frac)])
    return Taps(index, weight)


def _axis_samples(ctx, start, bin_size, grid, pooled: int, count: int) -> Instruction:
    """Sample positions [R, pooled, count]: start + p * bin + (i + 0.5) * bin / grid."""
    b = ctx.b
    rois = start.shape.dims[0]
    dims = [rois, pooled, count]
    dtype = start.shape.dtype
    f = Arith(b, b.broadcast(start, [0], dims))
    per_roi = [b.broadcast(v, [0], dims) for v in (bin_size, grid)]
    bins = b.broadcast(b.constant(np.arange(pooled), dtype), [1], dims)
    steps = b.broadcast(b.constant(np.arange(count) + 0.5, dtype), [2], dims)
    offset = f.div(f.mul(steps, per_roi[0]), per_roi[1])
    return f.add(f.add(f.like, f.mul(bins, per_roi[0])), offset)


@onnx_op("RoiAlign", since=10)
def roi_align(ctx: NodeContext, x: Instruction, rois: Instruction, batch_indices: Instruction):
    b = ctx.b
    mode = ctx.choice("mode", ("avg", "max"))
    half_pixel = ctx.attr("coordinate_transformation_mode", "output_half_pixel") == "half_pixel"
    pooled = [int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))]
    ratio = int(ctx.attr("sampling_ratio", 0))
    scale = float(ctx.attr("spatial_scale", 1.0))
    if x.array_shape.rank != 4 or rois.array_shape.rank != 2 or rois.array_shape.dims[1] != 4:
        raise ShapeError(
            f"RoiAlign needs X N x C x H x W and rois R x 4, got "
            f"{list(x.array_shape.dims)} and {list(rois.array_shape.dims)}"
        )
    if not x.array_shape.dtype.is_float:
        raise UnsupportedError(f"RoiAlign of {x.array_shape.dtype.text} data")
    _, channels, *spatial = x.array_shape.dims
    count = rois.array_shape.dims[0]
    dtype = x.array_shape.dtype
    boxes = b.convert(rois, dtype)
    shift = 0.5 if half_pixel else 0.0
    # per dim (y, then x): start, size of a bin, sampling grid per bin (per roi, [R])
    starts, bins, grids = [], [], []
    for dim in range(2):
        coords = []
        for k in (1 - dim, 3 - dim):  # rois hold x1, y1, x2, y2
            column = b.reshape(b.slice(boxes, [0, k], [count, k + 1]), [count])
            f = Arith(b, column)
            coords.append(f.sub(f.mul(column, scale), shift))
        length = f.sub(coords[1], coords[0])
        if not half_pixel:  # malformed rois count as 1 x 1
            length = f.max(length, 1.0)
        bins.append(f.div(length, pooled[dim]))
        grids.append(f.k(ratio) if ratio > 0 else f.f(Op.CEIL, f.div(length, pooled[dim])))
        starts.append(coords[0])
    if ratio > 0:
        sizes = [ratio, ratio]
    else:  # the densest roi decides the sampling grid's extent: read it at compile time
        most = [reduce_dims(ctx, g, Op.MAXIMUM, [0]) if count else None for g in grids]
        sizes = [
            max(1, int(ctx.value(m, "RoiAlign's sampling grid"))) if count else 1 for m in most
        ]
    points = [count, pooled[0], pooled[1], sizes[0], sizes[1]]
    taps, used = [], []
    for dim in range(2):
        pos = _axis_samples(ctx, starts[dim], bins[dim], grids[dim], pooled[dim], sizes[dim])
        tap = _roi_taps(ctx, pos, spatial[dim])
        where = [0, 1 + dim, 3 + dim, 5]
        taps.append(Taps(*(b.broadcast(t, where, [*points, 2]) for t in (tap.index, tap.weight))))
        if ratio <= 0:  # samples past this roi's own grid are not used
            step = b.iota(Shape(dtype, (count, sizes[dim])), 1)
            used.append(
                Arith(b, step).lt(step, b.broadcast(grids[dim], [0], step.array_shape.dims))
            )
    batch = b.broadcast(b.convert(batch_indices, DType.S64), [0], points)
    values, weights = gather_taps(ctx, x, batch, taps, zeros=False)
    products = weigh(ctx, values, weights)  # [R, PH, PW, GH, GW, 4, C]
    valid = None
    if used:
        sample_dims = [*points, channels]
        valid = b.binary(
            Op.AND,
            b.broadcast(used[0], [0, 3], sample_dims),
            b.broadcast(used[1], [0, 4], sample_dims),
        )
    if mode == "avg":
        total = reduce_dims(ctx, products, Op.ADD, [5])
        if valid is not None:
            total = b.select(valid, total, full_like(b, 0, total))
        total = reduce_dims(ctx, total, Op.ADD, [3, 4])
        f = Arith(b, grids[0])
        samples = f.max(f.mul(grids[0], grids[1]), 1)
        out = b.binary(Op.DIVIDE, total, b.broadcast(samples, [0], total.array_shape.dims))
    else:  # the largest weighted tap of any sample; 0 where a roi has no samples
        best = reduce_dims(ctx, products, Op.MAXIMUM, [5])
        if valid is not None:
            best = b.select(valid, best, full_like(b, -np.inf, best))
        out = reduce_dims(ctx, best, Op.MAXIMUM, [3, 4])
        f = Arith(b, out)
        out = f.select(f.cmp(out, Direction.EQ, -np.inf), 0, out)
    return b.transpose(out, [0, 3, 1, 2])


# -- MaxRoiPool -----------------------------------------------------------------------


def _bin_masks(ctx: NodeContext, rois, k: tuple[int, int], scale, pooled: int, size: int):
    """(pred [R, pooled, size]: element i lies in bin p; pred [R, pooled]: bin p is empty)
    along one dim whose roi edges are rois' columns k, as onnxruntime's MaxRoiPool."""
    b = ctx.b
    count = rois.shape.dims[0]
    edges = [b.reshape(b.slice(rois, [0, c], [count, c + 1]), [count]) for c in k]
    f = Arith(b, edges[0])
    start, end = (f.f(Op.ROUND_NEAREST_AFZ, f.mul(e, scale)) for e in edges)
    length = f.max(f.add(f.sub(end, start), 1), 1)  # malformed rois count as 1 x 1
    dims = [count, pooled]
    g = Arith(b, b.broadcast(f.div(length, pooled), [0], dims))
    step = b.iota(Shape(g.like.array_shape.dtype, tuple(dims)), 1)
    start = b.broadcast(start, [0], dims)
    lo = g.min(g.max(g.add(g.f(Op.FLOOR, g.mul(step, g.like)), start), 0), size)
    hi = g.min(g.max(g.add(g.f(Op.CEIL, g.mul(g.add(step, 1), g.like)), start), 0), size)
    grid = [count, pooled, size]
    at = b.iota(Shape(lo.array_shape.dtype, tuple(grid)), 2)
    h = Arith(b, at)
    inside = b.binary(
        Op.AND,
        h.cmp(at, Direction.GE, b.broadcast(lo, [0, 1], grid)),
        h.lt(at, b.broadcast(hi, [0, 1], grid)),
    )
    return inside, g.cmp(hi, Direction.LE, lo)


@onnx_op("MaxRoiPool", since=1)
def max_roi_pool(ctx: NodeContext, x: Instruction, rois: Instruction) -> Instruction:
    """The max of each bin of each roi, one masked max per spatial dim; empty bins are 0."""
    b = ctx.b
    pooled = [int(v) for v in ctx.required_attr("pooled_shape")]
    scale = float(ctx.attr("spatial_scale", 1.0))
    if (
        x.array_shape.rank != 4
        or rois.array_shape.rank != 2
        or rois.array_shape.dims[1] != 5
        or len(pooled) != 2
    ):
        shown = f"{list(x.array_shape.dims)}, {list(rois.array_shape.dims)}, {pooled}"
        raise ShapeError(f"MaxRoiPool needs X N x C x H x W, rois R x 5, two pooled dims: {shown}")
    if not x.array_shape.dtype.is_float:
        raise UnsupportedError(f"MaxRoiPool of {x.array_shape.dtype.text} data")
    _, channels, height, width = x.array_shape.dims
    count = rois.array_shape.dims[0]
    boxes = b.convert(rois, DType.F32 if x.array_shape.dtype is not DType.F64 else DType.F64)
    batch = b.convert(b.reshape(b.slice(boxes, [0, 0], [count, 1]), [count]), DType.S64)
    images = b.gather(x, batch, GatherDims([1, 2, 3], [0], [0], 1, [1, channels, height, width]))
    in_w, empty_w = _bin_masks(ctx, boxes, (1, 3), scale, pooled[1], width)
    in_h, empty_h = _bin_masks(ctx, boxes, (2, 4), scale, pooled[0], height)
    low = lowest(x.array_shape.dtype)
    wide = [count, channels, height, pooled[1], width]
    spread = b.broadcast(images, [0, 1, 2, 4], wide)
    spread = b.select(
        b.broadcast(in_w, [0, 3, 4], wide), spread, full(b, low, x.array_shape.dtype, wide)
    )
    rows = reduce_dims(ctx, spread, Op.MAXIMUM, [4])  # [R, C, H, PW]
    tall = [count, channels, pooled[0], height, pooled[1]]
    spread = b.broadcast(rows, [0, 1, 3, 4], tall)
    spread = b.select(
        b.broadcast(in_h, [0, 2, 3], tall), spread, full(b, low, x.array_shape.dtype, tall)
    )
    out = reduce_dims(ctx, spread, Op.MAXIMUM, [3])  # [R, C, PH, PW]
    empty = b.binary(
        Op.OR,
        b.broadcast(empty_h, [0, 1], [count, *pooled]),
        b.broadcast(empty_w, [0, 2], [count, *pooled]),
    )
    empty = b.broadcast(empty, [0, 2, 3], out.array_shape.dims)
    return b.select(empty, full_like(b, 0, out), out)


# -- NonMaxSuppression ---------------------------------------------------------------

# the greedy selection is unrolled over the boxes and compares every pair per class:
# refuse sizes whose [batches, classes, boxes, boxes] arrays would not be small
MAX_PAIR_ELEMENTS = 1 << 24


def _scalar_input(ctx: NodeContext, x: Instruction | None, default, dtype: DType):
    """An optional scalar (or [1]) input as a scalar of `dtype`."""
    if x is None:
        return ctx.b.scalar(default, dtype)
    if x.array_shape.size != 1:
        raise ShapeError(f"expected a single value, got shape {list(x.array_shape.dims)}")
    return ctx.b.convert(ctx.b.reshape(x, []), dtype)


def _box_edges(ctx: NodeContext, boxes: Instruction, center: bool) -> list[Instruction]:
    """x_min, x_max, y_min, y_max of every box, [B, n] each."""
    b = ctx.b
    batches, n, _ = boxes.array_shape.dims
    cols = [
        b.reshape(b.slice(boxes, [0, 0, k], [batches, n, k + 1]), [batches, n]) for k in range(4)
    ]
    f = Arith(b, cols[0])
    if center:  # x_center, y_center, width, height
        half_w, half_h = f.div(cols[2], 2), f.div(cols[3], 2)
        return [
            f.sub(cols[0], half_w),
            f.add(cols[0], half_w),
            f.sub(cols[1], half_h),
            f.add(cols[1], half_h),
        ]
    y1, x1, y2, x2 = cols  # corners, in either order
    return [f.min(x1, x2), f.max(x1, x2), f.min(y1, y2), f.max(y1, y2)]


def _suppression(ctx: NodeContext, edges: list[Instruction], threshold) -> Instruction:
    """pred [B, n, n]: box i suppresses box j (IoU above the threshold), computed
    in the boxes' dtype with onnx.reference's order of operations and guards."""
    b = ctx.b
    batches, n = edges[0].array_shape.dims
    pair = [batches, n, n]
    mine = [b.broadcast(e, [0, 1], pair) for e in edges]
    theirs = [b.broadcast(e, [0, 2], pair) for e in edges]
    f = Arith(b, mine[0])
    lo_x, hi_x = f.max(mine[0], theirs[0]), f.min(mine[1], theirs[1])
    lo_y, hi_y = f.max(mine[2], theirs[2]), f.min(mine[3], theirs[3])
    inter = f.mul(f.sub(hi_x, lo_x), f.sub(hi_y, lo_y))
    area = [f.mul(f.sub(e[1], e[0]), f.sub(e[3], e[2])) for e in (mine, theirs)]
    union = f.sub(f.add(area[0], area[1]), inter)
    iou = f.div(inter, union)
    limit = b.broadcast(threshold, [], pair)
    tests = [
        f.gt(hi_x, lo_x),
        f.gt(hi_y, lo_y),
        f.gt(inter, 0),
        f.gt(area[0], 0),
        f.gt(area[1], 0),
        f.gt(union, 0),
        f.gt(iou, limit),
    ]
    result = tests[0]
    for test in tests[1:]:
        result = b.binary(Op.AND, result, test)
    return result


def _rank_order(ctx: NodeContext, scores: Instruction) -> tuple[Instruction, Instruction]:
    """(one-hot [B, C, rank, box], box at each rank [B, C, n]): descending score, ties
    to the lower box index, as the reference's sort."""
    b = ctx.b
    batches, classes, n = scores.array_shape.dims
    quad = [batches, classes, n, n]
    mine, theirs = b.broadcast(scores, [0, 1, 2], quad), b.broadcast(scores, [0, 1, 3], quad)
    f = Arith(b, mine)
    earlier = b.compare(b.iota(s64_shape(quad), 3), b.iota(s64_shape(quad), 2), Direction.LT)
    tie = b.binary(Op.AND, f.cmp(theirs, Direction.EQ, mine), earlier)
    ahead = b.binary(Op.OR, f.gt(theirs, mine), tie)
    rank = reduce_dims(ctx, b.convert(ahead, DType.S64), Op.ADD, [3])
    one_hot = b.compare(
        b.broadcast(rank, [0, 1, 3], quad), b.iota(s64_shape(quad), 2), Direction.EQ
    )
    boxes = b.select(one_hot, b.iota(s64_shape(quad), 3), full(b, 0, DType.S64, quad))
    return one_hot, reduce_dims(ctx, boxes, Op.ADD, [3])


# up to this many boxes the greedy selection is unrolled (one step per rank, each its
# own few kernels); beyond, a while loop over the ranks (the unrolled form's compile
# time grows with the boxes: 3000 took minutes)
UNROLLED_RANKS = 64


def _greedy(ctx: NodeContext, candidate, suppressed, limit) -> Instruction:
    """pred [B, C, n] in rank order: kept boxes, one step per rank."""
    b = ctx.b
    batches, classes, n = candidate.shape.dims
    if n > UNROLLED_RANKS:
        return _greedy_loop(ctx, candidate, suppressed, limit)
    kept = full(b, False, DType.PRED, [batches, classes, n])
    count = full(b, 0, DType.S64, [batches, classes])
    limit = b.broadcast(limit, [], count.array_shape.dims)
    for r in range(n):
        row = b.reshape(
            b.slice(suppressed, [0, 0, r, 0], [batches, classes, r + 1, n]), kept.array_shape.dims
        )
        blocked = reduce_dims(ctx, b.binary(Op.AND, kept, row), Op.OR, [2])
        here = b.reshape(
            b.slice(candidate, [0, 0, r], [batches, classes, r + 1]), count.array_shape.dims
        )
        ok = b.binary(Op.AND, here, b.unary(Op.NOT, blocked))
        ok = b.binary(Op.AND, ok, b.compare(count, limit, Direction.LT))
        count = b.binary(Op.ADD, count, b.convert(ok, DType.S64))
        at_r = b.broadcast(b.constant(np.arange(n) == r), [2], kept.array_shape.dims)
        kept = b.binary(
            Op.OR, kept, b.binary(Op.AND, b.broadcast(ok, [0, 1], kept.array_shape.dims), at_r)
        )
    return kept


def _greedy_loop(ctx: NodeContext, candidate, suppressed, limit) -> Instruction:
    """`_greedy` as a while loop over the ranks: the state (rank, kept, count) with the
    candidates, the suppression and the limit carried along unchanged."""
    b, module = ctx.b, ctx.b.module
    batches, classes, n = candidate.array_shape.dims
    grid, pairs = [batches, classes, n], [batches, classes]
    init = b.tuple(
        [
            b.scalar(0, DType.S64),
            full(b, False, DType.PRED, grid),
            full(b, 0, DType.S64, pairs),
            candidate,
            suppressed,
            b.broadcast(limit, [], pairs),
        ]
    )
    test = ComputationBuilder(module, "nms_ranks_left")
    rank = test.get_tuple_element(test.parameter(0, init.shape, "state"), 0)
    condition = test.build(test.compare(rank, test.scalar(n, DType.S64), Direction.LT))
    step = ComputationBuilder(module, "nms_rank")
    state = step.parameter(0, init.shape, "state")
    r, kept, count, here_all, ranked, most = (step.get_tuple_element(state, k) for k in range(6))
    zero = step.scalar(0, DType.S64)
    row = step.reshape(
        step.dynamic_slice(ranked, [zero, zero, r, zero], [batches, classes, 1, n]), grid
    )
    either = scalar_reducer(module, Op.OR, DType.PRED)
    blocked = step.reduce(
        step.binary(Op.AND, kept, row), step.scalar(False, DType.PRED), [2], either
    )
    here = step.reshape(step.dynamic_slice(here_all, [zero, zero, r], [batches, classes, 1]), pairs)
    ok = step.binary(Op.AND, here, step.unary(Op.NOT, blocked))
    ok = step.binary(Op.AND, ok, step.compare(count, most, Direction.LT))
    count = step.binary(Op.ADD, count, step.convert(ok, DType.S64))
    at_r = step.compare(step.iota(s64_shape(grid), 2), step.broadcast(r, [], grid), Direction.EQ)
    chosen = step.binary(Op.AND, step.broadcast(ok, [0, 1], grid), at_r)
    kept = step.binary(Op.OR, kept, chosen)
    following = step.binary(Op.ADD, r, step.scalar(1, DType.S64))
    body = step.build(step.tuple([following, kept, count, here_all, ranked, most]))
    return b.get_tuple_element(b.while_loop(condition, body, init), 1)


@onnx_op("NonMaxSuppression", since=10)
def non_max_suppression(ctx: NodeContext, boxes, scores, max_boxes=None, iou=None, min_score=None):
    b = ctx.b
    batches, classes, n = scores.shape.dims
    # boxes past a bounded count are padding: never candidates (the rest at the bounds)
    present = inside(ctx, scores, 2, scores.shape.dims, 2)
    boxes, scores = unbounded(ctx, boxes), unbounded(ctx, scores)
    if boxes.shape.dims != (batches, n, 4):
        raise ShapeError(
            f"boxes {list(boxes.shape.dims)} do not fit scores {[batches, classes, n]}"
        )
    if batches * classes * n * n > MAX_PAIR_ELEMENTS:
        raise UnsupportedError(
            f"{batches} x {classes} classes of {n} boxes are too many for the "
            "unrolled greedy selection"
        )
    dtype = scores.shape.dtype
    boxes = b.convert(boxes, dtype)
    edges = _box_edges(ctx, boxes, bool(ctx.attr("center_point_box", 0)))
    suppress = _suppression(ctx, edges, _scalar_input(ctx, iou, 0, dtype))
    if min_score is None:
        candidate = present
    else:
        floor = b.broadcast(_scalar_input(ctx, min_score, 0, dtype), [], scores.shape.dims)
        candidate = b.binary(Op.AND, b.compare(scores, floor, Direction.GT), present)
    one_hot, box_at = _rank_order(ctx, scores)
    quad = one_hot.array_shape.dims
    candidate = reduce_dims(
        ctx, b.binary(Op.AND, one_hot, b.broadcast(candidate, [0, 1, 3], quad)), Op.OR, [3]
    )
    # suppression in rank order: [b, c, r, q] = suppress[b, box_at[b, c, r], box_at[b, c, q]]
    where = [
        b.iota(s64_shape(quad), 0),
        b.broadcast(box_at, [0, 1, 2], quad),
        b.broadcast(box_at, [0, 1, 3], quad),
    ]
    dims = GatherDims([], [0, 1, 2], [0, 1, 2], 4, [1, 1, 1])
    ranked = b.gather(suppress, stack_last(ctx, where), dims)
    limit = _scalar_input(ctx, max_boxes, 0, DType.S64)
    kept = _greedy(ctx, candidate, ranked, limit)
    selected = reduce_dims(ctx, b.convert(kept, DType.S64), Op.ADD, [0, 1, 2])
    known = evaluate_constant(selected)
    # the count at run time: a bounded result, at most max_output_boxes_per_class
    # boxes of each class of each batch
    fixed = max_boxes is not None and evaluate_constant(max_boxes) is not None
    per_class = ctx.const_ints(2) if fixed else None
    most = n if not per_class else max(0, min(n, per_class[0]))
    total = int(np.asarray(known)) if known is not None else batches * classes * most
    total = ctx.count_bound(total)
    if total == 0:
        return b.constant(np.zeros((0, 3), dtype=np.int64))
    # the selected (batch, class, box) triples in (batch, class, rank) order
    flat = batches * classes * n
    triples = [
        b.iota(s64_shape(kept.array_shape.dims), 0),
        b.iota(s64_shape(kept.array_shape.dims), 1),
        box_at,
    ]
    triples = b.reshape(stack_last(ctx, triples), [flat, 3])
    chosen = b.convert(b.reshape(kept, [flat]), DType.S64)
    window = Window.make([flat], None, [flat - 1], [0])
    prefix = b.reduce_window(
        chosen, b.scalar(0, DType.S64), window, scalar_reducer(b.module, Op.ADD, DType.S64)
    )
    # the k-th selected flat position is the count of positions selecting fewer than k + 1
    grid = [total, flat]
    fewer = b.compare(b.broadcast(prefix, [1], grid), b.iota(s64_shape(grid), 0), Direction.LE)
    position = reduce_dims(ctx, b.convert(fewer, DType.S64), Op.ADD, [1])
    dims = GatherDims([1], [0], [0], 1, [1, 3])
    result = b.gather(triples, position, dims)
    if known is not None:
        return result
    count = b.binary(Op.MINIMUM, b.convert(selected, DType.S32), b.scalar(total, DType.S32))
    return b.set_dimension_size(result, count, 0)
