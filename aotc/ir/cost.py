"""Counted work: the operations an instruction performs, and those a fused kernel
performs with what it recomputes.

Unfused, an instruction computes each element of its result once: `operations`
counts one per element and arithmetic op (a reduction one per element it reads,
a windowed reduction one per window tap, dot and convolution two per multiply-add),
nothing for data movement.  Fused, a member is evaluated wherever a user reads it:
a producer read through a 5x5 max pool is computed 25 times per pool output, one
read through a concatenate once per element of its slice.  `evaluations` counts
that per member of a fused computation (values a row fusion hoists are computed
once per row), so `kernel_flops` of a fusion is what its kernel really computes;
the fusion pass weighs the same counts against the bytes a fusion saves.
"""

from __future__ import annotations

import math

from .attrs import FusionKind
from .index_maps import (
    CACHEABLE_DTYPES,
    cached_row_value,
    reads_indices_at_own_index,
    row_values,
)
from .module import Computation, Instruction, Module
from .ops import Op
from .types import Shape

# ops that cost no arithmetic: index computation and a load per element
MOVEMENT_OPS = frozenset(
    {
        Op.BROADCAST,
        Op.RESHAPE,
        Op.BITCAST,
        Op.TRANSPOSE,
        Op.SLICE,
        Op.CONCATENATE,
        Op.PAD,
        Op.REVERSE,
        Op.IOTA,
        Op.CONVERT,
        Op.BITCAST_CONVERT,
        Op.GATHER,
        Op.DYNAMIC_SLICE,
        Op.SELECT,
    }
)

# elementwise ops that a CPU computes as a polynomial or an iteration: about this many
# arithmetic instructions each (what the fusion pass weighs recomputing them by)
TRANSCENDENTAL_COST = 12.0
TRANSCENDENTAL_OPS = frozenset(
    {
        Op.EXP,
        Op.EXPM1,
        Op.LOG,
        Op.LOG1P,
        Op.TANH,
        Op.LOGISTIC,
        Op.SIN,
        Op.COS,
        Op.TAN,
        Op.ERF,
        Op.POWER,
        Op.ATAN2,
        Op.CBRT,
    }
)


def operations(instr: Instruction) -> int:
    """Arithmetic operations of computing `instr` once, whatever its element type (0 for
    data movement, tuples and control flow)."""
    shape = instr.shape
    if not isinstance(shape, Shape) or instr.op in MOVEMENT_OPS:
        return 0
    if instr.op is Op.DOT:
        lhs = instr.operands[0].array_shape
        k = math.prod(lhs.dims[d] for d in instr.dot.lhs_contracting)
        return 2 * shape.size * k
    if instr.op is Op.CONVOLUTION:
        kernel = instr.operands[1].array_shape
        per_output = kernel.size // kernel.dims[instr.conv.kernel_output_feature]
        return 2 * shape.size * per_output
    if instr.op is Op.REDUCE:
        return instr.operands[0].array_shape.size
    if instr.op is Op.REDUCE_WINDOW:
        return shape.size * math.prod(instr.window.size)
    if instr.op.is_elementwise:
        return shape.size
    return 0


def flops(instr: Instruction) -> int:
    """Floating-point operations of computing `instr` once (0 for integer results)."""
    shape = instr.shape
    if not isinstance(shape, Shape) or not shape.dtype.is_float:
        return 0
    return operations(instr)


def weighted_operations(instr: Instruction) -> float:
    """`operations` with transcendentals at their cost in arithmetic instructions."""
    weight = TRANSCENDENTAL_COST if instr.op in TRANSCENDENTAL_OPS else 1.0
    return weight * operations(instr)


def reads_per_element(user: Instruction, operand: Instruction) -> float:
    """How many elements of `operand` one element of `user` reads (on average)."""
    if user.op is Op.DOT:
        lhs = user.operands[0].array_shape
        return float(math.prod(lhs.dims[d] for d in user.dot.lhs_contracting))
    if user.op is Op.CONVOLUTION:
        kernel = user.operands[1].array_shape
        return kernel.size / kernel.dims[user.conv.kernel_output_feature]
    if user.op is Op.REDUCE_WINDOW:
        return float(math.prod(user.window.size))
    if user.op in (Op.REDUCE, Op.CONCATENATE, Op.PAD):
        # each operand element is read once over the whole result
        return elements(operand) / max(elements(user), 1)
    return 1.0


