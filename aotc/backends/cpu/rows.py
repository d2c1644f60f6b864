"""Row fusions: kernels that compute reductions once per row and reuse them.

The fusion pass puts a reduction into its consumer's kernel when the reduced
value is read at the consumer's leading output dims unchanged (softmax's max
and sum, layer normalization's mean and variance: see passes/fusion.py).  Such
a kernel loops over those leading dims outside; per row it computes every
non-root reduction at the row's index, in computation order (later ones may
read earlier ones), then loops over the remaining dims inside, where the
reductions' generators return the row's values instead of looping again.
A value both a row's reduction and the output read at the output's index (softmax's
exponentials) is stored in the output while the row is reduced and loaded back by
the output loop (index_maps.cached_row_value), so it is computed once.
"""

from __future__ import annotations

from llvmlite import ir

from ...errors import AotcError
from ...ir import Instruction, Op
from ...ir.index_maps import cached_row_value, dims_of, row_dims, row_values
from ..llvm.context import EmitContext, Gen
from ..llvm.elemental import (
    bind_instructions,
    element_pointer,
    make_generator,
    memory_generator,
)
from ..llvm.lltypes import i64, store_element
from ..llvm.loops import loop_nest
from .parallel import parallel_loop_nest


def emit_row_fusion(ctx: EmitContext, instr: Instruction, params: list[Gen]) -> bool:
    """Store `instr`'s output, computing its row values once per row, if it is a row
    fusion; False leaves it to the rules."""
    rank, hoisted = row_values(instr)
    if not hoisted:
        return False
    fused = instr.called[0]
    row_index: list[ir.Value] = []
    computed: dict[int, object] = {}

    shape, where = instr.array_shape, ctx.plan.slice_of(instr)
    live_rows = row_dims(shape.dims, rank)  # the row index dims a row value reads

    def row_value(value: Instruction) -> Gen:
        live = [d for d, extent in enumerate(dims_of(value)) if extent != 1]

        def gen(index):
            if any(index[d] is not row_index[r] for d, r in zip(live, live_rows, strict=True)):
                raise AotcError(f"internal: {value.name} is not read at its row in {instr.name}")
            return computed[id(value)]

        return gen

    def at_row(value: Instruction) -> list[ir.Value]:
        """`value`'s index in the current row (its extent-1 dims at 0)."""
        rows = iter(live_rows)
        return [i64(0) if extent == 1 else row_index[next(rows)] for extent in dims_of(value)]

    rows = {id(v): row_value(v) for v in hoisted}
    gens = bind_instructions(ctx, fused, params, rows)
    row_gens = gens
    cached = cached_row_value(instr, rank, hoisted)
    if cached is not None:
        # the row's reduction stores it in the output, where the output loop reads it
        stored = memory_generator(ctx, where, shape)
        compute = gens[id(cached)]

        def keep(index):
            value = compute(index)
            pointer = element_pointer(ctx, ctx.slice_pointer(where), shape, index)
            store_element(ctx.builder, shape.dtype, value, pointer)
            return value

        row_gens = bind_instructions(ctx, fused, params, {**rows, id(cached): keep})
        gens = bind_instructions(ctx, fused, params, {**rows, id(cached): stored})
    computes = {
        id(v): params[v.index]
        if v.op is Op.PARAMETER
        else make_generator(ctx, v, [row_gens[id(o)] for o in v.operands])
        for v in hoisted
    }
    with parallel_loop_nest(ctx, shape.dims[:rank], "row", work=shape.size) as outer:
        row_index[:] = outer
        for value in hoisted:  # in computation order: later values read earlier ones
            computed[id(value)] = computes[id(value)](at_row(value))
        with loop_nest(ctx.builder, shape.dims[rank:], "col") as inner:
            index = [*outer, *inner]
            pointer = element_pointer(ctx, ctx.slice_pointer(where), shape, index)
            store_element(ctx.builder, shape.dtype, gens[id(fused.root)](index), pointer)
    return True
