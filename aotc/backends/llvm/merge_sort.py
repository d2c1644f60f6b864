"""Bottom-up merge sort of one row, with a scratch row: O(n log n) for long rows.

Runs of `RUN` elements are binary-insertion sorted in place, then passes merge pairs
of runs of doubling width from the row into the scratch row and back; an odd number
of passes ends with a copy back.  The passes are unrolled at compile time (the row
length is known), so each knows its source and target.  A merge takes the right
run's element only where it strictly precedes the left run's, which keeps the sort
stable.  The merge loop has no branches (reads are clamped into the runs and the
side taken is a select) and works from both ends of the pair at once.
"""

from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir

from ...buffers import Slice
from ...ir import DType, Shape
from .context import EmitContext
from .elemental import element_pointer
from .lltypes import I64, i64
from .loops import for_range, if_then
from .sort_row import Place, SortRow

RUN = 4  # elements insertion-sorted before merging (of 1 to 32, 4 measured fastest)
ALIGN = 16  # each operand's scratch row starts aligned for its widest element


def scratch_row_bytes(dtypes: list[DType], n: int) -> int:
    """The scratch one row of these operands takes: one aligned region per operand."""
    return sum(_aligned(Shape(dt, (n,)).nbytes) for dt in dtypes)


def scratch_place(ctx: EmitContext, scratch: Slice, dtypes: list[DType], n: int) -> Place:
    """The scratch row laid out as scratch_row_bytes sizes it."""
    pointer_to = ctx.slice_pointer
    assert pointer_to is not None  # inside a kernel
    regions, offset = [], scratch.offset
    for dt in dtypes:
        shape = Shape(dt, (n,))
        regions.append((Slice(scratch.kind, scratch.index, offset, shape.nbytes), shape))
        offset += _aligned(shape.nbytes)
    assert offset - scratch.offset <= scratch.size, "scratch smaller than a row"

    def place(position: ir.Value) -> list[ir.Value]:
        return [element_pointer(ctx, pointer_to(s), shape, [position]) for s, shape in regions]

    return place


def merge_sort_row(sorter: SortRow, row: Place, scratch: Place, n: int) -> None:
    """Sort the n elements at `row`, stably, using `scratch` for as many."""
    b = sorter.builder
    with for_range(b, (n + RUN - 1) // RUN, "run") as r:
        start = b.mul(r, i64(RUN))
        end = _min(b, b.add(start, i64(RUN)), n)
        with for_range(b, b.sub(b.sub(end, start), i64(1)), "next") as k:
            i = b.add(start, b.add(k, i64(1)))
            sorter.move(row(i), sorter.held)
            sorter.insert(row, start, i)
    source, target, width = row, scratch, RUN
    while width < n:
        _merge_pass(sorter, source, target, width, n)
        source, target, width = target, source, 2 * width
    if source is scratch:
        with for_range(b, n, "back") as i:
            sorter.move(scratch(i), row(i))


def _merge_pass(sorter: SortRow, source: Place, target: Place, width: int, n: int) -> None:
    """Merge each pair of sorted runs [lo, mid), [mid, hi) of `source` into `target`,
    from both ends at once: the front places the smallest of the run heads, the back
    the largest of their tails, half the pair each (plus the middle element of an odd
    pair), two independent chains of compares where one would wait on the other."""
    ctx, b = sorter.ctx, sorter.builder
    heads = [ctx.alloca(I64), ctx.alloca(I64)]  # the next of each run from the front
    tails = [ctx.alloca(I64), ctx.alloca(I64)]  # and from the back
    with for_range(b, (n + 2 * width - 1) // (2 * width), "pair") as p:
        lo = b.mul(p, i64(2 * width))
        mid = _min(b, b.add(lo, i64(width)), n)
        hi = _min(b, b.add(lo, i64(2 * width)), n)
        runs = _Runs(lo, mid, hi)
        for pointer, value in zip(heads + tails, (lo, mid, b.sub(mid, i64(1)), b.sub(hi, i64(1)))):
            b.store(value, pointer)
        half = b.lshr(b.sub(hi, lo), i64(1))
        with for_range(b, half, "merge") as t:
            _front(sorter, source, target, runs, heads, b.add(lo, t))
            _back(sorter, source, target, runs, tails, b.sub(b.sub(hi, i64(1)), t))
        odd = b.trunc(b.sub(hi, lo), ir.IntType(1))
        with if_then(b, odd):
            _front(sorter, source, target, runs, heads, b.add(lo, half))


class _Runs(NamedTuple):
    lo: ir.Value
    mid: ir.Value
    hi: ir.Value


def _front(sorter: SortRow, source: Place, target: Place, runs: _Runs, heads, out: ir.Value):
    """target[out] = the smaller run head; the right one only where it strictly precedes
    (stable).  Reads are clamped into the runs: an exhausted run's is not used."""
    b = sorter.builder
    i, j = (b.load(h) for h in heads)
    ci = _umin(b, i, b.sub(runs.mid, i64(1)))
    cj = _umin(b, j, b.sub(runs.hi, i64(1)))
    right_wins = b.or_(b.icmp_unsigned(">=", i, runs.mid), sorter.precedes(source(cj), source(ci)))
    take_right = b.and_(b.icmp_unsigned("<", j, runs.hi), right_wins)
    sorter.move(source(b.select(take_right, cj, ci)), target(out))
    b.store(b.add(i, b.zext(b.not_(take_right), I64)), heads[0])
    b.store(b.add(j, b.zext(take_right, I64)), heads[1])


def _back(sorter: SortRow, source: Place, target: Place, runs: _Runs, tails, out: ir.Value):
    """target[out] = the larger run tail; the left one only where the right one strictly
    precedes it (stable).  Tails count down, signed: the left's may reach lo - 1."""
    b = sorter.builder
    i, j = (b.load(t) for t in tails)
    ci = _smax(b, i, runs.lo)
    cj = _smax(b, j, b.sub(runs.mid, i64(1)))
    left_wins = b.or_(b.icmp_signed("<", j, runs.mid), sorter.precedes(source(cj), source(ci)))
    take_left = b.and_(b.icmp_signed(">=", i, runs.lo), left_wins)
    sorter.move(source(b.select(take_left, ci, cj)), target(out))
    b.store(b.sub(i, b.zext(take_left, I64)), tails[0])
    b.store(b.sub(j, b.zext(b.not_(take_left), I64)), tails[1])


def _min(b: ir.IRBuilder, value: ir.Value, bound: int) -> ir.Value:
    return _umin(b, value, i64(bound))


def _umin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_unsigned("<", x, y), x, y)


def _smax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y)


def _aligned(size: int) -> int:
    return -(-size // ALIGN) * ALIGN
