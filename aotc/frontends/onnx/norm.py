"""Normalizations in inference form: BatchNormalization, InstanceNormalization,
LayerNormalization, GroupNormalization, RMSNormalization, MeanVarianceNormalization,
LRN, and the Lp norms: LpNormalization and LpPool (the Lp norm of each pooling window)."""

from __future__ import annotations

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DType, Instruction, Op, Window, scalar_reducer
from .dtypes import to_dtype
from .helpers import (
    Formula,
    element_count,
    full_like,
    normalize_axes,
    normalize_axis,
    reduce,
    unidirectional,
)
from .nn import _pool_geometry
from .registry import NodeContext, onnx_op


def _channel_vector(b: ComputationBuilder, v: Instruction, like: Instruction) -> Instruction:
    """A per-channel (C,) input in `like`'s dtype, checked against `like`'s dim 1."""
    if v.array_shape.dims != (like.array_shape.dims[1],):
        expected = [like.array_shape.dims[1]]
        raise ShapeError(f"per-channel input has shape {list(v.array_shape.dims)}, not {expected}")
    return b.convert(v, like.array_shape.dtype)


def _per_channel(b: ComputationBuilder, v: Instruction, like: Instruction) -> Instruction:
    """A (C,) vector broadcast along dim 1 of `like`."""
    return b.broadcast(v, [1], like.array_shape.dims)


@onnx_op("BatchNormalization")
def batch_norm(ctx: NodeContext, x, scale, bias, mean, var):
    if ctx.attr("training_mode", 0):
        return _batch_norm_training(ctx, x, scale, bias, mean, var)
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


def _batch_norm_training(ctx: NodeContext, x, scale, bias, mean, var) -> list[Instruction]:
    """Opset 14+ training_mode=1: normalize with the batch's own mean and (biased)
    variance per channel; also return the running statistics updated by momentum."""
    b = ctx.b
    if x.shape.rank < 2:
        raise ShapeError("input must be N x C x ...")
    scale, bias, mean, var = (_channel_vector(b, v, x) for v in (scale, bias, mean, var))
    axes = [0, *range(2, x.shape.rank)]
    count = element_count(b, x, axes)
    f = Formula(b, x)
    batch_mean = reduce(b, x, Op.ADD, axes, keepdims=False)
    batch_mean = Formula(b, batch_mean).div(batch_mean, count)
    centered = f.sub(x, _per_channel(b, batch_mean, x))
    batch_var = reduce(b, f.mul(centered, centered), Op.ADD, axes, keepdims=False)
    c = Formula(b, batch_var)
    batch_var = c.div(batch_var, count)
    inv = c.mul(scale, c.f(Op.RSQRT, c.add(batch_var, ctx.attr("epsilon"))))
    y = f.add(f.mul(centered, _per_channel(b, inv, x)), _per_channel(b, bias, x))
    momentum = ctx.attr("momentum")
    running_mean = c.add(c.mul(mean, momentum), c.mul(batch_mean, 1 - momentum))
    running_var = c.add(c.mul(var, momentum), c.mul(batch_var, 1 - momentum))
    return [y, running_mean, running_var]


def _normalize(
    b: ComputationBuilder, x: Instruction, axes: list[int], epsilon: float
) -> tuple[Instruction, Instruction, Instruction]:
    """(x - mean) / sqrt(var + eps) over `axes`, with mean and 1/std (dims kept)."""
    count = element_count(b, x, axes)
    mean = reduce(b, x, Op.ADD, axes, keepdims=True)
    mean = b.binary(Op.DIVIDE, mean, full_like(b, count, mean))
    centered = b.binary(Op.SUBTRACT, x, b.broadcast_to(mean, x.array_shape.dims))
    var = reduce(b, b.binary(Op.MULTIPLY, centered, centered), Op.ADD, axes, keepdims=True)
    var = b.binary(Op.DIVIDE, var, full_like(b, count, var))
    inv_std = b.unary(Op.RSQRT, b.binary(Op.ADD, var, full_like(b, epsilon, var)))
    normalized = b.binary(Op.MULTIPLY, centered, b.broadcast_to(inv_std, x.array_shape.dims))
    return normalized, mean, inv_std


def stashed(b: ComputationBuilder, x: Instruction, stash: DType) -> Instruction:
    """x in `stash` (the precision of the statistics) where that is wider than x's type."""
    dtype = x.array_shape.dtype
    return b.convert(x, stash) if stash.is_float and stash.bits > dtype.bits else x


def _stashed(ctx: NodeContext, x: Instruction) -> Instruction:
    """x in the node's stash_type (float32 by default) where that is wider."""
    return stashed(ctx.b, x, to_dtype(ctx.attr("stash_type", 1), "stash_type"))


