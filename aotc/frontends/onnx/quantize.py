"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger.

Numerics follow onnx.reference: quantizing rounds half to even, then saturates
to the target's range (float8 targets saturate as Cast does); integer
products accumulate in s32 after subtracting the zero points; requantization
(QLinear*) scales the s32 result in f64, as numpy promotes int32 * float.
Scales and zero points are per tensor (any one-element tensor), per axis (a
vector along `axis`) or per block (`block_size` along `axis`).
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ConvDims, Direction, DType, Instruction, Op, Window
from ...ir.evaluate import evaluate_constant
from .casts import SATURABLE, clamp_to_finite
from .dtypes import to_dtype
from .helpers import normalize_axis, reduce, unidirectional
from .linalg import matmul
from .nn import channel_bias, conv, conv_window
from .registry import NodeContext, onnx_op

# the 8-bit integer types the QLinear ops and the *Integer ops take
INT8_TYPES = (DType.S8, DType.U8)


def expand(ctx: NodeContext, p: Instruction, dims, axis: int | None, block: int = 0):
    """A scale or zero point broadcast to `dims`: one element (per tensor), a vector along
    `axis` (per axis), or, with `block`, `axis` holding ceil(dims[axis] / block) blocks."""
    b = ctx.b
    if p.array_shape.size == 1:
        return b.broadcast(b.reshape(p, []), [], dims)
    if axis is None:
        return unidirectional(b, p, dims)
    axis = normalize_axis(axis, len(dims))
    if not block:
        if p.array_shape.dims != (dims[axis],):
            raise ShapeError(
                f"per-axis parameter of shape {list(p.array_shape.dims)} does not match "
                f"dim {axis} ({dims[axis]}) of the input"
            )
        return b.broadcast(p, [axis], dims)
    blocks = p.array_shape.dims[axis] if p.array_shape.rank == len(dims) else 0
    same_rest = all(p.array_shape.dims[i] == d for i, d in enumerate(dims) if i != axis and blocks)
    if not blocks or not same_rest or not (blocks - 1) * block < dims[axis] <= blocks * block:
        raise ShapeError(
            f"blocked parameter of shape {list(p.array_shape.dims)} does not match input dims "
            f"{list(dims)} with block_size {block} on axis {axis}"
        )
    # repeat every entry `block` times along axis (a new dim after it), then cut the tail
    split = [*p.array_shape.dims[: axis + 1], block, *p.array_shape.dims[axis + 1 :]]
    placed = [i if i <= axis else i + 1 for i in range(p.array_shape.rank)]
    whole = [*dims[:axis], blocks * block, *dims[axis + 1 :]]
    repeated = b.reshape(b.broadcast(p, placed, split), whole)
    return b.slice(repeated, [0] * len(dims), list(dims))


def _promote(x: DType, y: DType) -> DType:
    """The type numpy computes `x / y` in (integers with floats: f64)."""
    if not (x.is_float and y.is_float):
        return DType.F64
    if x is y:
        return x
    wider = [d for d in (x, y) if d.bits > 16]
    if wider:
        return max(wider, key=lambda d: d.bits)
    if x.minifloat is not None or y.minifloat is not None:  # the other one, 16 bits
        return x if x.minifloat is None else y
    return DType.F32  # f16 with bf16


def _quantized_type(ctx: NodeContext, zero_point: Instruction | None) -> DType:
    chosen = ctx.attr("output_dtype", 0)
    given = to_dtype(chosen, "attribute 'output_dtype'") if chosen else None
    if zero_point is None:
        return given or DType.U8
    if given is not None and given is not zero_point.array_shape.dtype:
        raise ModelError(
            f"output_dtype {given.text} differs from the zero point's type "
            f"{zero_point.array_shape.dtype.text}"
        )
    return zero_point.array_shape.dtype


def saturate_int(b, value: Instruction, dtype: DType) -> Instruction:
    """A float `value` already rounded, clamped to `dtype`'s range and converted."""
    low, high = (b.scalar(v, value.array_shape.dtype) for v in dtype.limits)
    return b.convert(b.clamp(low, value, high), dtype)


