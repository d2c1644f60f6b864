"""Resize and Upsample, as separable per-axis resampling.

Which source elements an output element reads along one axis, and with which
weights, depends only on shapes, scales and attributes, so `axis_taps`
computes them with numpy at compile time (a port of onnx.reference's
vectorised resize: coordinate transform, neighbour choice, nearest / linear /
cubic coefficients, antialias, exclude_outside).  The lowering then gathers
the taps along the axis with constant indices and sums them weighted, one axis
at a time, in the order that does the least work (`cheapest_order`): a gather
along the innermost dim reads scattered elements where one along an outer dim
reads whole rows, so upsampling resizes the innermost axis first, while the
image is small.  Nearest mode reads one tap per output: pure data movement,
exact for every dtype.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import DType, GatherDims, Instruction, Op
from .helpers import full_like, normalize_axis
from .registry import NodeContext, onnx_op

COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
    "tf_half_pixel_for_nn",
)
# "simple" is the rounding of Upsample and Resize-10 (as onnxruntime): floor when
# upsampling an axis, ceil when downsampling it
# the most elements a resized tensor may hold: beyond, a size is surely a corrupt scale
MAX_ELEMENTS = 2**40
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


@dataclass(frozen=True)
class ResizeSpec:
    """The attributes that decide every axis's taps."""

    mode: str  # nearest | linear | cubic
    transform: str  # one of COORDINATE_MODES
    nearest_mode: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    extrapolation: float = 0.0


@dataclass(frozen=True)
class AxisTaps:
    """Output o along one axis is sum_k weight[o, k] * input[index[o, k]]."""

    index: np.ndarray  # int64 [out, n], inside [0, in)
    weight: np.ndarray  # float64 [out, n]
    outside: np.ndarray | None  # bool [out]: tf_crop_and_resize extrapolates these


@dataclass(frozen=True)
class AxisGeometry:
    y: np.ndarray  # output coordinates 0..out-1, float64
    scale: float
    in_size: int
    out_size: int
    roi: tuple[float, float] | None  # (start, end) of tf_crop_and_resize

    @property
    def out_float(self) -> float:
        return self.scale * self.in_size


def _align_corners(g: AxisGeometry) -> np.ndarray:
    if g.out_float == 1:
        return np.zeros(g.out_size)
    return g.y * (g.in_size - 1) / (g.out_float - 1)


def _crop_and_resize(g: AxisGeometry) -> np.ndarray:
    start, end = g.roi
    if g.out_float == 1:
        x = np.full(g.out_size, (end - start) * (g.in_size - 1) / 2)
    else:
        x = g.y * (end - start) * (g.in_size - 1) / (g.out_float - 1)
    return x + start * (g.in_size - 1)


def _pytorch_half_pixel(g: AxisGeometry) -> np.ndarray:
    if g.out_float == 1:
        return np.full(g.out_size, -0.5)
    return (g.y + 0.5) / g.scale - 0.5


def _half_pixel_symmetric(g: AxisGeometry) -> np.ndarray:
    offset = g.in_size / 2 * (1 - g.out_size / g.out_float)
    return offset + (g.y + 0.5) / g.scale - 0.5


# output coordinate -> source coordinate, per coordinate_transformation_mode
SOURCE_COORDINATES: dict[str, Callable[[AxisGeometry], np.ndarray]] = {
    "half_pixel": lambda g: (g.y + 0.5) / g.scale - 0.5,
    "half_pixel_symmetric": _half_pixel_symmetric,
    "pytorch_half_pixel": _pytorch_half_pixel,
    "align_corners": _align_corners,
    "asymmetric": lambda g: g.y / g.scale,
    "tf_crop_and_resize": _crop_and_resize,
    "tf_half_pixel_for_nn": lambda g: (g.y + 0.5) / g.scale,  # opsets 11 and 12
}


