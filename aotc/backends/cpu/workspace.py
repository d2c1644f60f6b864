"""The workspace of a program: the scratch its kernels take in turn, sized for the largest.

Each kind of kernel that needs scratch (contractions' packing, sorts' merge rows,
attention blocks) has a sizer: the bytes one instruction of a plan needs, 0 for the
others.  The workspace is the largest over every instruction of the plan and of its
nested (while, conditional) plans.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...buffers import BufferPlan
from ...ir import Instruction

# (target, plan, instruction) -> the workspace bytes that instruction's kernel needs
Sizer = Callable[[object, BufferPlan, Instruction], int]


def largest_workspace(target, plan: BufferPlan, sizers: Sequence[Sizer]) -> int:
    """The most workspace any kernel of `plan` (or of its nested plans) needs."""
    sizes = [sizer(target, plan, instr) for instr in plan.schedule for sizer in sizers]
    for nested in plan.nested.values():
        sizes += [largest_workspace(target, p, sizers) for p in nested.plans]
    return max(sizes, default=0)
