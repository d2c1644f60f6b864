"""One row of a sort being emitted: where its elements are, how two compare, insertion.

A row holds one element per operand at each position, in the sort's outputs or in a
scratch copy (merge_sort.py); `Place` maps a position to the pointers of those
elements.  Elements move as stored bytes (no round trip through registers) and the
comparator is emitted inline on (first, second) pairs of every operand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from ...ir import Computation, DType
from .context import EmitContext
from .elemental import call_computation
from .lltypes import I64, from_storage, i64, storage_type
from .loops import for_range, while_loop

Place = Callable[[ir.Value], list[ir.Value]]  # position -> one pointer per operand


class SortRow:
    def __init__(self, ctx: EmitContext, comparator: Computation, dtypes: Sequence[DType]):
        self.ctx, self.comparator, self.dtypes = ctx, comparator, list(dtypes)
        self.held = [ctx.alloca(storage_type(dt)) for dt in dtypes]  # an element moved out
        self._low, self._high = ctx.alloca(I64), ctx.alloca(I64)  # binary search bounds

    @property
    def builder(self) -> ir.IRBuilder:
        b = self.ctx.builder
        assert b is not None  # inside a kernel
        return b

    def precedes(self, first: Sequence[ir.Value], second: Sequence[ir.Value]) -> ir.Value:
        """comparator(element at `first`, element at `second`), each one pointer per operand."""
        b, args = self.builder, []
        for dtype, p, q in zip(self.dtypes, first, second):
            ty = storage_type(dtype)
            args += [
                from_storage(b, dtype, b.load(p, typ=ty)),
                from_storage(b, dtype, b.load(q, typ=ty)),
            ]
        return call_computation(self.ctx, self.comparator, args)[0]

    def move(self, source: Sequence[ir.Value], target: Sequence[ir.Value]) -> None:
        b = self.builder
        for dtype, p, q in zip(self.dtypes, source, target):
            b.store(b.load(p, typ=storage_type(dtype)), q)

    def insert(self, row: Place, start: ir.Value, end: ir.Value) -> None:
        """Place the held element among the sorted [start, end) of `row`, moving those
        after it one right (the element at `end`, if any, is overwritten)."""
        b = self.builder
        low, high = self._low, self._high
        # binary search for the first element held precedes: after every element it
        # does not precede, so equal elements keep their order
        b.store(start, low)
        b.store(end, high)
        with while_loop(b, lambda: b.icmp_unsigned("<", b.load(low), b.load(high)), "find"):
            lo, hi = b.load(low), b.load(high)
            middle = b.lshr(b.add(lo, hi), i64(1))
            before = self.precedes(self.held, row(middle))
            b.store(b.select(before, lo, b.add(middle, i64(1))), low)
            b.store(b.select(before, middle, hi), high)
        slot = b.load(low)
        # shift [slot, end) one place right, last first (a plain copy loop: no compares)
        with for_range(b, b.sub(end, slot), "shift") as t:
            j = b.sub(end, t)
            self.move(row(b.sub(j, i64(1))), row(j))
        self.move(self.held, row(slot))
