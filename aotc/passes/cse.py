"""Common subexpression elimination: one instruction per distinct value.

Two instructions are the same value when their structural keys
(`Instruction.key()`: opcode, shape, operands, attributes, a digest of the
literal's bytes, which are then compared) are equal; operands of commutative ops are compared as a set.
"""

from __future__ import annotations

from ..ir import Instruction, Module, Op, Trait
from ..ir.module import same_literal


class CommonSubexpressionElimination:
    name = "cse"

    def run(self, module: Module) -> bool:
        changed = False
        for computation in module.computations:
            seen: dict[tuple, Instruction] = {}
            # duplicate -> the first instruction with its key; later users read through it
            replaced: dict[Instruction, Instruction] = {}
            for instr in list(computation.instructions):
                if replaced:
                    instr.operands = [replaced.get(o, o) for o in instr.operands]
                # parameters are distinct inputs; side effects happen once per instruction
                if instr.op is Op.PARAMETER or Trait.SIDE_EFFECT in instr.op.traits:
                    continue
                key = instr.key()
                if Trait.COMMUTATIVE in instr.op.traits:
                    key = key[:2] + (tuple(sorted(key[2])),) + key[3:]
                first = seen.setdefault(key, instr)
                if first is not instr and (
                    instr.literal is None
                    or (first.literal is not None and same_literal(first.literal, instr.literal))
                ):
                    replaced[instr] = first
            if replaced:
                changed = True
                computation.replace_uses(replaced)
                computation.remove_dead()
        return changed
