"""Tensor values read from files straight into numpy arrays, and where the importer finds
them.

A tensor's bytes outside the parsed message (a payload the wire reader left out, wire.py;
external data, external_data.py) are read once, into an array of the tensor's final
dtype and shape (np.empty, then readinto its buffer): for the element types whose
little-endian raw bytes are the array's own layout (ARRAY_TYPES).  Others (4- and 2-bit
packed integers and float4, bfloat16 and float8, which the IR holds widened) and tensors
whose bytes do not give their size keep those bytes as raw_data, for numpy_helper to read
and judge as before.
"""

from __future__ import annotations

import math
import secrets

import numpy as np
from onnx import TensorProto

# element types read as they are: raw data is little-endian (the ONNX spec); the IR's
# array of the type has the same layout on a little-endian machine
ARRAY_TYPES: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype("<f4"),
    TensorProto.DOUBLE: np.dtype("<f8"),
    TensorProto.FLOAT16: np.dtype("<f2"),
    TensorProto.INT8: np.dtype("i1"),
    TensorProto.INT16: np.dtype("<i2"),
    TensorProto.INT32: np.dtype("<i4"),
    TensorProto.INT64: np.dtype("<i8"),
    TensorProto.UINT8: np.dtype("u1"),
    TensorProto.UINT16: np.dtype("<u2"),
    TensorProto.UINT32: np.dtype("<u4"),
    TensorProto.UINT64: np.dtype("<u8"),
    TensorProto.BOOL: np.dtype("?"),
}


def empty_array(tensor: TensorProto, length: int) -> np.ndarray | None:
    """An uninitialized array for the tensor's `length` raw bytes, of its dtype and shape;
    None where those bytes are not such an array's (another element type, a segment, a
    negative dim, a length other than the tensor's size)."""
    dtype = ARRAY_TYPES.get(tensor.data_type)
    if dtype is None or tensor.HasField("segment") or any(dim < 0 for dim in tensor.dims):
        return None
    shape = tuple(tensor.dims)
    if math.prod(shape) * dtype.itemsize != length:
        return None
    return np.empty(shape, dtype)


def byte_view(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, to read into."""
    return array.reshape(-1).data.cast("B")


def native(array: np.ndarray) -> np.ndarray:
    """The array in the machine's byte order (a copy only on a big-endian machine)."""
    return array.astype(array.dtype.newbyteorder("="), copy=False)


class TensorArrays:
    """The arrays that hold the values of a model's tensors read from files.

    Each such tensor is marked: data location EXTERNAL, one external_data entry under this
    store's own key naming its array (a key made for this store, which no model can hold),
    so that a reader that does not know the mark refuses the tensor rather than reading it
    as empty.  The arrays are read-only: the importer shares them (a subgraph lowered
    many times makes many constants of one initializer)."""

    def __init__(self) -> None:
        self.key = f"aotc.array.{secrets.token_hex(8)}"
        self.arrays: list[np.ndarray] = []

    def add(self, tensor: TensorProto, array: np.ndarray) -> None:
        """Make `array` the tensor's values (and mark the tensor)."""
        array = native(array)
        array.setflags(write=False)
        del tensor.external_data[:]
        tensor.external_data.add(key=self.key, value=str(len(self.arrays)))
        tensor.data_location = TensorProto.EXTERNAL
        self.arrays.append(array)

    def get(self, tensor: TensorProto) -> np.ndarray | None:
        """The tensor's array, or None where it holds its own values."""
        index = self._index(tensor)
        return None if index is None else self.arrays[index]

    def keep(self, tensor: TensorProto, values: np.ndarray) -> None:
        """Hold `values` (the tensor's array as a constant's read-only literal, which the
        builder may have copied) in place of the array read, so that one copy stays
        alive."""
        index = self._index(tensor)
        if index is not None and values is not self.arrays[index]:
            assert values.dtype == self.arrays[index].dtype, (values.dtype, tensor.name)
            assert values.shape == self.arrays[index].shape, (values.shape, tensor.name)
            self.arrays[index] = values

    def _index(self, tensor: TensorProto) -> int | None:
        if tensor.data_location != TensorProto.EXTERNAL or len(tensor.external_data) != 1:
            return None
        entry = tensor.external_data[0]
        return int(entry.value) if entry.key == self.key else None
