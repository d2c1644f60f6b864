"""How IR element types live in LLVM: in registers and in memory.

In registers pred is i1, integers are iN, f32/f64 are float/double, and f16
and bf16 are *float* holding a value already rounded to the narrow type (each
op computes in f32 and rounds its result); so are the 8- and 4-bit floats.
s4/u4/s2/u2 are i4/i2 in registers (arithmetic wraps at their width).  In
memory pred is an i8 0/1, f16 is `half`, bf16 an i16 bit pattern, minifloats
an i8 code and sub-byte integers one (sign-extended) i8 each.  The bf16 and
minifloat <-> f32 conversions are integer IR (no libcalls, which older libgcc
lacks).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...ir import DType
from ...ir.types import MINIFLOATS, SUB_BYTE_INTS
from . import minifloat

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

# floats narrower than f32: computed in f32, rounded back after every op
HALF_DTYPES = frozenset({DType.F16, DType.BF16, *MINIFLOATS})


def register_type(dtype: DType) -> ir.Type:
    """The LLVM type values of `dtype` are computed in."""
    if dtype is DType.PRED:
        return I1
    if dtype is DType.F64:
        return F64
    if dtype.is_float:
        return F32
    return ir.IntType(dtype.bits)


def storage_type(dtype: DType) -> ir.Type:
    """The LLVM type of one element of `dtype` in memory."""
    if dtype is DType.PRED:
        return I8
    if dtype is DType.F16:
        return F16
    if dtype is DType.BF16:
        return I16
    if dtype in MINIFLOATS or dtype in SUB_BYTE_INTS:
        return I8
    return register_type(dtype)


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, int(value))


def i64_table(module: ir.Module, name: str, values) -> ir.GlobalVariable:
    """A constant internal [n x i64] global named `name`; the one already there when a
    table of that name exists (names that spell their values share one)."""
    table = module.globals.get(name)
    if table is None:
        ty = ir.ArrayType(I64, len(values))
        table = ir.GlobalVariable(module, ty, name)
        table.initializer = ir.Constant(ty, list(values))
        table.global_constant = True
        table.linkage = "internal"
    return table


def i32(value: int) -> ir.Constant:
    return ir.Constant(I32, int(value))


def constant(dtype: DType, value) -> ir.Constant:
    """An immediate of `dtype` in its register type (value already of that dtype)."""
    ty = register_type(dtype)
    if dtype.is_float:
        return ir.Constant(ty, float(value))
    bits = ty.width
    number = int(value) & ((1 << bits) - 1)
    if bits > 1 and number >= 1 << (bits - 1):  # print unsigned values in signed range
        number -= 1 << bits
    return ir.Constant(ty, number)


def load_element(
    builder: ir.IRBuilder, dtype: DType, pointer: ir.Value, invariant: bool = False
) -> ir.Value:
    """Load one element from memory and bring it into its register type; `invariant`:
    memory no code stores to (LLVM's !invariant.load)."""
    raw = builder.load(pointer, typ=storage_type(dtype))
    if invariant:
        raw.set_metadata("invariant.load", builder.module.add_metadata([]))
    return from_storage(builder, dtype, raw)


def store_element(builder: ir.IRBuilder, dtype: DType, value: ir.Value, pointer: ir.Value):
    """Store one element in its storage type; returns the store (for metadata)."""
    return builder.store(to_storage(builder, dtype, value), pointer)


def from_storage(builder: ir.IRBuilder, dtype: DType, stored: ir.Value) -> ir.Value:
    if dtype is DType.PRED:
        return builder.icmp_unsigned("!=", stored, ir.Constant(I8, 0))
    if dtype is DType.F16:
        return builder.fpext(stored, F32)
    if dtype is DType.BF16:
        return bf16_to_f32(builder, stored)
    if dtype in MINIFLOATS:
        return minifloat.decode(builder, MINIFLOATS[dtype], stored)
    if dtype in SUB_BYTE_INTS:
        return builder.trunc(stored, register_type(dtype))
    return stored


def to_storage(builder: ir.IRBuilder, dtype: DType, value: ir.Value) -> ir.Value:
    if dtype is DType.PRED:
        return builder.zext(value, I8)
    if dtype is DType.F16:
        return builder.fptrunc(value, F16)
    if dtype is DType.BF16:
        return f32_to_bf16(builder, value)
    if dtype in MINIFLOATS:
        return minifloat.encode(builder, MINIFLOATS[dtype], value)
    if dtype in SUB_BYTE_INTS:
        extend = builder.sext if dtype.is_signed_int else builder.zext
        return extend(value, I8)
    return value


def round_to(builder: ir.IRBuilder, dtype: DType, value: ir.Value) -> ir.Value:
    """Round an f32 result to f16/bf16/minifloat precision (kept as f32); others pass."""
    if dtype in HALF_DTYPES:
        return from_storage(builder, dtype, to_storage(builder, dtype, value))
    return value


def bf16_to_f32(builder: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    wide = builder.shl(builder.zext(bits, I32), ir.Constant(I32, 16))
    return builder.bitcast(wide, F32)


def f32_to_bf16(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """Round to nearest even, NaN -> 0x7FC0 (as `types.bf16_to_bits`)."""
    bits = builder.bitcast(value, I32)
    lsb = builder.and_(builder.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = builder.add(bits, builder.add(lsb, ir.Constant(I32, 0x7FFF)))
    narrow = builder.trunc(builder.lshr(rounded, ir.Constant(I32, 16)), I16)
    is_nan = builder.fcmp_unordered("uno", value, value)
    return builder.select(is_nan, ir.Constant(I16, 0x7FC0), narrow)


def literal_value(literal: np.ndarray, dtype: DType):
    """The Python scalar of a one-element literal, for `constant`."""
    item = np.asarray(literal).reshape(-1)[0]
    return bool(item) if dtype is DType.PRED else item.item()
