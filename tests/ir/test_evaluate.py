"""The evaluator against independent formulations: python scalars, explicit loops.

Expected values never come from aotc: float references are computed in python
float64 and rounded with `round_to` (bf16 rounding written out here, f16 via
numpy's own cast); integer references wrap python ints; data movement, gather,
reductions, windows, dot and convolution are nested loops over output indices.
"""

from __future__ import annotations

import itertools
import math
import os
import struct
import subprocess
import sys
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest

from aotc.errors import ShapeError
from aotc.ir import (
    Computation,
    ComputationBuilder,
    ConvDims,
    Direction,
    DotDims,
    DType,
    FusionKind,
    GatherDims,
    Module,
    Op,
    ScatterDims,
    Shape,
    Window,
    evaluate_dynamic,
    replacer,
    scalar_reducer,
)
from aotc.ir.builder import comparator
from aotc.ir.evaluate import EVAL_RULES, evaluate, evaluate_constant
from aotc.ir.types import MINIFLOATS, SUB_BYTE_INTS, cast_array

EXERCISED: set[Op] = set()
# the minifloats and sub-byte integers have their own tests (test_narrow_types.py)
BASE_DTYPES = [dt for dt in DType if dt not in MINIFLOATS and dt not in SUB_BYTE_INTS]
INT_DTYPES = [dt for dt in BASE_DTYPES if dt.is_int]
FLOAT_DTYPES = [DType.F16, DType.BF16, DType.F32, DType.F64]
BF16_MAX = (2 - 2**-7) * 2.0**127
# a few ulps of each float type, relative (f16/bf16 results are correctly rounded
# from f32 math, so they may be one ulp off a reference rounded from f64)
RTOL = {DType.F16: 2**-10, DType.BF16: 2**-7, DType.F32: 1e-6, DType.F64: 1e-13}


# -- helpers -----------------------------------------------------------------------


def entry_module(build, shapes: list[Shape]) -> Module:
    """A module whose entry takes `shapes` and returns `build(builder, *params)`."""
    module = Module("test")
    b = ComputationBuilder(module, "entry")
    params = [b.parameter(i, s) for i, s in enumerate(shapes)]
    b.build(build(b, *params), entry=True)
    for comp in module.computations:
        EXERCISED.update(i.op for i in comp.instructions)
    return module


def run(build, *args, dtypes: list[DType] | None = None):
    """Evaluate `build` on `args` (dtypes inferred from the arrays unless given)."""
    if dtypes is None:
        arrays = [np.asarray(a) for a in args]
        dtypes = [DType.from_numpy(a.dtype) for a in arrays]
    else:  # bf16 values travel as f64 (exact); the evaluator rounds them
        arrays = [
            np.asarray(a, np.float64 if dt is DType.BF16 else dt.numpy)
            for a, dt in zip(args, dtypes)
        ]
    shapes = [Shape(dt, a.shape) for dt, a in zip(dtypes, arrays)]
    return evaluate(entry_module(build, shapes), arrays)


def sub_computation(b: ComputationBuilder, build, dtypes: list[DType]):
    """A scalar computation of `module` (a reducer) returning `build(builder, *params)`."""
    sub = ComputationBuilder(b.module, "sub")
    params = [sub.parameter(i, Shape(dt, ())) for i, dt in enumerate(dtypes)]
    return sub.build(build(sub, *params))


def round_bf16(v: float) -> float:
    """`v` rounded to bf16 (8 significant bits, ties to even), written out with frexp."""
    if math.isnan(v) or math.isinf(v) or v == 0:
        return v
    quantum = max(math.frexp(v)[1] - 8, -133)  # -133: bf16's subnormal spacing
    rounded = math.ldexp(round(math.ldexp(v, -quantum)), quantum)
    return math.copysign(math.inf, v) if abs(rounded) > BF16_MAX else rounded


def round_to(v: float, dtype: DType) -> float:
    if dtype is DType.BF16:
        return round_bf16(v)
    with np.errstate(over="ignore"):  # overflow to inf is the expected rounding
        return float(np.array(v, dtype=np.float64).astype(dtype.numpy))


def wrap(v: int, dtype: DType) -> int:
    """Python int `v` modulo 2^bits, as `dtype` reads those bits."""
    bits = 8 * dtype.itemsize
    v &= (1 << bits) - 1
    if dtype.is_signed_int and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def int_values(dtype: DType, rng, count: int = 40) -> list[int]:
    info = np.iinfo(dtype.numpy)
    edges = [info.min, info.max, 0, 1, wrap(-1, dtype), wrap(2, dtype), wrap(-7, dtype)]
    random = rng.integers(info.min, info.max, count, dtype=dtype.numpy, endpoint=True)
    return edges + random.tolist()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def erf_by_integration(v: float) -> float:
    """2/sqrt(pi) * integral of exp(-t^2) over [0, v], by Simpson's rule."""
    t = np.linspace(0.0, v, 4001)
    y = np.exp(-t * t)
    h = v / 4000
    simpson = h / 3 * (y[0] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum() + y[-1])
    return float(simpson * 2 / math.sqrt(math.pi))


def afz(v: float) -> float:
    return float(Decimal(v).quantize(Decimal(1), rounding=ROUND_HALF_UP))


# -- unary elementwise --------------------------------------------------------------

# op -> (python reference, inputs)
UNARY_FLOAT = {
    Op.ABS: (abs, [-2.5, -0.0, 0.75, 3.0]),
    Op.NEGATE: (lambda v: -v, [-2.5, 0.0, 0.75, 3.0]),
    Op.EXP: (math.exp, [-3.5, -1, -0.25, 0, 0.5, 1, 2.75, 8]),
    Op.EXPM1: (math.expm1, [-2, -1e-3, 0, 1e-3, 0.5, 3]),
    Op.LOG: (math.log, [0.01, 0.5, 1, 2, 10, 1000]),
    Op.LOG1P: (math.log1p, [-0.5, -1e-3, 0, 1e-3, 1, 100]),
    Op.SQRT: (math.sqrt, [0, 0.25, 2, 9, 1e4]),
    Op.RSQRT: (lambda v: 1 / math.sqrt(v), [0.25, 2, 9, 1e4]),
    Op.CBRT: (lambda v: math.copysign(abs(v) ** (1 / 3), v), [-27, -2, 0, 0.001, 8, 100]),
    Op.TANH: (math.tanh, [-5, -0.5, 0, 0.3, 2, 20]),
    Op.LOGISTIC: (lambda v: 1 / (1 + math.exp(-v)), [-30, -2, 0, 1.5, 30]),
    Op.SIN: (math.sin, [-3, -1, 0, 0.5, 2, 6]),
    Op.COS: (math.cos, [-3, -1, 0, 0.5, 2, 6]),
    Op.TAN: (math.tan, [-1.2, -0.5, 0, 0.5, 1.2, 3]),
    Op.ERF: (erf_by_integration, [-2.5, -0.7, 0, 0.1, 0.5, 1, 3]),
    Op.FLOOR: (math.floor, [-2.5, -1.5, -0.5, 0.5, 1.5, 2.7]),
    Op.CEIL: (math.ceil, [-2.5, -1.5, -0.5, 0.5, 1.5, 2.7]),
    Op.ROUND_NEAREST_EVEN: (round, [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7, -3.2, 0.49999997]),
    Op.ROUND_NEAREST_AFZ: (afz, [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7, -3.2, 0.49999997]),
    Op.SIGN: (
        lambda v: v if v == 0 or math.isnan(v) else math.copysign(1, v),
        [-2.0, -0.0, 0.0, 3.0, math.nan, -math.inf],
    ),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.text)
@pytest.mark.parametrize("op", list(UNARY_FLOAT), ids=lambda o: o.text)
def test_unary_float(op, dtype):
    fn, values = UNARY_FLOAT[op]
    x = [round_to(float(v), dtype) for v in values]
    expected = [round_to(float(fn(v)), dtype) for v in x]
    got = run(lambda b, p: b.tuple([b.unary(op, p)]), x, dtypes=[dtype])[0]
    assert got.dtype == dtype.numpy
    rtol = max(RTOL[dtype], 1e-10) if op is Op.ERF else RTOL[dtype]
    np.testing.assert_allclose(got, np.array(expected, dtype=np.float64), rtol=rtol, atol=1e-300)


def test_erf_known_values():
    got = run(lambda b, p: b.unary(Op.ERF, p), np.array([0.5, 1.0, -2.0, 0.0]))
    # Abramowitz & Stegun table 7.1
    expected = [0.5204998778130465, 0.8427007929497149, -0.9953222650189527, 0.0]
    np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_sign_and_rounding_keep_negative_zero():
    x = np.array([-0.0, -0.25, 0.0])
    for op in (Op.SIGN, Op.ROUND_NEAREST_AFZ, Op.ROUND_NEAREST_EVEN, Op.CEIL):
        got = run(lambda b, p, op=op: b.unary(op, p), x)
        assert np.signbit(got).tolist() == [True, True, False], op


# op -> python reference on (value, dtype)
UNARY_INT = {
    Op.ABS: lambda v, dt: wrap(abs(v), dt),
    Op.NEGATE: lambda v, dt: wrap(-v, dt),
    Op.NOT: lambda v, dt: wrap(~v, dt),
    Op.SIGN: lambda v, dt: (v > 0) - (v < 0),
    Op.POPCNT: lambda v, dt: (v & ((1 << 8 * dt.itemsize) - 1)).bit_count(),
    Op.CLZ: lambda v, dt: 8 * dt.itemsize - (v & ((1 << 8 * dt.itemsize) - 1)).bit_length(),
}


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.text)
@pytest.mark.parametrize("op", list(UNARY_INT), ids=lambda o: o.text)
def test_unary_int(op, dtype, rng):
    x = int_values(dtype, rng)
    got = run(lambda b, p: b.unary(op, p), np.array(x, dtype=dtype.numpy))
    assert got.dtype == dtype.numpy
    assert got.tolist() == [UNARY_INT[op](v, dtype) for v in x]