def round_to_int(b, value: Instruction, zero_point: Instruction | None, target: DType):
    """`value` (x / scale) rounded half to even, plus `zero_point` (already broadcast),
    saturated to the integer type `target`; rounds in value's type (as numpy's rint), adds
    the zero point exactly in f32 (f64 where value is f64)."""
    wide = DType.F64 if value.array_shape.dtype is DType.F64 else DType.F32
    q = b.convert(b.unary(Op.ROUND_NEAREST_EVEN, value), wide)
    if zero_point is not None:
        q = b.binary(Op.ADD, q, b.convert(zero_point, wide))
    return saturate_int(b, q, target)


@onnx_op("QuantizeLinear", since=10)
def quantize_linear(ctx: NodeContext, x: Instruction, scale: Instruction, zero_point=None):
    b = ctx.b
    dims = x.array_shape.dims
    target = _quantized_type(ctx, zero_point)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    precision = ctx.attr("precision", 0)
    if precision:
        compute = to_dtype(precision, "attribute 'precision'")
    else:  # as onnx.reference (numpy) divides: in the wider of the two types
        compute = _promote(x.array_shape.dtype, scale.array_shape.dtype)
    scale = b.convert(expand(ctx, scale, dims, axis, block), compute)
    q = b.binary(Op.DIVIDE, b.convert(x, compute), scale)
    zp = None if zero_point is None else expand(ctx, zero_point, dims, axis, block)
    if target.is_int:
        return round_to_int(b, q, zp, target)
    if target.minifloat is None or target is DType.F8E8M0FNU:
        raise UnsupportedError(f"quantizing to {target.text} is not supported")
    if zp is not None:  # y = x / scale + zero point, rounded once to the target
        q = b.binary(Op.ADD, q, b.convert(zp, compute))
    if target in SATURABLE and ctx.attr("saturate", 1):
        q = clamp_to_finite(ctx, q, target)
    return b.convert(q, target)


@onnx_op("DequantizeLinear", since=10)
def dequantize_linear(ctx: NodeContext, x: Instruction, scale: Instruction, zero_point=None):
    b = ctx.b
    dims = x.array_shape.dims
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    chosen = ctx.attr("output_dtype", 0)
    out = to_dtype(chosen, "attribute 'output_dtype'") if chosen else scale.array_shape.dtype
    # numpy: the input as f32, minus the zero point, times the scale; f64 where either
    # is 32/64-bit wide
    wide = DType.F32
    if scale.array_shape.dtype is DType.F64 or (
        zero_point is not None and x.array_shape.dtype.bits > 16
    ):
        wide = DType.F64
    value = b.convert(b.convert(x, DType.F32), wide)
    if zero_point is not None:
        zp = expand(ctx, zero_point, dims, axis, block)
        value = b.binary(Op.SUBTRACT, value, b.convert(zp, wide))
    value = b.binary(Op.MULTIPLY, value, b.convert(expand(ctx, scale, dims, axis, block), wide))
    return b.convert(value, out)


@onnx_op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx: NodeContext, x: Instruction) -> list[Instruction]:
    """uint8 with scale (max(x, 0) - min(x, 0)) / 255 and the zero point that maps 0 exactly."""
    b = ctx.b
    axes = list(range(x.array_shape.rank))
    zero = b.scalar(0.0, DType.F32)
    high = b.binary(Op.MAXIMUM, reduce(b, x, Op.MAXIMUM, axes, False), zero)
    low = b.binary(Op.MINIMUM, reduce(b, x, Op.MINIMUM, axes, False), zero)
    span = b.binary(Op.SUBTRACT, high, low)
    flat = b.compare(high, low, Direction.EQ)
    span = b.select(flat, b.scalar(1.0, DType.F32), span)
    scale = b.binary(Op.DIVIDE, span, b.scalar(255.0, DType.F32))
    initial = b.binary(Op.SUBTRACT, zero, b.binary(Op.DIVIDE, low, scale))
    zp = b.unary(Op.ROUND_NEAREST_EVEN, b.clamp(zero, initial, b.scalar(255.0, DType.F32)))
    q = b.unary(
        Op.ROUND_NEAREST_EVEN, b.binary(Op.DIVIDE, x, b.broadcast(scale, [], x.array_shape.dims))
    )
    q = b.binary(Op.ADD, q, b.broadcast(zp, [], x.array_shape.dims))
    return [saturate_int(b, q, DType.U8), scale, b.convert(zp, DType.U8)]


