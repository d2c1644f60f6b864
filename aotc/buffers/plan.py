"""BufferPlan: where every value of the entry computation lives.

The contract between buffer assignment and the backends.  Every array value
(an instruction's result, or one element of a tuple-valued result, named by a
`shape_index`) gets a `Slice`: a range of bytes in the arena, in a caller's
input or output buffer, or in the constant (weights) blob.  Views (reshape,
bitcast, get-tuple-element, tuple) share their operand's slice.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..ir import Instruction


class BufferKind(enum.Enum):
    ARENA = "arena"  # offset into the scratch arena
    PARAMETER = "parameter"  # caller's input number `index`
    OUTPUT = "output"  # caller's output number `index`
    CONSTANT = "constant"  # offset into the weights blob


@dataclass(frozen=True)
class Slice:
    kind: BufferKind
    index: int  # parameter/output number; 0 for arena and constants
    offset: int  # byte offset within that buffer
    size: int  # bytes

    def overlaps(self, other: Slice) -> bool:
        same_buffer = self.kind == other.kind and self.index == other.index
        before = self.offset < other.offset + other.size
        after = other.offset < self.offset + self.size
        return same_buffer and before and after

    def text(self) -> str:
        where = self.kind.value
        if self.kind in (BufferKind.PARAMETER, BufferKind.OUTPUT):
            where += str(self.index)
        return f"{where}[{self.offset}:{self.offset + self.size}]"


@dataclass(frozen=True)
class PlannedBuffer:
    """One arena buffer: who defines it, when it is alive, where it sits."""

    name: str
    shape_index: tuple[int, ...]
    start: int
    end: int
    slice: Slice


@dataclass
class BufferPlan:
    """Schedule plus a slice for every (instruction, shape_index) of the entry."""

    schedule: list[Instruction]  # entry instructions in execution order
    slices: dict[tuple[int, tuple[int, ...]], Slice]  # (id(instr), shape_index) -> slice
    arena_bytes: int
    alignment: int
    lower_bound: int  # peak of simultaneously live arena bytes
    naive_total: int  # every arena buffer separate
    weights: bytes  # the constant blob, constants at their slices' offsets
    # (source, destination): copies the backend emits after the schedule, for
    # outputs that cannot be computed in place (a parameter or constant
    # returned as is, one value returned twice)
    output_copies: list[tuple[Slice, Slice]] = field(default_factory=list)
    buffers: list[PlannedBuffer] = field(default_factory=list)  # arena buffers, by offset

    def slice_of(self, instr: Instruction, shape_index: tuple[int, ...] = ()) -> Slice:
        return self.slices[(id(instr), shape_index)]

    @property
    def weight_bytes(self) -> int:
        return len(self.weights)

    def to_text(self) -> str:
        """Arena size, then one line per arena buffer: slice, live range, value."""
        lines = [
            f"arena {self.arena_bytes} bytes (lower bound {self.lower_bound}, "
            f"naive {self.naive_total}), weights {self.weight_bytes} bytes"
        ]
        for b in self.buffers:
            index = "" if not b.shape_index else "{" + ",".join(map(str, b.shape_index)) + "}"
            lines.append(f"  {b.slice.text():>24}  live [{b.start},{b.end}]  {b.name}{index}")
        for src, dst in self.output_copies:
            lines.append(f"  copy {src.text()} -> {dst.text()}")
        return "\n".join(lines) + "\n"
