"""Depthwise convolution rows in bands: a few output rows and vector chunks per pass.

Output row by output row, a KH x KW window loads an input vector and a weight per
multiply-add (the weights of a 7x7 window do not fit in registers: they spill).  A band
of output rows loads each input vector it reaches once and multiplies it into every
output row whose window holds it (4 rows of a 7x7 window: 10 input rows, not 28), and
a tile of chunks of columns uses each weight once per chunk.

Which kernel rows lie inside the image is known per output row at compile time: rows
group into runs that read the same kernel rows (all of them inside the image, fewer
near the padding).  Long runs loop over bands; the rows near the padding are emitted
band by band, each with its own kernel rows (no masks or selects for padded rows).
Columns are row_chunks.py's chunks: edge chunks with constant lane masks, where the
lanes a tap does not reach multiply a weight zeroed there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from ..llvm.lltypes import i64
from ..llvm.loops import for_range
from .gemm_config import GemmConfig
from .row_chunks import RowChunks
from .vectors import bits, masked_load, mul_add, pick_lanes, splat, store_first

# Rows and column chunks per band, measured (7x7, 5x5 and 3x3 windows, strides 1 and 2,
# AVX-512): 4 x 2 ran within 5% of the best of 1-6 rows x 1-4 chunks on each, and 1.2-2x
# the row-by-row kernel; more chunks per tile ran slower (spills), fewer rows too.
BAND_ROWS = 4
TILE_CHUNKS = 2
# independent sums per tile at the least (a partial sum per kernel row in turn where a
# tile has fewer output vectors): FMA latency times throughput; 4 ran 1.2x slower
MIN_CHAINS = 8
LOOPED_BANDS = 2  # a run of at least this many bands loops; shorter ones are unrolled


@dataclass(frozen=True)
class Bands:
    """`count` bands of output rows from `first` on, each a row per entry of `live`
    (the kernel rows inside the image for that row); count > 1: a loop."""

    first: int
    count: int
    live: tuple[tuple[int, ...], ...]


def row_bands(p: dict, out_height: int, rows: int) -> list[Bands]:
    """The output rows as bands of up to `rows` rows: runs of rows that read the same
    kernel rows loop over their bands when long enough, the others are unrolled."""
    runs: list[tuple[int, int, tuple[int, ...]]] = []  # [first, stop), kernel rows
    for oh in range(out_height):
        live = _live_kernel_rows(p, oh)
        if runs and runs[-1][2] == live:
            runs[-1] = (runs[-1][0], oh + 1, live)
        else:
            runs.append((oh, oh + 1, live))
    bands: list[Bands] = []
    pending: list[tuple[int, ...]] = []  # rows to unroll, up to the next looped run

    def unroll(stop: int) -> None:
        first = stop - len(pending)
        for start in range(0, len(pending), rows):
            bands.append(Bands(first + start, 1, tuple(pending[start : start + rows])))
        pending.clear()

    for first, stop, live in runs:
        loops = (stop - first) // rows
        if loops < LOOPED_BANDS:
            pending.extend([live] * (stop - first))
            continue
        unroll(first)
        bands.append(Bands(first, loops, (live,) * rows))
        pending.extend([live] * ((stop - first) % rows))
        unroll(stop)
    unroll(out_height)
    return bands


def _live_kernel_rows(p: dict, oh: int) -> tuple[int, ...]:
    """The kernel rows of output row `oh` that read inside the image."""
    top = oh * p["sh"] - p["ph"]
    return tuple(kh for kh in range(p["kh"]) if 0 <= top + kh * p["dh"] < p["height"])


def _reads(live: list[tuple[int, ...]], p: dict) -> dict[int, list[tuple[int, int]]]:
    """Per input row (its offset from the band's first output row's first window row):
    the (band row, kernel row) pairs that read it."""
    reads: dict[int, list[tuple[int, int]]] = {}
    for r, kernel_rows in enumerate(live):
        for kh in kernel_rows:
            reads.setdefault(r * p["sh"] + kh * p["dh"], []).append((r, kh))
    return dict(sorted(reads.items()))


def emit_bands(ctx, cfg: GemmConfig, p: dict, planes, weights, out_height: int) -> None:
    """The output plane `planes[1]` of input plane `planes[0]`: all its rows, band by
    band; weights[kh][kw]: the channel's taps."""
    b = ctx.builder
    lanes = _chunk_lanes(cfg.lanes, p["out_width"])
    taps = [kw * p["dw"] - p["pw"] for kw in range(p["kw"])]  # input column of column 0
    chunks = RowChunks(tuple(taps), p["sw"], p["width"], p["out_width"], lanes)
    band = _Band(ctx, cfg, p, chunks, planes, weights)
    for bands in row_bands(p, out_height, BAND_ROWS):
        with for_range(b, bands.count, "band") as t:
            step = b.mul(t, i64(len(bands.live)))
            band.emit(b.add(step, i64(bands.first)), bands.live)


