"""Loop fusion: producers inlined into their consumers' loops.

Every CPU kernel is a loop over its output computing each element through
element generators, so any producer can be inlined into a consumer; the
question is only when it pays.  Walking the entry computation from the root
up, each consumer starts a group and pulls in operands that

- have no users outside the group (or are cheap to recompute: data movement
  such as broadcast, reshape, transpose, slice, iota, convert, and one-step
  arithmetic such as add or maximum; never transcendentals), and
- are not recomputed many times: a producer reached through a consumer that
  reads each operand element several times (broadcast, dot, convolution,
  reduce-window, gather) must itself be free; a lookup's indices (one per
  output element) are read once, but lookups chase at most MAX_CHASE deep.

So elementwise chains become one loop, reductions absorb their elementwise
producers (input fusion), and a dot or convolution followed by bias, residual
add and activation becomes one kernel (the consumer computes each output
element of the dot once, then applies its epilogue).

Row fusion: a reduction read back through a broadcast (softmax's max and sum,
layer normalization's mean and variance) joins its consumer when its result
is indexed by the consumer's leading output dims unchanged, and the consumer's
kernel has no contraction (a GEMM epilogue has no once-per-row place).  The kernel then
loops over those dims outside, computes the reduction once per row, and
loops over the remaining dims inside; so softmax and layer normalization
become one kernel each.  The pass tracks, per group member, which root
output dim each of its dims equals (its index maps) to decide this; the
backend relies on exactly that (every reduction in a fusion but its root is
such a row value, all of the same rank; see aotc/ir/index_maps.py).  Each group becomes a
`fusion` instruction calling a computation built from clones of its members, its kind
from aotc/ir/fusion_kinds.py (kOutput for a dot or convolution with its epilogue,
kInput for a reduction at the root, else kLoop), which the backends choose kernels by.
"""

from __future__ import annotations

import dataclasses
import heapq
import math

from ..ir import (
    Computation,
    ComputationBuilder,
    FusionKind,
    Instruction,
    Module,
    Op,
    Shape,
)
from ..ir.cost import elements, evaluations_for, flops, weighted_operations
from ..ir.dequantization import block_dequantization
from ..ir.fusion_kinds import BYTE_TYPES, CONTRACTION_OPS, fusion_kind, widens_bytes
from ..ir.index_maps import (
    INDEX_MAP_OPS,
    IndexMap,
    dims_of,
    identity,
    maps_from_users,
    rank_of,
    read_elementwise_only,
    reads_indices_at_own_index,
    row_rank,
)

# recomputing these costs (almost) nothing: index arithmetic and a load
FREE_OPS = frozenset(
    {Op.BROADCAST, Op.RESHAPE, Op.BITCAST, Op.TRANSPOSE, Op.SLICE, Op.IOTA, Op.CONVERT, Op.REVERSE}
)

# cheap enough to compute again in each consumer rather than store once and reload:
# one arithmetic instruction per element (transcendentals and division are not)
CHEAP_OPS = FREE_OPS | frozenset(
    {
        Op.ADD,
        Op.SUBTRACT,
        Op.MULTIPLY,
        Op.NEGATE,
        Op.ABS,
        Op.MAXIMUM,
        Op.MINIMUM,
        Op.COMPARE,
        Op.SELECT,
        Op.AND,
        Op.OR,
        Op.NOT,
        Op.CLAMP,
    }
)

# consumers that read an operand element several times per output element pass
REUSING_OPS = frozenset({Op.BROADCAST, Op.DOT, Op.CONVOLUTION, Op.REDUCE_WINDOW, Op.GATHER})

# computed by a kernel form of their own (pooling.py) with elementwise epilogues only: in
# another loop (a concatenate's) the element rules would compute each window tap by tap
KERNEL_FORM_OPS = frozenset({Op.REDUCE_WINDOW})

# ops a fused loop can compute element by element (leaves and tuples never fuse)
FUSIBLE_OPS = frozenset(
    {op for op in Op if op.is_elementwise}
    | {
        Op.BROADCAST,
        Op.RESHAPE,
        Op.BITCAST,
        Op.TRANSPOSE,
        Op.SLICE,
        Op.CONCATENATE,
        Op.PAD,
        Op.REVERSE,
        Op.IOTA,
        Op.GATHER,
        Op.REDUCE,
        Op.REDUCE_WINDOW,
        Op.DOT,
        Op.CONVOLUTION,
    }
)


