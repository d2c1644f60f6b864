"""Constant folding: instructions whose operands are all constants become
constants, computed by the IR evaluator.

A size cap keeps folding from bloating the weights: a result is folded only
if it is small, or no larger than the constants it consumes (folding a
broadcast of a scalar into a big array would trade a kernel for megabytes).
Widening converts of 8-bit integer constants stay (`widens_bytes`): the
weights stay 8-bit in the object, and integer GEMMs read them as bytes.
"""

from __future__ import annotations

from ..ir import Instruction, Module, Op, Trait
from ..ir.evaluate import evaluate_constant
from ..ir.fusion_kinds import widens_bytes
from ..ir.types import Shape
from .rewrite import InsertingBuilder

SMALL_BYTES = 4096

# never folded: leaves, structure, ops whose result is cheaper left unfolded, and control
# flow (a loop over constants may still run for long; its body's constants fold inside)
_KEEP = frozenset(
    {
        Op.PARAMETER,
        Op.CONSTANT,
        Op.TUPLE,
        Op.GET_TUPLE_ELEMENT,
        Op.FUSION,
        Op.WHILE,
        Op.CONDITIONAL,
        Op.CALL,
    }
)


class ConstantFolding:
    name = "fold"

    def run(self, module: Module) -> bool:
        changed = False
        for computation in module.computations:
            changed |= self._fold(module, computation)
        return changed

    def _fold(self, module: Module, computation) -> bool:
        builder = InsertingBuilder(module, computation)
        # the constants each constant-only value is computed from (a set: a constant reached
        # along many paths counts once); values too big to fold stay here, so that a
        # smaller user of them can still fold
        sources: dict[int, frozenset[Instruction]] = {}
        # folded instruction -> its constant; a user reads through it when it is reached
        replaced: dict[Instruction, Instruction] = {}
        for instr in list(computation.instructions):
            if replaced:
                instr.operands = [replaced.get(o, o) for o in instr.operands]
            if instr.op is Op.CONSTANT:
                sources[id(instr)] = frozenset((instr,))
                continue
            if instr.op in _KEEP or Trait.SIDE_EFFECT in instr.op.traits:
                continue
            if not isinstance(instr.shape, Shape):
                continue
            # (an iota has no operands: it folds when small)
            if not all(id(o) in sources for o in instr.operands):
                continue
            reached = frozenset().union(*(sources[id(o)] for o in instr.operands))
            sources[id(instr)] = reached
            size = instr.shape.nbytes
            if size > SMALL_BYTES and size > sum(c.shape.nbytes for c in reached):
                continue
            if widens_bytes(instr):
                continue
            value = evaluate_constant(instr)
            if value is None:
                continue
            builder.origin = instr.origin
            constant = builder.constant(value, instr.shape.dtype)
            replaced[instr] = constant
            sources[id(constant)] = frozenset((constant,))
        folded = bool(replaced)
        if folded:
            computation.replace_uses(replaced)
            computation.sort_topologically()
            computation.remove_dead()
        return folded
