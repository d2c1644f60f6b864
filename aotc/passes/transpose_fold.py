"""Transpose folding: a transpose feeding a dot becomes dot dimension numbers.

`dot(transpose(a, p), b)` reads `a` directly with each batch and contracting
dim renumbered through `p` -- exact, and one kernel and one buffer fewer.  It
applies when the transpose keeps the relative order of the free dims (they
set the output's dim order), which covers the common `x @ W^T` and
`Q @ K^T` patterns.
"""

from __future__ import annotations

from ..ir import DotDims, Instruction, Op
from .rewrite import InsertingBuilder, rewrite, rule


def _fold_side(operand: Instruction, batch, contracting):
    """(source, batch, contracting) with the transpose folded, or None."""
    if operand.op is not Op.TRANSPOSE:
        return None
    perm = operand.dimensions
    free = [i for i in range(len(perm)) if i not in batch and i not in contracting]
    mapped_free = [perm[i] for i in free]
    if mapped_free != sorted(mapped_free):
        return None
    return operand.operands[0], [perm[i] for i in batch], [perm[i] for i in contracting]


@rule(Op.DOT)
def fold_transpose_into_dot(b: InsertingBuilder, instr: Instruction):
    # dot(transpose(a), y) -> dot(a, y) with renumbered dims (and likewise for the rhs)
    lhs, rhs = instr.operands
    d = instr.dot
    new_lhs = _fold_side(lhs, d.lhs_batch, d.lhs_contracting)
    new_rhs = _fold_side(rhs, d.rhs_batch, d.rhs_contracting)
    if new_lhs is None and new_rhs is None:
        return None
    lhs, lhs_batch, lhs_contracting = new_lhs or (lhs, d.lhs_batch, d.lhs_contracting)
    rhs, rhs_batch, rhs_contracting = new_rhs or (rhs, d.rhs_batch, d.rhs_contracting)
    dims = DotDims(lhs_batch, rhs_batch, lhs_contracting, rhs_contracting)
    return b.dot(lhs, rhs, dims, instr.array_shape.dtype)


class TransposeFolding:
    name = "transpose_fold"

    def run(self, module) -> bool:
        return rewrite(module, [fold_transpose_into_dot])
