"""Element type conversions: Cast and CastLike (ONNX's rules on top of HLO convert,
including float8 saturation and float8e8m0's rounding modes) and BitCast."""

from __future__ import annotations

from ...errors import ModelError
from ...ir import Direction, DType, Instruction, Op
from ...ir.types import SUB_BYTE_INTS
from .dtypes import to_dtype
from .helpers import full_like
from .registry import NodeContext, onnx_op

# the float8 types Cast's `saturate` applies to (f4e2m1fn saturates by itself)
SATURABLE = frozenset({DType.F8E4M3FN, DType.F8E4M3FNUZ, DType.F8E5M2, DType.F8E5M2FNUZ})
ROUND_MODES = ("up", "down", "nearest")


def cast_to(ctx: NodeContext, x: Instruction, dtype: DType) -> Instruction:
    """`x` converted to `dtype` as ONNX's Cast does, with the node's saturate and
    round_mode attributes (defaults: saturate, round up)."""
    b = ctx.b
    if x.array_shape.dtype is dtype:
        return x
    saturate = bool(ctx.attr("saturate", 1))
    if dtype is DType.F8E8M0FNU:
        return to_e8m0(ctx, x, saturate, ctx.choice("round_mode", ROUND_MODES))
    if dtype in SATURABLE and saturate:
        x = clamp_to_finite(ctx, x, dtype)
    elif dtype in SUB_BYTE_INTS and x.array_shape.dtype.is_float:
        # out of range, ONNX leaves float -> int undefined; onnx.reference (ml_dtypes)
        # keeps the low bits of the integer, as going through s32 does
        x = b.convert(x, DType.S32)
    return b.convert(x, dtype)


def clamp_to_finite(ctx: NodeContext, x: Instruction, dtype: DType) -> Instruction:
    """`x` clamped to the finite range of the minifloat `dtype` (NaN stays NaN)."""
    b = ctx.b
    if not x.array_shape.dtype.is_float:
        x = b.convert(x, DType.F32)  # integers beyond f32's exact range clamp anyway
    largest = dtype.minifloat.largest
    low, high = (b.scalar(v, x.array_shape.dtype) for v in (-largest, largest))
    return b.clamp(low, x, high)


def to_e8m0(ctx: NodeContext, x: Instruction, saturate: bool, round_mode: str) -> Instruction:
    """float8e8m0 (a power of two) as onnx.numpy_helper.to_float8e8m0: the f32 exponent,
    rounded by the mantissa bits; NaN and inf -> NaN (0xFF); the sign is ignored."""
    b = ctx.b
    bits = b.bitcast_convert(b.convert(x, DType.F32), DType.U32)

    def k(value: int) -> Instruction:
        return full_like(b, value, bits)

    def has(mask: int) -> Instruction:
        return b.compare(b.binary(Op.AND, bits, k(mask)), k(0), Direction.NE)

    exponent = b.binary(Op.AND, b.binary(Op.SHIFT_RIGHT_LOGICAL, bits, k(23)), k(0xFF))
    if round_mode == "up":  # any fraction rounds up
        round_up = has(0x7FFFFF)
    elif round_mode == "nearest":  # a half rounds up if more bits follow or exponent > 0
        odd = b.compare(exponent, k(0), Direction.GT)
        round_up = b.binary(Op.AND, has(0x400000), b.binary(Op.OR, has(0x3FFFFF), odd))
    else:
        round_up = None
    code = exponent
    if round_up is not None:
        if saturate:  # 0xFE + 1 would be NaN
            round_up = b.binary(Op.AND, round_up, b.compare(exponent, k(0xFE), Direction.NE))
        code = b.binary(Op.ADD, exponent, b.convert(round_up, DType.U32))
    special = b.compare(exponent, k(0xFF), Direction.EQ)
    code = b.select(special, k(0xFF), code)
    return b.bitcast_convert(b.convert(code, DType.U8), DType.F8E8M0FNU)


@onnx_op("Cast")
def cast(ctx: NodeContext, x: Instruction) -> Instruction:
    return cast_to(ctx, x, to_dtype(ctx.required_attr("to"), "attribute 'to'"))


@onnx_op("CastLike", since=15)
def cast_like(ctx: NodeContext, x: Instruction, like: Instruction) -> Instruction:
    return cast_to(ctx, x, like.array_shape.dtype)


@onnx_op("BitCast", since=26)
def bit_cast(ctx: NodeContext, x: Instruction) -> Instruction:
    dtype = to_dtype(ctx.required_attr("to"), "attribute 'to'")
    src = x.array_shape.dtype
    # ONNX's bool is a byte holding 0 or 1; reinterpreted, it is that number
    widths = [8 if d is DType.PRED else d.bits for d in (src, dtype)]
    if widths[0] != widths[1]:
        raise ModelError(f"BitCast from {src.text} to {dtype.text} changes the element width")
    if DType.PRED in (src, dtype):
        return ctx.b.convert(x, dtype)
    return ctx.b.bitcast_convert(x, dtype)
