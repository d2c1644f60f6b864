"""Evaluator rules of the elementwise ops: unary and binary arithmetic, compare,
select, clamp and the converts, with XLA's semantics where numpy's differ
(integer division by zero, shifts past the width, float -> int saturation).

Unary and binary ops are table rows (`UNARY`, `BINARY`) fed to one factory
each; `ELEMENTWISE_RULES` is this family's part of `evaluate.EVAL_RULES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .module import Instruction
from .ops import Direction, Op
from .types import DType, from_storage, to_storage

if TYPE_CHECKING:
    from .evaluate import Rule, Value


def _widen(x: np.ndarray) -> np.ndarray:
    """The array an elementwise op computes on: f16 in f32 (rounded once, by the
    result cast); pred as 0/1 bytes so that add/multiply/subtract wrap like i1."""
    if x.dtype == np.float16:
        return x.astype(np.float32)
    if x.dtype == np.bool_:
        return x.view(np.uint8)
    return x


def _unsigned(x) -> np.ndarray:
    """The same bits as the unsigned integer type of the same width."""
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _signed(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(np.dtype(f"i{x.dtype.itemsize}"))


def _is_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f"


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _logistic(x):
    # two forms so that neither exp overflows where its branch is taken
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_MATH_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    # no scipy: math.erf is correctly rounded in f64; slow, but this is the reference
    return _MATH_ERF(np.asarray(x, dtype=np.float64)).astype(np.float64)


def _round_afz(x):
    # x - trunc(x) is exact, unlike floor(x + 0.5) which rounds 0.49999997 up
    whole = np.trunc(x)
    return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole)


def _sign(x):
    # keeps -0.0 and +0.0 (np.sign(-0.0) is +0.0); NaN stays NaN
    if _is_float(x):
        return np.where(x == 0, x, np.sign(x))
    return np.sign(x)


_BYTE_POPCOUNT = np.array([b.bit_count() for b in range(256)], dtype=np.uint8)


def _popcnt(x):
    x = np.asarray(x)
    as_bytes = np.ascontiguousarray(x).view(np.uint8).reshape(*x.shape, x.dtype.itemsize)
    return _BYTE_POPCOUNT[as_bytes].sum(axis=-1, dtype=np.int64)


def _clz(x):
    bits = 8 * np.asarray(x).dtype.itemsize
    rest = _unsigned(x).astype(np.uint64)
    length = np.zeros(rest.shape, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):  # binary search for the highest set bit
        high = (rest >> np.uint64(shift)) != 0
        length += np.where(high, shift, 0)
        rest = np.where(high, rest >> np.uint64(shift), rest)
    return bits - (length + (rest != 0))


def _int_divmod(x, y) -> tuple[np.ndarray, np.ndarray]:
    """Quotient truncated toward zero and remainder with the dividend's sign (C).

    The cases C leaves undefined get XLA CPU's answers: x / 0 = -1 (all ones),
    x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.
    """
    by_zero = y == 0
    by_minus_one = (y == -1) if x.dtype.kind == "i" else np.zeros(np.shape(y), dtype=bool)
    safe = np.where(by_zero | by_minus_one, 1, y).astype(y.dtype)
    remainder = np.fmod(x, safe)
    quotient = (x - remainder) // safe  # exact division: floor and trunc agree
    quotient = np.where(by_minus_one, np.negative(x), quotient)
    quotient = np.where(by_zero, np.invert(np.zeros_like(x)), quotient)
    remainder = np.where(by_zero, x, np.where(by_minus_one, 0, remainder))
    return quotient, remainder


def _divide(x, y):
    return np.true_divide(x, y) if _is_float(x) else _int_divmod(x, y)[0]


def _remainder(x, y):
    return np.fmod(x, y) if _is_float(x) else _int_divmod(x, y)[1]


def _power(x, y):
    if _is_float(x):
        return np.power(x, y)
    # integer power by squaring, wrapping; a negative exponent gives 1 for base 1
    # and 0 otherwise (XLA's HloEvaluator and CPU emitter)
    result = np.ones_like(x)
    square = np.asarray(x).copy()
    exponent = np.maximum(y, 0)
    while np.any(exponent):
        result = np.where((exponent & 1) != 0, result * square, result)
        square = square * square
        exponent = exponent >> 1
    if x.dtype.kind == "i":
        result = np.where(y < 0, (x == 1).astype(x.dtype), result)
    return result


def _shift_amounts(x, y) -> tuple[np.ndarray, np.ndarray]:
    """(in range, amount): amounts are unsigned; those >= the bit width are out of range."""
    amount = _unsigned(y)
    in_range = amount < 8 * x.dtype.itemsize
    return in_range, np.where(in_range, amount, 0).astype(amount.dtype)


def _shift_left(x, y):
    in_range, amount = _shift_amounts(x, y)
    return np.where(in_range, _unsigned(x) << amount, 0).astype(amount.dtype).view(x.dtype)


def _shift_right_logical(x, y):
    in_range, amount = _shift_amounts(x, y)
    return np.where(in_range, _unsigned(x) >> amount, 0).astype(amount.dtype).view(x.dtype)


def _shift_right_arithmetic(x, y):
    # shifting by >= the width fills with the sign bit, as shifting by width - 1 does
    bits = 8 * x.dtype.itemsize
    amount = np.minimum(_unsigned(y), bits - 1)
    value = _signed(x)
    return (value >> amount.astype(value.dtype)).astype(value.dtype).view(x.dtype)


# -- rules --------------------------------------------------------------------------

UNARY: dict[Op, Callable] = {
    Op.ABS: np.abs,
    Op.NEGATE: np.negative,
    Op.EXP: np.exp,
    Op.EXPM1: np.expm1,
    Op.LOG: np.log,
    Op.LOG1P: np.log1p,
    Op.SQRT: np.sqrt,
    Op.RSQRT: _rsqrt,
    Op.CBRT: np.cbrt,
    Op.TANH: np.tanh,
    Op.LOGISTIC: _logistic,
    Op.SIN: np.sin,
    Op.COS: np.cos,
    Op.TAN: np.tan,
    Op.ERF: _erf,
    Op.FLOOR: np.floor,
    Op.CEIL: np.ceil,
    Op.ROUND_NEAREST_EVEN: np.rint,
    Op.ROUND_NEAREST_AFZ: _round_afz,
    Op.SIGN: _sign,
    Op.NOT: np.invert,  # logical on pred, bitwise on integers
    Op.IS_FINITE: np.isfinite,
    Op.POPCNT: _popcnt,
    Op.CLZ: _clz,
}

BINARY: dict[Op, Callable] = {
    Op.ADD: np.add,
    Op.SUBTRACT: np.subtract,
    Op.MULTIPLY: np.multiply,
    Op.DIVIDE: _divide,
    Op.REMAINDER: _remainder,
    Op.POWER: _power,
    Op.MAXIMUM: np.maximum,  # both propagate NaN, as XLA
    Op.MINIMUM: np.minimum,
    Op.ATAN2: np.arctan2,
    Op.AND: np.bitwise_and,
    Op.OR: np.bitwise_or,
    Op.XOR: np.bitwise_xor,
    Op.SHIFT_LEFT: _shift_left,
    Op.SHIFT_RIGHT_ARITHMETIC: _shift_right_arithmetic,
    Op.SHIFT_RIGHT_LOGICAL: _shift_right_logical,
}

# IEEE: NaN compares unequal to everything, so only NE holds
COMPARISONS: dict[Direction, Callable] = {
    Direction.EQ: np.equal,
    Direction.NE: np.not_equal,
    Direction.LT: np.less,
    Direction.LE: np.less_equal,
    Direction.GT: np.greater,
    Direction.GE: np.greater_equal,
}


def make_unary(fn: Callable) -> Rule:
    def rule(instr: Instruction, operands: list) -> Value:
        (x,) = operands
        # pred stays pred here: `not` must stay logical
        return fn(x.astype(np.float32) if x.dtype == np.float16 else x)

    return rule


def make_binary(fn: Callable) -> Rule:
    def rule(instr: Instruction, operands: list) -> Value:
        x, y = operands
        return fn(_widen(x), _widen(y))

    return rule


def _compare(instr: Instruction, operands: list) -> np.ndarray:
    x, y = operands
    return COMPARISONS[instr.direction](_widen(x), _widen(y))


def _select(instr: Instruction, operands: list) -> np.ndarray:
    pred, on_true, on_false = operands
    return np.where(pred, on_true, on_false)


def _clamp(instr: Instruction, operands: list) -> np.ndarray:
    lo, x, hi = operands  # scalar bounds broadcast
    return np.minimum(np.maximum(x, lo), hi)


def _convert(instr: Instruction, operands: list) -> np.ndarray:
    (x,) = operands
    target = instr.array_shape.dtype
    if target.is_int and _is_float(x):
        return _float_to_int(x, target)
    # everything else is numpy's cast: int -> int wraps, x -> pred is x != 0 (NaN is
    # true), pred -> x is 0/1, -> float rounds to nearest even (bf16 by _as_shape)
    return x


def _float_to_int(x: np.ndarray, target: DType) -> np.ndarray:
    """Float -> int truncates toward zero and saturates at the type's range; NaN -> 0.

    XLA's convert (fptosi/fptoui made saturating); numpy's cast is undefined there.
    """
    low, high = target.limits  # s4/u4/s2/u2 saturate at their own range
    whole = np.trunc(x.astype(np.float64))
    too_high = whole >= 2.0 ** (target.bits - target.is_signed_int)  # max + 1, exact
    too_low = whole < float(low)
    inside = np.where(too_high | too_low | np.isnan(whole), 0, whole).astype(target.numpy)
    limits = np.array([low, high], dtype=target.numpy)
    return np.where(too_high, limits[1], np.where(too_low, limits[0], inside))


def _bitcast_convert(instr: Instruction, operands: list) -> np.ndarray:
    (x,) = operands
    raw = to_storage(x, instr.operands[0].array_shape.dtype)
    return from_storage(raw, instr.array_shape.dtype)


ELEMENTWISE_RULES: dict[Op, Rule] = {
    **{op: make_unary(fn) for op, fn in UNARY.items()},
    **{op: make_binary(fn) for op, fn in BINARY.items()},
    Op.COMPARE: _compare,
    Op.SELECT: _select,
    Op.CLAMP: _clamp,
    Op.CONVERT: _convert,
    Op.BITCAST_CONVERT: _bitcast_convert,
}
