"""The gather rule (XLA semantics, including operand/indices batching dims).

Each output index splits into batch dims (which pick a start-index vector
from `indices`) and offset dims (the position inside the gathered slice).
Start indices are clamped so the whole slice lies inside the operand, as XLA
does, so no index ever reads out of bounds.
"""

from __future__ import annotations

from ...ir import DType, Instruction, Op
from . import scalar
from .context import EmitContext, Gen, Rule
from .lltypes import i64


def gather_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    source, indices = operands
    dims = instr.gather
    operand_dims = instr.operands[0].array_shape.dims
    indices_shape = instr.operands[1].shape
    offset_dims = sorted(dims.offset_dims)
    batch_dims = [d for d in range(instr.array_shape.rank) if d not in offset_dims]
    removed = set(dims.collapsed_slice_dims) | set(dims.operand_batching_dims)
    sliced_dims = [d for d in range(len(operand_dims)) if d not in removed]
    vector_dim = dims.index_vector_dim
    explicit_vector = vector_dim < indices_shape.rank
    # indices known to start slices inside the operand are not clamped (value_ranges.py)
    known = ctx.value_ranges.get(id(instr.operands[1]), (-1, -1))

    def gen(index):
        b = ctx.builder
        batch = [index[d] for d in batch_dims]  # an index of `indices` without vector_dim
        start = [i64(0)] * len(operand_dims)
        for k, operand_dim in enumerate(dims.start_index_map):
            where = batch[:vector_dim] + [i64(k)] + batch[vector_dim:] if explicit_vector else batch
            value = scalar.convert(ctx, indices_shape.dtype, DType.S64, indices(where))
            highest = operand_dims[operand_dim] - dims.slice_sizes[operand_dim]
            if not (0 <= known[0] and known[1] <= highest):
                value = ctx.intrinsic("llvm.smax", [value, i64(0)])
                value = ctx.intrinsic("llvm.smin", [value, i64(highest)])
            start[operand_dim] = value
        for operand_dim, indices_dim in zip(
            dims.operand_batching_dims, dims.start_indices_batching_dims
        ):
            start[operand_dim] = batch[indices_dim if indices_dim < vector_dim else indices_dim - 1]
        operand_index = list(start)
        for operand_dim, out_dim in zip(sliced_dims, offset_dims):
            operand_index[operand_dim] = b.add(start[operand_dim], index[out_dim])
        return source(operand_index)

    return gen


GATHER_RULES: dict[Op, Rule] = {Op.GATHER: gather_rule}