def check_int8(op: str, *xs: Instruction) -> None:
    for x in xs:
        if x.array_shape.dtype not in INT8_TYPES:
            raise UnsupportedError(
                f"{op} on {x.array_shape.dtype.text} is not supported (int8/uint8)"
            )


def centered(ctx: NodeContext, x: Instruction, zero_point, axis: int | None) -> Instruction:
    """`x - zero_point` in s16 for 8-bit values (it lies in [-255, 255], and 16-bit
    operands let the backend multiply pairs of them into s32 sums), else in s32; a vector
    zero point lies along `axis`."""
    b = ctx.b
    narrow = x.array_shape.dtype in INT8_TYPES and (
        zero_point is None or zero_point.shape.dtype in INT8_TYPES
    )
    wide = DType.S16 if narrow else DType.S32
    x32 = b.convert(x, wide)
    if zero_point is None:
        return x32
    zp = zero_point
    if zp.shape.size != 1 and zp.shape.rank == 1 and axis is not None:
        if x.array_shape.rank < 2 or zp.array_shape.dims[0] != x.array_shape.dims[axis]:
            axis = None  # not per row/channel: numpy broadcasting
    else:
        axis = None
    zp = expand(ctx, b.convert(zp, wide), x.array_shape.dims, axis)
    return b.binary(Op.SUBTRACT, x32, zp)


def centered_pair(ctx: NodeContext, a, a_zp, a_axis, bm, b_zp, b_axis):
    """Both operands of an integer product centered, in one type (s16 when both fit)."""
    x, y = centered(ctx, a, a_zp, a_axis), centered(ctx, bm, b_zp, b_axis)
    if x.array_shape.dtype is not y.array_shape.dtype:
        x, y = (ctx.b.convert(v, DType.S32) for v in (x, y))
    return x, y


def integer_matmul(ctx: NodeContext, a, a_zp, bm, b_zp) -> Instruction:
    """The s32 product of the centered operands; a's vector zero point is per row
    (dim -2), b's per column (dim -1).

    8-bit matrices are multiplied as they are, the zero points applied after (`_raw_product`):
    the GEMM then reads the 8-bit values in place, as 8-bit dot products (vpdpbusd, usdot,
    sdot) where the target has them, rather than a centered 16-bit copy."""
    raw = _raw_product(ctx, a, a_zp, bm, b_zp)
    if raw is not None:
        return raw
    rows, cols = centered_pair(ctx, a, a_zp, a.shape.rank - 2, bm, b_zp, bm.shape.rank - 1)
    return matmul(ctx, rows, cols, DType.S32)


