"""Buffer assignment: schedule + liveness + heap -> BufferPlan.

Parameters live in the caller's input buffers, constants in the weights
blob, values the entry returns in the caller's output buffers (computed in
place when nothing stands in the way, else copied at the end), everything
else in one arena where buffers with disjoint live ranges share bytes.

The computations a while or conditional runs are planned the same way, each
in a frame of its own: PARAMETER slices number its parameters' arrays (the
while's state, a branch's operand), OUTPUT slices the instruction's result
arrays, ARENA offsets a block that the parent reserves for the instruction's
time.  Once the parent is packed, the frame is resolved into the parent's
slices (`BufferPlan.mapped`), recursively up to the entry.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from ..errors import UnsupportedError
from ..ir import Computation, Instruction, Module, Op
from ..ir.types import to_storage
from .blob import Blob, Deferred, Piece
from .concat import concat_placements, nest, resolve
from .heap import Interval, align_up, pack, peak_live_bytes, place_at_steps
from .inplace import BufferSets, reads_at_output_index
from .liveness import LEAVES, BufferDefinitions, array_indices, is_defining, live_ranges
from .plan import TEMPORARY, BufferKind, BufferPlan, NestedPlan, PlannedBuffer, Slice
from .schedule import candidate_schedules

ALIGNMENT = 64


class _Role(enum.Enum):
    """What a computation's root values are for, which decides where they go."""

    ENTRY = "entry"  # the caller's output buffers
    BRANCH = "branch"  # the conditional's result buffers
    BODY = "body"  # the while's state, which the body's own parameter reads
    CONDITION = "condition"  # nowhere: the while reads the pred where it was computed


def assign_buffers(
    module: Module,
    temporaries: Mapping[int, int] | None = None,
    fit_forms: bool = True,
    overwrites: Mapping[int, int] | None = None,
) -> BufferPlan:
    """Plan the storage of every value of the entry computation, and of the kernels'
    `temporaries` (id(instruction) -> the scratch bytes its kernel needs while it runs:
    packing panels, split-K partials...), each live only while its instruction runs,
    packed with everything else (`BufferPlan.temporary`).  `fit_forms`: the plans'
    kernels take slower forms whose temporaries fit their rooms (`BufferPlan.fit_forms`).
    `overwrites`: id(instruction) -> the operand whose bytes its kernel may write its
    result over though it reads it elsewhere than at the output's index (the backend's
    word: a convolution that writes each band of rows after reading the next one's
    input), taken as an elementwise kernel's operand is where it dies there.

    Two schedules are tried (depth-first from the root, and the computation's
    own order); the one with the lower peak of live bytes, temporaries included, is kept.
    """
    for computation in module.program_computations():
        if any(i.op is Op.CALL for i in computation.instructions):
            raise UnsupportedError(
                f"%{computation.name} has a call: run the call inliner "
                "(aotc.ir.inline.inline_calls) before buffer assignment"
            )
    context = replace(
        _Context.of(module, temporaries or {}), fit_forms=fit_forms, overwrites=overwrites or {}
    )
    plans = [_plan(module, order, context) for order in candidate_schedules(module.entry)]
    return min(plans, key=lambda p: (p.lower_bound, p.arena_bytes))


@dataclass
class _Context:
    """What every frame of one module shares."""

    constants: dict  # (id(constant), ()) -> its slice of `weights`
    weights: Blob
    temporaries: Mapping[int, int]  # id(instruction) -> its kernel's scratch bytes
    # id(while or conditional) -> plans of its computations (in frames of their own, so
    # the same whatever order the parent is scheduled in)
    called: dict[int, list[BufferPlan]] = field(default_factory=dict)
    fit_forms: bool = True  # BufferPlan.fit_forms of every frame
    overwrites: Mapping[int, int] = field(default_factory=dict)  # see assign_buffers

    @staticmethod
    def of(module: Module, temporaries: Mapping[int, int] | None = None) -> _Context:
        constants: dict = {}
        return _Context(constants, _place_constants(module, constants), temporaries or {})


