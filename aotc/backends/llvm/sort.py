"""The sort kernel: operands copied to the outputs, then each row insertion-sorted in place.

Binary insertion sort: each element's place among the sorted ones before it is found
by binary search (O(log n) comparisons), then those after it move one place right by a
plain copy loop.  It is stable (an element goes after every element it does not
precede strictly), so is_stable needs nothing extra.  Its O(n^2) moves are copies
without compares (a 2,000-long row of TopK's distances in about 1 ms); a merge sort
with scratch space would replace it for much longer rows.  The comparator is emitted
inline on (held element, element in the sorted part) pairs of every operand.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Instruction, Op
from .context import EmitContext, Gen
from .elemental import call_computation
from .kernels import Kernel, Output, copy_into, load_raw, output_pointer
from .lltypes import I64, from_storage, i64, storage_type
from .loops import for_range, loop_nest, while_loop


def sort_kernel(
    ctx: EmitContext, instr: Instruction, operands: list[Gen], outputs: list[Output]
) -> None:
    b = ctx.builder
    assert b is not None  # inside a kernel
    copy_into(ctx, operands, outputs)
    dims = outputs[0][0].dims
    (axis,) = instr.dimensions
    if dims[axis] < 2 or 0 in dims:
        return
    comparator = instr.called[0]
    dtypes = [shape.dtype for shape, _ in outputs]
    held = [ctx.alloca(storage_type(dt)) for dt in dtypes]  # the element being inserted
    low, high = ctx.alloca(I64), ctx.alloca(I64)  # the binary search's bounds
    rows = [extent for d, extent in enumerate(dims) if d != axis]
    with loop_nest(b, rows, "row") as row:

        def pointers(position: ir.Value) -> list[ir.Value]:
            index = [*row[:axis], position, *row[axis:]]
            return [output_pointer(ctx, o, index) for o in outputs]

        def precedes(position: ir.Value) -> ir.Value:
            """comparator(held, element at `position`)."""
            args = []
            for dtype, h, o, p in zip(dtypes, held, outputs, pointers(position)):
                mine, theirs = b.load(h), load_raw(ctx, o, p)
                args += [from_storage(b, dtype, mine), from_storage(b, dtype, theirs)]
            return call_computation(ctx, comparator, args)[0]

        with for_range(b, dims[axis] - 1, "next") as k:
            i = b.add(k, i64(1))
            for h, o, p in zip(held, outputs, pointers(i)):
                b.store(load_raw(ctx, o, p), h)
            # binary search of [0, i) (sorted) for the first element held precedes: after
            # every element it does not precede, so equal elements keep their order
            b.store(i64(0), low)
            b.store(i, high)
            with while_loop(b, lambda: b.icmp_unsigned("<", b.load(low), b.load(high)), "find"):
                lo, hi = b.load(low), b.load(high)
                middle = b.lshr(b.add(lo, hi), i64(1))
                before = precedes(middle)
                b.store(b.select(before, lo, b.add(middle, i64(1))), low)
                b.store(b.select(before, middle, hi), high)
            slot = b.load(low)
            # shift [slot, i) one place right, last first (a plain copy loop: no compares)
            with for_range(b, b.sub(i, slot), "shift") as t:
                j = b.sub(i, t)
                left = b.sub(j, i64(1))
                for o, source, target in zip(outputs, pointers(left), pointers(j)):
                    b.store(load_raw(ctx, o, source), target)
            for h, target in zip(held, pointers(slot)):
                b.store(b.load(h), target)


SORT_KERNELS: dict[Op, Kernel] = {Op.SORT: sort_kernel}
