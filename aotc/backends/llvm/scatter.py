"""The scatter kernel: the operand copied to the output, then each update window combined in.

Update windows go in row-major order of the updates' scatter dims, one after
the other, so repeated targets combine in the evaluator's order.  A window not
wholly inside the operand is skipped, as XLA does; its start indices are never
clamped.  The combiner is emitted inline on (current, update) scalars.
"""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...ir import DType, Instruction, Op
from . import scalar
from .context import EmitContext, Gen
from .elemental import call_computation
from .kernels import Kernel, Output, copy_into, output_pointer
from .lltypes import i64, load_element, store_element
from .loops import if_then, loop_nest
from .window import all_of


def scatter_kernel(
    ctx: EmitContext, instr: Instruction, operands: list[Gen], outputs: list[Output]
) -> None:
    b = ctx.builder
    source, indices, updates = operands
    (output,) = outputs
    copy_into(ctx, [source], outputs)
    s = instr.scatter
    operand_dims = instr.operands[0].array_shape.dims
    indices_shape, updates_shape = instr.operands[1].shape, instr.operands[2].shape
    window = list(s.update_window_dims)
    scatter_dims = [d for d in range(updates_shape.rank) if d not in window]
    removed = set(s.inserted_window_dims) | set(s.input_batching_dims)
    window_dims = [d for d in range(len(operand_dims)) if d not in removed]
    sizes = [1] * len(operand_dims)
    for k, d in enumerate(window_dims):
        sizes[d] = updates_shape.dims[window[k]]
    vector_dim = s.index_vector_dim
    explicit_vector = vector_dim < indices_shape.rank
    dtype = output[0].dtype
    window_extents = [updates_shape.dims[d] for d in window]

    with loop_nest(b, [updates_shape.dims[d] for d in scatter_dims], "u") as position:
        start: list[ir.Value] = [i64(0)] * len(operand_dims)
        inside = []
        for k, d in enumerate(s.scatter_dims_to_operand_dims):
            where = [*position[:vector_dim], i64(k), *position[vector_dim:]]
            raw = indices(where if explicit_vector else position)
            # u64 indices past 2^63 turn negative here: outside either way
            start[d] = scalar.convert(ctx, indices_shape.dtype, DType.S64, raw)
            inside.append(b.icmp_signed(">=", start[d], i64(0)))
            inside.append(b.icmp_signed("<=", start[d], i64(operand_dims[d] - sizes[d])))
        for d, index_dim in zip(s.input_batching_dims, s.scatter_indices_batching_dims):
            start[d] = position[index_dim if index_dim < vector_dim else index_dim - 1]
        with _maybe(b, all_of(b, inside)), loop_nest(b, window_extents, "w") as offset:
            update_index: list[ir.Value] = [None] * updates_shape.rank
            for d, value in zip(scatter_dims, position):
                update_index[d] = value
            for d, value in zip(window, offset):
                update_index[d] = value
            target = list(start)
            for d, value in zip(window_dims, offset):
                target[d] = b.add(start[d], value)
            pointer = output_pointer(ctx, output, target)
            args = [load_element(b, dtype, pointer), updates(update_index)]
            (combined,) = call_computation(ctx, instr.called[0], args)
            store_element(b, dtype, combined, pointer)


def _maybe(b: ir.IRBuilder, condition: ir.Value | None):
    """`if_then(condition)`, or no branch at all when nothing needs checking."""
    return contextlib.nullcontext() if condition is None else if_then(b, condition)


SCATTER_KERNELS: dict[Op, Kernel] = {Op.SCATTER: scatter_kernel}