def _plan(module: Module, order: list[Instruction], context: _Context | None = None):
    """The plan of the entry run in `order`."""
    return _plan_frame(module.entry, order, _Role.ENTRY, context or _Context.of(module))


def _plan_frame(
    computation: Computation, order: list[Instruction], role: _Role, context: _Context
) -> BufferPlan:
    defs = BufferDefinitions()
    ranges = live_ranges(order, defs)
    root_sources = defs.sources(computation.root)
    end = len(order)
    for source, index in root_sources:
        if (id(source), index) in ranges:
            ranges[(id(source), index)][1] = end
    sets = _merge_in_place(order, defs, ranges, context.overwrites)
    leaves = _parameter_leaves(computation)

    merged, names = _merged_intervals(order, defs, ranges, sets)

    slices: dict[tuple[int, tuple[int, ...]], Slice] = dict(context.constants)
    staging: list[Interval] = []
    if role in (_Role.ENTRY, _Role.BRANCH):
        output_copies = _place_outputs(root_sources, slices, sets)
    elif role is _Role.BODY:
        state = _StateFrame(order, defs, ranges, sets, merged, leaves)
        output_copies = state.place(root_sources, slices)
        staging = state.staging(end)
        names.update({item.key: (f"{computation.name}.staged", ()) for item in staging})
    else:
        output_copies = []
    # a concatenate returned by the entry may hold its operands in the caller's buffer
    taken = {
        k for k, s in slices.items() if role is not _Role.ENTRY or s.kind is not BufferKind.OUTPUT
    }
    placed = concat_placements(order, defs, sets, merged, taken)
    nest(placed, merged)
    intervals = [
        item for rep, item in merged.items() if rep not in slices and rep not in placed
    ] + staging

    controls = [i for i in order if i.op in (Op.WHILE, Op.CONDITIONAL)]
    frames = {id(i): _plan_called(i, context) for i in controls}
    # the nested computations' bytes and the kernels' temporaries, each live while its
    # instruction runs: for packing, and for the lower bound
    blocks, peaks = [], []
    for time, instr in enumerate(order):
        scratch = context.temporaries.get(id(instr), 0)
        if scratch:
            key = (TEMPORARY, id(instr))
            blocks.append(Interval(key, time, time, scratch))
            peaks.append(Interval(key, time, time, scratch))
            names[key] = (f"{instr.name}.temporary", ())
        plans = frames.get(id(instr), ())
        size = max((p.arena_bytes for p in plans), default=0)
        if size:
            blocks.append(Interval(("block", id(instr)), time, time, size))
            peak = max(p.lower_bound for p in plans)
            peaks.append(Interval(("block", id(instr)), time, time, peak))
            names[blocks[-1].key] = (f"{instr.name}.nested", ())

    arena_bytes = _pack_with_temporaries(
        intervals + [b for b in blocks if not _is_temporary(b)],
        [b for b in blocks if _is_temporary(b)],
    )
    for item in intervals + blocks:
        slices[item.key] = Slice(BufferKind.ARENA, 0, item.offset, item.size)
    resolve(placed, slices, merged)

    for param in computation.parameters:
        for index, shape in array_indices(param.shape):
            number = leaves[(id(param), index)]
            slices[(id(param), index)] = Slice(BufferKind.PARAMETER, number, 0, shape.nbytes)
    # in-place results share their set's bytes; views and tuples share their source's
    for instr in order:
        for index, _ in array_indices(instr.shape):
            source, source_index = defs.source(instr, index)
            key = sets.find((id(source), source_index))
            slices[(id(instr), index)] = slices[key]

    # values kept out of the arena as results (the entry's are all in caller buffers)
    returned = {(id(s), i) for s, i in root_sources}
    if role is not _Role.ENTRY:
        returned = {k for k in returned if slices[sets.find(k)].kind is BufferKind.OUTPUT}
    nested = {
        instr.name: _resolve(instr, frames[id(instr)], slices.get(("block", id(instr))), slices)
        for instr in controls
    }
    return BufferPlan(
        schedule=order,
        slices=slices,
        arena_bytes=arena_bytes,
        alignment=ALIGNMENT,
        lower_bound=peak_live_bytes(intervals + peaks, ALIGNMENT),
        naive_total=_naive_total(order, defs, returned)
        + sum(align_up(item.size, ALIGNMENT) for item in staging)
        + sum(align_up(context.temporaries.get(id(i), 0), ALIGNMENT) for i in order)
        + sum(p.naive_total for plans in frames.values() for p in plans),
        weights=context.weights,
        output_copies=[
            (slices[src], dst if isinstance(dst, Slice) else slices[dst])
            for src, dst in output_copies
        ],
        buffers=[
            PlannedBuffer(*names[i.key], i.start, i.end, slices[i.key])
            for i in sorted(intervals + blocks, key=lambda i: (i.offset, i.start))
        ],
        nested=nested,
        fit_forms=context.fit_forms,
    )


