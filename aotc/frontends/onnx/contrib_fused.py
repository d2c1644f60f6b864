"""onnxruntime's fused math (domain com.microsoft), as its graph optimizer writes it:
FusedMatMul and its older subset TransposeMatMul (MatMul with its operands' transposes
and a scale folded in), FusedGemm (Gemm + an activation) and FusedConv (Conv + an optional
residual + an activation).  Each lowers through the ONNX lowerings it fuses."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ModelError, UnsupportedError
from ...ir import Instruction, Op
from .helpers import full_like, unidirectional
from .registry import MICROSOFT, NodeContext, lower_as_onnx, onnx_op


def _arranged(ctx: NodeContext, x: Instruction, trans: bool, trans_batch: bool) -> Instruction:
    """x as MatMul's plain (batch..., rows, cols) operand: transBatch moves dim 0 in front
    of the last, then trans swaps the last two (a vector is left as it is, as numpy does)."""
    rank = x.array_shape.rank
    if rank < 2:
        return x
    perm = list(range(rank))
    if trans_batch:
        perm = [*perm[1 : rank - 1], 0, rank - 1]
    if trans:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    return x if perm == list(range(rank)) else ctx.b.transpose(x, perm)


@onnx_op("FusedMatMul", "TransposeMatMul", domain=MICROSOFT, since=1, arity=((2, 2), (1, 1)))
def fused_matmul(ctx: NodeContext, a: Instruction, b: Instruction) -> Instruction:
    """alpha * MatMul(a', b'), a' and b' the operands transposed as the attributes say."""
    a = _arranged(ctx, a, bool(ctx.attr("transA", 0)), bool(ctx.attr("transBatchA", 0)))
    b = _arranged(ctx, b, bool(ctx.attr("transB", 0)), bool(ctx.attr("transBatchB", 0)))
    out = lower_as_onnx(ctx, "MatMul", 13, [a, b], {})
    alpha = ctx.attr("alpha", 1.0)
    return out if alpha == 1.0 else ctx.b.binary(Op.MULTIPLY, out, full_like(ctx.b, alpha, out))


@dataclass(frozen=True)
class FusedActivation:
    """An activation by the ONNX op whose lowering applies it."""

    op_type: str
    # its attributes, in the order of FusedConv's activation_params (FusedGemm names them
    # activation_alpha, activation_beta, activation_gamma)
    params: tuple[str, ...] = ()
    opset: int = 14  # Clip takes its bounds as attributes only before opset 11


# the activations onnxruntime's CPU kernels fuse into Gemm (MLAS's and its functors) and
# Conv; its ScaledTanh and ParametricSoftplus have no ONNX lowering here and are refused
ACTIVATIONS: dict[str, FusedActivation] = {
    "Relu": FusedActivation("Relu"),
    "Tanh": FusedActivation("Tanh"),
    "Sigmoid": FusedActivation("Sigmoid"),
    "Softplus": FusedActivation("Softplus"),
    "Softsign": FusedActivation("Softsign"),
    "HardSwish": FusedActivation("HardSwish"),
    "LeakyRelu": FusedActivation("LeakyRelu", ("alpha",)),
    "Elu": FusedActivation("Elu", ("alpha",)),
    "Celu": FusedActivation("Celu", ("alpha",)),
    "ThresholdedRelu": FusedActivation("ThresholdedRelu", ("alpha",)),
    "HardSigmoid": FusedActivation("HardSigmoid", ("alpha", "beta")),
    "Selu": FusedActivation("Selu", ("alpha", "gamma")),
    "Clip": FusedActivation("Clip", ("min", "max"), opset=10),
}


def _activation(ctx: NodeContext) -> FusedActivation | None:
    name = ctx.attr("activation")
    if name is None:
        return None
    if name not in ACTIVATIONS:
        known = ", ".join(ACTIVATIONS)
        raise UnsupportedError(f"activation '{name}' is not supported (only {known})")
    return ACTIVATIONS[name]


def _activated(ctx: NodeContext, y: Instruction, params: dict[str, float]) -> Instruction:
    activation = _activation(ctx)
    if activation is None:
        return y
    return lower_as_onnx(ctx, activation.op_type, activation.opset, [y], params)


GEMM_ATTRS = ("alpha", "beta", "transA", "transB")


@onnx_op("FusedGemm", domain=MICROSOFT, since=1, arity=((2, 3), (1, 1)))
def fused_gemm(ctx: NodeContext, a: Instruction, b: Instruction, c=None) -> Instruction:
    """activation(Gemm(a, b, c)), the activation's attributes named activation_*."""
    gemm_attrs = {name: ctx.attrs[name] for name in GEMM_ATTRS if name in ctx.attrs}
    y = lower_as_onnx(ctx, "Gemm", 13, [a, b, c], gemm_attrs)
    activation = _activation(ctx)
    names = activation.params if activation else ()
    params = {p: ctx.attrs[f"activation_{p}"] for p in names if f"activation_{p}" in ctx.attrs}
    return _activated(ctx, y, params)


CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@onnx_op("FusedConv", domain=MICROSOFT, since=1, arity=((2, 4), (1, 1)))
def fused_conv(ctx: NodeContext, x: Instruction, w: Instruction, bias=None, z=None):
    """activation(Conv(x, w, bias) + z), the activation's attributes in activation_params."""
    conv_attrs = {name: ctx.attrs[name] for name in CONV_ATTRS if name in ctx.attrs}
    y = lower_as_onnx(ctx, "Conv", 11, [x, w, bias], conv_attrs)
    if z is not None:
        y = ctx.b.binary(Op.ADD, y, unidirectional(ctx.b, z, y.shape.dims))
    activation = _activation(ctx)
    values = list(ctx.attr("activation_params", []))
    names = activation.params if activation else ()
    if values and len(values) != len(names):
        raise ModelError(
            f"activation_params has {len(values)} values, "
            f"activation '{ctx.attr('activation')}' takes {len(names)}"
        )
    return _activated(ctx, y, dict(zip(names, values)))