def test_not_and_is_finite():
    got = run(lambda b, p: b.unary(Op.NOT, p), np.array([True, False]))
    assert got.tolist() == [False, True]
    x = [1.0, math.inf, -math.inf, math.nan, -0.0, 65504.0]
    for dtype in FLOAT_DTYPES:
        got = run(lambda b, p: b.unary(Op.IS_FINITE, p), x, dtypes=[dtype])
        assert got.dtype == np.bool_
        assert got.tolist() == [math.isfinite(round_to(v, dtype)) for v in x]


# -- binary elementwise ----------------------------------------------------------------

# op -> (python reference, exact?): exact ops are correctly rounded in every type
BINARY_FLOAT = {
    Op.ADD: (lambda x, y: x + y, True),
    Op.SUBTRACT: (lambda x, y: x - y, True),
    Op.MULTIPLY: (lambda x, y: x * y, True),
    Op.DIVIDE: (lambda x, y: x / y, True),
    Op.REMAINDER: (math.fmod, True),
    Op.MAXIMUM: (max, True),
    Op.MINIMUM: (min, True),
    Op.POWER: (lambda x, y: abs(x) ** y, False),
    Op.ATAN2: (math.atan2, False),
}
FLOAT_X = [1.5, -2.25, 3.0, 0.1, 7.0, -0.5, 1e3, -7.5]
FLOAT_Y = [0.75, 4.0, -1.3, 0.3, 2.0, 3.0, 1e-3, -2.0]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.text)
@pytest.mark.parametrize("op", list(BINARY_FLOAT), ids=lambda o: o.text)
def test_binary_float(op, dtype):
    fn, exact = BINARY_FLOAT[op]
    x = [round_to(v, dtype) for v in FLOAT_X]
    y = [round_to(v, dtype) for v in FLOAT_Y]
    if op is Op.POWER:
        x = [abs(v) for v in x]
    expected = np.array([round_to(fn(a, c), dtype) for a, c in zip(x, y)])
    got = run(lambda b, p, q: b.binary(op, p, q), x, y, dtypes=[dtype, dtype])
    assert got.dtype == dtype.numpy
    if exact:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=RTOL[dtype])


def test_float_special_values():
    nan, inf = math.nan, math.inf
    x = np.array([1.0, -1.0, 0.0, nan, 2.0, 5.5, -5.5], dtype=np.float32)
    y = np.array([0.0, 0.0, 0.0, 1.0, nan, 2.0, 2.0], dtype=np.float32)
    got = run(
        lambda b, p, q: b.tuple(
            [b.binary(o, p, q) for o in (Op.DIVIDE, Op.MAXIMUM, Op.MINIMUM, Op.REMAINDER)]
        ),
        x,
        y,
    )
    np.testing.assert_array_equal(got[0], [inf, -inf, nan, nan, nan, 2.75, -2.75])
    np.testing.assert_array_equal(got[1], [1.0, 0.0, 0.0, nan, nan, 5.5, 2.0])
    np.testing.assert_array_equal(got[2], [0.0, -1.0, 0.0, nan, nan, 2.0, -5.5])
    # fmod: the dividend's sign; x % 0 is NaN
    np.testing.assert_array_equal(got[3], [nan, nan, nan, nan, nan, 1.5, -1.5])


def test_f16_and_bf16_round_after_every_op():
    # bf16 has 8 significant bits: 1 + 2^-8 is a tie (to even: 1), 1 + 3*2^-8 rounds up
    got = run(
        lambda b, p, q: b.binary(Op.ADD, p, q),
        [1.0, 1.0, 256.0],
        [2**-8, 3 * 2**-8, 1.0],
        dtypes=[DType.BF16, DType.BF16],
    )
    assert got.dtype == np.float32
    assert got.tolist() == [1.0, 1.0 + 2**-6, 256.0]
    got = run(
        lambda b, p, q: b.binary(Op.ADD, p, q),
        [60000.0, 1.0],
        [60000.0, 2**-11],
        dtypes=[DType.F16, DType.F16],
    )
    assert got.dtype == np.float16
    assert got.tolist() == [math.inf, 1.0]


def int_div(a: int, b: int, dtype: DType) -> tuple[int, int]:
    """Truncating division and C remainder; XLA's answers for /0 and INT_MIN/-1."""
    if b == 0:
        return wrap(-1, dtype), a
    q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
    return wrap(q, dtype), wrap(a - b * q, dtype)


def shift_amount(s: int, dtype: DType) -> int:
    return s & ((1 << 8 * dtype.itemsize) - 1)  # amounts are read as unsigned


def shl(a: int, s: int, dt: DType) -> int:
    bits, s = 8 * dt.itemsize, shift_amount(s, dt)
    return wrap(a << s, dt) if s < bits else 0


def shr_logical(a: int, s: int, dt: DType) -> int:
    bits, s = 8 * dt.itemsize, shift_amount(s, dt)
    return wrap((a & ((1 << bits) - 1)) >> s, dt) if s < bits else 0


def shr_arithmetic(a: int, s: int, dt: DType) -> int:
    bits, s = 8 * dt.itemsize, shift_amount(s, dt)
    signed = a & ((1 << bits) - 1)
    if signed >= 1 << (bits - 1):
        signed -= 1 << bits
    return wrap(signed >> min(s, bits - 1), dt)


def int_power(a: int, e: int, dt: DType) -> int:
    if e < 0:
        return 1 if a == 1 else 0
    return wrap(pow(a, e, 1 << 8 * dt.itemsize), dt)


BINARY_INT = {
    Op.ADD: lambda a, b, dt: wrap(a + b, dt),
    Op.SUBTRACT: lambda a, b, dt: wrap(a - b, dt),
    Op.MULTIPLY: lambda a, b, dt: wrap(a * b, dt),
    Op.DIVIDE: lambda a, b, dt: int_div(a, b, dt)[0],
    Op.REMAINDER: lambda a, b, dt: int_div(a, b, dt)[1],
    Op.MAXIMUM: lambda a, b, dt: max(a, b),
    Op.MINIMUM: lambda a, b, dt: min(a, b),
    Op.AND: lambda a, b, dt: a & b,
    Op.OR: lambda a, b, dt: a | b,
    Op.XOR: lambda a, b, dt: a ^ b,
    Op.POWER: int_power,
    Op.SHIFT_LEFT: shl,
    Op.SHIFT_RIGHT_LOGICAL: shr_logical,
    Op.SHIFT_RIGHT_ARITHMETIC: shr_arithmetic,
}


def second_operands(op: Op, dtype: DType, count: int, rng) -> list[int]:
    bits = 8 * dtype.itemsize
    if op is Op.POWER:
        pool = [-3, -1, 0, 1, 2, 3, 7, 63, 64, 65]
    elif op.text.startswith("shift"):
        pool = [0, 1, 3, bits - 1, bits, bits + 3, wrap(-1, dtype)]
    else:
        return int_values(dtype, rng, count - 7)
    pool = [wrap(v, dtype) for v in pool]
    return [pool[i % len(pool)] for i in range(count)]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.text)
@pytest.mark.parametrize("op", list(BINARY_INT), ids=lambda o: o.text)
def test_binary_int(op, dtype, rng):
    x = int_values(dtype, rng)
    if op is Op.POWER:  # bases whose powers are interesting
        x = [wrap(v, dtype) for v in [-2, -1, 0, 1, 2, 3, 5]] + x[:10]
    y = second_operands(op, dtype, len(x), rng)
    if op in (Op.DIVIDE, Op.REMAINDER):
        y[:4] = [0, wrap(-1, dtype), 0, wrap(-1, dtype)]  # x / 0 and INT_MIN / -1
    arrays = [np.array(v, dtype=dtype.numpy) for v in (x, y)]
    got = run(lambda b, p, q: b.binary(op, p, q), *arrays)
    assert got.dtype == dtype.numpy
    assert got.tolist() == [BINARY_INT[op](a, c, dtype) for a, c in zip(x, y)]


def test_int_division_signs():
    x = np.array([7, -7, 7, -7, -128, 5, -5], dtype=np.int8)
    y = np.array([2, 2, -2, -2, -1, 0, 0], dtype=np.int8)
    q, r = run(
        lambda b, p, c: b.tuple([b.binary(Op.DIVIDE, p, c), b.binary(Op.REMAINDER, p, c)]), x, y
    )
    assert q.tolist() == [3, -3, -3, 3, -128, -1, -1]
    assert r.tolist() == [1, -1, 1, -1, 0, 5, -5]


def test_shifts_past_the_width():
    x = np.array([-128, -128, 64, 1, -1], dtype=np.int8)
    s = np.array([8, 100, 1, 7, -1], dtype=np.int8)
    left, arith, logical = run(
        lambda b, p, c: b.tuple(
            [
                b.binary(o, p, c)
                for o in (Op.SHIFT_LEFT, Op.SHIFT_RIGHT_ARITHMETIC, Op.SHIFT_RIGHT_LOGICAL)
            ]
        ),
        x,
        s,
    )
    assert left.tolist() == [0, 0, -128, -128, 0]
    assert arith.tolist() == [-1, -1, 32, 0, -1]
    assert logical.tolist() == [0, 0, 32, 0, 0]


@pytest.mark.parametrize("dtype", BASE_DTYPES, ids=lambda d: d.text)
def test_add_every_dtype(dtype, rng):
    if dtype is DType.PRED:
        x, y = [False, True, False, True], [False, False, True, True]
        expected = [False, True, True, True]  # i1 add saturates to or, as C++ bool
    elif dtype.is_int:
        x, y = int_values(dtype, rng), int_values(dtype, rng)[::-1]
        expected = [wrap(a + c, dtype) for a, c in zip(x, y)]
    else:
        x = [round_to(v, dtype) for v in rng.normal(0, 100, 16).tolist()]
        y = [round_to(v, dtype) for v in rng.normal(0, 1, 16).tolist()]
        expected = [round_to(a + c, dtype) for a, c in zip(x, y)]
    got = run(lambda b, p, q: b.binary(Op.ADD, p, q), x, y, dtypes=[dtype, dtype])
    assert got.dtype == dtype.numpy
    assert got.tolist() == expected