def _is_temporary(item: Interval) -> bool:
    """Whether `item` is a kernel's temporary (its key (TEMPORARY, id(instruction)))."""
    return isinstance(item.key, tuple) and item.key[0] == TEMPORARY


def _pack_with_temporaries(fixed: list[Interval], temporaries: list[Interval]) -> int:
    """Offsets for the buffers: `fixed` packed, then each kernel's temporary in a gap at
    its step (the kernels were sized to the largest gaps of that packing, see
    `BufferPlan.gaps_below`), or all packed together where that takes fewer bytes."""
    arena = pack(fixed, ALIGNMENT)
    if not temporaries:
        return arena
    top = place_at_steps(temporaries, fixed, ALIGNMENT)
    if top <= peak_live_bytes(fixed + temporaries, ALIGNMENT):
        return top
    everything = fixed + temporaries
    placed = [i.offset for i in everything]
    joint = pack(everything, ALIGNMENT)
    if joint < top:
        return joint
    for item, offset in zip(everything, placed):
        item.offset = offset
    return top


def _merged_intervals(order, defs: BufferDefinitions, ranges, sets: BufferSets):
    """One Interval per buffer set (over all its members' live ranges), and its name."""
    merged: dict = {}  # set representative -> Interval
    names = {}
    for instr in order:
        if instr.op in LEAVES:
            continue
        for index, shape in array_indices(instr.shape):
            key = (id(instr), index)
            if not is_defining(instr, index, defs):
                continue
            rep = sets.find(key)
            start, stop = ranges[key]
            item = merged.get(rep)
            if item is None:
                merged[rep] = Interval(rep, start, stop, shape.nbytes)
                names[rep] = (instr.name, index)
            else:
                item.start, item.end = min(item.start, start), max(item.end, stop)
    return merged, names


def _merge_in_place(
    order, defs: BufferDefinitions, ranges, overwrites: Mapping[int, int]
) -> BufferSets:
    """Let elementwise kernels (and those `overwrites` names, their operand it names)
    take over an operand buffer that dies at them, and a while's state the buffers of
    init values that die at it."""
    sets = BufferSets()
    ends: dict = {}  # set representative -> last use of any member
    for time, instr in enumerate(order):
        if instr.op is Op.WHILE:
            _take_over_init(instr, time, defs, ranges, sets, ends)
            continue
        own = (id(instr), ())
        if own not in ranges or instr.op in LEAVES or instr.op.is_control_flow:
            continue
        for k, operand in enumerate(instr.operands):
            source, index = defs.source(operand, ())
            if source.op in LEAVES or (id(source), index) not in ranges:
                continue
            rep = sets.find((id(source), index))
            if ends.get(rep, ranges[(id(source), index)][1]) != time:
                continue
            if not (reads_at_output_index(instr, k) or overwrites.get(id(instr)) == k):
                continue
            sets.union(rep, own)
            ends[sets.find(own)] = max(ranges[own][1], time)
            break
    return sets


