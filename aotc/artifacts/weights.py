"""NAME.weights: the weights of a model compiled with `--weights external`, outside its
object.

The file holds the raw bytes exactly as the kernels read them (pre-packed), nothing
else: mapped at offset 0 it is page-aligned, so `mmap` serves it as it is, and several
processes mapping it share its pages.  NAME.h states its size and checksum
(NAME_WEIGHTS_BYTES, NAME_WEIGHTS_CHECKSUM), which NAME_set_weights checks; the checksum
is runtime_c/aotc_runtime.h's `aotc_weights_checksum`, computed here with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..buffers import Blob

WEIGHTS_SUFFIX = ".weights"
WEIGHTS_ALIGN = 64  # what NAME_set_weights requires of the pointer (aotc_runtime.c)
CHECKSUM_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
# words per numpy step: bounds the temporaries for weights of gigabytes
_CHUNK_WORDS = 1 << 20


@dataclass(frozen=True, eq=False)
class WeightsFile:
    """The bytes of NAME.weights and their checksum."""

    data: Blob
    checksum: int

    @classmethod
    def of(cls, data: Blob) -> WeightsFile:
        return cls(data, weights_checksum(data))

    @property
    def size(self) -> int:
        return len(self.data)


def weights_checksum(data: Blob | bytes) -> int:
    """aotc_weights_checksum of `data`: size + the sum of mix(word ^ index) over its
    little-endian 64-bit words (the last zero-padded), modulo 2**64; the blob's chunks
    read in turn, each piece made once."""
    blob = data if isinstance(data, Blob) else Blob.of(data)
    total = len(blob)
    words_done, pending = 0, b""
    for chunk in blob.chunks():
        for start in range(0, len(chunk), _CHUNK_WORDS * 8):
            part = pending + bytes(chunk[start : start + _CHUNK_WORDS * 8])
            whole = len(part) - len(part) % 8
            total += _mixed_sum(np.frombuffer(part[:whole], "<u8"), words_done)
            words_done += whole // 8
            pending = part[whole:]
    if pending:
        total += _mixed_sum(np.frombuffer(pending + bytes(8 - len(pending)), "<u8"), words_done)
    return total % 2**64


def _mixed_sum(words: np.ndarray, first: int) -> int:
    """The sum of mix(word ^ index) over `words`, the first at index `first`."""
    with np.errstate(over="ignore"):
        mixed = (words ^ np.arange(first, first + len(words), dtype=np.uint64)) * (
            CHECKSUM_MULTIPLIER
        )
        mixed ^= mixed >> np.uint64(32)
        return int(mixed.sum(dtype=np.uint64))
