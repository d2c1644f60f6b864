"""Packing live ranges into one arena (a heap simulator).

Kept apart from liveness, as XLA keeps its heap simulator apart from buffer
liveness: this module sees only intervals of time and sizes.  Strategy is
TFLite's greedy-by-size / XLA's best fit: place the largest buffer first, at
the lowest-waste gap among buffers alive at the same time.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

# jittered orders tried when the fixed ones leave the arena above its lower bound
RANDOM_ORDERS = 64


@dataclass
class Interval:
    """A buffer to place: alive over schedule positions [start, end], `size` bytes."""

    key: object
    start: int
    end: int
    size: int
    offset: int = -1


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def pack(intervals: list[Interval], alignment: int) -> int:
    """Give every interval an offset; return the arena size.

    Buffers alive at the same time never share bytes.  Several greedy orders
    (largest first, most-conflicting first, largest area, time order) are tried,
    each placing at the best-fitting and at the first fitting gap, as XLA's heap
    simulator tries several; then jittered largest-first orders until one
    reaches the lower bound.  The smallest arena is kept.
    """
    # who overlaps whom, found once: each placement then looks at its own neighbours
    # in time, not at every buffer placed (quadratic in long models)
    overlapping = _overlapping(intervals)
    conflicts = {key: len(others) + 1 for key, others in overlapping.items()}
    orders = (
        lambda i: (-i.size, i.start, i.end),
        lambda i: (-conflicts[id(i)], -i.size, i.start, i.end),
        lambda i: (-i.size * (i.end - i.start + 1), i.start),  # largest area of time x bytes
        lambda i: (i.start, -i.size),  # in time order, as a linear scan allocator
    )
    candidates = [sorted(intervals, key=order) for order in orders]
    # then, while above the lower bound, largest first with sizes jittered (seeded, so
    # builds stay reproducible): different near-ties often pack tighter
    lower = peak_live_bytes(intervals, alignment)
    jitter = random.Random(0)
    best = None
    for trial in range(len(candidates) + RANDOM_ORDERS):
        if trial < len(candidates):
            order = candidates[trial]
        elif best[0] > lower:
            noise = {id(i): jitter.uniform(0.5, 1.5) for i in intervals}
            order = sorted(intervals, key=lambda i: (-i.size * noise[id(i)], i.start))
        else:
            break
        for gap in (_best_gap, _first_gap):
            size = _pack_in_order(order, alignment, overlapping, gap)
            if best is None or size < best[0]:
                best = (size, [i.offset for i in intervals])
    for item, offset in zip(intervals, best[1]):
        item.offset = offset
    return best[0]


def _overlapping(intervals: list[Interval]) -> dict[int, list[Interval]]:
    """id(interval) -> the other intervals alive at some same time: one sweep in order of
    start, keeping those alive (by end) that a later start can still meet."""
    found: dict[int, list[Interval]] = {id(i): [] for i in intervals}
    alive: list[tuple[int, int, Interval]] = []  # a heap of (end, number, interval)
    for number, item in enumerate(sorted(intervals, key=lambda i: i.start)):
        while alive and alive[0][0] < item.start:
            heapq.heappop(alive)
        for _, _, other in alive:
            found[id(item)].append(other)
            found[id(other)].append(item)
        heapq.heappush(alive, (item.end, number, item))
    return found


def _pack_in_order(
    intervals: list[Interval], alignment: int, overlapping: dict[int, list[Interval]], gap_of
) -> int:
    placed: set[int] = set()
    top = 0
    for item in intervals:
        size = align_up(max(item.size, 1), alignment)
        busy = sorted(
            (p.offset, p.offset + align_up(max(p.size, 1), alignment))
            for p in overlapping[id(item)]
            if id(p) in placed
        )
        item.offset = gap_of(busy, size)
        placed.add(id(item))
        top = max(top, item.offset + size)
    return top


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


def _first_gap(busy: list[tuple[int, int]], size: int) -> int:
    """Offset of the lowest free gap that holds `size`, else the end of the heap."""
    cursor = 0
    for begin, end in busy:
        if begin - cursor >= size:
            return cursor
        cursor = max(cursor, end)
    return cursor


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


def place_at_steps(items: list[Interval], fixed: list[Interval], alignment: int) -> int:
    """Give each of `items` (buffers alive at one step each, a kernel's temporary) an
    offset in the best-fitting gap among the `fixed` buffers (already placed) alive at
    its step; return the top of the heap (of `fixed` and `items`)."""
    top = max((align_up(max(f.size, 1), alignment) + f.offset for f in fixed), default=0)
    for alive, item in _alive_at_steps(items, fixed):
        size = align_up(max(item.size, 1), alignment)
        busy = sorted((f.offset, f.offset + align_up(max(f.size, 1), alignment)) for f in alive)
        item.offset = _best_gap(busy, size)
        alive.append(item)  # the next item of the same step sees it
        top = max(top, item.offset + size)
    return top


def largest_gaps(steps: int, fixed: list[Interval], top: int, alignment: int) -> list[int]:
    """Per step in [0, steps): the largest free run of bytes below `top` among the
    `fixed` buffers (placed) alive then."""
    probes = [Interval(step, step, step, 0) for step in range(steps)]
    gaps = [0] * steps
    for alive, probe in _alive_at_steps(probes, fixed):
        step = probe.start
        busy = sorted((f.offset, f.offset + align_up(max(f.size, 1), alignment)) for f in alive)
        cursor, largest = 0, 0
        for begin, end in busy:
            largest = max(largest, min(begin, top) - cursor)
            cursor = max(cursor, end)
        gaps[step] = max(largest, top - cursor, 0)
    return gaps


def _alive_at_steps(items: list[Interval], fixed: list[Interval]):
    """(the fixed intervals alive at its step, item) for each item in order of its step
    (one sweep; the list is the same object for items of one step)."""
    by_start = sorted(fixed, key=lambda f: f.start)
    alive: list[tuple[int, int, Interval]] = []  # a heap of (end, number, interval)
    next_fixed, current, members = 0, None, []
    for item in sorted(items, key=lambda i: i.start):
        step = item.start
        if step != current:
            while next_fixed < len(by_start) and by_start[next_fixed].start <= step:
                f = by_start[next_fixed]
                heapq.heappush(alive, (f.end, next_fixed, f))
                next_fixed += 1
            while alive and alive[0][0] < step:
                heapq.heappop(alive)
            current, members = step, [f for _, _, f in alive]
        yield members, item