def _take_over_init(instr: Instruction, time: int, defs, ranges, sets: BufferSets, ends) -> None:
    """Each state array of a while takes the buffer of its init value if that dies here."""
    taken = set()
    for index, _ in array_indices(instr.shape):
        own = (id(instr), index)
        source, source_index = defs.source(instr.operands[0], index)
        key = (id(source), source_index)
        if source.op in LEAVES or key not in ranges:
            continue
        rep = sets.find(key)
        if rep in taken or ends.get(rep, ranges[key][1]) != time:
            continue
        taken.add(rep)  # one value given as two state arrays: the second is copied
        sets.union(rep, own)
        ends[sets.find(own)] = max(ranges[own][1], time)


def _parameter_leaves(computation: Computation) -> dict[tuple[int, tuple[int, ...]], int]:
    """(id(parameter), shape_index) -> number of that array among all parameters' arrays."""
    leaves = {}
    for param in computation.parameters:
        for index, _ in array_indices(param.shape):
            leaves[(id(param), index)] = len(leaves)
    return leaves


class _StateFrame:
    """A while body's results: array k of the root goes to state array k (OUTPUT k),
    which the body's parameter array k (PARAMETER k) reads.

    A result is computed straight into the state when every read of that state array
    is over by then (or happens in the very kernel that computes it, at the index it
    writes); otherwise it is copied there after the body.  A state array moved to
    another position is staged through a temporary, since the copies overwrite it.
    """

    def __init__(self, order, defs, ranges, sets, merged, leaves):
        self.order, self.defs, self.ranges, self.sets = order, defs, ranges, sets
        self.merged, self.leaves = merged, leaves
        self.state_keys = {number: key for key, number in leaves.items()}
        self.staged: list[tuple[tuple, Slice]] = []  # (parameter array key, destination)

    def place(self, root_sources, slices: dict) -> list[tuple[object, Slice]]:
        """Put results into the state where safe; the ordered (source key, state) copies."""
        copies = []
        moved = []
        for number, (source, index) in enumerate(root_sources):
            destination = Slice(BufferKind.OUTPUT, number, 0, _array_shape(source, index).nbytes)
            key = self.sets.find((id(source), index))
            if source.op is Op.PARAMETER:
                if self.leaves[key] != number:  # unchanged arrays stay where they are
                    moved.append((key, destination))
            elif source.op is Op.CONSTANT or key in slices or not self._state_free(key, number):
                copies.append((key, destination))
            else:
                slices[key] = destination
        overwritten = {d.index for _, d in copies + moved}
        for key, destination in moved:
            if self.leaves[key] in overwritten:
                self.staged.append((key, destination))
            else:
                copies.append((key, destination))
        stage_in = [(key, ("stage", n)) for n, (key, _) in enumerate(self.staged)]
        stage_out = [(("stage", n), dst) for n, (_, dst) in enumerate(self.staged)]
        return stage_in + copies + stage_out

    def staging(self, end: int) -> list[Interval]:
        """The temporaries of staged copies, live at the copies after the body."""
        return [
            Interval(("stage", n), end, end, destination.size)
            for n, (_, destination) in enumerate(self.staged)
        ]

    def _state_free(self, key, number: int) -> bool:
        state = self.state_keys[number]
        last_read = self.ranges[state][1]
        start = self.merged[key].start
        if start != last_read:
            return start > last_read
        # the kernel that computes it reads the state too: fine at the index it writes
        instr = self.order[start]
        if self.sets.find((id(instr), ())) != key:
            return False
        reads = [
            k
            for k, o in enumerate(instr.operands)
            if any((id(s), i) == state for s, i in self.defs.sources(o))
        ]
        return all(reads_at_output_index(instr, k) for k in reads)


def _plan_called(instr: Instruction, context: _Context) -> list[BufferPlan]:
    """Plans of the computations `instr` runs, each in its own frame."""
    if id(instr) not in context.called:
        roles = (_Role.CONDITION, _Role.BODY) if instr.op is Op.WHILE else (_Role.BRANCH,)
        plans = []
        for k, computation in enumerate(instr.called):
            role = roles[min(k, len(roles) - 1)]
            candidates = [
                _plan_frame(computation, order, role, context)
                for order in candidate_schedules(computation)
            ]
            plans.append(min(candidates, key=lambda p: (p.lower_bound, p.arena_bytes)))
        context.called[id(instr)] = plans
    return context.called[id(instr)]


