"""dynamic-slice and dynamic-update-slice: elemental, with run-time starts.

Each start is read as a scalar and clamped so the block lies inside the
operand (XLA); an output element then maps to one operand (or update)
element by index arithmetic, as the static slice does.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import DType, Instruction, Op
from .context import EmitContext, Gen, Rule
from .lltypes import I64, i64
from .loops import branch_value
from .window import all_of


def clamped_start(ctx: EmitContext, dtype: DType, value: ir.Value, highest: int) -> ir.Value:
    """A start index of integer `dtype` clamped to [0, highest], as i64."""
    b = ctx.builder
    if dtype.is_unsigned_int:  # clamp before widening: u64 values past 2^63 are large
        if highest < (1 << value.type.width) - 1:
            value = ctx.intrinsic("llvm.umin", [value, ir.Constant(value.type, highest)])
        return b.zext(value, I64) if value.type.width < 64 else value
    if value.type.width < 64:
        value = b.sext(value, I64)
    value = ctx.intrinsic("llvm.smax", [value, i64(0)])
    return ctx.intrinsic("llvm.smin", [value, i64(highest)])


def _starts(ctx: EmitContext, instr: Instruction, gens: list[Gen], sizes) -> list[ir.Value]:
    """The values of the start operands `gens`, clamped so a block of `sizes` fits."""
    dims = instr.operands[0].array_shape.dims
    dtype = instr.operands[-1].array_shape.dtype
    return [clamped_start(ctx, dtype, g([]), d - n) for g, d, n in zip(gens, dims, sizes)]


def dynamic_slice_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    source, *starts = operands

    def gen(index):
        b = ctx.builder
        begin = _starts(ctx, instr, starts, instr.dynamic_slice_sizes)
        return source([b.add(s, i) for s, i in zip(begin, index)])

    return gen


def dynamic_update_slice_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    """The update's element where the index falls in the placed update, else the operand's."""
    source, update, *starts = operands
    update_dims = instr.operands[1].array_shape.dims

    def gen(index):
        b = ctx.builder
        if 0 in update_dims:
            return source(index)
        begin = _starts(ctx, instr, starts, update_dims)
        offset = [b.sub(i, s) for i, s in zip(index, begin)]
        # unsigned: an index before the start wraps to a huge offset
        inside = all_of(b, [b.icmp_unsigned("<", o, i64(n)) for o, n in zip(offset, update_dims)])
        if inside is None:  # a scalar operand
            return update(offset)
        return branch_value(b, inside, lambda: update(offset), lambda: source(index))

    return gen


DYNAMIC_RULES: dict[Op, Rule] = {
    Op.DYNAMIC_SLICE: dynamic_slice_rule,
    Op.DYNAMIC_UPDATE_SLICE: dynamic_update_slice_rule,
}