def evaluations(computation: Computation, hoisted: dict[int, int] | None = None):
    """Per member of a fused computation (by id): how many of its elements one run of
    the kernel computes.  The root computes each of its elements once; `hoisted` maps
    the values a row fusion computes once per row to that row count."""
    hoisted = hoisted or {}
    counts: dict[int, float] = {}
    users: dict[int, list[Instruction]] = {}
    for instr in computation.instructions:
        for operand in dict.fromkeys(instr.operands):  # a value read twice is one load
            users.setdefault(id(operand), []).append(instr)
    for instr in reversed(computation.instructions):
        if instr is computation.root:
            counts[id(instr)] = float(elements(instr))
        elif id(instr) in hoisted:
            counts[id(instr)] = float(hoisted[id(instr)])
        else:
            readers = [(u, counts.get(id(u), 0.0)) for u in users.get(id(instr), [])]
            counts[id(instr)] = evaluations_for(instr, readers)
    return counts


def evaluations_for(producer: Instruction, readers, row_output=None) -> float:
    """How many elements of `producer` a kernel computes for its `readers` ((user, user's
    evaluations) pairs).  Users that read it elementwise at their own index read the
    same element in the same iteration, which the code computes once (common
    subexpressions are merged); every other read computes it again.  `row_output`: the
    shape of a row kernel's output; a reduction over the producer's trailing dims counts
    as such a reader too when there is one and the producer has that shape (the kernel
    keeps what it reduces in its output for its output loop, index_maps.cached_row_value)."""
    same_index, others = [], 0.0
    for user, count in readers:
        if _reads_at_own_index(user, producer):
            same_index.append(count)
    for user, count in readers:
        kept = same_index and _reduces_trailing_dims(user, producer)
        kept = kept and producer.shape == row_output and row_output.dtype in CACHEABLE_DTYPES
        if kept:
            same_index.append(count * reads_per_element(user, producer))
        elif not _reads_at_own_index(user, producer):
            others += count * reads_per_element(user, producer)
    return max(same_index, default=0.0) + others


def _reduces_trailing_dims(user: Instruction, operand: Instruction) -> bool:
    if user.op is not Op.REDUCE or user.operands[0] is not operand:
        return False
    rank = len(_dims(operand) or ())
    return sorted(user.dimensions) == list(range(rank - len(user.dimensions), rank))


def _reads_at_own_index(user: Instruction, operand: Instruction) -> bool:
    if user.op is Op.GATHER:  # a lookup's indices
        return user.operands[1] is operand and reads_indices_at_own_index(user, 1)
    if not (user.op.is_elementwise or user.op is Op.BITCAST):
        return False
    return _dims(user) == _dims(operand)


def _dims(instr: Instruction) -> tuple[int, ...] | None:
    return instr.shape.dims if isinstance(instr.shape, Shape) else None


def fused_work(computation: Computation, counts: dict[int, float], cost) -> float:
    """`cost` (an instruction's count of computing it once) over a fused computation's
    members, each scaled by how often the kernel evaluates it."""
    total = 0.0
    for instr in computation.instructions:
        if instr.op in (Op.PARAMETER, Op.CONSTANT) or not isinstance(instr.shape, Shape):
            continue
        total += cost(instr) * counts.get(id(instr), 0.0) / max(elements(instr), 1)
    return total


def kernel_flops(instr: Instruction) -> int:
    """Floating-point operations of the kernel computing `instr`: a fusion's members
    as often as it evaluates them."""
    if instr.op is not Op.FUSION:
        return flops(instr)
    fused = instr.called[0]
    if instr.fusion_kind is FusionKind.CHAIN:  # its fusions' work, computed block by block
        return sum(kernel_flops(i) for i in fused.instructions if i.op is Op.FUSION)
    rank, values = row_values(instr)
    rows = math.prod(instr.array_shape.dims[:rank]) if values else 0
    once = {id(v): rows for v in values}
    cached = cached_row_value(instr, rank, values) if values else None
    if cached is not None:  # kept in the output buffer: computed once per element
        once[id(cached)] = elements(cached)
    counts = evaluations(fused, once)
    return round(fused_work(fused, counts, flops))


def module_flops(module: Module) -> int:
    """Floating-point operations of one run of `module`'s program (each while or
    conditional body counted once)."""
    return sum(
        kernel_flops(instr)
        for computation in module.program_computations()
        for instr in computation.instructions
    )


def elements(instr: Instruction) -> int:
    """Elements of an array, or of each element of a variadic reduce's tuple."""
    shape = instr.shape
    if isinstance(shape, Shape):
        return shape.size
    # a variadic reduce's tuple: its elements are computed together
    first = shape.elements[0] if shape.elements else None
    return first.size if isinstance(first, Shape) else 0
