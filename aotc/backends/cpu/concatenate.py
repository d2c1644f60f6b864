"""A concatenate of many operands as one loop over a table of them, not a search.

The element rule (llvm/movement.py) finds an element's operand by a binary search over
the operands' ranges: a tree of branches per element, as many leaves as operands.  For
a few operands that is cheap and lets a fusion read a concatenate; for thousands
(a node with 20,000 inputs) its code grows with them and LLVM's optimizer takes
minutes over it.  A kernel concatenating more than MAX_SEARCHED_OPERANDS buffers
instead copies operand after operand, row after row, each row one memcpy, from where
constant tables say each operand is: its buffer (arena, weights, or the caller's input
or output number) and offset, and its place along the axis.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...buffers import BufferKind, Slice
from ...ir import Instruction, Op
from ..llvm.context import EmitContext, Gen
from ..llvm.lltypes import I64, PTR, i64, i64_table
from ..llvm.loops import for_range, if_then

# operands a concatenate's element rule searches at most; more take the tables
MAX_SEARCHED_OPERANDS = 64
# an operand's buffer as its number in the tables: the two of fixed place, then the
# caller's (input, output: the number is its place in the caller's pointer table)
KINDS = (BufferKind.ARENA, BufferKind.CONSTANT, BufferKind.PARAMETER, BufferKind.OUTPUT)
BYTE = ir.IntType(8)


def emit_wide_concatenate(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> bool:
    """A concatenate kernel of many operands, each in a buffer: a loop over tables."""
    if instr.op is not Op.CONCATENATE or len(instr.operands) <= MAX_SEARCHED_OPERANDS:
        return False
    if any((id(o), ()) not in ctx.plan.slices for o in instr.operands):
        return False  # an immediate operand (a one-element constant) has no buffer
    b, pointer = ctx.builder, ctx.slice_pointer
    assert b is not None and pointer is not None and instr.dimensions is not None
    (axis,) = instr.dimensions
    dims = instr.array_shape.dims
    rows = math.prod(dims[:axis])
    # bytes of one row's piece per unit of extent along the axis
    unit = math.prod(dims[axis + 1 :]) * instr.array_shape.dtype.itemsize
    extents = [o.array_shape.dims[axis] for o in instr.operands]
    starts = [sum(extents[:k]) for k in range(len(extents))]
    count = len(instr.operands)
    slices = [ctx.plan.slice_of(o) for o in instr.operands]
    tables = {
        name: i64_table(ctx.module, f"{ctx.prefix}.{instr.name}.{name}", values)
        for name, values in (
            ("kinds", [KINDS.index(w.kind) for w in slices]),
            ("numbers", [w.index for w in slices]),
            ("offsets", [w.offset for w in slices]),
            ("starts", starts),
            ("extents", extents),
        )
    }
    fixed = [pointer(Slice(kind, 0, 0, 0)) for kind in KINDS[:2]]
    callers = ctx.kernel_pointers[:2]  # the caller's input and output pointer tables
    out = pointer(ctx.plan.slice_of(instr))
    base = b.alloca(PTR)
    with for_range(b, count, "piece") as k:
        kind, number, offset, start, width = (
            b.load(b.gep(tables[name], [i64(0), k], inbounds=True), typ=I64)
            for name in ("kinds", "numbers", "offsets", "starts", "extents")
        )
        b.store(b.select(b.icmp_unsigned("==", kind, i64(0)), *fixed), base)
        with if_then(b, b.icmp_unsigned(">=", kind, i64(2))):  # a caller's buffer
            table = b.select(b.icmp_unsigned("==", kind, i64(2)), *callers)
            b.store(b.load(b.gep(table, [number], source_etype=PTR), typ=PTR), base)
        source = b.gep(b.load(base, typ=PTR), [offset], source_etype=BYTE)
        size = b.mul(width, i64(unit))
        with for_range(b, rows, "row") as r:
            to = b.add(b.mul(r, i64(sum(extents) * unit)), b.mul(start, i64(unit)))
            destination = b.gep(out, [to], source_etype=BYTE)
            origin = b.gep(source, [b.mul(r, size)], source_etype=BYTE)
            ctx.memcpy(destination, origin, size)
    return True
