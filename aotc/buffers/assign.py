"""Buffer assignment: schedule + liveness + heap -> BufferPlan.

Parameters live in the caller's input buffers, constants in the weights
blob, values the entry returns in the caller's output buffers (computed in
place when nothing stands in the way, else copied at the end), everything
else in one arena where buffers with disjoint live ranges share bytes.
"""

from __future__ import annotations

from ..ir import Module, Op
from ..ir.types import to_storage
from .heap import Interval, align_up, pack, peak_live_bytes
from .liveness import BufferDefinitions, array_indices, is_defining, live_ranges
from .plan import BufferKind, BufferPlan, PlannedBuffer, Slice
from .schedule import schedule

ALIGNMENT = 64


def assign_buffers(module: Module) -> BufferPlan:
    """Plan the storage of every value of the entry computation."""
    entry = module.entry
    order = schedule(entry)
    defs = BufferDefinitions()
    ranges = live_ranges(order, defs)
    root_sources = defs.sources(entry.root)
    end = len(order)
    for source, index in root_sources:
        if (id(source), index) in ranges:
            ranges[(id(source), index)][1] = end

    slices: dict[tuple[int, tuple[int, ...]], Slice] = {}
    weights = _place_constants(module, slices)
    output_copies = _place_outputs(root_sources, slices)

    intervals = []
    names = {}
    for instr in order:
        if instr.op in (Op.PARAMETER, Op.CONSTANT):
            continue
        for index, shape in array_indices(instr.shape):
            key = (id(instr), index)
            if is_defining(instr, index, defs) and key not in slices:
                start, stop = ranges[key]
                intervals.append(Interval(key, start, stop, shape.nbytes))
                names[key] = (instr.name, index)
    arena_bytes = pack(intervals, ALIGNMENT)
    for item in intervals:
        slices[item.key] = Slice(BufferKind.ARENA, 0, item.offset, item.size)

    for instr in order:
        if instr.op is Op.PARAMETER:
            slices[(id(instr), ())] = Slice(BufferKind.PARAMETER, instr.index, 0, instr.shape.nbytes)
    # views and tuples share the bytes of what they resolve to
    for instr in order:
        for index, _ in array_indices(instr.shape):
            source, source_index = defs.source(instr, index)
            slices[(id(instr), index)] = slices[(id(source), source_index)]

    return BufferPlan(
        schedule=order,
        slices=slices,
        arena_bytes=arena_bytes,
        alignment=ALIGNMENT,
        lower_bound=peak_live_bytes(intervals, ALIGNMENT),
        naive_total=sum(align_up(max(i.size, 1), ALIGNMENT) for i in intervals),
        weights=weights,
        output_copies=[(slices[src], dst) for src, dst in output_copies],
        buffers=[
            PlannedBuffer(*names[i.key], i.start, i.end, slices[i.key])
            for i in sorted(intervals, key=lambda i: (i.offset, i.start))
        ],
    )


def _place_constants(module: Module, slices: dict) -> bytes:
    """Lay every constant of the module out in one blob, each 64-byte aligned."""
    blob = bytearray()
    for computation in module.called_computations():
        for instr in computation.instructions:
            if instr.op is not Op.CONSTANT:
                continue
            data = to_storage(instr.literal, instr.shape.dtype).tobytes()
            offset = align_up(len(blob), ALIGNMENT)
            blob.extend(b"\0" * (offset - len(blob)))
            blob.extend(data)
            slices[(id(instr), ())] = Slice(BufferKind.CONSTANT, 0, offset, len(data))
    return bytes(blob)


def _place_outputs(root_sources, slices: dict) -> list:
    """Put each returned value straight into its output buffer when it can be.

    A value can be computed in place if the entry computes it (not a parameter
    or constant) and it is not also returned under another output.  Returns the
    (source key, destination slice) copies needed for the others.
    """
    copies = []
    for number, (source, index) in enumerate(root_sources):
        key = (id(source), index)
        size = _array_shape(source, index).nbytes
        destination = Slice(BufferKind.OUTPUT, number, 0, size)
        if source.op in (Op.PARAMETER, Op.CONSTANT) or key in slices:
            copies.append((key, destination))
        else:
            slices[key] = destination
    return copies


def _array_shape(instr, index):
    shape = instr.shape
    for i in index:
        shape = shape.elements[i]
    return shape
