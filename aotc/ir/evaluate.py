"""The reference interpreter: the meaning of every opcode, computed with numpy.

One rule per opcode in `EVAL_RULES`, following XLA's operation semantics.
Values are numpy arrays in `DType.numpy` (bf16 held as float32 rounded to bf16,
NaNs canonical) or tuples of values.  Every rule's result is cast to the exact
dtype of the instruction's shape, so bf16 and f16 results are rounded after
every op.  It is the reference for constant folding, pass tests and backend
tests: clear and exact before fast.

This module runs computations and holds the rules that run called computations
(reduce, reduce-window, control flow) and the leaves; the other rules come by
op family from `evaluate_elementwise`, `evaluate_movement`,
`evaluate_contraction` and `evaluate_dynamic`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import ShapeError
from .evaluate_contraction import CONTRACTION_RULES
from .evaluate_dynamic import DYNAMIC_RULES
from .evaluate_elementwise import ELEMENTWISE_RULES
from .evaluate_movement import MOVEMENT_RULES, along, pad_array, windows
from .module import Computation, Instruction, Module
from .ops import Op, Trait
from .types import AnyShape, DType, TupleShape, bf16_round, cast_array, f32_round_to_odd

Value = np.ndarray | tuple
# rule(instr, operand values) -> value; a parameter's "operand" is its argument
Rule = Callable[[Instruction, list], Value]


# -- entry points --------------------------------------------------------------


def evaluate(module: Module, args: Sequence[np.ndarray]) -> Value:
    """The value of the entry computation with its parameters bound to `args`, in order."""
    return evaluate_computation(module.entry, args)


def evaluate_computation(comp: Computation, args: Sequence[Value]) -> Value:
    """The value of `comp`'s root with its parameters bound to `args`, in order."""
    params = comp.parameters
    if len(args) != len(params):
        raise ShapeError(f"{comp.name} takes {len(params)} arguments, got {len(args)}")
    return _run(comp.post_order(), args)[id(comp.root)]


def evaluate_constant(instr: Instruction) -> Value | None:
    """The value of `instr` if no parameter reaches it (only constants, iota...), else None."""
    # a root-only Computation just to reuse its operand walk; nothing is registered
    order = Computation("constant", root=instr).post_order()
    if any(i.op is Op.PARAMETER or Trait.SIDE_EFFECT in i.op.traits for i in order):
        return None
    return _run(order, ())[id(instr)]


def evaluate_extents(instr: Instruction, extent) -> Value | None:
    """The value of `instr` with each get-dimension-size of a bounded dim taken as
    `extent(bound)` (its operand not evaluated): a shape computed from bounded dims at
    chosen extents; None where a parameter reaches it otherwise."""
    sizes = Computation("extents", root=instr)
    order = sizes.post_order(leaf=lambda i: i.op is Op.GET_DIMENSION_SIZE)
    if any(i.op is Op.PARAMETER or Trait.SIDE_EFFECT in i.op.traits for i in order):
        return None
    values: dict[int, Value] = {}
    with np.errstate(all="ignore"):
        for cur in order:
            if cur.op is Op.GET_DIMENSION_SIZE:
                assert cur.dimensions is not None  # the op requires dimensions=
                shape, dim = cur.operands[0].array_shape, cur.dimensions[0]
                bound = shape.dims[dim]
                result: Value = np.asarray(
                    extent(bound) if shape.is_dynamic(dim) else bound, np.int32
                )
            else:
                result = EVAL_RULES[cur.op](cur, [values[id(o)] for o in cur.operands])
            values[id(cur)] = _as_shape(result, cur.shape, cur)
    return values[id(instr)]


def map_computation(comp: Computation, args: Sequence[np.ndarray]) -> Value:
    """A scalar computation (comparator, combiner) applied elementwise to arrays of
    broadcastable dims: one numpy pass per instruction where every instruction is
    elementwise, else one evaluation per element (slow)."""
    order = comp.post_order()
    if is_mappable(order):
        values: dict[int, Value] = {}
        with np.errstate(all="ignore"):
            for instr in order:
                if instr.op is Op.PARAMETER:
                    result = args[instr.index]
                else:
                    result = EVAL_RULES[instr.op](instr, [values[id(o)] for o in instr.operands])
                values[id(instr)] = _as_shape(result, instr.shape, instr, exact_dims=False)
        return values[id(comp.root)]
    arrays = np.broadcast_arrays(*(np.asarray(a) for a in args))
    results = [
        evaluate_computation(comp, [a[index] for a in arrays])
        for index in np.ndindex(arrays[0].shape)
    ]
    return _stack(results, arrays[0].shape, comp.root.shape)


