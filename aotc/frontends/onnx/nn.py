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

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ConvDims, Instruction, Op, Window, scalar_reducer
from .helpers import element_count, full_like, lowest, reduce
from .registry import NodeContext, onnx_op

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _per_dim(ctx: NodeContext, name: str, n: int, default: int) -> list[int]:
    values = ctx.attr(name) or [default] * n
    if len(values) != n:
        raise ModelError(f"attribute {name} has {len(values)} values, expected {n}")
    return [int(v) for v in values]


def _pads(ctx: NodeContext, in_dims, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """Low and high padding per spatial dim, from `pads` or `auto_pad`."""
    n = len(in_dims)
    auto_pad = ctx.choice("auto_pad", AUTO_PADS)
    if auto_pad == "NOTSET":
        pads = _per_dim(ctx, "pads", 2 * n, 0)
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
    if x.shape.rank < 3:
        raise ShapeError(f"input must be N x C x spatial dims, got {list(x.shape.dims)}")
    return x.shape.rank - 2


@onnx_op("Conv")
def conv(ctx: NodeContext, x: Instruction, w: Instruction, bias=None) -> Instruction:
    b = ctx.b
    n = _spatial_rank(x)
    kernel = list(w.shape.dims[2:])
    if ctx.attr("kernel_shape") and list(ctx.attr("kernel_shape")) != kernel:
        raise ModelError(f"kernel_shape {ctx.attr('kernel_shape')} != weight dims {kernel}")
    strides = _per_dim(ctx, "strides", n, 1)
    dilations = _per_dim(ctx, "dilations", n, 1)
    low, high = _pads(ctx, x.shape.dims[2:], kernel, strides, dilations)
    window = Window.make(kernel, strides, low, high, None, dilations)
    out = b.convolution(x, w, window, ConvDims.nchw(n), groups=ctx.attr("group"))
    if bias is not None:
        out = b.binary(Op.ADD, out, b.broadcast(bias, [1], out.shape.dims))
    return out


@onnx_op("ConvTranspose")
def conv_transpose(ctx: NodeContext, x: Instruction, w: Instruction, bias=None) -> Instruction:
    """The gradient of Conv as a convolution: the input dilated by the strides, the
    kernel mirrored with its feature dims swapped, padded by (k - 1) * d - pads."""
    b = ctx.b
    n = _spatial_rank(x)
    groups = ctx.attr("group")
    c_in, c_out_per_group, *kernel = w.shape.dims
    strides = _per_dim(ctx, "strides", n, 1)
    dilations = _per_dim(ctx, "dilations", n, 1)
    out_padding = _per_dim(ctx, "output_padding", n, 0)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    in_dims = x.shape.dims[2:]
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
    out = b.convolution(x, kernel_io, window, dims, groups=groups)
    if bias is not None:
        out = b.binary(Op.ADD, out, b.broadcast(bias, [1], out.shape.dims))
    return out


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
        pads = _per_dim(ctx, "pads", 2 * n, 0)
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
    in_dims = list(x.shape.dims[2:])
    ctx.required_attr("kernel_shape")
    kernel = _per_dim(ctx, "kernel_shape", n, 1)
    strides = _per_dim(ctx, "strides", n, 1)
    dilations = _per_dim(ctx, "dilations", n, 1)
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
def max_pool(ctx: NodeContext, x: Instruction) -> Instruction:
    if ctx.output_used(1):
        raise UnsupportedError("the Indices output is not supported")
    if ctx.attr("storage_order", 0) not in (0, 1):
        raise ModelError("storage_order must be 0 or 1")
    b = ctx.b
    geometry = _pool_geometry(ctx, x)
    dtype = x.shape.dtype
    init = b.scalar(lowest(dtype), dtype)
    return b.reduce_window(x, init, geometry.window(), scalar_reducer(b.module, Op.MAXIMUM, dtype))


@onnx_op("AveragePool")
def average_pool(ctx: NodeContext, x: Instruction) -> Instruction:
    b = ctx.b
    geometry = _pool_geometry(ctx, x)
    dtype = x.shape.dtype
    zero = b.scalar(0, dtype)
    total = b.reduce_window(x, zero, geometry.window(), scalar_reducer(b.module, Op.ADD, dtype))
    out_spatial = total.shape.dims[2:]
    include_pad = bool(ctx.attr("count_include_pad", 0))
    divisor = np.ones((), dtype=np.float64)
    for dim, out in enumerate(out_spatial):
        counts = geometry.window_counts(dim, out, include_pad)
        divisor = np.multiply.outer(divisor, counts)
    spatial = list(range(2, 2 + len(out_spatial)))
    divisor_instr = b.broadcast(b.constant(divisor, dtype), spatial, total.shape.dims)
    return b.binary(Op.DIVIDE, total, divisor_instr)


def _global_pool(ctx: NodeContext, x: Instruction, op: Op) -> Instruction:
    b = ctx.b
    axes = list(range(2, 2 + _spatial_rank(x)))
    out = reduce(b, x, op, axes, keepdims=True)
    if op is Op.ADD:
        count = element_count(x.shape.dims, axes)
        out = b.binary(Op.DIVIDE, out, full_like(b, count, out))
    return out


@onnx_op("GlobalAveragePool")
def global_average_pool(ctx: NodeContext, x: Instruction) -> Instruction:
    return _global_pool(ctx, x, Op.ADD)


@onnx_op("GlobalMaxPool")
def global_max_pool(ctx: NodeContext, x: Instruction) -> Instruction:
    return _global_pool(ctx, x, Op.MAXIMUM)