def _raw_product(ctx: NodeContext, a, a_zp, bm, b_zp) -> Instruction | None:
    """sum_k (a - za)(b - zb) as sum_k a b - zb sum_k a - za sum_k b + K za zb, exactly (in
    wrapping s32, as the product itself), for 8-bit matrices of rank >= 2 and scalar or
    vector zero points; None where that does not apply.  A constant b's column sums are
    computed here; zero points that are constant zeros drop their terms.  One operand's
    sign is flipped (`sign_flipped`) where the operand types are not those the target's
    byte dots take: one u8 and one s8, or ("same") one type, a u8 side made s8."""
    b = ctx.b
    zero_points = [zp for zp in (a_zp, b_zp) if zp is not None]
    if a.shape.rank < 2 or bm.shape.rank < 2:
        return None
    if a.shape.dtype not in INT8_TYPES or bm.shape.dtype not in INT8_TYPES:
        return None
    if any(zp.shape.dtype not in INT8_TYPES or zp.shape.rank > 1 for zp in zero_points):
        return None
    m, k, n = a.shape.dims[-2], a.shape.dims[-1], bm.shape.dims[-1]
    if a_zp is not None and a_zp.shape.size not in (1, m):
        return None
    if b_zp is not None and b_zp.shape.size not in (1, n):
        return None
    types = (a.shape.dtype, bm.shape.dtype)
    if ctx.byte_dot_signs == "same":  # the u8 side to s8
        if types == (DType.U8, DType.S8):
            a, a_zp = sign_flipped(b, a, a_zp, DType.S8)
        elif types == (DType.S8, DType.U8):
            bm, b_zp = sign_flipped(b, bm, b_zp, DType.S8)
    elif types == (DType.S8, DType.S8):
        a, a_zp = sign_flipped(b, a, a_zp, DType.U8)
    elif types == (DType.U8, DType.U8):
        bm, b_zp = sign_flipped(b, bm, b_zp, DType.S8)
    product = matmul(ctx, b.convert(a, DType.S16), b.convert(bm, DType.S16), DType.S32)
    dims = product.array_shape.dims

    def spread(x: Instruction, along: int) -> Instruction:
        """An s32 scalar or vector (along dim `along` of the product: -2 rows, -1 columns)
        broadcast to the product."""
        x = b.convert(b.reshape(x, []) if x.array_shape.size == 1 else x, DType.S32)
        if x.array_shape.rank == 0:
            return b.broadcast(x, [], dims)
        if along == -2:
            x = b.reshape(x, [*x.array_shape.dims, 1])
        return unidirectional(b, x, dims)

    za = None if a_zp is None or _is_zero(a_zp) else a_zp
    zb = None if b_zp is None or _is_zero(b_zp) else b_zp
    if zb is not None:  # - zb[n] * sum_k a[m, k], a's row sums per batch element
        sums = _s32_sums(b, a, [a.array_shape.rank - 1], keepdims=True)
        term = b.binary(Op.MULTIPLY, spread(zb, -1), unidirectional(b, sums, dims))
        product = b.binary(Op.SUBTRACT, product, term)
    if za is not None:  # - za[m] * sum_k b[k, n]
        sums = _s32_sums(b, bm, [bm.array_shape.rank - 2], keepdims=True)
        term = b.binary(Op.MULTIPLY, spread(za, -2), unidirectional(b, sums, dims))
        product = b.binary(Op.SUBTRACT, product, term)
    if za is not None and zb is not None:  # + K za[m] zb[n]
        both = b.binary(Op.MULTIPLY, spread(za, -2), spread(zb, -1))
        depth = a.array_shape.rank - 1  # a bounded K counts its run-time extent
        size = b.get_dimension_size(a, depth) if a.array_shape.is_dynamic(depth) else None
        count = b.broadcast(size or b.scalar(k, DType.S32), [], dims)
        product = b.binary(Op.ADD, product, b.binary(Op.MULTIPLY, both, count))
    return product


def sign_flipped(b, x: Instruction, zero_point, dtype: DType):
    """(x, its zero point) moved to the other 8-bit type `dtype` with the sign bit
    flipped (s8 -> u8: x + 128; u8 -> s8: x - 128), so that an integer product has the
    operand types the target's byte dot products take (`NodeContext.byte_dot_signs`):
    one u8 and one s8 (vpdpbusd, usdot), as MLAS does, or two of one type (sdot, udot);
    the centered values x - zero point are unchanged (a missing zero point is 0
    flipped)."""
    if zero_point is None:
        zero_point = b.scalar(0, x.array_shape.dtype)

    def flip(v: Instruction) -> Instruction:
        unsigned = v if v.array_shape.dtype is DType.U8 else b.bitcast_convert(v, DType.U8)
        bit = b.broadcast(b.scalar(0x80, DType.U8), [], unsigned.array_shape.dims)
        flipped = b.binary(Op.XOR, unsigned, bit)
        return flipped if dtype is DType.U8 else b.bitcast_convert(flipped, dtype)

    return flip(x), flip(zero_point)