def is_mappable(order: list[Instruction]) -> bool:
    """Whether these instructions evaluate on arrays as they do on scalars."""
    return all(
        i.op.is_elementwise
        or i.op in (Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT)
        or (i.op is Op.CONSTANT and i.literal.ndim == 0)
        for i in order
    )


def _stack(results: list, dims: tuple[int, ...], shape: AnyShape) -> Value:
    """Per-element results (scalars or tuples of scalars) as arrays of `dims`."""
    if isinstance(shape, TupleShape):
        return tuple(_stack([r[k] for r in results], dims, s) for k, s in enumerate(shape.elements))
    return np.array(results, dtype=shape.dtype.numpy).reshape(dims)


def _run(order: list[Instruction], args: Sequence[Value]) -> dict[int, Value]:
    """Values of `order` (operands first), keyed by id(instruction)."""
    values: dict[int, Value] = {}
    # overflow, x/0 and NaN are defined results here, not warnings
    with np.errstate(all="ignore"):
        for instr in order:
            if instr.op is Op.PARAMETER:
                operands = [args[instr.index]]
            else:
                operands = [values[id(o)] for o in instr.operands]
            result = EVAL_RULES[instr.op](instr, operands)
            values[id(instr)] = _as_shape(result, instr.shape, instr)
    return values


def _as_shape(value, shape: AnyShape, instr: Instruction, exact_dims: bool = True) -> Value:
    """`value` cast to exactly `shape`'s dtype (rounded for bf16), tuples element-wise;
    `exact_dims=False` keeps the value's dims (a scalar computation mapped over arrays)."""
    if isinstance(shape, TupleShape):
        assert len(value) == len(shape.elements), instr
        return tuple(_as_shape(v, s, instr, exact_dims) for v, s in zip(value, shape.elements))
    array = np.asarray(value)
    assert array.shape == shape.dims or not exact_dims, f"{instr}: rule gave dims {array.shape}"
    if shape.dtype is DType.BF16 and array.dtype != np.float32:
        return _to_bf16(array.astype(np.float64))
    return cast_array(array, shape.dtype)


def _to_bf16(values: np.ndarray) -> np.ndarray:
    """float64 -> bf16 with a single rounding (int and f64 converts, f64 accumulators):
    rounding to f32 first would round twice; rounding to odd keeps it exact."""
    return bf16_round(f32_round_to_odd(values))


# -- leaves --------------------------------------------------------------------


def _parameter(instr: Instruction, operands: list) -> Value:
    (arg,) = operands
    _check_argument(arg, instr.shape, instr.name)
    return arg


def _check_argument(arg, shape: AnyShape, name: str) -> None:
    if isinstance(shape, TupleShape):
        if not isinstance(arg, (tuple, list)) or len(arg) != len(shape.elements):
            raise ShapeError(f"argument for {name} must be a tuple for {shape}")
        for a, s in zip(arg, shape.elements):
            _check_argument(a, s, name)
    elif np.shape(arg) != shape.dims:
        raise ShapeError(f"argument for {name} has dims {np.shape(arg)}, expected {shape}")


def _iota(instr: Instruction, operands: list) -> np.ndarray:
    dims = instr.array_shape.dims
    (axis,) = instr.dimensions
    return np.broadcast_to(along(np.arange(dims[axis]), axis, len(dims)), dims)


# each rng-get-and-update-state instruction's counter, as the compiled code keeps one
_RNG_COUNTERS: weakref.WeakKeyDictionary[Instruction, int] = weakref.WeakKeyDictionary()


def _rng_state(instr: Instruction, operands: list) -> np.ndarray:
    count = _RNG_COUNTERS.get(instr, 0)
    _RNG_COUNTERS[instr] = count + instr.index
    return np.array([count % (1 << 64), 0], np.uint64)


# -- reductions ------------------------------------------------------------------------

# reducers that are one numpy ufunc: reduce them with ufunc.reduce
SIMPLE_REDUCERS: dict[Op, np.ufunc] = {
    Op.ADD: np.add,
    Op.MULTIPLY: np.multiply,
    Op.MAXIMUM: np.maximum,
    Op.MINIMUM: np.minimum,
    Op.AND: np.bitwise_and,
    Op.OR: np.bitwise_or,
}


def simple_reducer(comp: Computation) -> np.ufunc | None:
    """The ufunc if `comp` is `op(p0, p1)` (either order) for an op in SIMPLE_REDUCERS."""
    root, params = comp.root, comp.parameters
    if root.op not in SIMPLE_REDUCERS or len(params) != 2:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    return SIMPLE_REDUCERS[root.op]


