"""onnxruntime's quantization ops (domain com.microsoft) outside the QLinear elementwise
family: QuantizeLinear and DequantizeLinear (as ONNX's, lowered by quantize.py), QGemm,
DynamicQuantizeMatMul, MatMulIntegerToFloat, MatMulInteger16."""

from __future__ import annotations

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import DType, Instruction, Op
from .helpers import Formula, unidirectional
from .linalg import matmul
from .quantize import (
    check_int8,
    dequantize_linear,
    dynamic_quantize_linear,
    integer_matmul,
    quantize_linear,
    round_to_int,
)
from .registry import MICROSOFT, NodeContext, onnx_op

# the quantized types onnxruntime's contrib QuantizeLinear/DequantizeLinear take
CONTRIB_QUANTIZED = (DType.S8, DType.U8, DType.S16, DType.U16, DType.S4, DType.U4)


def _check_quantized(dtype: DType, op: str, also: tuple[DType, ...] = ()) -> None:
    if dtype not in CONTRIB_QUANTIZED + also:
        raise UnsupportedError(
            f"com.microsoft {op} on {dtype.text} is not supported "
            "(int8/uint8/int16/uint16/int4/uint4)"
        )


@onnx_op("QuantizeLinear", domain=MICROSOFT, since=1, arity=((2, 3), (1, 1)))
def ms_quantize_linear(ctx: NodeContext, x: Instruction, scale: Instruction, zero_point=None):
    """ONNX's QuantizeLinear (axis defaults to 1); uint8 without a zero point."""
    if zero_point is not None:
        _check_quantized(zero_point.shape.dtype, "QuantizeLinear")
    return quantize_linear(ctx, x, scale, zero_point)


@onnx_op("DequantizeLinear", domain=MICROSOFT, since=1, arity=((2, 3), (1, 1)))
def ms_dequantize_linear(ctx: NodeContext, x: Instruction, scale: Instruction, zero_point=None):
    """ONNX's DequantizeLinear (axis defaults to 1); int32 input too."""
    _check_quantized(x.array_shape.dtype, "DequantizeLinear", also=(DType.S32,))
    return dequantize_linear(ctx, x, scale, zero_point)


def _f32(ctx: NodeContext, x: Instruction) -> Instruction:
    return ctx.b.convert(x, DType.F32)


def _spread(ctx: NodeContext, scalar: Instruction, like: Instruction) -> Instruction:
    """A one-element f32 parameter broadcast to `like`'s shape."""
    return ctx.b.broadcast(_f32(ctx, ctx.b.reshape(scalar, [])), [], like.array_shape.dims)


def _scaled(ctx: NodeContext, acc: Instruction, scale: Instruction) -> Instruction:
    """The s32 accumulator times `scale` (numpy-broadcast to it: per tensor or per column),
    in f32 as onnxruntime's kernels compute."""
    b = ctx.b
    scale = unidirectional(b, _f32(ctx, scale), acc.array_shape.dims)
    return b.binary(Op.MULTIPLY, _f32(ctx, acc), scale)


def integer_matmul_to_float(ctx: NodeContext, a, a_scale, a_zp, bm, b_scale, b_zp, bias):
    """(a - a_zp) @ (b - b_zp) in s32, times a_scale * b_scale (b's per column), plus bias."""
    b = ctx.b
    check_int8("integer MatMul", a, bm)
    if a_scale.shape.size != 1:
        raise UnsupportedError("only a per-tensor a_scale is supported")
    acc = integer_matmul(ctx, a, a_zp, bm, b_zp)
    scale = b.binary(Op.MULTIPLY, _spread(ctx, a_scale, b_scale), _f32(ctx, b_scale))
    y = _scaled(ctx, acc, scale)
    if bias is not None:
        y = b.binary(Op.ADD, y, unidirectional(b, _f32(ctx, bias), y.array_shape.dims))
    return b.convert(y, b_scale.shape.dtype)


@onnx_op("MatMulIntegerToFloat", domain=MICROSOFT, since=1, arity=((4, 7), (1, 1)))
def matmul_integer_to_float(
    ctx: NodeContext, a, bm, a_scale, b_scale, a_zp=None, b_zp=None, bias=None
) -> Instruction:
    return integer_matmul_to_float(ctx, a, a_scale, a_zp, bm, b_scale, b_zp, bias)


@onnx_op("DynamicQuantizeMatMul", domain=MICROSOFT, since=1, arity=((3, 5), (1, 1)))
def dynamic_quantize_matmul(ctx: NodeContext, a, bm, b_scale, b_zp=None, bias=None):
    """A quantized to uint8 as DynamicQuantizeLinear does, then MatMulIntegerToFloat."""
    q, a_scale, a_zp = dynamic_quantize_linear(ctx, a)
    return integer_matmul_to_float(ctx, q, a_scale, a_zp, bm, b_scale, b_zp, bias)


@onnx_op("MatMulInteger16", domain=MICROSOFT, since=1, arity=((2, 2), (1, 1)))
def matmul_integer16(ctx: NodeContext, a: Instruction, bm: Instruction) -> Instruction:
    """int16 x int16 -> int32 (no zero points)."""
    for x in (a, bm):
        if x.array_shape.dtype is not DType.S16:
            raise UnsupportedError(
                f"MatMulInteger16 on {x.array_shape.dtype.text} is not supported "
                "(int16, as onnxruntime's kernel)"
            )
    return matmul(ctx, a, bm, DType.S32)


@onnx_op("QGemm", domain=MICROSOFT, since=1, arity=((6, 9), (1, 1)))
def qgemm(
    ctx: NodeContext, a, a_scale, a_zp, bm, b_scale, b_zp, c=None, y_scale=None, y_zp=None
) -> Instruction:
    """alpha (A - a_zp) a_scale (B - b_zp) b_scale + C a_scale b_scale alpha (C: int32);
    requantized to y_scale, y_zero_point where given, else float."""
    b = ctx.b
    check_int8("QGemm", a, bm)
    if a.shape.rank != 2 or bm.shape.rank != 2:
        raise ShapeError("QGemm operands A and B must be 2-D")
    if ctx.attr("transA", 0):
        a = b.transpose(a, [1, 0])
    if ctx.attr("transB", 0):
        bm = b.transpose(bm, [1, 0])
    if a_zp.shape.size != 1 or a_scale.shape.size != 1:
        raise UnsupportedError("only a per-tensor a_scale and a_zero_point are supported")
    acc = integer_matmul(ctx, a, a_zp, bm, b_zp)  # a vector b_zp is per column
    if c is not None:
        acc = b.binary(
            Op.ADD, acc, unidirectional(b, b.convert(c, DType.S32), acc.array_shape.dims)
        )
    # a_scale * b_scale * alpha (per column where b_scale is), then / y_scale
    f = Formula(b, _f32(ctx, b_scale))
    scale = f.mul(f.mul(_spread(ctx, a_scale, f.like), f.like), ctx.attr("alpha", 1.0))
    if y_scale is None:
        if y_zp is not None:
            raise ModelError("y_zero_point is given without y_scale")
        return _scaled(ctx, acc, scale)
    if y_zp is None:
        raise ModelError("y_scale is given without y_zero_point (which sets the output type)")
    check_int8("QGemm", y_zp)
    ratio = f.div(scale, _spread(ctx, y_scale, f.like))
    zp = b.broadcast(b.reshape(y_zp, []), [], acc.array_shape.dims)
    return round_to_int(b, _scaled(ctx, acc, ratio), zp, y_zp.shape.dtype)
