"""The order in which the entry computation's instructions run.

v1 uses a depth-first post-order from the root (operands before users,
each operand subtree finished before the next starts), which keeps few
values alive at once for the tree-like graphs of neural networks; parameters
come first, in number order, so their slices are known from the start.
"""

from __future__ import annotations

from ..ir import Computation, Instruction, Op


def schedule(computation: Computation) -> list[Instruction]:
    """A topological order of every instruction reachable from the root."""
    order = computation.post_order()
    parameters = computation.parameters
    return parameters + [i for i in order if i.op is not Op.PARAMETER]
