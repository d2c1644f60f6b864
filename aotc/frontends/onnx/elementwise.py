"""Elementwise ONNX ops: the unary, binary and comparison tables, variadic
folds, the inverse and hyperbolic trigonometric functions (composed from HLO ops),
Mod, Pow, Where, Identity, Dropout, Trilu."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce as fold

import numpy as np

from ...errors import ModelError, ShapeError
from ...ir import Direction, DType, Instruction, Op, Shape
from . import random
from .helpers import Formula, binary, broadcast_all, full, full_like
from .registry import NodeContext, onnx_op

# ONNX op -> HLO op on one operand.  An op missing at a model's opset has no
# schema there, which the registry already refuses, so rows need no opset.
UNARY: dict[str, Op] = {
    "Neg": Op.NEGATE,
    "Abs": Op.ABS,
    "Sqrt": Op.SQRT,
    "Exp": Op.EXP,
    "Log": Op.LOG,
    "Tanh": Op.TANH,
    "Sigmoid": Op.LOGISTIC,
    "Erf": Op.ERF,
    "Floor": Op.FLOOR,
    "Ceil": Op.CEIL,
    "Round": Op.ROUND_NEAREST_EVEN,
    "Sin": Op.SIN,
    "Cos": Op.COS,
    "Tan": Op.TAN,
    "Sign": Op.SIGN,
    "Not": Op.NOT,
    "BitwiseNot": Op.NOT,
}

# the first opset of a UNARY row where it is not 7 (Not never changed since opset 1)
UNARY_SINCE: dict[str, int] = {"Not": 1}

# ONNX op -> HLO op on two operands, numpy-broadcast
BINARY: dict[str, Op] = {
    "Add": Op.ADD,
    "Sub": Op.SUBTRACT,
    "Mul": Op.MULTIPLY,
    "Div": Op.DIVIDE,
    "And": Op.AND,
    "Or": Op.OR,
    "Xor": Op.XOR,
    "BitwiseAnd": Op.AND,
    "BitwiseOr": Op.OR,
    "BitwiseXor": Op.XOR,
}

COMPARISONS: dict[str, Direction] = {
    "Equal": Direction.EQ,
    "Less": Direction.LT,
    "Greater": Direction.GT,
    "LessOrEqual": Direction.LE,
    "GreaterOrEqual": Direction.GE,
}

# variadic ONNX op -> the binary op it folds with
VARIADIC: dict[str, Op] = {
    "Sum": Op.ADD,
    "Mean": Op.ADD,
    "Max": Op.MAXIMUM,
    "Min": Op.MINIMUM,
}


def make_unary(op: Op):
    def lower(ctx: NodeContext, x: Instruction) -> Instruction:
        return ctx.b.unary(op, x)

    return lower


def make_binary(op: Op):
    def lower(ctx: NodeContext, x: Instruction, y: Instruction) -> Instruction:
        return binary(ctx.b, op, x, y)

    return lower


def make_comparison(direction: Direction):
    def lower(ctx: NodeContext, x: Instruction, y: Instruction) -> Instruction:
        x, y = broadcast_all(ctx.b, x, y)
        return ctx.b.compare(x, y, direction)

    return lower


def make_variadic(op: Op, mean: bool):
    def lower(ctx: NodeContext, *xs: Instruction) -> Instruction:
        out = fold(lambda acc, x: binary(ctx.b, op, acc, x), xs)
        if mean:
            out = ctx.b.binary(Op.DIVIDE, out, full_like(ctx.b, len(xs), out))
        return out

    return lower


for _name, _op in UNARY.items():
    onnx_op(_name, since=UNARY_SINCE.get(_name, 7))(make_unary(_op))
for _name, _op in BINARY.items():
    onnx_op(_name)(make_binary(_op))
for _name, _direction in COMPARISONS.items():
    onnx_op(_name)(make_comparison(_direction))
for _name, _op in VARIADIC.items():
    onnx_op(_name)(make_variadic(_op, mean=_name == "Mean"))


# -- inverse and hyperbolic trigonometry, composed from HLO ops -------------------
#
# Written so that they stay accurate where the naive formulas cancel: near 0
# (expm1/log1p) and at the domain edges ((1 - x)(1 + x) rather than 1 - x^2).
# Outside the domain the composition yields NaN, as the libm functions do.

Composed = Callable[[Formula, Instruction], Instruction]


def _one_minus_square(f: Formula, x: Instruction) -> Instruction:
    return f.mul(f.sub(1, x), f.add(x, 1))


def _asin(f: Formula, x: Instruction) -> Instruction:
    return f.b.binary(Op.ATAN2, x, f.f(Op.SQRT, _one_minus_square(f, x)))


def _acos(f: Formula, x: Instruction) -> Instruction:
    return f.b.binary(Op.ATAN2, f.f(Op.SQRT, _one_minus_square(f, x)), x)


def _atan(f: Formula, x: Instruction) -> Instruction:
    return f.b.binary(Op.ATAN2, x, f.k(1))


def _odd(f: Formula, x: Instruction, magnitude: Instruction) -> Instruction:
    """`magnitude` (computed from |x|) with x's sign."""
    return f.where(x, Direction.LT, 0, f.mul(magnitude, -1), magnitude)