def layer_norm_of(
    b: ComputationBuilder,
    x: Instruction,
    scale: Instruction,
    bias: Instruction | None,
    axis: int,
    epsilon: float,
    stash: DType,
) -> tuple[Instruction, Instruction, Instruction]:
    """(y, mean, 1/std): x normalized over the dims from `axis` on with its statistics in
    `stash`, then scaled and shifted in scale's type (the output's)."""
    wide = stashed(b, x, stash)
    normalized, mean, inv_std = _normalize(b, wide, list(range(axis, x.array_shape.rank)), epsilon)
    y = b.convert(normalized, scale.array_shape.dtype)
    y = b.binary(Op.MULTIPLY, y, unidirectional(b, scale, x.array_shape.dims))
    if bias is not None:
        y = b.binary(Op.ADD, y, unidirectional(b, bias, x.array_shape.dims))
    return y, mean, inv_std


@onnx_op("LayerNormalization", since=17)
def layer_norm(ctx: NodeContext, x: Instruction, scale: Instruction, bias=None):
    axis = normalize_axis(ctx.attr("axis"), x.array_shape.rank)
    stash = to_dtype(ctx.attr("stash_type", 1), "stash_type")
    return list(layer_norm_of(ctx.b, x, scale, bias, axis, ctx.attr("epsilon"), stash))


@onnx_op("InstanceNormalization")
def instance_norm(ctx: NodeContext, x: Instruction, scale: Instruction, bias: Instruction):
    b = ctx.b
    if x.array_shape.rank < 3:
        raise ShapeError("input must be N x C x spatial dims")
    normalized, _, _ = _normalize(b, x, list(range(2, x.array_shape.rank)), ctx.attr("epsilon"))
    scale, bias = (_per_channel(b, _channel_vector(b, v, x), x) for v in (scale, bias))
    return b.binary(Op.ADD, b.binary(Op.MULTIPLY, normalized, scale), bias)


@onnx_op("LRN")
def local_response_norm(ctx: NodeContext, x: Instruction) -> Instruction:
    """x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ^ beta."""
    b = ctx.b
    size = ctx.required_attr("size")
    if x.array_shape.rank < 3:
        raise ShapeError("input must be N x C x spatial dims")
    f = Formula(b, x)
    ones = [1] * x.array_shape.rank
    # the channel window runs from c - floor((size-1)/2) to c + ceil((size-1)/2)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    window = Window.make(
        [size if i == 1 else 1 for i in range(x.array_shape.rank)],
        ones,
        [before if i == 1 else 0 for i in range(x.array_shape.rank)],
        [after if i == 1 else 0 for i in range(x.array_shape.rank)],
    )
    dtype = x.array_shape.dtype
    adder = scalar_reducer(b.module, Op.ADD, dtype)
    square_sum = b.reduce_window(f.mul(x, x), b.scalar(0, dtype), window, adder)
    scale = f.add(f.mul(square_sum, ctx.attr("alpha") / size), ctx.attr("bias"))
    return f.div(x, b.binary(Op.POWER, scale, f.k(ctx.attr("beta"))))


