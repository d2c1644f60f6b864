"""BufferPlan: where every value of the entry computation lives.

The contract between buffer assignment and the backends.  Every array value
(an instruction's result, or one element of a tuple-valued result, named by a
`shape_index`) gets a `Slice`: a range of bytes in the arena, in a caller's
input or output buffer, or in the constant (weights) blob.  Views (reshape,
bitcast, get-tuple-element, tuple) share their operand's slice.

The computations a while or conditional runs have plans of their own
(`BufferPlan.nested`), in the same terms: their slices point into the same
arena, caller buffers and weights.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property

from ..ir import Instruction, Op, Trait
from .blob import Blob
from .concat import contiguous_parts
from .heap import Interval, align_up, largest_gaps


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


# the slices' key of a kernel's temporary: (TEMPORARY, id(instruction))
TEMPORARY = "temporary"


@dataclass
class BufferPlan:
    """Schedule plus a slice for every (instruction, shape_index) of the entry, and for
    the temporaries of the kernels that asked for one (`temporary`)."""

    schedule: list[Instruction]  # entry instructions in execution order
    slices: dict[tuple[int, tuple[int, ...]], Slice]  # (id(instr), shape_index) -> slice
    arena_bytes: int
    alignment: int
    lower_bound: int  # peak of simultaneously live arena bytes
    naive_total: int  # every arena buffer separate
    weights: Blob  # the constant blob, constants at their slices' offsets
    # (source, destination): copies the backend emits after the schedule, for
    # outputs that cannot be computed in place (a parameter or constant
    # returned as is, one value returned twice)
    output_copies: list[tuple[Slice, Slice]] = field(default_factory=list)
    buffers: list[PlannedBuffer] = field(default_factory=list)  # arena buffers, by offset
    # while/conditional instruction name -> the plans of the computations it runs
    nested: dict[str, NestedPlan] = field(default_factory=dict)
    # scratch the kernels need besides the arena and their temporaries (what a kernel
    # needs beyond the temporary planned for it), placed after the arena; the backend
    # sets it before emitting code
    workspace_bytes: int = 0
    # the weights in the backend's object when it lays them out anew (constant GEMM
    # operands pre-packed); the backend sets it when it emits code
    object_weight_bytes: int | None = None
    # what the plan without temporaries left free at each step (id(instruction) ->
    # bytes): the kernels sized their temporaries by it, and size themselves alike when
    # emitted (`with_rooms`); empty: this plan's own
    rooms: dict[int, int] = field(default_factory=dict)
    # the kernels take a slower form where their fastest one's temporary would not fit
    # their room (raise the peak); False: the fastest form, in bands where it has them
    fit_forms: bool = True

    @property
    def workspace_offset(self) -> int:
        """Where the workspace starts in the scratch: after the arena, aligned."""
        return -(-self.arena_bytes // self.alignment) * self.alignment

    @property
    def scratch_bytes(self) -> int:
        """The scratch a caller provides: the arena, then the workspace, rounded up to the
        alignment (C11's aligned_alloc takes only multiples of it, as NAME.h promises)."""
        return align_up(self.workspace_offset + self.workspace_bytes, self.alignment)

    def slice_of(self, instr: Instruction, shape_index: tuple[int, ...] = ()) -> Slice:
        return self.slices[(id(instr), shape_index)]

    def temporary(self, instr: Instruction) -> Slice | None:
        """The arena bytes planned for `instr`'s kernel while it runs, if it asked."""
        return self.slices.get((TEMPORARY, id(instr)))  # type: ignore[arg-type]

    def headroom(self, instr: Instruction) -> int:
        """The arena bytes a temporary of `instr`'s kernel may take (0 for an instruction
        not in the schedule): in a plan `with_rooms`, those rooms; else what is not live
        while it runs, below the plan's lower bound (so that it does not raise the peak)."""
        return (self.rooms or self.rooms_below(self.lower_bound)).get(id(instr), 0)

    def with_rooms(self, rooms: dict[int, int]) -> BufferPlan:
        """This plan with the kernels' rooms `rooms` (id(instruction) -> bytes)."""
        return replace(self, rooms=rooms)

    def rooms_below(self, peak: int) -> dict[int, int]:
        """What a temporary may take at each step without the step's bytes passing `peak`."""
        return {key: max(peak - live, 0) for key, live in self._live.items()}

    def gaps_below(self, top: int) -> dict[int, int]:
        """What a temporary may take at each step without the arena passing `top`: the
        largest free run of bytes below it among the buffers alive then, where the
        planner places it (assign.py: the other buffers keep their offsets)."""
        fixed = [Interval(None, b.start, b.end, b.slice.size, b.slice.offset) for b in self.buffers]
        gaps = largest_gaps(len(self.schedule), fixed, top, self.alignment)
        return {id(instr): gap for instr, gap in zip(self.schedule, gaps)}

    def live_bytes(self, instr: Instruction) -> int:
        """The arena bytes live while `instr` runs, its buffers aligned (in a plan
        without temporaries: the values alone)."""
        return self._live.get(id(instr), 0)

    @cached_property
    def _live(self) -> dict[int, int]:
        steps = len(self.schedule)
        change = [0] * (steps + 1)  # live bytes at step t: the sum of change[:t + 1]
        for buffer in self.buffers:
            if buffer.start < steps:
                size = align_up(buffer.slice.size, self.alignment)
                change[buffer.start] += size
                change[min(buffer.end, steps - 1) + 1] -= size
        lives, live = {}, 0
        for instr, step in zip(self.schedule, change):
            live += step
            lives[id(instr)] = live
        return lives

    def beyond_temporaries(self, needs: dict[int, int]) -> int:
        """The workspace after the arena: the most a kernel of this plan (or of its
        nested plans) needs beyond the temporary planned for it (`needs`: id(instr) ->
        bytes), 0 when each has one that fits."""
        most = 0
        for instr in self.schedule:
            need, planned = needs.get(id(instr), 0), self.temporary(instr)
            if need and (planned is None or planned.size < need):
                most = max(most, need)
        for nested in self.nested.values():
            for inner in nested.plans:
                most = max(most, inner.beyond_temporaries(needs))
        return most

    def workspace_of(self, instr: Instruction, need: int, after_arena: Slice) -> Slice:
        """Where `instr`'s kernel finds the `need` bytes of workspace it needs: its
        temporary where that fits, else the workspace after the arena."""
        planned = self.temporary(instr)
        return planned if planned is not None and planned.size >= need else after_arena

    def needs_code(self, instr: Instruction) -> bool:
        """Whether a backend computes `instr`: leaves, tuples and views that alias their
        operand are only places in memory."""
        if instr.op in (Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT):
            return False
        if Trait.VIEW in instr.op.traits:
            return self.slice_of(instr) != self.slice_of(instr.operands[0])
        if contiguous_parts(instr):  # not when every operand was computed in its place
            where, offset = self.slice_of(instr), 0
            for operand in instr.operands:
                part = replace(where, offset=where.offset + offset, size=operand.shape.nbytes)
                if operand.shape.nbytes and self.slice_of(operand) != part:
                    return True
                offset += operand.shape.nbytes
            return False
        return True

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights: in the compiled object once a backend has set them."""
        return len(self.weights) if self.object_weight_bytes is None else self.object_weight_bytes

    def to_text(self) -> str:
        """Arena size, then one line per arena buffer: slice, live range, value; then the
        plans of nested computations, indented."""
        summary = (
            f"arena {self.arena_bytes} bytes (lower bound {self.lower_bound}, "
            f"naive {self.naive_total}), weights {self.weight_bytes} bytes"
        )
        lines = [summary]
        if self.workspace_bytes:
            lines.append(f"  workspace {self.workspace_bytes} bytes at {self.workspace_offset}")
        return "\n".join(lines + self._body_lines("  ")) + "\n"

    def _body_lines(self, indent: str) -> list[str]:
        lines = []
        for b in self.buffers:
            index = "" if not b.shape_index else "{" + ",".join(map(str, b.shape_index)) + "}"
            lines.append(f"{indent}{b.slice.text():>24}  live [{b.start},{b.end}]  {b.name}{index}")
        for src, dst in self.output_copies:
            lines.append(f"{indent}copy {src.text()} -> {dst.text()}")
        for name, nested in self.nested.items():
            lines.append(f"{indent}{name}: block {nested.block.text()}")
            for src, dst in nested.init_copies:
                lines.append(f"{indent}  init copy {src.text()} -> {dst.text()}")
            for computation, plan in zip(nested.computations, nested.plans):
                lines.append(
                    f"{indent}  %{computation}: {plan.arena_bytes} bytes (lower bound "
                    f"{plan.lower_bound}, naive {plan.naive_total})"
                )
                lines += plan._body_lines(indent + "    ")
        return lines

    def mapped(self, where: Callable[[Slice], Slice]) -> BufferPlan:
        """The same plan with every slice (nested plans' too) replaced by `where(slice)`."""
        return replace(
            self,
            slices={key: where(s) for key, s in self.slices.items()},
            output_copies=[(where(a), where(b)) for a, b in self.output_copies],
            buffers=[replace(b, slice=where(b.slice)) for b in self.buffers],
            nested={name: n.mapped(where) for name, n in self.nested.items()},
        )


@dataclass
class NestedPlan:
    """Where the computations of one while or conditional keep their values.

    Their temporaries share `block`: arena bytes live exactly while the instruction
    runs (a while's condition and body run in turn, a conditional's branches one at
    most).  A while body's parameter reads the instruction's result buffers (the
    state), and its plan's `output_copies` write the next state there after each
    iteration (a value the body computes in place in the state needs none); the
    condition's pred is at `slice_of(root)`.  A branch reads its operand where that
    lives and writes its result into the conditional's result buffers.
    """

    block: Slice
    computations: tuple[str, ...]  # names of the called computations, in `called` order
    plans: list[BufferPlan]  # one per called computation
    # while: init operand -> state, before the first test (none where the state took
    # over a dying init value's buffer)
    init_copies: list[tuple[Slice, Slice]] = field(default_factory=list)

    def mapped(self, where: Callable[[Slice], Slice]) -> NestedPlan:
        return NestedPlan(
            where(self.block),
            self.computations,
            [p.mapped(where) for p in self.plans],
            [(where(a), where(b)) for a, b in self.init_copies],
        )
