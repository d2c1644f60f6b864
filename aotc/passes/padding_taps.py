"""Padding taps: convolution window taps that read only padding are dropped.

A tap of a dilated window over a small image can fall in the padding for every
output: DeepLab's atrous convolutions (dilation 24 and 36 over a 32x32 feature
map) read zeros there, so a 3x3 kernel with dilation 36 is a 1x1 convolution
that does a ninth of the work.  Per spatial dim, tap t of a stride-1 window
reads positions o - pad_low + t * dilation for the outputs o: the taps whose
positions all miss the image (before its start or past its end) are sliced off
the kernel's ends and the padding shrinks by what they spanned, so the output
is the same array computed from the same products of real values (exact).
"""

from __future__ import annotations

from ..ir import Instruction, Op, Window
from .rewrite import InsertingBuilder, rewrite, rule


def _live_taps(window: Window, dim: int, extent: int, out: int) -> tuple[int, int]:
    """[first, last] taps along `dim` that read the image for some output (stride 1)."""
    dilation, pad = window.rhs_dilation[dim], window.pad_low[dim]
    live = [
        t
        for t in range(window.size[dim])
        if t * dilation - pad < extent and t * dilation - pad + out - 1 >= 0
    ]
    return (live[0], live[-1]) if live else (0, window.size[dim] - 1)


@rule(Op.CONVOLUTION)
def drop_padding_taps(b: InsertingBuilder, instr: Instruction):
    # conv(x, w, window k, pads p) -> conv(x, w[live taps], window k', pads p')
    window, dims = instr.window, instr.conv
    assert window is not None and dims is not None, instr.name  # the verifier's rule
    if any(s != 1 for s in (*window.stride, *window.lhs_dilation)):
        return None
    x, w = instr.operands
    size, pad_low, pad_high = list(window.size), list(window.pad_low), list(window.pad_high)
    starts, limits = [0] * w.array_shape.rank, list(w.array_shape.dims)
    for n, (x_dim, w_dim, o_dim) in enumerate(
        zip(dims.input_spatial, dims.kernel_spatial, dims.output_spatial)
    ):
        extent, out = x.array_shape.dims[x_dim], instr.array_shape.dims[o_dim]
        first, last = _live_taps(window, n, extent, out)
        dilation = window.rhs_dilation[n]
        low, high = pad_low[n] - first * dilation, pad_high[n] - (size[n] - 1 - last) * dilation
        if (first, last) == (0, size[n] - 1) or low < 0 or high < 0:
            continue
        size[n], pad_low[n], pad_high[n] = last - first + 1, low, high
        starts[w_dim], limits[w_dim] = first, last + 1
    if size == list(window.size):
        return None
    kernel = b.slice(w, starts, limits)
    smaller = Window.make(size, None, pad_low, pad_high, None, window.rhs_dilation)
    dtype = instr.array_shape.dtype
    return b.convolution(x, kernel, smaller, dims, instr.feature_group_count, dtype)


class PaddingTaps:
    name = "padding_taps"

    def run(self, module) -> bool:
        return rewrite(module, [drop_padding_taps])