def _half_exp_pair(f: Formula, a: Instruction) -> tuple[Instruction, Instruction]:
    """(e^a / 2, e^-a / 2) as (E/2) E and (1/2E) / E with E = e^(a/2): no overflow
    before the result itself overflows."""
    e = f.f(Op.EXP, f.mul(a, 0.5))
    return f.mul(f.mul(e, 0.5), e), f.div(f.div(0.5, e), e)


def _sinh(f: Formula, x: Instruction) -> Instruction:
    a = f.f(Op.ABS, x)
    # (e^a - e^-a) / 2 with expm1 on both sides: exact to rounding near 0
    small = f.mul(f.sub(f.f(Op.EXPM1, a), f.f(Op.EXPM1, f.mul(a, -1))), 0.5)
    up, down = _half_exp_pair(f, a)
    return _odd(f, x, f.where(a, Direction.LT, 1, small, f.sub(up, down)))


def _cosh(f: Formula, x: Instruction) -> Instruction:
    up, down = _half_exp_pair(f, f.f(Op.ABS, x))
    return f.add(up, down)


def _huge(f: Formula) -> float:
    """Where sqrt(x^2 + 1) == |x| in this dtype: log(x + sqrt(x^2 + 1)) is log 2x there."""
    return float(1 / math.sqrt(np.finfo(f.like.array_shape.dtype.numpy).eps))


def _asinh(f: Formula, x: Instruction) -> Instruction:
    # log1p(a + a^2 / (1 + sqrt(1 + a^2))) for a = |x|, odd in x; log(2a) where a^2
    # would lose the 1 (or overflow)
    a = f.f(Op.ABS, x)
    square = f.mul(a, a)
    small = f.f(Op.LOG1P, f.add(a, f.div(square, f.add(f.f(Op.SQRT, f.add(square, 1)), 1))))
    large = f.add(f.f(Op.LOG, a), math.log(2))
    return _odd(f, x, f.where(a, Direction.GT, _huge(f), large, small))


def _acosh(f: Formula, x: Instruction) -> Instruction:
    # log1p(t + sqrt(t (x + 1))) for t = x - 1: exact near 1, NaN below 1
    t = f.add(x, -1)
    small = f.f(Op.LOG1P, f.add(t, f.f(Op.SQRT, f.mul(t, f.add(x, 1)))))
    large = f.add(f.f(Op.LOG, x), math.log(2))
    value = f.where(x, Direction.GT, _huge(f), large, small)
    return f.where(x, Direction.LT, 1, math.nan, value)  # below the domain, as libm


def _atanh(f: Formula, x: Instruction) -> Instruction:
    # log((1 + x) / (1 - x)) / 2 as log1p(2x / (1 - x)) / 2
    return f.mul(f.f(Op.LOG1P, f.div(f.mul(x, 2), f.sub(1, x))), 0.5)


COMPOSED: dict[str, Composed] = {
    "Asin": _asin,
    "Acos": _acos,
    "Atan": _atan,
    "Sinh": _sinh,
    "Cosh": _cosh,
    "Asinh": _asinh,
    "Acosh": _acosh,
    "Atanh": _atanh,
}


def make_composed(formula: Composed):
    def lower(ctx: NodeContext, x: Instruction) -> Instruction:
        return formula(Formula(ctx.b, x), x)

    return lower


for _name, _formula in COMPOSED.items():
    onnx_op(_name)(make_composed(_formula))


@onnx_op("Reciprocal")
def reciprocal(ctx: NodeContext, x: Instruction) -> Instruction:
    return ctx.b.binary(Op.DIVIDE, full_like(ctx.b, 1, x), x)


@onnx_op("IsNaN")
def is_nan(ctx: NodeContext, x: Instruction) -> Instruction:
    # NaN is the only value unequal to itself
    return ctx.b.compare(x, x, Direction.NE)


@onnx_op("IsInf")
def is_inf(ctx: NodeContext, x: Instruction) -> Instruction:
    b = ctx.b
    hits = []
    if ctx.attr("detect_positive", 1):
        hits.append(b.compare(x, full_like(b, float("inf"), x), Direction.EQ))
    if ctx.attr("detect_negative", 1):
        hits.append(b.compare(x, full_like(b, float("-inf"), x), Direction.EQ))
    if not hits:
        return full(b, False, DType.PRED, x.array_shape.dims)
    return fold(lambda p, q: b.binary(Op.OR, p, q), hits)


# Pow by a constant 2 or 3 as products, the way onnxruntime's Pow and PyTorch compute it:
# x * x is exact (one rounding, as a correctly rounded pow); (x * x) * x rounds twice
# (within 1 ulp more) where the inline pow costs some 50 operations per element (GPT-2's
# tanh-GELU cubes every activation)
POWER_PRODUCTS = {2.0: 2, 3.0: 3}


