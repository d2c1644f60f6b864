"""Reduction rules: reduce and reduce-window.

An output element is an inner loop over the reduced positions, with the
accumulators in stack slots and the reducer computation emitted inline on
scalars.  Variadic forms (several inputs, tuple results) share the loop; the
reducer takes (accumulators..., inputs...) as in XLA.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...ir import Computation, DType, Instruction, Op
from . import scalar
from .context import EmitContext, Gen, Rule
from .elemental import call_computation
from .extents import reduced_limits
from .extremum import CHEAP_COMPARE, cheap_extremum
from .lltypes import HALF_DTYPES, register_type, round_to
from .loops import VECTOR_TURNS, branch_value, loop_nest
from .window import all_of, tap_position

# reducers that f16/bf16 reductions run in f32, rounding once at the end (as the evaluator)
WIDENED_REDUCERS = frozenset({Op.ADD, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM})

# float reductions whose order may change: sums and products of f32 (and f16/bf16 held in
# f32), so that the loop vectorizes; a reduction's order is unspecified in XLA as in ONNX
REASSOCIATED = {Op.ADD: "fadd", Op.MULTIPLY: "fmul"}
REGISTER_F32_DTYPES = HALF_DTYPES | {DType.F32}


class Accumulators:
    """Stack slots holding the running values of a (variadic) reduction (also a GPU
    thread's partial values, which `update` folds like elements)."""

    def __init__(self, ctx: EmitContext, instr: Instruction, inits: Sequence[Gen]):
        self.ctx = ctx
        self.reducer = instr.called[0]
        self.dtypes = [o.array_shape.dtype for o in instr.operands[: len(inits)]]
        self.widened = _widened_op(self.reducer, self.dtypes)
        self.types = [register_type(dt) for dt in self.dtypes]
        self.slots = [ctx.alloca(t) for t in self.types]
        for slot, init in zip(self.slots, inits):
            ctx.builder.store(init([]), slot)

    def values(self) -> list:
        return [self.ctx.builder.load(slot) for slot in self.slots]

    def update(self, values) -> None:
        b = self.ctx.builder
        args = self.values() + list(values)
        if self.widened is not None:
            op, order = self.widened
            x, y = (args[i] for i in order)
            if op in REASSOCIATED:  # lets LLVM vectorize the loop (partial sums per lane)
                results = [getattr(b, REASSOCIATED[op])(x, y, flags=("reassoc", "nsz"))]
            else:
                results = [scalar.binary(self.ctx, op, DType.F32, x, y)]
        else:
            results = call_computation(self.ctx, self.reducer, args)
        for slot, value in zip(self.slots, results):
            b.store(value, slot)

    def result(self):
        b = self.ctx.builder
        values = [round_to(b, dt, b.load(slot)) for dt, slot in zip(self.dtypes, self.slots)]
        return values[0] if len(values) == 1 else tuple(values)


def _widened_op(reducer: Computation, dtypes: list[DType]) -> tuple[Op, list[int]] | None:
    """(op, parameter order) if `reducer` is one simple op on its two parameters of a
    float reduction (half floats run it in f32), else None."""
    simple = _simple_op(reducer, dtypes)
    if simple is None or dtypes[0] not in REGISTER_F32_DTYPES or simple[0] not in WIDENED_REDUCERS:
        return None
    return simple


def _simple_op(reducer: Computation, dtypes: list[DType]) -> tuple[Op, list[int]] | None:
    """(op, parameter order) if `reducer` is one op on its two parameters of a single
    float reduction, else None."""
    root, params = reducer.root, reducer.parameters
    if len(dtypes) != 1 or not dtypes[0].is_float or len(params) != 2:
        return None
    if any(o.op is not Op.PARAMETER for o in root.operands):
        return None
    return root.op, [o.index for o in root.operands]


def reduce_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    count = len(operands) // 2
    inputs, inits = operands[:count], operands[count:]
    in_dims = instr.operands[0].array_shape.dims
    reduced = sorted(instr.dimensions)
    kept = [d for d in range(len(in_dims)) if d not in reduced]

    # a row reduction over the contiguous last dim is the vectorizer's
    contiguous = reduced[-1] == len(in_dims) - 1 and in_dims[-1] in VECTOR_TURNS

    whole = [in_dims[d] for d in reduced]
    # a maximum or minimum along rows takes the cheap form (extremum.py)
    simple = _simple_op(instr.called[0], [o.array_shape.dtype for o in instr.operands[:count]])
    cheap = simple[0] if simple and reduced[-1] == len(in_dims) - 1 else None

    def gen(index):
        # beyond its reduced extents, the operand holds the masked identity (bounded dims);
        # computed here, in the function the element is emitted in
        clipped = reduced_limits(ctx, instr)
        dims = whole
        if clipped is not None:
            dims = [whole[k] if clipped[d] is None else clipped[d] for k, d in enumerate(reduced)]

        def position(inner):
            full = [None] * len(in_dims)
            for d, value in zip(kept, index):
                full[d] = value
            for d, value in zip(reduced, inner):
                full[d] = value
            return full

        def exact():
            accumulators = Accumulators(ctx, instr, inits)
            with loop_nest(ctx.builder, dims, "r", vectorize=contiguous) as inner:
                accumulators.update([g(position(inner)) for g in inputs])
            return accumulators.result()

        if cheap not in CHEAP_COMPARE:
            return exact()
        start, element = inits[0]([]), inputs[0]
        return cheap_extremum(
            ctx, cheap, start, dims, contiguous, lambda inner: element(position(inner)), exact
        )

    return gen


def reduce_window_rule(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> Gen:
    """Taps in the padding (edges and base-dilation holes) see the init value (StableHLO)."""
    count = len(operands) // 2
    inputs, inits = operands[:count], operands[count:]
    in_dims = instr.operands[0].array_shape.dims
    window = instr.window

    def gen(index):
        b = ctx.builder
        accumulators = Accumulators(ctx, instr, inits)
        with loop_nest(b, window.size, "w") as taps:
            position, conditions = [], []
            for dim, (out, tap) in enumerate(zip(index, taps)):
                where, inside = tap_position(b, out, tap, in_dims[dim], window, dim)
                position.append(where)
                conditions += inside
            valid = all_of(b, conditions)
            if valid is None:
                values = [g(position) for g in inputs]
            else:
                values = [
                    branch_value(b, valid, lambda g=g: g(position), lambda init=init: init([]))
                    for g, init in zip(inputs, inits)
                ]
            accumulators.update(values)
        return accumulators.result()

    return gen


REDUCE_RULES: dict[Op, Rule] = {Op.REDUCE: reduce_rule, Op.REDUCE_WINDOW: reduce_window_rule}