def test_pred_arithmetic_and_logic():
    x = np.array([False, True, False, True])
    y = np.array([False, False, True, True])
    ops = (Op.MULTIPLY, Op.SUBTRACT, Op.AND, Op.OR, Op.XOR, Op.MAXIMUM, Op.MINIMUM)
    got = run(lambda b, p, q: b.tuple([b.binary(o, p, q) for o in ops]), x, y)
    a, c = x.tolist(), y.tolist()
    assert [g.tolist() for g in got] == [
        [p and q for p, q in zip(a, c)],
        [p != q for p, q in zip(a, c)],  # i1 subtract wraps: xor
        [p and q for p, q in zip(a, c)],
        [p or q for p, q in zip(a, c)],
        [p != q for p, q in zip(a, c)],
        [p or q for p, q in zip(a, c)],
        [p and q for p, q in zip(a, c)],
    ]


# -- compare, select, clamp ------------------------------------------------------------

PY_COMPARE = {
    Direction.EQ: lambda a, b: a == b,
    Direction.NE: lambda a, b: a != b,
    Direction.LT: lambda a, b: a < b,
    Direction.LE: lambda a, b: a <= b,
    Direction.GT: lambda a, b: a > b,
    Direction.GE: lambda a, b: a >= b,
}


@pytest.mark.parametrize("dtype", [DType.F32, DType.BF16, DType.F16, DType.S32, DType.U8])
def test_compare(dtype):
    if dtype.is_float:  # python floats compare as IEEE: NaN only != anything
        x = [1.0, 2.0, math.nan, math.nan, -0.0, -math.inf, 3.0]
        y = [2.0, 2.0, 1.0, math.nan, 0.0, 1.0, math.inf]
    else:
        x, y = [0, 1, 200, 7, 3], [1, 1, 100, 9, 3]
    ops = list(PY_COMPARE)
    got = run(
        lambda b, p, q: b.tuple([b.compare(p, q, d) for d in ops]), x, y, dtypes=[dtype, dtype]
    )
    for direction, values in zip(ops, got):
        assert values.dtype == np.bool_
        assert values.tolist() == [PY_COMPARE[direction](a, c) for a, c in zip(x, y)], direction


def test_select_and_clamp():
    p = np.array([True, False, True, False])
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    y = np.array([-1.0, -2.0, -3.0, -4.0], dtype=np.float32)
    got = run(lambda b, c, u, v: b.select(c, u, v), p, x, y)
    assert got.tolist() == [1.0, -2.0, 3.0, -4.0]

    def clamps(b, v, lo, hi):
        scalar = b.clamp(b.scalar(-1, DType.S32), v, b.scalar(5, DType.S32))
        return b.tuple([scalar, b.clamp(lo, v, hi)])

    v = np.array([-10, -1, 0, 5, 6, 100], dtype=np.int32)
    lo = np.array([0, 0, 1, 1, 7, 7], dtype=np.int32)
    hi = np.array([3, 3, 3, 9, 9, 9], dtype=np.int32)
    scalar, elementwise = run(clamps, v, lo, hi)
    assert scalar.tolist() == [min(max(e, -1), 5) for e in v.tolist()]
    assert elementwise.tolist() == [min(max(e, a), c) for e, a, c in zip(v, lo, hi)]


# -- convert, bitcast-convert ------------------------------------------------------------

FLOAT_SOURCES = [
    0.0,
    -0.0,
    1.5,
    -1.5,
    2.5,
    -2.7,
    100.25,
    255.9,
    -128.5,
    1e6,
    -1e6,
    3e9,
    -3e9,
    1e20,
    -1e20,
    math.inf,
    -math.inf,
    math.nan,
    65504.0,
    70000.0,
    1e-8,
    1 + 2**-8 + 2**-30,
]
INT_SOURCES = [
    0,
    1,
    -1,
    7,
    127,
    -128,
    255,
    300,
    -300,
    65535,
    70000,
    2**31 - 1,
    -(2**31),
    2**40 + 3,
    -(2**40) - 5,
]


def convert_reference(v, dst: DType):
    if dst is DType.PRED:
        return v != 0  # NaN != 0
    if dst.is_int:
        if isinstance(v, float):  # truncate, saturate, NaN -> 0
            info = np.iinfo(dst.numpy)
            if math.isnan(v):
                return 0
            if math.isinf(v):
                return int(info.min) if v < 0 else int(info.max)
            return min(max(math.trunc(v), int(info.min)), int(info.max))
        return wrap(int(v), dst)
    return round_to(float(v), dst)


def source_values(src: DType) -> list:
    if src is DType.PRED:
        return [False, True]
    if src.is_int:
        return [wrap(v, src) for v in INT_SOURCES]
    return [round_to(v, src) for v in FLOAT_SOURCES]


@pytest.mark.parametrize("dst", BASE_DTYPES, ids=lambda d: d.text)
@pytest.mark.parametrize("src", BASE_DTYPES, ids=lambda d: d.text)
def test_convert(src, dst):
    x = source_values(src)
    got = run(
        lambda b, p: b.tuple([b.add(Op.CONVERT, [p], p.shape.with_dtype(dst))]), x, dtypes=[src]
    )[0]
    assert got.dtype == dst.numpy
    expected = [convert_reference(v, dst) for v in x]
    np.testing.assert_array_equal(got, np.array(expected, dtype=dst.numpy))


def test_convert_float_to_int_saturates():
    x = np.array([3.9, -3.9, 1e10, -1e10, math.nan, math.inf, -math.inf, -0.5])
    got = run(lambda b, p: b.tuple([b.convert(p, DType.S32), b.convert(p, DType.U8)]), x)
    assert got[0].tolist() == [3, -3, 2**31 - 1, -(2**31), 0, 2**31 - 1, -(2**31), 0]
    assert got[1].tolist() == [3, 0, 255, 0, 0, 255, 0, 0]


def test_convert_f64_to_bf16_rounds_once():
    # through f32 this would land on the tie 1 + 2^-8 and round to even (1.0)
    got = run(lambda b, p: b.convert(p, DType.BF16), np.array([1 + 2**-8 + 2**-30]))
    assert got.tolist() == [1 + 2**-7]


def bits_of(v: float, fmt: str, ifmt: str) -> int:
    return struct.unpack(ifmt, struct.pack(fmt, v))[0]


def test_bitcast_convert():
    f = np.array([1.0, -2.5, math.inf, 1e-40], dtype=np.float32)
    as_u32 = run(lambda b, p: b.bitcast_convert(p, DType.U32), f)
    assert as_u32.tolist() == [bits_of(v, "<f", "<I") for v in f.tolist()]
    back = run(lambda b, p: b.bitcast_convert(p, DType.F32), as_u32)
    np.testing.assert_array_equal(back, f)
    as_s64 = run(lambda b, p: b.bitcast_convert(p, DType.S64), np.array([-0.0, 3.25]))
    assert as_s64.tolist() == [bits_of(v, "<d", "<q") for v in (-0.0, 3.25)]
    h = np.array([1.0, -65504.0, 2**-24], dtype=np.float16)
    as_s16 = run(lambda b, p: b.bitcast_convert(p, DType.S16), h)
    assert as_s16.tolist() == [bits_of(v, "<e", "<h") for v in h.tolist()]
    bf = [1.0, -3.0, 2.0**-130]
    as_u16 = run(lambda b, p: b.bitcast_convert(p, DType.U16), bf, dtypes=[DType.BF16])
    assert as_u16.tolist() == [bits_of(v, "<f", "<I") >> 16 for v in bf]
    to_bf16 = run(lambda b, p: b.bitcast_convert(p, DType.BF16), as_u16)
    assert to_bf16.tolist() == bf
    s8 = run(lambda b, p: b.bitcast_convert(p, DType.S8), np.array([0, 127, 128, 255], np.uint8))
    assert s8.tolist() == [0, 127, -128, -1]


# -- data movement ---------------------------------------------------------------------


def loops(dims):
    return itertools.product(*map(range, dims))


def test_broadcast():
    x = np.arange(3, dtype=np.float32)
    got = run(lambda b, p: b.broadcast(p, [1], [2, 3, 4]), x)
    assert got.shape == (2, 3, 4)
    assert all(got[i, j, k] == x[j] for i, j, k in loops((2, 3, 4)))
    y = np.arange(6, dtype=np.int16).reshape(2, 3)
    got = run(lambda b, p: b.broadcast(p, [1, 3], [4, 2, 5, 3]), y)
    assert all(got[i, j, k, m] == y[j, m] for i, j, k, m in loops((4, 2, 5, 3)))
    got = run(lambda b, p: b.broadcast(p, [], [2, 2]), np.float64(7.5))
    assert got.tolist() == [[7.5, 7.5], [7.5, 7.5]]


def test_reshape_and_bitcast():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    flat = [int(x[i, j, k]) for i, j, k in loops((2, 3, 4))]  # row-major order
    got = run(
        lambda b, p: b.tuple(
            [b.reshape(p, [4, 6]), b.add(Op.BITCAST, [p], p.shape.with_dims([6, 2, 2]))]
        ),
        x,
    )
    assert got[0].tolist() == [flat[i * 6 : i * 6 + 6] for i in range(4)]
    assert [int(got[1][i, j, k]) for i, j, k in loops((6, 2, 2))] == flat


def test_transpose():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = run(lambda b, p: b.transpose(p, [2, 0, 1]), x)
    assert got.shape == (4, 2, 3)
    assert all(got[a, c, d] == x[c, d, a] for a, c, d in loops((4, 2, 3)))