def _resolve(
    instr: Instruction, plans: list[BufferPlan], block: Slice | None, slices
) -> NestedPlan:
    """The nested plans of `instr` in this frame's terms (see the module docstring)."""
    block = block or Slice(BufferKind.ARENA, 0, 0, 0)
    results = [slices[(id(instr), index)] for index, _ in array_indices(instr.shape)]

    def resolver(arguments: Instruction):
        inputs = [slices[(id(arguments), index)] for index, _ in array_indices(arguments.shape)]

        def where(s: Slice) -> Slice:
            if s.kind is BufferKind.ARENA:
                return Slice(BufferKind.ARENA, 0, block.offset + s.offset, s.size)
            if s.kind is BufferKind.PARAMETER:
                return inputs[s.index]
            if s.kind is BufferKind.OUTPUT:
                return results[s.index]
            return s

        return where

    if instr.op is Op.WHILE:
        # condition and body read the state: the while's own result buffers
        resolved = [p.mapped(resolver(instr)) for p in plans]
        init = instr.operands[0]
        init_copies = [
            (slices[(id(init), index)], slices[(id(instr), index)])
            for index, _ in array_indices(instr.shape)
            if slices[(id(init), index)] != slices[(id(instr), index)]
        ]
    else:
        resolved = [p.mapped(resolver(a)) for p, a in zip(plans, instr.operands[1:])]
        init_copies = []
    names = tuple(c.name for c in instr.called)
    return NestedPlan(block, names, resolved, init_copies)


def _naive_total(order, defs: BufferDefinitions, returned: set) -> int:
    """Bytes if every intermediate value (not an input, weight or result) had its own buffer."""
    total = 0
    for instr in order:
        if instr.op in LEAVES:
            continue
        for index, shape in array_indices(instr.shape):
            if is_defining(instr, index, defs) and (id(instr), index) not in returned:
                total += align_up(max(shape.nbytes, 1), ALIGNMENT)
    return total


def _place_constants(module: Module, slices: dict) -> Blob:
    """Lay every constant of the module out in one blob, each 64-byte aligned: the
    constant's array where it is its own storage, else its storage made when written."""
    pieces: list[tuple[int, Piece]] = []
    end = 0
    for computation in module.called_computations():
        for instr in computation.instructions:
            if instr.op is not Op.CONSTANT:
                continue
            dtype, literal = instr.array_shape.dtype, instr.literal
            assert literal is not None, f"constant {instr.name} has no literal"
            storage = to_storage(literal, dtype)
            piece: Piece = storage
            if not np.shares_memory(storage, literal):  # converted: made again when read
                piece = Deferred(storage.nbytes, partial(to_storage, literal, dtype))
            offset = align_up(end, ALIGNMENT)
            pieces.append((offset, piece))
            end = offset + storage.nbytes
            slices[(id(instr), ())] = Slice(BufferKind.CONSTANT, 0, offset, storage.nbytes)
    return Blob(pieces, end)


def _place_outputs(root_sources, slices: dict, sets: BufferSets) -> list:
    """Put each returned value straight into its output buffer when it can be.

    A value can be computed in place if the computation computes it (not a
    parameter or constant) and it is not also returned under another output.
    Returns the (source key, destination slice) copies needed for the others.
    """
    copies = []
    for number, (source, index) in enumerate(root_sources):
        key = sets.find((id(source), index))
        size = _array_shape(source, index).nbytes
        destination = Slice(BufferKind.OUTPUT, number, 0, size)
        if source.op in LEAVES or key in slices:
            copies.append((key, destination))
        else:
            slices[key] = destination
    return copies


def _array_shape(instr, index):
    shape = instr.shape
    for i in index:
        shape = shape.elements[i]
    return shape
