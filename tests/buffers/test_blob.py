"""The weights blob in pieces (buffers/blob.py): every way of reading it gives the bytes
of the pieces at their offsets with zeros between, and a made piece of the wrong size or
pieces that overlap are refused."""

from __future__ import annotations

import io

import numpy as np
import pytest

from aotc.artifacts.weights import weights_checksum
from aotc.buffers import Blob, Deferred

RNG = np.random.default_rng(0)
FIRST = RNG.standard_normal(1001).astype(np.float32)  # 4,004 bytes
MADE = RNG.integers(0, 256, 333, dtype=np.uint8)
SIZE = 6_000


def _blob() -> tuple[Blob, bytes]:
    """A blob of an array, a deferred piece and bytes, and the bytes it stands for."""
    pieces = [(64, FIRST), (4_096, Deferred(MADE.nbytes, lambda: MADE)), (5_000, b"tail")]
    want = bytearray(SIZE)
    want[64 : 64 + FIRST.nbytes] = FIRST.tobytes()
    want[4_096 : 4_096 + MADE.nbytes] = MADE.tobytes()
    want[5_000:5_004] = b"tail"
    return Blob(pieces, SIZE), bytes(want)


def test_joined_written_and_read_in_ranges_alike():
    blob, want = _blob()
    assert len(blob) == SIZE and bytes(blob) == want and blob == want
    out = io.BytesIO()
    blob.write_to(out)
    assert out.getvalue() == want
    for start, stop in [(0, 64), (60, 70), (100, 200), (4_000, 4_500), (4_400, 5_002), (0, SIZE)]:
        assert blob[start:stop] == want[start:stop], (start, stop)
    # within one stored piece: a view of it, not a copy
    view = blob.read(64, 16)
    assert np.shares_memory(np.frombuffer(view, np.uint8), FIRST)


def test_shifted_pieces_follow_a_head():
    blob, want = _blob()
    moved = Blob([(0, b"head"), *blob.shifted(128)], 128 + SIZE)
    assert bytes(moved) == b"head" + bytes(124) + want


def test_checksum_of_the_pieces_is_that_of_the_bytes():
    blob, want = _blob()
    assert weights_checksum(blob) == weights_checksum(want)
    odd = want[:4_099]  # a last word zero-padded
    assert weights_checksum(Blob([(0, odd)], len(odd))) == weights_checksum(Blob.of(odd))


def test_bad_pieces_are_refused():
    with pytest.raises(AssertionError, match="overlap"):
        Blob([(0, b"abcd"), (2, b"ef")], 8)
    with pytest.raises(AssertionError, match="past the blob"):
        Blob([(6, b"abcd")], 8)
    wrong = Blob([(0, Deferred(8, lambda: b"short"))], 8)
    with pytest.raises(AssertionError, match="made 5 of 8 bytes"):
        bytes(wrong)
    with pytest.raises(IndexError):
        _blob()[0].read(SIZE - 4, 8)
