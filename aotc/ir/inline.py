"""The call inliner: every `call` replaced by a copy of its callee (XLA's CallInliner).

Buffer assignment and the backends never see `call`; frontends and the pass
pipeline (first, at every level) run this.  A callee left without callers is
dropped from the module.
"""

from __future__ import annotations

import dataclasses

from .module import Computation, Instruction, Module
from .ops import Op


def inline_calls(module: Module) -> bool:
    """Inline every `call` in every computation; True if there was one."""
    callees: list[Computation] = []
    # callees first: a callee's own calls are already inlined when it is copied
    for comp in module.computations_in_call_order():
        calls = [i for i in comp.instructions if i.op is Op.CALL]
        if not calls:
            continue
        # in order, so that a call reading an earlier one copies its callee onto the
        # earlier one's result; placed in one pass over the computation at the end
        inlined = {call: _inline(module, comp, call) for call in calls}
        comp.instructions = [c for i in comp.instructions for c in inlined.get(i, (i,))]
        callees += [call.called[0] for call in calls]
    if not callees:
        return False
    still_called = {
        id(c) for comp in module.computations for i in comp.instructions for c in i.called
    }
    dropped = {id(c) for c in callees if id(c) not in still_called and c is not module.entry}
    module.computations = [c for c in module.computations if id(c) not in dropped]
    return True


def copy_instruction(module: Module, instr: Instruction, operands) -> Instruction:
    """A copy of `instr` reading `operands`, named anew in `module` (not yet placed in a
    computation)."""
    return dataclasses.replace(instr, operands=list(operands), name=module.unique_name(instr.name))


def _inline(module: Module, caller: Computation, call: Instruction) -> list[Instruction]:
    """Copies of the callee's live instructions, to take `call`'s place in `caller` (its
    uses read the root's now, and it reads nothing)."""
    callee = call.called[0]
    copies: dict[int, Instruction] = {}
    inserted: list[Instruction] = []
    for instr in callee.post_order():
        if instr.op is Op.PARAMETER:
            copies[id(instr)] = call.operands[instr.index]
            continue
        copy = copy_instruction(module, instr, [copies[id(o)] for o in instr.operands])
        copies[id(instr)] = copy
        inserted.append(copy)
    caller.replace_all_uses(call, copies[id(callee.root)])
    call.operands = []
    return inserted
