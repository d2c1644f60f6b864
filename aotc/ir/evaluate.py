"""The reference interpreter: the meaning of every opcode, computed with numpy.

One rule per opcode in `EVAL_RULES`, following XLA's operation semantics.
Values are numpy arrays in `DType.numpy` (bf16 held as float32 rounded to bf16,
NaNs canonical) or tuples of values.  Every rule's result is cast to the exact
dtype of the instruction's shape, so bf16 and f16 results are rounded after
every op.  It is the reference for constant folding, pass tests and backend
tests: clear and exact before fast.
"""

from __future__ import annotations

import math
import string
import weakref
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import ShapeError
from .evaluate_dynamic import DYNAMIC_RULES
from .module import Computation, Instruction, Module
from .ops import Direction, Op, Trait
from .types import (
    AnyShape,
    DType,
    TupleShape,
    bf16_round,
    cast_array,
    f32_round_to_odd,
    from_storage,
    to_storage,
)

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
    results = [evaluate_computation(comp, [a[index] for a in arrays])
               for index in np.ndindex(arrays[0].shape)]  # fmt: skip
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
    dims = instr.shape.dims
    (axis,) = instr.dimensions
    return np.broadcast_to(_along(np.arange(dims[axis]), axis, len(dims)), dims)


# each rng-get-and-update-state instruction's counter, as the compiled code keeps one
_RNG_COUNTERS: weakref.WeakKeyDictionary[Instruction, int] = weakref.WeakKeyDictionary()


def _rng_state(instr: Instruction, operands: list) -> np.ndarray:
    count = _RNG_COUNTERS.get(instr, 0)
    _RNG_COUNTERS[instr] = count + instr.index
    return np.array([count % (1 << 64), 0], np.uint64)


