"""How far a kernel computes its output: the run-time extents of its bounded dims.

An instruction's `extents` (ir/extents.py, from passes/bounded_dims.py) say how much of
each dim the call's readers use; beyond them the values are padding.  A kernel that
clips a loop computes `limits(...)[d]` positions of dim d (an i64 from the entry's
`input_dims`, never above the bound) instead of the bound; computing more is never
wrong, so a kernel clips the loops it can and computes the rest whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir

from ...buffers import BufferPlan, Slice
from ...ir import Instruction, Module, Op, Shape
from ...ir.extents import CONSTANT, INPUT, Extent
from .context import EmitContext
from .lltypes import I32, I64, i64

# extent op -> how it is computed on two i64s
_BINARY = {
    "add": lambda b, x, y: b.add(x, y),
    "subtract": lambda b, x, y: b.sub(x, y),
    "multiply": lambda b, x, y: b.mul(x, y),
    "divide": lambda b, x, y: b.sdiv(x, y),
    "minimum": lambda b, x, y: b.select(b.icmp_signed("<", x, y), x, y),
    "maximum": lambda b, x, y: b.select(b.icmp_signed(">", x, y), x, y),
}


def input_dims_slice(module: Module, plan: BufferPlan) -> Slice | None:
    """Where the entry's input_dims are (`EmitContext.input_dims`), if it has them."""
    bounds = module.bounds
    if bounds is None or bounds.input_dims is None or module.entry is None:
        return None
    param = next(p for p in module.entry.parameters if p.index == bounds.input_dims)
    return plan.slice_of(param)


def clips(instr: Instruction) -> bool:
    """Whether `instr`'s kernel computes less than its bounds for some calls: it has
    extents, or it (or a fusion it holds: an attention kernel's parts) reduces to
    reduced extents."""
    if instr.extents is not None or instr.reduced_extents is not None:
        return True
    if instr.op is not Op.FUSION:
        return False
    members = instr.called[0].instructions
    return any(m.reduced_extents is not None or (m.op is Op.FUSION and clips(m)) for m in members)


def limits(ctx: EmitContext, instr: Instruction) -> list[ir.Value | None] | None:
    """Per dim of `instr`'s output (an array, or arrays of one dims: a sort's), the i64
    count of positions its readers use, None where that is the whole dim; None when
    every dim is whole."""
    extents = instr.extents
    if extents is None:
        return None
    shape = instr.shape
    elements = [shape] if isinstance(shape, Shape) else list(shape.elements)
    dims = {e.dims for e in elements if isinstance(e, Shape)}
    if len(dims) != 1 or not all(isinstance(e, Shape) for e in elements):
        return None
    return _counts(ctx, extents, dims.pop())


def reduced_limits(ctx: EmitContext, instr: Instruction) -> list[ir.Value | None] | None:
    """Per dim of a reduce's or dot's first operand, the i64 count of positions it reads
    more than its identity from (`Instruction.reduced_extents`), None where all; None
    when it reads all of every dim."""
    extents = instr.reduced_extents
    if extents is None or not instr.operands:
        return None
    return _counts(ctx, extents, instr.operands[0].array_shape.dims)


def _counts(ctx: EmitContext, extents, dims) -> list[ir.Value | None] | None:
    """The i64 count of each dim's extent (None: whole), or None when all are whole:
    a few loads of input_dims where they are asked for (before a kernel's loops, or
    once per row)."""
    if ctx.input_dims is None or len(extents) != len(dims) or not any(extents):
        return None
    assert ctx.slice_pointer is not None
    base = ctx.slice_pointer(ctx.input_dims)
    return [
        None if e is None else _clamped(ctx, _value(ctx, e, base), bound)
        for e, bound in zip(extents, dims)
    ]


@dataclass
class GemmClip:
    """What of a batch of GEMMs its readers need (i64s of the call; None: all): the
    batch positions per batch dim, C's first rows and first columns; and how deep K
    goes (from 1: past it, the operands hold masked zeros)."""

    batch: list[ir.Value | None]
    rows: ir.Value | None
    cols: ir.Value | None
    depth: ir.Value | None = None


def moved_free_dims(dot: Instruction) -> int:
    """How many leading lhs free dims of a float `dot` run as GEMM batch dims: those
    before the last one its extents clip, where an earlier one is clipped too ([batch,
    seq] rows clipped to [b, s]: b GEMMs of s rows, not the rows that cover them)."""
    d = dot.dot
    if dot.extents is None or d is None:
        return 0
    start = len(d.lhs_batch)
    free = dot.operands[0].array_shape.rank - start - len(d.lhs_contracting)
    clipped = [k for k in range(free) if dot.extents[start + k] is not None]
    return clipped[-1] if len(clipped) > 1 else 0