def _accumulator(x: np.ndarray) -> np.ndarray:
    # half floats accumulate in f32 and round once, at the result cast
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _ufunc_reduce(ufunc: np.ufunc, x: np.ndarray, init: np.ndarray, axes) -> np.ndarray:
    x = _accumulator(x)
    return ufunc.reduce(x, axis=tuple(axes), dtype=x.dtype, initial=init.astype(x.dtype)[()])


def _fold(reducer: Computation, inputs: list, inits: list, axes) -> Value:
    """The general reduction: apply `reducer` (accumulators..., elements...) -> accumulators
    over `axes`, elements in row-major order.  Slow; for reducers numpy cannot express."""
    axes = sorted(axes)
    kept = [d for d in range(inputs[0].ndim) if d not in axes]
    out_dims = [inputs[0].shape[d] for d in kept]
    count = math.prod(inputs[0].shape[d] for d in axes)
    flat = [x.transpose(kept + axes).reshape(math.prod(out_dims), count) for x in inputs]
    results = [np.empty(math.prod(out_dims), dtype=x.dtype) for x in inputs]
    for o in range(len(results[0])):
        acc = list(inits)
        for r in range(count):
            step = evaluate_computation(reducer, acc + [f[o, r] for f in flat])
            acc = list(step) if isinstance(step, tuple) else [step]
        for result, value in zip(results, acc):
            result[o] = value
    shaped = [r.reshape(out_dims) for r in results]
    return shaped[0] if len(shaped) == 1 else tuple(shaped)


def _reduce_all(instr: Instruction, inputs: list, inits: list, axes) -> Value:
    reducer = instr.called[0]
    ufunc = simple_reducer(reducer)
    if len(inputs) == 1 and ufunc is not None:
        return _ufunc_reduce(ufunc, inputs[0], inits[0], axes)
    return _fold(reducer, inputs, inits, axes)


def _reduce(instr: Instruction, operands: list) -> Value:
    n = len(operands) // 2
    return _reduce_all(instr, operands[:n], operands[n:], instr.dimensions)


def _reduce_window(instr: Instruction, operands: list) -> Value:
    # StableHLO's definition: pad (edges and base-dilation holes) with the init value,
    # then reduce every window starting from the init value
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    w = instr.window
    rank = inputs[0].ndim
    holes = [d - 1 for d in w.lhs_dilation]
    framed = []
    for x, init in zip(inputs, inits):
        padded = pad_array(x, init, w.pad_low, w.pad_high, holes)
        framed.append(windows(padded, range(rank), w.size, w.stride, w.rhs_dilation))
    return _reduce_all(instr, framed, inits, range(rank, 2 * rank))


# -- structure -------------------------------------------------------------------------


def _fusion(instr: Instruction, operands: list) -> Value:
    return evaluate_computation(instr.called[0], operands)


def _while(instr: Instruction, operands: list) -> Value:
    """Run the body while the condition holds (no iteration cap: a loop that never
    ends here never ends compiled either)."""
    condition, body = instr.called
    test, step = condition.post_order(), body.post_order()
    (state,) = operands
    while bool(_run(test, [state])[id(condition.root)]):
        state = _run(step, [state])[id(body.root)]
    return state


def branch_index(selector: np.ndarray, branches: int) -> int:
    """The branch a conditional takes: pred true -> 0, false -> 1; an index out of
    range -> the last branch (as XLA)."""
    if selector.dtype == np.bool_:
        return 0 if selector else 1
    index = int(selector)
    return index if 0 <= index < branches else branches - 1


def _conditional(instr: Instruction, operands: list) -> Value:
    k = branch_index(operands[0], len(instr.called))
    return evaluate_computation(instr.called[k], [operands[k + 1]])


def _call(instr: Instruction, operands: list) -> Value:
    return evaluate_computation(instr.called[0], operands)


EVAL_RULES: dict[Op, Rule] = {
    Op.PARAMETER: _parameter,
    Op.CONSTANT: lambda instr, operands: instr.literal,
    Op.IOTA: _iota,
    Op.RNG_GET_AND_UPDATE_STATE: _rng_state,
    **ELEMENTWISE_RULES,
    **MOVEMENT_RULES,
    **DYNAMIC_RULES,
    Op.REDUCE: _reduce,
    Op.REDUCE_WINDOW: _reduce_window,
    **CONTRACTION_RULES,
    Op.TUPLE: lambda instr, operands: tuple(operands),
    Op.GET_TUPLE_ELEMENT: lambda instr, operands: operands[0][instr.index],
    Op.FUSION: _fusion,
    Op.WHILE: _while,
    Op.CONDITIONAL: _conditional,
    Op.CALL: _call,
}

assert set(EVAL_RULES) == set(Op), set(Op) - set(EVAL_RULES)
