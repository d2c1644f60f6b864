"""Threads over output elements: the kernel form every instruction has.

Each thread computes elements of the output through the instruction's element
generator (the CPU backend's rules: fused producers inline, reductions and
contractions as loops) and stores them.  A block of BLOCK threads covers
`per_thread` runs of BLOCK consecutive elements, thread t the t-th of each run:
consecutive threads store consecutive elements, so stores coalesce, and a thread's
loads are independent, so they are in flight together (one element per thread
leaves the memory system idle between a thread's load and its store: about 60% of
an H100's bandwidth against 80% and more with four).  Multi-output fusions store
every output at once when they share a shape, else take one kernel per output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from llvmlite import ir

from ...buffers import Slice
from ...ir import Instruction, Op, Shape
from ..llvm.context import Gen
from ..llvm.elemental import bind_instructions, element_pointer, make_generator
from ..llvm.extents import inside as extent_inside
from ..llvm.extents import limits
from ..llvm.lltypes import I64, store_element
from ..llvm.loops import if_then
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
# elements per thread of large outputs; smaller ones take one, to keep blocks many
PER_THREAD = 4
MANY_ELEMENTS = 1 << 20

Output = tuple[Shape, Slice]


class Position(NamedTuple):
    index: list  # i64 values, one per dim
    inside: ir.Value | None  # i1: whether it is a real position (None: always)


def emit_elementwise(
    ctx: GpuContext, instr: Instruction, name: str, outputs: list[Output]
) -> list[KernelLaunch]:
    """One kernel storing every output, or one per output when their dims differ."""
    if len({shape.dims for shape, _ in outputs}) == 1:
        dims = outputs[0][0].dims
        kernel = _begin(ctx, instr, name, dims)
        gen = make_generator(ctx, instr, operand_generators(ctx, instr))
        positions = grid_elements(ctx, dims, elements_per_thread(dims))
        counts = limits(ctx, instr)
        if counts is None:
            compute_and_store(ctx, positions, gen, outputs)
        else:  # positions past the extents the readers need compute nothing
            b = ctx.builder
            assert b is not None
            for position in positions:
                inside = extent_inside(b, position.index, counts)
                if position.inside is not None:
                    inside = position.inside if inside is None else b.and_(inside, position.inside)
                with if_then(b, inside):
                    store_outputs(ctx, gen(position.index), outputs, position.index)
        return [finish_kernel(ctx, instr, kernel)]
    launches = []
    for k, output in enumerate(outputs):
        dims = output[0].dims
        kernel = _begin(ctx, instr, f"{name}_{k}", dims)
        gen = _element_generator(ctx, instr, k)
        compute_and_store(ctx, grid_elements(ctx, dims, elements_per_thread(dims)), gen, [output])
        launches.append(finish_kernel(ctx, instr, kernel))
    return launches


def elements_per_thread(dims: Sequence[int]) -> int:
    return PER_THREAD if math.prod(dims) >= MANY_ELEMENTS else 1


def _begin(ctx: GpuContext, instr: Instruction, name: str, dims: Sequence[int]):
    threads = thread_count(math.prod(dims), elements_per_thread(dims))
    return begin_kernel(ctx, instr, name, BLOCK, thread_count(threads, BLOCK), "elementwise")


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
    assert b is not None
    block_index = _widen(b, ctx.device.block_index(ctx), itype)
    thread = _widen(b, ctx.device.thread_index(ctx), itype)
    return b.add(
        b.mul(block_index, ir.Constant(itype, block), flags=["nuw"]), thread, flags=["nuw"]
    )


def grid_elements(ctx: GpuContext, dims: Sequence[int], per_thread: int = 1) -> list[Position]:
    """This thread's `per_thread` positions of `dims` (block b, thread t: b * BLOCK *
    per_thread + k * BLOCK + t), past-the-end ones clamped to the last, so that reading
    them is safe, with the check that a position is inside (None where all are)."""
    size = math.prod(dims)
    itype = index_type(size + BLOCK * per_thread)
    b = ctx.builder
    assert b is not None
    first = global_thread(ctx, BLOCK * per_thread, itype)
    last = ir.Constant(itype, size - 1)
    positions = []
    for k in range(per_thread):
        linear = b.add(first, ir.Constant(itype, k * BLOCK), flags=["nuw"])
        inside = None
        if size % (BLOCK * per_thread):
            inside = b.icmp_unsigned("<", linear, ir.Constant(itype, size))
            linear = b.select(inside, linear, last)
        positions.append(Position(split_position(ctx, linear, dims), inside))
    return positions


def compute_and_store(ctx: GpuContext, positions: list[Position], gen: Gen, outputs) -> None:
    """Every position's value first, then the stores (of those inside): the loads of all
    are issued before any store, which they might otherwise be ordered after."""
    values = [gen(p.index) for p in positions]
    for position, value in zip(positions, values):
        with if_then(ctx.builder, position.inside):
            store_outputs(ctx, value, outputs, position.index)


def split_position(ctx: GpuContext, linear: ir.Value, dims: Sequence[int]) -> list[ir.Value]:
    """Row-major multi-index (i64 values) of a linear position, divided in its own width
    (32-bit division is much cheaper on GPUs)."""
    b = ctx.builder
    assert b is not None
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