def _nearest_coeffs(ratio: float, scale: float, spec: ResizeSpec) -> np.ndarray:
    # ratio is in (0, 1]: 1 for an integer source coordinate, which reads that element
    mode = spec.nearest_mode
    if mode == "simple":
        mode = "ceil" if scale < 1 else "floor"
    if ratio == 1:
        return np.array([0.0, 1.0])
    take_right = {
        "round_prefer_floor": ratio > 0.5,
        "round_prefer_ceil": ratio >= 0.5,
        "floor": False,
        "ceil": True,
    }[mode]
    return np.array([0.0, 1.0]) if take_right else np.array([1.0, 0.0])


def _linear_coeffs(ratio: float, scale: float, spec: ResizeSpec) -> np.ndarray:
    if not spec.antialias:
        return np.array([1 - ratio, ratio])
    scale = min(scale, 1.0)  # antialiasing widens the kernel when downsampling only
    start = int(np.floor(-1 / scale) + 1)
    args = (np.arange(start, 2 - start) - ratio) * scale
    coeffs = np.clip(1 - np.abs(args), 0, 1)
    return coeffs / coeffs.sum()


def _cubic_kernel(x: np.ndarray, a: float) -> np.ndarray:
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _cubic_coeffs(ratio: float, scale: float, spec: ResizeSpec) -> np.ndarray:
    a = spec.cubic_a
    if not spec.antialias:
        return _cubic_kernel(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]), a)
    scale = min(scale, 1.0)
    start = int(np.floor(-2 / scale) + 1)
    coeffs = _cubic_kernel(scale * (np.arange(start, 2 - start) - ratio), a)
    return coeffs / coeffs.sum()


COEFFICIENTS = {"nearest": _nearest_coeffs, "linear": _linear_coeffs, "cubic": _cubic_coeffs}


def axis_taps(spec: ResizeSpec, in_size: int, scale: float, out_size: int, roi) -> AxisTaps:
    """The taps of one resized axis (onnx.reference's `_interpolate_1d_along_axis`)."""
    geometry = AxisGeometry(np.arange(out_size, dtype=np.float64), scale, in_size, out_size, roi)
    x = SOURCE_COORDINATES[spec.transform](geometry)
    outside = None
    if spec.transform == "tf_crop_and_resize":
        outside = (x < 0) | (x > in_size - 1)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    coeff_fn = COEFFICIENTS[spec.mode]
    weight = np.stack([coeff_fn(float(r), scale, spec) for r in ratios]).astype(np.float64)
    n = weight.shape[1]
    # the n source elements nearest to x, ties to the smaller index, counted on the
    # input edge-padded by ceil(n / 2) (so indices outside are clamped afterwards)
    pad = math.ceil(n / 2)
    padded = x + pad
    p = np.floor(padded).astype(np.int64)
    frac = padded - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    index = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if spec.exclude_outside:
        weight = np.where((index < 0) | (index >= in_size), 0.0, weight)
        total = weight.sum(axis=1, keepdims=True)
        weight = weight / np.where(total == 0, 1.0, total)
    return AxisTaps(np.clip(index, 0, in_size - 1), weight, outside)


# -- building the HLO --------------------------------------------------------------


def take(ctx: NodeContext, x: Instruction, axis: int, index: np.ndarray) -> Instruction:
    """x's elements at the constant `index` along `axis` (that dim becomes len(index))."""
    dims = x.array_shape.dims
    rank = len(dims)
    gather = GatherDims(
        offset_dims=[d for d in range(rank) if d != axis],
        collapsed_slice_dims=[axis],
        start_index_map=[axis],
        index_vector_dim=1,
        slice_sizes=[1 if d == axis else n for d, n in enumerate(dims)],
    )
    return ctx.b.gather(x, ctx.b.constant(np.asarray(index, dtype=np.int64)), gather)


