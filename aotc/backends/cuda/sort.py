"""Sort on the GPU: a block per row, a bitonic network in shared memory.

The row (every operand of the sort, plus each element's original position) is copied
into shared memory padded to a power of two W, sorted by the bitonic network (log2 W
(log2 W + 1) / 2 compare-exchange stages over W / 2 pairs, a barrier after each), and
copied out.  Elements are ordered by the comparator with the original position breaking
ties, so the network, which is not stable by itself, gives exactly the stable sort (what
the CPU's kernel gives, and any sort's semantics allow); padding positions sort
after every element.

Rows whose elements do not fit in a block's shared memory keep the serial kernel
(serial.py).  Blocks of rows that the readers do not use in a call (bounded dims,
llvm/extents.py) return at once; the sorted dim itself is sorted whole (the padder
keeps a sort's keys whole: its padding sorts last).
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Instruction, Op
from ..llvm.elemental import call_computation
from ..llvm.extents import inside, limits
from ..llvm.kernels import output_pointer
from ..llvm.lltypes import I32, I64, from_storage, i32, storage_type, to_storage
from ..llvm.loops import for_range, if_then
from .context import GpuContext
from .elementwise import split_position
from .kernel import KernelLaunch, begin_kernel, exit_unless, finish_kernel, operand_generators

MAX_SHARED = 48 * 1024  # static shared memory of a block on every GPU we compile for
MAX_THREADS = 1024


def emit_sort(ctx: GpuContext, instr: Instruction, name: str, outputs) -> KernelLaunch | None:
    """The bitonic kernel of a sort whose rows fit in shared memory, else None."""
    if instr.op is not Op.SORT:
        return None
    dims = outputs[0][0].dims
    (axis,) = instr.dimensions
    length = dims[axis]
    if length < 2:
        return None
    width = 1 << (length - 1).bit_length()
    dtypes = [shape.dtype for shape, _ in outputs]
    sizes = [dtype.itemsize for dtype in dtypes]
    if width * (sum(sizes) + 4) > MAX_SHARED:
        return None
    rows = [extent for d, extent in enumerate(dims) if d != axis]
    threads = min(width // 2, MAX_THREADS)
    kernel = begin_kernel(ctx, instr, name, threads, math.prod(rows), "sort")
    b = ctx.builder
    assert b is not None
    tid = ctx.device.thread_index(ctx)
    row = split_position(ctx, ctx.device.block_index(ctx), rows)
    counts = limits(ctx, instr)
    if counts is not None:
        exit_unless(ctx, inside(b, row, [c for d, c in enumerate(counts) if d != axis]))
    arrays = [kernel.shared(ctx, width * size) for size in sizes]
    order = kernel.shared(ctx, width * 4)  # where each element started
    types = [storage_type(dtype) for dtype in dtypes]

    def at(array, ty, position):
        return b.gep(array, [position], source_etype=ty)

    def load(array, ty, position):
        return b.load(at(array, ty, position), typ=ty)

    def index(position):
        return [*row[:axis], b.zext(position, I64), *row[axis:]]

    def positions():
        """This thread's positions of the padded row: tid, tid + threads, ..."""
        return [b.add(tid, i32(r * threads)) for r in range(width // threads)]

    gens = operand_generators(ctx, instr)
    for p in positions():
        b.store(p, at(order, I32, p))
        with if_then(b, b.icmp_unsigned("<", p, i32(length))):
            for gen, dtype, array, ty in zip(gens, dtypes, arrays, types):
                b.store(to_storage(b, dtype, gen(index(p))), at(array, ty, p))
    ctx.device.barrier(ctx)

    def goes_first(low, high) -> tuple[ir.Value, ir.Value]:
        """(the element at low goes before the one at high, the reverse): comparator,
        then original position; padding (position >= length) last."""
        low_from, high_from = load(order, I32, low), load(order, I32, high)
        earlier = b.icmp_unsigned("<", low_from, high_from)
        padded = b.or_(*(b.icmp_unsigned(">=", v, i32(length)) for v in (low_from, high_from)))
        values = [
            [from_storage(b, dtype, load(array, ty, s)) for s in (low, high)]
            for dtype, array, ty in zip(dtypes, arrays, types)
        ]
        comparator = instr.called[0]
        before = call_computation(ctx, comparator, [v for pair in values for v in pair])[0]
        after = call_computation(ctx, comparator, [v for pair in values for v in pair[::-1]])[0]
        low_first = b.or_(before, b.and_(b.not_(after), earlier))
        high_first = b.or_(after, b.and_(b.not_(before), b.not_(earlier)))
        return (b.select(padded, earlier, low_first), b.select(padded, b.not_(earlier), high_first))

    stages = (width - 1).bit_length()  # log2(width)
    with for_range(b, stages, "merge") as merge:
        size = b.shl(i32(2), b.trunc(merge, I32))  # bitonic sequences of `size` merged
        with for_range(b, b.add(merge, ir.Constant(I64, 1)), "step") as step:
            stride = b.lshr(size, b.add(b.trunc(step, I32), i32(1)))
            for pair in (b.add(tid, i32(r * threads)) for r in range(width // 2 // threads)):
                low = b.add(
                    b.mul(b.udiv(pair, stride), b.shl(stride, i32(1))), b.urem(pair, stride)
                )
                high = b.add(low, stride)
                ascending = b.icmp_unsigned("==", b.and_(low, size), i32(0))
                low_first, high_first = goes_first(low, high)
                swap = b.select(ascending, high_first, low_first)
                with if_then(b, swap):
                    for array, ty in [*zip(arrays, types), (order, I32)]:
                        x, y = load(array, ty, low), load(array, ty, high)
                        b.store(y, at(array, ty, low))
                        b.store(x, at(array, ty, high))
            ctx.device.barrier(ctx)
    for p in positions():
        with if_then(b, b.icmp_unsigned("<", p, i32(length))):
            for output, array, ty in zip(outputs, arrays, types):
                b.store(load(array, ty, p), output_pointer(ctx, output, index(p)))
    return finish_kernel(ctx, instr, kernel)
