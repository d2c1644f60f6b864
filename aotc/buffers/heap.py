"""Packing live ranges into one arena (a heap simulator).

Kept apart from liveness, as XLA keeps its heap simulator apart from buffer
liveness: this module sees only intervals of time and sizes.  Strategy is
TFLite's greedy-by-size / XLA's best fit: place the largest buffer first, at
the lowest-waste gap among buffers alive at the same time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass
class Interval:
    """A buffer to place: alive over schedule positions [start, end], `size` bytes."""

    key: object
    start: int
    end: int
    size: int
    offset: int = -1

    def overlaps_in_time(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def pack(intervals: list[Interval], alignment: int) -> int:
    """Give every interval an offset; return the arena size.

    Buffers alive at the same time never share bytes.  Two greedy orders are
    tried, largest first and most-conflicting first (as XLA's heap simulator
    tries several), and the smaller arena is kept.
    """
    conflicts = _conflict_counts(intervals)
    orders = (
        lambda i: (-i.size, i.start, i.end),
        lambda i: (-conflicts[id(i)], -i.size, i.start, i.end),
    )
    best = None
    for order in orders:
        size = _pack_in_order(sorted(intervals, key=order), alignment)
        if best is None or size < best[0]:
            best = (size, [i.offset for i in intervals])
    for item, offset in zip(intervals, best[1]):
        item.offset = offset
    return best[0]


def _conflict_counts(intervals: list[Interval]) -> dict[int, int]:
    """id(interval) -> how many intervals overlap it in time (itself included)."""
    starts = sorted(i.start for i in intervals)
    ends = sorted(i.end for i in intervals)
    counts = {}
    for item in intervals:
        ended_before = bisect.bisect_left(ends, item.start)
        starting_after = len(starts) - bisect.bisect_right(starts, item.end)
        counts[id(item)] = len(intervals) - ended_before - starting_after
    return counts


def _pack_in_order(intervals: list[Interval], alignment: int) -> int:
    placed: list[Interval] = []
    for item in intervals:
        size = align_up(max(item.size, 1), alignment)
        busy = sorted(
            (p.offset, p.offset + align_up(max(p.size, 1), alignment))
            for p in placed
            if p.overlaps_in_time(item)
        )
        item.offset = _best_gap(busy, size)
        placed.append(item)
    return max((p.offset + align_up(max(p.size, 1), alignment) for p in placed), default=0)


def _best_gap(busy: list[tuple[int, int]], size: int) -> int:
    """Offset of the smallest free gap that holds `size`, else the end of the heap."""
    best_offset, best_waste = None, None
    cursor = 0
    for begin, end in busy:
        gap = begin - cursor
        if gap >= size and (best_waste is None or gap - size < best_waste):
            best_offset, best_waste = cursor, gap - size
        cursor = max(cursor, end)
    return cursor if best_offset is None else best_offset


def peak_live_bytes(intervals: list[Interval], alignment: int) -> int:
    """The lower bound: the largest total size of buffers alive at one time."""
    events: dict[int, int] = {}
    for item in intervals:
        size = align_up(max(item.size, 1), alignment)
        events[item.start] = events.get(item.start, 0) + size
        events[item.end + 1] = events.get(item.end + 1, 0) - size
    peak = live = 0
    for time in sorted(events):
        live += events[time]
        peak = max(peak, live)
    return peak
