"""Module / Computation / Instruction: the IR's data structures.

An `Instruction` is one HLO operation: opcode, result shape, operands, a name
unique in its module, and typed attributes (every attribute family is a field
that is None or its default where the opcode does not use it).  Instructions
compare by identity; `Instruction.key()` gives the structural key for CSE.

Each instruction keeps its use-list (`users`): assigning `operands` moves the
reads, so "who reads X" and `Computation.replace_all_uses` cost X's users, not a
scan of the computation (quadratic in passes that rewrite per instruction).  An
instruction a computation drops (`remove_dead`) reads nothing afterwards, so that
use-lists name only instructions still in a computation.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .attrs import (
    ConvDims,
    DotDims,
    FusionKind,
    GatherDims,
    PaddingConfig,
    ScatterDims,
    SliceSpec,
    Window,
)
from .bounds import Bounds
from .ops import Direction, Op
from .types import AnyShape, Shape

if TYPE_CHECKING:
    from .extents import Extent


def literal_bytes(literal: np.ndarray) -> memoryview:
    """A literal's bytes, without a copy where it is contiguous."""
    return np.ascontiguousarray(literal).reshape(-1).view(np.uint8).data


def same_literal(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two literals are the same bytes of the same dtype and shape."""
    return (a.dtype, a.shape) == (b.dtype, b.shape) and literal_bytes(a) == literal_bytes(b)


class Operands(list):
    """An instruction's operands: a list to read, replaced whole (`instr.operands = [...]`)
    so that the use-lists follow; changing one in place raises (see below)."""

    def __reduce__(self):
        return (Operands, (list(self),))


def _refuse_in_place(self, *args, **kwargs):
    raise TypeError("assign instr.operands a new list: use-lists follow assignments only")


# (set here rather than defined in the class: each keeps list's own signature for mypy)
for _name in (
    "__setitem__",
    "__delitem__",
    "__iadd__",
    "__imul__",
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "clear",
    "sort",
    "reverse",
):
    setattr(Operands, _name, _refuse_in_place)


@dataclass(eq=False)
class Instruction:
    op: Op
    shape: AnyShape
    # a property (set after the class): assigning it updates the operands' use-lists
    operands: list[Instruction]
    name: str = ""
    # broadcast/transpose/reduce/reverse/concatenate(1)/iota(1) dimension lists
    dimensions: tuple[int, ...] | None = None
    slice: SliceSpec | None = None
    # dynamic-slice: the extent of the slice per dim (its starts are operands)
    dynamic_slice_sizes: tuple[int, ...] | None = None
    padding: PaddingConfig | None = None
    window: Window | None = None
    dot: DotDims | None = None
    conv: ConvDims | None = None
    feature_group_count: int = 1
    batch_group_count: int = 1
    gather: GatherDims | None = None
    scatter: ScatterDims | None = None
    direction: Direction | None = None
    # sort: equivalent elements keep their order
    is_stable: bool = False
    # to_apply= (reduce, reduce-window, sort's comparator, call), calls= (fusion),
    # (condition, body) of while, the branches of conditional (true first)
    called: tuple[Computation, ...] = ()
    # parameter number, get-tuple-element index, or rng-get-and-update-state's delta
    index: int | None = None
    literal: np.ndarray | None = None
    fusion_kind: FusionKind | None = None
    # where it came from (e.g. the ONNX node), printed as metadata; not semantic
    origin: str | None = None
    # per dim, the run-time extent beyond which no reader uses the values (None: all
    # of it), where passes/bounded_dims.py knows one (ir/extents.py); not printed
    extents: tuple[Extent | None, ...] | None = None
    # a reduce's or dot's, per dim of its (first) operand: the extent beyond which it
    # reads only its reduction's identity there (masked), so it may stop; not printed
    reduced_extents: tuple[Extent | None, ...] | None = None

    def __post_init__(self) -> None:
        # user -> how many of its operands are this instruction (not a field: copies and
        # dataclasses.replace start with no users)
        self._users: dict[Instruction, int] = {}

    def __repr__(self) -> str:
        return f"<{self.op.text} {self.name}: {self.shape}>"

    @property
    def users(self) -> list[Instruction]:
        """The instructions that read this one, once per operand they read it as."""
        return [user for user, uses in self._users.items() for _ in range(uses)]

    @property
    def user_count(self) -> int:
        """How many distinct instructions read this one (without listing them)."""
        return len(self._users)

    def _drop_user(self, user: Instruction) -> None:
        uses = self._users[user] - 1
        if uses:
            self._users[user] = uses
        else:
            del self._users[user]

    @property
    def array_shape(self) -> Shape:
        assert isinstance(self.shape, Shape), f"{self.name} has tuple shape {self.shape}"
        return self.shape

    def key(self) -> tuple:
        """Structural identity: equal keys mean the same value (for CSE)."""
        literal_key = None
        if self.literal is not None:
            # a digest, not the bytes: keys of gigabytes of weights would double them
            # (CSE confirms a match byte for byte, `same_literal`)
            digest = hashlib.blake2b(literal_bytes(self.literal), digest_size=32).digest()
            literal_key = (self.literal.dtype.str, self.literal.shape, digest)
        return (
            self.op,
            self.shape,
            tuple(id(o) for o in self.operands),
            self.dimensions,
            self.slice,
            self.dynamic_slice_sizes,
            self.padding,
            self.window,
            self.dot,
            self.conv,
            self.feature_group_count,
            self.batch_group_count,
            self.gather,
            self.scatter,
            self.direction,
            self.is_stable,
            tuple(id(c) for c in self.called),
            self.index,
            literal_key,
            self.fusion_kind,
            self.extents,
            self.reduced_extents,
        )


def _get_operands(instr: Instruction) -> list[Instruction]:
    return instr.__dict__["operands"]


def _set_operands(instr: Instruction, operands) -> None:
    new = Operands(operands)
    old = instr.__dict__.get("operands")
    if old is not None and len(old) == len(new) and all(a is b for a, b in zip(old, new)):
        return  # the same reads: the use-lists keep their order
    for operand in old or ():
        operand._drop_user(instr)
    for operand in new:
        operand._users[instr] = operand._users.get(instr, 0) + 1
    instr.__dict__["operands"] = new


# a data descriptor: the dataclass's __init__, dataclasses.replace and every later
# assignment go through it (stored in the instance's __dict__ under the same name; mypy
# keeps seeing the field's list)
Instruction.operands = property(_get_operands, _set_operands)  # type: ignore[assignment]


def reached(roots) -> list[Instruction]:
    """`roots` and everything they read, transitively, each once (no recursion)."""
    seen: set[int] = set()
    found: list[Instruction] = []
    pending = list(roots)
    while pending:
        value = pending.pop()
        if id(value) not in seen:
            seen.add(id(value))
            found.append(value)
            pending.extend(value.operands)
    return found


def _inherit_extents(old: Instruction, new: Instruction) -> None:
    """A new instruction read nowhere yet that takes `old`'s place computes its values for
    its readers: what they read of it is what they read of `old` (its extents)."""
    if new.extents is None and new.shape == old.shape and new.op is not Op.PARAMETER:
        new.extents = old.extents


@dataclass(eq=False)
class Computation:
    """Instructions in a valid topological order; `root` is the result."""

    name: str
    instructions: list[Instruction] = field(default_factory=list)
    root: Instruction | None = None

    def __repr__(self) -> str:
        return f"<computation {self.name}: {len(self.instructions)} instructions>"

    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.op is Op.PARAMETER]
        return sorted(params, key=lambda p: p.index)

    def replace_all_uses(self, old: Instruction, new: Instruction) -> None:
        """Every read of `old` (the root too) reads `new` instead, but `new`'s own: a
        replacement computed from `old` keeps reading it.  Costs `old`'s users."""
        self.replace_uses({old: new})

    def replace_uses(self, replaced: dict[Instruction, Instruction]) -> None:
        """Read `replaced[old]` wherever each `old` was read: each of their users is
        rewritten once (a concatenate of thousands of replaced values, once), and a
        replacement read nowhere yet takes the extents of what it replaces."""
        if not replaced:
            return
        fresh = [
            old
            for old, new in replaced.items()
            if old.extents is not None and not new._users and new is not self.root
        ]
        readers = dict.fromkeys(u for old in replaced for u in old._users)
        for reader in readers:  # none made to read itself: a replacement keeps its reads
            reader.operands = [
                o if replaced.get(o, reader) is reader else replaced[o] for o in reader.operands
            ]
        if self.root in replaced:
            self.root = replaced[self.root]
        for old in fresh:
            _inherit_extents(old, replaced[old])

    def remove_dead(self) -> bool:
        """Drop instructions the root does not reach (parameters stay); a dropped one
        reads nothing afterwards, leaving the use-lists of what it read."""
        live = {id(i) for i in self.post_order()}
        kept: list[Instruction] = []
        for instr in self.instructions:
            if id(instr) in live or instr.op is Op.PARAMETER:
                kept.append(instr)
            else:
                instr.operands = []
        dropped = len(self.instructions) != len(kept)
        self.instructions = kept
        return dropped

    def place_before(self, placed: dict[Instruction, list[Instruction]]) -> None:
        """Put each list of new instructions just before its key, in one pass over the
        computation (an index search per insertion is quadratic in many insertions)."""
        self.instructions = [
            new for instr in self.instructions for new in (*placed.get(instr, ()), instr)
        ]

    def post_order(self, leaf: Callable[[Instruction], bool] | None = None) -> list[Instruction]:
        """Instructions reachable from the root, operands before users; the operands of
        an instruction for which `leaf` holds are not visited."""
        order: list[Instruction] = []
        seen: set[int] = set()
        stack: list[tuple[Instruction, bool]] = [(self.root, False)]
        while stack:
            instr, expanded = stack.pop()
            if expanded:
                order.append(instr)
                continue
            if id(instr) in seen:
                continue
            seen.add(id(instr))
            stack.append((instr, True))
            if leaf is not None and leaf(instr):
                continue
            for operand in reversed(instr.operands):
                if id(operand) not in seen:
                    stack.append((operand, False))
        return order

    def sort_topologically(self) -> None:
        """Reorder instructions so operands come first, keeping order otherwise."""
        position = {id(i): n for n, i in enumerate(self.instructions)}
        placed: set[int] = set()
        order: list[Instruction] = []

        def place(instr: Instruction) -> None:
            stack = [(instr, False)]
            while stack:
                cur, expanded = stack.pop()
                if expanded:
                    if id(cur) not in placed:
                        placed.add(id(cur))
                        order.append(cur)
                    continue
                if id(cur) in placed:
                    continue
                stack.append((cur, True))
                pending = [o for o in cur.operands if id(o) not in placed]
                for operand in sorted(pending, key=lambda o: -position.get(id(o), 0)):
                    stack.append((operand, False))

        for instr in self.instructions:
            place(instr)
        self.instructions = order


@dataclass(eq=False)
class Module:
    """A set of computations with one entry; names are unique module-wide."""

    name: str
    computations: list[Computation] = field(default_factory=list)
    entry: Computation | None = None
    # the model's own names for the entry's parameters and results (C API,
    # bindings); empty means "use the instruction names"
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    # the padded signature, where the inputs had bounded dims (Bounds)
    bounds: Bounds | None = None
    # (parameter number, dim) -> the least extent a bounded input dim takes, where
    # above 0 (the frontend's ranges; passes/bounded_dims.py puts them in `bounds`)
    input_lows: dict[tuple[int, int], int] = field(default_factory=dict)
    # input or output name -> what each entry of its last dim stands for, which the header
    # lists: a ZipMap output's classes, a map input's keys (frontends/onnx/ml_maps.py)
    labels: dict[str, tuple[int | str, ...]] = field(default_factory=dict)
    # what the frontend made of the model that a user should hear (the compile prints them)
    notes: list[str] = field(default_factory=list)
    _used_names: set[str] = field(default_factory=set, repr=False)
    _counter: itertools.count = field(default_factory=lambda: itertools.count(1), repr=False)

    def unique_name(self, base: str) -> str:
        """`base` if free, else `base.N` with the next free N."""
        base = sanitize_name(base)
        name = base
        while name in self._used_names:
            name = f"{base}.{next(self._counter)}"
        self._used_names.add(name)
        return name

    def claim_name(self, name: str) -> None:
        """Record a name taken verbatim (the parser keeps names as written)."""
        self._used_names.add(name)

    def add_computation(self, computation: Computation, entry: bool = False) -> Computation:
        self.computations.append(computation)
        if entry:
            self.entry = computation
        return computation

    def computation(self, name: str) -> Computation:
        for comp in self.computations:
            if comp.name == name:
                return comp
        raise KeyError(name)

    def called_computations(self) -> list[Computation]:
        """Computations reachable from the entry, callees before callers."""
        return _callees_first([self.entry])

    def computations_in_call_order(self) -> list[Computation]:
        """Every computation (reachable or not), callees before callers, the entry last."""
        others = [c for c in self.computations if c is not self.entry]
        return _callees_first(others + ([self.entry] if self.entry else []))

    def program_computations(self) -> list[Computation]:
        """The entry and what it runs through while/conditional/call, callees first.

        These run as programs (a schedule of kernels each), unlike the reducers,
        comparators and fused computations that kernels apply per element.
        """
        if self.entry is None:
            return []
        return _callees_first([self.entry], control_flow_only=True)

    def remove_unused_computations(self) -> bool:
        keep = {id(c) for c in self.called_computations()}
        before = len(self.computations)
        self.computations = [c for c in self.computations if id(c) in keep]
        return len(self.computations) != before


def _callees_first(roots: list[Computation], control_flow_only: bool = False) -> list[Computation]:
    """Depth-first post-order over calls, with an explicit stack: nesting depth is the
    model's (loops in loops), and Python's stack must not bound it."""
    order: list[Computation] = []
    seen: set[int] = set()

    def callees(comp: Computation) -> Iterator[Computation]:
        for instr in comp.instructions:
            if not control_flow_only or instr.op.is_control_flow:
                yield from instr.called

    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, callees(root))]
        while stack:
            comp, pending = stack[-1]
            for callee in pending:
                if id(callee) not in seen:
                    seen.add(id(callee))
                    stack.append((callee, callees(callee)))
                    break
            else:
                stack.pop()
                order.append(comp)
    return order


def sanitize_name(name: str) -> str:
    """Names in HLO text are [A-Za-z0-9_.-] and start with a letter or '_'."""
    cleaned = "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in name)
    if not cleaned or not (cleaned[0].isalpha() or cleaned[0] == "_"):
        cleaned = "_" + cleaned
    return cleaned
