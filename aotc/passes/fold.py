"""Constant folding: instructions whose operands are all constants become
constants, computed by the IR evaluator.

A size cap keeps folding from bloating the weights: a result is folded only
if it is small, or no larger than the constants it consumes (folding a
broadcast of a scalar into a big array would trade a kernel for megabytes).
"""

from __future__ import annotations

from ..ir import Module, Op
from ..ir.evaluate import evaluate_constant
from ..ir.types import Shape
from .rewrite import InsertingBuilder

SMALL_BYTES = 4096
MAX_BYTES = 1 << 24

# never folded: leaves, structure, and ops whose result is cheaper left unfolded
_KEEP = frozenset({Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.FUSION})


class ConstantFolding:
    name = "fold"

    def run(self, module: Module) -> bool:
        changed = False
        for computation in module.computations:
            builder = InsertingBuilder(module, computation)
            for instr in list(computation.instructions):
                if not self._foldable(instr):
                    continue
                value = evaluate_constant(instr)
                if value is None:
                    continue
                builder.origin = instr.origin
                folded = builder.constant(value, instr.shape.dtype)
                computation.replace_all_uses(instr, folded)
                changed = True
            if changed:
                computation.sort_topologically()
                computation.remove_dead()
        return changed

    @staticmethod
    def _foldable(instr) -> bool:
        if instr.op in _KEEP or not isinstance(instr.shape, Shape):
            return False
        # (an iota has no operands: it folds when small)
        if not all(o.op is Op.CONSTANT for o in instr.operands):
            return False
        size = instr.shape.nbytes
        consumed = sum(o.shape.nbytes for o in instr.operands)
        return size <= SMALL_BYTES or (size <= consumed and size <= MAX_BYTES)
