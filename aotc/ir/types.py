"""Element types and shapes of the IR.

A `Shape` is an array type (dtype + static dims, row-major layout); a
`TupleShape` groups shapes for tuple-valued instructions.  bf16 has no numpy
dtype: arrays of bf16 are held as float32 values already rounded to bf16, and
stored (in objects, on the C side) as uint16 bit patterns.

The 8- and 4-bit floats (f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz, f8e8m0fnu,
f4e2m1fn; "minifloats") are likewise float32 arrays of exactly representable
values, stored as one byte per element holding the bit pattern (f4e2m1fn in
the low 4 bits).  s4/u4/s2/u2 are int8/uint8 arrays of in-range values, stored
one byte per element (sign-extended for s4/s2): our ABI does not pack sub-byte
integers.  Rounding to minifloats is ml_dtypes' (shared with onnx and JAX):
round to nearest even, overflow to inf or NaN (saturating where a type has
neither), except that values wider than f32 are rounded once, from the exact
value.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import ml_dtypes
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
    F8E4M3FN = "f8e4m3fn"
    F8E4M3FNUZ = "f8e4m3fnuz"
    F8E5M2 = "f8e5m2"
    F8E5M2FNUZ = "f8e5m2fnuz"
    F8E8M0FNU = "f8e8m0fnu"
    F4E2M1FN = "f4e2m1fn"
    S4 = "s4"
    U4 = "u4"
    S2 = "s2"
    U2 = "u2"

    @property
    def text(self) -> str:
        return self.value

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype the evaluator computes in (bf16 and minifloats: float32)."""
        return np.dtype(_NUMPY[self])

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype of the bytes in memory (bf16: uint16 bits, minifloats: uint8 bits)."""
        if self is DType.BF16:
            return np.dtype(np.uint16)
        return np.dtype(np.uint8) if self in MINIFLOATS else self.numpy

    @property
    def itemsize(self) -> int:
        return self.storage.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOAT_DTYPES

    @property
    def is_signed_int(self) -> bool:
        return self in (DType.S2, DType.S4, DType.S8, DType.S16, DType.S32, DType.S64)

    @property
    def is_unsigned_int(self) -> bool:
        return self in (DType.U2, DType.U4, DType.U8, DType.U16, DType.U32, DType.U64)

    @property
    def is_int(self) -> bool:
        return self.is_signed_int or self.is_unsigned_int

    @property
    def bits(self) -> int:
        """Width of a value (pred 1, s4 4...); storage may be wider (`itemsize`)."""
        return _BITS.get(self, 8 * self.itemsize)

    @property
    def minifloat(self) -> MiniFloat | None:
        """The encoding of an 8- or 4-bit float type, else None."""
        return MINIFLOATS.get(self)

    @property
    def limits(self) -> tuple:
        """The least and the greatest value (-inf/inf for floats that have them)."""
        if self is DType.PRED:
            return False, True
        if self.is_int:
            low = -(1 << (self.bits - 1)) if self.is_signed_int else 0
            return low, (1 << (self.bits - self.is_signed_int)) - 1
        fmt = self.minifloat
        if fmt is None or fmt.has_inf:
            return -math.inf, math.inf
        return float(ml_dtypes.finfo(fmt.ml_dtype).min), fmt.largest

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
            if dt not in EMULATED_DTYPES and np.dtype(name) == dtype:
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
    DType.F8E4M3FN: "float32",
    DType.F8E4M3FNUZ: "float32",
    DType.F8E5M2: "float32",
    DType.F8E5M2FNUZ: "float32",
    DType.F8E8M0FNU: "float32",
    DType.F4E2M1FN: "float32",
    DType.S4: "int8",
    DType.U4: "uint8",
    DType.S2: "int8",
    DType.U2: "uint8",
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
    DType.F8E4M3FN: "uint8_t",
    DType.F8E4M3FNUZ: "uint8_t",
    DType.F8E5M2: "uint8_t",
    DType.F8E5M2FNUZ: "uint8_t",
    DType.F8E8M0FNU: "uint8_t",
    DType.F4E2M1FN: "uint8_t",
    DType.S4: "int8_t",
    DType.U4: "uint8_t",
    DType.S2: "int8_t",
    DType.U2: "uint8_t",
}

_BITS = {
    DType.PRED: 1,
    DType.F4E2M1FN: 4,
    DType.S4: 4,
    DType.U4: 4,
    DType.S2: 2,
    DType.U2: 2,
}


@dataclass(frozen=True)
class MiniFloat:
    """The bit layout of an 8- or 4-bit float (sign, exponent, mantissa).

    `nan` says which codes are NaN: "ieee" (all-ones exponent, nonzero mantissa),
    "ones" (all-ones magnitude), "negzero" (the sign bit alone: fnuz types, which
    have no -0) or "none".  Without inf, overflow gives NaN, or the largest
    magnitude where there is no NaN either.
    """

    exponent_bits: int
    mantissa_bits: int
    bias: int
    has_inf: bool
    nan: str
    ml_dtype: type  # the ml_dtypes scalar type with exactly these semantics
    signed: bool = True

    @property
    def magnitude_bits(self) -> int:
        return self.exponent_bits + self.mantissa_bits

    @property
    def largest(self) -> float:
        """The greatest finite value."""
        return float(ml_dtypes.finfo(self.ml_dtype).max)


MINIFLOATS: dict[DType, MiniFloat] = {
    DType.F8E4M3FN: MiniFloat(4, 3, 7, False, "ones", ml_dtypes.float8_e4m3fn),
    DType.F8E4M3FNUZ: MiniFloat(4, 3, 8, False, "negzero", ml_dtypes.float8_e4m3fnuz),
    DType.F8E5M2: MiniFloat(5, 2, 15, True, "ieee", ml_dtypes.float8_e5m2),
    DType.F8E5M2FNUZ: MiniFloat(5, 2, 16, False, "negzero", ml_dtypes.float8_e5m2fnuz),
    # powers of two 2^-127..2^127 only: no sign, no zero, 0xFF is NaN
    DType.F8E8M0FNU: MiniFloat(8, 0, 127, False, "ones", ml_dtypes.float8_e8m0fnu, False),
    DType.F4E2M1FN: MiniFloat(2, 1, 1, False, "none", ml_dtypes.float4_e2m1fn),
}

SUB_BYTE_INTS = frozenset({DType.S4, DType.U4, DType.S2, DType.U2})
# types numpy has no dtype for: the evaluator holds them in a wider numpy dtype
EMULATED_DTYPES = frozenset({DType.BF16, *MINIFLOATS, *SUB_BYTE_INTS})
FLOAT_DTYPES = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64, *MINIFLOATS})


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


def f32_round_to_odd(values) -> np.ndarray:
    """float64 -> float32 truncating, the last bit set where inexact.

    The sticky last bit keeps a second rounding, to a type with at least two
    fewer mantissa bits (bf16, f16, minifloats), equal to rounding once.
    """
    values = np.asarray(values, dtype=np.float64)
    narrow = values.astype(np.float32)
    wide = narrow.astype(np.float64)
    away = np.abs(wide) > np.abs(values)
    narrow = np.where(away, np.nextafter(narrow, np.float32(0)), narrow).astype(np.float32)
    bits = narrow.view(np.uint32)  # a fresh array (0-d stays 0-d)
    bits = np.where(wide != values, bits | np.uint32(1), bits).astype(np.uint32)
    return bits.view(np.float32)


def to_storage(values: np.ndarray, dtype: DType) -> np.ndarray:
    """The array as it lies in memory for `dtype` (bf16 -> uint16 bits, minifloats ->
    uint8 bits, sub-byte ints -> one byte each)."""
    if dtype is DType.BF16:
        return bf16_to_bits(values)
    fmt = dtype.minifloat
    if fmt is not None:
        with np.errstate(invalid="ignore", over="ignore"):  # NaN and overflow are values
            codes = np.asarray(values, dtype=np.float32).astype(fmt.ml_dtype)
        return np.asarray(codes, order="C").view(np.uint8)  # ascontiguousarray makes 0-d 1-d
    if dtype in SUB_BYTE_INTS:  # also takes ml_dtypes int4/int2 arrays
        return np.asarray(values).astype(dtype.storage, order="C")
    return np.asarray(values, dtype=dtype.storage, order="C")


def from_storage(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """Inverse of `to_storage`: the evaluator's array for raw memory.  Bits above a
    sub-byte type's width are ignored (bitcast-convert from a wider storage)."""
    if dtype is DType.BF16:
        return bf16_from_bits(raw.view(np.uint16))
    fmt = dtype.minifloat
    if fmt is None and dtype not in SUB_BYTE_INTS:
        return raw.view(dtype.numpy)
    low = raw.view(np.uint8) & np.uint8((1 << dtype.bits) - 1)
    if fmt is not None:
        return low.view(fmt.ml_dtype).astype(np.float32)
    if dtype.is_signed_int:  # sign-extend from the top bit of the width
        top = np.uint8(1 << (dtype.bits - 1))
        return ((low ^ top).astype(np.int8) - top.astype(np.int8)).astype(np.int8)
    return low