def _along(vector: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A 1-d array reshaped to lie along `axis` of a rank-`rank` array."""
    shape = [1] * rank
    shape[axis] = vector.shape[0]
    return vector.reshape(shape)


# -- elementwise helpers ----------------------------------------------------------


def _widen(x: np.ndarray) -> np.ndarray:
    """The array an elementwise op computes on: f16 in f32 (rounded once, by the
    result cast); pred as 0/1 bytes so that add/multiply/subtract wrap like i1."""
    if x.dtype == np.float16:
        return x.astype(np.float32)
    if x.dtype == np.bool_:
        return x.view(np.uint8)
    return x


def _unsigned(x) -> np.ndarray:
    """The same bits as the unsigned integer type of the same width."""
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _signed(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(np.dtype(f"i{x.dtype.itemsize}"))


def _is_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f"


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _logistic(x):
    # two forms so that neither exp overflows where its branch is taken
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_MATH_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    # no scipy: math.erf is correctly rounded in f64; slow, but this is the reference
    return _MATH_ERF(np.asarray(x, dtype=np.float64)).astype(np.float64)


def _round_afz(x):
    # x - trunc(x) is exact, unlike floor(x + 0.5) which rounds 0.49999997 up
    whole = np.trunc(x)
    return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole)


def _sign(x):
    # keeps -0.0 and +0.0 (np.sign(-0.0) is +0.0); NaN stays NaN
    if _is_float(x):
        return np.where(x == 0, x, np.sign(x))
    return np.sign(x)


_BYTE_POPCOUNT = np.array([b.bit_count() for b in range(256)], dtype=np.uint8)


def _popcnt(x):
    x = np.asarray(x)
    as_bytes = np.ascontiguousarray(x).view(np.uint8).reshape(*x.shape, x.dtype.itemsize)
    return _BYTE_POPCOUNT[as_bytes].sum(axis=-1, dtype=np.int64)


def _clz(x):
    bits = 8 * np.asarray(x).dtype.itemsize
    rest = _unsigned(x).astype(np.uint64)
    length = np.zeros(rest.shape, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):  # binary search for the highest set bit
        high = (rest >> np.uint64(shift)) != 0
        length += np.where(high, shift, 0)
        rest = np.where(high, rest >> np.uint64(shift), rest)
    return bits - (length + (rest != 0))


def _int_divmod(x, y) -> tuple[np.ndarray, np.ndarray]:
    """Quotient truncated toward zero and remainder with the dividend's sign (C).

    The cases C leaves undefined get XLA CPU's answers: x / 0 = -1 (all ones),
    x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.
    """
    by_zero = y == 0
    by_minus_one = (y == -1) if x.dtype.kind == "i" else np.zeros(np.shape(y), dtype=bool)
    safe = np.where(by_zero | by_minus_one, 1, y).astype(y.dtype)
    remainder = np.fmod(x, safe)
    quotient = (x - remainder) // safe  # exact division: floor and trunc agree
    quotient = np.where(by_minus_one, np.negative(x), quotient)
    quotient = np.where(by_zero, np.invert(np.zeros_like(x)), quotient)
    remainder = np.where(by_zero, x, np.where(by_minus_one, 0, remainder))
    return quotient, remainder


def _divide(x, y):
    return np.true_divide(x, y) if _is_float(x) else _int_divmod(x, y)[0]


def _remainder(x, y):
    return np.fmod(x, y) if _is_float(x) else _int_divmod(x, y)[1]


def _power(x, y):
    if _is_float(x):
        return np.power(x, y)
    # integer power by squaring, wrapping; a negative exponent gives 1 for base 1
    # and 0 otherwise (XLA's HloEvaluator and CPU emitter)
    result = np.ones_like(x)
    square = np.asarray(x).copy()
    exponent = np.maximum(y, 0)
    while np.any(exponent):
        result = np.where((exponent & 1) != 0, result * square, result)
        square = square * square
        exponent = exponent >> 1
    if x.dtype.kind == "i":
        result = np.where(y < 0, (x == 1).astype(x.dtype), result)
    return result


def _shift_amounts(x, y) -> tuple[np.ndarray, np.ndarray]:
    """(in range, amount): amounts are unsigned; those >= the bit width are out of range."""
    amount = _unsigned(y)
    in_range = amount < 8 * x.dtype.itemsize
    return in_range, np.where(in_range, amount, 0).astype(amount.dtype)


def _shift_left(x, y):
    in_range, amount = _shift_amounts(x, y)
    return np.where(in_range, _unsigned(x) << amount, 0).astype(amount.dtype).view(x.dtype)


def _shift_right_logical(x, y):
    in_range, amount = _shift_amounts(x, y)
    return np.where(in_range, _unsigned(x) >> amount, 0).astype(amount.dtype).view(x.dtype)


def _shift_right_arithmetic(x, y):
    # shifting by >= the width fills with the sign bit, as shifting by width - 1 does
    bits = 8 * x.dtype.itemsize
    amount = np.minimum(_unsigned(y), bits - 1)
    value = _signed(x)
    return (value >> amount.astype(value.dtype)).astype(value.dtype).view(x.dtype)


# -- elementwise tables -------------------------------------------------------------

UNARY: dict[Op, Callable] = {
    Op.ABS: np.abs,
    Op.NEGATE: np.negative,
    Op.EXP: np.exp,
    Op.EXPM1: np.expm1,
    Op.LOG: np.log,
    Op.LOG1P: np.log1p,
    Op.SQRT: np.sqrt,
    Op.RSQRT: _rsqrt,
    Op.CBRT: np.cbrt,
    Op.TANH: np.tanh,
    Op.LOGISTIC: _logistic,
    Op.SIN: np.sin,
    Op.COS: np.cos,
    Op.TAN: np.tan,
    Op.ERF: _erf,
    Op.FLOOR: np.floor,
    Op.CEIL: np.ceil,
    Op.ROUND_NEAREST_EVEN: np.rint,
    Op.ROUND_NEAREST_AFZ: _round_afz,
    Op.SIGN: _sign,
    Op.NOT: np.invert,  # logical on pred, bitwise on integers
    Op.IS_FINITE: np.isfinite,
    Op.POPCNT: _popcnt,
    Op.CLZ: _clz,
}

BINARY: dict[Op, Callable] = {
    Op.ADD: np.add,
    Op.SUBTRACT: np.subtract,
    Op.MULTIPLY: np.multiply,
    Op.DIVIDE: _divide,
    Op.REMAINDER: _remainder,
    Op.POWER: _power,
    Op.MAXIMUM: np.maximum,  # both propagate NaN, as XLA
    Op.MINIMUM: np.minimum,
    Op.ATAN2: np.arctan2,
    Op.AND: np.bitwise_and,
    Op.OR: np.bitwise_or,
    Op.XOR: np.bitwise_xor,
    Op.SHIFT_LEFT: _shift_left,
    Op.SHIFT_RIGHT_ARITHMETIC: _shift_right_arithmetic,
    Op.SHIFT_RIGHT_LOGICAL: _shift_right_logical,
}

# IEEE: NaN compares unequal to everything, so only NE holds
COMPARISONS: dict[Direction, Callable] = {
    Direction.EQ: np.equal,
    Direction.NE: np.not_equal,
    Direction.LT: np.less,
    Direction.LE: np.less_equal,
    Direction.GT: np.greater,
    Direction.GE: np.greater_equal,
}


def make_unary(fn: Callable) -> Rule:
    def rule(instr: Instruction, operands: list) -> Value:
        (x,) = operands
        # pred stays pred here: `not` must stay logical
        return fn(x.astype(np.float32) if x.dtype == np.float16 else x)

    return rule


def make_binary(fn: Callable) -> Rule:
    def rule(instr: Instruction, operands: list) -> Value:
        x, y = operands
        return fn(_widen(x), _widen(y))

    return rule


def _compare(instr: Instruction, operands: list) -> np.ndarray:
    x, y = operands
    return COMPARISONS[instr.direction](_widen(x), _widen(y))


def _select(instr: Instruction, operands: list) -> np.ndarray:
    pred, on_true, on_false = operands
    return np.where(pred, on_true, on_false)


def _clamp(instr: Instruction, operands: list) -> np.ndarray:
    lo, x, hi = operands  # scalar bounds broadcast
    return np.minimum(np.maximum(x, lo), hi)


def _convert(instr: Instruction, operands: list) -> np.ndarray:
    (x,) = operands
    target = instr.shape.dtype
    if target.is_int and _is_float(x):
        return _float_to_int(x, target)
    # everything else is numpy's cast: int -> int wraps, x -> pred is x != 0 (NaN is
    # true), pred -> x is 0/1, -> float rounds to nearest even (bf16 by _as_shape)
    return x


def _float_to_int(x: np.ndarray, target: DType) -> np.ndarray:
    """Float -> int truncates toward zero and saturates at the type's range; NaN -> 0.

    XLA's convert (fptosi/fptoui made saturating); numpy's cast is undefined there.
    """
    low, high = target.limits  # s4/u4/s2/u2 saturate at their own range
    whole = np.trunc(x.astype(np.float64))
    too_high = whole >= 2.0 ** (target.bits - target.is_signed_int)  # max + 1, exact
    too_low = whole < float(low)
    inside = np.where(too_high | too_low | np.isnan(whole), 0, whole).astype(target.numpy)
    limits = np.array([low, high], dtype=target.numpy)
    return np.where(too_high, limits[1], np.where(too_low, limits[0], inside))


def _bitcast_convert(instr: Instruction, operands: list) -> np.ndarray:
    (x,) = operands
    raw = to_storage(x, instr.operands[0].shape.dtype)
    return from_storage(raw, instr.shape.dtype)


# -- data movement -----------------------------------------------------------------


def _broadcast(instr: Instruction, operands: list) -> np.ndarray:
    (x,) = operands
    out = instr.shape.dims
    placed = [1] * len(out)
    for i, d in enumerate(instr.dimensions):
        placed[d] = x.shape[i]
    return np.broadcast_to(x.reshape(placed), out)


def _reshape(instr: Instruction, operands: list) -> np.ndarray:
    return operands[0].reshape(instr.shape.dims)


def _transpose(instr: Instruction, operands: list) -> np.ndarray:
    return np.transpose(operands[0], instr.dimensions)


def _slice(instr: Instruction, operands: list) -> np.ndarray:
    s = instr.slice
    return operands[0][tuple(map(slice, s.starts, s.limits, s.strides))]


def _concatenate(instr: Instruction, operands: list) -> np.ndarray:
    return np.concatenate(operands, axis=instr.dimensions[0])


def pad_array(x: np.ndarray, value, low, high, interior) -> np.ndarray:
    """XLA pad: `interior` fill between elements, then `low`/`high` at the edges
    (negative amounts crop)."""
    dilated = [d + max(d - 1, 0) * i for d, i in zip(x.shape, interior)]
    grow_low = [max(lo, 0) for lo in low]
    grow_high = [max(hi, 0) for hi in high]
    grown = [lo + d + hi for lo, d, hi in zip(grow_low, dilated, grow_high)]
    full = np.full(grown, value, dtype=x.dtype)
    full[tuple(slice(lo, lo + d, i + 1) for lo, d, i in zip(grow_low, dilated, interior))] = x
    crop = [slice(max(-lo, 0), g - max(-hi, 0)) for lo, hi, g in zip(low, high, grown)]
    return full[tuple(crop)]


def _pad(instr: Instruction, operands: list) -> np.ndarray:
    x, value = operands
    p = instr.padding
    return pad_array(x, value, p.low, p.high, p.interior)


def _reverse(instr: Instruction, operands: list) -> np.ndarray:
    return np.flip(operands[0], axis=tuple(instr.dimensions))


def _gather(instr: Instruction, operands: list) -> np.ndarray:
    """XLA gather: builds, per operand dim, the index of every output element."""
    operand, indices = operands
    g = instr.gather
    out_dims = instr.shape.dims
    rank = len(out_dims)
    if g.index_vector_dim == indices.ndim:
        indices = indices[..., None]
    batch_index_dims = [d for d in range(indices.ndim) if d != g.index_vector_dim]
    starts = np.moveaxis(as_index(indices), g.index_vector_dim, -1)
    batch_dims = starts.shape[:-1]
    batch_positions = [i for i in range(rank) if i not in g.offset_dims]
    removed = set(g.collapsed_slice_dims) | set(g.operand_batching_dims)
    offset_operand_dims = [d for d in range(operand.ndim) if d not in removed]

    def to_output(batch_array: np.ndarray) -> np.ndarray:
        placed = [1] * rank
        for position, extent in zip(batch_positions, batch_dims):
            placed[position] = extent
        return batch_array.reshape(placed)

    coords = []
    for d in range(operand.ndim):
        if d in g.start_index_map:
            # XLA clamps the start so the whole slice stays in bounds
            start = starts[..., g.start_index_map.index(d)]
            start = np.clip(start, 0, operand.shape[d] - g.slice_sizes[d])
        elif d in g.operand_batching_dims:
            paired = g.start_indices_batching_dims[g.operand_batching_dims.index(d)]
            axis = batch_index_dims.index(paired)
            start = _along(np.arange(batch_dims[axis]), axis, len(batch_dims))
            start = np.broadcast_to(start, batch_dims)
        else:
            start = np.zeros(batch_dims, dtype=np.int64)
        coord = to_output(np.asarray(start))
        if d in offset_operand_dims:
            position = g.offset_dims[offset_operand_dims.index(d)]
            coord = coord + _along(np.arange(g.slice_sizes[d]), position, rank)
        coords.append(np.broadcast_to(coord, out_dims))
    return operand[tuple(coords)]


def as_index(indices: np.ndarray) -> np.ndarray:
    """Integer indices as int64 (huge u64 ones capped: out of range either way)."""
    if indices.dtype == np.uint64:  # huge values would wrap negative in int64
        indices = np.minimum(indices, np.uint64(2**62))
    return indices.astype(np.int64)


# -- reductions and contractions ------------------------------------------------------

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


def windows(x: np.ndarray, axes, size, stride, dilation) -> np.ndarray:
    """Every window position along `axes`: x's dims (those in `axes` now counting
    positions), then the window's elements (`size` per axis, `dilation` apart)."""
    axes = list(axes)
    extent = [(s - 1) * d + 1 for s, d in zip(size, dilation)]
    if any(x.shape[a] < e for a, e in zip(axes, extent)):  # no position fits
        dims = list(x.shape)
        for a in axes:
            dims[a] = 0
        return np.zeros(dims + list(size), dtype=x.dtype)
    view = sliding_window_view(x, extent, axis=axes)
    picks = [slice(None)] * view.ndim
    for a, s in zip(axes, stride):
        picks[a] = slice(None, None, s)
    for i, d in enumerate(dilation):
        picks[x.ndim + i] = slice(None, None, d)
    return view[tuple(picks)]


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


