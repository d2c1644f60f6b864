"""rng-get-and-update-state: a counter per instruction in the object's data.

Each run reads the counter and adds `delta` in one atomic step, so runs draw fresh
random numbers, also when several run at once (each with its own scratch).  The
counter starts at 0 when the program is loaded; its high word stays 0 (2^64 draws
would take centuries).  On the GPU the same code runs on one thread, the counter
living in the module's global memory.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import DType, Instruction, Op
from .context import EmitContext, Gen
from .kernels import Kernel, Output, output_pointer
from .lltypes import I64, i64, store_element


def rng_state_kernel(
    ctx: EmitContext, instr: Instruction, operands: list[Gen], outputs: list[Output]
) -> None:
    b = ctx.builder
    counter = ir.GlobalVariable(ctx.module, I64, f"{ctx.prefix}.{instr.name}.counter")
    counter.linkage = "internal"
    counter.initializer = i64(0)
    before = b.atomic_rmw("add", counter, i64(instr.index), "monotonic")
    (output,) = outputs
    store_element(b, DType.U64, before, output_pointer(ctx, output, [i64(0)]))
    store_element(b, DType.U64, i64(0), output_pointer(ctx, output, [i64(1)]))


RNG_KERNELS: dict[Op, Kernel] = {Op.RNG_GET_AND_UPDATE_STATE: rng_state_kernel}
