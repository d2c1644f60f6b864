"""Serial kernels: scatters, and sorts whose rows do not fit in shared memory (sort.py
takes the others), run their CPU kernel code on one GPU thread.  The sort kernel gets
no scratch row here, so a long full sort is an insertion sort, while a sort whose users
read only a prefix (TopK's) selects it (llvm/sort.py).

Their outputs are not elementwise functions of an index (a sorted element depends
on its whole row, a scattered one on every update), and the CPU kernels are
correct as they are; one thread keeps their order semantics (repeated scatter
targets combine in update order).  Slow for big operands: a parallel scatter (and a
sort merging rows longer than shared memory) would replace them where that matters.
"""

from __future__ import annotations

from ...ir import Instruction
from ..llvm.rules import KERNELS
from .context import GpuContext
from .kernel import KernelLaunch, begin_kernel, finish_kernel, operand_generators


def emit_serial(ctx: GpuContext, instr: Instruction, name: str, outputs) -> KernelLaunch:
    kernel = begin_kernel(ctx, instr, name, 1, 1, "serial")
    KERNELS[instr.op](ctx, instr, operand_generators(ctx, instr), outputs)
    return finish_kernel(ctx, instr, kernel)
