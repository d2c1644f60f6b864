"""Internal LLVM functions emitted once per module and called by every kernel that needs
them (the GEMM micro-kernel and packers, gemv, im2col, the direct and plane
convolutions' tile kernels): one copy per module keeps the compile time flat however
many kernels a model has.
"""

from __future__ import annotations

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.lltypes import VOID


def shared_function(ctx: EmitContext, name: str, args: list[ir.Type]):
    """(function, builder or None): the internal function `name`; a builder at its entry
    when it still has to be emitted."""
    existing = ctx.module.globals.get(name)
    if existing is not None:
        return existing, None
    function = ir.Function(ctx.module, ir.FunctionType(VOID, args), name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")  # one copy per module keeps compile time flat
    return function, ir.IRBuilder(function.append_basic_block("entry"))
