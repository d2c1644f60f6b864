"""The elemental emitter: element generators and the elementwise rules.

A generator `gen(index) -> value` emits, at the builder's position, the code
computing one element of an instruction at a multi-index (i64 values, one
per dimension; `[]` for scalars).  Tuple-shaped instructions give a tuple of
values.  A rule `rule(ctx, instr, operand_gens) -> gen` builds an
instruction's generator from its operands'; rules sit in one table
(`rules.RULES`), so a fused computation is just its root's generator with the
parameters bound to the fusion operands' generators.

Elementwise ops and pure index maps give `SplitGen`s, which `Memoized` evaluates
down a chain on an explicit stack; the other rules (branches, loops) call their
operands' generators, one Python call deeper per such op (passes/fusion.py bounds
how deep those nest in one kernel: MAX_DEPTH).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from llvmlite import ir

from ...buffers import BufferKind, Slice
from ...ir import Computation, DType, Instruction, Op, Shape
from ...ir.ops import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE
from . import scalar
from .alias import OutputScope
from .context import EmitContext, Gen, Rule, SplitGen, Value
from .lltypes import (
    constant,
    from_storage,
    i64,
    literal_value,
    load_element,
    storage_type,
)


def make_generator(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    """The generator of `instr` by its opcode's rule, memoized per block and index."""
    return Memoized(ctx, ctx.rules[instr.op](ctx, instr, operands))


class Memoized:
    """A generator that reuses the value generated earlier in the same basic block at
    the same index.

    Fusions reach one producer along several paths (diamonds); without this
    each path would emit its own copy (exponentially many in deep chains).
    Keys hold ids, so the entries keep the keyed objects alive.
    """

    def __init__(self, ctx: EmitContext, gen: Gen):
        self.ctx = ctx
        self.gen = gen
        # key -> (block, index, value): the block and index kept alive with their ids
        self.cache: dict[tuple, tuple] = {}

    def key(self, index: Sequence[ir.Value]) -> tuple[tuple, ir.Block]:
        """The cache key of `index` in the builder's current block, and that block."""
        assert self.ctx.builder is not None
        block = self.ctx.builder.basic_block
        return (id(block), *(id(i) for i in index)), block

    def remember(self, key: tuple, block: ir.Block, index, value: Value) -> Value:
        self.cache[key] = (block, tuple(index), value)
        return value

    def __call__(self, index: Sequence[ir.Value]) -> Value:
        key, block = self.key(index)
        hit = self.cache.get(key)
        if hit is not None:
            return hit[2]
        if isinstance(self.gen, SplitGen):
            return _evaluate_chain(_Frame(self, self.gen, key, block, index))
        return self.remember(key, block, index, self.gen(index))


class _Frame:
    """One SplitGen's evaluation in progress: the call that recursion would make."""

    __slots__ = ("block", "index", "key", "memoized", "reads", "split", "values")

    def __init__(self, memoized: Memoized, split: SplitGen, key: tuple, block: ir.Block, index):
        self.memoized, self.split = memoized, split
        self.key, self.block, self.index = key, block, index
        self.reads = split.reads(index)  # emits its index arithmetic now
        self.values: list[Value] = []


def _evaluate_chain(root: _Frame) -> Value:
    """`root`'s value, its SplitGen operands' evaluated on an explicit stack in the order
    (and so with the code) that recursion would emit."""
    frames = [root]
    while True:
        frame = frames[-1]
        if len(frame.values) < len(frame.reads):
            gen, at = frame.reads[len(frame.values)]
            if not (isinstance(gen, Memoized) and isinstance(gen.gen, SplitGen)):
                frame.values.append(gen(at))
                continue
            key, block = gen.key(at)
            hit = gen.cache.get(key)
            if hit is None:
                frames.append(_Frame(gen, gen.gen, key, block, at))
            else:
                frame.values.append(hit[2])
            continue
        value = frame.split.combine(frame.values)
        frame.memoized.remember(frame.key, frame.block, frame.index, value)
        frames.pop()
        if not frames:
            return value
        frames[-1].values.append(value)


def bind_instructions(
    ctx: EmitContext,
    computation: Computation,
    params: Sequence[Gen],
    replaced: dict[int, Gen] | None = None,
) -> dict[int, Gen]:
    """id(instruction) -> generator for `computation`, parameters bound to `params`;
    `replaced` gives the generators of instructions computed elsewhere (by id)."""
    gens: dict[int, Gen] = dict(replaced or {})
    for instr in computation.instructions:
        if id(instr) in gens:
            continue
        if instr.op is Op.PARAMETER:
            gens[id(instr)] = params[instr.index]
        else:
            operands = [gens[id(o)] for o in instr.operands]
            gens[id(instr)] = make_generator(ctx, instr, operands)
    return gens


def bind_computation(ctx: EmitContext, computation: Computation, params: Sequence[Gen]) -> Gen:
    """The generator of `computation`'s root, its parameters bound to `params`."""
    return bind_instructions(ctx, computation, params)[id(computation.root)]


