"""Reductions: the Reduce* table, ArgMax/ArgMin (variadic reduce), Softmax and
LogSoftmax (max-subtracted for stability), CumSum (reduce-window)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...ir import (
    Computation,
    ComputationBuilder,
    Direction,
    DType,
    Instruction,
    Module,
    Op,
    Shape,
)
from .helpers import (
    REDUCE_INIT,
    Formula,
    element_count,
    keep_dims,
    normalize_axes,
    normalize_axis,
    reduce,
    softmax,
)
from .indexing import running
from .registry import NodeContext, onnx_op

Map = Callable[[Formula, Instruction], Instruction]


@dataclass(frozen=True)
class Reduction:
    """combine(map(x)) over the axes, then finish(result) (e.g. divide, sqrt)."""

    combine: Op
    map: Map | None = None
    finish: Map | None = None
    mean: bool = False


def _square(f: Formula, x: Instruction) -> Instruction:
    return f.mul(x, x)


REDUCTIONS: dict[str, Reduction] = {
    "ReduceSum": Reduction(Op.ADD),
    "ReduceMean": Reduction(Op.ADD, mean=True),
    "ReduceMax": Reduction(Op.MAXIMUM),
    "ReduceMin": Reduction(Op.MINIMUM),
    "ReduceProd": Reduction(Op.MULTIPLY),
    "ReduceSumSquare": Reduction(Op.ADD, map=_square),
    "ReduceL1": Reduction(Op.ADD, map=lambda f, x: f.f(Op.ABS, x)),
    "ReduceL2": Reduction(Op.ADD, map=_square, finish=lambda f, x: f.f(Op.SQRT, x)),
    "ReduceLogSum": Reduction(Op.ADD, finish=lambda f, x: f.f(Op.LOG, x)),
    "ReduceLogSumExp": Reduction(
        Op.ADD, map=lambda f, x: f.f(Op.EXP, x), finish=lambda f, x: f.f(Op.LOG, x)
    ),
}

# the opset from which `axes` is an input rather than an attribute
AXES_INPUT_SINCE = {name: 18 for name in REDUCTIONS} | {"ReduceSum": 13}


def make_reduction(reduction: Reduction, axes_from_input: bool):
    def lower(ctx: NodeContext, x: Instruction, axes_input=None) -> Instruction:
        b = ctx.b
        axes = ctx.const_ints(1) if axes_from_input else ctx.attr("axes")
        mapped = reduction.map(Formula(b, x), x) if reduction.map else x
        if not axes:
            if axes_from_input and ctx.attr("noop_with_empty_axes", 0):
                # nothing is reduced; map and finish still apply, per element
                return reduction.finish(Formula(b, mapped), mapped) if reduction.finish else mapped
            axes = range(x.array_shape.rank)
        axes = normalize_axes(axes, x.array_shape.rank)
        out = reduce(b, mapped, reduction.combine, axes, bool(ctx.attr("keepdims", 1)))
        if reduction.mean:
            out = Formula(b, out).div(out, element_count(b, x, axes))
        if reduction.finish:
            out = reduction.finish(Formula(b, out), out)
        return out

    return lower


for _name, _reduction in REDUCTIONS.items():
    _switch = AXES_INPUT_SINCE[_name]
    onnx_op(_name, until=_switch - 1)(make_reduction(_reduction, False))
    onnx_op(_name, since=_switch)(make_reduction(_reduction, True))


def arg_reducer(module: Module, dtype: DType, direction: Direction, last: bool) -> Computation:
    """(value, index) pairs -> the better value, ties to the first (or last) index.

    Parameters are the accumulators then the new elements, as XLA's variadic
    reduce passes them.  The tie-break makes the choice independent of order.
    """
    b = ComputationBuilder(module, f"arg_{direction.value.lower()}_{dtype.text}")
    value, index = Shape(dtype, ()), Shape(DType.S64, ())
    acc_v, acc_i = b.parameter(0, value, "acc_value"), b.parameter(1, index, "acc_index")
    new_v, new_i = b.parameter(2, value, "value"), b.parameter(3, index, "index")
    better = b.compare(new_v, acc_v, direction)
    tie = b.compare(new_v, acc_v, Direction.EQ)
    tie_wins = b.compare(new_i, acc_i, Direction.GT if last else Direction.LT)
    take = b.binary(Op.OR, better, b.binary(Op.AND, tie, tie_wins))
    return b.build(b.tuple([b.select(take, new_v, acc_v), b.select(take, new_i, acc_i)]))


def arg_index(
    b: ComputationBuilder, x: Instruction, axis: int, direction: Direction, last: bool = False
) -> Instruction:
    """The s64 index of the greatest (GT) or least (LT) value along `axis` (removed), ties to
    the first index (the last with `last`)."""
    dtype = x.array_shape.dtype
    combine = Op.MAXIMUM if direction is Direction.GT else Op.MINIMUM
    reducer = arg_reducer(b.module, dtype, direction, last)
    indices = b.iota(Shape(DType.S64, x.array_shape.dims), axis)
    inits = [b.scalar(REDUCE_INIT[combine](dtype), dtype), b.scalar(0, DType.S64)]
    both = b.add(Op.REDUCE, [x, indices, *inits], dimensions=(axis,), called=(reducer,))
    return b.get_tuple_element(both, 1)


def make_arg(direction: Direction):
    def lower(ctx: NodeContext, x: Instruction) -> Instruction:
        axis = normalize_axis(ctx.attr("axis"), x.array_shape.rank)
        out = arg_index(ctx.b, x, axis, direction, bool(ctx.attr("select_last_index", 0)))
        return keep_dims(ctx.b, out, x.array_shape.dims, [axis]) if ctx.attr("keepdims", 1) else out

    return lower


onnx_op("ArgMax")(make_arg(Direction.GT))
onnx_op("ArgMin")(make_arg(Direction.LT))


def make_softmax(log: bool, coerced_2d: bool):
    def lower(ctx: NodeContext, x: Instruction) -> Instruction:
        axis = normalize_axis(ctx.attr("axis"), x.array_shape.rank)
        # before opset 13 the input is seen as 2-D [prod(dims[:axis]), prod(dims[axis:])],
        # which is the same as normalizing over every dim from `axis` on
        axes = list(range(axis, x.array_shape.rank)) if coerced_2d else [axis]
        return softmax(ctx.b, x, axes, log)

    return lower


for _name, _log in (("Softmax", False), ("LogSoftmax", True)):
    onnx_op(_name, until=12)(make_softmax(_log, coerced_2d=True))
    onnx_op(_name, since=13)(make_softmax(_log, coerced_2d=False))


@onnx_op("CumSum", since=11)
def cumsum(ctx: NodeContext, x: Instruction, axis: Instruction) -> Instruction:
    dim = normalize_axis(int(ctx.const(1).reshape(())), x.array_shape.rank)
    out = running(ctx, x, dim, Op.ADD, exclusive=False, reverse=bool(ctx.attr("reverse")))
    if ctx.attr("exclusive"):
        out = ctx.b.binary(Op.SUBTRACT, out, x)
    return out
