"""Constant GEMM operands packed at compile time: the weights blob of the CPU object.

A GEMM packs its operands into panels on every call (panels.py).  Where an operand
is a constant read as a plain view (convolution and dot weights), numpy packs it
here once, into the weights blob, exactly as `StridedPanels.pack` would for the
blocking the kernel uses, K slice by K slice (the layout `PackedPanels` reads in
place).  `prepack` returns the plan the backend emits: each copy's slice is in
the plan's slices under `packed_key`, where contraction.py's planning finds it;
identical copies are stored once; constants that nothing reads any more but
through packed copies are dropped from the blob (the others move up), so the
object does not carry those weights twice.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ...buffers import Blob, BufferKind, BufferPlan, Deferred, Slice
from ...buffers.blob import Piece
from ...buffers.liveness import array_indices
from ...ir import Instruction, Op
from ...ir.dequantization import block_dequantization
from .blocking import WORKSPACE_ALIGNMENT
from .contraction import contraction_plans, widens_to_pairs
from .prepackable import PackedShape, Prepackable, StridedLayout, packed_key
from .views import STRIDED_VIEW_OPS

# the slice of a constant dropped from the blob: nothing may read it (program.py refuses to)
DROPPED = Slice(BufferKind.CONSTANT, -1, 0, 0)

# a packed copy up to this size is kept as made; a bigger one is made again when the
# blob is written, so that no more than one lives at a time (big models' weights)
KEPT_PACKED_BYTES = 16 << 20

FramePath = tuple[tuple[str, int], ...]  # a frame: the (control instruction, computation) steps


@dataclass(frozen=True)
class _Request:
    """Operand `side` (0: A, 1: B) of contraction `number` of `kernel`, in frame `path`:
    the contraction's operand number `operand`."""

    path: FramePath
    kernel: Instruction
    contraction: Instruction
    number: int
    side: int
    operand: int
    layout: StridedLayout
    shape: PackedShape
    dtype: np.dtype
    planned: Prepackable  # packs the values (`pack_constant`)


def prepack(target, plan: BufferPlan) -> BufferPlan:
    """`plan` with its GEMMs' constant operands pre-packed: a new weights blob (the
    constants still read as such, then the packed copies, each 64-byte aligned)."""
    requests = list(_requests(target, plan))
    if not requests:
        return plan
    reads = {path: _packed_reads(path, requests) for path, _ in _frames(plan)}
    plain = [s for path, frame in _frames(plan) for s in _plain_reads(frame, reads[path])]
    regions = _constant_regions(plan)
    candidates = {s.offset for r in requests for s in r.planned.constant_slices(r.side)}
    read = _ReadBytes(plain)
    dropped = {start for start in candidates if not read.overlaps(regions[start])}
    blob = _Pieces()
    moved = {}  # old offset -> new offset of each constant kept
    source = plan.weights
    for start, region in regions.items():
        if start not in dropped:
            kept = Deferred(region.size, partial(source.read, start, region.size))
            moved[start] = blob.append(kept)
    copies: dict = {}
    for r in requests:
        key = (r.layout, r.shape)
        if key not in copies:
            data = r.planned.pack_weights(r.side, source)
            piece: Piece = data
            if len(data) > KEPT_PACKED_BYTES:  # packed again when written: one at a time
                piece = Deferred(len(data), partial(r.planned.pack_weights, r.side, source))
            copies[key] = Slice(BufferKind.CONSTANT, 0, blob.append(piece), len(data))
            del data
    final = plan.mapped(_relocation(regions, moved))
    weights = Blob(blob.pieces, blob.end)
    for path, frame in _frames(final):
        frame.weights = weights
        for r in requests:
            if r.path == path:
                frame.slices[packed_key(r.kernel, r.number, r.side)] = copies[(r.layout, r.shape)]
    return final


# -- which operands ---------------------------------------------------------------


def _frames(plan: BufferPlan, path: FramePath = ()) -> Iterator[tuple[FramePath, BufferPlan]]:
    """The plan and its nested plans (those of whiles and conditionals), recursively."""
    yield path, plan
    for name, nested in plan.nested.items():
        for k, inner in enumerate(nested.plans):
            yield from _frames(inner, (*path, (name, k)))


def _requests(target, plan: BufferPlan) -> Iterator[_Request]:
    """The constant operands of the GEMM kernels of every frame, not yet pre-packed."""
    for path, frame in _frames(plan):
        for instr in frame.schedule:
            found = contraction_plans(target, frame, instr) if frame.needs_code(instr) else None
            if found is None:
                continue
            for number, (contraction, planned) in enumerate(zip(*found)):
                if not isinstance(planned, Prepackable):
                    continue
                for side in (0, 1):
                    if planned.can_pack(side) and planned.packed[side] is None:
                        yield _Request(
                            path,
                            instr,
                            contraction,
                            number,
                            side,
                            planned.operands[side],
                            planned.constant_layout(side),
                            planned.packed_shape(side),
                            planned.source(side).numpy,
                            planned,
                        )