def call_computation(
    ctx: EmitContext, computation: Computation, args: Sequence[ir.Value]
) -> list[ir.Value]:
    """Emit a scalar computation (a reducer) inline on `args`; returns its results."""
    params = [_value_gen(a) for a in args]
    result = bind_computation(ctx, computation, params)([])
    return list(result) if isinstance(result, tuple) else [result]


def _value_gen(value: ir.Value) -> Gen:
    return lambda index: value


# -- memory -------------------------------------------------------------------


def linearize(b: ir.IRBuilder, index: Sequence[ir.Value], dims: Sequence[int]) -> ir.Value:
    """Row-major linear position of a multi-index; trailing digits that `split_index` made
    of a position over these extents give that position back, not a recombination of
    them (LLVM cannot always fold one: a power-of-two extent turns the remainder into a
    mask, and the loop vectorizer then sees no unit stride)."""
    split = _split_suffix(index, dims)
    if split is not None:
        whole, count = split
        outer = linearize(b, index[:-count], dims[:-count]) if count < len(dims) else i64(0)
        scale = i64(math.prod(dims[-count:]))
        return b.add(b.mul(outer, scale, flags=["nuw", "nsw"]), whole, flags=["nuw", "nsw"])
    linear = i64(0)
    for value, extent in zip(index, dims):
        linear = b.add(
            b.mul(linear, i64(extent), flags=["nuw", "nsw"]), value, flags=["nuw", "nsw"]
        )
    return linear


# the attribute split_index tags its digits with: (position, extents, digit number)
_SPLIT = "_aotc_split_of"


def _split_suffix(index: Sequence[ir.Value], dims: Sequence[int]):
    """(position, digit count) if index's last digits are all of one split_index over
    dims' last extents, else None."""
    if not index:
        return None
    tag = getattr(index[-1], _SPLIT, None)
    if tag is None:
        return None
    whole, extents, _ = tag
    count = len(extents)
    if count > len(index) or tuple(dims[len(dims) - count :]) != extents:
        return None
    for k, digit in enumerate(index[len(index) - count :]):
        mine = getattr(digit, _SPLIT, None)
        if mine is None or mine[0] is not whole or mine[1] != extents or mine[2] != k:
            return None
    return whole, count


def delinearize(b: ir.IRBuilder, linear: ir.Value, dims: Sequence[int]) -> list[ir.Value]:
    """Inverse of `linearize` (any linear position; `split_index` for one in range,
    whose addresses fold back to it)."""
    index = []
    for extent in reversed(dims):
        if extent == 1:
            index.append(i64(0))
            continue
        index.append(b.urem(linear, i64(extent)))
        linear = b.udiv(linear, i64(extent))
    return index[::-1]


def compose_index(ctx: EmitContext, digits: Sequence[ir.Value], extents) -> ir.Value:
    """`linearize(digits)`, remembered: `decompose_index` of it gives `digits` back."""
    if len(digits) == 1:
        return digits[0]
    value = linearize(ctx.builder, digits, extents)
    ctx.composed[id(value)] = (value, list(digits), tuple(extents))
    return value


def decompose_index(ctx: EmitContext, linear: ir.Value, extents) -> list[ir.Value]:
    """`delinearize(linear, extents)`, or the digits `linear` was composed of where their
    extents are these but for unit dims (no division then: a loop over the digits reads
    through a reshape that splits its dim as plain indices)."""
    known = ctx.composed.get(id(linear))
    live = [e for e in extents if e != 1]
    if known is None or known[0] is not linear or [e for e in known[2] if e != 1] != live:
        return delinearize(ctx.builder, linear, extents)
    digits = iter(d for d, e in zip(known[1], known[2]) if e != 1)
    return [i64(0) if e == 1 else next(digits) for e in extents]


def split_index(b: ir.IRBuilder, linear: ir.Value, extents) -> list[ir.Value]:
    """The row-major multi-index of `linear` (known to be in range): quotients by
    division, remainders by subtraction and no wrap of the outermost dim, so that
    address arithmetic on it folds back to `linear` (the loop vectorizer then sees
    the unit stride of an epilogue loop)."""
    whole, index = linear, []
    for extent in reversed(extents[1:]):
        quotient = b.udiv(linear, i64(extent)) if extent != 1 else linear
        index.append(b.sub(linear, b.mul(quotient, i64(extent))) if extent != 1 else i64(0))
        linear = quotient
    index.append(linear)
    index.reverse()
    if len(extents) > 1 and len({id(d) for d in index}) == len(index):
        for k, digit in enumerate(index):  # linearize gives `whole` back for them
            setattr(digit, _SPLIT, (whole, tuple(extents), k))
    return index if extents else []


def element_pointer(ctx: EmitContext, base: ir.Value, shape: Shape, index) -> ir.Value:
    linear = linearize(ctx.builder, index, shape.dims)
    return ctx.builder.gep(base, [linear], inbounds=True, source_etype=storage_type(shape.dtype))


