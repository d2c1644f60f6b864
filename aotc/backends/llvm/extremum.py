"""Maximum and minimum reductions in a form that vectorizes cheaply.

XLA's maximum propagates NaN and orders -0 below +0 (`llvm.maximum`); kept at every
element, that costs some five vector instructions per step and a long horizontal
reduction on x86 (softmax's row maximum).  Here the loop keeps the plain larger value
(an ordered compare and select, marked free of NaNs and of the sign of zero: one
vmaxps) and notes whether any element was NaN.  Once per reduction, a NaN seen or a
zero result (whose sign the cheap form may have lost) runs the exact loop again, so
the result is always the exact loop's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from ...ir import Op
from .context import EmitContext
from .lltypes import I1
from .loops import branch_value, loop_nest

# reducer -> the ordered compare that says an element replaces the running value
CHEAP_COMPARE = {Op.MAXIMUM: ">", Op.MINIMUM: "<"}
# what lets LLVM's vectorizer take compare-and-select as a max/min reduction
CHEAP_FLAGS = ("nnan", "nsz")


def cheap_extremum(
    ctx: EmitContext,
    op: Op,
    start: ir.Value,
    dims: Sequence[int],
    vectorize: bool,
    element: Callable[[list[ir.Value]], ir.Value],
    exact: Callable[[], ir.Value],
) -> ir.Value:
    """The `op` (MAXIMUM or MINIMUM) reduction of `element` over `dims` from `start`;
    `exact()` emits the reduction in the exact form, run where the cheap one may differ."""
    b = ctx.builder
    assert b is not None
    best, nan_seen = ctx.alloca(start.type), ctx.alloca(I1)
    b.store(start, best)
    b.store(ir.Constant(I1, 0), nan_seen)
    with loop_nest(b, dims, "x", vectorize) as inner:
        x = element(inner)
        current = b.load(best)
        replaces = b.fcmp_ordered(CHEAP_COMPARE[op], x, current, flags=CHEAP_FLAGS)
        b.store(b.select(replaces, x, current, flags=CHEAP_FLAGS), best)
        b.store(b.or_(b.load(nan_seen), b.fcmp_unordered("uno", x, x)), nan_seen)
    cheap = b.load(best)
    is_zero = b.fcmp_ordered("==", cheap, ir.Constant(cheap.type, 0.0))
    # a select, not an `or`: after a NaN `cheap` is poison, and so would the `or` be
    rerun = b.select(b.load(nan_seen), ir.Constant(I1, 1), is_zero)
    return branch_value(b, rerun, exact, lambda: cheap)
