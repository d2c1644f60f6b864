"""Alias scopes: telling LLVM that a kernel's stores into its output never touch the
buffers of its other operands.

The kernels reach every arena buffer through one pointer, so LLVM must assume that a
store into the output may change any operand it reads; it then reloads loop-invariant
operand values after each store and does not vectorize the loop (a GEMM epilogue reading
a per-row value from the arena ran scalar, its exp's ldexp a libcall per element: 6x
slower).  The buffer plan knows better: a store tagged with the kernel's output scope
(`alias.scope`) and a load of a disjoint operand tagged as outside it (`noalias`) are
independent, which LLVM's scoped-noalias analysis then uses.
"""

from __future__ import annotations

from llvmlite import ir


class OutputScope:
    """One kernel's output as an alias scope, named after the kernel (unique in the
    module): kernels inlined into one caller keep scopes of their own, so no claim
    spans two kernels."""

    def __init__(self, module: ir.Module, kernel: str):
        name = f"aotc.{kernel}"
        domain = module.add_metadata([ir.MetaDataString(module, name)])
        scope = module.add_metadata([ir.MetaDataString(module, f"{name}.output"), domain])
        self.scopes = module.add_metadata([scope])

    def store(self, instruction: ir.Instruction) -> None:
        """Mark a store into the output."""
        instruction.set_metadata("alias.scope", self.scopes)

    def load(self, instruction: ir.Instruction) -> None:
        """Mark a load from a buffer that shares no byte with the output."""
        instruction.set_metadata("noalias", self.scopes)
