"""Temporaries placed in the gaps that the values' packing leaves (heap.py's
`place_at_steps`, `largest_gaps`): the kernels are sized to the largest gap at their
step, so their temporaries go there and the arena stays the values' own."""

from __future__ import annotations

import random

from aotc.buffers.heap import Interval, largest_gaps, pack, place_at_steps


def _overlap(a: Interval, b: Interval) -> bool:
    alive = a.start <= b.end and b.start <= a.end
    return alive and a.offset < b.offset + b.size and b.offset < a.offset + a.size


def test_largest_gaps_by_hand():
    # step 0: [0, 64) busy; step 1: [0, 64) and [128, 192) busy, below a top of 320
    fixed = [Interval("a", 0, 1, 64, 0), Interval("b", 1, 2, 64, 128)]
    assert largest_gaps(3, fixed, 320, 64) == [256, 128, 128]


def test_temporaries_fit_their_gaps_without_raising_the_arena():
    """Random values packed, then at each step a temporary of the largest gap there:
    none overlaps a value alive then nor another temporary of its step, and the top is
    the values' arena."""
    rng = random.Random(5)
    for _ in range(20):
        steps = 30
        values = []
        for n in range(40):
            start = rng.randrange(steps)
            end = min(steps - 1, start + rng.randrange(6))
            values.append(Interval(("v", n), start, end, 64 * rng.randrange(1, 20)))
        arena = pack(values, 64)
        gaps = largest_gaps(steps, values, arena, 64)
        temps = [Interval(("t", s), s, s, gap) for s, gap in enumerate(gaps) if gap]
        assert place_at_steps(temps, values, 64) == arena
        for t in temps:
            assert t.offset + t.size <= arena
            assert not any(_overlap(t, v) for v in values), t


def test_a_temporary_past_every_gap_goes_on_top():
    fixed = [Interval("a", 0, 0, 128, 0)]
    temps = [Interval("t", 0, 0, 256), Interval("u", 0, 0, 64)]
    assert place_at_steps(temps, fixed, 64) == 128 + 256 + 64
    assert not _overlap(temps[0], temps[1])
