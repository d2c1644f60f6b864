"""Separable windows: a max or min pool over several dims as one pool per dim.

The max over a k1 x k2 window is the max over k1 rows of the max over k2 columns:
`reduce-window(x, k1 x k2)` equals a reduce-window over the last windowed dim
(its size, stride, padding and dilation) followed by one over the dim before,
and so on; a padded row is all init values, which each pass keeps.  Exact for
max and min (no rounding), and k1 + k2 taps per output instead of k1 * k2: a
13x13 pool reads 26 values per output instead of 169 (YOLO's spatial pyramid
pooling).  Sums are left alone: their order of additions would change.
"""

from __future__ import annotations

import math

from ..ir import Instruction, Op, Window
from .rewrite import InsertingBuilder, rewrite, rule

# exact when applied dim by dim: the reducer picks one of its operands
SELECTING_REDUCERS = frozenset({Op.MAXIMUM, Op.MINIMUM})


def _selecting(instr: Instruction) -> bool:
    """Whether the reducer is one max/min of its two parameters."""
    body = instr.called[0]
    root = body.root
    params = [i for i in body.instructions if i.op is Op.PARAMETER]
    return (
        root.op in SELECTING_REDUCERS
        and len(body.instructions) == 3
        and set(map(id, root.operands)) == set(map(id, params))
    )


def window_passes(sizes) -> int:
    """How many reduce-windows a max/min pool with these window sizes becomes: one per
    dim of size > 1 where the taps saved outweigh the extra passes over intermediates."""
    windowed = [s for s in sizes if s > 1]
    split = len(windowed) > 1 and math.prod(windowed) > 2 * sum(windowed)
    return len(windowed) if split else 1


def _window_of_dim(window: Window, dim: int) -> Window:
    """`window` on dim `dim` only: size 1, stride 1, no padding elsewhere."""
    rank = window.rank

    def only(values, default):
        return [values[d] if d == dim else default for d in range(rank)]

    return Window.make(
        only(window.size, 1),
        only(window.stride, 1),
        only(window.pad_low, 0),
        only(window.pad_high, 0),
        None,
        only(window.rhs_dilation, 1),
    )


@rule(Op.REDUCE_WINDOW)
def split_separable_window(b: InsertingBuilder, instr: Instruction):
    # reduce-window(x, k1 x k2) -> reduce-window(reduce-window(x, 1 x k2), k1 x 1)
    window = instr.window
    if len(instr.operands) != 2 or any(d != 1 for d in window.lhs_dilation):
        return None
    windowed = [d for d in range(window.rank) if window.size[d] > 1]
    if not _selecting(instr) or window_passes(window.size) == 1:
        return None
    value, init = instr.operands
    for dim in reversed(windowed):
        value = b.reduce_window(value, init, _window_of_dim(window, dim), instr.called[0])
    return value


class SeparableWindows:
    name = "separable_windows"

    def run(self, module) -> bool:
        return rewrite(module, [split_separable_window])