@onnx_op("Pow")
def power(ctx: NodeContext, x: Instruction, y: Instruction) -> Instruction:
    factors = _product_factors(x, y)
    if factors is not None:
        product = x
        for _ in range(factors - 1):
            product = ctx.b.binary(Op.MULTIPLY, product, x)
        return product
    # ONNX lets the exponent's type differ; the result has the base's type
    y = ctx.b.convert(y, x.array_shape.dtype)
    return binary(ctx.b, Op.POWER, x, y)


def _product_factors(x: Instruction, y: Instruction) -> int | None:
    """How many factors of x make x^y, for a float x and a constant y of one value in
    POWER_PRODUCTS that does not widen the result's shape; else None."""
    literal = y.literal if y.op is Op.CONSTANT else None
    if not x.array_shape.dtype.is_float or literal is None or literal.size == 0:
        return None
    values = np.unique(literal.astype(np.float64))
    dims = tuple(x.array_shape.dims)
    if len(values) != 1 or np.broadcast_shapes(dims, y.array_shape.dims) != dims:
        return None
    return POWER_PRODUCTS.get(float(values[0]))


@onnx_op("Mod", since=10)
def mod(ctx: NodeContext, x: Instruction, y: Instruction) -> Instruction:
    b = ctx.b
    x, y = broadcast_all(b, x, y)
    rem = b.binary(Op.REMAINDER, x, y)  # C fmod: takes the dividend's sign
    if ctx.attr("fmod", 0) or x.array_shape.dtype.is_unsigned_int:
        return rem
    # fmod=0: Python's %, which takes the divisor's sign
    zero = full_like(b, 0, rem)
    nonzero = b.compare(rem, zero, Direction.NE)
    signs_differ = b.binary(
        Op.XOR, b.compare(rem, zero, Direction.LT), b.compare(y, zero, Direction.LT)
    )
    fix = b.binary(Op.AND, nonzero, signs_differ)
    return b.select(fix, b.binary(Op.ADD, rem, y), rem)


@onnx_op("BitShift", since=11)
def bit_shift(ctx: NodeContext, x: Instruction, y: Instruction) -> Instruction:
    direction = ctx.choice("direction", ("LEFT", "RIGHT"))
    if direction == "LEFT":
        op = Op.SHIFT_LEFT
    else:
        # signed types (opset 28) shift in copies of the sign bit
        op = (
            Op.SHIFT_RIGHT_ARITHMETIC
            if x.array_shape.dtype.is_signed_int
            else Op.SHIFT_RIGHT_LOGICAL
        )
    return binary(ctx.b, op, x, y)


@onnx_op("Where", since=9)
def where(ctx: NodeContext, cond: Instruction, x: Instruction, y: Instruction) -> Instruction:
    cond, x, y = broadcast_all(ctx.b, cond, x, y)
    return ctx.b.select(cond, x, y)


@onnx_op("Identity")
def identity(ctx: NodeContext, x: Instruction) -> Instruction:
    return x


def _training_ratio(ctx: NodeContext, ratio, training) -> float | None:
    """The drop ratio where the node trains (opset 12+: the training_mode input; before 7:
    is_test=0), else None: inference, the identity."""
    if ctx.attr("is_test", 1) == 0:
        return ctx.attr("ratio", 0.5)
    if training is not None and bool(ctx.const(2).reshape(-1)[0]):
        return 0.5 if ratio is None else float(ctx.const(1).reshape(-1)[0])
    return None


@onnx_op("Dropout")
def dropout(ctx: NodeContext, x: Instruction, ratio=None, training=None) -> list[Instruction]:
    b = ctx.b
    rate = _training_ratio(ctx, ratio, training)
    if not rate:
        mask = full_like(b, True, x, DType.PRED) if ctx.output_used(1) else None
        return [x, mask]
    if not 0 < rate <= 1:
        raise ModelError(f"ratio {rate} is not in [0, 1]")
    # the kept elements are scaled by 1 / (1 - ratio); a ratio of 1 keeps none
    mask = random.dropout_mask(ctx, x, rate)
    kept = full_like(b, 0, x) if rate == 1 else Formula(b, x).div(x, 1 - rate)
    return [b.select(mask, kept, full_like(b, 0, x)), mask]


@onnx_op("Trilu", since=14)
def trilu(ctx: NodeContext, x: Instruction, k=None) -> Instruction:
    """Keep the upper (col - row >= k) or lower (col - row <= k) triangle, zero the rest."""
    b = ctx.b
    if x.array_shape.rank < 2:
        raise ShapeError("Trilu needs an input of rank >= 2")
    diagonal = 0 if k is None else int(ctx.const(1).reshape(()))
    index_shape = Shape(DType.S64, x.array_shape.dims)
    rank = x.array_shape.rank
    offset = b.binary(Op.SUBTRACT, b.iota(index_shape, rank - 1), b.iota(index_shape, rank - 2))
    direction = Direction.GE if ctx.attr("upper") else Direction.LE
    keep = b.compare(offset, full(b, diagonal, DType.S64, x.array_shape.dims), direction)
    return b.select(keep, x, full_like(b, 0, x))