def _repeats(index: np.ndarray, in_size: int) -> int | None:
    """f if `index` repeats every source element f times in order, else None."""
    factor = len(index) // in_size
    if factor * in_size == len(index) and np.array_equal(index, np.arange(len(index)) // factor):
        return factor
    return None


def _pick(ctx: NodeContext, x: Instruction, axis: int, index: np.ndarray) -> Instruction:
    """Nearest resampling along `axis`: element index[o] for output o."""
    factor = _repeats(index, x.array_shape.dims[axis])
    if factor is None:
        return take(ctx, x, axis, index)
    # repeating every element is a broadcast then a merge of dims: no gather needed
    dims = x.array_shape.dims
    wide_dims = [*dims[: axis + 1], factor, *dims[axis + 1 :]]
    kept = [d for d in range(len(wide_dims)) if d != axis + 1]
    wide = ctx.b.broadcast(x, kept, wide_dims)
    return ctx.b.reshape(wide, [*dims[:axis], len(index), *dims[axis + 1 :]])


def _weighted(ctx: NodeContext, x: Instruction, axis: int, taps: AxisTaps) -> Instruction:
    """sum_k weight[o, k] * x[index[o, k]] along `axis`, in x's (float) dtype: one gathered
    term per tap, added in tap order (an elementwise loop over the output, vectorized
    along its rows, where a reduction over a middle dim of 2-4 taps is not)."""
    b = ctx.b
    dims = list(x.array_shape.dims)
    dims[axis] = taps.index.shape[0]
    dtype = x.array_shape.dtype
    total = None
    for k in range(taps.index.shape[1]):
        gathered = take(ctx, x, axis, taps.index[:, k])
        weight = b.broadcast(b.constant(taps.weight[:, k], dtype), [axis], dims)
        term = b.binary(Op.MULTIPLY, gathered, weight)
        total = term if total is None else b.binary(Op.ADD, total, term)
    assert total is not None  # every axis has a tap
    return total


def _fill(ctx: NodeContext, y: Instruction, axis: int, rows: np.ndarray | None, value: float):
    """y with `value` at the output positions `rows` (bool [out]) along `axis`."""
    if rows is None or not rows.any():
        return y
    b = ctx.b
    mask = b.broadcast(b.constant(rows), [axis], y.array_shape.dims)
    return b.select(mask, full_like(b, value, y), y)


def _compute_dtype(dtype: DType) -> DType:
    """Where linear and cubic weights are applied: f16 and bf16 widen to f32; integers
    use f64, as the reference, since rounding to an integer magnifies any difference."""
    if dtype.is_float:
        return dtype if dtype.bits >= 32 else DType.F32
    return DType.F64


def _from_compute(ctx: NodeContext, y: Instruction, dtype: DType) -> Instruction:
    """Back to the input dtype; integers round half to even and saturate (as the spec)."""
    b = ctx.b
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        y = b.unary(Op.ROUND_NEAREST_EVEN, y)
        lo, hi = b.scalar(info.min, y.array_shape.dtype), b.scalar(info.max, y.array_shape.dtype)
        y = b.clamp(lo, y, hi)
    return b.convert(y, dtype)


# a tap gathered along the innermost dim costs this many along an outer one (scattered
# element loads against a vector load of a whole row)
INNERMOST_TAP_COST = 4
# orders tried (every permutation) for at most this many resized axes
MAX_ORDERED_AXES = 5


def cheapest_order(
    dims: Sequence[int], plans: Sequence[tuple[int, AxisTaps]]
) -> list[tuple[int, AxisTaps]]:
    """`plans` in the order whose passes read the fewest taps (innermost ones weighted);
    the given order where an axis extrapolates (its filled rows then stay in place) or
    on ties."""
    if len(plans) > MAX_ORDERED_AXES or any(t.outside is not None for _, t in plans):
        return list(plans)
    innermost = len(dims) - 1

    def cost(order) -> int:
        shape, total = list(dims), 0
        for axis, taps in order:
            shape[axis] = taps.index.shape[0]
            weight = INNERMOST_TAP_COST if axis == innermost else 1
            total += math.prod(shape) * taps.index.shape[1] * weight
        return total

    return list(min(itertools.permutations(plans), key=cost))


def resample(
    ctx: NodeContext, x: Instruction, spec: ResizeSpec, plans: Sequence[tuple[int, AxisTaps]]
) -> Instruction:
    """Apply each (axis, taps), in the cheapest order."""
    plans = cheapest_order(x.array_shape.dims, plans)
    dtype = x.array_shape.dtype
    if spec.mode == "nearest":
        for axis, taps in plans:
            index = taps.index[np.arange(len(taps.index)), np.argmax(taps.weight, axis=1)]
            x = _pick(ctx, x, axis, index)
            # exclude_outside can zero a row's only tap: the reference then gives 0
            x = _fill(ctx, x, axis, taps.weight.max(axis=1) == 0, 0)
            x = _fill(ctx, x, axis, taps.outside, spec.extrapolation)
        return x
    if dtype is DType.PRED:
        raise UnsupportedError(f"{spec.mode} resizing of bool tensors")
    y = ctx.b.convert(x, _compute_dtype(dtype))
    for axis, taps in plans:
        y = _fill(ctx, _weighted(ctx, y, axis, taps), axis, taps.outside, spec.extrapolation)
    return _from_compute(ctx, y, dtype)


def _output_plan(
    dims: Sequence[int],
    axes: list[int],
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    policy: str,
) -> tuple[list[float], list[int]]:
    """(scale, output size) per entry of `axes` (onnx.reference's `_interpolate_nd`)."""
    in_sizes = [dims[a] for a in axes]
    if sizes is not None:
        if len(sizes) != len(axes):
            raise ModelError(f"sizes has {len(sizes)} values for {len(axes)} axes")
        ratios = [int(s) / n for s, n in zip(sizes, in_sizes)]
        if policy == "stretch":  # the policy applies to sizes only
            return ratios, [int(s) for s in sizes]
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        return [scale] * len(axes), [int(scale * n + 0.5) for n in in_sizes]
    if scales is None or len(scales) != len(axes):
        raise ModelError(f"scales must have one value per resized axis ({len(axes)})")
    # float32 scales times int64 dims: numpy computes the product in float64
    product = scales * np.array(in_sizes, dtype=np.int64)
    if not np.all(np.abs(product) < MAX_ELEMENTS):  # NaN too; no int64 cast of a huge float
        raise ShapeError(f"resize scales {list(scales)} give a size too large (at least 2**40)")
    out = product.astype(np.int64)
    return [float(s) for s in scales], [int(o) for o in out]


def _plan(
    dims, axes, spec: ResizeSpec, scales, sizes, policy: str, roi
) -> list[tuple[int, AxisTaps]]:
    """The (axis, taps) of every axis that actually changes."""
    factors, out_sizes = _output_plan(dims, axes, scales, sizes, policy)
    resized = dict(zip(axes, out_sizes))
    total = math.prod(resized.get(a, d) for a, d in enumerate(dims))
    if total > MAX_ELEMENTS:
        raise ShapeError(
            f"the resized tensor would hold {total} elements, too large (2**40 at most)"
        )
    if any(s <= 0 for s in factors):
        raise ModelError(f"resize scales must be positive, got {factors}")
    plans = []
    for i, axis in enumerate(axes):
        crop = None if roi is None else (float(roi[i]), float(roi[len(axes) + i]))
        trivial_crop = crop is None or (math.isclose(crop[0], 0) and math.isclose(crop[1], 1))
        if math.isclose(factors[i], 1.0) and out_sizes[i] == dims[axis] and trivial_crop:
            continue  # the reference skips identity axes, extrapolation included
        if dims[axis] == 0 and out_sizes[i] > 0:
            raise UnsupportedError(f"resizing empty axis {axis} to {out_sizes[i]} elements")
        plans.append((axis, axis_taps(spec, dims[axis], factors[i], out_sizes[i], crop)))
    return plans


def _choice(ctx: NodeContext, name: str, options: Sequence[str], default: str) -> str:
    """A string attribute in `options`, `default` where this opset has no such attribute."""
    value = ctx.attr(name, default)
    if value not in options:
        raise ModelError(f"attribute {name}={value!r} is not one of {', '.join(options)}")
    return value


def _spec(ctx: NodeContext) -> ResizeSpec:
    return ResizeSpec(
        mode=ctx.choice("mode", ("nearest", "linear", "cubic")),
        transform=_choice(ctx, "coordinate_transformation_mode", COORDINATE_MODES, "half_pixel"),
        nearest_mode=_choice(ctx, "nearest_mode", NEAREST_MODES[:-1], "round_prefer_floor"),
        cubic_a=float(ctx.attr("cubic_coeff_a", -0.75)),
        exclude_outside=bool(ctx.attr("exclude_outside", 0)),
        antialias=bool(ctx.attr("antialias", 0)),
        extrapolation=float(ctx.attr("extrapolation_value", 0.0)),
    )


def _nonempty(values: np.ndarray | None) -> np.ndarray | None:
    return None if values is None or values.size == 0 else values.reshape(-1)


@onnx_op("Resize", since=11)
def resize(ctx: NodeContext, x: Instruction, roi=None, scales=None, sizes=None) -> Instruction:
    spec = _spec(ctx)
    if spec.antialias and spec.mode == "nearest":
        raise ModelError("antialias is not defined for mode 'nearest'")
    rank = x.array_shape.rank
    # axes keep their given order: scales, sizes and roi follow it
    axes = [normalize_axis(a, rank) for a in ctx.attr("axes") or range(rank)]
    if len(set(axes)) != len(axes):
        raise ModelError(f"repeated axes {ctx.attr('axes')}")
    size_values = _nonempty(ctx.const(3))
    scale_values = None if size_values is not None else _nonempty(ctx.const(2))
    if size_values is None and scale_values is None:
        raise ModelError("Resize needs one of scales and sizes")
    roi_values = None
    if spec.transform == "tf_crop_and_resize":
        roi_values = _nonempty(ctx.const(1))
        if roi_values is None or len(roi_values) != 2 * len(axes):
            raise ModelError(f"tf_crop_and_resize needs a roi of {2 * len(axes)} values")
    policy = _choice(ctx, "keep_aspect_ratio_policy", ASPECT_POLICIES, "stretch")
    plans = _plan(x.array_shape.dims, axes, spec, scale_values, size_values, policy, roi_values)
    return resample(ctx, x, spec, plans)


def _legacy(ctx: NodeContext, x: Instruction, scales: Sequence[float]) -> Instruction:
    """Upsample and Resize-10: asymmetric coordinates, nearest rounding as onnxruntime."""
    mode = ctx.choice("mode", ("nearest", "linear", "bilinear"))
    spec = ResizeSpec("nearest" if mode == "nearest" else "linear", "asymmetric", "simple")
    axes = list(range(x.array_shape.rank))
    values = np.asarray(scales, dtype=np.float32)
    plans = _plan(x.array_shape.dims, axes, spec, values, None, "stretch", None)
    return resample(ctx, x, spec, plans)


@onnx_op("Resize", since=10, until=10)
def resize_10(ctx: NodeContext, x: Instruction, scales: Instruction) -> Instruction:
    return _legacy(ctx, x, ctx.const(1).reshape(-1))


@onnx_op("Upsample", until=8)
def upsample_attribute(ctx: NodeContext, x: Instruction) -> Instruction:
    return _legacy(ctx, x, ctx.required_attr("scales"))


@onnx_op("Upsample", since=9, until=9)
def upsample(ctx: NodeContext, x: Instruction, scales: Instruction) -> Instruction:
    return _legacy(ctx, x, ctx.const(1).reshape(-1))