class Fusion:
    name = "fusion"

    def run(self, module: Module) -> bool:
        changed = False
        # the entry and what while/conditional run: the backend emits each as kernels
        for computation in module.program_computations():
            groups = _form_groups(computation)
            if not any(len(g.members) > 1 for g in groups):
                continue
            # group root -> its fusion, placed just before it
            position = {id(i): n for n, i in enumerate(computation.instructions)}
            fused = {
                group.root: _outline(module, group, position)
                for group in groups
                if len(group.members) > 1
            }
            computation.place_before({root: [fusion] for root, fusion in fused.items()})
            computation.replace_uses(fused)
            computation.remove_dead()
            changed = True
        if changed:
            module.remove_unused_computations()
        return changed


class _Group:
    def __init__(self, root: Instruction):
        self.root = root
        self.members: dict[int, Instruction] = {id(root): root}
        self.maps: dict[int, frozenset[IndexMap]] = {id(root): frozenset({identity(rank_of(root))})}
        self.root_dims = dims_of(root)
        self.row_rank: int | None = None  # rank of its row values, once it has one
        # where each member is evaluated: the root's loop and each row value's own code
        # (a reduction's loop); a member evaluated in several places is computed that often
        self.places: dict[int, frozenset[int]] = {id(root): frozenset({id(root)})}
        self.row_values: set[int] = set()
        self.contraction: Instruction | None = None  # the dot or convolution it fuses
        # elements of each member one run of the kernel computes (aotc/ir/cost.py)
        self.evaluations: dict[int, float] = {id(root): float(elements(root))}
        # per member, the lookups its value is an index of, one into the next, on the
        # way to the root (see MAX_CHASE)
        self.chase: dict[int, int] = {id(root): 0}
        # per member, the most members reading their operands through a call on a path
        # from the root down to it (MAX_DEPTH)
        self.depth: dict[int, int] = {id(root): 0}
        # id(value) -> the members reading it, once per read: a candidate's readers in
        # the group without a look at all its users (a bias that thousands of kernels read)
        self.readers: dict[int, list[Instruction]] = {}
        self.note_reads(root)

    def note_reads(self, member: Instruction) -> None:
        for operand in member.operands:
            self.readers.setdefault(id(operand), []).append(member)

    def evaluations_of(self, producer: Instruction, users: list[Instruction], rows) -> float:
        """How many elements of `producer` the kernel would compute: once per row for a
        row value (`rows`), else as often as its users in the group read it."""
        if rows is not None:
            return float(rows)
        readers = [
            (u, self.evaluations[id(u)]) for u in dict.fromkeys(users) if id(u) in self.members
        ]
        return evaluations_for(producer, readers, row_output=self.root.shape)

    def chase_of(self, producer: Instruction, users: list[Instruction]) -> int:
        """The lookups in the group that `producer`'s value would index, one into the
        next (x[feature[node]]: node 2 deep)."""
        return max(
            (
                self.chase[id(u)] + (u.op is Op.GATHER and u.operands[1] is producer)
                for u in users
                if id(u) in self.members
            ),
            default=0,
        )

    def depth_of(self, producer: Instruction, users: list[Instruction]) -> int:
        """The most members outside INDEX_MAP_OPS on a path from the root down to
        `producer` if it joined: how deep the backend's emitter would recurse to it."""
        return max(
            (
                self.depth[id(u)] + (u.op not in INDEX_MAP_OPS)
                for u in users
                if id(u) in self.members
            ),
            default=0,
        )

    def rows(self, rank: int) -> int:
        return math.prod(self.root_dims[:rank])

    def places_of(self, producer: Instruction, users: list[Instruction]) -> frozenset[int]:
        found: set[int] = set()
        for user in users:
            if id(user) in self.row_values:
                found.add(id(user))
            elif id(user) in self.members:
                found |= self.places[id(user)]
        return frozenset(found)

    def takes_contraction(self, producer: Instruction, maps: frozenset[IndexMap]) -> bool:
        """A dot or convolution (a tiled kernel) joins only as the one contraction of an
        epilogue: read at the root's own index through elementwise ops (so the backend
        runs it as a tiled GEMM and applies the rest per output element: an OUTPUT
        fusion, see aotc/ir/fusion_kinds.py); not beside a row value (see
        takes_row_value)."""
        root_rank = len(self.root_dims)
        if self.contraction is not None or self.root.op in CONTRACTION_OPS or self.row_values:
            return False
        return maps == {identity(root_rank)} and dims_of(producer) == self.root_dims

    def takes_row_value(self, producer: Instruction, maps: frozenset[IndexMap]) -> bool:
        """Whether `producer` can be computed once per row of this group's kernel: not in
        a contraction's, whose epilogue runs element by element (a reduction there is
        computed again for each element: an RBF kernel's row norms made it 10x slower);
        whichever of the two the walk meets first joins, the other is stored."""
        if self.contraction is not None or self.root.op in CONTRACTION_OPS:
            return False
        rank = row_rank(producer, maps, self.root_dims)
        return rank is not None and self.row_rank in (None, rank)


