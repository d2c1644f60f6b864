"""The weights blob: pieces at offsets with zeros between, joined only when asked.

A model's weights can be gigabytes.  Built as one bytes object, the blob was a copy of
every constant, and each step that made a blob of its own (the plan, the pre-packing,
the object with its weights section) held another while the one before it lived.  A
`Blob` keeps its pieces instead: arrays that are the IR's constants as they lie in
memory (views where the storage type is the array's), and `Deferred` pieces made when
read (a constant in another storage type, a pre-packed GEMM operand), and gives them out
in order (`chunks`), so that the object and NAME.weights are written piece by piece and
a made piece lives only while it is written.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

# bytes of zeros given out at once between pieces
_ZEROS = bytes(1 << 20)


@dataclass(frozen=True)
class Deferred:
    """A piece of `size` bytes that `make` computes each time it is read."""

    size: int
    make: Callable[[], bytes | memoryview | np.ndarray]

    def data(self) -> memoryview:
        made = _bytes_view(self.make())
        if made.nbytes != self.size:  # a sizing bug: never write a wrong blob
            raise AssertionError(
                f"a deferred weights piece made {made.nbytes} of {self.size} bytes"
            )
        return made


Piece = bytes | np.ndarray | Deferred


class Blob:
    """`size` bytes: each piece at its offset (in increasing order, none overlapping),
    zeros elsewhere."""

    def __init__(self, pieces: Sequence[tuple[int, Piece]], size: int) -> None:
        self.offsets = [offset for offset, _ in pieces]
        self.pieces = [piece for _, piece in pieces]
        self.size = size
        end = 0
        for offset, piece in pieces:
            if offset < end:
                raise AssertionError(f"weights pieces overlap at offset {offset}")
            end = offset + _size(piece)
        if end > size:
            raise AssertionError(f"weights pieces end at {end}, past the blob's {size} bytes")

    @classmethod
    def of(cls, data: bytes) -> Blob:
        return cls([(0, bytes(data))] if data else [], len(data))

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __bytes__(self) -> bytes:
        return b"".join(self.chunks())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Blob, bytes, bytearray)):
            return len(self) == len(other) and bytes(self) == bytes(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, key: slice) -> bytes:
        """The bytes of a range (`blob[start:stop]`)."""
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError("a weights blob is read in ranges")
        return bytes(self.read(start, max(stop - start, 0)))

    def read(self, start: int, size: int) -> memoryview:
        """The `size` bytes from `start`: a view of the piece holding them all where
        one does (no copy), else assembled, pieces made as needed."""
        stop = start + size
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"bytes {start}..{stop} of a {self.size}-byte weights blob")
        k = bisect.bisect_right(self.offsets, start) - 1
        if k >= 0 and not isinstance(self.pieces[k], Deferred):
            offset = self.offsets[k]
            if stop <= offset + _size(self.pieces[k]):
                return _data(self.pieces[k])[start - offset : stop - offset]
        out = bytearray(size)
        first = max(bisect.bisect_right(self.offsets, start) - 1, 0)
        for k in range(first, len(self.pieces)):
            offset = self.offsets[k]
            if offset >= stop:
                break
            piece = self.pieces[k]
            end = offset + _size(piece)
            if end <= start:
                continue
            data = _data(piece)
            low, high = max(start, offset), min(stop, end)
            out[low - start : high - start] = data[low - offset : high - offset]
        return memoryview(out)

    def shifted(self, by: int) -> list[tuple[int, Piece]]:
        """The pieces at their offsets plus `by` (the blob placed after `by` bytes)."""
        return [(offset + by, piece) for offset, piece in zip(self.offsets, self.pieces)]

    def chunks(self) -> Iterator[memoryview]:
        """The blob's bytes in order: each piece's, and the zeros between."""
        at = 0
        for offset, piece in zip(self.offsets, self.pieces):
            yield from _zeros(offset - at)
            data = _data(piece)
            yield data
            at = offset + data.nbytes
        yield from _zeros(self.size - at)

    def write_to(self, file: BinaryIO) -> None:
        file.writelines(self.chunks())

    def write_file(self, path: str | os.PathLike) -> None:
        with open(path, "wb") as file:
            self.write_to(file)


def _zeros(count: int) -> Iterator[memoryview]:
    while count > 0:
        step = min(count, len(_ZEROS))
        yield memoryview(_ZEROS)[:step]
        count -= step


def _size(piece: Piece) -> int:
    if isinstance(piece, Deferred):
        return piece.size
    return piece.nbytes if isinstance(piece, np.ndarray) else len(piece)


def _data(piece: Piece) -> memoryview:
    return piece.data() if isinstance(piece, Deferred) else _bytes_view(piece)


def _bytes_view(data: bytes | memoryview | np.ndarray) -> memoryview:
    """The bytes of `data` without a copy where it is contiguous."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    return memoryview(data).cast("B")