# opsets 18-20 (scale and bias per group) are deprecated: the ONNX checker refuses them
@onnx_op("GroupNormalization", since=21)
def group_norm(ctx: NodeContext, x: Instruction, scale: Instruction, bias: Instruction):
    """Normalize each group of C / num_groups channels (with all spatial dims), then
    scale and shift per channel."""
    b = ctx.b
    if x.array_shape.rank < 2:
        raise ShapeError("input must be N x C x ...")
    groups = ctx.required_attr("num_groups")
    n, c = x.array_shape.dims[:2]
    if groups <= 0 or c % groups:
        raise ModelError(f"num_groups={groups} does not divide the {c} channels")
    grouped = b.reshape(_stashed(ctx, x), [n, groups, x.array_shape.size // (n * groups)])
    normalized, _, _ = _normalize(b, grouped, [2], ctx.attr("epsilon"))
    y = b.convert(b.reshape(normalized, x.array_shape.dims), x.array_shape.dtype)
    scale, bias = (_per_channel(b, _channel_vector(b, v, x), x) for v in (scale, bias))
    return b.binary(Op.ADD, b.binary(Op.MULTIPLY, y, scale), bias)


def rms_norm_of(
    b: ComputationBuilder,
    x: Instruction,
    scale: Instruction,
    axis: int,
    epsilon: float,
    stash: DType,
) -> tuple[Instruction, Instruction]:
    """(y, 1/rms): x / sqrt(mean(x^2) + epsilon) over the dims from `axis` on, computed in
    `stash`, times scale in scale's type (the output's, which may differ from x's)."""
    axes = list(range(axis, x.array_shape.rank))
    wide = stashed(b, x, stash)
    f = Formula(b, wide)
    mean_square = reduce(b, f.mul(wide, wide), Op.ADD, axes, keepdims=True)
    g = Formula(b, mean_square)
    count = element_count(b, x, axes)
    inv_rms = g.f(Op.RSQRT, g.add(g.div(mean_square, count), epsilon))
    normalized = b.binary(Op.MULTIPLY, wide, b.broadcast_to(inv_rms, x.array_shape.dims))
    y = b.convert(normalized, scale.array_shape.dtype)
    return b.binary(Op.MULTIPLY, y, unidirectional(b, scale, x.array_shape.dims)), inv_rms


@onnx_op("RMSNormalization", since=23)
def rms_norm(ctx: NodeContext, x: Instruction, scale: Instruction) -> Instruction:
    axis = normalize_axis(ctx.attr("axis"), x.array_shape.rank)
    stash = to_dtype(ctx.attr("stash_type", 1), "stash_type")
    return rms_norm_of(ctx.b, x, scale, axis, ctx.attr("epsilon"), stash)[0]


@onnx_op("MeanVarianceNormalization", since=9)
def mean_variance_norm(ctx: NodeContext, x: Instruction) -> Instruction:
    """(x - mean) / (std + 1e-9) over `axes`, as the spec's function body."""
    b = ctx.b
    axes = normalize_axes(ctx.attr("axes"), x.array_shape.rank)
    count = element_count(b, x, axes)
    f = Formula(b, x)
    mean = reduce(b, x, Op.ADD, axes, keepdims=True)
    mean = b.broadcast_to(Formula(b, mean).div(mean, count), x.array_shape.dims)
    # the centred form of E[x^2] - E[x]^2: never negative, so never a NaN std
    centered = b.binary(Op.SUBTRACT, x, mean)
    var = reduce(b, f.mul(centered, centered), Op.ADD, axes, keepdims=True)
    g = Formula(b, var)
    std = g.add(g.f(Op.SQRT, g.div(var, count)), 1e-9)
    return f.div(centered, b.broadcast_to(std, x.array_shape.dims))


def _lp_finish(f: Formula, total: Instruction, p: float) -> Instruction:
    """The p-th root of a sum of |x|^p."""
    if p == 1:
        return total
    if p == 2:
        return f.f(Op.SQRT, total)
    return f.b.binary(Op.POWER, total, f.k(1 / p))


def _lp_terms(f: Formula, x: Instruction, p: float) -> Instruction:
    """|x|^p, the terms of an Lp norm."""
    if p == 2:
        return f.mul(x, x)
    magnitude = f.f(Op.ABS, x)
    return magnitude if p == 1 else f.b.binary(Op.POWER, magnitude, f.k(p))


@onnx_op("LpNormalization", since=1)
def lp_normalization(ctx: NodeContext, x: Instruction) -> Instruction:
    """x / ||x||_p along `axis`; 0 where the norm is 0 (as the reference)."""
    b = ctx.b
    p = ctx.attr("p")
    if p not in (1, 2):
        raise ModelError(f"p={p}: LpNormalization defines only p=1 and p=2")
    axis = normalize_axis(ctx.attr("axis"), x.array_shape.rank)
    f = Formula(b, x)
    total = reduce(b, _lp_terms(f, x, p), Op.ADD, [axis], keepdims=True)
    norm = b.broadcast_to(_lp_finish(Formula(b, total), total, p), x.array_shape.dims)
    return f.where(norm, Direction.EQ, 0, 0, f.div(x, norm))


@onnx_op("LpPool", since=1)
def lp_pool(ctx: NodeContext, x: Instruction) -> Instruction:
    """(sum of |x|^p over each window)^(1/p); padding counts as zeros."""
    b = ctx.b
    p = float(ctx.attr("p"))
    if p <= 0:
        raise ModelError(f"p={p}: LpPool needs p > 0")
    window = _pool_geometry(ctx, x).window()
    dtype = x.array_shape.dtype
    adder = scalar_reducer(b.module, Op.ADD, dtype)
    total = b.reduce_window(_lp_terms(Formula(b, x), x, p), b.scalar(0, dtype), window, adder)
    return _lp_finish(Formula(b, total), total, p)


@onnx_op("GlobalLpPool", since=1)
def global_lp_pool(ctx: NodeContext, x: Instruction) -> Instruction:
    """The Lp norm of each channel's whole image: (N, C, 1, ...)."""
    p = float(ctx.attr("p"))
    if p <= 0:
        raise ModelError(f"p={p}: GlobalLpPool needs p > 0")
    if x.array_shape.rank < 3:
        raise ShapeError(f"input must be N x C x spatial dims, got {list(x.array_shape.dims)}")
    axes = list(range(2, x.array_shape.rank))
    total = reduce(ctx.b, _lp_terms(Formula(ctx.b, x), x, p), Op.ADD, axes, keepdims=True)
    return _lp_finish(Formula(ctx.b, total), total, p)