# a value that lookups index this deep is stored, not computed in their kernel (data
# movement aside): a chain of lookups in one loop waits on each load in turn, where a
# kernel per step overlaps the lookups of many elements (a forest's ten levels fused
# into one loop ran 7x slower than a kernel per level)
MAX_CHASE = 2

# the most instructions one fused kernel computes per element: LLVM's vectorizer gives up
# on larger loop bodies (an unrolled iterative solver's 7,724: 6x slower than unfused)
MAX_MEMBERS = 512

# the most members on a path from a fused kernel's root down to a member that read their
# operands through a Python call (pad, concatenate, gather, reductions, contractions:
# INDEX_MAP_OPS evaluate on an explicit stack): the backend's emitter recurses once per
# such member, so a deeper group would need a call stack as deep as the model (a
# 20,000-op chain: RecursionError); deeper chains of them become a kernel per step
MAX_DEPTH = 32

# what storing a value and loading it back costs per byte, in arithmetic instructions:
# what fusing a producer saves, against what recomputing it in the consumer costs
BYTE_COST = 2.0


# what fusion may add to a computation's arithmetic in all, as a share of it unfused:
# recomputing cheap values saves their stores and loads, but must not multiply the work
RECOMPUTE_BUDGET = 0.05


class _Budget:
    """The floating-point work fusion may still add to one computation."""

    def __init__(self, computation: Computation):
        self.left = RECOMPUTE_BUDGET * sum(flops(i) for i in computation.instructions)

    def take(self, producer: Instruction, evaluations: float, duplicate: bool) -> bool:
        """Whether fusing `producer` to be computed `evaluations` times pays, taking what
        it recomputes from the budget: computing it inside the kernel must cost less than
        computing each element once in its own kernel, storing it and loading it back
        (`duplicate`: another kernel computes it anyway, so fusing saves only the load)."""
        count = max(elements(producer), 1)
        repeated = max(evaluations - (0 if duplicate else count), 0.0)
        extra = repeated * weighted_operations(producer) / count
        saved = count * _element_bytes(producer) * (1 if duplicate else 2) * BYTE_COST
        added = repeated * flops(producer) / count
        if extra > saved or added > self.left:
            return False
        self.left -= added
        return True