def _s32_sums(b, x: Instruction, axes: list[int], keepdims: bool) -> Instruction:
    """x's s32 sums over `axes`: computed here for a constant (weights), else reduced."""
    known = evaluate_constant(x)
    if known is None:
        return reduce(b, b.convert(x, DType.S32), Op.ADD, axes, keepdims)
    sums = np.asarray(known, np.int64).sum(axis=tuple(axes), keepdims=keepdims)
    return b.constant(sums.astype(np.int32))


def _is_zero(zero_point: Instruction) -> bool:
    """Whether a zero point is a constant of zeros."""
    known = evaluate_constant(zero_point)
    return known is not None and not np.any(np.asarray(known))


@onnx_op("MatMulInteger", since=10)
def matmul_integer(ctx: NodeContext, a: Instruction, bm: Instruction, a_zp=None, b_zp=None):
    check_int8("MatMulInteger", a, bm)
    return integer_matmul(ctx, a, a_zp, bm, b_zp)


@onnx_op("ConvInteger", since=10)
def conv_integer(ctx: NodeContext, x: Instruction, w: Instruction, x_zp=None, w_zp=None):
    check_int8("ConvInteger", x, w)
    return integer_conv(ctx, x, x_zp, w, w_zp)


def integer_conv(ctx: NodeContext, x, x_zp, w, w_zp, bias=None) -> Instruction:
    """The s32 convolution of the centered operands (plus an s32 bias).

    8-bit operands whose weights have no zero point are convolved as they are
    (`_raw_conv`), the input's zero point applied after, as for matrix products."""
    raw = _raw_conv(ctx, x, x_zp, w, w_zp)
    if raw is None:
        return conv(ctx, *centered_pair(ctx, x, x_zp, None, w, w_zp, 0), bias, DType.S32)
    return channel_bias(ctx.b, raw, bias)


def _raw_conv(ctx: NodeContext, x, x_zp, w, w_zp) -> Instruction | None:
    """sum (x - zx) w over each window as sum x w - zx sum w, exactly: the input padded
    with zx (a padded tap is then zero once centered) and convolved without padding,
    then zx times each output channel's weight sum subtracted.  For 8-bit operands, a
    scalar input zero point and weights without one (as onnxruntime quantizes them);
    None otherwise.  The input's sign is flipped (`sign_flipped`) where the target's byte
    dots take one u8 and one s8 and both are s8, or take one type and they differ."""
    b = ctx.b
    if x.shape.dtype not in INT8_TYPES or w.shape.dtype not in INT8_TYPES:
        return None
    if x_zp is not None and (x_zp.shape.dtype not in INT8_TYPES or x_zp.shape.size != 1):
        return None
    if w_zp is not None and not _is_zero(w_zp):
        return None
    if ctx.byte_dot_signs == "same":  # the input to the weights' type (no zero point there)
        if x.shape.dtype is not w.shape.dtype:
            x, x_zp = sign_flipped(b, x, x_zp, w.shape.dtype)
    elif (x.shape.dtype, w.shape.dtype) == (DType.S8, DType.S8):
        x, x_zp = sign_flipped(b, x, x_zp, DType.U8)
    window = conv_window(ctx, x, w)
    zx = None if x_zp is None or _is_zero(x_zp) else b.reshape(x_zp, [])
    if zx is not None and any((*window.pad_low, *window.pad_high)):
        lead = [0] * (x.shape.rank - len(window.size))
        x = b.pad(x, zx, [*lead, *window.pad_low], [*lead, *window.pad_high])
        zeros = [0] * len(window.size)
        window = Window.make(window.size, window.stride, zeros, zeros, None, window.rhs_dilation)
    dims = ConvDims.nchw(len(window.size))
    groups = ctx.attr("group")
    image, kernel = b.convert(x, DType.S16), b.convert(w, DType.S16)
    out = b.convolution(image, kernel, window, dims, groups=groups, dtype=DType.S32)
    if zx is None:
        return out
    sums = _s32_sums(b, w, list(range(1, w.array_shape.rank)), keepdims=False)
    dims_out = out.array_shape.dims
    term = b.binary(
        Op.MULTIPLY,
        b.broadcast(b.convert(zx, DType.S32), [], dims_out),
        b.broadcast(sums, [1], dims_out),
    )
    return b.binary(Op.SUBTRACT, out, term)


