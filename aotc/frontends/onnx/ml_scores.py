"""The score transforms of the ai.onnx.ml classifiers and regressors
(`post_transform`), shared by the linear, SVM and tree-ensemble lowerings.

The formulas are the ones onnx.reference and onnxruntime compute, quirks
included: SOFTMAX_ZERO leaves zero scores at zero, and PROBIT uses Winitzki's
approximation of erfinv (a = 0.147), not the exact inverse.
"""

from __future__ import annotations

import math

from ...errors import ModelError
from ...ir import ComputationBuilder, Direction, Instruction, Op
from .helpers import Formula, reduce, softmax
from .registry import NodeContext

# TreeEnsemble-5 spells the transform as an index into this tuple; older ops by name
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")

WINITZKI_A = 0.147


def post_transform_name(ctx: NodeContext) -> str:
    """The node's `post_transform` attribute as a name, whichever way it is spelled."""
    value = ctx.attr("post_transform", "NONE")
    if isinstance(value, int):
        if not 0 <= value < len(POST_TRANSFORMS):
            raise ModelError(f"unknown post_transform {value}")
        return POST_TRANSFORMS[value]
    if value not in POST_TRANSFORMS:
        raise ModelError(f"unknown post_transform '{value}' (known: {', '.join(POST_TRANSFORMS)})")
    return value


def post_transform(b: ComputationBuilder, scores: Instruction, name: str) -> Instruction:
    """`scores` (N, C) transformed as `name`: per element, or per row for the softmaxes."""
    if name == "NONE":
        return scores
    if name == "SOFTMAX":
        return softmax(b, scores, [1])
    if name == "SOFTMAX_ZERO":
        return _softmax_zero(b, scores)
    if name == "LOGISTIC":
        return b.unary(Op.LOGISTIC, scores)
    if name == "PROBIT":
        return probit(b, scores)
    raise ModelError(f"unknown post_transform '{name}'")


def _softmax_zero(b: ComputationBuilder, x: Instruction) -> Instruction:
    """Softmax over a row's nonzero scores; zeros stay zero, an all-zero row is 0.5s."""
    f = Formula(b, x)
    dims = x.array_shape.dims
    peak = b.broadcast_to(reduce(b, x, Op.MAXIMUM, [1], keepdims=True), dims)
    # the reference counts |v| <= 1e-7 as zero and scales it by exp(-max) instead
    tiny = b.compare(f.f(Op.ABS, x), f.k(1e-7), Direction.LE)
    exp = b.select(tiny, f.mul(x, f.f(Op.EXP, f.sub(0, peak))), f.f(Op.EXP, f.sub(x, peak)))
    total = b.broadcast_to(reduce(b, exp, Op.ADD, [1], keepdims=True), dims)
    return f.where(total, Direction.EQ, 0, 0.5, f.div(exp, total))


def probit(b: ComputationBuilder, p: Instruction) -> Instruction:
    """sqrt(2) erfinv(2p - 1), erfinv by Winitzki's formula as the runtimes compute it."""
    f = Formula(b, p)
    x = f.sub(f.mul(p, 2), 1)
    sign = f.where(x, Direction.LT, 0, -1, 1)
    log = f.f(Op.LOG, f.mul(f.sub(1, x), f.add(1, x)))
    v = f.add(2 / (math.pi * WINITZKI_A), f.mul(log, 0.5))
    v3 = f.sub(f.f(Op.SQRT, f.sub(f.mul(v, v), f.mul(log, 1 / WINITZKI_A))), v)
    # x = +-1 makes log -inf; the reference returns 0 there (its `x == 0` guard)
    edge = b.compare(f.f(Op.ABS, x), f.k(1), Direction.EQ)
    erfinv = b.select(edge, f.k(0), f.mul(sign, f.f(Op.SQRT, v3)))
    return f.mul(erfinv, 1.41421356)
