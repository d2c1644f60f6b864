"""Convolution and pooling: Conv, ConvTranspose, MaxPool, AveragePool,
Global{Average,Max}Pool.

Conv becomes HLO convolution in ONNX's NCHW layout (ConvTranspose too, with a
dilated input and a mirrored kernel); pools become reduce-window
over every dim (window 1 on N and C).  Average pools divide by a divisor array
computed from shapes alone, so count_include_pad and ceil_mode's partial
windows are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, ShapeError
from ...ir import (
    Computation,
    ComputationBuilder,
    ConvDims,
    Direction,
    DType,
    Instruction,
    Op,
    Shape,
    Window,
    scalar_reducer,
)
from .helpers import element_count, full_like, lowest, reduce
from .registry import NodeContext, onnx_op

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _pads(ctx: NodeContext, in_dims, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """Low and high padding per spatial dim, from `pads` or `auto_pad`."""
    n = len(in_dims)
    auto_pad = ctx.choice("auto_pad", AUTO_PADS)
    if auto_pad == "NOTSET":
        pads = ctx.window_ints("pads", 2 * n, 0)
        return pads[:n], pads[n:]
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    low, high = [], []
    for size, k, s, d in zip(in_dims, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        # SAME_UPPER puts the odd pad at the end, SAME_LOWER at the start
        small, big = total // 2, total - total // 2
        low.append(small if auto_pad == "SAME_UPPER" else big)
        high.append(big if auto_pad == "SAME_UPPER" else small)
    return low, high


def _spatial_rank(x: Instruction) -> int:
    if x.array_shape.rank < 3:
        raise ShapeError(f"input must be N x C x spatial dims, got {list(x.array_shape.dims)}")
    return x.array_shape.rank - 2


@onnx_op("Conv")
def conv(ctx: NodeContext, x: Instruction, w: Instruction, bias=None, dtype=None) -> Instruction:
    """ONNX Conv; `dtype`: the result's type where it is not the operands' (s32 sums of
    16-bit integers)."""
    b = ctx.b
    window = conv_window(ctx, x, w)
    n = len(window.size)
    out = b.convolution(x, w, window, ConvDims.nchw(n), groups=ctx.attr("group"), dtype=dtype)
    return channel_bias(b, out, bias)


def channel_bias(b, out: Instruction, bias: Instruction | None) -> Instruction:
    """`out` (NCHW) plus a bias per channel, if there is one."""
    if bias is None:
        return out
    return b.binary(Op.ADD, out, b.broadcast(bias, [1], out.array_shape.dims))


def conv_window(ctx: NodeContext, x: Instruction, w: Instruction) -> Window:
    """ONNX Conv's window (kernel, strides, pads, dilations) for input `x`, weights `w`."""
    n = _spatial_rank(x)
    kernel = list(w.array_shape.dims[2:])
    if ctx.attr("kernel_shape") and list(ctx.attr("kernel_shape")) != kernel:
        raise ModelError(f"kernel_shape {ctx.attr('kernel_shape')} != weight dims {kernel}")
    strides = ctx.window_ints("strides", n, 1)
    dilations = ctx.window_ints("dilations", n, 1)
    low, high = _pads(ctx, x.array_shape.dims[2:], kernel, strides, dilations)
    return Window.make(kernel, strides, low, high, None, dilations)


