"""What each kernel of a profiled build is, before it runs: its ops, its form, the bytes
it moves and the floating-point operations it computes, in the counters' order.

Bytes are those of its distinct operands read and its results written (what a kernel
that reads and writes each once moves; `aotc inspect`'s count); FLOPs are
`aotc.ir.cost.kernel_flops` (a fusion's members as often as its kernel evaluates them).
A while or conditional counts its operands and results only, not its computations'
kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import report
from ..driver import CompiledModel


@dataclass(frozen=True)
class KernelCost:
    """One kernel of a profiled build, as compiled."""

    name: str  # the instruction's name, e.g. "fusion.12"
    ops: tuple[str, ...]  # the opcodes it computes, each once, in order
    form: str  # how the backend emits it ("winograd", "gemm"...), or ""
    bytes_moved: int  # per call
    flops: int  # per call

    @property
    def label(self) -> str:
        """Its ops joined by '+', and its form in brackets: 'convolution+add [gemm]'."""
        ops = "+".join(self.ops)
        return f"{ops} [{self.form}]" if self.form else ops


def kernel_costs(compiled: CompiledModel) -> list[KernelCost]:
    """The kernels of a profiled build, in the order of its counters."""
    instructions = {instr.name: instr for instr in compiled.plan.schedule}
    forms = compiled.kernel_forms()
    costs = []
    for name in compiled.profile_kernels:
        info = report.kernel_info(instructions[name])  # FLOPs: aotc.ir.cost.kernel_flops
        costs.append(
            KernelCost(
                name,
                tuple(dict.fromkeys(info.ops)),
                forms.get(name, ""),
                info.bytes_read + info.bytes_written,
                info.flops,
            )
        )
    return costs
