"""What a compiled model consists of: kernels with their cost, for `aotc inspect`.

Costs are estimates from shapes: bytes read (each distinct operand once) and
written, and floating-point operations as aotc/ir/cost.py counts them (a fused
kernel's members as often as it evaluates them).
"""

from __future__ import annotations

from dataclasses import dataclass

from .buffers import BufferPlan
from .ir import Instruction, Op
from .ir.cost import kernel_flops
from .ir.ops import NO_CODE_OPS


@dataclass(frozen=True)
class KernelInfo:
    name: str
    ops: tuple[str, ...]  # the opcodes it computes (fused ones included)
    bytes_read: int
    bytes_written: int
    flops: int


def kernels(plan: BufferPlan) -> list[KernelInfo]:
    """One row per scheduled instruction that emits code, in execution order."""
    return [kernel_info(instr) for instr in plan.schedule if instr.op not in NO_CODE_OPS]


def kernel_info(instr: Instruction) -> KernelInfo:
    """The row of the kernel computing `instr` (a fusion: its fused computation)."""
    computed = _computed(instr)
    operands = {id(o): o for o in instr.operands}.values()
    return KernelInfo(
        instr.name,
        tuple(i.op.text for i in computed),
        sum(o.shape.nbytes for o in operands),
        instr.shape.nbytes,
        kernel_flops(instr),
    )


def _computed(instr: Instruction) -> list[Instruction]:
    """The instructions a kernel computes: a fusion's members, those of fusions in it."""
    if instr.op is not Op.FUSION:
        return [instr]
    body = instr.called[0].instructions
    return [c for i in body if i.op not in (Op.PARAMETER, Op.CONSTANT) for c in _computed(i)]


def kernel_table(rows: list[KernelInfo], how: dict[str, str] | None = None) -> str:
    """Plain-text table of kernels, with a total line; `how` (kernel name -> the
    backend's form of it, e.g. "winograd") tags the kernels it names."""
    lines = [f"{'kernel':<32} {'read B':>12} {'written B':>12} {'FLOPs':>14}  ops [how]"]
    for r in rows:
        ops = ",".join(dict.fromkeys(r.ops))
        if how and r.name in how:
            ops += f" [{how[r.name]}]"
        name = r.name[:32]
        lines.append(f"{name:<32} {r.bytes_read:>12,} {r.bytes_written:>12,} {r.flops:>14,}  {ops}")
    total_flops = sum(r.flops for r in rows)
    lines.append(f"{len(rows)} kernels, {total_flops:,} FLOPs")
    return "\n".join(lines)
