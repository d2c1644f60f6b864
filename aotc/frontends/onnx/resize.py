"""Resize and Upsample, in the one form that is plain data movement: nearest
upsampling by whole factors, where every element is repeated f times per axis.

That covers the exporters' `F.interpolate(scale_factor=2, mode="nearest")`;
linear and cubic modes, downsampling and fractional factors are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import UnsupportedError
from ...ir import Instruction
from .helpers import normalize_axis
from .registry import NodeContext, onnx_op

# (coordinate_transformation_mode, nearest_mode) pairs under which nearest
# resizing by a whole factor f maps output index o to input index o // f
REPEATING_MODES = {
    ("half_pixel", "round_prefer_floor"),
    ("half_pixel", "round_prefer_ceil"),
    ("pytorch_half_pixel", "round_prefer_floor"),
    ("pytorch_half_pixel", "round_prefer_ceil"),
    ("asymmetric", "floor"),
}


def repeat_elements(ctx: NodeContext, x: Instruction, factors: Sequence[int]) -> Instruction:
    """Every element repeated factors[i] times along axis i."""
    dims = x.shape.dims
    if all(f == 1 for f in factors):
        return x
    # broadcast to [d0, f0, d1, f1, ...] then merge each (d, f) pair
    interleaved = [n for pair in zip(dims, factors) for n in pair]
    wide = ctx.b.broadcast(x, [2 * i for i in range(len(dims))], interleaved)
    return ctx.b.reshape(wide, [d * f for d, f in zip(dims, factors)])


def _whole_factors(scales: Sequence[float]) -> list[int]:
    factors = [round(float(s)) for s in scales]
    if any(abs(s - f) > 1e-6 or f < 1 for s, f in zip(scales, factors)):
        shown = ", ".join(f"{float(s):g}" for s in scales)
        raise UnsupportedError(f"only upsampling by whole factors is supported, not [{shown}]")
    return factors


def _check_mode(ctx: NodeContext) -> None:
    if ctx.attr("mode") != "nearest":
        raise UnsupportedError(f"mode '{ctx.attr('mode')}' is not supported (only 'nearest')")


@onnx_op("Resize", since=11)
def resize(ctx: NodeContext, x: Instruction, roi=None, scales=None, sizes=None) -> Instruction:
    _check_mode(ctx)
    transform, rounding = ctx.attr("coordinate_transformation_mode"), ctx.attr("nearest_mode")
    if (transform, rounding) not in REPEATING_MODES:
        raise UnsupportedError(
            f"coordinate_transformation_mode '{transform}' with nearest_mode '{rounding}'"
            " is not supported"
        )
    rank = x.shape.rank
    # axes keep their given order: scales and sizes follow it
    axes = [normalize_axis(a, rank) for a in ctx.attr("axes") or range(rank)]
    size_values = ctx.const(3)
    if size_values is not None and size_values.size:
        if ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            raise UnsupportedError("keep_aspect_ratio_policy other than 'stretch'")
        ratios = [int(s) / x.shape.dims[a] for s, a in zip(size_values, axes)]
    else:
        ratios = [float(s) for s in ctx.const(2)]
    factors = [1] * rank
    for axis, factor in zip(axes, _whole_factors(ratios)):
        factors[axis] = factor
    return repeat_elements(ctx, x, factors)


@onnx_op("Upsample", until=8)
def upsample_attribute(ctx: NodeContext, x: Instruction) -> Instruction:
    _check_mode(ctx)
    return repeat_elements(ctx, x, _whole_factors(ctx.required_attr("scales")))


@onnx_op("Upsample", since=9, until=9)
def upsample(ctx: NodeContext, x: Instruction, scales: Instruction) -> Instruction:
    _check_mode(ctx)
    return repeat_elements(ctx, x, _whole_factors(ctx.const(1).tolist()))
