"""onnxruntime's contrib activations (domain com.microsoft), as its transformer
optimizer writes them into exported models: Gelu, FastGelu, BiasGelu, QuickGelu."""

from __future__ import annotations

from ...ir import Instruction, Op
from .activation import gelu_of
from .helpers import Formula, binary
from .registry import MICROSOFT, NodeContext, onnx_op

ONE_IN = ((1, 1), (1, 1))


def _plus_bias(ctx: NodeContext, x: Instruction, bias: Instruction | None) -> Instruction:
    return x if bias is None else binary(ctx.b, Op.ADD, x, bias)


@onnx_op("Gelu", domain=MICROSOFT, since=1, arity=ONE_IN)
def ms_gelu(ctx: NodeContext, x: Instruction) -> Instruction:
    return gelu_of(Formula(ctx.b, x), x, tanh_form=False)


@onnx_op("BiasGelu", domain=MICROSOFT, since=1, arity=((2, 2), (1, 1)))
def bias_gelu(ctx: NodeContext, x: Instruction, bias: Instruction) -> Instruction:
    """gelu(x + bias), exactly (erf)."""
    y = _plus_bias(ctx, x, bias)
    return gelu_of(Formula(ctx.b, y), y, tanh_form=False)


@onnx_op("FastGelu", domain=MICROSOFT, since=1, arity=((1, 2), (1, 1)))
def fast_gelu(ctx: NodeContext, x: Instruction, bias: Instruction | None = None) -> Instruction:
    """gelu(x + bias) by the tanh approximation."""
    y = _plus_bias(ctx, x, bias)
    return gelu_of(Formula(ctx.b, y), y, tanh_form=True)


@onnx_op("QuickGelu", domain=MICROSOFT, since=1, arity=ONE_IN)
def quick_gelu(ctx: NodeContext, x: Instruction) -> Instruction:
    """x sigmoid(alpha x)."""
    f = Formula(ctx.b, x)
    return f.mul(x, f.f(Op.LOGISTIC, f.mul(x, ctx.attr("alpha", 1.702))))
