"""Concatenation in place: operands computed straight into their part of the result.

A concatenate along a dim with only unit dims before it (channels of one
NCHW image, rows of a matrix) is its operands' bytes back to back.  An
operand that dies where the concatenate is computed (its last reader; the
usual case: inception branches, squeezenet fire modules, densenet layers)
can then live in its part of the result's buffer from the start: the kernel
that computes it writes there, and the concatenate copies nothing
(`BufferPlan.needs_code`).  Operands that are themselves such concatenates
nest, so a densenet block builds its growing feature map in one buffer.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..ir import Instruction, Op, Shape
from .inplace import BufferSets
from .liveness import LEAVES, BufferDefinitions


def contiguous_parts(concat: Instruction) -> bool:
    """Whether each operand of a concatenate is one contiguous byte range of the result."""
    if concat.op is not Op.CONCATENATE or not isinstance(concat.shape, Shape):
        return False
    dim = concat.dimensions[0]
    return math.prod(concat.shape.dims[:dim]) == 1


def concat_placements(order, defs: BufferDefinitions, sets: BufferSets, merged, taken) -> dict:
    """{operand's buffer set: (concatenate's buffer set, byte offset)} for the operands
    computed in place, inner concatenates first; `merged`: each set's Interval (its
    members' live range); `taken`: sets already placed elsewhere (caller buffers)."""
    placed: dict = {}
    for time, instr in enumerate(order):
        if not contiguous_parts(instr):
            continue
        own = sets.find((id(instr), ()))
        if own not in merged or own in taken:
            continue
        reps = [_operand_set(o, defs, sets, merged) for o in instr.operands]
        offset = 0
        for operand, rep in zip(instr.operands, reps):
            if (
                rep is not None
                and rep != own
                and reps.count(rep) == 1
                and rep not in placed
                and rep not in taken
                and merged[rep].end <= time  # no reader after the concatenate
            ):
                placed[rep] = (own, offset)
            offset += operand.shape.nbytes
    return placed


def _operand_set(operand: Instruction, defs: BufferDefinitions, sets: BufferSets, merged):
    """The buffer set holding `operand` if a kernel computes it in this frame, else None."""
    source, index = defs.source(operand, ())
    if source.op in LEAVES:
        return None
    rep = sets.find((id(source), index))
    return rep if rep in merged and merged[rep].size == operand.shape.nbytes else None


def nest(placed: dict, merged) -> None:
    """Stretch each concatenate's interval over its operands' (inner ones first)."""
    for rep, (container, _) in placed.items():
        outer = merged[container]
        outer.start = min(outer.start, merged[rep].start)
        outer.end = max(outer.end, merged[rep].end)


def resolve(placed: dict, slices: dict, merged) -> None:
    """Slices of the placed sets: their part of the (resolved) concatenate's slice."""
    for rep in placed:
        # the containers out to one already resolved, then their slices inward (no
        # recursion: concatenates nest as deep as the model's)
        chain = [rep]
        while chain[-1] not in slices:
            chain.append(placed[chain[-1]][0])
        for inner in reversed(chain[:-1]):
            container, offset = placed[inner]
            outer = slices[container]
            slices[inner] = replace(outer, offset=outer.offset + offset, size=merged[inner].size)