def test_slice():
    x = np.arange(35, dtype=np.int64).reshape(5, 7)
    got = run(lambda b, p: b.slice(p, [1, 0], [5, 7], [2, 3]), x)
    rows, cols = range(1, 5, 2), range(0, 7, 3)
    assert got.tolist() == [[int(x[r, c]) for c in cols] for r in rows]


def test_concatenate():
    parts = [np.full((2, n), n, dtype=np.uint16) for n in (1, 3, 2)]
    got = run(lambda b, *ps: b.concatenate(list(ps), 1), *parts)
    assert got.tolist() == [[1, 3, 3, 3, 2, 2]] * 2


def test_pad_with_crop_and_interior():
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    low, high, interior = [-1, 2], [2, -1], [1, 2]
    got = run(lambda b, p: b.pad(p, b.scalar(-1, DType.F32), low, high, interior), x)
    dims = [lo + hi + d + (d - 1) * i for lo, hi, d, i in zip(low, high, x.shape, interior)]
    assert got.shape == tuple(dims)
    for out in loops(dims):
        source = []
        for o, lo, i, d in zip(out, low, interior, x.shape):
            q, r = divmod(o - lo, i + 1)
            source.append(q if r == 0 and 0 <= q < d else None)
        expected = -1 if None in source else x[tuple(source)]
        assert got[out] == expected, out


def test_reverse():
    x = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
    got = run(lambda b, p: b.reverse(p, [0, 2]), x)
    assert all(got[i, j, k] == x[1 - i, j, 3 - k] for i, j, k in loops((2, 3, 4)))


def test_iota_and_constant():
    got = run(
        lambda b: b.tuple(
            [
                b.iota(Shape(DType.S32, (2, 3, 4)), 1),
                b.iota(Shape(DType.BF16, (300,)), 0),
                b.constant(np.array([[1.5, -2.0]]), DType.F16),
            ]
        )
    )
    assert all(got[0][i, j, k] == j for i, j, k in loops((2, 3, 4)))
    assert got[1].tolist() == [round_bf16(float(i)) for i in range(300)]  # 257 -> 256
    assert got[2].dtype == np.float16 and got[2].tolist() == [[1.5, -2.0]]


def test_rng_state_counts_per_instruction():
    """Each rng-get-and-update-state returns its own counter, then adds its delta."""
    module = entry_module(lambda b: b.tuple([b.rng_state(3), b.rng_state(5)]), [])
    firsts = [[list(v) for v in evaluate(module, [])] for _ in range(3)]
    assert firsts == [[[0, 0], [0, 0]], [[3, 0], [5, 0]], [[6, 0], [10, 0]]]
    assert evaluate_constant(module.entry.root.operands[0]) is None  # never a constant


# -- gather -------------------------------------------------------------------------------


def gather_reference(operand: np.ndarray, indices: np.ndarray, g: GatherDims, out_dims):
    """XLA's gather pseudo-code, one output element at a time."""
    if g.index_vector_dim == indices.ndim:
        indices = indices[..., None]
    index_batch_dims = [d for d in range(indices.ndim) if d != g.index_vector_dim]
    batch_positions = [i for i in range(len(out_dims)) if i not in g.offset_dims]
    removed = set(g.collapsed_slice_dims) | set(g.operand_batching_dims)
    offset_operand_dims = [d for d in range(operand.ndim) if d not in removed]
    out = np.zeros(out_dims, dtype=operand.dtype)
    for out_index in loops(out_dims):
        batch = [out_index[p] for p in batch_positions]
        where = list(batch)
        where.insert(g.index_vector_dim, slice(None))
        vector = indices[tuple(where)]
        start = [0] * operand.ndim
        for k, d in enumerate(g.start_index_map):
            start[d] = min(max(int(vector[k]), 0), operand.shape[d] - g.slice_sizes[d])
        for d, index_dim in zip(g.operand_batching_dims, g.start_indices_batching_dims):
            start[d] = batch[index_batch_dims.index(index_dim)]
        full = list(start)
        for k, d in enumerate(offset_operand_dims):
            full[d] += out_index[g.offset_dims[k]]
        out[out_index] = operand[tuple(full)]
    return out


GATHER_CASES = {
    # ONNX Gather(axis=1) with out-of-range indices (clamped)
    "take_axis1": (
        (3, 5, 2),
        np.array([[0, 4], [7, -1]]),
        GatherDims((0, 3), (1,), (1,), 2, (3, 1, 2)),
    ),
    # GatherND: index vectors along the last dim
    "gather_nd": (
        (4, 5, 3),
        np.array([[[0, 1], [3, 4], [2, 2]], [[1, 0], [9, 9], [0, 4]]]),
        GatherDims((2,), (0, 1), (0, 1), 2, (1, 1, 3)),
    ),
    # windows, index vector along dim 0 mapped in reverse, starts clamped
    "windows": (
        (6, 7),
        np.array([[0, 5, 2], [6, 1, -3]]),
        GatherDims((0, 2), (), (1, 0), 0, (2, 3)),
    ),
    # operand batching dims (take_along_axis)
    "batched": (
        (2, 5, 3),
        np.array([[0, 4, 2, 1], [3, 3, 0, 9]]),
        GatherDims((2,), (1,), (1,), 2, (1, 1, 3), (0,), (0,)),
    ),
}


@pytest.mark.parametrize("case", list(GATHER_CASES))
@pytest.mark.parametrize("index_dtype", [np.int32, np.uint8, np.int64])
def test_gather(case, index_dtype, rng):
    operand_dims, indices, dims = GATHER_CASES[case]
    if np.dtype(index_dtype).kind == "u":
        indices = np.abs(indices)
    indices = indices.astype(index_dtype)
    operand = rng.normal(size=operand_dims).astype(np.float32)
    module = entry_module(
        lambda b, o, i: b.gather(o, i, dims),
        [Shape(DType.F32, operand_dims), Shape(DType.from_numpy(index_dtype), indices.shape)],
    )
    out_dims = module.entry.root.shape.dims
    got = evaluate(module, [operand, indices])
    np.testing.assert_array_equal(got, gather_reference(operand, indices, dims, out_dims))


# -- dynamic-slice, dynamic-update-slice ---------------------------------------------------


def clamp_start(value: int, extent: int, size: int) -> int:
    return min(max(value, 0), extent - size)


@pytest.mark.parametrize("index_dtype", [DType.S32, DType.U8, DType.S64, DType.U64])
def test_dynamic_slice_and_update(index_dtype, rng):
    x = rng.integers(-100, 100, (5, 4, 3)).astype(np.int32)
    update = rng.integers(-100, 100, (2, 4, 1)).astype(np.int32)
    sizes = (3, 2, 2)
    shapes = [Shape(DType.S32, x.shape), Shape(DType.S32, update.shape)]
    shapes += [Shape(index_dtype, ())] * 3

    def build(b, p, u, *starts):
        return b.tuple([b.dynamic_slice(p, starts, sizes), b.dynamic_update_slice(p, u, starts)])

    module = entry_module(build, shapes)
    info = np.iinfo(index_dtype.numpy)
    for starts in [(0, 0, 0), (1, 2, 1), (4, 9, 2), (info.min, info.max, 1)]:
        args = [np.array(s, dtype=index_dtype.numpy) for s in starts]
        sliced, updated = evaluate(module, [x, update, *args])
        begin = [clamp_start(int(s), d, n) for s, d, n in zip(starts, x.shape, sizes)]
        for i, j, k in loops(sizes):
            assert sliced[i, j, k] == x[begin[0] + i, begin[1] + j, begin[2] + k]
        begin = [clamp_start(int(s), d, n) for s, d, n in zip(starts, x.shape, update.shape)]
        for i, j, k in loops(x.shape):
            inside = [0 <= v - s < n for v, s, n in zip((i, j, k), begin, update.shape)]
            where = (i - begin[0], j - begin[1], k - begin[2])
            assert updated[i, j, k] == (update[where] if all(inside) else x[i, j, k])


def test_dimension_sizes_of_a_static_program():
    """get-dimension-size gives a static dim's extent (s32); set-dimension-size keeps the
    values (the bounded-dims pass carries the extent)."""

    def build(b, p):
        size = b.get_dimension_size(p, 1)
        return b.tuple([size, b.set_dimension_size(p, b.scalar(2, DType.S32), 0)])

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    size, same = run(build, x)
    assert size.dtype == np.int32 and int(size) == 4
    np.testing.assert_array_equal(same, x)


def test_dynamic_slice_shape_errors():
    f32, s32 = Shape(DType.F32, (4, 4)), Shape(DType.S32, ())
    cases = [
        ([f32, s32], lambda b, x, i: b.dynamic_slice(x, [i], [2, 2]), "needs 2 start indices"),
        ([f32, s32], lambda b, x, i: b.dynamic_slice(x, [i, i], [5, 2]), "size 5 exceeds dim 0"),
        (
            [f32, Shape(DType.F32, ())],
            lambda b, x, i: b.dynamic_slice(x, [i, i], [1, 1]),
            "integers of one dtype",
        ),
        (
            [f32, s32],
            lambda b, x, i: b.dynamic_update_slice(x, b.reshape(x, [16]), [i, i]),
            "dtype and rank",
        ),
        (
            [f32, s32],
            lambda b, x, i: b.dynamic_update_slice(x, b.concatenate([x, x], 0), [i, i]),
            "the update exceeds dim 0",
        ),
    ]
    for shapes, build, match in cases:
        with pytest.raises(ShapeError, match=match):
            entry_module(build, shapes)


# -- scatter -----------------------------------------------------------------------------------


