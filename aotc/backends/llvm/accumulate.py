"""Multiply-accumulate for contractions (dot, convolution).

Operands are converted to the result type; floats accumulate in the result's
register type (f32 for f16/bf16) and are rounded once at the end, as XLA's
CPU backend does by upcasting narrow dots; integers wrap; pred is or-of-and.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import DType
from . import scalar
from .context import EmitContext
from .lltypes import constant, register_type, round_to


class MacAccumulator:
    """One stack slot: `add_product(a, b)` in the loop, `result()` after it."""

    def __init__(self, ctx: EmitContext, in_dtype: DType, out_dtype: DType):
        self.ctx = ctx
        self.in_dtype = in_dtype
        self.out_dtype = out_dtype
        self.slot = ctx.alloca(register_type(out_dtype))
        ctx.builder.store(constant(out_dtype, 0), self.slot)

    def add_product(self, lhs: ir.Value, rhs: ir.Value) -> None:
        ctx, b = self.ctx, self.ctx.builder
        lhs = scalar.convert(ctx, self.in_dtype, self.out_dtype, lhs)
        rhs = scalar.convert(ctx, self.in_dtype, self.out_dtype, rhs)
        acc = b.load(self.slot)
        if self.out_dtype.is_float:
            acc = b.fadd(acc, b.fmul(lhs, rhs))
        elif self.out_dtype is DType.PRED:
            acc = b.or_(acc, b.and_(lhs, rhs))
        else:
            acc = b.add(acc, b.mul(lhs, rhs))
        b.store(acc, self.slot)

    def result(self) -> ir.Value:
        return round_to(self.ctx.builder, self.out_dtype, self.ctx.builder.load(self.slot))
