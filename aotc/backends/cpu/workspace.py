"""The workspace of a program: the scratch its kernels take in turn, sized for the largest.

Each kind of kernel that needs scratch (contractions' packing, sorts' merge rows,
attention blocks) has a sizer: the bytes one instruction of a plan needs, 0 for the
others.  The driver plans each kernel's need into the arena as its temporary, live only
while it runs (`BufferPlan.temporary`); what a kernel needs beyond its temporary (none,
unless the plan changed since) comes from the workspace after the arena, sized for the
largest such need.

Kernels that can work in blocks (Winograd convolutions in bands of tile rows) size
their temporary to `temporary_budget`: the bytes the plan has free while they run, so
that the temporary does not raise the plan's peak where a block fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ...buffers import BufferPlan
from ...ir import Instruction

# (target, plan, instruction) -> the workspace bytes that instruction's kernel needs
Sizer = Callable[[object, BufferPlan, Instruction], int]


def each_kernel(plan: BufferPlan) -> Iterator[tuple[BufferPlan, Instruction]]:
    """(its plan, instruction) for each step of `plan` and of its nested plans."""
    for instr in plan.schedule:
        yield plan, instr
    for nested in plan.nested.values():
        for inner in nested.plans:
            yield from each_kernel(inner)


def kernel_workspaces(target, plan: BufferPlan, sizers: Sequence[Sizer]) -> dict[int, int]:
    """id(instruction) -> the workspace its kernel needs, for each kernel of `plan` (and
    of its nested plans) that needs some."""
    found = {}
    for frame, instr in each_kernel(plan):
        size = max((sizer(target, frame, instr) for sizer in sizers), default=0)
        if size:
            found[id(instr)] = size
    return found


@dataclass(frozen=True)
class Budget:
    """What a kernel's temporary may take: `free`, the arena bytes not live at its step
    below the plan's peak before temporaries (the first plan's, which the kernels were
    sized in: the same when they are emitted); `strict`: a kernel takes a slower form to
    fit it (`BufferPlan.fit_forms`), else only fewer bytes of its own form."""

    free: int
    strict: bool = True


def temporary_budget(plan: BufferPlan, instr: Instruction) -> Budget:
    """The budget of `instr`'s kernel in `plan`."""
    # strict only in a plan the driver sized the kernels in (its rooms): a plan made
    # without them puts every kernel's need in the workspace after the arena anyway
    return Budget(plan.headroom(instr), plan.fit_forms and bool(plan.rooms))