class _Band:
    """One band of output rows at a run-time first row, tile by tile of chunks."""

    def __init__(self, ctx, cfg: GemmConfig, p: dict, chunks: RowChunks, planes, weights):
        self.ctx, self.cfg, self.p, self.chunks = ctx, cfg, p, chunks
        self.plane_in, self.plane_out = planes
        self.weights = weights
        self.vec = ir.VectorType(cfg.element, chunks.lanes)

    def emit(self, oh: ir.Value, live: tuple[tuple[int, ...], ...]) -> None:
        b, p, ty = self.ctx.builder, self.p, self.cfg.element
        reads = _reads(list(live), p)
        top = b.sub(b.mul(oh, i64(p["sh"])), i64(p["ph"]))
        lines = {
            d: b.gep(
                self.plane_in, [b.mul(b.add(top, i64(d)), i64(p["h_stride"]))], source_etype=ty
            )
            for d in reads
        }
        rows = [
            b.gep(self.plane_out, [b.mul(b.add(oh, i64(r)), i64(p["out_width"]))], source_etype=ty)
            for r in range(len(live))
        ]
        self.chunks.emit_tiles(b, TILE_CHUNKS, lambda tile: self._tile(tile, reads, lines, rows))

    def _tile(self, tile: list, reads: dict, lines: dict, rows: list) -> None:
        """Sums of every (band row, chunk) in registers, input row by input row, then
        stored."""
        ctx, cfg, b = self.ctx, self.cfg, self.ctx.builder
        # kernel rows in turn: the sums of a tile with few output vectors split in parts
        parts = max(1, min(self.p["kh"], -(-MIN_CHAINS // (len(rows) * len(tile)))))
        weights = self._weights()
        zero = ir.Constant(self.vec, None)
        sums = [[[zero] * parts for _ in tile] for _ in rows]
        for d, pairs in reads.items():
            for kw, (shift, inside) in enumerate(zip(self.chunks.shifts, self.chunks.whole)):
                for t, (ow0, masks, count) in enumerate(tile):
                    mask = masks[kw]
                    if mask is not None and not any(mask):
                        continue
                    x = self._tap(lines[d], ow0, shift, mask, inside)
                    # lanes past the row's end are not stored: any sum will do there
                    if mask is not None and all(m or l >= count for l, m in enumerate(mask)):
                        mask = None
                    for r, kh in pairs:
                        part = sums[r][t][kh % parts]
                        part = mul_add(ctx, b, cfg, weights(kh, kw, mask), x, part)
                        sums[r][t][kh % parts] = part
        for row, row_sums in zip(rows, sums):
            for (ow0, _, count), chunk_sums in zip(tile, row_sums):
                total = chunk_sums[0]
                for part in chunk_sums[1:]:
                    total = b.fadd(total, part)
                store_first(ctx, cfg, total, b.gep(row, [ow0], source_etype=cfg.element), count)

    def _weights(self) -> Callable[[int, int, list | None], ir.Value]:
        """weights(kh, kw, mask): the channel's tap in the lanes of `mask` (None: all),
        zero in the others, splat where first used in the tile (kept in registers or
        not, as LLVM sees fit: a broadcast from memory is one load, like a spilled
        register's).  The tap's input is zero there too, so those lanes add 0 x 0
        (never weight x 0: NaN for an infinite weight), with no select on the sums."""
        b, cached = self.ctx.builder, {}
        zero = ir.Constant(self.vec, None)

        def weight(kh: int, kw: int, mask: list | None) -> ir.Value:
            key = (kh, kw, None if mask is None else tuple(mask))
            if key not in cached:
                value = splat(b, self.weights[kh][kw], self.vec)
                cached[key] = value if mask is None else b.select(bits(mask), value, zero)
            return cached[key]

        return weight

    def _tap(self, line, ow0, shift: int, mask, inside: bool):
        """Lanes l: line[(ow0 + l) * sw + shift], zero where not mask[l] (mask None:
        every lane valid).  Strided columns come from one contiguous load, shuffled
        (masked to the span used unless `inside`: gathers were 5x slower)."""
        ctx, cfg, b = self.ctx, self.cfg, self.ctx.builder
        stride, lanes = self.p["sw"], self.chunks.lanes
        start = b.add(b.mul(ow0, i64(stride)), i64(shift))
        pointer = b.gep(line, [start], source_etype=cfg.element)
        wanted = [True] * lanes if mask is None else mask
        width = lanes * stride
        # from the first to the last lane wanted: a gap-free mask stays a masked load
        first = wanted.index(True) * stride
        last = (lanes - 1 - wanted[::-1].index(True)) * stride
        used = [first <= j <= last for j in range(width)]
        if all(used) or (mask is None and inside):
            x = b.load(pointer, typ=ir.VectorType(cfg.element, width), align=cfg.itemsize)
        else:
            x = masked_load(ctx, b, cfg, pointer, bits(used))
        return x if stride == 1 else pick_lanes(b, x, (j * stride for j in range(lanes)))


def _chunk_lanes(lanes: int, out_width: int) -> int:
    """Lanes per chunk of a row: a full vector, or the smallest power of two that holds
    a narrower row (a 7-wide row in 8 lanes, not 16)."""
    return min(lanes, 1 << (out_width - 1).bit_length())
