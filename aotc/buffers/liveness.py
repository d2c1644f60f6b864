"""Logical buffers and their live ranges over a schedule.

A logical buffer is the storage one array value needs.  Views (reshape,
bitcast, get-tuple-element, tuple) define no buffer: they resolve to the
buffers of their operand, so a use of a view keeps the viewed buffer alive.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Instruction, Op, Shape, Trait, TupleShape

# values with buffers of their own outside the arena (the caller's inputs, the weights)
LEAVES = frozenset({Op.PARAMETER, Op.CONSTANT})


@dataclass
class LogicalBuffer:
    instr: Instruction  # the defining instruction
    shape_index: tuple[int, ...]
    size: int
    start: int  # schedule position that writes it
    end: int  # last schedule position that reads it

    def overlaps_in_time(self, other: LogicalBuffer) -> bool:
        return self.start <= other.end and other.start <= self.end


def array_indices(shape: Shape | TupleShape, prefix: tuple[int, ...] = ()):
    """(shape_index, array shape) of every array inside a possibly nested shape."""
    if isinstance(shape, TupleShape):
        for i, element in enumerate(shape.elements):
            yield from array_indices(element, prefix + (i,))
    else:
        yield prefix, shape


class BufferDefinitions:
    """Maps every (instruction, shape_index) to the buffer that holds its bytes."""

    def __init__(self):
        self._source: dict[tuple[int, tuple[int, ...]], tuple[Instruction, tuple[int, ...]]] = {}

    def define(self, instr: Instruction) -> None:
        for index, _ in array_indices(instr.shape):
            self._source[(id(instr), index)] = self._resolve(instr, index)

    def _resolve(self, instr: Instruction, index: tuple[int, ...]):
        if instr.op is Op.GET_TUPLE_ELEMENT:
            return self.source(instr.operands[0], (instr.index,) + index)
        if Trait.VIEW in instr.op.traits:  # the operand's bytes, unchanged
            return self.source(instr.operands[0], index)
        if instr.op is Op.TUPLE:
            return self.source(instr.operands[index[0]], index[1:])
        return (instr, index)

    def source(self, instr: Instruction, index: tuple[int, ...] = ()):
        """The (defining instruction, shape_index) whose buffer holds this value."""
        return self._source[(id(instr), index)]

    def sources(self, instr: Instruction) -> list[tuple[Instruction, tuple[int, ...]]]:
        """Every buffer an instruction's (possibly tuple) value reads from."""
        return [self.source(instr, index) for index, _ in array_indices(instr.shape)]


def is_defining(instr: Instruction, index: tuple[int, ...], defs: BufferDefinitions) -> bool:
    source_instr, source_index = defs.source(instr, index)
    return source_instr is instr and source_index == index


def live_ranges(order: list[Instruction], defs: BufferDefinitions) -> dict:
    """(id(instr), shape_index) -> [start, end] for buffers defined in `order`.

    Values the root returns live to the end of the schedule.  A get-tuple-element
    reads no bytes: the uses of its result keep that one element alive, not the
    whole tuple (a while body reading its state element by element).
    """
    ranges: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for time, instr in enumerate(order):
        defs.define(instr)
        if instr.op is Op.GET_TUPLE_ELEMENT:
            continue
        for operand in instr.operands:
            for source, index in defs.sources(operand):
                ranges[(id(source), index)][1] = time
        for index, _ in array_indices(instr.shape):
            if is_defining(instr, index, defs):
                ranges[(id(instr), index)] = [time, time]
    return ranges
