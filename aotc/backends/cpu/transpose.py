"""Transposes that move the last dim, as tiles transposed in registers.

The generic loop runs over the output in row-major order, reading the operand
with a large stride: an element per cache line, one scalar load and store
each.  A transpose that moves the operand's last (contiguous) dim instead
goes in W x W tiles (W = lanes of a vector): W vector loads along the
operand's last dim, the tile transposed in registers (W log W shuffles), W
vector stores along the output's last dim.  The edges of the two dims that
do not fill a tile take the scalar path.  Channels-last <-> NCHW copies
(conv_layout.py's) and the attention heads' transposes are such.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Instruction, Op
from ..llvm.context import EmitContext, Gen
from ..llvm.elemental import element_pointer
from ..llvm.lltypes import i64, storage_type
from ..llvm.loops import for_range
from .parallel import parallel_loop_nest
from .vectors import i32_lanes, smaller

MIN_ELEMENTS = 1024  # smaller transposes stay in L1 whatever the order


def emit_transpose(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> bool:
    """Emit `instr` as a tiled transpose if it is one worth it (reading its operand from
    memory); False leaves it to the rules."""
    width = tile_width(instr, ctx.target)
    if width is None:
        return False
    _emit(ctx, instr, instr.dimensions.index(instr.array_shape.rank - 1), width)
    return True


def tile_width(instr: Instruction, target) -> int | None:
    """W of the tiles `instr` goes in: it is a big enough transpose that moves the last
    dim, of 2-, 4- or 8-byte elements with at least 4 to a vector; None otherwise."""
    if instr.op is not Op.TRANSPOSE or target is None:
        return None
    shape = instr.array_shape
    rank, size = shape.rank, shape.dtype.itemsize
    if rank < 2 or size not in (2, 4, 8) or target.vector_bits // (8 * size) < 4:
        return None
    width = target.vector_bits // (8 * size)
    across = instr.dimensions.index(rank - 1)  # the output dim reading the operand's last
    if across == rank - 1 or math.prod(shape.dims) < MIN_ELEMENTS:
        return None
    if min(shape.dims[across], shape.dims[-1]) < width:
        return None
    return width


def _emit(ctx: EmitContext, instr: Instruction, across: int, width: int) -> None:
    shape, operand = instr.array_shape, instr.operands[0].array_shape
    dims, perm, last = shape.dims, instr.dimensions, shape.rank - 1
    element = storage_type(shape.dtype)
    vector = ir.VectorType(element, width)
    others = [d for d in range(shape.rank) if d not in (across, last)]
    tiles = (-(-dims[across] // width), -(-dims[last] // width))
    with parallel_loop_nest(ctx, [dims[d] for d in others] + list(tiles), "tile") as position:
        b = ctx.builder
        source = ctx.slice_pointer(ctx.plan.slice_of(instr.operands[0]))
        target = ctx.slice_pointer(ctx.plan.slice_of(instr))
        index = [None] * shape.rank
        for d, value in zip(others, position):
            index[d] = value
        starts = [b.mul(t, i64(width)) for t in position[-2:]]

        def pointers(i, j):
            """Where output element (across: start + i, last: start + j) and its
            operand element are."""
            index[across] = b.add(starts[0], i)
            index[last] = b.add(starts[1], j)
            read = [None] * shape.rank
            for out_dim, in_dim in enumerate(perm):
                read[in_dim] = index[out_dim]
            return element_pointer(ctx, target, shape, index), element_pointer(
                ctx, source, operand, read
            )

        full = [_fills(b, start, dims[d], width) for start, d in zip(starts, (across, last))]
        with b.if_else(b.and_(*full)) as (whole, edge):
            with whole:
                rows = [
                    b.load(pointers(i64(0), i64(j))[1], typ=vector, align=1) for j in range(width)
                ]
                for i, row in enumerate(transpose_square(b, rows)):
                    b.store(row, pointers(i64(i), i64(0))[0], align=1)
            with edge:
                counts = [
                    smaller(b, i64(width), b.sub(i64(dims[d]), start))
                    for start, d in zip(starts, (across, last))
                ]
                with for_range(b, counts[0], "ea") as i, for_range(b, counts[1], "el") as j:
                    out, src = pointers(i, j)
                    b.store(b.load(src, typ=element), out)


def _fills(b: ir.IRBuilder, start, extent: int, width: int) -> ir.Value:
    """Whether the tile at `start` lies wholly inside `extent`."""
    if extent % width == 0:
        return ir.Constant(ir.IntType(1), 1)
    return b.icmp_unsigned("<=", b.add(start, i64(width)), i64(extent))


def transpose_square(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The W x W matrix of `rows` (W vectors of W lanes, W a power of two) transposed:
    the off-diagonal blocks of each 2h x 2h block swapped, for h = W/2 ... 1 (W log W
    two-source shuffles)."""
    width = len(rows)
    rows = list(rows)
    h = width // 2
    while h:
        for i in range(width):
            if i & h:
                continue
            upper, lower = rows[i], rows[i + h]
            first = [lane if not lane & h else width + lane - h for lane in range(width)]
            second = [lane + h if not lane & h else width + lane for lane in range(width)]
            rows[i] = b.shuffle_vector(upper, lower, i32_lanes(first))
            rows[i + h] = b.shuffle_vector(upper, lower, i32_lanes(second))
        h //= 2
    return rows