def memory_generator(
    ctx: EmitContext, where: Slice, shape: Shape, outside: OutputScope | None = None
) -> Gen:
    """Loads elements of an array stored at `where`; with `outside`, loads marked as
    never reading the kernel's output (alias.py).  Loads of weights are marked invariant:
    nothing stores to them, so LLVM may hoist a load at a loop-invariant index (a
    gather's index table, a per-row weight) out of loops whose stores it would otherwise
    suspect of aliasing it, and vectorize them."""
    invariant = where.kind is BufferKind.CONSTANT

    def gen(index):
        pointer = element_pointer(ctx, ctx.slice_pointer(where), shape, index)
        if outside is None:
            return load_element(ctx.builder, shape.dtype, pointer, invariant)
        loaded = ctx.builder.load(pointer, typ=storage_type(shape.dtype))
        outside.load(loaded)
        if invariant:
            loaded.set_metadata("invariant.load", ctx.builder.module.add_metadata([]))
        return from_storage(ctx.builder, shape.dtype, loaded)

    return gen


def invariant_generator(ctx: EmitContext, where: Slice, shape: Shape) -> Gen:
    """Loads the one element of an array at `where` in the entry block of the function
    reading it: a kernel's one-element operand does not change while the kernel runs,
    and loaded inside its loops it might alias the kernel's stores, which keeps LLVM from
    vectorizing them (a scale in a GEMM's epilogue did: 7x slower)."""

    def gen(index):
        b = ctx.builder
        ctx.slice_pointer(where)  # its buffer's base loaded first (itself in the entry block)
        with b.goto_entry_block():
            return load_element(b, shape.dtype, ctx.slice_pointer(where))

    return gen


# -- leaves and structure -----------------------------------------------------


def constant_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    """One-element constants are immediates; others load from the weights blob."""
    shape = instr.array_shape
    if shape.size == 1:
        value = constant(shape.dtype, literal_value(instr.literal, shape.dtype))
        return _value_gen(value)

    def gen(index):
        pointer = element_pointer(ctx, ctx.constant_pointer(instr), shape, index)
        return load_element(ctx.builder, shape.dtype, pointer)

    return gen


def iota_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    (dim,) = instr.dimensions
    dtype = instr.array_shape.dtype
    return lambda index: scalar.convert(ctx, DType.U64, dtype, index[dim])


def tuple_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    return SplitGen(lambda index: [(g, index) for g in operands], tuple)


def get_tuple_element_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    (source,) = operands
    element = instr.index
    assert element is not None  # the verifier's rule
    return SplitGen(lambda index: [(source, index)], lambda values: values[0][element])


def fusion_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    return bind_computation(ctx, instr.called[0], operands)


# -- elementwise families -----------------------------------------------------


def make_elementwise_rule(emit: Callable) -> Rule:
    """A rule from a scalar function `emit(ctx, instr, values) -> value`."""

    def rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
        # scalar operands of an array op (clamp bounds) are read at index []
        scalars = [o.array_shape.rank == 0 for o in instr.operands]

        def reads(index):
            return [(g, [] if scalar else index) for g, scalar in zip(operands, scalars)]

        return SplitGen(reads, lambda values: emit(ctx, instr, values))

    return rule


def _in_dtype(instr: Instruction) -> DType:
    return instr.operands[-1].array_shape.dtype


ELEMENTWISE_EMITTERS: dict[Op, Callable] = {
    **{
        op: lambda ctx, instr, v: scalar.unary(ctx, instr.op, _in_dtype(instr), v[0])
        for op in (*UNARY_ELEMENTWISE, Op.IS_FINITE)
    },
    **{
        op: lambda ctx, instr, v: scalar.binary(ctx, instr.op, _in_dtype(instr), *v)
        for op in BINARY_ELEMENTWISE
    },
    Op.COMPARE: lambda ctx, instr, v: scalar.compare(ctx, instr.direction, _in_dtype(instr), *v),
    Op.SELECT: lambda ctx, instr, v: ctx.builder.select(*v),
    Op.CLAMP: lambda ctx, instr, v: scalar.clamp(ctx, _in_dtype(instr), *v),
    Op.CONVERT: lambda ctx, instr, v: scalar.convert(
        ctx, _in_dtype(instr), instr.array_shape.dtype, v[0]
    ),
    Op.BITCAST_CONVERT: lambda ctx, instr, v: scalar.bitcast_convert(
        ctx, _in_dtype(instr), instr.array_shape.dtype, v[0]
    ),
}

ELEMENTAL_RULES: dict[Op, Rule] = {
    **{op: make_elementwise_rule(emit) for op, emit in ELEMENTWISE_EMITTERS.items()},
    Op.CONSTANT: constant_rule,
    Op.IOTA: iota_rule,
    Op.TUPLE: tuple_rule,
    Op.GET_TUPLE_ELEMENT: get_tuple_element_rule,
    Op.FUSION: fusion_rule,
}
