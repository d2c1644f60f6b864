"""Scalar semantics of the elementwise opcodes on register values (XLA's).

Regular families are table rows (an IRBuilder method, an LLVM intrinsic or a
libm function per opcode); only irregular ops (guarded integer division,
shifts, sign, logistic, ...) are functions, and those sit in tables too.
f32 transcendentals and pow come from vmath (inline, vectorizable) before those tables.
f16/bf16 compute in f32 and `unary`/`binary` round the result back.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Direction, DType, Op
from . import vmath
from .context import EmitContext
from .lltypes import F32, F64, HALF_DTYPES, I32, register_type, round_to, storage_type
from .lltypes import from_storage as _from_storage
from .lltypes import to_storage as _to_storage
from .loops import for_range

# -- tables ------------------------------------------------------------------

FLOAT_BINARY = {  # IRBuilder methods
    Op.ADD: "fadd",
    Op.SUBTRACT: "fsub",
    Op.MULTIPLY: "fmul",
    Op.DIVIDE: "fdiv",
    Op.REMAINDER: "frem",  # C fmod: the sign of the dividend, as XLA
}
FLOAT_BINARY_INTRINSIC = {
    Op.POWER: "llvm.pow",
    Op.MAXIMUM: "llvm.maximum",  # NaN-propagating, as XLA
    Op.MINIMUM: "llvm.minimum",
}
FLOAT_BINARY_LIBM = {Op.ATAN2: "atan2"}
INT_BINARY = {  # IRBuilder methods; wrap around
    Op.ADD: "add",
    Op.SUBTRACT: "sub",
    Op.MULTIPLY: "mul",
    Op.AND: "and_",
    Op.OR: "or_",
    Op.XOR: "xor",
}
SIGNED_BINARY_INTRINSIC = {Op.MAXIMUM: "llvm.smax", Op.MINIMUM: "llvm.smin"}
UNSIGNED_BINARY_INTRINSIC = {Op.MAXIMUM: "llvm.umax", Op.MINIMUM: "llvm.umin"}

FLOAT_UNARY_INTRINSIC = {
    Op.ABS: "llvm.fabs",
    Op.EXP: "llvm.exp",
    Op.LOG: "llvm.log",
    Op.SQRT: "llvm.sqrt",
    Op.SIN: "llvm.sin",
    Op.COS: "llvm.cos",
    Op.FLOOR: "llvm.floor",
    Op.CEIL: "llvm.ceil",
    Op.ROUND_NEAREST_EVEN: "llvm.roundeven",
    Op.ROUND_NEAREST_AFZ: "llvm.round",  # halfway cases away from zero
}
FLOAT_UNARY_LIBM = {
    Op.EXPM1: "expm1",
    Op.LOG1P: "log1p",
    Op.CBRT: "cbrt",
    Op.TANH: "tanh",
    Op.TAN: "tan",
    Op.ERF: "erf",
}
INT_UNARY_INTRINSIC = {Op.POPCNT: "llvm.ctpop"}

# (builder method, LLVM predicate) per direction; floats are ordered except NE
FLOAT_COMPARE = {
    Direction.EQ: ("fcmp_ordered", "=="),
    Direction.NE: ("fcmp_unordered", "!="),
    Direction.LT: ("fcmp_ordered", "<"),
    Direction.LE: ("fcmp_ordered", "<="),
    Direction.GT: ("fcmp_ordered", ">"),
    Direction.GE: ("fcmp_ordered", ">="),
}
INT_COMPARE = {
    Direction.EQ: "==",
    Direction.NE: "!=",
    Direction.LT: "<",
    Direction.LE: "<=",
    Direction.GT: ">",
    Direction.GE: ">=",
}


def zero_like(x: ir.Value) -> ir.Constant:
    return ir.Constant(x.type, 0.0 if x.type in (F32, F64) else 0)


def _one(x: ir.Value) -> ir.Constant:
    return ir.Constant(x.type, 1.0 if x.type in (F32, F64) else 1)


# -- irregular float ops ----------------------------------------------------


def _fneg(ctx: EmitContext, x: ir.Value) -> ir.Value:
    return ctx.builder.fneg(x)


def _rsqrt(ctx: EmitContext, x: ir.Value) -> ir.Value:
    return ctx.builder.fdiv(_one(x), ctx.intrinsic("llvm.sqrt", [x]))


def _logistic(ctx: EmitContext, x: ir.Value) -> ir.Value:
    b = ctx.builder
    denominator = b.fadd(_one(x), ctx.intrinsic("llvm.exp", [b.fneg(x)]))
    return b.fdiv(_one(x), denominator)


def _fsign(ctx: EmitContext, x: ir.Value) -> ir.Value:
    """NaN stays NaN, +-0 stay themselves, else +-1."""
    b = ctx.builder
    unit = ctx.intrinsic("llvm.copysign", [_one(x), x])
    keep = b.or_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("==", x, zero_like(x)))
    return b.select(keep, x, unit)


def _is_finite(ctx: EmitContext, x: ir.Value) -> ir.Value:
    infinity = ir.Constant(x.type, float("inf"))
    return ctx.builder.fcmp_ordered("<", ctx.intrinsic("llvm.fabs", [x]), infinity)


FLOAT_UNARY_SPECIAL: dict[Op, Callable[[EmitContext, ir.Value], ir.Value]] = {
    Op.NEGATE: _fneg,
    Op.RSQRT: _rsqrt,
    Op.LOGISTIC: _logistic,
    Op.SIGN: _fsign,
    Op.IS_FINITE: _is_finite,
}

# -- irregular integer ops ---------------------------------------------------
# Each takes (ctx, signed, operands...).


def _iabs(ctx: EmitContext, signed: bool, x: ir.Value) -> ir.Value:
    if not signed:
        return x
    b = ctx.builder
    return b.select(b.icmp_signed("<", x, zero_like(x)), b.neg(x), x)


def _ineg(ctx: EmitContext, signed: bool, x: ir.Value) -> ir.Value:
    return ctx.builder.neg(x)


def _isign(ctx: EmitContext, signed: bool, x: ir.Value) -> ir.Value:
    b = ctx.builder
    if not signed:
        return b.zext(b.icmp_unsigned("!=", x, zero_like(x)), x.type)
    clipped = ctx.intrinsic("llvm.smin", [x, _one(x)])
    return ctx.intrinsic("llvm.smax", [clipped, ir.Constant(x.type, -1)])


def _not(ctx: EmitContext, signed: bool, x: ir.Value) -> ir.Value:
    return ctx.builder.not_(x)


def _clz(ctx: EmitContext, signed: bool, x: ir.Value) -> ir.Value:
    return ctx.intrinsic("llvm.ctlz", [x, ir.Constant(ir.IntType(1), 0)])


def _idivide(ctx: EmitContext, signed: bool, x: ir.Value, y: ir.Value) -> ir.Value:
    """Truncating; x/0 = -1 (all ones) and INT_MIN/-1 = INT_MIN, never a trap."""
    b = ctx.builder
    by_zero = b.icmp_unsigned("==", y, zero_like(y))
    if signed:
        # dividing by 1 instead of -1 gives INT_MIN/-1 = INT_MIN for free
        unsafe = b.or_(by_zero, _signed_overflow(b, x, y))
        quotient = b.sdiv(x, b.select(unsafe, _one(y), y))
    else:
        quotient = b.udiv(x, b.select(by_zero, _one(y), y))
    return b.select(by_zero, ir.Constant(x.type, -1), quotient)


def _iremainder(ctx: EmitContext, signed: bool, x: ir.Value, y: ir.Value) -> ir.Value:
    """Sign of the dividend; x%0 = x and INT_MIN%-1 = 0, never a trap."""
    b = ctx.builder
    by_zero = b.icmp_unsigned("==", y, zero_like(y))
    if signed:
        unsafe = b.or_(by_zero, _signed_overflow(b, x, y))
        remainder = b.srem(x, b.select(unsafe, _one(y), y))
    else:
        remainder = b.urem(x, b.select(by_zero, _one(y), y))
    return b.select(by_zero, x, remainder)


def _signed_overflow(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    int_min = ir.Constant(x.type, -(1 << (x.type.width - 1)))
    minus_one = ir.Constant(y.type, -1)
    return b.and_(b.icmp_signed("==", x, int_min), b.icmp_signed("==", y, minus_one))


def _make_shift(method: str, sign_fill: bool):
    """Shifts by >= the bit width (or negative) give 0, or the sign for arithmetic ones."""

    def shift(ctx: EmitContext, signed: bool, x: ir.Value, y: ir.Value) -> ir.Value:
        b = ctx.builder
        width = ir.Constant(y.type, x.type.width)
        too_far = b.icmp_unsigned(">=", y, width)
        shifted = getattr(b, method)(x, b.select(too_far, zero_like(y), y))
        if sign_fill:
            fill = b.ashr(x, ir.Constant(x.type, x.type.width - 1))
        else:
            fill = zero_like(x)
        return b.select(too_far, fill, shifted)

    return shift


def _ipower(ctx: EmitContext, signed: bool, x: ir.Value, y: ir.Value) -> ir.Value:
    """Exponentiation by squaring, wrapping; a negative exponent gives 1 for base 1, else 0."""
    b = ctx.builder
    slots = [ctx.alloca(x.type) for _ in range(3)]
    result, base, exponent = slots
    for slot, value in zip(slots, (_one(x), x, y)):
        b.store(value, slot)
    with for_range(b, x.type.width, "pow"):
        e = b.load(exponent)
        acc = b.load(result)
        odd = b.trunc(e, ir.IntType(1))
        b.store(b.select(odd, b.mul(acc, b.load(base)), acc), result)
        b.store(b.mul(b.load(base), b.load(base)), base)
        b.store(b.lshr(e, _one(e)), exponent)
    value = b.load(result)
    if not signed:
        return value
    of_negative = b.zext(b.icmp_signed("==", x, _one(x)), x.type)
    return b.select(b.icmp_signed("<", y, zero_like(y)), of_negative, value)


INT_UNARY_SPECIAL = {
    Op.ABS: _iabs,
    Op.NEGATE: _ineg,
    Op.SIGN: _isign,
    Op.NOT: _not,
    Op.CLZ: _clz,
}
INT_BINARY_SPECIAL = {
    Op.DIVIDE: _idivide,
    Op.REMAINDER: _iremainder,
    Op.POWER: _ipower,
    Op.SHIFT_LEFT: _make_shift("shl", sign_fill=False),
    Op.SHIFT_RIGHT_LOGICAL: _make_shift("lshr", sign_fill=False),
    Op.SHIFT_RIGHT_ARITHMETIC: _make_shift("ashr", sign_fill=True),
}

# -- entry points -----------------------------------------------------------


def unary(ctx: EmitContext, op: Op, dtype: DType, x: ir.Value) -> ir.Value:
    """`op(x)` for an operand of `dtype`; the result has `dtype` except is-finite (pred)."""
    if dtype.is_float:
        if x.type == F32 and op in vmath.F32_UNARY:
            result = vmath.F32_UNARY[op](ctx, x)
        elif op in FLOAT_UNARY_INTRINSIC:
            result = ctx.intrinsic(FLOAT_UNARY_INTRINSIC[op], [x])
        elif op in FLOAT_UNARY_LIBM:
            result = ctx.libm(FLOAT_UNARY_LIBM[op], [x])
        elif op in FLOAT_UNARY_SPECIAL:
            result = FLOAT_UNARY_SPECIAL[op](ctx, x)
        else:
            raise _unsupported(op, dtype)
        return result if op is Op.IS_FINITE else round_to(ctx.builder, dtype, result)
    if op in INT_UNARY_INTRINSIC:
        return ctx.intrinsic(INT_UNARY_INTRINSIC[op], [x])
    if op in INT_UNARY_SPECIAL:
        return INT_UNARY_SPECIAL[op](ctx, dtype.is_signed_int, x)
    raise _unsupported(op, dtype)


def binary(ctx: EmitContext, op: Op, dtype: DType, x: ir.Value, y: ir.Value) -> ir.Value:
    """`op(x, y)` for operands of `dtype`."""
    b = ctx.builder
    if dtype.is_float:
        reciprocal = _reciprocal(dtype, y) if op is Op.DIVIDE else None
        if reciprocal is not None:
            assert b is not None
            result = b.fmul(x, reciprocal)
        elif x.type == F32 and op in vmath.F32_BINARY and ctx.math.inline_f32_pow:
            result = vmath.F32_BINARY[op](ctx, x, y)
        elif op in FLOAT_BINARY:
            result = getattr(b, FLOAT_BINARY[op])(x, y)
        elif op in FLOAT_BINARY_INTRINSIC:
            result = ctx.intrinsic(FLOAT_BINARY_INTRINSIC[op], [x, y])
        elif op in FLOAT_BINARY_LIBM:
            result = ctx.libm(FLOAT_BINARY_LIBM[op], [x, y])
        else:
            raise _unsupported(op, dtype)
        return round_to(b, dtype, result)
    if op in INT_BINARY:
        return getattr(b, INT_BINARY[op])(x, y)
    intrinsics = SIGNED_BINARY_INTRINSIC if dtype.is_signed_int else UNSIGNED_BINARY_INTRINSIC
    if op in intrinsics:
        return ctx.intrinsic(intrinsics[op], [x, y])
    if op in INT_BINARY_SPECIAL:
        return INT_BINARY_SPECIAL[op](ctx, dtype.is_signed_int, x, y)
    raise _unsupported(op, dtype)


# A division by a constant multiplies by the constant's reciprocal, rounded once when
# compiling, as onnxruntime and PyTorch compute GELU's x / sqrt(2): a vector division costs
# some ten multiplies, and the product is within 1.5 ulp of the quotient.  Only f32 and
# f64 (f16 and bf16 compute in f32 and round again: a whole half-precision ulp), and only
# where the divisor and its reciprocal are normal numbers (else the reciprocal overflows
# or loses bits).
RECIPROCAL_DTYPES: dict[DType, type[np.floating]] = {DType.F32: np.float32, DType.F64: np.float64}


def _reciprocal(dtype: DType, divisor: ir.Value) -> ir.Constant | None:
    """The constant 1 / `divisor` where a product by it may replace the division."""
    scalar = RECIPROCAL_DTYPES.get(dtype)
    if scalar is None or not isinstance(divisor, ir.Constant):
        return None
    if not isinstance(divisor.constant, float):
        return None
    value = scalar(divisor.constant)
    with np.errstate(divide="ignore", over="ignore"):
        reciprocal = scalar(1) / value
    smallest = np.finfo(scalar).tiny
    if not all(np.isfinite(v) and abs(v) >= smallest for v in (value, reciprocal)):
        return None
    return ir.Constant(divisor.type, float(reciprocal))


def compare(
    ctx: EmitContext, direction: Direction, dtype: DType, x: ir.Value, y: ir.Value
) -> ir.Value:
    b = ctx.builder
    if dtype.is_float:
        method, predicate = FLOAT_COMPARE[direction]
        return getattr(b, method)(predicate, x, y)
    method = b.icmp_signed if dtype.is_signed_int else b.icmp_unsigned
    return method(INT_COMPARE[direction], x, y)


def clamp(ctx: EmitContext, dtype: DType, lo: ir.Value, x: ir.Value, hi: ir.Value):
    """min(max(x, lo), hi), as XLA."""
    return binary(ctx, Op.MINIMUM, dtype, binary(ctx, Op.MAXIMUM, dtype, x, lo), hi)


def convert(ctx: EmitContext, src: DType, dst: DType, x: ir.Value) -> ir.Value:
    """Value conversion: float->int truncates and saturates (NaN -> 0), -> pred is != 0.

    Conversions to f16/bf16/minifloats round once, from the exact value (f64 and wide
    integers go through f64 and a round-to-odd f32, see `_f64_to_f32_odd`).
    """
    b = ctx.builder
    target = register_type(dst)
    if src is dst:
        return x
    if dst is DType.PRED:
        if src.is_float:
            return b.fcmp_unordered("!=", x, zero_like(x))
        return b.icmp_unsigned("!=", x, zero_like(x))
    if dst in HALF_DTYPES and (src is DType.F64 or (src.is_int and src.bits > 24)):
        wide = x if src is DType.F64 else convert(ctx, src, DType.F64, x)
        return round_to(b, dst, _f64_to_f32_odd(ctx, wide))
    if src.is_float and dst.is_float:
        if x.type != target:
            x = b.fpext(x, target) if target == F64 else b.fptrunc(x, target)
        return round_to(b, dst, x)
    if src.is_float and dst.bits <= 16:
        return _float_to_narrow_int(ctx, dst, x)
    if src.is_float:
        name = "llvm.fptosi.sat" if dst.is_signed_int else "llvm.fptoui.sat"
        return ctx.intrinsic(name, [x], ret=target)
    if dst.is_float:
        to_float = b.sitofp if src.is_signed_int else b.uitofp
        return round_to(b, dst, to_float(x, target))
    if target.width < x.type.width:
        return b.trunc(x, target)
    if target.width > x.type.width:
        return b.sext(x, target) if src.is_signed_int else b.zext(x, target)
    return x


def _float_to_narrow_int(ctx: EmitContext, dst: DType, x: ir.Value) -> ir.Value:
    """fpto[su]i.sat to an integer of 16 bits or fewer, as a clamp to its range (whose
    bounds floats hold exactly), NaN to 0, then a conversion through s32: the same
    values, and unlike the intrinsic LLVM vectorizes it on x86 (requantizing epilogues
    of int8 models spent most of their time converting lane by lane)."""
    b = ctx.builder
    low, high = (ir.Constant(x.type, float(v)) for v in dst.limits)
    clamped = ctx.intrinsic("llvm.minnum", [ctx.intrinsic("llvm.maxnum", [x, low]), high])
    finite = b.select(b.fcmp_unordered("uno", x, x), zero_like(x), clamped)
    return b.trunc(b.fptosi(finite, I32), register_type(dst))


def _f64_to_f32_odd(ctx: EmitContext, wide: ir.Value) -> ir.Value:
    """f64 -> f32 rounding to odd: truncate, then set the last bit if inexact.

    The sticky last bit makes a second rounding to a type with at least two
    fewer mantissa bits (f16, bf16) give the singly rounded result.
    """
    b = ctx.builder
    narrow = b.fptrunc(wide, F32)
    back = b.fpext(narrow, F64)
    overshot = b.fcmp_ordered(
        ">", ctx.intrinsic("llvm.fabs", [back]), ctx.intrinsic("llvm.fabs", [wide])
    )
    bits = b.bitcast(narrow, I32)
    bits = b.select(overshot, b.sub(bits, ir.Constant(I32, 1)), bits)  # one ulp toward 0
    inexact = b.fcmp_unordered("!=", back, wide)
    bits = b.select(inexact, b.or_(bits, ir.Constant(I32, 1)), bits)
    return b.bitcast(bits, F32)


def bitcast_convert(ctx: EmitContext, src: DType, dst: DType, x: ir.Value) -> ir.Value:
    """Reinterpret the bits of an element as another type of the same width."""
    b = ctx.builder
    bits = b.bitcast(_to_storage(b, src, x), storage_type(dst))
    return _from_storage(b, dst, bits)


def _unsupported(op: Op, dtype: DType) -> UnsupportedError:
    return UnsupportedError(f"the CPU backend has no {op.text} for {dtype.text} elements")
