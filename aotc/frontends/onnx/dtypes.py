"""ONNX element types and tensors as IR dtypes and numpy arrays."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import uses_external_data

from ...errors import ModelError, UnsupportedError
from ...ir import DType

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


def tensor_to_array(tensor: onnx.TensorProto, what: str) -> tuple[np.ndarray, DType]:
    """A TensorProto's values as the evaluator's array for its dtype."""
    dtype = to_dtype(tensor.data_type, what)
    if uses_external_data(tensor):  # an in-memory model's: relative to the working folder
        check_external_data(tensor, ".", what)
    try:
        array = numpy_helper.to_array(tensor)
    except (OSError, ValueError, onnx.checker.ValidationError) as e:  # missing external data
        raise ModelError(f"{what}: cannot read its data ({e})") from e
    # bf16, float8/float4 and int4/int2 arrive (unpacked) as ml_dtypes arrays; the IR
    # holds their values in float32 / int8 / uint8 arrays
    return np.asarray(array).astype(dtype.numpy), dtype


def check_external_data(tensor: onnx.TensorProto, folder: str, what: str) -> None:
    """Refuse, before anything is read, external data outside `folder` (the model's: a
    '..', an absolute path or a symlink leading out) or past the end of its file."""
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location", "")
    base = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(base, location))
    if not location or os.path.isabs(location) or os.path.commonpath([base, path]) != base:
        raise ModelError(
            f"{what}: external data location '{location}' is outside the model's folder"
        )
    if not os.path.isfile(path):
        raise ModelError(f"{what}: cannot read its data (no external data file '{location}')")
    size = os.path.getsize(path)
    try:
        offset = int(info.get("offset", 0))
        length = int(info.get("length", size - offset))
    except ValueError:
        raise ModelError(f"{what}: external data offset or length is not a number") from None
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelError(
            f"{what}: external data at offset {offset}, length {length} runs past the end "
            f"of '{location}' ({size} bytes)"
        )