def cast_array(values, dtype: DType) -> np.ndarray:
    """Values as the evaluator's array of `dtype` (bf16 and minifloats rounded, kept in
    float32; sub-byte integers wrapped, as integer narrowing does)."""
    if dtype is DType.BF16:
        return bf16_round(np.asarray(values, dtype=np.float32))
    fmt = dtype.minifloat
    if fmt is not None:
        return _round_minifloat(np.asarray(values), fmt)
    if dtype in SUB_BYTE_INTS:
        wide = np.asarray(values).astype(np.int64)
        return from_storage((wide & 0xFF).astype(np.uint8), dtype)
    return np.asarray(values).astype(dtype.numpy)


def _round_minifloat(values: np.ndarray, fmt: MiniFloat) -> np.ndarray:
    if values.dtype not in (np.float32, np.float16, np.bool_):
        values = f32_round_to_odd(values)  # f64 and integers: round once
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and overflow are values
        return values.astype(np.float32).astype(fmt.ml_dtype).astype(np.float32)


@dataclass(frozen=True)
class Shape:
    """An array type: element type and dimensions, row-major.

    A dim may be bounded (XLA's `f32[<=8,128]`): `dynamic[i]` says that dim i's extent
    is known only at run time, at most `dims[i]`.  Everything sized at compile time
    (sizes, buffers, strides) reads `dims`, the bounds: a bounded array is stored as
    its bound, the values at the first extents of each dim, the rest padding
    (passes/bounded.py).  `dynamic` is () for a static shape."""

    dtype: DType
    dims: tuple[int, ...]
    dynamic: tuple[bool, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        assert all(d >= 0 for d in self.dims), self.dims
        flags = tuple(bool(f) for f in self.dynamic)
        assert not flags or len(flags) == len(self.dims), (self.dims, flags)
        object.__setattr__(self, "dynamic", flags if any(flags) else ())

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

    @property
    def is_static(self) -> bool:
        """No dim is bounded."""
        return not self.dynamic

    def is_dynamic(self, dim: int) -> bool:
        """Whether dim `dim` is bounded (its extent known at run time)."""
        return bool(self.dynamic) and self.dynamic[dim]

    @property
    def bounded_dims(self) -> tuple[int, ...]:
        """The indices of the bounded dims."""
        return tuple(i for i, flag in enumerate(self.dynamic) if flag)

    def with_dtype(self, dtype: DType) -> Shape:
        return Shape(dtype, self.dims, self.dynamic)

    def with_dims(self, dims, dynamic=()) -> Shape:
        return Shape(self.dtype, tuple(dims), tuple(dynamic))

    def static(self) -> Shape:
        """This shape at its bounds, every dim static."""
        return Shape(self.dtype, self.dims)

    def text(self, layout: bool = True) -> str:
        marks = self.dynamic or (False,) * self.rank
        dims = ",".join(f"<={d}" if flag else str(d) for d, flag in zip(self.dims, marks))
        body = f"{self.dtype.text}[{dims}]"
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
