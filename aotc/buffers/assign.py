"""Buffer assignment: schedule + liveness + heap -> BufferPlan.

Parameters live in the caller's input buffers, constants in the weights
blob, values the entry returns in the caller's output buffers (computed in
place when nothing stands in the way, else copied at the end), everything
else in one arena where buffers with disjoint live ranges share bytes.
"""

from __future__ import annotations

from ..ir import Instruction, Module, Op
from ..ir.types import to_storage
from .heap import Interval, align_up, pack, peak_live_bytes
from .liveness import BufferDefinitions, array_indices, is_defining, live_ranges
from .plan import BufferKind, BufferPlan, PlannedBuffer, Slice
from .inplace import BufferSets, reads_at_output_index
from .schedule import candidate_schedules

ALIGNMENT = 64


def assign_buffers(module: Module) -> BufferPlan:
    """Plan the storage of every value of the entry computation.

    Two schedules are tried (depth-first from the root, and the computation's
    own order); the one with the lower peak of live bytes is kept.
    """
    plans = [_plan(module, order) for order in candidate_schedules(module.entry)]
    return min(plans, key=lambda p: (p.lower_bound, p.arena_bytes))


def _plan(module: Module, order: list[Instruction]) -> BufferPlan:
    entry = module.entry
    defs = BufferDefinitions()
    ranges = live_ranges(order, defs)
    root_sources = defs.sources(entry.root)
    end = len(order)
    for source, index in root_sources:
        if (id(source), index) in ranges:
            ranges[(id(source), index)][1] = end
    sets = _merge_in_place(order, defs, ranges)

    slices: dict[tuple[int, tuple[int, ...]], Slice] = {}
    weights = _place_constants(module, slices)
    output_copies = _place_outputs(root_sources, slices, sets)

    merged: dict = {}  # set representative -> Interval over all its members
    names = {}
    for instr in order:
        if instr.op in (Op.PARAMETER, Op.CONSTANT):
            continue
        for index, shape in array_indices(instr.shape):
            key = (id(instr), index)
            if not is_defining(instr, index, defs):
                continue
            rep = sets.find(key)
            if rep in slices:
                continue
            start, stop = ranges[key]
            item = merged.get(rep)
            if item is None:
                merged[rep] = Interval(rep, start, stop, shape.nbytes)
                names[rep] = (instr.name, index)
            else:
                item.start, item.end = min(item.start, start), max(item.end, stop)
    intervals = list(merged.values())
    arena_bytes = pack(intervals, ALIGNMENT)
    for item in intervals:
        slices[item.key] = Slice(BufferKind.ARENA, 0, item.offset, item.size)

    for instr in order:
        if instr.op is Op.PARAMETER:
            size = instr.shape.nbytes
            slices[(id(instr), ())] = Slice(BufferKind.PARAMETER, instr.index, 0, size)
    # in-place results share their set's bytes; views and tuples share their source's
    for instr in order:
        for index, _ in array_indices(instr.shape):
            source, source_index = defs.source(instr, index)
            key = sets.find((id(source), source_index))
            slices[(id(instr), index)] = slices[key]

    return BufferPlan(
        schedule=order,
        slices=slices,
        arena_bytes=arena_bytes,
        alignment=ALIGNMENT,
        lower_bound=peak_live_bytes(intervals, ALIGNMENT),
        naive_total=_naive_total(order, defs, root_sources),
        weights=weights,
        output_copies=[(slices[sets.find(src)], dst) for src, dst in output_copies],
        buffers=[
            PlannedBuffer(*names[i.key], i.start, i.end, slices[i.key])
            for i in sorted(intervals, key=lambda i: (i.offset, i.start))
        ],
    )


def _merge_in_place(order, defs: BufferDefinitions, ranges) -> BufferSets:
    """Let elementwise kernels take over an operand buffer that dies at them."""
    sets = BufferSets()
    ends: dict = {}  # set representative -> last use of any member
    for time, instr in enumerate(order):
        own = (id(instr), ())
        if own not in ranges or instr.op in (Op.PARAMETER, Op.CONSTANT):
            continue
        for k, operand in enumerate(instr.operands):
            source, index = defs.source(operand, ())
            if source.op in (Op.PARAMETER, Op.CONSTANT) or (id(source), index) not in ranges:
                continue
            rep = sets.find((id(source), index))
            if ends.get(rep, ranges[(id(source), index)][1]) != time:
                continue
            if not reads_at_output_index(instr, k):
                continue
            sets.union(rep, own)
            ends[sets.find(own)] = max(ranges[own][1], time)
            break
    return sets


def _naive_total(order, defs: BufferDefinitions, root_sources) -> int:
    """Bytes if every intermediate value (not an input, weight or result) had its own buffer."""
    returned = {(id(source), index) for source, index in root_sources}
    total = 0
    for instr in order:
        if instr.op in (Op.PARAMETER, Op.CONSTANT):
            continue
        for index, shape in array_indices(instr.shape):
            if is_defining(instr, index, defs) and (id(instr), index) not in returned:
                total += align_up(max(shape.nbytes, 1), ALIGNMENT)
    return total


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


def _place_outputs(root_sources, slices: dict, sets: BufferSets) -> list:
    """Put each returned value straight into its output buffer when it can be.

    A value can be computed in place if the entry computes it (not a parameter
    or constant) and it is not also returned under another output.  Returns the
    (source key, destination slice) copies needed for the others.
    """
    copies = []
    for number, (source, index) in enumerate(root_sources):
        key = sets.find((id(source), index))
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
