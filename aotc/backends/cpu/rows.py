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
A float division by a row value (softmax's sum, a normalization's norm) multiplies by
the value's reciprocal, computed once per row, as onnxruntime and PyTorch do: a vector
division costs some ten multiplies, and the product is within 1.5 ulp of the quotient.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ...errors import AotcError
from ...ir import Instruction, Op
from ...ir.index_maps import cached_row_value, dims_of, row_dims, row_values
from ..llvm.context import EmitContext, Gen
from ..llvm.elemental import bind_instructions, element_pointer, make_generator
from ..llvm.extents import limits
from ..llvm.lltypes import constant, i64, load_element, store_element
from ..llvm.loops import VECTOR_TURNS, loop_nest
from ..llvm.scalar import RECIPROCAL_DTYPES
from .parallel import parallel_loop_nest

# (output index) -> where the kernel stores that element of its output
Placement = Callable[[list[ir.Value]], ir.Value]
# emits one row of the output, given the row's index (the leading output dims) and, where
# its reader reads less, the count of the last dim's positions to store (an i64)
RowEmitter = Callable[..., None]


def emit_row_fusion(ctx: EmitContext, instr: Instruction, params: list[Gen]) -> bool:
    """Store `instr`'s output, computing its row values once per row, if it is a row
    fusion; False leaves it to the rules."""
    rank, hoisted = row_values(instr)
    if not hoisted:
        return False
    shape, where = instr.array_shape, ctx.plan.slice_of(instr)

    def placement(index):
        return element_pointer(ctx, ctx.slice_pointer(where), shape, index)

    emit_row = row_emitter(ctx, instr, params, placement)
    counts = limits(ctx, instr)
    rows = None if counts is None else counts[:rank]
    with parallel_loop_nest(ctx, shape.dims[:rank], "row", shape.size, rows) as outer:
        emit_row(outer)
    return True


def row_emitter(
    ctx: EmitContext, instr: Instruction, params: list[Gen], placement: Placement
) -> RowEmitter:
    """The code of one row of row fusion `instr`, its output stored at `placement` (the
    attention kernel's rows go to a block of scores in the workspace)."""
    rank, hoisted = row_values(instr)
    fused = instr.called[0]
    row_index: list[ir.Value] = []
    computed: dict[int, object] = {}

    shape = instr.array_shape
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
    divisors = _row_divisors(fused, hoisted)
    reciprocals: dict[int, ir.Value] = {}  # per divide, 1 / its divisor's row value

    def bind(replaced: dict[int, Gen]) -> dict[int, Gen]:
        table: dict[int, Gen] = {}
        by_reciprocal = {
            d: _times_reciprocal(ctx, table, divide, reciprocals)
            for d, (divide, _) in divisors.items()
        }
        table.update(bind_instructions(ctx, fused, params, {**replaced, **by_reciprocal}))
        return table

    gens = bind(rows)
    row_gens = gens
    cached = cached_row_value(instr, rank, hoisted)
    if cached is not None:
        # the row's reduction stores it in the output, where the output loop reads it
        compute = gens[id(cached)]

        def stored(index):
            return load_element(ctx.builder, shape.dtype, placement(index))

        def keep(index):
            value = compute(index)
            store_element(ctx.builder, shape.dtype, value, placement(index))
            return value

        row_gens = bind({**rows, id(cached): keep})
        gens = bind({**rows, id(cached): stored})
    computes = {
        id(v): params[v.index]
        if v.op is Op.PARAMETER
        else make_generator(ctx, v, [row_gens[id(o)] for o in v.operands])
        for v in hoisted
    }

    def emit_row(outer: list[ir.Value], last: ir.Value | None = None) -> None:
        b = ctx.builder
        assert b is not None
        row_index[:] = outer
        for value in hoisted:  # in computation order: later values read earlier ones
            computed[id(value)] = computes[id(value)](at_row(value))
            for divide_id, (divide, divisor) in divisors.items():  # before later values use it
                if divisor is value:
                    one = constant(divide.array_shape.dtype, 1.0)
                    reciprocals[divide_id] = b.fdiv(one, computed[id(value)])
        columns = shape.dims[rank:]
        vectorize = bool(columns) and columns[-1] in VECTOR_TURNS
        counts = limits(ctx, instr)  # the columns the readers need
        turns = (
            list(columns)
            if counts is None
            else [d if c is None else c for c, d in zip(counts[rank:], columns)]
        )
        if last is not None and turns:
            turns[-1] = last
        with loop_nest(b, turns, "col", vectorize) as inner:
            index = [*outer, *inner]
            store_element(b, shape.dtype, gens[id(fused.root)](index), placement(index))

    return emit_row


# what passes a row value on to the divide unchanged (one value per row)
_ROW_VIEWS = frozenset({Op.BROADCAST, Op.RESHAPE})


def _row_divisors(fused, hoisted: list[Instruction]) -> dict[int, tuple[Instruction, Instruction]]:
    """id(divide) -> (divide, row value) for each float division by a row value, other
    than row values themselves (computed once per row already)."""
    row_ids = {id(v) for v in hoisted}
    found = {}
    for instr in fused.instructions:
        if instr.op is not Op.DIVIDE or instr.array_shape.dtype not in RECIPROCAL_DTYPES:
            continue
        if id(instr) in row_ids:
            continue
        divisor = instr.operands[1]
        while divisor.op in _ROW_VIEWS and id(divisor) not in row_ids:
            divisor = divisor.operands[0]
        if id(divisor) in row_ids:
            found[id(instr)] = (instr, divisor)
    return found


def _times_reciprocal(
    ctx: EmitContext, table: dict[int, Gen], divide: Instruction, reciprocals: dict[int, ir.Value]
) -> Gen:
    """The divide's generator: its dividend times the row's reciprocal (`table` is the
    binding it belongs to, filled once bound)."""

    def gen(index):
        dividend = table[id(divide.operands[0])](index)
        return ctx.builder.fmul(dividend, reciprocals[id(divide)])

    return gen
