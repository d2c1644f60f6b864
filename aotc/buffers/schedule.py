"""The order in which the entry computation's instructions run.

Candidates: a depth-first post-order from the root (operands before users,
each operand subtree finished before the next starts), which keeps few
values alive at once for the tree-like graphs of neural networks, and the
computation's own topological order.  Buffer assignment keeps whichever has
the lower peak.  Parameters come first, in number order.
"""

from __future__ import annotations

from ..ir import Computation, Instruction, Op


def schedule(computation: Computation) -> list[Instruction]:
    """A topological order of every instruction reachable from the root."""
    order = computation.post_order()
    parameters = computation.parameters
    return parameters + [i for i in order if i.op is not Op.PARAMETER]


def topological(computation: Computation) -> list[Instruction]:
    """The computation's own order, restricted to what the root reaches."""
    reachable = {id(i) for i in computation.post_order()}
    ordered = [i for i in computation.instructions if id(i) in reachable]
    return computation.parameters + [i for i in ordered if i.op is not Op.PARAMETER]


def candidate_schedules(computation: Computation) -> list[list[Instruction]]:
    return [schedule(computation), topological(computation)]