def scatter_reference(operand, indices, updates, s: ScatterDims, combine) -> np.ndarray:
    """XLA's scatter pseudo-code one update element at a time: windows in row-major order
    of the update scatter dims, and a window partly outside the operand skipped."""
    result = operand.copy()
    window = list(s.update_window_dims)
    scatter_dims = [d for d in range(updates.ndim) if d not in window]
    removed = set(s.inserted_window_dims) | set(s.input_batching_dims)
    window_dims = [d for d in range(operand.ndim) if d not in removed]
    index_dims = [d for d in range(indices.ndim) if d != s.index_vector_dim]
    for position in loops([updates.shape[d] for d in scatter_dims]):
        start = [0] * operand.ndim
        for k, d in enumerate(s.scatter_dims_to_operand_dims):
            where = list(position)
            if s.index_vector_dim < indices.ndim:
                where.insert(s.index_vector_dim, k)
            start[d] = int(indices[tuple(where)])
        for d, index_dim in zip(s.input_batching_dims, s.scatter_indices_batching_dims):
            start[d] = position[index_dims.index(index_dim)]
        sizes = [1] * operand.ndim
        for k, d in enumerate(window_dims):
            sizes[d] = updates.shape[window[k]]
        if any(not 0 <= b <= n - z for b, z, n in zip(start, sizes, operand.shape)):
            continue
        for offset in loops([updates.shape[d] for d in window]):
            update_index = [0] * updates.ndim
            for d, v in zip(scatter_dims, position):
                update_index[d] = v
            for d, v in zip(window, offset):
                update_index[d] = v
            target = list(start)
            for d, v in zip(window_dims, offset):
                target[d] += v
            result[tuple(target)] = combine(result[tuple(target)], updates[tuple(update_index)])
    return result


# name -> (operand dims, indices, updates dims, dimension numbers)
SCATTER_CASES = {
    # ONNX ScatterElements(axis=1): batching dim 0, targets along dim 1, repeats
    "elements": (
        (3, 5),
        np.array([[0, 4], [2, 2], [1, 9]]),
        (3, 2),
        ScatterDims((), (1,), (1,), 2, (0,), (0,)),
    ),
    # ONNX ScatterND: index vectors along the last dim, rows of dim 2 as windows
    "nd": (
        (4, 5, 6),
        np.array([[[0, 1], [3, 4], [0, 1]], [[1, 0], [9, 9], [-1, 2]]]),
        (2, 3, 6),
        ScatterDims((2,), (0, 1), (0, 1), 2),
    ),
    # 2-d windows placed by one index into dim 1; windows past the edge are skipped
    "windows": ((6, 7), np.array([0, 4, 5, -1, 2]), (5, 2, 3), ScatterDims((1, 2), (), (1,), 1)),
    # window dims before the scatter dim in the updates, index vector along dim 0
    "vector_dim_0": ((5, 4), np.array([[1, 3, 1]]), (4, 3), ScatterDims((0,), (1,), (1,), 0)),
}

PY_COMBINERS = {
    "add": (lambda b, dt: scalar_reducer(b.module, Op.ADD, dt), lambda a, u: a + u),
    "replace": (lambda b, dt: replacer(b.module, dt), lambda a, u: u),
    "max": (lambda b, dt: scalar_reducer(b.module, Op.MAXIMUM, dt), max),
}


@pytest.mark.parametrize("combiner", list(PY_COMBINERS))
@pytest.mark.parametrize("case", list(SCATTER_CASES))
@pytest.mark.parametrize("index_dtype", [np.int32, np.uint8, np.int64])
def test_scatter(case, combiner, index_dtype, rng):
    operand_dims, indices, updates_dims, dims = SCATTER_CASES[case]
    if np.dtype(index_dtype).kind == "u":
        indices = np.where(indices < 0, 200, indices)
    indices = indices.astype(index_dtype)
    operand = rng.integers(-50, 50, operand_dims).astype(np.int32)
    updates = rng.integers(-50, 50, updates_dims).astype(np.int32)
    make, combine = PY_COMBINERS[combiner]

    def build(b, o, i, u):
        return b.scatter(o, i, u, dims, make(b, DType.S32))

    got = run(build, operand, indices, updates)
    expected = scatter_reference(operand, indices, updates, dims, combine)
    np.testing.assert_array_equal(got, expected)


SCATTER_SHAPE_ERRORS = {
    "updates must have the operand's dtype": ((4, 3), (2, 1), (2, 3, "s32"), ((1,), (0,), (0,), 1)),
    "must add up to the operand's rank": ((4, 3), (2, 1), (2, 3), ((1,), (), (0,), 1)),
    "needs 1 entries": ((4, 3), (2, 1), (2, 3), ((1,), (0,), (0, 1), 1)),
    "non-window dims must equal": ((4, 3), (2, 1), (5, 3), ((1,), (0,), (0,), 1)),
    "update window dim 1 exceeds dim 1": ((4, 3), (2, 1), (2, 4), ((1,), (0,), (0,), 1)),
    "batching dims 0 and 0 differ": ((4, 3), (2, 1), (2,), ((), (1,), (1,), 1, (0,), (0,))),
}


@pytest.mark.parametrize("match", list(SCATTER_SHAPE_ERRORS))
def test_scatter_shape_errors(match):
    operand, indices, updates, dims = SCATTER_SHAPE_ERRORS[match]
    dtype = DType.S32 if updates[-1] == "s32" else DType.F32
    updates = tuple(d for d in updates if d != "s32")
    shapes = [Shape(DType.F32, operand), Shape(DType.S32, indices), Shape(dtype, updates)]

    def build(b, o, i, u):
        return b.scatter(o, i, u, ScatterDims(*dims), scalar_reducer(b.module, Op.ADD, DType.F32))

    with pytest.raises(ShapeError, match=match):
        entry_module(build, shapes)


def test_scatter_float_combiner_rounds_and_general_combiner():
    """bf16 sums round after every update; a combiner numpy cannot map runs per element."""
    operand = np.array([1.0, 256.0, 0.0], np.float64)
    updates = np.array([1.0, 1.0, 1.0, 1.0], np.float64)
    indices = np.array([[1], [1], [0], [1]], np.int32)
    dims = ScatterDims((), (0,), (0,), 1)

    def build(b, o, i, u):
        return b.scatter(o, i, u, dims, scalar_reducer(b.module, Op.ADD, DType.BF16))

    got = run(build, operand, indices, updates, dtypes=[DType.BF16, DType.S32, DType.BF16])
    assert got.tolist() == [2.0, 256.0, 0.0]  # 256 + 1 rounds back to 256 in bf16, thrice

    def twice_plus(b, o, i, u):
        sub = ComputationBuilder(b.module, "twice_plus")
        cur, upd = (sub.parameter(k, Shape(DType.F32, ())) for k in range(2))
        two = sub.broadcast(sub.scalar(2.0, DType.F32), [], [])
        root = sub.binary(Op.ADD, sub.binary(Op.MULTIPLY, cur, two), upd)
        return b.scatter(o, i, u, dims, sub.build(root))

    got = run(twice_plus, operand.astype(np.float32), indices, updates.astype(np.float32))
    assert got.tolist() == [3.0, ((256 * 2 + 1) * 2 + 1) * 2 + 1, 0.0]


# -- sort -----------------------------------------------------------------------------------


def total_order(v, dtype: DType):
    """The order of the comparator() helper, written out: -0.0 == 0.0, NaN above +inf."""
    if dtype.is_float:
        return (1, 0.0) if math.isnan(v) else (0, float(v) + 0.0)
    return (0, int(v))


def sort_rows_reference(keys: np.ndarray, axis: int, dtype: DType, descending: bool):
    """Per row along `axis`: positions in stable sorted order (Python's sorted is stable,
    reverse=True too)."""
    moved = np.moveaxis(keys, axis, -1)
    order = np.empty(moved.shape, dtype=np.int64)
    for row in loops(moved.shape[:-1]):
        values = moved[row].tolist()
        order[row] = sorted(
            range(len(values)), key=lambda k: total_order(values[k], dtype), reverse=descending
        )
    return np.moveaxis(order, -1, axis)


SORT_VALUES = {
    DType.PRED: [True, False, False, True, True],
    DType.F16: [1.5, -0.0, np.nan, 0.0, -np.inf, 1.5, 65504.0, -2.0, np.inf, -np.nan],
    DType.BF16: [1.5, -0.0, np.nan, 0.0, -np.inf, 1.5, 3e38, -2.0, np.inf, -np.nan],
    DType.F32: [1.5, -0.0, np.nan, 0.0, -np.inf, 1.5, 1e-45, -2.0, np.inf, -np.nan],
    DType.F64: [1.5, -0.0, np.nan, 0.0, -np.inf, 1.5, 5e-324, -2.0, np.inf, -np.nan],
}


def sort_values(dtype: DType, rng, dims) -> np.ndarray:
    """Values with ties (and for floats: signed zeros, infinities, NaNs of both signs)."""
    if dtype in SORT_VALUES:
        pool = np.array(SORT_VALUES[dtype], dtype=np.float64 if dtype.is_float else bool)
    else:
        info = np.iinfo(dtype.numpy)
        pool = np.array([info.min, info.max, 0, 1, 3, 3, wrap(-1, dtype)], dtype=dtype.numpy)
    picked = pool[rng.integers(0, len(pool), size=dims)]
    return picked.astype(np.float64 if dtype is DType.BF16 else dtype.numpy)


@pytest.mark.parametrize("direction", [Direction.LT, Direction.GT], ids=lambda d: d.value)
@pytest.mark.parametrize("dtype", BASE_DTYPES, ids=lambda d: d.text)
def test_sort_keys_with_indices(dtype, direction, rng):
    """A TopK-style sort: keys and their iota, along each axis; stable on ties."""
    keys = sort_values(dtype, rng, (4, 9))
    for axis in (0, 1):

        def build(b, k, axis=axis):
            cmp = comparator(b.module, dtype, direction, [DType.S32])
            iota = b.iota(Shape(DType.S32, k.shape.dims), axis)
            return b.sort([k, iota], axis, cmp, is_stable=True)

        got_keys, got_order = run(build, keys, dtypes=[dtype])
        order = sort_rows_reference(keys, axis, dtype, direction is Direction.GT)
        np.testing.assert_array_equal(got_order, order)
        expected = np.take_along_axis(cast_array(keys, dtype), order, axis)
        np.testing.assert_array_equal(got_keys, expected)  # NaN == NaN here


