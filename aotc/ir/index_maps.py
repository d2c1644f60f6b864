"""Index maps: which loop index of a fused root each dim of an instruction reads.

A kernel loops over its root's output index; element generators pass index
values down to operands, unchanged through elementwise ops, broadcasts,
transposes, the kept dims of reductions and the leading dims a reshape
leaves alone.  An index map gives, per dim of an instruction, the root
output dim whose index it receives unchanged (None: some other value, e.g.
a reduction's loop counter).  An instruction reached along several paths
has one map per distinct path result.

Row fusion (passes/fusion.py decides, backends emit) rests on this: an
instruction whose maps all read (0, 1, ..., p-1) (dims of extent 1 aside) is
indexed by the first p loop dims only, so a kernel may compute it once per
"row" of those dims (`row_rank`).
"""

from __future__ import annotations

from .module import Computation, Instruction, reached
from .ops import Op, Trait
from .types import DType, Shape

IndexMap = tuple[int | None, ...]

# more distinct maps than this for one instruction: treat it as read anywhere
MAX_MAPS = 8

# ops whose element at an index reads each operand once, at an index computed from that
# index alone, with no branch or loop: elementwise ops and pure data movement (the
# backends evaluate chains of them without recursing: backends/llvm's SplitGen)
INDEX_MAP_OPS = frozenset(
    {op for op in Op if op.is_elementwise}
    | {
        Op.BROADCAST,
        Op.RESHAPE,
        Op.BITCAST,
        Op.TRANSPOSE,
        Op.SLICE,
        Op.REVERSE,
        Op.TUPLE,
        Op.GET_TUPLE_ELEMENT,
    }
)


def rank_of(instr: Instruction) -> int:
    """Rank of an array, or of the (equally shaped) elements of a variadic reduce."""
    return len(dims_of(instr))


def identity(rank: int) -> IndexMap:
    return tuple(range(rank))


def operand_map(user: Instruction, user_map: IndexMap, number: int) -> IndexMap:
    """The map of `user`'s operand `number` when `user` is read with `user_map`."""
    return _map_through(user, user_map, number, user.operands[number])


def _map_through(user: Instruction, user_map: IndexMap, number: int, operand: Instruction):
    rank = rank_of(operand)
    if user.op.is_elementwise:
        return user_map if rank == len(user_map) else (None,) * rank  # scalar clamp bounds
    if user.op is Op.BROADCAST:
        return tuple(user_map[d] for d in user.dimensions)
    if user.op is Op.TRANSPOSE:
        mapped: list[int | None] = [None] * rank
        for out_dim, in_dim in enumerate(user.dimensions):
            mapped[in_dim] = user_map[out_dim]
        return tuple(mapped)
    # the reshapes, not every Trait.VIEW op: get-tuple-element's operand is a tuple
    if user.op in (Op.RESHAPE, Op.BITCAST):
        same = shared_leadingdims_of(user.array_shape.dims, operand.array_shape.dims)
        return user_map[:same] + (None,) * (rank - same)
    if reads_indices_at_own_index(user, number):
        return user_map
    if user.op is Op.REDUCE and number < len(user.operands) // 2:  # an input, not an init
        mapped = [None] * rank
        kept = [d for d in range(rank) if d not in user.dimensions]
        for out_dim, in_dim in enumerate(kept):
            mapped[in_dim] = user_map[out_dim]
        return tuple(mapped)
    return (None,) * rank


def reads_indices_at_own_index(user: Instruction, number: int) -> bool:
    """Whether `user` is a gather whose operand `number` holds its indices, one per
    output element at that element's own index (a table lookup: no offset dims, the
    index vector implicit), so each output element reads one index element."""
    if user.op is not Op.GATHER or number != 1 or user.operands[0] is user.operands[1]:
        return False
    dims = user.gather
    indices = user.operands[1]
    return (
        dims is not None
        and not dims.offset_dims
        and dims.index_vector_dim == rank_of(indices)
        and dims_of(indices) == dims_of(user)
    )


