"""Element types and shapes of the IR.

A `Shape` is an array type (dtype + static dims, row-major layout); a
`TupleShape` groups shapes for tuple-valued instructions.  bf16 has no numpy
dtype: arrays of bf16 are held as float32 values already rounded to bf16, and
stored (in objects, on the C side) as uint16 bit patterns.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np


class DType(enum.Enum):
    PRED = "pred"
    S8 = "s8"
    S16 = "s16"
    S32 = "s32"
    S64 = "s64"
    U8 = "u8"
    U16 = "u16"
    U32 = "u32"
    U64 = "u64"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"

    @property
    def text(self) -> str:
        return self.value

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype the evaluator computes in (bf16 computes in float32)."""
        return np.dtype(_NUMPY[self])

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype of the bytes in memory (bf16 is a uint16 bit pattern)."""
        return np.dtype(np.uint16) if self is DType.BF16 else self.numpy

    @property
    def itemsize(self) -> int:
        return self.storage.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOAT_DTYPES

    @property
    def is_signed_int(self) -> bool:
        return self in (DType.S8, DType.S16, DType.S32, DType.S64)

    @property
    def is_unsigned_int(self) -> bool:
        return self in (DType.U8, DType.U16, DType.U32, DType.U64)

    @property
    def is_int(self) -> bool:
        return self.is_signed_int or self.is_unsigned_int

    @property
    def bits(self) -> int:
        return 1 if self is DType.PRED else 8 * self.itemsize

    @property
    def c_type(self) -> str:
        return _C_TYPES[self]

    @staticmethod
    def from_text(text: str) -> DType:
        try:
            return DType(text)
        except ValueError:
            raise ValueError(f"unknown element type '{text}'") from None

    @staticmethod
    def from_numpy(dtype) -> DType:
        dtype = np.dtype(dtype)
        for dt, name in _NUMPY.items():
            if dt is not DType.BF16 and np.dtype(name) == dtype:
                return dt
        raise ValueError(f"no IR element type for numpy dtype {dtype}")


_NUMPY = {
    DType.PRED: "bool",
    DType.S8: "int8",
    DType.S16: "int16",
    DType.S32: "int32",
    DType.S64: "int64",
    DType.U8: "uint8",
    DType.U16: "uint16",
    DType.U32: "uint32",
    DType.U64: "uint64",
    DType.F16: "float16",
    DType.BF16: "float32",
    DType.F32: "float32",
    DType.F64: "float64",
}

_C_TYPES = {
    DType.PRED: "bool",
    DType.S8: "int8_t",
    DType.S16: "int16_t",
    DType.S32: "int32_t",
    DType.S64: "int64_t",
    DType.U8: "uint8_t",
    DType.U16: "uint16_t",
    DType.U32: "uint32_t",
    DType.U64: "uint64_t",
    DType.F16: "uint16_t",
    DType.BF16: "uint16_t",
    DType.F32: "float",
    DType.F64: "double",
}

FLOAT_DTYPES = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64})


def bf16_round(values: np.ndarray) -> np.ndarray:
    """Round float values to the nearest bf16 (ties to even), returned as float32."""
    return bf16_from_bits(bf16_to_bits(values))


def bf16_to_bits(values: np.ndarray) -> np.ndarray:
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)  # keeps 0-d arrays 0-d
    is_nan = np.isnan(np.asarray(values, dtype=np.float32))
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    return np.where(is_nan, np.uint16(0x7FC0), rounded).astype(np.uint16)


def bf16_from_bits(bits: np.ndarray) -> np.ndarray:
    return np.asarray(np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def to_storage(values: np.ndarray, dtype: DType) -> np.ndarray:
    """The array as it lies in memory for `dtype` (bf16 -> uint16 bits)."""
    if dtype is DType.BF16:
        return bf16_to_bits(values)
    return np.ascontiguousarray(values, dtype=dtype.storage)


def from_storage(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """Inverse of `to_storage`: the evaluator's array for raw memory."""
    if dtype is DType.BF16:
        return bf16_from_bits(raw.view(np.uint16))
    return raw.view(dtype.numpy)


def cast_array(values, dtype: DType) -> np.ndarray:
    """Values as the evaluator's array of `dtype` (bf16 rounded, kept in float32)."""
    if dtype is DType.BF16:
        return bf16_round(np.asarray(values, dtype=np.float32))
    return np.asarray(values).astype(dtype.numpy)


@dataclass(frozen=True)
class Shape:
    """An array type: element type and static dimensions, row-major."""

    dtype: DType
    dims: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        assert all(d >= 0 for d in self.dims), self.dims

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_tuple(self) -> bool:
        return False

    def with_dtype(self, dtype: DType) -> Shape:
        return Shape(dtype, self.dims)

    def with_dims(self, dims) -> Shape:
        return Shape(self.dtype, tuple(dims))

    def text(self, layout: bool = True) -> str:
        body = f"{self.dtype.text}[{','.join(str(d) for d in self.dims)}]"
        if layout and self.rank > 0:
            body += "{" + ",".join(str(i) for i in reversed(range(self.rank))) + "}"
        return body

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class TupleShape:
    """The type of a tuple-valued instruction."""

    elements: tuple[Shape | TupleShape, ...]

    @property
    def is_tuple(self) -> bool:
        return True

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.elements)

    def text(self, layout: bool = True) -> str:
        return "(" + ", ".join(e.text(layout) for e in self.elements) + ")"

    def __str__(self) -> str:
        return self.text()


AnyShape = Shape | TupleShape


def scalar(dtype: DType) -> Shape:
    return Shape(dtype, ())
