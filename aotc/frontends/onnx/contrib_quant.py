"""onnxruntime's quantization ops (domain com.microsoft) outside the QLinear elementwise
family: QuantizeLinear and DequantizeLinear (as ONNX's, lowered by quantize.py), QGemm,
DynamicQuantizeMatMul, MatMulIntegerToFloat, MatMulInteger16."""

from __future__ import annotations

from ...errors import UnsupportedError
from ...ir import DType, Instruction
from .quantize import dequantize_linear, quantize_linear
from .registry import MICROSOFT, NodeContext, onnx_op

# the quantized types onnxruntime's contrib QuantizeLinear/DequantizeLinear take
CONTRIB_QUANTIZED = (DType.S8, DType.U8, DType.S16, DType.U16, DType.S4, DType.U4)


def _check_quantized(dtype: DType, op: str, also: tuple[DType, ...] = ()) -> None:
    if dtype not in CONTRIB_QUANTIZED + also:
        raise UnsupportedError(f"com.microsoft {op} on {dtype.text} is not supported "
                               "(int8/uint8/int16/uint16/int4/uint4)")  # fmt: skip


@onnx_op("QuantizeLinear", domain=MICROSOFT, since=1, arity=((2, 3), (1, 1)))
def ms_quantize_linear(ctx: NodeContext, x: Instruction, scale: Instruction, zero_point=None):
    """ONNX's QuantizeLinear (axis defaults to 1); uint8 without a zero point."""
    if zero_point is not None:
        _check_quantized(zero_point.shape.dtype, "QuantizeLinear")
    return quantize_linear(ctx, x, scale, zero_point)


@onnx_op("DequantizeLinear", domain=MICROSOFT, since=1, arity=((2, 3), (1, 1)))
def ms_dequantize_linear(ctx: NodeContext, x: Instruction, scale: Instruction, zero_point=None):
    """ONNX's DequantizeLinear (axis defaults to 1); int32 input too."""
    _check_quantized(x.shape.dtype, "DequantizeLinear", also=(DType.S32,))
    return dequantize_linear(ctx, x, scale, zero_point)
