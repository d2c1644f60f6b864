"""Reductions by threads working together: a warp or a block per output, a block per row.

A *group* of threads (one warp, or a whole block) reduces one output: each thread
folds the positions lane, lane + G, ... into its own partial (consecutive lanes read
consecutive elements, so loads coalesce when the innermost dim is reduced), then the
partials combine by butterfly warp shuffles, and across the warps of a block through
shared memory; every thread of the group ends with the same result.

- `emit_reduce`: a reduce (or an INPUT fusion ending in one) whose innermost operand
  dim is reduced takes a warp per output, or a block for long reductions.  Others keep
  one thread per output (elementwise.py), which coalesces across outputs instead.
- `emit_rows`: a row fusion (softmax, layer norm; cpu/rows.py) takes a block per row:
  its row values (the reductions, and what is computed from them alone) are reduced by
  the block, then its threads store the row's elements.  Rows of a whole number of
  elements per thread (at most HELD_STEPS) are held in registers: one basic block whose
  reductions and stores share index values, so what the stores need is not recomputed
  (`_held_indexes`); other loops are unrolled by UNROLL.

Where bounded dims leave part of the work unneeded in a call (llvm/extents.py), groups
of outputs (or rows) the readers do not use return at once, and reductions stop at their
reduced extents (positions past them are the identity, or padding never written).

Partials start from the init value, so this needs inits that are identities of their
reducers (0 for add, -inf for max...): other reductions keep the serial forms.
f16/bf16 sums and products accumulate in f32, rounded once at the end (as on the CPU).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llvmlite import ir

from ...ir import DType, FusionKind, Instruction, Op
from ...ir.fusion_kinds import fusion_kind
from ...ir.index_maps import dims_of, row_dims, row_values
from ..llvm.context import Gen
from ..llvm.elemental import bind_instructions, make_generator
from ..llvm.extents import inside, limits, reduced_limits, span
from ..llvm.lltypes import F32, F64, I1, I8, I32, I64
from ..llvm.loops import if_then, unrolled_range
from ..llvm.reduce import Accumulators
from .context import GpuContext
from .device import WARP
from .elementwise import Position, compute_and_store, split_position, store_outputs
from .kernel import (
    Kernel,
    KernelLaunch,
    begin_kernel,
    exit_unless,
    finish_kernel,
    operand_generators,
)

BLOCK = 256
WARPS_PER_BLOCK = BLOCK // WARP
# reductions at least this long take a whole block per output, shorter ones a warp
BLOCK_REDUCTION = 4096
# row fusions whose rows have at most this many elements (and reduce as few) take a
# warp per row; longer rows a block
WARP_ROW = 128
# reductions shorter than this stay serial (one thread per output)
MIN_PARALLEL = 32
# steps of a reduction or row loop emitted per turn (at most)
UNROLL = 4
# rows with at most this many elements per thread are held in registers (_held_indexes)
HELD_STEPS = 32


# -- groups of threads ----------------------------------------------------------------


class Group:
    """Threads that reduce together: `size` threads (a warp, or the kernel's block)
    numbered by `lane` (i32)."""

    def __init__(self, ctx: GpuContext, kernel: Kernel, size: int, lane: ir.Value):
        assert size == WARP or (size % WARP == 0 and size == kernel.block), size
        self.ctx, self.kernel, self.size, self.lane = ctx, kernel, size, lane

    def reduce(
        self,
        reduce: Instruction,
        operands: Sequence[Gen],
        out_index: list,
        indexes: list[list] | None = None,
        clip: list | None = None,
    ):
        """`reduce` at output `out_index` (i64 values of its kept dims), computed by the
        group; every thread of it gets the value (a tuple for variadic reductions).
        `indexes`: the caller's operand indexes of this thread's positions of the
        reduction (lane, lane + size, ...), all inside it, read in straight-line code.
        `clip`: per operand dim, the i64 count of positions read (None: all), as
        llvm/extents.reduced_limits gives it."""
        ctx, b = self.ctx, self.ctx.builder
        assert b is not None
        count = len(operands) // 2
        inputs, inits = operands[:count], operands[count:]
        in_dims = reduce.operands[0].array_shape.dims
        reduced = sorted(reduce.dimensions)
        kept = [d for d in range(len(in_dims)) if d not in reduced]
        extents = [in_dims[d] for d in reduced]
        length = math.prod(extents)
        partial = Accumulators(ctx, reduce, inits)
        if indexes is not None:
            for full in indexes:
                partial.update([g(full) for g in inputs])
            self._combine(partial)
            return partial.result()
        itype = ir.IntType(32) if length < 2**31 else I64
        lane = self.lane if itype == I32 else b.zext(self.lane, I64)
        counts = [clip[d] for d in reduced] if clip is not None else [None] * len(reduced)
        # up to the last position read (past the reduced extents the padder's masks left
        # the identity: a span's positions past one are read, harmlessly)
        read = span(b, counts, extents)
        if isinstance(read, int):
            steps, last = -(-length // self.size), length if length % self.size else None
        else:
            steps = b.udiv(
                b.add(read, ir.Constant(I64, self.size - 1)), ir.Constant(I64, self.size)
            )
            last = read if itype == I64 else b.trunc(read, itype)
        # steps unrolled: each thread's loads of several steps are in flight together
        with unrolled_range(b, steps, "r", UNROLL) as step_values:
            for step in step_values:
                step = b.trunc(step, itype) if itype == I32 else step
                position = b.add(b.mul(step, ir.Constant(itype, self.size)), lane)
                where = None
                if last is not None:
                    at_most = last if isinstance(last, ir.Value) else ir.Constant(itype, last)
                    where = b.icmp_unsigned("<", position, at_most)
                with if_then(b, where):
                    full = [None] * len(in_dims)
                    for d, value in zip(kept, out_index):
                        full[d] = value
                    for d, value in zip(reduced, split_position(ctx, position, extents)):
                        full[d] = value
                    partial.update([g(full) for g in inputs])
        self._combine(partial)
        return partial.result()

    def _combine(self, partial: Accumulators) -> None:
        ctx, b = self.ctx, self.ctx.builder
        assert b is not None
        mask = WARP // 2
        while mask >= 1:
            partial.update([shuffle_value(ctx, v, mask) for v in partial.values()])
            mask //= 2
        if self.size == WARP:
            return
        warps = self.size // WARP
        arrays = [self.kernel.shared(ctx, 8 * warps, 8) for _ in partial.slots]
        warp = b.udiv(self.lane, ir.Constant(I32, WARP))
        # every lane of a warp holds its sum and stores it (the same value to the same
        # place): no branch, so that the code of a held row stays one basic block
        for array, value in zip(arrays, partial.values()):
            b.store(_to_memory(b, value), _slot(b, array, value.type, warp))
        ctx.device.barrier(ctx)
        # every thread folds the warps' partials in the same order: identical results
        loaded = [
            [
                _from_memory(b, b.load(_slot(b, a, t, ir.Constant(I32, w)), typ=_memory_type(t)), t)
                for a, t in zip(arrays, partial.types)
            ]
            for w in range(warps)
        ]
        for slot, value in zip(partial.slots, loaded[0]):
            b.store(value, slot)
        for values in loaded[1:]:
            partial.update(values)
        ctx.device.barrier(ctx)  # the arrays may be reused by the next reduction


def shuffle_value(ctx: GpuContext, value: ir.Value, mask: int) -> ir.Value:
    """`value` of lane ^ mask, for any register type (moved as 32-bit pieces)."""
    b = ctx.builder
    assert b is not None
    ty = value.type
    if ty == F32:
        return b.bitcast(ctx.device.shuffle_xor(ctx, b.bitcast(value, I32), mask), F32)
    if ty == F64:
        return b.bitcast(shuffle_value(ctx, b.bitcast(value, I64), mask), F64)
    if ty.width == 32:
        return ctx.device.shuffle_xor(ctx, value, mask)
    if ty.width < 32:
        return b.trunc(ctx.device.shuffle_xor(ctx, b.zext(value, I32), mask), ty)
    low = ctx.device.shuffle_xor(ctx, b.trunc(value, I32), mask)
    high = ctx.device.shuffle_xor(ctx, b.trunc(b.lshr(value, ir.Constant(I64, 32)), I32), mask)
    wide = b.or_(b.zext(low, I64), b.shl(b.zext(high, I64), ir.Constant(I64, 32)))
    return wide if ty == I64 else b.trunc(wide, ty)


def _memory_type(ty: ir.Type) -> ir.Type:
    return I8 if ty == I1 else ty


def _to_memory(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    return b.zext(value, I8) if value.type == I1 else value


def _from_memory(b: ir.IRBuilder, value: ir.Value, ty: ir.Type) -> ir.Value:
    return b.trunc(value, I1) if ty == I1 else value


def _slot(b: ir.IRBuilder, array: ir.Value, ty: ir.Type, warp: ir.Value) -> ir.Value:
    """Warp `warp`'s 8-byte slot of a partials array."""
    return b.gep(array, [b.mul(b.zext(warp, I64), ir.Constant(I64, 8))], source_etype=I8)


# -- which reductions ------------------------------------------------------------------

_IDENTITIES = {
    Op.ADD: "zero",
    Op.OR: "zero",
    Op.MULTIPLY: "one",
    Op.AND: "ones",
    Op.MAXIMUM: "lowest",
    Op.MINIMUM: "highest",
}


def has_identity_inits(reduce: Instruction, fusion: Instruction | None = None) -> bool:
    """Whether every init of `reduce` is an identity of its reducer, so that partials
    may start from it.  Variadic reductions (arg-max and kin) with constant inits are
    taken to be (their lowerings use the identities)."""
    count = len(reduce.operands) // 2
    literals = [_literal(init, fusion) for init in reduce.operands[count:]]
    if any(value is None for value in literals):
        return False
    if count > 1:
        return True
    root = reduce.called[0].root
    kind = _IDENTITIES.get(root.op)
    if kind is None or any(o.op is not Op.PARAMETER for o in root.operands):
        return False
    dtype = reduce.operands[1].array_shape.dtype
    value = literals[0].reshape(-1)[0].item()
    low, high = dtype.limits
    expected = {
        "zero": 0,
        "one": 1,
        "lowest": low,
        "highest": high,
        "ones": True if dtype is DType.PRED else -1 if dtype.is_signed_int else high,
    }
    return value == expected[kind]


def _literal(init: Instruction, fusion: Instruction | None):
    """The constant value of an init (through a fusion's parameters), else None."""
    if init.op is Op.PARAMETER and fusion is not None:
        init = fusion.operands[init.index]
    return init.literal if init.op is Op.CONSTANT and init.literal is not None else None


def _innermost_reduced(reduce: Instruction) -> bool:
    dims = reduce.operands[0].array_shape.dims
    live = [d for d in range(len(dims)) if dims[d] != 1]
    return bool(live) and live[-1] in reduce.dimensions


# -- kernels ---------------------------------------------------------------------------


def emit_reduce(
    ctx: GpuContext, instr: Instruction, name: str, outputs
) -> list[KernelLaunch] | None:
    """A warp or block per output of a reduce, or of an INPUT fusion (one at its root)."""
    fusion = instr if instr.op is Op.FUSION else None
    if fusion is not None and fusion_kind(fusion.called[0]) is not FusionKind.INPUT:
        return None
    reduce = fusion.called[0].root if fusion is not None else instr
    assert reduce is not None  # a built computation has its root
    if reduce.op is not Op.REDUCE or not _innermost_reduced(reduce):
        return None
    if not has_identity_inits(reduce, fusion):
        return None
    assert reduce.dimensions is not None  # the verifier requires a reduce's
    length = math.prod(reduce.operands[0].array_shape.dims[d] for d in reduce.dimensions)
    if length < MIN_PARALLEL:
        return None
    out_dims = outputs[0][0].dims
    count = math.prod(out_dims)
    per_block = 1 if length >= BLOCK_REDUCTION else WARPS_PER_BLOCK
    grid = -(-count // per_block)
    kernel = begin_kernel(ctx, instr, name, BLOCK, grid, "reduction")
    b = ctx.builder
    assert b is not None
    params = operand_generators(ctx, instr)
    if fusion is not None:
        gens = bind_instructions(ctx, fusion.called[0], params)
        operands = [gens[id(o)] for o in reduce.operands]
    else:
        operands = params
    thread = ctx.device.thread_index(ctx)
    block = ctx.device.block_index(ctx)
    if per_block == 1:
        group = Group(ctx, kernel, BLOCK, thread)
        output = block
        active = None
    else:
        group = Group(ctx, kernel, WARP, b.urem(thread, ir.Constant(I32, WARP)))
        warp = b.udiv(thread, ir.Constant(I32, WARP))
        output = b.add(b.mul(block, ir.Constant(I32, per_block)), warp)
        active = None
        if count % per_block:
            active = b.icmp_unsigned("<", output, ir.Constant(I32, count))
    with if_then(b, active):  # uniform per warp
        out_index = split_position(ctx, output, out_dims)
        counts = limits(ctx, instr)
        needed = inside(b, out_index, counts) if counts is not None else None
        with if_then(b, needed):  # uniform per group: outputs the readers use
            clip = reduced_limits(ctx, reduce)
            value = group.reduce(reduce, operands, out_index, clip=clip)
            with if_then(b, b.icmp_unsigned("==", group.lane, ir.Constant(I32, 0))):
                store_outputs(ctx, value, outputs, out_index)
    kernel.cooperative = True
    return [finish_kernel(ctx, instr, kernel)]


def emit_rows(ctx: GpuContext, instr: Instruction, name: str, outputs) -> list[KernelLaunch] | None:
    """A row fusion with a warp or block per row (see the module docstring)."""
    rank, hoisted = row_values(instr)
    if not hoisted:
        return None
    reduces = [v for v in hoisted if v.op is Op.REDUCE]
    if not all(has_identity_inits(v, instr) for v in reduces):
        return None
    ((shape, _),) = outputs
    rows = math.prod(shape.dims[:rank])
    columns = math.prod(shape.dims[rank:])
    longest = max(
        [columns]
        + [math.prod(v.operands[0].array_shape.dims[d] for d in v.dimensions) for v in reduces]
    )
    if longest < MIN_PARALLEL // 4:
        return None
    size = WARP if longest <= WARP_ROW else BLOCK
    kernel = begin_kernel(ctx, instr, name, size, rows, "row")
    b = ctx.builder
    assert b is not None
    fused = instr.called[0]
    params = operand_generators(ctx, instr)
    live_rows = row_dims(shape.dims, rank)
    row_index = split_position(ctx, ctx.device.block_index(ctx), shape.dims[:rank])
    computed: dict[int, object] = {}

    def row_value(value: Instruction) -> Gen:
        return lambda index: computed[id(value)]

    def at_row(value: Instruction) -> list[ir.Value]:
        """`value`'s index in this row (its extent-1 dims at 0)."""
        live = iter(live_rows)
        return [ir.Constant(I64, 0) if e == 1 else row_index[next(live)] for e in dims_of(value)]

    gens = bind_instructions(ctx, fused, params, {id(v): row_value(v) for v in hoisted})
    group = Group(ctx, kernel, size, ctx.device.thread_index(ctx))
    counts = limits(ctx, instr) or [None] * len(shape.dims)
    exit_unless(ctx, inside(b, row_index, counts[:rank]))  # a row the readers do not use
    clips = {id(v): reduced_limits(ctx, v) for v in reduces}
    columns_needed = span(b, counts[rank:], shape.dims[rank:])
    whole = isinstance(columns_needed, int) and not any(clips.values())
    held = _held_indexes(ctx, group, row_index, shape.dims, rank) if whole else None
    for value in hoisted:  # in computation order: later values read earlier ones
        if value.op is Op.PARAMETER:
            computed[id(value)] = params[value.index](at_row(value))
            continue
        operands = [gens[id(o)] for o in value.operands]
        if value.op is Op.REDUCE:
            indexes = held if held and _reduces_columns(value, shape.dims, rank) else None
            computed[id(value)] = group.reduce(
                value, operands, at_row(value), indexes, clips[id(value)]
            )
        else:
            computed[id(value)] = make_generator(ctx, value, operands)(at_row(value))
    root = gens[id(fused.root)]
    if held:
        compute_and_store(ctx, [Position(index, None) for index in held], root, outputs)
        kernel.cooperative = True
        return [finish_kernel(ctx, instr, kernel)]
    itype = ir.IntType(32)
    if isinstance(columns_needed, int):
        steps, last = -(-columns // size), ir.Constant(itype, columns) if columns % size else None
    else:  # the columns up to the last one the readers use
        steps = b.udiv(b.add(columns_needed, ir.Constant(I64, size - 1)), ir.Constant(I64, size))
        last = b.trunc(columns_needed, itype)
    with unrolled_range(b, steps, "col", UNROLL) as step_values:
        positions = []
        for step in step_values:
            column = b.add(b.mul(b.trunc(step, itype), ir.Constant(itype, size)), group.lane)
            where = None
            if last is not None:
                where = b.icmp_unsigned("<", column, last)
                column = b.select(where, column, ir.Constant(itype, columns - 1))
            index = [*row_index, *split_position(ctx, column, shape.dims[rank:])]
            positions.append(Position(index, where))
        compute_and_store(ctx, positions, root, outputs)
    kernel.cooperative = True
    return [finish_kernel(ctx, instr, kernel)]


def _held_indexes(ctx: GpuContext, group: Group, row_index: list, dims, rank: int) -> list | None:
    """The indexes of this thread's elements of the row (lane, lane + size, ...) where
    they are few and all inside it, else None.

    The row's reductions over its columns and its stores then use these same index
    values in one basic block, so the element generators' memo hands the stores the
    values that the reductions computed (softmax's exp(x - max) is computed once and
    held in registers, not recomputed from x)."""
    columns = math.prod(dims[rank:])
    if columns % group.size or columns // group.size > HELD_STEPS:
        return None
    b = ctx.builder
    assert b is not None
    return [
        [
            *row_index,
            *split_position(ctx, b.add(group.lane, ir.Constant(I32, k * group.size)), dims[rank:]),
        ]
        for k in range(columns // group.size)
    ]


def _reduces_columns(reduce: Instruction, dims, rank: int) -> bool:
    """Whether `reduce` folds the row's columns of an operand shaped as the row fusion's
    output (so that the held indexes are its operand's)."""
    return reduce.operands[0].array_shape.dims == tuple(dims) and sorted(reduce.dimensions) == list(
        range(rank, len(dims))
    )
