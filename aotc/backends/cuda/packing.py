"""Sub-byte constants packed in the weights blob, and the generator that reads them.

The IR stores s4/u4/s2/u2 and f4e2m1fn values one byte each (ir/types.py): on the
device a MatMulNBits weight kept as its u4 values (ir/dequantization.py) took twice
the bytes of the model's packed ones, and a GEMV streaming it read twice the memory.
`pack_constants` lays the weights blob out anew for the kernels: every constant in
blob order at the next `ALIGNMENT` boundary, those of the types in `PACKED_BITS`
packed 8 / bits values to a byte in ONNX's order (element i in bits
[bits * (i % per_byte), bits * (i % per_byte + 1)) of byte i // per_byte: element 2i
in the low nibble), and the plan's slices moved with them.  The kernels read a packed
slice through `packed_generator` (kernel.operand_generators asks `slice_generator`,
the one way a CUDA kernel reads its operands), which loads the byte and extracts the
field, sign-extended for signed types: the byte the unpacked blob held, so every
reader (a dot's tiles, a Cast, a Gather) sees the same values.

A constant stays one byte a value where some read of it would not go through the
generator (`KEPT_AS_STORED`): the host launcher copying its bytes to an output, a
slice over it of another type or extent.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from ...buffers import ALIGNMENT, Blob, BufferKind, BufferPlan, Slice
from ...buffers.heap import align_up
from ...buffers.liveness import array_indices
from ...ir import DType, Op, Shape
from ...ir.types import SUB_BYTE_INTS
from ..llvm.context import Gen
from ..llvm.elemental import linearize, memory_generator
from ..llvm.lltypes import I8, from_storage, i64
from .context import GpuContext

# the element types stored packed, and the width of each value's field
PACKED_BITS = {dtype: dtype.bits for dtype in sorted((*SUB_BYTE_INTS, DType.F4E2M1FN), key=str)}


@dataclass(frozen=True)
class PackedConstants:
    """A plan laid out over the packed blob (`plan.weights`), and the slices read packed."""

    plan: BufferPlan
    fields: dict[Slice, DType]  # packed slice -> the element type of its values


def pack_constants(plan: BufferPlan) -> PackedConstants:
    """`plan` over a blob whose packable constants (`_packed_regions`) are packed."""
    regions = _constant_regions(plan)
    packed = _packed_regions(plan, regions)
    if not packed:
        return PackedConstants(plan, {})
    blob = bytearray()
    moved = {}  # old start -> (new start, new size) of every region
    for start, size in regions.items():
        data = plan.weights[start : start + size]
        if start in packed:
            data = pack_fields(data, PACKED_BITS[packed[start]])
        offset = align_up(len(blob), ALIGNMENT)
        blob.extend(bytes(offset - len(blob)))
        blob.extend(data)
        moved[start] = (offset, len(data))
    final = replace(plan.mapped(_relocation(moved, packed)), weights=Blob.of(bytes(blob)))
    fields = {Slice(BufferKind.CONSTANT, 0, *moved[s]): packed[s] for s in packed}
    return PackedConstants(final, fields)


def pack_fields(stored: bytes, bits: int) -> bytes:
    """Values stored a byte each (their low `bits` bits), packed 8 / bits to a byte, the
    first in the low bits; the last byte's unused fields are zero."""
    per_byte = 8 // bits
    values = np.frombuffer(stored, np.uint8) & np.uint8((1 << bits) - 1)
    padded = np.zeros(-(-len(values) // per_byte) * per_byte, np.uint8)
    padded[: len(values)] = values
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    fields = padded.reshape(-1, per_byte) << shifts
    return np.bitwise_or.reduce(fields, axis=1).astype(np.uint8).tobytes()


# -- which constants ------------------------------------------------------------------


def _constant_regions(plan: BufferPlan) -> dict[int, int]:
    """Start -> size of each constant's bytes in the blob, by start (views and tuple
    elements of a constant lie inside its region)."""
    regions: dict[int, int] = {}
    for where in plan.slices.values():
        if where.kind is BufferKind.CONSTANT and where.size:
            regions[where.offset] = max(regions.get(where.offset, 0), where.size)
    return dict(sorted(regions.items()))


@dataclass(frozen=True)
class _Candidate:
    """A constant of one of PACKED_BITS's types: its slice, and every (slice, array shape
    or None) of the plan over its bytes."""

    region: Slice
    dtype: DType
    over: tuple[tuple[Slice, Shape | None], ...]


def _packed_regions(plan: BufferPlan, regions: dict[int, int]) -> dict[int, DType]:
    """Start -> element type of the regions stored packed: the candidates that no row of
    KEPT_AS_STORED keeps as they are.  None in a plan with nested computations (the
    CUDA backend refuses control flow before any kernel reads)."""
    if plan.nested:
        return {}
    return {
        c.region.offset: c.dtype
        for c in _candidates(plan, regions)
        if not any(row(plan, c) for row in KEPT_AS_STORED)
    }


def _candidates(plan: BufferPlan, regions: dict[int, int]) -> Iterator[_Candidate]:
    """The scheduled constants of PACKED_BITS's types that are a whole region each."""
    shapes = {
        (id(instr), index): shape
        for instr in plan.schedule
        for index, shape in array_indices(instr.shape)
    }
    starts = list(regions)
    over: dict[int, list] = {}
    for key, part in plan.slices.items():
        if part.kind is BufferKind.CONSTANT and part.size:
            start = starts[bisect.bisect_right(starts, part.offset) - 1]
            over.setdefault(start, []).append((part, shapes.get(key)))
    for instr in plan.schedule:
        where = plan.slices.get((id(instr), ()))
        if instr.op is not Op.CONSTANT or where is None or not where.size:
            continue
        dtype = instr.array_shape.dtype
        if dtype in PACKED_BITS and regions[where.offset] == where.size:
            yield _Candidate(where, dtype, tuple(over[where.offset]))


def _copied_to_an_output(plan: BufferPlan, candidate: _Candidate) -> bool:
    """The launcher copies an output from it byte for byte (a constant returned as is)."""
    return any(source.overlaps(candidate.region) for source, _ in plan.output_copies)


def _viewed_otherwise(plan: BufferPlan, candidate: _Candidate) -> bool:
    """A slice over it is not all of it as values of its type (a part of it, another
    type, or no array of the schedule): `packed_generator` would index such reads from
    the wrong field, or no kernel reads them through it."""
    return any(
        where != candidate.region or shape is None or shape.dtype is not candidate.dtype
        for where, shape in candidate.over
    )


# a constant of PACKED_BITS's types stays one byte a value where one of these holds
KEPT_AS_STORED = (_copied_to_an_output, _viewed_otherwise)


def _relocation(moved: dict[int, tuple[int, int]], packed: dict[int, DType]):
    """Slice -> slice in the new blob: a packed region's (the whole region) becomes the
    packed bytes; others keep their place in their region, which moved."""
    starts = list(moved)

    def where(s: Slice) -> Slice:
        if s.kind is not BufferKind.CONSTANT or not s.size:
            return s
        start = starts[bisect.bisect_right(starts, s.offset) - 1]
        offset, size = moved[start]
        if start in packed:
            return Slice(BufferKind.CONSTANT, 0, offset, size)
        return replace(s, offset=offset + s.offset - start)

    return where


# -- reading ----------------------------------------------------------------------------


def slice_generator(ctx: GpuContext, where: Slice, shape: Shape) -> Gen:
    """Loads of the array at `where`: a packed constant's by its fields, others' as stored."""
    if where in ctx.packed:
        return packed_generator(ctx, where, shape)
    return memory_generator(ctx, where, shape)


def packed_generator(ctx: GpuContext, where: Slice, shape: Shape) -> Gen:
    """Loads of a packed constant: element i's byte, shifted left to put its field at the
    top, then right (arithmetically for signed types) to the byte the value was stored
    as unpacked, which `from_storage` brings into registers as for any load.  The byte is
    invariant (nothing stores to the weights), as memory_generator marks its loads."""
    dtype = shape.dtype
    bits = PACKED_BITS[dtype]
    per_byte = 8 // bits

    def gen(index):
        b = ctx.builder
        assert b is not None
        down = b.ashr if dtype.is_signed_int else b.lshr
        linear = linearize(b, index, shape.dims)
        byte = b.lshr(linear, i64(per_byte.bit_length() - 1))
        pointer = b.gep(ctx.slice_pointer(where), [byte], inbounds=True, source_etype=I8)
        loaded = b.load(pointer, typ=I8)
        loaded.set_metadata("invariant.load", b.module.add_metadata([]))
        lane = b.trunc(b.and_(linear, i64(per_byte - 1)), I8)
        up = b.sub(ir.Constant(I8, 8 - bits), b.mul(lane, ir.Constant(I8, bits)))
        return from_storage(b, dtype, down(b.shl(loaded, up), ir.Constant(I8, 8 - bits)))

    return gen
