"""Output bands: a dilated convolution split where the taps that read the image change.

padding_taps.py drops the taps that read only padding for every output; a tap can
also read padding for some outputs only.  DeepLab's rate-24 3x3 convolution over a
32x32 feature map reads the image with its outer taps in the outer 8 rows and
columns only: 3/4 of its multiply-adds multiply zeros.  Along a spatial dim of a
stride-1 window, tap t reads position o - pad_low + t * dilation for output o; the
taps that land in [0, extent) form an interval for each o.  Consecutive outputs with
the same interval are a band, and a band's outputs are a convolution, without
padding, of the slice of the input its taps read, with those taps' sub-kernel.  A box
of bands (one per dim) is one such convolution; the boxes' results are concatenated
back along each dim.  Each output is the same products of real values (exact).

Bands shorter than MIN_BAND merge into a neighbour (the union of their taps, padded
where those miss the image): a convolution of a few rows runs its kernel badly.  The
input slices cost nothing (fusion puts them in the convolutions' kernels, which pack
the columns through them), but the concatenates copy the result once: an NCHW result
split along its rows is not its parts back to back, so buffers/concat.py cannot place
them, and the convolutions lose their epilogue to the concatenates' loop.  The split
is made only when the arithmetic it saves, less that copy, is over SAVING of the
convolution's.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..ir import Instruction, Op, Window
from .fusion import BYTE_COST
from .rewrite import InsertingBuilder, rewrite, rule

# a band of fewer outputs merges into a neighbour
MIN_BAND = 4
# the share of the convolution's arithmetic the split must save, net of its copies
SAVING = 0.25


@dataclass(frozen=True)
class Band:
    """Outputs [start, stop) along one dim, computed with kernel taps [first, last]."""

    start: int
    stop: int
    first: int
    last: int

    @property
    def work(self) -> int:
        """Outputs times taps: the band's share of the dim's multiply-adds."""
        return (self.stop - self.start) * (self.last - self.first + 1)

    def join(self, other: Band) -> Band:
        return Band(
            min(self.start, other.start),
            max(self.stop, other.stop),
            min(self.first, other.first),
            max(self.last, other.last),
        )


@dataclass(frozen=True)
class Reads:
    """What a band reads along its dim: input [low, high), and the padding its
    outer taps still need there (a merged band's)."""

    low: int
    high: int
    pad_low: int
    pad_high: int


@dataclass(frozen=True)
class DimBands:
    """One spatial dim of a stride-1 convolution, split into bands."""

    size: int  # window taps
    dilation: int
    pad: int  # low padding
    extent: int  # input
    bands: tuple[Band, ...]

    def reads(self, band: Band) -> Reads:
        first = band.start - self.pad + band.first * self.dilation
        last = band.stop - 1 - self.pad + band.last * self.dilation
        low, high = max(first, 0), min(last + 1, self.extent)
        return Reads(low, high, low - first, last + 1 - high)

    @property
    def kept(self) -> float:
        """The share of the dim's taps times outputs the bands compute."""
        outputs = self.bands[-1].stop
        return sum(band.work for band in self.bands) / (outputs * self.size)


def live_taps(window: Window, dim: int, extent: int, o: int) -> tuple[int, int] | None:
    """The taps that read the image for output `o` along `dim` (stride 1), or None."""
    dilation, pad = window.rhs_dilation[dim], window.pad_low[dim]
    live = [t for t in range(window.size[dim]) if 0 <= o - pad + t * dilation < extent]
    return (live[0], live[-1]) if live else None


def dim_bands(window: Window, dim: int, extent: int, outputs: int) -> DimBands | None:
    """`dim`'s bands, tiny ones merged; None where some output reads no image."""
    taps = [live_taps(window, dim, extent, o) for o in range(outputs)]
    if None in taps:
        return None
    bands = []
    for interval, run in itertools.groupby(range(outputs), lambda o: taps[o]):
        members = list(run)
        bands.append(Band(members[0], members[-1] + 1, *interval))
    merged = _merge_tiny(bands)
    dilation, pad = window.rhs_dilation[dim], window.pad_low[dim]
    return DimBands(window.size[dim], dilation, pad, extent, tuple(merged))


def _merge_tiny(bands: list[Band]) -> list[Band]:
    """Merge the shortest band under MIN_BAND into the neighbour that adds least work."""
    while len(bands) > 1:
        i = min(range(len(bands)), key=lambda n: bands[n].stop - bands[n].start)
        if bands[i].stop - bands[i].start >= MIN_BAND:
            break
        options = [j for j in (i - 1, i + 1) if 0 <= j < len(bands)]
        j = min(options, key=lambda n: bands[i].join(bands[n]).work - bands[n].work)
        low, high = min(i, j), max(i, j)
        bands[low : high + 1] = [bands[i].join(bands[j])]
    return bands


def _worth_it(conv: Instruction, splits: list[DimBands]) -> bool:
    """Saved arithmetic, less the result's copy, over SAVING of the convolution's
    (operations: 2 per multiply-add, BYTE_COST per byte read or written)."""
    dims, w = conv.conv, conv.operands[1].array_shape
    assert dims is not None
    kept = math.prod(split.kept for split in splits)
    per_output = 2 * w.size // w.dims[dims.kernel_output_feature]  # all taps
    work = per_output * conv.array_shape.size
    copy = BYTE_COST * 2 * conv.array_shape.nbytes  # the concatenates' read and write
    return (1 - kept) * work - copy > SAVING * work


@rule(Op.CONVOLUTION)
def split_into_bands(b: InsertingBuilder, conv: Instruction):
    # conv(x, w) -> concat over boxes of conv(x[box's reads], w[box's taps])
    window, dims = conv.window, conv.conv
    assert window is not None and dims is not None, conv.name  # the verifier's rule
    if any(s != 1 for s in (*window.stride, *window.lhs_dilation)):
        return None
    if conv.batch_group_count != 1 or conv.array_shape.size == 0:
        return None
    x = conv.operands[0]
    splits = []
    for n, (x_dim, o_dim) in enumerate(zip(dims.input_spatial, dims.output_spatial)):
        split = dim_bands(window, n, x.array_shape.dims[x_dim], conv.array_shape.dims[o_dim])
        if split is None:
            return None
        splits.append(split)
    if all(len(split.bands) == 1 for split in splits) or not _worth_it(conv, splits):
        return None
    return _assemble(b, conv, splits, ())


def _assemble(b, conv: Instruction, splits: list[DimBands], box: tuple[Band, ...]):
    """The outputs of the boxes that start with `box`, concatenated along the dims after it."""
    d = len(box)
    if d == len(splits):
        return _box_conv(b, conv, splits, box)
    parts = [_assemble(b, conv, splits, (*box, band)) for band in splits[d].bands]
    if len(parts) == 1:
        return parts[0]
    assert conv.conv is not None
    return b.concatenate(parts, conv.conv.output_spatial[d])


def _box_conv(b, conv: Instruction, splits: list[DimBands], box: tuple[Band, ...]):
    """One box's outputs: its input slice convolved with its taps, its padding only."""
    x, w = conv.operands
    dims, window = conv.conv, conv.window
    assert dims is not None and window is not None
    x_starts, x_limits = [0] * x.array_shape.rank, list(x.array_shape.dims)
    w_starts, w_limits = [0] * w.array_shape.rank, list(w.array_shape.dims)
    pad_low, pad_high = [], []
    for split, band, x_dim, w_dim in zip(splits, box, dims.input_spatial, dims.kernel_spatial):
        reads = split.reads(band)
        x_starts[x_dim], x_limits[x_dim] = reads.low, reads.high
        w_starts[w_dim], w_limits[w_dim] = band.first, band.last + 1
        pad_low.append(reads.pad_low)
        pad_high.append(reads.pad_high)
    image = _sliced(b, x, x_starts, x_limits)
    kernel = _sliced(b, w, w_starts, w_limits)
    size = [band.last - band.first + 1 for band in box]
    smaller = Window.make(size, None, pad_low, pad_high, None, window.rhs_dilation)
    dtype = conv.array_shape.dtype
    return b.convolution(image, kernel, smaller, dims, conv.feature_group_count, dtype)


def _sliced(b, x: Instruction, starts: list[int], limits: list[int]) -> Instruction:
    if starts == [0] * len(starts) and limits == list(x.array_shape.dims):
        return x
    return b.slice(x, starts, limits)


class ConvBands:
    name = "conv_bands"

    def run(self, module) -> bool:
        return rewrite(module, [split_into_bands])
