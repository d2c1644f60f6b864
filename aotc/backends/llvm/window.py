"""Where a window tap lands in the input (reduce-window and convolution).

Along one spatial dim, output position `o` and tap `k` read the padded,
base-dilated input at `o*stride + k*window_dilation - pad_low`; that lands on
a real input element only if it is inside and on the dilation grid.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Window
from .lltypes import i64


def tap_position(
    b: ir.IRBuilder, out: ir.Value, tap: ir.Value, extent: int, window: Window, dim: int
) -> tuple[ir.Value, list[ir.Value]]:
    """Input position along `dim` and the i1 conditions for it to be a real element.

    Conditions that hold for every output position (no padding on that side,
    no base dilation) are left out, so unpadded windows emit no branches.
    """
    stride, low, high = window.stride[dim], window.pad_low[dim], window.pad_high[dim]
    base_dilation, window_dilation = window.lhs_dilation[dim], window.rhs_dilation[dim]
    position = out if stride == 1 else b.mul(out, i64(stride))
    step = tap if window_dilation == 1 else b.mul(tap, i64(window_dilation))
    position = b.add(position, step)
    if low != 0:
        position = b.sub(position, i64(low))
    conditions = []
    if low > 0:
        conditions.append(b.icmp_signed(">=", position, i64(0)))
    if base_dilation > 1:
        grid = i64(base_dilation)
        conditions.append(b.icmp_signed("==", b.srem(position, grid), i64(0)))
        position = b.sdiv(position, grid)
    if high > 0 or base_dilation > 1:
        conditions.append(b.icmp_signed("<", position, i64(extent)))
    return position, conditions


def all_of(b: ir.IRBuilder, conditions: list[ir.Value]) -> ir.Value | None:
    """The conjunction of i1 conditions; None for none."""
    result = None
    for condition in conditions:
        result = condition if result is None else b.and_(result, condition)
    return result
