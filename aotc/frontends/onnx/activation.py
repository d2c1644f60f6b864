"""Activation functions and Clip, written as formulas over HLO elementwise ops."""

from __future__ import annotations

import math

from ...ir import Direction, Instruction, Op
from .helpers import Formula, unidirectional
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
    slope = unidirectional(ctx.b, slope, x.shape.dims)
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


@onnx_op("Gelu", since=20)
def gelu(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    approximate = ctx.choice("approximate", ("none", "tanh"))
    if approximate == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = f.mul(f.mul(x, x), x)
        inner = f.mul(f.add(x, f.mul(cube, 0.044715)), math.sqrt(2 / math.pi))
        return f.mul(f.mul(x, 0.5), f.add(f.f(Op.TANH, inner), 1))
    # 0.5 x (1 + erf(x / sqrt 2))
    return f.mul(f.mul(x, 0.5), f.add(f.f(Op.ERF, f.mul(x, 1 / math.sqrt(2))), 1))


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
            bound = ctx.b.broadcast_to(ctx.b.reshape(bound, []), x.shape.dims)
        bounds.append(bound)
    return _clip(ctx, x, *bounds)