def test_sort_single_operand_3d_and_degenerate():
    x = np.arange(24, dtype=np.int16)[::-1].reshape(2, 3, 4) % 5

    def build(b, p):
        return b.sort([p], 1, comparator(b.module, DType.S16, Direction.LT))

    np.testing.assert_array_equal(run(build, x), np.sort(x, axis=1))
    for dims in [(3, 1), (0, 4), (2, 0)]:
        y = np.ones(dims, np.int16)
        np.testing.assert_array_equal(run(build, y), y)


def lexicographic(b: ComputationBuilder) -> Computation:
    """(a, b) pairs ordered by a, then by b descending: a multi-key comparator."""
    sub = ComputationBuilder(b.module, "lex")
    a0, a1, b0, b1 = (
        sub.parameter(k, Shape(DType.S32 if k < 2 else DType.F32, ())) for k in range(4)
    )
    first = sub.compare(a0, a1, Direction.LT)
    tie = sub.compare(a0, a1, Direction.EQ)
    second = sub.compare(b0, b1, Direction.GT)
    return sub.build(sub.binary(Op.OR, first, sub.binary(Op.AND, tie, second)))


def test_sort_multi_key_comparator(rng):
    a = rng.integers(0, 3, (3, 12)).astype(np.int32)
    v = rng.integers(0, 4, (3, 12)).astype(np.float32)

    def build(b, p, q):
        return b.sort([p, q], 1, lexicographic(b), is_stable=True)

    expected = [
        sorted(zip(a[r].tolist(), v[r].tolist()), key=lambda t: (t[0], -t[1])) for r in range(3)
    ]
    got_a, got_v = run(build, a, v)
    assert [list(zip(ra, rv)) for ra, rv in zip(got_a.tolist(), got_v.tolist())] == expected


@pytest.mark.parametrize("n", [2, 3, 5, 8, 33, 100])
def test_sort_merge_agrees_with_pairwise_sorting(n, rng):
    """The vectorized merge sort (rows padded to a power of two) against Python's sort."""
    by_key = comparator(Module("m"), DType.F16, Direction.GT, [DType.S32])
    rows = [cast_array(rng.integers(-3, 3, (4, n)) / 2, DType.F16), rng.integers(0, 9, (4, n))]
    rows[0][0, ::3] = np.nan
    rows[1] = rows[1].astype(np.int32)
    got = evaluate_dynamic.sort_order(by_key, rows)
    for r in range(4):
        row = [x[r] for x in rows]
        assert got[r].tolist() == evaluate_dynamic.order_by_pairs(by_key, row)


def test_sort_with_a_comparator_numpy_cannot_map():
    """broadcast in the comparator: it is evaluated once per pair instead."""
    x = np.array([3.0, -1.0, 2.0, -5.0, 0.5], np.float32)

    def by_magnitude(b, p):
        sub = ComputationBuilder(b.module, "by_magnitude")
        lhs, rhs = (sub.parameter(k, Shape(DType.F32, ())) for k in range(2))
        one = sub.broadcast(sub.scalar(1.0, DType.F32), [], [])
        keys = [sub.binary(Op.ADD, sub.unary(Op.ABS, side), one) for side in (lhs, rhs)]
        return b.sort([p], 0, sub.build(sub.compare(*keys, Direction.LT)))

    got = run(by_magnitude, x)
    assert got.tolist() == sorted(x.tolist(), key=abs)


def test_sort_by_a_comparator_that_is_no_strict_weak_order_gives_a_permutation():
    """LE (not irreflexive), and LT on floats with NaNs (incomparability not transitive:
    the merge sort's placements collide, so the row is sorted pair by pair instead)."""
    x = np.array([[2, 1, 2, 0, 1, 2]], np.int32)
    got = run(lambda b, p: b.sort([p], 1, _plain(b, DType.S32, Direction.LE)), x)
    assert sorted(got[0].tolist()) == sorted(x[0].tolist())
    y = np.array([[2, np.nan, 1, np.nan, 2, 0]], np.float32)
    got = run(lambda b, p: b.sort([p], 1, _plain(b, DType.F32, Direction.LT)), y)
    assert np.isnan(got).sum() == 2 and sorted(got[~np.isnan(got)]) == [0, 1, 2, 2]


def _plain(b: ComputationBuilder, dtype: DType, direction: Direction) -> Computation:
    """`compare(lhs, rhs, direction)` as it is, without comparator()'s total order."""
    sub = ComputationBuilder(b.module, "plain")
    lhs, rhs = (sub.parameter(k, Shape(dtype, ())) for k in range(2))
    return sub.build(sub.compare(lhs, rhs, direction))


# -- reduce ---------------------------------------------------------------------------------

PY_REDUCERS = {
    Op.ADD: lambda a, b: a + b,
    Op.MULTIPLY: lambda a, b: a * b,
    Op.MAXIMUM: max,
    Op.MINIMUM: min,
}


def reduce_reference(x: np.ndarray, init, dims, fn) -> np.ndarray:
    kept = [d for d in range(x.ndim) if d not in dims]
    out = np.zeros([x.shape[d] for d in kept], dtype=np.float64)
    for index in loops(x.shape):  # row-major: the order a sequential reducer sees
        key = tuple(index[d] for d in kept)
        if all(index[d] == 0 for d in dims):
            out[key] = init
        out[key] = fn(out[key], float(x[index]))
    return out


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("op", list(PY_REDUCERS), ids=lambda o: o.text)
def test_reduce_simple(op, swap, rng):
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)

    def build(b, p):
        reducer = sub_computation(
            b, lambda s, u, v: s.binary(op, *((v, u) if swap else (u, v))), [DType.F32, DType.F32]
        )
        return b.reduce(p, b.scalar(2.0, DType.F32), [2, 0], reducer)

    got = run(build, x)
    assert got.dtype == np.float32 and got.shape == (4,)
    np.testing.assert_allclose(got, reduce_reference(x, 2.0, (0, 2), PY_REDUCERS[op]), rtol=1e-5)


def test_reduce_logic_ints_and_empty():
    x = np.array([[True, False, True], [True, True, True]])

    def build(b, p, q, e):
        logic = [
            b.reduce(p, b.scalar(init, DType.PRED), [1], scalar_reducer(b.module, op, DType.PRED))
            for op, init in ((Op.AND, True), (Op.OR, False))
        ]
        wrapped = b.reduce(
            q, b.scalar(0, DType.S8), [0], scalar_reducer(b.module, Op.ADD, DType.S8)
        )
        empty = b.reduce(
            e, b.scalar(-math.inf, DType.F32), [0], scalar_reducer(b.module, Op.MAXIMUM, DType.F32)
        )
        return b.tuple([*logic, wrapped, empty])

    q = np.array([100, 100, 100], dtype=np.int8)
    got = run(build, x, q, np.zeros((0, 3), dtype=np.float32))
    assert got[0].tolist() == [all(r) for r in x.tolist()]
    assert got[1].tolist() == [any(r) for r in x.tolist()]
    assert got[2].tolist() == wrap(300, DType.S8)
    assert got[3].tolist() == [-math.inf] * 3


def test_reduce_general_reducer_is_applied_in_order():
    # acc * 0.5 + x is no ufunc and depends on the order: the sequential path, row-major
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4) ** 1.5

    def halve_and_add(s, u, v):
        return s.binary(Op.ADD, s.binary(Op.MULTIPLY, u, s.scalar(0.5, DType.F64)), v)

    def build(b, p):
        reducer = sub_computation(b, halve_and_add, [DType.F64, DType.F64])
        return b.reduce(p, b.scalar(1.0, DType.F64), [2, 0], reducer)

    got = run(build, x)
    expected = reduce_reference(x, 1.0, (0, 2), lambda a, c: a * 0.5 + c)
    np.testing.assert_allclose(got, expected, rtol=1e-14)


def test_reduce_variadic_argmax():
    values = np.array([[1, 5, 5, 2], [7, 0, 7, 7], [-1, -3, -2, -1]], dtype=np.float32)

    def argmax_reducer(s, acc_v, acc_i, v, i):
        greater = s.compare(v, acc_v, Direction.GT)
        tie = s.binary(Op.AND, s.compare(v, acc_v, Direction.EQ), s.compare(i, acc_i, Direction.LT))
        take = s.binary(Op.OR, greater, tie)
        return s.tuple([s.select(take, v, acc_v), s.select(take, i, acc_i)])

    def build(b, p):
        reducer = sub_computation(b, argmax_reducer, [DType.F32, DType.S32] * 2)
        index = b.iota(Shape(DType.S32, (3, 4)), 1)
        inits = [b.scalar(-math.inf, DType.F32), b.scalar(0, DType.S32)]
        return b.add(Op.REDUCE, [p, index, *inits], dimensions=(1,), called=(reducer,))

    best, where = run(build, values)
    rows = values.tolist()
    assert best.tolist() == [max(r) for r in rows]
    assert where.tolist() == [r.index(max(r)) for r in rows]  # first occurrence


def test_reduce_bf16_sum():
    x = [round_bf16(1 + i / 64) for i in range(64)]
    got = run(
        lambda b, p: b.reduce(
            p, b.scalar(0, DType.BF16), [0], scalar_reducer(b.module, Op.ADD, DType.BF16)
        ),
        x,
        dtypes=[DType.BF16],
    )
    assert got.dtype == np.float32
    assert abs(float(got) - sum(x)) <= 2**-7 * sum(x)
    assert float(got) == round_bf16(float(got))


# -- reduce-window ------------------------------------------------------------------------------