def clips_dot(instr: Instruction, dot: Instruction) -> bool:
    """Whether the kernel `instr` computing `dot` (itself, or an output fusion of it)
    computes less of it than its bounds for some calls (`dot_clip`)."""
    return dot.op is Op.DOT and (instr.extents is not None or dot.reduced_extents is not None)


def dot_clip(ctx: EmitContext, instr: Instruction, dot: Instruction, batch: int) -> GemmClip:
    """What of `dot`, computed by the kernel `instr` at the dot's shape, its readers need
    (`clips_dot`) as a batch of GEMMs: the `batch` leading dims (the dot's batch dims,
    then the lhs free dims run as batch dims), then the rows over the other lhs free
    dims and the columns over the rhs free dims that cover them, and the depth."""
    d = dot.dot
    assert d is not None
    b = ctx.builder
    assert b is not None
    rows = dot.operands[0].array_shape.rank - batch - len(d.lhs_contracting)
    dims = dot.array_shape.dims
    counts = limits(ctx, instr) or [None] * len(dims)
    m = span(b, counts[batch : batch + rows], dims[batch : batch + rows])
    n = span(b, counts[batch + rows :], dims[batch + rows :])
    depth = contraction_depth(ctx, dot)
    whole = [isinstance(x, int) for x in (m, n)]
    return GemmClip(counts[:batch], None if whole[0] else m, None if whole[1] else n, depth)


def contraction_depth(ctx: EmitContext, dot: Instruction) -> ir.Value | None:
    """How deep the dot's K goes past its masked zeros (`reduced_extents`, from 1: an
    empty extent still runs one slice, which stores C), or None: all of K."""
    counts = reduced_limits(ctx, dot)
    d = dot.dot
    assert d is not None
    if counts is None or all(counts[i] is None for i in d.lhs_contracting):
        return None
    lhs = dot.operands[0].array_shape.dims
    b = ctx.builder
    assert b is not None
    depth = span(b, [counts[i] for i in d.lhs_contracting], [lhs[i] for i in d.lhs_contracting])
    assert not isinstance(depth, int)
    return b.select(b.icmp_signed("<", depth, i64(1)), i64(1), depth)


def inside(b: ir.IRBuilder, index, counts: Sequence[ir.Value | None]) -> ir.Value | None:
    """Whether `index` lies in the box of `counts` (None: a whole dim), as an i1; None
    when every dim is whole."""
    found = None
    for value, count in zip(index, counts):
        if count is not None:
            below = b.icmp_signed("<", value, count)
            found = below if found is None else b.and_(found, below)
    return found


def span(b: ir.IRBuilder, counts: Sequence[ir.Value | None], dims: Sequence[int]):
    """How many row-major positions of `dims` from the first cover the box of `counts`
    (None: the whole dim): 1 + the last one's linear position, or 0 for an empty box.
    An int when every count is whole."""
    if all(c is None for c in counts):
        return math.prod(dims)
    total: ir.Value = i64(1)
    empty = None
    stride = 1
    for count, dim in zip(reversed(counts), reversed(dims)):
        last = b.sub(count, i64(1)) if count is not None else i64(dim - 1)
        total = b.add(total, b.mul(last, i64(stride)))
        if count is not None:
            zero = b.icmp_signed("<=", count, i64(0))
            empty = zero if empty is None else b.or_(empty, zero)
        stride *= dim
    assert empty is not None
    return b.select(empty, i64(0), total)


def _value(ctx: EmitContext, extent: Extent, base: ir.Value) -> ir.Value:
    """The i64 value of `extent` for this call (loads of input_dims at `base`, and
    arithmetic)."""
    b = ctx.builder
    assert b is not None
    values: dict[int, ir.Value] = {}
    for node in extent.post_order():
        if node.op == INPUT:
            pointer = b.gep(base, [i64(node.value)], source_etype=I32)
            values[id(node)] = b.sext(b.load(pointer, typ=I32), I64)
        elif node.op == CONSTANT:
            values[id(node)] = i64(node.value)
        else:
            x, y = (values[id(a)] for a in node.args)
            values[id(node)] = _BINARY[node.op](b, x, y)
    return values[id(extent)]


def _clamped(ctx: EmitContext, value: ir.Value, bound: int) -> ir.Value:
    """`value` within [0, bound]: a wrong input_dims entry computes the bound, never
    outside the buffer."""
    b = ctx.builder
    assert b is not None
    low = b.select(b.icmp_signed("<", value, i64(0)), i64(0), value)
    return b.select(b.icmp_signed(">", low, i64(bound)), i64(bound), low)