def _wide(x: np.ndarray) -> np.ndarray:
    """Accumulation type of dot and convolution: f64, or 64-bit integers (which wrap
    modulo 2^64, so narrowing the sum gives the narrow type's wrapped result)."""
    if _is_float(x):
        return x.astype(np.float64)
    if x.dtype.kind == "u":
        return x.astype(np.uint64)
    return x.astype(np.int64)


def _dot(instr: Instruction, operands: list) -> np.ndarray:
    lhs, rhs = (_wide(x) for x in operands)
    d = instr.dot
    letters = iter(string.ascii_letters)
    lhs_sub = [""] * lhs.ndim
    rhs_sub = [""] * rhs.ndim
    for a, b in zip(d.lhs_batch + d.lhs_contracting, d.rhs_batch + d.rhs_contracting):
        lhs_sub[a] = rhs_sub[b] = next(letters)
    lhs_free = [i for i, s in enumerate(lhs_sub) if not s]
    rhs_free = [i for i, s in enumerate(rhs_sub) if not s]
    for i in lhs_free:
        lhs_sub[i] = next(letters)
    for i in rhs_free:
        rhs_sub[i] = next(letters)
    out = [lhs_sub[i] for i in d.lhs_batch]
    out += [lhs_sub[i] for i in lhs_free] + [rhs_sub[i] for i in rhs_free]
    spec = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(out)}"
    return np.einsum(spec, lhs, rhs, optimize=True)


