"""Data-movement rules: each maps an output index to an operand index.

broadcast, reshape/bitcast, transpose, slice, reverse are pure index
arithmetic (SplitGens: chains of them evaluate without recursing); pad and
concatenate branch, so that an operand is only read at indices inside it.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Instruction, Op
from ...ir.shapes import reshape_groups
from .context import EmitContext, Gen, Rule, SplitGen, first_value
from .elemental import decompose_index, linearize
from .lltypes import i64
from .loops import branch_value


def broadcast_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    (source,) = operands
    dims = instr.dimensions
    return SplitGen(lambda index: [(source, [index[d] for d in dims])], first_value)


def reshape_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    """Each run of dims of equal size (shapes.reshape_groups) on its own: dims the two
    shapes share keep their index (row fusion relies on it), a split or merge divides
    by its run's extents only."""
    (source,) = operands
    out_dims = instr.array_shape.dims
    in_dims = instr.operands[0].array_shape.dims
    groups = [
        ([in_dims[i] for i in ins], [out_dims[o] for o in outs], outs)
        for ins, outs in reshape_groups(in_dims, out_dims)
    ]

    def reads(index):
        operand_index: list[ir.Value] = []
        for in_extents, out_extents, outs in groups:
            live = [index[o] for o, e in zip(outs, out_extents) if e != 1]
            if [e for e in in_extents if e != 1] == [e for e in out_extents if e != 1]:
                kept = iter(live)
                operand_index += [i64(0) if e == 1 else next(kept) for e in in_extents]
                continue
            if len(live) == 1:
                linear = live[0]
            else:
                linear = linearize(ctx.builder, [index[o] for o in outs], out_extents)
            operand_index += decompose_index(ctx, linear, in_extents)
        return [(source, operand_index)]

    return SplitGen(reads, first_value)


def transpose_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    (source,) = operands
    perm = instr.dimensions

    def reads(index):
        operand_index = [None] * len(perm)
        for out_dim, in_dim in enumerate(perm):
            operand_index[in_dim] = index[out_dim]
        return [(source, operand_index)]

    return SplitGen(reads, first_value)


def slice_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    (source,) = operands
    spec = instr.slice

    def reads(index):
        b = ctx.builder
        operand_index = []
        for value, start, stride in zip(index, spec.starts, spec.strides):
            if stride != 1:
                value = b.mul(value, i64(stride), flags=["nuw", "nsw"])
            if start != 0:
                value = b.add(value, i64(start), flags=["nuw", "nsw"])
            operand_index.append(value)
        return [(source, operand_index)]

    return SplitGen(reads, first_value)


def reverse_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    (source,) = operands
    dims = instr.array_shape.dims
    reversed_dims = set(instr.dimensions)

    def reads(index):
        b = ctx.builder
        operand_index = [
            b.sub(i64(dims[d] - 1), value) if d in reversed_dims else value
            for d, value in enumerate(index)
        ]
        return [(source, operand_index)]

    return SplitGen(reads, first_value)


def pad_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    """Operand element where the index lands on one, else the padding value."""
    source, padding_value = operands
    config = instr.padding
    in_dims = instr.operands[0].array_shape.dims

    def gen(index):
        b = ctx.builder
        inside: ir.Value | None = None
        operand_index = []
        for value, extent, low, high, interior in zip(
            index, in_dims, config.low, config.high, config.interior
        ):
            shifted = b.sub(value, i64(low)) if low != 0 else value
            conditions = []
            if low > 0:
                conditions.append(b.icmp_signed(">=", shifted, i64(0)))
            if interior > 0:
                step = i64(interior + 1)
                conditions.append(b.icmp_signed("==", b.srem(shifted, step), i64(0)))
                shifted = b.sdiv(shifted, step)
            if high > 0 or interior > 0:
                conditions.append(b.icmp_signed("<", shifted, i64(extent)))
            for condition in conditions:
                inside = condition if inside is None else b.and_(inside, condition)
            operand_index.append(shifted)
        if 0 in in_dims:
            return padding_value([])
        if inside is None:  # only cropping: every output element is an operand element
            return source(operand_index)
        return branch_value(b, inside, lambda: source(operand_index), lambda: padding_value([]))

    return gen


def concatenate_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    """A binary search over the operands' ranges along the axis."""
    (axis,) = instr.dimensions
    starts = [0]
    for operand in instr.operands:
        starts.append(starts[-1] + operand.array_shape.dims[axis])

    def gen(index):
        b = ctx.builder

        def emit(lo: int, hi: int) -> ir.Value:
            if lo == hi:
                operand_index = list(index)
                if starts[lo] != 0:
                    operand_index[axis] = b.sub(index[axis], i64(starts[lo]))
                return operands[lo](operand_index)
            mid = (lo + hi) // 2
            below = b.icmp_unsigned("<", index[axis], i64(starts[mid + 1]))
            return branch_value(b, below, lambda: emit(lo, mid), lambda: emit(mid + 1, hi))

        return emit(0, len(operands) - 1)

    return gen


MOVEMENT_RULES: dict[Op, Rule] = {
    Op.BROADCAST: broadcast_rule,
    Op.RESHAPE: reshape_rule,
    Op.BITCAST: reshape_rule,
    Op.TRANSPOSE: transpose_rule,
    Op.SLICE: slice_rule,
    Op.REVERSE: reverse_rule,
    Op.PAD: pad_rule,
    Op.CONCATENATE: concatenate_rule,
}