@onnx_op("ConvTranspose")
def conv_transpose(ctx: NodeContext, x: Instruction, w: Instruction, bias=None) -> Instruction:
    """The gradient of Conv as a convolution: the input dilated by the strides, the
    kernel mirrored with its feature dims swapped, padded by (k - 1) * d - pads (the
    definition; passes/conv_phases.py computes it without the inserted zeros)."""
    b = ctx.b
    n = _spatial_rank(x)
    groups = ctx.attr("group")
    c_in, c_out_per_group, *kernel = w.array_shape.dims
    strides = ctx.window_ints("strides", n, 1)
    dilations = ctx.window_ints("dilations", n, 1)
    out_padding = ctx.window_ints("output_padding", n, 0)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    in_dims = x.array_shape.dims[2:]
    # the output extent before pads are taken off
    full = [s * (i - 1) + p + e for s, i, p, e in zip(strides, in_dims, out_padding, extents)]
    begin, end = _transpose_pads(ctx, in_dims, strides, full)
    low = [e - 1 - p for e, p in zip(extents, begin)]
    high = [e - 1 - p + q for e, p, q in zip(extents, end, out_padding)]
    # kernel (C_in, C_out/g, k...) -> (C_in/g, C_out, k...) mirrored: the layout of a
    # grouped convolution's kernel
    kernel_io = w
    if groups > 1:
        grouped = b.reshape(w, [groups, c_in // groups, c_out_per_group, *kernel])
        grouped = b.transpose(grouped, [1, 0, 2, *range(3, 3 + n)])
        kernel_io = b.reshape(grouped, [c_in // groups, groups * c_out_per_group, *kernel])
    kernel_io = b.reverse(kernel_io, list(range(2, 2 + n)))
    window = Window.make(kernel, None, low, high, strides, dilations)
    spatial = tuple(range(2, 2 + n))
    dims = ConvDims(0, 1, spatial, 0, 1, spatial, 0, 1, spatial)
    return channel_bias(b, b.convolution(x, kernel_io, window, dims, groups=groups), bias)


def _transpose_pads(ctx: NodeContext, in_dims, strides, full) -> tuple[list[int], list[int]]:
    """ConvTranspose's pads at the start and end of each spatial dim."""
    n = len(in_dims)
    auto_pad = ctx.choice("auto_pad", AUTO_PADS)
    target = ctx.attr("output_shape")
    if not target and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [i * s for i, s in zip(in_dims, strides)]
    if not target:
        if auto_pad == "VALID":
            return [0] * n, [0] * n
        pads = ctx.window_ints("pads", 2 * n, 0)
        return pads[:n], pads[n:]
    target = list(target)[-n:]  # some exporters include N and C
    total = [f - t for f, t in zip(full, target)]
    small = [t // 2 for t in total]
    big = [t - t // 2 for t in total]
    return (small, big) if auto_pad == "SAME_UPPER" else (big, small)


@dataclass(frozen=True)
class PoolGeometry:
    """One pool's window per spatial dim; `extra` is ceil_mode's added high padding."""

    in_dims: list[int]
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    low: list[int]
    high: list[int]
    extra: list[int]

    def window(self) -> Window:
        high = [h + e for h, e in zip(self.high, self.extra)]
        return Window.make(
            [1, 1, *self.kernel],
            [1, 1, *self.strides],
            [0, 0, *self.low],
            [0, 0, *high],
            None,
            [1, 1, *self.dilations],
        )

    def window_counts(self, dim: int, out: int, include_pad: bool) -> np.ndarray:
        """How many elements each output window along `dim` averages."""
        lo_bound = -self.low[dim] if include_pad else 0
        hi_bound = self.in_dims[dim] + (self.high[dim] if include_pad else 0)
        starts = np.arange(out) * self.strides[dim] - self.low[dim]
        taps = starts[:, None] + self.dilations[dim] * np.arange(self.kernel[dim])[None, :]
        return ((taps >= lo_bound) & (taps < hi_bound)).sum(axis=1)


def _pool_geometry(ctx: NodeContext, x: Instruction) -> PoolGeometry:
    n = _spatial_rank(x)
    in_dims = list(x.array_shape.dims[2:])
    kernel = ctx.window_ints("kernel_shape", n, None)
    strides = ctx.window_ints("strides", n, 1)
    dilations = ctx.window_ints("dilations", n, 1)
    low, high = _pads(ctx, in_dims, kernel, strides, dilations)
    extra = [0] * n
    if ctx.attr("ceil_mode", 0):
        for i in range(n):
            span = in_dims[i] + low[i] + high[i] - ((kernel[i] - 1) * dilations[i] + 1)
            if span < 0:
                continue
            out = -(-span // strides[i]) + 1
            # ONNX (as PyTorch) drops a last window that would start in the high padding
            if (out - 1) * strides[i] >= in_dims[i] + low[i]:
                out -= 1
            extra[i] = max(0, (out - 1) * strides[i] - span)
    return PoolGeometry(in_dims, kernel, strides, dilations, low, high, extra)


@onnx_op("MaxPool")
def max_pool(ctx: NodeContext, x: Instruction):
    storage_order = ctx.attr("storage_order", 0)
    if storage_order not in (0, 1):
        raise ModelError("storage_order must be 0 or 1")
    b = ctx.b
    geometry = _pool_geometry(ctx, x)
    dtype = x.array_shape.dtype
    init = b.scalar(lowest(dtype), dtype)
    if not ctx.output_used(1):
        reducer = scalar_reducer(b.module, Op.MAXIMUM, dtype)
        return b.reduce_window(x, init, geometry.window(), reducer)
    # values and flat row-major indices reduced together; ties keep the lower index,
    # i.e. the first maximum in scan order, as the ONNX reference does
    index = _flat_index(b, x.array_shape.dims)
    no_index = b.scalar(np.iinfo(np.int64).max, DType.S64)
    pooled = b.add(
        Op.REDUCE_WINDOW,
        [x, index, init, no_index],
        window=geometry.window(),
        called=(_argmax_reducer(b.module, dtype),),
    )
    values, indices = b.get_tuple_element(pooled, 0), b.get_tuple_element(pooled, 1)
    if storage_order == 1:
        indices = _column_major(b, indices, x.array_shape.dims)
    return values, indices


def _flat_index(b: ComputationBuilder, dims) -> Instruction:
    """s64 array of `dims` holding each element's row-major flat index."""
    shape = Shape(DType.S64, tuple(dims))
    total = None
    for axis in range(len(dims)):
        stride = int(np.prod(dims[axis + 1 :], dtype=np.int64))
        position = b.iota(shape, axis)
        term = b.binary(Op.MULTIPLY, position, full_like(b, stride, position))
        total = term if total is None else b.binary(Op.ADD, total, term)
    return total


def _argmax_reducer(module, dtype: DType) -> Computation:
    """(v1, i1, v2, i2) -> the pair with the larger value, the lower index on ties."""
    b = ComputationBuilder(module, f"argmax_{dtype.text}")
    v1, i1 = b.parameter(0, Shape(dtype, ()), "v1"), b.parameter(1, Shape(DType.S64, ()), "i1")
    v2, i2 = b.parameter(2, Shape(dtype, ()), "v2"), b.parameter(3, Shape(DType.S64, ()), "i2")
    greater = b.compare(v2, v1, Direction.GT)
    tie = b.binary(Op.AND, b.compare(v2, v1, Direction.EQ), b.compare(i2, i1, Direction.LT))
    take_second = b.binary(Op.OR, greater, tie)
    return b.build(b.tuple([b.select(take_second, v2, v1), b.select(take_second, i2, i1)]))


def _column_major(b: ComputationBuilder, flat: Instruction, dims) -> Instruction:
    """Row-major flat indices -> ONNX storage_order=1 (spatial dims column-major)."""
    spatial = list(dims[2:])
    plane = int(np.prod(spatial, dtype=np.int64))
    within = b.binary(Op.REMAINDER, flat, full_like(b, plane, flat))
    result = b.binary(Op.SUBTRACT, flat, within)
    row_stride, col_stride = plane, 1
    for size in spatial:
        row_stride //= size
        coord = b.binary(Op.DIVIDE, within, full_like(b, row_stride, within))
        coord = b.binary(Op.REMAINDER, coord, full_like(b, size, coord))
        scaled = b.binary(Op.MULTIPLY, coord, full_like(b, col_stride, coord))
        result = b.binary(Op.ADD, result, scaled)
        col_stride *= size
    return result


@onnx_op("AveragePool")
def average_pool(ctx: NodeContext, x: Instruction, whole_kernel: bool = False) -> Instruction:
    """The window means; with count_include_pad, `whole_kernel` divides by the kernel's size
    even where ceil_mode's last window hangs past the padding (onnxruntime's QLinear pool)."""
    b = ctx.b
    geometry = _pool_geometry(ctx, x)
    dtype = x.array_shape.dtype
    zero = b.scalar(0, dtype)
    total = b.reduce_window(x, zero, geometry.window(), scalar_reducer(b.module, Op.ADD, dtype))
    out_spatial = total.array_shape.dims[2:]
    include_pad = bool(ctx.attr("count_include_pad", 0))
    divisor = np.ones((), dtype=np.float64)
    for dim, out in enumerate(out_spatial):
        counts = geometry.window_counts(dim, out, include_pad)
        if include_pad and whole_kernel:
            counts = np.full(out, geometry.kernel[dim])
        divisor = np.multiply.outer(divisor, counts)
    spatial = list(range(2, 2 + len(out_spatial)))
    divisor_instr = b.broadcast(b.constant(divisor, dtype), spatial, total.array_shape.dims)
    return b.binary(Op.DIVIDE, total, divisor_instr)


def _global_pool(ctx: NodeContext, x: Instruction, op: Op) -> Instruction:
    b = ctx.b
    axes = list(range(2, 2 + _spatial_rank(x)))
    out = reduce(b, x, op, axes, keepdims=True)
    if op is Op.ADD:
        count = element_count(b, x, axes)
        out = b.binary(Op.DIVIDE, out, full_like(b, count, out))
    return out


@onnx_op("GlobalAveragePool")
def global_average_pool(ctx: NodeContext, x: Instruction) -> Instruction:
    return _global_pool(ctx, x, Op.ADD)


@onnx_op("GlobalMaxPool")
def global_max_pool(ctx: NodeContext, x: Instruction) -> Instruction:
    return _global_pool(ctx, x, Op.MAXIMUM)
