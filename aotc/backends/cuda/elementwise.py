"""One thread per output element: the kernel form every instruction has.

Thread `block * BLOCK + tid` computes the element at that row-major position
of the output through the instruction's element generator (the CPU backend's
rules: fused producers inline, reductions and contractions as loops) and
stores it; consecutive threads store consecutive elements, so stores coalesce.
Multi-output fusions store every output at once when they share a shape, else
take one kernel per output.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from llvmlite import ir

from ...buffers import Slice
from ...ir import Instruction, Op, Shape
from ..cpu.elemental import Gen, bind_instructions, element_pointer, make_generator
from ..cpu.lltypes import I64, store_element
from ..cpu.loops import if_then
from .context import GpuContext
from .kernel import (
    KernelLaunch,
    begin_kernel,
    finish_kernel,
    index_type,
    operand_generators,
    thread_count,
)

BLOCK = 256

Output = tuple[Shape, Slice]


def emit_elementwise(
    ctx: GpuContext, instr: Instruction, name: str, outputs: list[Output]
) -> list[KernelLaunch]:
    """One kernel storing every output, or one per output when their dims differ."""
    if len({shape.dims for shape, _ in outputs}) == 1:
        kernel = begin_kernel(ctx, instr, name, BLOCK, thread_count(outputs[0][0].size, BLOCK),
                              "elementwise")  # fmt: skip
        gen = make_generator(ctx, instr, operand_generators(ctx, instr))
        with grid_elements(ctx, outputs[0][0].dims) as index:
            store_outputs(ctx, gen(index), outputs, index)
        return [finish_kernel(ctx, instr, kernel)]
    launches = []
    for k, output in enumerate(outputs):
        kernel = begin_kernel(ctx, instr, f"{name}_{k}", BLOCK,
                              thread_count(output[0].size, BLOCK), "elementwise")  # fmt: skip
        gen = _element_generator(ctx, instr, k)
        with grid_elements(ctx, output[0].dims) as index:
            store_outputs(ctx, gen(index), [output], index)
        launches.append(finish_kernel(ctx, instr, kernel))
    return launches


def _element_generator(ctx: GpuContext, instr: Instruction, k: int) -> Gen:
    """Element k of a tuple-valued instruction; for a fused tuple root, its k-th operand's."""
    params = operand_generators(ctx, instr)
    if instr.op is Op.FUSION and instr.called[0].root.op is Op.TUPLE:
        fused = instr.called[0]
        return bind_instructions(ctx, fused, params)[id(fused.root.operands[k])]
    gen = make_generator(ctx, instr, params)
    return lambda index: gen(index)[k]


def store_outputs(ctx: GpuContext, values, outputs: Sequence[Output], index) -> None:
    """Store a generator's value (a tuple for several outputs) at `index` of each output."""
    if len(outputs) == 1 and not isinstance(values, tuple):
        values = (values,)
    for (shape, where), value in zip(outputs, values):
        pointer = element_pointer(ctx, ctx.slice_pointer(where), shape, index)
        store_element(ctx.builder, shape.dtype, value, pointer)


def global_thread(ctx: GpuContext, block: int, itype: ir.IntType) -> ir.Value:
    """block index * block + thread index, in `itype`."""
    b = ctx.builder
    block_index = _widen(b, ctx.device.block_index(ctx), itype)
    thread = _widen(b, ctx.device.thread_index(ctx), itype)
    return b.add(b.mul(block_index, ir.Constant(itype, block), flags=["nuw"]), thread,
                 flags=["nuw"])  # fmt: skip


@contextmanager
def grid_elements(ctx: GpuContext, dims: Sequence[int], block: int = BLOCK) -> Iterator[list]:
    """The body runs in each thread whose global number is a position of `dims`, with
    that position's multi-index (i64 values)."""
    size = 1
    for d in dims:
        size *= d
    itype = index_type(size)
    linear = global_thread(ctx, block, itype)
    inside = ctx.builder.icmp_unsigned("<", linear, ir.Constant(itype, size))
    with if_then(ctx.builder, inside):
        yield split_position(ctx, linear, dims)


def split_position(ctx: GpuContext, linear: ir.Value, dims: Sequence[int]) -> list[ir.Value]:
    """Row-major multi-index (i64 values) of a linear position, divided in its own width
    (32-bit division is much cheaper on GPUs)."""
    b = ctx.builder
    index = []
    for extent in reversed(dims):
        if extent == 1:
            index.append(ir.Constant(I64, 0))
            continue
        divisor = ir.Constant(linear.type, extent)
        index.append(_widen(b, b.urem(linear, divisor), I64))
        linear = b.udiv(linear, divisor)
    return index[::-1]


def _widen(b: ir.IRBuilder, value: ir.Value, ty: ir.IntType) -> ir.Value:
    return value if value.type == ty else b.zext(value, ty)