def reduce_window_reference(x, init, fn, w: Window) -> np.ndarray:
    """StableHLO's definition, one output and one window element at a time: positions in
    padding or base-dilation holes read the init value."""
    out_dims = []
    for i, d in enumerate(x.shape):
        padded = (d - 1) * w.lhs_dilation[i] + 1 + w.pad_low[i] + w.pad_high[i]
        extent = (w.size[i] - 1) * w.rhs_dilation[i] + 1
        out_dims.append(max((padded - extent) // w.stride[i] + 1, 0))
    out = np.zeros(out_dims, dtype=np.float64)
    for o in loops(out_dims):
        acc = init
        for k in loops(w.size):
            source = []
            for i in range(x.ndim):
                p = o[i] * w.stride[i] + k[i] * w.rhs_dilation[i] - w.pad_low[i]
                q, r = divmod(p, w.lhs_dilation[i])
                source.append(q if r == 0 and 0 <= q < x.shape[i] else None)
            acc = fn(acc, init if None in source else float(x[tuple(source)]))
        out[o] = acc
    return out


WINDOW_CASES = {
    "max_pool": (Op.MAXIMUM, -math.inf, Window.make((3, 3), (2, 2), (1, 1), (1, 1))),
    "sum_dilated": (Op.ADD, 0.0, Window.make((2, 3), (1, 2), (-1, 2), (1, 0), (2, 1), (1, 2))),
    "subtract_general": (
        Op.SUBTRACT,
        0.5,
        Window.make((2, 2), (1, 3), (0, 1), (1, 0), (1, 2), (2, 1)),
    ),
}


@pytest.mark.parametrize("case", list(WINDOW_CASES))
def test_reduce_window(case, rng):
    op, init, window = WINDOW_CASES[case]
    x = rng.normal(size=(5, 6))

    def build(b, p):
        reducer = sub_computation(b, lambda s, u, v: s.binary(op, u, v), [DType.F64] * 2)
        return b.reduce_window(p, b.scalar(init, DType.F64), window, reducer)

    fn = {Op.MAXIMUM: max, Op.ADD: lambda a, c: a + c, Op.SUBTRACT: lambda a, c: a - c}[op]
    np.testing.assert_allclose(
        run(build, x), reduce_window_reference(x, init, fn, window), rtol=1e-13
    )


def test_reduce_window_variadic():
    x = np.array([[3.0, 1.0, 4.0, 1.0], [5.0, 9.0, 2.0, 6.0]], dtype=np.float32)
    window = Window.make((1, 2), (1, 2))

    def build(b, p):
        reducer = sub_computation(
            b,
            lambda s, a, m, u, v: s.tuple([s.binary(Op.ADD, a, u), s.binary(Op.MAXIMUM, m, v)]),
            [DType.F32] * 4,
        )
        inits = [b.scalar(0, DType.F32), b.scalar(-math.inf, DType.F32)]
        return b.add(Op.REDUCE_WINDOW, [p, p, *inits], window=window, called=(reducer,))

    sums, maxes = run(build, x)
    assert sums.tolist() == [[4.0, 5.0], [14.0, 8.0]]
    assert maxes.tolist() == [[3.0, 4.0], [9.0, 6.0]]


# -- dot ------------------------------------------------------------------------------------


def dot_reference(lhs, rhs, d: DotDims) -> np.ndarray:
    lhs_free = [i for i in range(lhs.ndim) if i not in d.lhs_batch + d.lhs_contracting]
    rhs_free = [i for i in range(rhs.ndim) if i not in d.rhs_batch + d.rhs_contracting]
    batch = [lhs.shape[i] for i in d.lhs_batch]
    out_dims = batch + [lhs.shape[i] for i in lhs_free] + [rhs.shape[i] for i in rhs_free]
    contract = [lhs.shape[i] for i in d.lhs_contracting]
    out = np.zeros(out_dims, dtype=object)  # exact python sums
    for o in loops(out_dims):
        nb, nl = len(batch), len(lhs_free)
        li, ri = [0] * lhs.ndim, [0] * rhs.ndim
        for k, (a, c) in enumerate(zip(d.lhs_batch, d.rhs_batch)):
            li[a] = ri[c] = o[k]
        for k, a in enumerate(lhs_free):
            li[a] = o[nb + k]
        for k, c in enumerate(rhs_free):
            ri[c] = o[nb + nl + k]
        total = 0
        for cidx in loops(contract):
            for k, (a, c) in enumerate(zip(d.lhs_contracting, d.rhs_contracting)):
                li[a] = ri[c] = cidx[k]
            total += lhs[tuple(li)].item() * rhs[tuple(ri)].item()
        out[o] = total
    return out


DOT_CASES = {
    "matmul": ((3, 4), (4, 5), DotDims((), (), (1,), (0,))),
    "batch_first_contract_first": ((4, 2, 3), (5, 4, 2), DotDims((1,), (2,), (0,), (1,))),
    "two_of_each": ((2, 3, 4, 5), (5, 4, 2, 3, 6), DotDims((0, 2), (2, 1), (1, 3), (3, 0))),
    "outer": ((3,), (2,), DotDims((), (), (), ())),
}


@pytest.mark.parametrize("case", list(DOT_CASES))
def test_dot(case, rng):
    lhs_dims, rhs_dims, dims = DOT_CASES[case]
    lhs = rng.normal(size=lhs_dims).astype(np.float32)
    rhs = rng.normal(size=rhs_dims).astype(np.float32)
    got = run(lambda b, p, q: b.dot(p, q, dims), lhs, rhs)
    expected = dot_reference(lhs.astype(np.float64), rhs.astype(np.float64), dims)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected.astype(np.float64), rtol=1e-5, atol=1e-6)


def test_dot_int8_into_int32_and_bf16():
    lhs = np.array([[127, -128, 100], [5, 6, 7]], dtype=np.int8)
    rhs = np.array([[127, 1], [-128, 2], [100, 3]], dtype=np.int8)
    dims = DotDims((), (), (1,), (0,))
    got = run(lambda b, p, q: b.dot(p, q, dims, DType.S32), lhs, rhs)
    assert got.dtype == np.int32
    assert got.tolist() == dot_reference(lhs, rhs, dims).tolist()
    # bf16: accumulated exactly, rounded once to bf16
    x = [[round_bf16(1 + i / 7 + j / 3) for j in range(8)] for i in range(2)]
    y = [[round_bf16(1 - i / 5 + i * i / 11)] for i in range(8)]
    got = run(lambda b, p, q: b.dot(p, q, dims), x, y, dtypes=[DType.BF16, DType.BF16])
    exact = dot_reference(np.array(x), np.array(y), dims)
    assert got.tolist() == [[round_bf16(float(v[0]))] for v in exact]


# -- convolution --------------------------------------------------------------------------


def conv_reference(lhs, rhs, c: ConvDims, w: Window, feature_groups=1, batch_groups=1):
    """The convolution sum written out per output element, in any dim layout."""
    n = len(c.input_spatial)
    batch = lhs.shape[c.input_batch]
    out_features = rhs.shape[c.kernel_output_feature]
    group_in = rhs.shape[c.kernel_input_feature]
    in_spatial = [lhs.shape[s] for s in c.input_spatial]
    out_spatial = []
    for i, d in enumerate(in_spatial):
        padded = (d - 1) * w.lhs_dilation[i] + 1 + w.pad_low[i] + w.pad_high[i]
        extent = (w.size[i] - 1) * w.rhs_dilation[i] + 1
        out_spatial.append(max((padded - extent) // w.stride[i] + 1, 0))
    out_batch = batch // batch_groups
    group_out = out_features // max(feature_groups, batch_groups)
    out_dims = [0] * (n + 2)
    out_dims[c.output_batch], out_dims[c.output_feature] = out_batch, out_features
    for i, s in enumerate(c.output_spatial):
        out_dims[s] = out_spatial[i]
    out = np.zeros(out_dims)
    for b, o, *pos in loops([out_batch, out_features, *out_spatial]):
        g = o // group_out
        source_batch = b + g * out_batch if batch_groups > 1 else b
        total = 0.0
        for ci in range(group_in):
            feature = g * group_in + ci if feature_groups > 1 else ci
            for k in loops(w.size):
                where = [0] * (n + 2)
                where[c.input_batch], where[c.input_feature] = source_batch, feature
                inside = True
                for i in range(n):
                    p = pos[i] * w.stride[i] + k[i] * w.rhs_dilation[i] - w.pad_low[i]
                    q, r = divmod(p, w.lhs_dilation[i])
                    inside &= r == 0 and 0 <= q < in_spatial[i]
                    where[c.input_spatial[i]] = q
                if inside:
                    kernel = [0] * (n + 2)
                    kernel[c.kernel_output_feature], kernel[c.kernel_input_feature] = o, ci
                    for i in range(n):
                        kernel[c.kernel_spatial[i]] = k[i]
                    total += float(lhs[tuple(where)]) * float(rhs[tuple(kernel)])
        at = [0] * (n + 2)
        at[c.output_batch], at[c.output_feature] = b, o
        for i in range(n):
            at[c.output_spatial[i]] = pos[i]
        out[tuple(at)] = total
    return out


NHWC = ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 1, (2, 3))  # b01f_01io->bf01
CONV_CASES = {
    # name: (lhs dims, rhs dims, dims, window, feature groups, batch groups)
    "nchw_strided_padded": (
        (2, 3, 5, 6),
        (4, 3, 3, 2),
        ConvDims.nchw(2),
        Window.make((3, 2), (2, 1), (1, 2), (0, 1)),
        1,
        1,
    ),
    "nhwc_dilated_cropped": (
        (1, 5, 4, 2),
        (2, 3, 2, 3),
        NHWC,
        Window.make((2, 3), (1, 2), (-1, 1), (2, 0), (2, 1), (1, 2)),
        1,
        1,
    ),
    "depthwise_1d": (
        (2, 4, 7),
        (8, 1, 3),
        ConvDims.nchw(1),
        Window.make((3,), (1,), (1,), (1,)),
        4,
        1,
    ),
    "two_groups_1d": (
        (1, 4, 6),
        (6, 2, 2),
        ConvDims.nchw(1),
        Window.make((2,), (2,), (0,), (1,), (1,), (2,)),
        2,
        1,
    ),
    "batch_groups_1d": (
        (4, 3, 5),
        (6, 3, 2),
        ConvDims.nchw(1),
        Window.make((2,), (1,), (0,), (0,)),
        1,
        2,
    ),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_convolution(case, rng):
    lhs_dims, rhs_dims, dims, window, feature_groups, batch_groups = CONV_CASES[case]
    lhs = rng.normal(size=lhs_dims).astype(np.float32)
    rhs = rng.normal(size=rhs_dims).astype(np.float32)

    def build(b, p, q):
        return b.add(
            Op.CONVOLUTION,
            [p, q],
            window=window,
            conv=dims,
            feature_group_count=feature_groups,
            batch_group_count=batch_groups,
        )

    got = run(build, lhs, rhs)
    expected = conv_reference(lhs, rhs, dims, window, feature_groups, batch_groups)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_convolution_int():
    lhs = np.arange(-6, 6, dtype=np.int8).reshape(1, 2, 6)
    rhs = np.array([[[100, -100], [50, 25]]], dtype=np.int8)
    window = Window.make((2,), (1,), (1,), (0,))
    got = run(lambda b, p, q: b.convolution(p, q, window, ConvDims.nchw(1)), lhs, rhs)
    expected = conv_reference(lhs, rhs, ConvDims.nchw(1), window)
    assert got.tolist() == [[[wrap(int(v), DType.S8) for v in row] for row in expected[0]]]


# -- structure ---------------------------------------------------------------------------------


def test_tuple_get_tuple_element_fusion():
    x = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    y = np.array([2.0, 3.0, 4.0], dtype=np.float32)

    def build(b, p, q):
        body = ComputationBuilder(b.module, "fused")
        u = body.parameter(0, p.shape)
        v = body.parameter(1, q.shape)
        fused = body.build(body.binary(Op.MULTIPLY, body.unary(Op.EXP, u), v))
        call = b.add(Op.FUSION, [p, q], called=(fused,), fusion_kind=FusionKind.LOOP)
        pair = b.tuple([call, b.tuple([q, p])])
        return b.tuple(
            [b.get_tuple_element(pair, 0), b.get_tuple_element(b.get_tuple_element(pair, 1), 1)]
        )

    fused, again = run(build, x, y)
    np.testing.assert_allclose(fused, [math.exp(a) * c for a, c in zip(x, y)], rtol=1e-6)
    np.testing.assert_array_equal(again, x)


def test_evaluate_constant():
    module = Module("m")
    b = ComputationBuilder(module, "entry")
    param = b.parameter(0, Shape(DType.F32, (2, 3)))
    dims = b.constant(np.array([2, 3, 4], dtype=np.int64))
    count = b.reduce(
        dims, b.scalar(1, DType.S64), [0], scalar_reducer(module, Op.MULTIPLY, DType.S64)
    )
    ramp = b.binary(Op.ADD, b.iota(Shape(DType.S64, (3,)), 0), dims)
    tainted = b.reduce(
        param, b.scalar(0, DType.F32), [1], scalar_reducer(module, Op.ADD, DType.F32)
    )
    b.build(b.tuple([count, ramp, tainted]), entry=True)
    assert evaluate_constant(count).tolist() == 24
    assert evaluate_constant(ramp).tolist() == [2, 4, 6]
    assert evaluate_constant(tainted) is None
    assert evaluate_constant(module.entry.root) is None
    # an instruction of a called computation: its own operands decide
    reducer = count.called[0]
    assert evaluate_constant(reducer.root) is None


# -- control flow --------------------------------------------------------------------


def _scalar_computation(module: Module, name: str, params: list, build) -> Computation:
    """A computation of `params` shapes returning `build(builder, *parameters)`."""
    b = ComputationBuilder(module, name)
    return b.build(build(b, *[b.parameter(i, s) for i, s in enumerate(params)]))


def test_while_counts_and_accumulates():
    """state (i, acc, x): acc += x * i while i < n; python's loop is the reference."""
    S32, F32 = DType.S32, DType.F32

    def build(b, x, n):
        tuple_shape = b.tuple([b.scalar(0, S32), x, x, n]).shape
        cond = _scalar_computation(
            b.module,
            "cond",
            [tuple_shape],
            lambda cb, s: cb.compare(
                cb.get_tuple_element(s, 0), cb.get_tuple_element(s, 3), Direction.LT
            ),
        )

        def step(bb, s):
            i, acc, xs, limit = (bb.get_tuple_element(s, k) for k in range(4))
            scaled = bb.binary(Op.MULTIPLY, xs, bb.broadcast(bb.convert(i, F32), [], [3]))
            return bb.tuple(
                [bb.binary(Op.ADD, i, bb.scalar(1, S32)), bb.binary(Op.ADD, acc, scaled), xs, limit]
            )

        body = _scalar_computation(b.module, "body", [tuple_shape], step)
        zeros = b.broadcast(b.scalar(0.0, F32), [], [3])
        loop = b.while_loop(cond, body, b.tuple([b.scalar(0, S32), zeros, x, n]))
        return b.tuple([b.get_tuple_element(loop, 0), b.get_tuple_element(loop, 1)])

    x = np.array([1.0, -2.0, 0.5], np.float32)
    for n in (0, 1, 7):
        count, acc = run(build, x, np.int32(n))
        assert count == n
        np.testing.assert_array_equal(acc, x * sum(range(n)))


def test_while_data_dependent_collatz():
    S32 = DType.S32

    def build(b, n):
        pair = b.tuple([n, b.scalar(0, S32)]).shape
        cond = _scalar_computation(
            b.module,
            "cond",
            [pair],
            lambda cb, s: cb.compare(cb.get_tuple_element(s, 0), cb.scalar(1, S32), Direction.NE),
        )

        def step(bb, s):
            v, steps = bb.get_tuple_element(s, 0), bb.get_tuple_element(s, 1)
            odd = bb.binary(Op.REMAINDER, v, bb.scalar(2, S32))
            is_odd = bb.compare(odd, bb.scalar(1, S32), Direction.EQ)
            up = bb.binary(Op.ADD, bb.binary(Op.MULTIPLY, v, bb.scalar(3, S32)), bb.scalar(1, S32))
            down = bb.binary(Op.DIVIDE, v, bb.scalar(2, S32))
            return bb.tuple(
                [bb.select(is_odd, up, down), bb.binary(Op.ADD, steps, bb.scalar(1, S32))]
            )

        body = _scalar_computation(b.module, "body", [pair], step)
        return b.get_tuple_element(b.while_loop(cond, body, b.tuple([n, b.scalar(0, S32)])), 1)

    def collatz(v: int) -> int:
        steps = 0
        while v != 1:
            v, steps = (3 * v + 1 if v % 2 else v // 2), steps + 1
        return steps

    for v in (1, 6, 27):
        assert run(build, np.int32(v)) == collatz(v)


def test_conditional_pred_and_index():
    F32, S32 = DType.F32, DType.S32
    vec = Shape(F32, (2,))

    def build(b, selector, x, y):
        module = b.module
        branches = [
            _scalar_computation(module, "negate", [vec], lambda bb, p: bb.unary(Op.NEGATE, p)),
            _scalar_computation(module, "double", [vec], lambda bb, p: bb.binary(Op.ADD, p, p)),
            _scalar_computation(module, "keep", [vec], lambda bb, p: p),
        ]
        flag = b.compare(selector, b.scalar(0, S32), Direction.GT)
        on_pred = b.conditional(flag, branches[:2], [x, y])
        on_index = b.conditional(selector, branches, [x, y, x])
        return b.tuple([on_pred, on_index])

    x, y = np.array([1.5, -2.0], np.float32), np.array([3.0, 0.25], np.float32)
    expected_index = {0: -x, 1: y + y, 2: x, -1: x, 3: x, 99: x}  # out of range: the last
    for k, want in expected_index.items():
        on_pred, on_index = run(build, np.int32(k), x, y)
        np.testing.assert_array_equal(on_pred, -x if k > 0 else y + y)
        np.testing.assert_array_equal(on_index, want)


def test_call_evaluates_its_callee():
    F32 = DType.F32
    vec = Shape(F32, (3,))

    def build(b, x, y):
        inner = _scalar_computation(b.module, "inner", [vec], lambda bb, p: bb.unary(Op.EXP, p))
        outer = _scalar_computation(
            b.module,
            "outer",
            [vec, vec],
            lambda bb, p, q: bb.tuple([bb.call(inner, [p]), bb.binary(Op.SUBTRACT, p, q)]),
        )
        both = b.call(outer, [x, y])
        return b.binary(Op.ADD, b.get_tuple_element(both, 0), b.get_tuple_element(both, 1))

    x, y = np.array([0.0, 1.0, -1.0]), np.array([2.0, 0.5, 0.0])
    got = run(build, x, y, dtypes=[F32, F32])
    want = [math.exp(float(a)) + (float(a) - float(c)) for a, c in zip(x, y)]
    np.testing.assert_allclose(got, want, rtol=RTOL[F32])


def test_argument_errors():
    module = entry_module(lambda b, p: b.unary(Op.NEGATE, p), [Shape(DType.F32, (2,))])
    with pytest.raises(ShapeError):
        evaluate(module, [])
    with pytest.raises(ShapeError):
        evaluate(module, [np.zeros(3)])
    got = evaluate(module, [np.array([1.5, 2.0], dtype=np.float64)])  # cast to f32
    assert got.dtype == np.float32 and got.tolist() == [-1.5, -2.0]


def test_every_opcode_is_exercised():
    """Every Op appears in a module evaluated by this file.

    Checked in a child run of the whole file in one process (defined last, this
    test then sees every other test's modules), whatever xdist does here.
    """
    assert set(EVAL_RULES) == set(Op)
    if os.environ.get("AOTC_EVAL_COVERAGE_CHILD"):
        assert EXERCISED == set(Op), set(Op) - EXERCISED
        return
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            __file__,
            "-q",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
        ],
        env=dict(os.environ, AOTC_EVAL_COVERAGE_CHILD="1"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:]
