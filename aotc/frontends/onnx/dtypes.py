"""ONNX element types and tensors as IR dtypes and numpy arrays."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ...errors import ModelError, UnsupportedError
from ...ir import ComputationBuilder, DType, Instruction
from .tensor_arrays import TensorArrays

ONNX_DTYPES: dict[int, DType] = {
    TensorProto.FLOAT: DType.F32,
    TensorProto.DOUBLE: DType.F64,
    TensorProto.FLOAT16: DType.F16,
    TensorProto.BFLOAT16: DType.BF16,
    TensorProto.INT8: DType.S8,
    TensorProto.INT16: DType.S16,
    TensorProto.INT32: DType.S32,
    TensorProto.INT64: DType.S64,
    TensorProto.UINT8: DType.U8,
    TensorProto.UINT16: DType.U16,
    TensorProto.UINT32: DType.U32,
    TensorProto.UINT64: DType.U64,
    TensorProto.BOOL: DType.PRED,
    TensorProto.FLOAT8E4M3FN: DType.F8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ: DType.F8E4M3FNUZ,
    TensorProto.FLOAT8E5M2: DType.F8E5M2,
    TensorProto.FLOAT8E5M2FNUZ: DType.F8E5M2FNUZ,
    TensorProto.FLOAT8E8M0: DType.F8E8M0FNU,
    TensorProto.FLOAT4E2M1: DType.F4E2M1FN,
    TensorProto.INT4: DType.S4,
    TensorProto.UINT4: DType.U4,
    TensorProto.INT2: DType.S2,
    TensorProto.UINT2: DType.U2,
}


def onnx_type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"type {elem_type}"


def to_dtype(elem_type: int, what: str) -> DType:
    """The IR dtype of an ONNX element type; `what` names the value for the error."""
    if elem_type not in ONNX_DTYPES:
        name = onnx_type_name(elem_type)
        raise UnsupportedError(f"{what} has element type {name}, which aotc does not support")
    return ONNX_DTYPES[elem_type]


def tensor_to_array(
    tensor: onnx.TensorProto, what: str, arrays: TensorArrays | None = None
) -> tuple[np.ndarray, DType]:
    """A TensorProto's values as the evaluator's array for its dtype: the array read from
    a file where `arrays` holds one (read-only, no copy), else made from the tensor's own
    data (at most one copy)."""
    dtype = to_dtype(tensor.data_type, what)
    array = arrays.get(tensor) if arrays is not None else None
    if array is not None:
        return array, dtype
    if tensor.data_location == TensorProto.EXTERNAL:
        # load_model reads every external tensor (external_data.py); onnx must not follow
        # the path of one it missed
        raise ModelError(f"{what}: its external data was not read")
    try:
        array = numpy_helper.to_array(tensor)
    except (ValueError, onnx.checker.ValidationError) as e:
        raise ModelError(f"{what}: cannot read its data ({e})") from e
    # bf16, float8/float4 and int4/int2 arrive (unpacked) as ml_dtypes arrays; the IR
    # holds their values in float32 / int8 / uint8 arrays (raw data of other types is a
    # view of the bytes numpy_helper took out of the tensor: no copy of it)
    return np.asarray(array).astype(dtype.numpy, copy=False), dtype


def tensor_constant(
    b: ComputationBuilder,
    tensor: onnx.TensorProto,
    what: str,
    arrays: TensorArrays | None,
    name: str | None = None,
) -> Instruction:
    """The tensor's values as a constant; where they are an array read from a file, the
    constant's literal is kept in its place (`TensorArrays.keep`), so that one copy of
    them stays alive."""
    array, dtype = tensor_to_array(tensor, what, arrays)
    constant = b.constant(array, dtype, name=name)
    if arrays is not None and constant.literal is not None:
        arrays.keep(tensor, constant.literal)
    return constant
