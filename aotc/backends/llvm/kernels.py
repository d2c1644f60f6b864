"""Kernels: opcodes that write their whole output themselves (sort, scatter, rng state).

Their output elements are not pure functions of the output index (a sorted
element depends on the whole row, a scattered one on every update), so they
have no element generator and cannot be fused into a consumer.  A kernel
`kernel(ctx, instr, operand_gens, outputs)` emits code that fills `outputs`
(one `(shape, slice)` per array of the result; the plan never places an output
over an operand, so a kernel may copy its operand there and work in place).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from ...buffers import Slice
from ...ir import Instruction, Shape
from .context import EmitContext, Gen
from .elemental import element_pointer
from .lltypes import storage_type, store_element
from .loops import loop_nest

Output = tuple[Shape, Slice]
Kernel = Callable[[EmitContext, Instruction, list[Gen], list[Output]], None]


def kernel_outputs(ctx: EmitContext, instr: Instruction) -> list[Output]:
    """(shape, slice) of each array of the result: itself, or its tuple's elements."""
    if isinstance(instr.shape, Shape):
        return [(instr.shape, ctx.plan.slice_of(instr))]
    outputs = []
    for k, element in enumerate(instr.shape.elements):
        assert isinstance(element, Shape), f"nested tuple in {instr.name}"
        outputs.append((element, ctx.plan.slice_of(instr, (k,))))
    return outputs


def output_pointer(ctx: EmitContext, output: Output, index: Sequence[ir.Value]) -> ir.Value:
    shape, where = output
    return element_pointer(ctx, ctx.slice_pointer(where), shape, index)


def copy_into(
    ctx: EmitContext,
    gens: Sequence[Gen],
    outputs: Sequence[Output],
    dims: Sequence[int] | None = None,
) -> None:
    """Store each generator's elements in its output (equal dims), one loop nest: all of
    them, or the leading block `dims`."""
    with loop_nest(ctx.builder, outputs[0][0].dims if dims is None else dims, "copy") as index:
        for gen, output in zip(gens, outputs):
            pointer = output_pointer(ctx, output, index)
            store_element(ctx.builder, output[0].dtype, gen(index), pointer)


def load_raw(ctx: EmitContext, output: Output, pointer: ir.Value) -> ir.Value:
    """An element's bytes as stored (moved without a round trip through registers)."""
    return ctx.builder.load(pointer, typ=storage_type(output[0].dtype))