def _element_bytes(instr: Instruction) -> int:
    shape = instr.shape
    if isinstance(shape, Shape):
        return shape.nbytes // max(shape.size, 1)
    return sum(e.nbytes // max(e.size, 1) for e in shape.elements if isinstance(e, Shape))


def _recomputable(producer: Instruction, places: int) -> bool:
    """Whether computing `producer` in `places` places of one kernel beats storing it:
    always for one place or cheap ops, at most twice for transcendentals (softmax's
    exp), never for dots, convolutions and other reusing ops."""
    if places <= 1 or producer.op in CHEAP_OPS:
        return True
    return producer.op not in REUSING_OPS and places <= 2


class _Ancestry:
    """What each instruction of a computation has above it, found in one pass in operand
    order: a walk per question was quadratic in long elementwise chains (unrolled loops)."""

    # what walking up from a value through elementwise ops meets, worst last
    NOTHING, CONTRACTION, COMPUTED_BROADCAST = 0, 1, 2

    def __init__(self, computation: Computation):
        self.above: dict[int, int] = {}
        self.reduce_above: dict[int, bool] = {}
        for instr in computation.instructions:  # operands come first (see _form_groups)
            operands = [id(o) for o in instr.operands]
            if instr.op in CONTRACTION_OPS:
                above = self.CONTRACTION
            elif instr.op is Op.BROADCAST:
                leaf = instr.operands[0].op in (Op.PARAMETER, Op.CONSTANT)
                above = self.NOTHING if leaf else self.COMPUTED_BROADCAST
            elif instr.op.is_elementwise:
                above = max((self.above[o] for o in operands), default=self.NOTHING)
            else:
                above = self.NOTHING
            self.above[id(instr)] = above
            self.reduce_above[id(instr)] = instr.op is Op.REDUCE or (
                _is_fusible(instr) and any(self.reduce_above[o] for o in operands)
            )

    def epilogue_of_contraction(self, instr: Instruction) -> bool:
        """Whether `instr` could be a dot's or convolution's epilogue: elementwise on top of
        one, through elementwise ops and broadcasts of leaves (bias) only; a value computed
        from the contraction's own result otherwise (softmax's max) needs all of it first."""
        return instr.op.is_elementwise and self.above[id(instr)] == self.CONTRACTION

    def reaches_reduce(self, instr: Instruction) -> bool:
        """Whether a reduction feeds `instr` through fusible ops (a row value worth
        hoisting)."""
        return self.reduce_above[id(instr)]


def _read_as_epilogue(producer, maps, group: _Group) -> bool:
    """Whether the group reads `producer` at its root's own index through elementwise ops
    only, into a root of its own type: what a kernel form computing `producer` can apply
    per output element (the pooling kernel keeps its values in the output buffer until
    the epilogue runs; a max pool quantized to u8 in one loop ran 20 ns an element)."""
    root_rank = len(group.root_dims)
    return (
        maps == {identity(root_rank)}
        and group.root.array_shape.dtype is producer.array_shape.dtype
        and dims_of(producer) == group.root_dims
        and read_elementwise_only(producer, dims_of(producer), group.members)
    )


def _moves_rows_of(producer: Instruction, users, group: _Group) -> bool:
    """A transpose that moves its last dim, read by a convolution of the group (directly
    or through reshapes: tokens [B, H*W, C] made an NCHW image) or by a reduction
    (through reshapes and elementwise ops: a layer norm over channels of an NCHW image):
    stored instead, so that the convolution reads its image rows, and the reduction its
    rows, contiguous rather than gathering them with the transpose's stride."""
    if producer.op is not Op.TRANSPOSE or producer.dimensions[-1] == len(producer.dimensions) - 1:
        return False
    pending = [(user, True) for user in users]
    seen: set[tuple[int, bool]] = set()
    while pending:
        user, reshaped_only = pending.pop()
        if id(user) not in group.members or (id(user), reshaped_only) in seen:
            continue
        seen.add((id(user), reshaped_only))
        if user.op is Op.REDUCE or (user.op is Op.CONVOLUTION and reshaped_only):
            return True
        if user.op in (Op.RESHAPE, Op.BITCAST) or user.op.is_elementwise:
            keeps = reshaped_only and not user.op.is_elementwise
            pending.extend((u, keeps) for u in user.users)
    return False


def _is_fusible(instr: Instruction) -> bool:
    return instr.op in FUSIBLE_OPS and isinstance(instr.shape, Shape)


def _form_groups(computation: Computation) -> list[_Group]:
    position = {id(i): n for n, i in enumerate(computation.instructions)}
    grouped: set[int] = set()
    copies: dict[int, list[_Group]] = {}  # id -> groups that compute a copy of it
    covered: dict[int, set[int]] = {}  # id -> its users in those groups (their ids)
    groups: list[_Group] = []
    ancestry = _Ancestry(computation)
    budget = _Budget(computation)
    for instr in reversed(computation.instructions):
        if id(instr) in grouped or not _is_fusible(instr):
            continue
        if instr.user_count and len(covered.get(id(instr), ())) == instr.user_count:
            continue  # no one will read it: every user computes its own copy
        group = _Group(instr)
        grouped.add(id(instr))
        weights = _dequantized_operands(instr)
        # candidates are judged latest-first, so all their in-group users are known;
        # entries: (-position, producer, recomputed several times per output element?,
        # reached through a copy that other kernels compute too?)
        work = [
            (-position[id(o)], id(o), o, _reads_repeatedly(instr, n), False)
            for n, o in enumerate(instr.operands)
        ]
        heapq.heapify(work)
        while work:
            _, _, producer, replicated, copied = heapq.heappop(work)
            if id(producer) in group.members or not _is_fusible(producer):
                continue
            # a contraction's block-dequantized weight (ir/dequantization.py) joins it
            # whatever its repeated reads: its GEMM dequantizes each value once per packing,
            # where storing the float weight writes and reads 4 bytes per value
            weight = id(producer) in weights
            replicated = replicated and not weight
            if len(group.members) >= MAX_MEMBERS:
                continue  # past this, one loop body no longer vectorizes: kernels that do win
            readers = group.readers.get(id(producer), [])
            depth = group.depth_of(producer, readers)
            if depth > MAX_DEPTH:
                continue
            maps = maps_from_users(producer, readers, group.maps)
            # a non-root reduction fuses as a row value only; a costly value read through a
            # broadcast only as a row value on top of one
            row_value = producer.op is Op.REDUCE or (
                replicated and producer.op not in FREE_OPS and ancestry.reaches_reduce(producer)
            )
            if row_value:
                if not group.takes_row_value(producer, maps):
                    continue
                replicated = False  # computed once per row
            if replicated and (producer.op not in FREE_OPS or _quantizes(producer)):
                continue
            chase = group.chase_of(producer, readers)
            if chase >= MAX_CHASE and producer.op not in FREE_OPS:
                continue
            if producer.op in CONTRACTION_OPS and not (
                group.takes_contraction(producer, maps)
                # as the backend's GEMM epilogue reads it (index maps alone would let two
                # transposes that cancel through)
                and read_elementwise_only(producer, dims_of(producer), group.members)
            ):
                continue
            if producer.op in KERNEL_FORM_OPS and not _read_as_epilogue(producer, maps, group):
                continue
            if _moves_rows_of(producer, readers, group):
                continue
            # a contraction's epilogue read through a concatenate, pad...: better left to
            # form the contraction's own kernel
            # (but for a widening of bytes that this group's contraction reads through,
            # here or in a copy: the bytes are stored instead, a half or a quarter of the
            # widened values)
            epilogue = ancestry.epilogue_of_contraction(producer)
            bytes_read = widens_bytes(producer) and replicated
            if epilogue and maps != {identity(len(group.root_dims))} and not bytes_read:
                continue
            places = group.places_of(producer, readers)
            if not (row_value or weight) and not _recomputable(producer, len(places)):
                continue
            outside = _read_outside(producer, readers, copies)
            # what a copy pulls in, the other copies need too: only cheap ops; and not
            # what would need a reduction or a contraction stored for it, though the kernel
            # computing that (a layer norm, a dot with its epilogue) keeps it inside
            # (a widening of bytes is copied whatever it comes from: the bytes are stored)
            duplicate = outside or copied
            if duplicate and (
                producer.op not in CHEAP_OPS
                or (ancestry.reaches_reduce(producer) and not bytes_read)
                or (epilogue and not bytes_read)
            ):
                continue
            # a lookup's computed indices are stored once when other kernels read them
            # too: each copy would pull in the lookups they come from (a tree level's
            # node numbers, read by the next level's four lookups)
            if duplicate and chase and producer.op not in FREE_OPS:
                continue
            if id(producer) in grouped and producer.op not in CHEAP_OPS:
                continue
            rows = group.rows(row_rank(producer, maps, group.root_dims)) if row_value else None
            evaluations = group.evaluations_of(producer, readers, rows)
            if not weight and not budget.take(producer, evaluations, duplicate):
                continue
            group.members[id(producer)] = producer
            group.note_reads(producer)
            group.maps[id(producer)] = maps
            group.places[id(producer)] = places
            group.evaluations[id(producer)] = evaluations
            group.chase[id(producer)] = chase
            group.depth[id(producer)] = depth
            if row_value:
                group.row_rank = row_rank(producer, maps, group.root_dims)
                group.row_values.add(id(producer))
            if producer.op in CONTRACTION_OPS:
                group.contraction = producer
                weights |= _dequantized_operands(producer)
            if duplicate:
                copies.setdefault(id(producer), []).append(group)
                covered.setdefault(id(producer), set()).update(id(u) for u in readers)
            else:
                grouped.add(id(producer))
            for n, o in enumerate(producer.operands):
                again = replicated or _reads_repeatedly(producer, n)
                heapq.heappush(work, (-position[id(o)], id(o), o, again, duplicate))
        groups.append(group)
    return groups


def _dequantized_operands(instr: Instruction) -> set[int]:
    """The members of `instr`'s block-dequantized operands (ir/dequantization.py) when it
    is a contraction and they have no users but each other and it."""
    if instr.op not in CONTRACTION_OPS:
        return set()
    found: set[int] = set()
    for operand in instr.operands:
        weight = block_dequantization(operand)
        if weight is None:
            continue
        members = {id(m) for m in weight.members}
        inside = members | {id(instr)}
        if all(id(u) in inside for m in weight.members for u in m.users):
            found |= members
    return found


def _quantizes(producer: Instruction) -> bool:
    """A convert to 8-bit integers of a computed value: read repeatedly (a GEMM operand
    packed per block), it is stored once, by the kernel computing the value, so that the
    reader gets one byte per element in memory (an integer GEMM reads 8-bit values in
    place) rather than a wider value converted at each read."""
    return (
        producer.op is Op.CONVERT
        and producer.array_shape.dtype in BYTE_TYPES
        and producer.operands[0].op not in (Op.PARAMETER, Op.CONSTANT)
    )


def _reads_repeatedly(consumer: Instruction, number: int) -> bool:
    """Whether `consumer` reads elements of its operand `number` several times per
    output element pass: a reusing op's operands, but for a lookup's indices (one per
    output element: a tree traversal's node numbers then fuse level into level)."""
    return consumer.op in REUSING_OPS and not reads_indices_at_own_index(consumer, number)


def _read_outside(producer: Instruction, readers: list[Instruction], copies) -> bool:
    """Whether `producer` is read outside the group whose members `readers` read it: by a
    user in no group of ours, or by a copy of a member that another kernel computes
    without computing `producer` too (this group's own copy first: the latest)."""
    if producer.user_count > len({id(u) for u in readers}):
        return True
    return any(
        id(producer) not in g.members for u in readers for g in reversed(copies.get(id(u), []))
    )


def _outline(module: Module, group: _Group, position: dict[int, int]) -> Instruction:
    """A fusion calling a computation of the group's members, to read in its root's place."""
    members = sorted(group.members.values(), key=lambda i: position[id(i)])
    builder = ComputationBuilder(module, f"fused_{group.root.name}")
    clones: dict[int, Instruction] = {}
    operands: list[Instruction] = []
    for instr in members:
        cloned_operands = []
        for operand in instr.operands:
            if id(operand) not in clones:
                if _inline_constant(operand):
                    clones[id(operand)] = builder.constant(
                        operand.literal, operand.array_shape.dtype
                    )
                else:
                    number = len(operands)
                    param = builder.parameter(number, operand.shape, f"param_{number}")
                    clones[id(operand)] = param
                    operands.append(operand)
            cloned_operands.append(clones[id(operand)])
        clones[id(instr)] = _clone(builder, instr, cloned_operands)
    body = builder.build(clones[id(group.root)])
    kind = fusion_kind(body)
    # a contraction joins a group only as one the backends run ahead of its epilogue
    contraction = group.contraction is not None or group.root.op in CONTRACTION_OPS
    assert (kind is FusionKind.OUTPUT) == contraction, f"{body.name}: {kind}"
    return fusion_instruction(module, group.root, operands, body, kind, "fusion")


def fusion_instruction(
    module: Module,
    root: Instruction,
    operands: list[Instruction],
    body: Computation,
    kind: FusionKind,
    prefix: str,
) -> Instruction:
    """A fusion calling `body` on `operands`, in `root`'s place (its shape, origin and
    extents)."""
    return Instruction(
        Op.FUSION,
        root.shape,
        operands,
        module.unique_name(f"{prefix}.{root.name}"),
        called=(body,),
        fusion_kind=kind,
        origin=root.origin,
        extents=root.extents,
    )


def _inline_constant(instr: Instruction) -> bool:
    """Scalar constants go inside the fused computation (immediates in the kernel)."""
    return instr.op is Op.CONSTANT and instr.array_shape.size == 1


def _clone(builder: ComputationBuilder, instr: Instruction, operands: list[Instruction]):
    name = builder.module.unique_name(instr.name)
    copy = dataclasses.replace(instr, operands=operands, name=name)
    builder.computation.instructions.append(copy)
    return copy
