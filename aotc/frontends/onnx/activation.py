"""Activation functions, Shrink and Clip, written as formulas over HLO elementwise
ops; Hardmax (a one-hot of the arg max)."""

from __future__ import annotations

import math

from ...ir import ComputationBuilder, Direction, DType, Instruction, Op, Shape
from .helpers import Formula, full_like, lowest, normalize_axis, unidirectional
from .reduce import arg_reducer
from .registry import NodeContext, onnx_op


@onnx_op("Relu")
def relu(ctx: NodeContext, x: Instruction) -> Instruction:
    return Formula(ctx.b, x).max(x, 0)


@onnx_op("LeakyRelu")
def leaky_relu(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    return f.where(x, Direction.LT, 0, f.mul(x, ctx.attr("alpha")), x)


@onnx_op("PRelu")
def prelu(ctx: NodeContext, x: Instruction, slope: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    slope = unidirectional(ctx.b, slope, x.array_shape.dims)
    return f.where(x, Direction.LT, 0, f.mul(x, slope), x)


@onnx_op("ThresholdedRelu", since=10)
def thresholded_relu(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    return f.where(x, Direction.GT, ctx.attr("alpha"), x, 0)


def _elu(f: Formula, x: Instruction, alpha: float) -> Instruction:
    return f.where(x, Direction.GT, 0, x, f.mul(f.f(Op.EXPM1, x), alpha))


@onnx_op("Elu")
def elu(ctx: NodeContext, x: Instruction) -> Instruction:
    return _elu(Formula(ctx.b, x), x, ctx.attr("alpha"))


@onnx_op("Selu")
def selu(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    return f.mul(_elu(f, x, ctx.attr("alpha")), ctx.attr("gamma"))


@onnx_op("Celu", since=12)
def celu(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    alpha = ctx.attr("alpha")
    negative = f.mul(f.f(Op.EXPM1, f.div(x, alpha)), alpha)
    return f.add(f.max(x, 0), f.min(negative, 0))


def _hard_sigmoid(f: Formula, x: Instruction, alpha: float, beta: float) -> Instruction:
    return f.max(f.min(f.add(f.mul(x, alpha), beta), 1), 0)


@onnx_op("HardSigmoid")
def hard_sigmoid(ctx: NodeContext, x: Instruction) -> Instruction:
    return _hard_sigmoid(Formula(ctx.b, x), x, ctx.attr("alpha"), ctx.attr("beta"))


@onnx_op("HardSwish", since=14)
def hard_swish(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    return f.mul(x, _hard_sigmoid(f, x, 1 / 6, 0.5))


def _softplus(f: Formula, x: Instruction) -> Instruction:
    return f.f(Op.LOG1P, f.f(Op.EXP, x))


@onnx_op("Softplus")
def softplus(ctx: NodeContext, x: Instruction) -> Instruction:
    return _softplus(Formula(ctx.b, x), x)


@onnx_op("Softsign")
def softsign(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    return f.div(x, f.add(f.f(Op.ABS, x), 1))


@onnx_op("Mish", since=18)
def mish(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    return f.mul(x, f.f(Op.TANH, _softplus(f, x)))


def gelu_of(f: Formula, x: Instruction, tanh_form: bool) -> Instruction:
    """x Phi(x): exactly, or by the tanh approximation."""
    if tanh_form:
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = f.mul(f.mul(x, x), x)
        inner = f.mul(f.add(x, f.mul(cube, 0.044715)), math.sqrt(2 / math.pi))
        return f.mul(f.mul(x, 0.5), f.add(f.f(Op.TANH, inner), 1))
    # 0.5 x (1 + erf(x / sqrt 2))
    return f.mul(f.mul(x, 0.5), f.add(f.f(Op.ERF, f.mul(x, 1 / math.sqrt(2))), 1))


@onnx_op("Gelu", since=20)
def gelu(ctx: NodeContext, x: Instruction) -> Instruction:
    approximate = ctx.choice("approximate", ("none", "tanh"))
    return gelu_of(Formula(ctx.b, x), x, approximate == "tanh")


@onnx_op("Swish", since=24)
def swish(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    return f.mul(x, f.f(Op.LOGISTIC, f.mul(x, ctx.attr("alpha"))))


@onnx_op("Shrink", since=9)
def shrink(ctx: NodeContext, x: Instruction) -> Instruction:
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    b = ctx.b
    dtype = x.array_shape.dtype
    # integers compare and add in f64, as the spec's float attributes are applied
    # before the result is cast back (exact for |x| < 2^53)
    wide = x if dtype.is_float else b.convert(x, DType.F64)
    f = Formula(b, wide)
    lambd, bias = ctx.attr("lambd"), ctx.attr("bias")
    inner = f.where(wide, Direction.GT, lambd, f.add(wide, -bias), 0)
    return b.convert(f.where(wide, Direction.LT, -lambd, f.add(wide, bias), inner), dtype)


def _hardmax(b: ComputationBuilder, x: Instruction, axis: int) -> Instruction:
    """1 at the first maximum along `axis`, 0 elsewhere."""
    dtype, dims = x.array_shape.dtype, x.array_shape.dims
    reducer = arg_reducer(b.module, dtype, Direction.GT, last=False)
    indices = b.iota(Shape(DType.S64, dims), axis)
    inits = [b.scalar(lowest(dtype), dtype), b.scalar(0, DType.S64)]
    both = b.add(Op.REDUCE, [x, indices, *inits], dimensions=(axis,), called=(reducer,))
    first = b.get_tuple_element(both, 1)
    kept = [d for d in range(x.array_shape.rank) if d != axis]
    hit = b.compare(indices, b.broadcast(first, kept, dims), Direction.EQ)
    return b.select(hit, full_like(b, 1, x), full_like(b, 0, x))


@onnx_op("Hardmax", since=1, until=12)
def hardmax_2d(ctx: NodeContext, x: Instruction) -> Instruction:
    # before opset 13 the input is seen as 2-D [prod(dims[:axis]), prod(dims[axis:])]
    b = ctx.b
    dims = x.array_shape.dims
    axis = ctx.attr("axis")
    axis = axis + len(dims) if axis < 0 else axis
    outer = math.prod(dims[:axis])
    flat = b.reshape(x, [outer, math.prod(dims[axis:])])
    return b.reshape(_hardmax(b, flat, 1), dims)


@onnx_op("Hardmax", since=13)
def hardmax(ctx: NodeContext, x: Instruction) -> Instruction:
    return _hardmax(ctx.b, x, normalize_axis(ctx.attr("axis"), x.array_shape.rank))


def _clip(ctx: NodeContext, x: Instruction, lo, hi) -> Instruction:
    # max then min: where min > max the result is max, as ONNX specifies
    f = Formula(ctx.b, x)
    if lo is not None:
        x = f.max(x, lo)
    if hi is not None:
        x = f.min(x, hi)
    return x


@onnx_op("Clip", until=10)
def clip_attributes(ctx: NodeContext, x: Instruction) -> Instruction:
    return _clip(ctx, x, ctx.attr("min"), ctx.attr("max"))


@onnx_op("Clip", since=11)
def clip(ctx: NodeContext, x: Instruction, lo=None, hi=None) -> Instruction:
    # the bounds are scalars; runtime values are fine, so they are not folded
    bounds = []
    for bound in (lo, hi):
        if bound is not None:
            bound = ctx.b.broadcast_to(ctx.b.reshape(bound, []), x.array_shape.dims)
        bounds.append(bound)
    return _clip(ctx, x, *bounds)
