"""Kernel infrastructure: defining a kernel, binding its buffers, its launch record.

Every kernel takes the same parameters: the arena, the weights, then the caller's
inputs and outputs (device pointers); `begin_kernel` points the emission context at a
new kernel and makes `ctx.slice_pointer` reach each buffer through them.  The cost
estimates (bytes, FLOPs) go into the launch record for the header's kernel table and
bench/gpu.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ...buffers import BufferKind, BufferPlan, Slice
from ...errors import UnsupportedError
from ...ir import Instruction, Op, Shape
from ..llvm.context import Gen
from ..llvm.elemental import constant_rule
from ..llvm.lltypes import I64
from .context import GpuContext
from .packing import slice_generator


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch of the program, in run order."""

    name: str  # the kernel's symbol in the PTX/cubin
    instruction: str  # the instruction it computes
    kind: str  # elementwise, reduction, row, gemm, sort or serial
    grid: int  # blocks (1-D grid)
    block: int  # threads per block (1-D)
    shared_bytes: int  # static shared memory per block
    cooperative: bool  # its threads work together (barriers, warp shuffles)
    bytes: int  # bytes it must at least read and write
    flops: int  # arithmetic operations it performs (estimate)


@dataclass
class Kernel:
    """A kernel being emitted: its function and launch configuration."""

    name: str
    function: ir.Function
    block: int
    grid: int
    kind: str
    cooperative: bool = False
    shared_bytes: int = 0

    def shared(self, ctx: GpuContext, size: int, align: int = 16) -> ir.Value:
        """A new array of `size` bytes in the block's shared memory (a generic pointer)."""
        offset = -(-self.shared_bytes // align) * align
        self.shared_bytes = offset + size
        self.cooperative = True
        return ctx.device.shared_array(ctx, self.name, offset, size)


def begin_kernel(
    ctx: GpuContext, instr: Instruction, name: str, block: int, grid: int, kind: str
) -> Kernel:
    """Define kernel `name` and point the context's builder and buffers at it."""
    function = ctx.device.define_kernel(ctx.module, name, 2 + ctx.inputs + ctx.outputs, block)
    kernel = Kernel(name, function, block, grid, kind)
    ctx.kernel = kernel
    ctx.builder = ir.IRBuilder(function.append_basic_block("entry"))
    arena, weights, *callers = function.args
    inputs = ctx.inputs
    bases = {(BufferKind.ARENA, 0): arena, (BufferKind.CONSTANT, 0): weights}
    for i, arg in enumerate(callers):
        key = (BufferKind.PARAMETER, i) if i < inputs else (BufferKind.OUTPUT, i - inputs)
        bases[key] = arg

    def slice_pointer(where: Slice) -> ir.Value:
        return ctx.byte_pointer(bases[(where.kind, where.index)], where.offset)

    ctx.slice_pointer = slice_pointer
    return kernel


def exit_unless(ctx: GpuContext, condition: ir.Value | None) -> None:
    """Return from the kernel where `condition` (an i1 the same for every thread of the
    block, so that no barrier waits for a thread that left) is false: a block with
    nothing the call needs; the emission goes on where it is true (None: always)."""
    if condition is None:
        return
    b = ctx.builder
    assert b is not None
    go = b.append_basic_block("needed")
    leave = b.append_basic_block("unneeded")
    b.cbranch(condition, go, leave)
    b.position_at_end(leave)
    b.ret_void()
    b.position_at_end(go)


def finish_kernel(ctx: GpuContext, instr: Instruction, kernel: Kernel) -> KernelLaunch:
    ctx.builder.ret_void()
    bytes_moved, flops = cost(ctx.plan, instr)
    return KernelLaunch(
        kernel.name,
        instr.name,
        kernel.kind,
        kernel.grid,
        kernel.block,
        kernel.shared_bytes,
        kernel.cooperative,
        bytes_moved,
        flops,
    )


def operand_generators(ctx: GpuContext, instr: Instruction) -> list[Gen]:
    """Operands are read from their buffers (packed constants by their fields: every
    kernel reads its operands here), except one-element constants (immediates)."""
    gens = []
    for operand in instr.operands:
        if operand.op is Op.CONSTANT and operand.array_shape.size == 1:
            gens.append(constant_rule(ctx, operand, []))
        else:
            gens.append(slice_generator(ctx, ctx.plan.slice_of(operand), operand.array_shape))
    return gens


def output_slices(plan: BufferPlan, instr: Instruction) -> list[tuple[Shape, Slice]]:
    """(shape, slice) of each array of the result: itself, or its tuple's elements."""
    if isinstance(instr.shape, Shape):
        return [(instr.shape, plan.slice_of(instr))]
    elements = instr.shape.elements
    if not all(isinstance(e, Shape) for e in elements):
        raise UnsupportedError(f"{instr.name}: nested tuples are not supported on CUDA")
    return [(e, plan.slice_of(instr, (k,))) for k, e in enumerate(elements)]


def thread_count(work: int, block: int) -> int:
    """Blocks of `block` threads covering `work` items."""
    return max(1, math.ceil(work / block))


def index_type(extent: int) -> ir.IntType:
    """i32 where linear positions fit (cheaper division on GPUs), else i64."""
    return ir.IntType(32) if extent < 2**31 else I64


# -- cost estimates (for the kernel table and bench/gpu.py) -------------------------


def cost(plan: BufferPlan, instr: Instruction) -> tuple[int, int]:
    """(bytes read and written at least, arithmetic operations) of `instr`'s kernel."""
    read = {}
    for operand in instr.operands:
        if operand.op is Op.CONSTANT and operand.array_shape.size == 1:
            continue
        for where in _array_slices(plan, operand):
            read[(where.kind, where.index, where.offset)] = where.size
    written = sum(s.nbytes for s, _ in output_slices(plan, instr))
    return sum(read.values()) + written, _flops(instr)


def _array_slices(plan: BufferPlan, instr: Instruction) -> list[Slice]:
    if isinstance(instr.shape, Shape):
        return [plan.slice_of(instr)]
    return [plan.slice_of(instr, (k,)) for k in range(len(instr.shape.elements))]


def _flops(instr: Instruction) -> int:
    """2*M*N*K for contractions, else elementwise and reduction steps per element."""
    total = 0
    body = instr.called[0].instructions if instr.op is Op.FUSION else [instr]
    for member in body:
        if member.op is Op.DOT:
            lhs = member.operands[0].shape
            depth = math.prod(lhs.dims[d] for d in member.dot.lhs_contracting)
            total += 2 * member.array_shape.size * depth
        elif member.op is Op.CONVOLUTION:
            kernel = member.operands[1].shape
            taps = math.prod(member.window.size)
            depth = kernel.dims[member.conv.kernel_input_feature] * taps
            total += 2 * member.array_shape.size * depth
        elif member.op in (Op.REDUCE, Op.REDUCE_WINDOW):
            total += member.operands[0].array_shape.size
        elif member.op.is_elementwise and isinstance(member.shape, Shape):
            total += member.shape.size
    return total