def _packed_reads(path: FramePath, requests: list[_Request]) -> set[tuple[int, int, int]]:
    """(id(kernel), id(contraction), operand number) of the contraction operands read
    pre-packed in frame `path`."""
    return {(id(r.kernel), id(r.contraction), r.operand) for r in requests if r.path == path}


def _plain_reads(frame: BufferPlan, packed: set) -> Iterator[Slice]:
    """The slices that `frame`'s code reads other than through pre-packed copies."""
    for source, _ in frame.output_copies:
        yield source
    for nested in frame.nested.values():
        for source, _ in nested.init_copies:
            yield source
    for instr in frame.schedule:
        if not frame.needs_code(instr):
            continue
        for k, operand in enumerate(instr.operands):
            if not _reads_packed_only(instr, k, packed):
                for index, _ in array_indices(operand.shape):
                    yield frame.slice_of(operand, index)


def _reads_packed_only(kernel: Instruction, k: int, packed: set) -> bool:
    """Whether `kernel` reads its operand k only as pre-packed contraction operands
    (in a fusion: every use of the parameter leads through views to one)."""
    if kernel.op is not Op.FUSION:
        return (id(kernel), id(kernel), k) in packed
    body = kernel.called[0]
    # values on the way to a block-dequantized weight (ir/dequantization.py), which its
    # contraction reads pre-packed whole
    weights = {
        id(m) for i in body.instructions if (w := block_dequantization(i)) for m in w.members
    }
    # the views and widenings reached from the parameter, one at a time (a worklist:
    # chains of them are as long as the fusion)
    pending = [next(p for p in body.parameters if p.index == k)]
    seen = {id(pending[0])}
    while pending:
        node = pending.pop()
        if node is body.root:
            return False
        for user in dict.fromkeys(node.users):
            if user.op in STRIDED_VIEW_OPS or widens_to_pairs(user) or id(user) in weights:
                if id(user) not in seen:
                    seen.add(id(user))
                    pending.append(user)
                continue
            uses = [n for n, o in enumerate(user.operands) if o is node]
            if not all((id(kernel), id(user), n) in packed for n in uses):
                return False
    return True


# -- the blob -----------------------------------------------------------------------


def _constant_regions(plan: BufferPlan) -> dict[int, Slice]:
    """Offset -> slice of each non-empty constant of the blob, by offset (every frame's
    slices start from the same constants, so the entry's have them all)."""
    regions = {
        s.offset: s for s in plan.slices.values() if s.kind is BufferKind.CONSTANT and s.size
    }
    return dict(sorted(regions.items()))


def _relocation(regions: dict[int, Slice], moved: dict[int, int]):
    """Slice -> slice in the new blob: constants kept move with their region; those
    dropped become empty (nothing reads them but through packed copies)."""
    starts = list(regions)

    def where(s: Slice) -> Slice:
        if s.kind is not BufferKind.CONSTANT or not s.size:
            return s
        start = starts[bisect.bisect_right(starts, s.offset) - 1]
        if start not in moved:
            return DROPPED
        return replace(s, offset=moved[start] + s.offset - start)

    return where


class _ReadBytes:
    """The weights bytes that `slices` read (those of constants), to ask of a region
    whether any is in it by bisection rather than slice by slice."""

    def __init__(self, slices: list[Slice]) -> None:
        spans = sorted(
            (s.offset, s.offset + s.size) for s in slices if s.kind is BufferKind.CONSTANT
        )
        self.starts: list[int] = []
        self.ends: list[int] = []
        for start, end in spans:  # merged where they overlap or touch
            if self.ends and start <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], end)
            else:
                self.starts.append(start)
                self.ends.append(end)

    def overlaps(self, region: Slice) -> bool:
        k = bisect.bisect_left(self.ends, region.offset + 1)  # the first span ending past it
        return k < len(self.starts) and self.starts[k] < region.offset + region.size


class _Pieces:
    """The new blob's pieces, each at the next aligned offset."""

    def __init__(self) -> None:
        self.pieces: list[tuple[int, Piece]] = []
        self.end = 0

    def append(self, piece: Piece) -> int:
        """Place `piece` at the next aligned offset; returns that offset."""
        offset = -(-self.end // WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT
        self.pieces.append((offset, piece))
        self.end = offset + (piece.size if isinstance(piece, Deferred) else len(piece))
        return offset
