"""Sorts on the CPU: the target-neutral kernel (llvm/sort.py) given a scratch row.

Given scratch, the kernel may merge sort a row, O(n log n), where alone it could only
insertion-sort it (it picks by estimated cost; a TopK of small k selects without
scratch).  Sorts run one at a time on one thread, so one row's scratch at the
workspace's start serves every sort of the model; a nested plan (a while or
conditional's computation) shares the workspace too.
"""

from __future__ import annotations

from ...buffers import BufferPlan, Slice
from ...ir import Instruction, Op
from ..llvm.context import EmitContext, Gen
from ..llvm.kernels import kernel_outputs
from ..llvm.sort import scratch_bytes, sort_kernel


def sort_workspace(target, plan: BufferPlan, instr: Instruction) -> int:
    """The scratch row `instr` needs if it is a sort (0 otherwise)."""
    return scratch_bytes(instr, plan.schedule) if instr.op is Op.SORT else 0


def emit_sort(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> bool:
    """Emit a sort's kernel with its scratch row; False leaves other ops to the next."""
    if instr.op is not Op.SORT:
        return False
    size = scratch_bytes(instr, ctx.plan.schedule)
    assert ctx.workspace is not None and ctx.workspace.size >= size, "workspace unsized"
    scratch = Slice(ctx.workspace.kind, ctx.workspace.index, ctx.workspace.offset, size)
    sort_kernel(ctx, instr, operands, kernel_outputs(ctx, instr), scratch if size else None)
    return True
