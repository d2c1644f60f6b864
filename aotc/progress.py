"""What a long compile is doing: one line on the terminal through its stages.

The CLI opens a `Progress` on stderr where that is a terminal (and -q is not given);
the stages report into whichever is open (`stage`, `step`: import, each pass, the
memory plan, kernels i/N, LLVM's optimization, the object, the archive), and with none
open they cost a lookup.  Nothing shows for the first DELAY seconds, so a quick compile
prints no more than before; the line is erased when the compile ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

DELAY = 2.0  # seconds before the line shows
WIDTH = 79  # the line is cut to fit an 80-column terminal

_OPEN: ContextVar[Progress | None] = ContextVar("aotc_progress", default=None)


class Progress:
    """The line on `stream`: the latest stage, shown once DELAY seconds have passed."""

    def __init__(self, stream: TextIO, delay: float = DELAY) -> None:
        self.stream, self.delay = stream, delay
        self.started = time.monotonic()
        self.shown = 0  # characters on the line now

    def show(self, text: str) -> None:
        if time.monotonic() - self.started < self.delay:
            return
        text = f"aotc: {text}"[:WIDTH]
        self.stream.write("\r" + text.ljust(self.shown))
        self.stream.flush()
        self.shown = len(text)

    def erase(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()
            self.shown = 0


@contextmanager
def reporting(stream: TextIO, delay: float = DELAY) -> Iterator[Progress]:
    """Report the stages of what runs inside onto `stream`; erase the line after."""
    progress = Progress(stream, delay)
    token = _OPEN.set(progress)
    try:
        yield progress
    finally:
        _OPEN.reset(token)
        progress.erase()


def stage(text: str) -> None:
    """The compile is now at `text` (shown where a Progress is open)."""
    progress = _OPEN.get()
    if progress is not None:
        progress.show(text)


def step(what: str, done: int, total: int) -> None:
    """`what` done/total, e.g. kernels 12/80."""
    stage(f"{what} {done}/{total}")
