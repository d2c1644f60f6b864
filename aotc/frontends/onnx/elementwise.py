"""Elementwise ONNX ops: the unary, binary and comparison tables, variadic
folds, Mod, Pow, Where, Cast, Identity, Dropout, Trilu."""

from __future__ import annotations

from functools import reduce as fold

from ...errors import ShapeError, UnsupportedError
from ...ir import Direction, DType, Instruction, Op, Shape
from .dtypes import to_dtype
from .helpers import binary, broadcast_all, full, full_like
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
    onnx_op(_name)(make_unary(_op))
for _name, _op in BINARY.items():
    onnx_op(_name)(make_binary(_op))
for _name, _direction in COMPARISONS.items():
    onnx_op(_name)(make_comparison(_direction))
for _name, _op in VARIADIC.items():
    onnx_op(_name)(make_variadic(_op, mean=_name == "Mean"))


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
        return full(b, False, DType.PRED, x.shape.dims)
    return fold(lambda p, q: b.binary(Op.OR, p, q), hits)


@onnx_op("Pow")
def power(ctx: NodeContext, x: Instruction, y: Instruction) -> Instruction:
    # ONNX lets the exponent's type differ; the result has the base's type
    y = ctx.b.convert(y, x.shape.dtype)
    return binary(ctx.b, Op.POWER, x, y)


@onnx_op("Mod", since=10)
def mod(ctx: NodeContext, x: Instruction, y: Instruction) -> Instruction:
    b = ctx.b
    x, y = broadcast_all(b, x, y)
    rem = b.binary(Op.REMAINDER, x, y)  # C fmod: takes the dividend's sign
    if ctx.attr("fmod", 0) or x.shape.dtype.is_unsigned_int:
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
        op = Op.SHIFT_RIGHT_ARITHMETIC if x.shape.dtype.is_signed_int else Op.SHIFT_RIGHT_LOGICAL
    return binary(ctx.b, op, x, y)


@onnx_op("Where", since=9)
def where(ctx: NodeContext, cond: Instruction, x: Instruction, y: Instruction) -> Instruction:
    cond, x, y = broadcast_all(ctx.b, cond, x, y)
    return ctx.b.select(cond, x, y)


@onnx_op("Cast")
def cast(ctx: NodeContext, x: Instruction) -> Instruction:
    dtype = to_dtype(ctx.required_attr("to"), "attribute 'to'")
    return ctx.b.convert(x, dtype)


@onnx_op("CastLike", since=15)
def cast_like(ctx: NodeContext, x: Instruction, like: Instruction) -> Instruction:
    return ctx.b.convert(x, like.shape.dtype)


@onnx_op("Identity")
def identity(ctx: NodeContext, x: Instruction) -> Instruction:
    return x


@onnx_op("Dropout")
def dropout(ctx: NodeContext, x: Instruction, ratio=None, training=None) -> list[Instruction]:
    # inference form: the identity; opset 12+ may ask for training at run time
    if training is not None and bool(ctx.const(2).reshape(-1)[0]):
        raise UnsupportedError("training_mode=True is not supported (inference only)")
    if ctx.attr("is_test", 1) == 0:
        raise UnsupportedError("is_test=0 (training) is not supported")
    mask = full(ctx.b, True, DType.PRED, x.shape.dims) if ctx.output_used(1) else None
    return [x, mask]


@onnx_op("Trilu", since=14)
def trilu(ctx: NodeContext, x: Instruction, k=None) -> Instruction:
    """Keep the upper (col - row >= k) or lower (col - row <= k) triangle, zero the rest."""
    b = ctx.b
    if x.shape.rank < 2:
        raise ShapeError("Trilu needs an input of rank >= 2")
    diagonal = 0 if k is None else int(ctx.const(1).reshape(()))
    index_shape = Shape(DType.S64, x.shape.dims)
    rank = x.shape.rank
    offset = b.binary(Op.SUBTRACT, b.iota(index_shape, rank - 1), b.iota(index_shape, rank - 2))
    direction = Direction.GE if ctx.attr("upper") else Direction.LE
    keep = b.compare(offset, full(b, diagonal, DType.S64, x.shape.dims), direction)
    return b.select(keep, x, full_like(b, 0, x))
