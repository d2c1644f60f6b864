"""The sort kernel: each row's first `keep` positions in order.

`keep` is the prefix along the sorted dim that the sort's users read
(ir/read_prefix.py): all of the row for a plain sort, k for TopK's sort-then-slice.
How a row is ordered is the row of `STRATEGIES` with the lowest estimated cost among
those that can run:

| strategy | needs | cost per row of n |
|---|---|---|
| merge | a scratch row | about n log2(n / RUN) compares and moves (merge_sort.py) |
| select | nothing | n compares, plus a binary search and a shift per element inserted |

select copies the prefix to the outputs and binary-insertion sorts it; then each later
element of the row is compared with the last kept one and, only where it strictly
precedes it (rare once the prefix holds good elements), inserted while the last kept
one drops out.  So TopK's k of n costs about n compares, and positions from `keep` on
are left unwritten (nothing reads them).  With keep = n it is the binary insertion
sort, O(n^2) moves (a 2,000-long row in about 0.3 ms): what a kernel given no scratch
(the GPU's serial kernel) does for long rows.  The costs are rough fits of
measurements on one x86 core (64 rows of 2,000 and 4 of 20,000, k from 5 to n):
selection wins up to k of about a tenth (n = 2,000) to a twentieth
(n = 20,000) of the row.

Both are stable (an element goes after every element it does not precede strictly,
and elements are taken in row order), so is_stable needs nothing extra.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from llvmlite import ir

from ...buffers import Slice
from ...ir import Instruction, Op
from ...ir.read_prefix import read_prefix
from .context import EmitContext, Gen
from .extents import limits
from .kernels import Kernel, Output, copy_into, output_pointer
from .lltypes import i64, store_element
from .loops import for_range, if_then, loop_nest
from .merge_sort import RUN, merge_sort_row, scratch_place, scratch_row_bytes
from .sort_row import Place, SortRow


class RowJob(NamedTuple):
    """What a strategy orders: one row of the outputs, of n positions, keep of them read."""

    sorter: SortRow
    row: Place  # the outputs' elements
    fetch: Callable[[ir.Value], None]  # the operands' element at a position into held
    scratch: Place | None  # a scratch row, where the backend gave one
    keep: int
    n: int


def _merge(job: RowJob) -> None:
    assert job.scratch is not None  # merge applies only with scratch
    merge_sort_row(job.sorter, job.row, job.scratch, job.n)


def _select(job: RowJob) -> None:
    sorter, b, keep = job.sorter, job.sorter.builder, job.keep
    with for_range(b, keep - 1, "next") as k:  # sort the prefix in place
        i = b.add(k, i64(1))
        sorter.move(job.row(i), sorter.held)
        sorter.insert(job.row, i64(0), i)
    if keep == job.n:
        return
    last = i64(keep - 1)
    with for_range(b, job.n - keep, "rest") as t:  # only an element beating the last goes in
        i = b.add(t, i64(keep))
        job.fetch(i)
        with if_then(b, sorter.precedes(sorter.held, job.row(last))):
            sorter.insert(job.row, i64(0), last)


def _merge_cost(keep: int, n: int) -> float:
    """About 7 ns an element per merge level, from runs of RUN (measured on znver4)."""
    return 7.0 * n * max(1.0, math.log2(n / RUN))


def _select_cost(keep: int, n: int) -> float:
    """2 ns a rejected element; random rows insert about keep (1 + ln(n / keep))
    elements, each a binary search (100 ns) and a shift of keep / 2 (keep / 4 ns)."""
    inserted = keep * (1 + math.log(n / keep)) if keep else 0.0
    return 2.0 * n + inserted * (100.0 + keep / 4)


class Strategy(NamedTuple):
    name: str
    needs_scratch: bool
    cost: Callable[[int, int], float]  # (keep, n) -> estimated ns per row
    copied: Callable[[int, int], int]  # (keep, n) -> leading positions copied to the outputs
    order: Callable[[RowJob], None]  # emits the ordering of one row


# the cheapest of those that can run wins (select, where no scratch is given)
STRATEGIES = (
    Strategy("merge", True, _merge_cost, lambda keep, n: n, _merge),
    Strategy("select", False, _select_cost, lambda keep, n: keep, _select),
)


def sort_strategy(instr: Instruction, schedule: Sequence[Instruction], scratch: bool) -> Strategy:
    keep, n = _keep(instr, schedule)
    runnable = [s for s in STRATEGIES if scratch or not s.needs_scratch]
    return min(runnable, key=lambda s: s.cost(keep, n))


def scratch_bytes(instr: Instruction, schedule: Sequence[Instruction]) -> int:
    """The scratch `instr` (a sort in the computation `schedule` runs) would use: one
    row of its operands where it would be merge sorted, else 0."""
    if sort_strategy(instr, schedule, scratch=True).name != "merge":
        return 0
    n = instr.operands[0].array_shape.dims[_axis(instr)]
    return scratch_row_bytes([o.array_shape.dtype for o in instr.operands], n)


def sort_kernel(
    ctx: EmitContext,
    instr: Instruction,
    operands: list[Gen],
    outputs: list[Output],
    scratch: Slice | None = None,
) -> None:
    """The kernel rule; a backend that reserves scratch_bytes(instr) passes `scratch`."""
    b = ctx.builder
    assert b is not None  # inside a kernel
    dims, axis = outputs[0][0].dims, _axis(instr)
    keep, n = _keep(instr, ctx.plan.schedule)
    strategy = sort_strategy(instr, ctx.plan.schedule, scratch is not None)
    copied = strategy.copied(keep, n)
    # rows the readers use (bounded dims, extents.py); the sorted dim is sorted whole
    counts = limits(ctx, instr) or [None] * len(dims)
    clipped = [e if c is None or d == axis else c for d, (e, c) in enumerate(zip(dims, counts))]
    copy_into(ctx, operands, outputs, [copied if d == axis else e for d, e in enumerate(clipped)])
    if keep == 0 or n < 2 or 0 in dims:
        return
    dtypes = [shape.dtype for shape, _ in outputs]
    sorter = SortRow(ctx, instr.called[0], dtypes)
    spare = None if scratch is None else scratch_place(ctx, scratch, dtypes, n)
    rows = [extent for d, extent in enumerate(clipped) if d != axis]
    with loop_nest(b, rows, "row") as row:

        def at(position: ir.Value) -> list[ir.Value]:
            return [*row[:axis], position, *row[axis:]]

        def place(position: ir.Value) -> list[ir.Value]:
            return [output_pointer(ctx, o, at(position)) for o in outputs]

        def fetch(position: ir.Value) -> None:
            for dtype, h, gen in zip(dtypes, sorter.held, operands):
                store_element(b, dtype, gen(at(position)), h)

        strategy.order(RowJob(sorter, place, fetch, spare, keep, n))


def _keep(instr: Instruction, schedule: Sequence[Instruction]) -> tuple[int, int]:
    """(the prefix read, the row length) along the sorted dim."""
    axis = _axis(instr)
    n = instr.operands[0].array_shape.dims[axis]
    return min(read_prefix(instr, axis, schedule), n), n


def _axis(instr: Instruction) -> int:
    assert instr.dimensions is not None  # the verifier requires one sorted dim
    (axis,) = instr.dimensions
    return axis


SORT_KERNELS: dict[Op, Kernel] = {Op.SORT: sort_kernel}
