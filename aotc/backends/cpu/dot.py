"""The dot rule (general dot: batch, free and contracting dims), as simple loops.

Output dims are [batch..., lhs free..., rhs free...]; each element is a loop
over the contracting dims.  Tiled, vectorized kernels replace this later.
"""

from __future__ import annotations

from ...ir import Instruction, Op
from .accumulate import MacAccumulator
from .context import EmitContext
from .elemental import Gen, Rule
from .loops import loop_nest


def dot_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    lhs, rhs = operands
    dims = instr.dot
    lhs_shape, rhs_shape = instr.operands[0].shape, instr.operands[1].shape
    lhs_free = [d for d in range(lhs_shape.rank) if d not in dims.lhs_batch + dims.lhs_contracting]
    rhs_free = [d for d in range(rhs_shape.rank) if d not in dims.rhs_batch + dims.rhs_contracting]
    contracting_extents = [lhs_shape.dims[d] for d in dims.lhs_contracting]
    batches = len(dims.lhs_batch)

    def gen(index):
        batch = index[:batches]
        lhs_part = index[batches : batches + len(lhs_free)]
        rhs_part = index[batches + len(lhs_free) :]
        acc = MacAccumulator(ctx, lhs_shape.dtype, instr.array_shape.dtype)
        with loop_nest(ctx.builder, contracting_extents, "k") as inner:
            lhs_index = [None] * lhs_shape.rank
            rhs_index = [None] * rhs_shape.rank
            for group, values in (
                ((dims.lhs_batch, dims.rhs_batch), batch),
                ((dims.lhs_contracting, dims.rhs_contracting), inner),
            ):
                for lhs_dim, rhs_dim, value in zip(*group, values):
                    lhs_index[lhs_dim] = value
                    rhs_index[rhs_dim] = value
            for d, value in zip(lhs_free, lhs_part):
                lhs_index[d] = value
            for d, value in zip(rhs_free, rhs_part):
                rhs_index[d] = value
            acc.add_product(lhs(lhs_index), rhs(rhs_index))
        return acc.result()

    return gen


DOT_RULES: dict[Op, Rule] = {Op.DOT: dot_rule}
