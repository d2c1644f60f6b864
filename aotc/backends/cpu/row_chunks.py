"""An output row of a window op (pooling, depthwise convolution) cut into vector chunks.

Each window column (tap) reads input column ow * stride + shift for output column ow;
the output columns whose input column is inside the row are known at compile time
(`valid_span`).  The chunks every tap fills run in one loop of plain loads (a tile of
several a turn, for depthwise bands); the others (the edges, the partial last chunk) are
emitted one by one with constant lane masks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from ..llvm.lltypes import i64
from ..llvm.loops import for_range


def valid_span(shift: int, stride: int, width: int, out_width: int) -> tuple[int, int]:
    """Output columns [low, high) whose input column ow*stride + shift is in [0, width)."""
    low = 0
    while low < out_width and low * stride + shift < 0:
        low += 1
    high = out_width
    while high > low and (high - 1) * stride + shift >= width:
        high -= 1
    return low, high


@dataclass(frozen=True)
class RowChunks:
    """The chunks of `lanes` output columns of a row of `out_width` read by taps at input
    column offsets `shifts` with column stride `stride` from a row of `width`."""

    shifts: tuple[int, ...]
    stride: int
    width: int
    out_width: int
    lanes: int

    @property
    def spans(self) -> list[tuple[int, int]]:
        return [valid_span(s, self.stride, self.width, self.out_width) for s in self.shifts]

    @property
    def count(self) -> int:
        return -(-self.out_width // self.lanes)

    @property
    def clean(self) -> tuple[int, int]:
        """Chunks [begin, end) every tap fills."""
        spans, lanes = self.spans, self.lanes
        low, high = max(s[0] for s in spans), min(s[1] for s in spans)
        clean = [c for c in range(self.count) if c * lanes >= low and (c + 1) * lanes <= high]
        return (clean[0], clean[-1] + 1) if clean else (self.count, self.count)

    @property
    def whole(self) -> list[bool]:
        """Per tap: whether the clean chunks' loads of `lanes * stride` contiguous elements
        stay inside the row."""
        end = self.clean[1]
        return [end * self.lanes * self.stride + s <= self.width for s in self.shifts]

    def emit(self, b: ir.IRBuilder, chunk: Callable[[ir.Value, list, int], None]) -> None:
        """chunk(first output column, per tap its lane mask (None: all lanes valid), the
        columns to store) for every chunk: the edges unrolled, the clean ones in a loop."""
        self.emit_tiles(b, 1, lambda chunks: chunk(*chunks[0]))

    def emit_tiles(self, b: ir.IRBuilder, size: int, tile: Callable[[list], None]) -> None:
        """tile([(first output column, masks, columns to store) per chunk]) over tiles of
        up to `size` clean chunks, those that fill whole tiles in a loop, and over the
        edge chunks one by one (each with masks of its own: a tile of several would
        hold more values than registers)."""
        begin, end = self.clean
        spans, lanes = self.spans, self.lanes
        # the clean chunks left over run first; fewer than a tile of them: no loop
        looped = begin + (end - begin) % size if end - begin >= size else end

        def chunk(c: int) -> tuple[ir.Value, list | None, int]:
            if begin <= c < end:
                return i64(c * lanes), [None] * len(spans), lanes
            columns = range(c * lanes, (c + 1) * lanes)
            masks = [[lo <= ow < hi for ow in columns] for lo, hi in spans]
            return i64(c * lanes), masks, min(lanes, self.out_width - c * lanes)

        for c in range(begin):
            tile([chunk(c)])
        for start in range(begin, looped, size):
            tile([chunk(c) for c in range(start, min(start + size, looped))])
        if looped < end:
            with for_range(b, (end - looped) // size, "chunk") as t:
                first = b.mul(b.add(b.mul(t, i64(size)), i64(looped)), i64(lanes))
                tile(
                    [
                        (b.add(first, i64(k * lanes)), [None] * len(spans), lanes)
                        for k in range(size)
                    ]
                )
        for c in range(end, self.count):
            tile([chunk(c)])