def _convolution(instr: Instruction, operands: list) -> np.ndarray:
    """XLA convolution, computed in (batch, feature, spatial...) order: dilate and pad
    the input, take every window, contract each group with its kernel slice."""
    c, w = instr.conv, instr.window
    lhs, rhs = (_wide(x) for x in operands)
    n = len(c.input_spatial)
    lhs = lhs.transpose([c.input_batch, c.input_feature, *c.input_spatial])
    rhs = rhs.transpose([c.kernel_output_feature, c.kernel_input_feature, *c.kernel_spatial])
    lhs = pad_array(lhs, 0, (0, 0, *w.pad_low), (0, 0, *w.pad_high),
                    (0, 0, *(d - 1 for d in w.lhs_dilation)))  # fmt: skip
    framed = windows(lhs, range(2, 2 + n), w.size, w.stride, w.rhs_dilation)
    # framed: (batch, in feature, out spatial..., window...)
    feature_groups, batch_groups = instr.feature_group_count, instr.batch_group_count
    assert feature_groups == 1 or batch_groups == 1, instr
    groups = max(feature_groups, batch_groups)
    batch, features, out_features = lhs.shape[0], lhs.shape[1], rhs.shape[0]
    window_axes = [1, *range(2 + n, 2 + 2 * n)]
    kernel_axes = [1, *range(2, 2 + n)]
    parts = []
    for g in range(groups):
        x = framed
        if batch_groups > 1:  # group g: batch rows g*B/G.., output features g*O/G..
            x = x[g * batch // groups : (g + 1) * batch // groups]
        if feature_groups > 1:  # group g: input features g*C/G.., output features g*O/G..
            x = x[:, g * features // groups : (g + 1) * features // groups]
        kernel = rhs[g * out_features // groups : (g + 1) * out_features // groups]
        parts.append(np.tensordot(x, kernel, axes=(window_axes, kernel_axes)))
    result = np.moveaxis(np.concatenate(parts, axis=-1), -1, 1)  # (batch, feature, spatial...)
    canonical = [0] * (n + 2)
    canonical[c.output_batch] = 0
    canonical[c.output_feature] = 1
    for i, s in enumerate(c.output_spatial):
        canonical[s] = 2 + i
    return result.transpose(canonical)


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
    **{op: make_unary(fn) for op, fn in UNARY.items()},
    **{op: make_binary(fn) for op, fn in BINARY.items()},
    Op.COMPARE: _compare,
    Op.SELECT: _select,
    Op.CLAMP: _clamp,
    Op.CONVERT: _convert,
    Op.BITCAST_CONVERT: _bitcast_convert,
    Op.BROADCAST: _broadcast,
    Op.RESHAPE: _reshape,
    Op.BITCAST: _reshape,
    Op.TRANSPOSE: _transpose,
    Op.SLICE: _slice,
    Op.CONCATENATE: _concatenate,
    Op.PAD: _pad,
    Op.REVERSE: _reverse,
    Op.GATHER: _gather,
    **DYNAMIC_RULES,
    Op.REDUCE: _reduce,
    Op.REDUCE_WINDOW: _reduce_window,
    Op.DOT: _dot,
    Op.CONVOLUTION: _convolution,
    Op.TUPLE: lambda instr, operands: tuple(operands),
    Op.GET_TUPLE_ELEMENT: lambda instr, operands: operands[0][instr.index],
    Op.FUSION: _fusion,
    Op.WHILE: _while,
    Op.CONDITIONAL: _conditional,
    Op.CALL: _call,
}

assert set(EVAL_RULES) == set(Op), set(Op) - set(EVAL_RULES)