def _requantize(ctx: NodeContext, acc: Instruction, multiplier: Instruction, y_zp, out: DType):
    """s32 `acc` * multiplier + y's zero point, rounded half to even, saturated to `out`."""
    b = ctx.b
    value = b.binary(Op.MULTIPLY, b.convert(acc, DType.F64), b.convert(multiplier, DType.F64))
    if y_zp is not None:
        zp = b.broadcast(b.reshape(y_zp, []), [], acc.array_shape.dims)
        value = b.binary(Op.ADD, value, b.convert(zp, DType.F64))
    return saturate_int(b, b.unary(Op.ROUND_NEAREST_EVEN, value), out)


def _scale_ratio(ctx: NodeContext, x_scale, w_scale, y_scale, dims, w_axis: int | None):
    """x_scale * w_scale / y_scale in the scales' type, broadcast to the result `dims`
    (a vector w_scale along `w_axis`)."""
    b = ctx.b
    for s in (x_scale, y_scale):
        if s.shape.size != 1:
            raise UnsupportedError("only per-tensor input and output scales are supported")
    x_scale, y_scale = (b.reshape(s, []) for s in (x_scale, y_scale))
    w = b.reshape(w_scale, []) if w_scale.shape.size == 1 else w_scale
    product = b.binary(Op.MULTIPLY, b.broadcast(x_scale, [], w.shape.dims), w)
    ratio = b.binary(Op.DIVIDE, product, b.broadcast(y_scale, [], w.shape.dims))
    if ratio.array_shape.rank == 0:
        return b.broadcast(ratio, [], dims)
    if w_axis is None:
        return unidirectional(b, ratio, dims)
    return b.broadcast(ratio, [w_axis], dims)


@onnx_op("QLinearMatMul", since=10)
def qlinear_matmul(ctx: NodeContext, a, a_scale, a_zp, bm, b_scale, b_zp, y_scale, y_zp=None):
    check_int8("QLinearMatMul", a, bm, *([] if y_zp is None else [y_zp]))
    out = a.shape.dtype if y_zp is None else y_zp.shape.dtype
    acc = integer_matmul(ctx, a, a_zp, bm, b_zp)
    if a_scale.shape.size != 1:
        raise UnsupportedError("only a per-tensor a_scale is supported")
    dims = acc.array_shape.dims
    b_axis = len(dims) - 1 if b_scale.shape.rank == 1 and b_scale.shape.size != 1 else None
    ratio = _scale_ratio(ctx, a_scale, b_scale, y_scale, dims, b_axis)
    return _requantize(ctx, acc, ratio, y_zp, out)


@onnx_op("QLinearConv", since=10)
def qlinear_conv(
    ctx: NodeContext, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp=None, bias=None
):
    check_int8("QLinearConv", x, w)
    out = x.shape.dtype if y_zp is None else y_zp.shape.dtype
    acc = integer_conv(ctx, x, x_zp, w, w_zp, bias)
    # a vector w_scale is per output channel (dim 1 of the NCHW result)
    ratio = _scale_ratio(ctx, x_scale, w_scale, y_scale, acc.array_shape.dims, 1)
    return _requantize(ctx, acc, ratio, y_zp, out)
