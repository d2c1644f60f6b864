"""Dot and convolution as element rules: any dtype, any dims, one output element at a time.

A dot's element loops over the contracting dims; a convolution's over its
feature group's input features and the window taps, skipping taps that land in
padding or between base-dilated elements.  Batch groups (batch_group_count > 1)
pair output feature group g with the g-th block of input batch rows.  Backends
use these where no kernel form of their own applies (other dtypes, a dot fused
into a consumer that is not its elementwise epilogue).
"""

from __future__ import annotations

from contextlib import nullcontext

from ...ir import Instruction, Op
from .accumulate import MacAccumulator
from .context import EmitContext, Gen, Rule
from .lltypes import i64
from .loops import if_then, loop_nest
from .window import all_of, tap_position


def dot_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    lhs, rhs = operands
    dims = instr.dot
    lhs_shape, rhs_shape = instr.operands[0].shape, instr.operands[1].shape
    lhs_free = [d for d in range(lhs_shape.rank) if d not in dims.lhs_batch + dims.lhs_contracting]
    rhs_free = [d for d in range(rhs_shape.rank) if d not in dims.rhs_batch + dims.rhs_contracting]
    contracting_extents = [lhs_shape.dims[d] for d in dims.lhs_contracting]
    batches = len(dims.lhs_batch)

    def gen(index):
        batch = index[:batches]
        lhs_part = index[batches : batches + len(lhs_free)]
        rhs_part = index[batches + len(lhs_free) :]
        acc = MacAccumulator(ctx, lhs_shape.dtype, instr.array_shape.dtype)
        with loop_nest(ctx.builder, contracting_extents, "k") as inner:
            lhs_index = [None] * lhs_shape.rank
            rhs_index = [None] * rhs_shape.rank
            for group, values in (
                ((dims.lhs_batch, dims.rhs_batch), batch),
                ((dims.lhs_contracting, dims.rhs_contracting), inner),
            ):
                for lhs_dim, rhs_dim, value in zip(*group, values):
                    lhs_index[lhs_dim] = value
                    rhs_index[rhs_dim] = value
            for d, value in zip(lhs_free, lhs_part):
                lhs_index[d] = value
            for d, value in zip(rhs_free, rhs_part):
                rhs_index[d] = value
            acc.add_product(lhs(lhs_index), rhs(rhs_index))
        return acc.result()

    return gen


DOT_RULES: dict[Op, Rule] = {Op.DOT: dot_rule}


def convolution_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    lhs, rhs = operands
    dims, window = instr.conv, instr.window
    lhs_shape, rhs_shape = instr.operands[0].shape, instr.operands[1].shape
    group_inputs = rhs_shape.dims[dims.kernel_input_feature]
    group_outputs = rhs_shape.dims[dims.kernel_output_feature] // instr.feature_group_count
    in_spatial = [lhs_shape.dims[d] for d in dims.input_spatial]
    # batch groups: output feature group g reads batch rows g*B/G.. (B/G = output batch)
    batch_groups = instr.batch_group_count
    batch_outputs = rhs_shape.dims[dims.kernel_output_feature] // batch_groups
    group_batch = lhs_shape.dims[dims.input_batch] // batch_groups

    def gen(index):
        b = ctx.builder
        out_feature = index[dims.output_feature]
        first_input = None
        if instr.feature_group_count > 1:
            group = b.udiv(out_feature, i64(group_outputs))
            first_input = b.mul(group, i64(group_inputs))
        batch = index[dims.output_batch]
        if batch_groups > 1:
            group = b.udiv(out_feature, i64(batch_outputs))
            batch = b.add(b.mul(group, i64(group_batch)), batch)
        acc = MacAccumulator(ctx, lhs_shape.dtype, instr.array_shape.dtype)
        with loop_nest(b, [group_inputs, *window.size], "c") as (feature, *taps):
            lhs_index = [None] * lhs_shape.rank
            rhs_index = [None] * rhs_shape.rank
            lhs_index[dims.input_batch] = batch
            lhs_index[dims.input_feature] = (
                feature if first_input is None else b.add(first_input, feature)
            )
            rhs_index[dims.kernel_input_feature] = feature
            rhs_index[dims.kernel_output_feature] = out_feature
            conditions = []
            for i, tap in enumerate(taps):
                out = index[dims.output_spatial[i]]
                where, inside = tap_position(b, out, tap, in_spatial[i], window, i)
                lhs_index[dims.input_spatial[i]] = where
                rhs_index[dims.kernel_spatial[i]] = tap
                conditions += inside
            valid = all_of(b, conditions)
            with if_then(b, valid) if valid is not None else nullcontext():
                acc.add_product(lhs(lhs_index), rhs(rhs_index))
        return acc.result()

    return gen


CONV_RULES: dict[Op, Rule] = {Op.CONVOLUTION: convolution_rule}
