"""The sort kernel: operands copied to the outputs, then each row insertion-sorted in place.

Insertion sort is stable (an element moves left only past elements it
precedes strictly), so is_stable needs nothing extra.  It costs O(n^2) moves
and comparisons per row of length n; fine for TopK/Unique-sized rows, a merge
sort with scratch space would replace it for long ones.  The comparator is
emitted inline on (held element, element to its left) pairs of every operand.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Instruction, Op
from .context import EmitContext, Gen
from .elemental import call_computation
from .kernels import Kernel, Output, copy_into, load_raw, output_pointer
from .lltypes import I1, I64, from_storage, i64, storage_type
from .loops import branch_value, for_range, loop_nest, while_loop


def sort_kernel(
    ctx: EmitContext, instr: Instruction, operands: list[Gen], outputs: list[Output]
) -> None:
    b = ctx.builder
    copy_into(ctx, operands, outputs)
    dims = outputs[0][0].dims
    (axis,) = instr.dimensions
    if dims[axis] < 2 or 0 in dims:
        return
    comparator = instr.called[0]
    dtypes = [shape.dtype for shape, _ in outputs]
    held = [ctx.alloca(storage_type(dt)) for dt in dtypes]  # the element being inserted
    slot = ctx.alloca(I64)  # where it would go
    rows = [extent for d, extent in enumerate(dims) if d != axis]
    with loop_nest(b, rows, "row") as row:

        def pointers(position: ir.Value) -> list[ir.Value]:
            index = [*row[:axis], position, *row[axis:]]
            return [output_pointer(ctx, o, index) for o in outputs]

        def precedes_left_neighbour() -> ir.Value:
            """comparator(held, element at slot - 1), reading the neighbour only if slot > 0."""
            j = b.load(slot)

            def compare() -> ir.Value:
                left = pointers(b.sub(j, i64(1)))
                args = []
                for dtype, h, o, p in zip(dtypes, held, outputs, left):
                    mine, theirs = b.load(h), load_raw(ctx, o, p)
                    args += [from_storage(b, dtype, mine), from_storage(b, dtype, theirs)]
                return call_computation(ctx, comparator, args)[0]

            has_left = b.icmp_unsigned(">", j, i64(0))
            return branch_value(b, has_left, compare, lambda: ir.Constant(I1, 0))

        with for_range(b, dims[axis] - 1, "next") as k:
            i = b.add(k, i64(1))
            for h, o, p in zip(held, outputs, pointers(i)):
                b.store(load_raw(ctx, o, p), h)
            b.store(i, slot)
            with while_loop(b, precedes_left_neighbour, "shift"):
                j = b.load(slot)
                left = b.sub(j, i64(1))
                for o, source, target in zip(outputs, pointers(left), pointers(j)):
                    b.store(load_raw(ctx, o, source), target)
                b.store(left, slot)
            for h, target in zip(held, pointers(b.load(slot))):
                b.store(b.load(h), target)


SORT_KERNELS: dict[Op, Kernel] = {Op.SORT: sort_kernel}