def shared_leadingdims_of(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many leading dims two shapes share (a reshape passes their indices through)."""
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


def maps_from_users(
    producer: Instruction, users: list[Instruction], user_maps: dict[int, frozenset[IndexMap]]
) -> frozenset[IndexMap]:
    """`producer`'s maps as read by those `users` whose maps are known."""
    found: set[IndexMap] = set()
    # `users` lists a user once per operand it reads `producer` as; only a gather's and a
    # reduce's maps depend on which operand, so only theirs are searched for it (a
    # 20,000-input concatenate searched per input was quadratic)
    for user in dict.fromkeys(users):
        if id(user) not in user_maps:
            continue
        if user.op in (Op.GATHER, Op.REDUCE):
            numbers = [n for n, o in enumerate(user.operands) if o is producer]
        else:
            numbers = [-1]  # any operand that is `producer`: the map is the same
        for number in numbers:
            for m in user_maps[id(user)]:
                found.add(_map_through(user, m, number, producer))
    if len(found) > MAX_MAPS:
        return frozenset({(None,) * rank_of(producer)})
    return frozenset(found)


def computation_maps(computation: Computation) -> dict[int, frozenset[IndexMap]]:
    """The maps of every instruction of `computation` reached from its root."""
    maps = {id(computation.root): frozenset({identity(rank_of(computation.root))})}
    for instr in reversed(computation.instructions):
        if instr is computation.root:
            continue
        found = maps_from_users(instr, instr.users, maps)
        if found:
            maps[id(instr)] = found
    return maps


def row_rank(
    instr: Instruction, maps: frozenset[IndexMap], root_dims: tuple[int, ...]
) -> int | None:
    """p where `instr` is read at the first p loop dims only, in order; else None.

    Dims of extent 1 are skipped on both sides: their index is 0 whatever a
    map says.  p is the smallest such count.
    """
    dims = dims_of(instr)
    ranks = set()
    for index_map in maps:
        live = [index_map[d] for d in range(len(dims)) if dims[d] != 1]
        rank = live[-1] + 1 if live and live[-1] is not None else 0
        if live != row_dims(root_dims, rank):
            return None
        ranks.add(rank)
    return ranks.pop() if len(ranks) == 1 else None


def row_dims(root_dims: tuple[int, ...], rank: int) -> list[int]:
    """The loop dims of a row of `rank` whose extent is not 1."""
    return [d for d in range(rank) if root_dims[d] != 1]


def dims_of(instr: Instruction) -> tuple[int, ...]:
    """Dims of an array, or of the (equally shaped) elements of a variadic reduce."""
    shape = instr.shape if isinstance(instr.shape, Shape) else instr.shape.elements[0]
    return shape.dims


def read_elementwise_only(start: Instruction, dims, within=None) -> bool:
    """Whether every instruction reading `start` (transitively) is elementwise at `dims`:
    then each output element reads only the same element of `start` (in-place safe).
    `within`: only the readers whose ids it holds count (a fusion group being formed)."""
    work, seen = [start], set()
    while work:
        instr = work.pop()
        if id(instr) in seen:
            continue
        seen.add(id(instr))
        for user in instr.users:
            if within is not None and id(user) not in within:
                continue
            same_dims = isinstance(user.shape, Shape) and user.shape.dims == tuple(dims)
            if Trait.ELEMENTWISE not in user.op.traits or not same_dims:
                return False
            work.append(user)
    return True


def row_values(instr: Instruction) -> tuple[int, list[Instruction]]:
    """(row rank, the values a fusion computes once per row, in order); (0, []) if none.

    The row rank is that of the fusion's non-root reductions (the pass gives
    them all one); the row values are every instruction read at the row's
    index only (the reductions and what is computed from them alone).  Other
    fusions (hand-made ones, tuple roots) run as plain loops, recomputing.
    """
    if instr.op is not Op.FUSION or not isinstance(instr.shape, Shape):
        return 0, []
    fused = instr.called[0]
    maps = computation_maps(fused)
    root_dims = instr.shape.dims
    ranks = {
        row_rank(i, maps.get(id(i), frozenset()), root_dims)
        for i in fused.instructions
        if i.op is Op.REDUCE and i is not fused.root
    }
    if len(ranks) != 1 or None in ranks:  # none, or not a row fusion: plain loops
        return 0, []
    rank = ranks.pop()
    hoisted = [
        i
        for i in fused.instructions
        if i is not fused.root and id(i) in maps and row_rank(i, maps[id(i)], root_dims) == rank
    ]
    return rank, hoisted


# element types of the values a row kernel keeps in its output buffer: halves are rounded
# there, where a row kernel would hold them in f32 (ONNX's reference rounds each op's
# result to the half type anyway)
CACHEABLE_DTYPES = frozenset({DType.F32, DType.F64, DType.F16, DType.BF16})


def cached_row_value(instr: Instruction, rank: int, hoisted: list[Instruction]):
    """The value a row fusion computes while reducing a row and keeps in its output
    buffer, so that the output loop loads it instead of computing it again (softmax's
    exponentials: computed for the sum, then divided by it), or None.

    It is a member the output loop reads at its own index and a hoisted reduction over
    exactly the row's inner dims reads at the same index, both through elementwise ops
    of the output's dims only, of the output's element type; the latest such member in
    computation order (it covers what it is computed from).  `instr`'s kernel must
    then not share its output buffer with an operand."""
    fused = instr.called[0]
    shape = instr.shape
    if not isinstance(shape, Shape) or shape.dtype not in CACHEABLE_DTYPES:
        return None
    dims = shape.dims
    # an operand read only at the output's index may share the output's buffer
    # (buffers/inplace.py): storing into it early would clobber what is still to be read
    if any(
        instr.operands[p.index].op is not Op.CONSTANT  # weights are never overwritten
        and dims_of(p) == dims
        and read_elementwise_only(p, dims)
        for p in fused.parameters
    ):
        return None
    full_rows = [
        r
        for r in hoisted
        if r.op is Op.REDUCE
        and len(r.operands) == 2
        and _covers_row(set(r.dimensions), dims, rank)
        and dims_of(r.operands[0]) == dims
    ]
    in_rows = _same_index_members([r.operands[0] for r in full_rows], dims, hoisted)
    in_output = _same_index_members([fused.root], dims, hoisted)
    candidates = [
        i
        for i in fused.instructions
        if id(i) in in_rows
        and id(i) in in_output
        and i is not fused.root
        and i.op not in (Op.PARAMETER, Op.CONSTANT, Op.BROADCAST, Op.IOTA)
        and i.shape == shape
        and _reads_an_operand(i)
    ]
    return candidates[-1] if candidates else None


def _reads_an_operand(instr: Instruction) -> bool:
    """Whether `instr` is computed from a parameter: a value worth keeping (a broadcast
    constant is not, and keeping it early would overwrite an operand that shares the
    output's buffer before the output loop reads it, as an attention kernel's scores)."""
    return any(member.op is Op.PARAMETER for member in reached([instr]))


def _covers_row(reduced: set[int], dims: tuple[int, ...], rank: int) -> bool:
    """Whether reducing `reduced` of `dims` visits every element of a row of `rank`."""
    inner = set(range(rank, len(dims)))
    return reduced <= inner and all(dims[d] == 1 for d in inner - reduced)


def _same_index_members(starts: list[Instruction], dims, hoisted) -> set[int]:
    """Ids of the members reached from `starts` through elementwise ops of `dims` (each
    read at the starts' own index), hoisted values excluded."""
    skip = {id(h) for h in hoisted}
    found: set[int] = set()
    work = [s for s in starts if dims_of(s) == dims]
    while work:
        instr = work.pop()
        if id(instr) in found or id(instr) in skip:
            continue
        found.add(id(instr))
        if instr.op.is_elementwise:
            work += [
                o for o in instr.operands if isinstance(o.shape, Shape) and o.shape.dims == dims
            ]
    return found
