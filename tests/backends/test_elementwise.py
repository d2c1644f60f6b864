"""Elementwise opcodes, every dtype class, against the evaluator (and numpy spot checks).

One module per (family, dtype) with one output per opcode keeps compiles few.
"""

from __future__ import annotations

import numpy as np
import pytest

from aotc.ir import ComputationBuilder, Direction, DType, Module, Op, Shape
from aotc.ir.ops import BINARY_ELEMENTWISE
from aotc.ir.types import cast_array

FLOATS = [DType.F32, DType.F64, DType.F16, DType.BF16]
INTS = [DType.S8, DType.S16, DType.S32, DType.S64, DType.U8, DType.U16, DType.U32, DType.U64]

FLOAT_UNARY = [
    Op.ABS,
    Op.NEGATE,
    Op.EXP,
    Op.EXPM1,
    Op.LOG,
    Op.LOG1P,
    Op.SQRT,
    Op.RSQRT,
    Op.CBRT,
    Op.TANH,
    Op.LOGISTIC,
    Op.SIN,
    Op.COS,
    Op.TAN,
    Op.ERF,
    Op.FLOOR,
    Op.CEIL,
    Op.ROUND_NEAREST_EVEN,
    Op.ROUND_NEAREST_AFZ,
    Op.SIGN,
    Op.IS_FINITE,
]
FLOAT_BINARY = [
    Op.ADD,
    Op.SUBTRACT,
    Op.MULTIPLY,
    Op.DIVIDE,
    Op.REMAINDER,
    Op.POWER,
    Op.MAXIMUM,
    Op.MINIMUM,
    Op.ATAN2,
]
INT_UNARY = [Op.ABS, Op.NEGATE, Op.SIGN, Op.NOT, Op.POPCNT, Op.CLZ]
INT_BINARY = [op for op in BINARY_ELEMENTWISE if op is not Op.ATAN2]
LIBM_OPS = {
    Op.EXP,
    Op.EXPM1,
    Op.LOG,
    Op.LOG1P,
    Op.CBRT,
    Op.TANH,
    Op.LOGISTIC,
    Op.SIN,
    Op.COS,
    Op.TAN,
    Op.ERF,
    Op.POWER,
    Op.ATAN2,
    Op.RSQRT,
}

# relative tolerance of one result: exact ops are exact, libm may differ by an ulp or
# two of the computing type (f32 for the half types), then rounding may flip one ulp
LIBM_RTOL = {DType.F32: 1e-5, DType.F64: 1e-12, DType.F16: 2e-3, DType.BF16: 1.6e-2}


def special_floats(dtype: DType, shape) -> np.ndarray:
    """Random values with the interesting ones mixed in: ties, zeros, inf, NaN."""
    rng = np.random.default_rng(7)
    values = rng.uniform(-4, 4, size=int(np.prod(shape)))
    specials = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, np.inf, -np.inf, np.nan, 1.0, -1.0]
    values[: len(specials)] = specials
    return cast_array(values.reshape(shape), dtype)


def _multi_output(ops, dtype, arity, extra=()):
    """A module computing every op of `ops` on its parameters, one output each."""
    module = Module("ew")
    b = ComputationBuilder(module, "main")
    shape = Shape(dtype, (4, 8))
    params = [b.parameter(i, shape) for i in range(arity)]
    outputs = {}
    for op in ops:
        instr = b.add(op, params)
        outputs[instr.name] = op
    for make in extra:
        instr, tag = make(b, params)
        outputs[instr.name] = tag
    b.build(b.tuple([i for i in b.computation.instructions if i.name in outputs]), entry=True)
    return module, outputs


def _tolerances(outputs: dict, dtype: DType, exact_rtol=0.0):
    return {
        name: (LIBM_RTOL[dtype] if tag in LIBM_OPS else exact_rtol, 1e-6 if tag in LIBM_OPS else 0)
        for name, tag in outputs.items()
    }


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.text)
def test_float_unary(check, dtype):
    module, outputs = _multi_output(FLOAT_UNARY, dtype, 1)
    x = special_floats(dtype, (4, 8))
    check(module, [x], tolerances=_tolerances(outputs, dtype))


def _compares(b, params):
    return [(b.compare(*params, d), f"compare-{d.value}") for d in Direction]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.text)
def test_float_binary(check, dtype):
    extra = [
        lambda b, p, d=d: (b.compare(p[0], p[1], d), f"compare-{d.value}") for d in Direction
    ] + [
        lambda b, p: (b.select(b.compare(p[0], p[1], Direction.LT), p[0], p[1]), "select"),
        lambda b, p: (b.clamp(p[1], p[0], b.unary(Op.ABS, p[1])), "clamp"),
    ]
    module, outputs = _multi_output(FLOAT_BINARY, dtype, 2, extra)
    x = special_floats(dtype, (4, 8))
    y = np.roll(special_floats(dtype, (4, 8)).reshape(-1), 5).reshape(4, 8)
    check(module, [x, y], tolerances=_tolerances(outputs, dtype))


def _int_inputs(dtype: DType, rng):
    info = np.iinfo(dtype.numpy)
    x = rng.integers(info.min, info.max, size=(4, 8), endpoint=True, dtype=dtype.numpy)
    y = rng.integers(-9 if dtype.is_signed_int else 0, 9, size=(4, 8)).astype(dtype.numpy)
    # division by zero, INT_MIN / -1, small bases for power, shifts past the width
    x.flat[:6] = [info.min, info.max, 0, 1, 3, info.min]
    y.flat[:6] = [-1 if dtype.is_signed_int else 0, 0, 0, 5, 2, 0]
    bits = 8 * dtype.itemsize
    y.flat[6:10] = [bits - 1, bits, bits + 3, 1]
    y.flat[10] = info.max
    x.flat[12:20] = rng.integers(-3 if dtype.is_signed_int else 0, 4, size=8)
    return x, y


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.text)
def test_int_ops(check, rng, dtype):
    extra = [lambda b, p, d=d: (b.compare(p[0], p[1], d), f"cmp{d.value}") for d in Direction]
    extra += [lambda b, p, op=op: (b.add(op, [p[0]]), op) for op in INT_UNARY]
    extra += [lambda b, p: (b.clamp(p[1], p[0], b.unary(Op.ABS, p[0])), "clamp")]
    module, _ = _multi_output(INT_BINARY, dtype, 2, extra)
    x, y = _int_inputs(dtype, rng)
    check(module, [x, y])


def test_int_division_edge_cases_against_c_semantics(compile_module):
    """x/0 = -1, x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0 (no trap), truncation."""
    module = Module("div")
    b = ComputationBuilder(module, "main")
    shape = Shape(DType.S32, (6,))
    x, y = b.parameter(0, shape), b.parameter(1, shape)
    b.build(b.tuple([b.binary(Op.DIVIDE, x, y), b.binary(Op.REMAINDER, x, y)]), entry=True)
    lo = np.iinfo(np.int32).min
    xs = np.array([7, -7, 5, lo, lo, 9], np.int32)
    ys = np.array([2, 2, 0, -1, 1, -4], np.int32)
    quotient, remainder = compile_module(module).run(xs, ys)
    np.testing.assert_array_equal(quotient, [3, -3, -1, lo, lo, -2])
    np.testing.assert_array_equal(remainder, [1, -1, 5, 0, 0, 1])


@pytest.mark.parametrize(
    ("dtype", "divisor", "multiplies"),
    [
        (DType.F32, 1.4142135, True),  # GELU's sqrt(2): times its reciprocal
        (DType.F64, 3.0, True),
        (DType.F32, 1e-40, False),  # subnormal: its reciprocal overflows
        (DType.F32, 3e38, False),  # its reciprocal is subnormal
        (DType.F32, 0.0, False),
        (DType.F16, 3.0, False),  # f16 would round twice
    ],
)
def test_division_by_a_constant(compile_module, dtype, divisor, multiplies):
    """x / c multiplies by 1 / c (rounded once when compiling) where that is within
    1.5 ulp of the quotient, and divides elsewhere."""
    from aotc.backends.cpu import emit_llvm_ir, parse_target
    from aotc.buffers import assign_buffers
    from aotc.passes.dce import DeadCodeElimination
    from aotc.passes.fusion import Fusion

    module = Module("divc")
    b = ComputationBuilder(module, "main")
    shape = Shape(dtype, (64,))
    x = b.parameter(0, shape)
    c = b.broadcast_to(b.scalar(divisor, dtype), shape.dims)
    b.build(b.binary(Op.DIVIDE, x, c), entry=True)
    Fusion().run(module)  # the constant inside the kernel, as every pipeline has it
    DeadCodeElimination().run(module)
    text = emit_llvm_ir(module, assign_buffers(module), "divc", parse_target("host"))
    assert ("fdiv" not in text) == multiplies, text
    xs = np.random.default_rng(3).uniform(-1e3, 1e3, 64).astype(dtype.numpy)
    xs[:4] = [0.0, -0.0, np.inf, 1.0]
    (got,) = compile_module(module).run(xs)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = xs / np.asarray(divisor, dtype.numpy)
    ulp = np.spacing(np.abs(want))
    close = np.abs(got - want) <= 1.5 * ulp
    assert np.all(close | (got == want) | (np.isnan(got) & np.isnan(want))), (got, want)


def test_pred_ops(check, rng):
    extra = [lambda b, p, op=op: (b.add(op, [p[0]]), op) for op in (Op.NOT,)]
    extra += [lambda b, p, d=d: (b.compare(p[0], p[1], d), d) for d in (Direction.EQ, Direction.NE)]
    extra += [lambda b, p: (b.select(p[0], p[1], b.unary(Op.NOT, p[1])), "select")]
    module, _ = _multi_output([Op.AND, Op.OR, Op.XOR, Op.MAXIMUM, Op.MINIMUM], DType.PRED, 2, extra)
    x = rng.random((4, 8)) < 0.5
    y = rng.random((4, 8)) < 0.5
    check(module, [x, y])


def test_float_unary_against_numpy(compile_module):
    """A few ops against numpy directly (not only the evaluator)."""
    module = Module("np")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (12,)))
    ops = [Op.EXP, Op.TANH, Op.ROUND_NEAREST_EVEN, Op.ROUND_NEAREST_AFZ, Op.SIGN, Op.LOGISTIC]
    b.build(b.tuple([b.unary(op, x) for op in ops]), entry=True)
    values = np.array(
        [-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 0.3, -7.0, 20.0, np.nan], np.float32
    )
    got = compile_module(module).run(values)
    expected = [
        np.exp(values),
        np.tanh(values),
        np.rint(values),
        np.array([-3, -2, -1, -0.0, 0, 1, 2, 3, 0, -7, 20, np.nan], np.float32),
        np.array([-1, -1, -1, -0.0, 0, 1, 1, 1, 1, -1, 1, np.nan], np.float32),
        1 / (1 + np.exp(-values)),
    ]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=2e-6, atol=0, equal_nan=True)
    sign = got[4]
    assert np.signbit(sign[3]) and not np.signbit(sign[4])  # sign keeps -0.0 and +0.0


ALL_DTYPES = [DType.PRED, *INTS, *FLOATS]


def _convert_inputs(dtype: DType, rng) -> np.ndarray:
    if dtype.is_float:
        values = special_floats(dtype, (4, 8)).astype(np.float64)
        values.flat[12:20] = [1e10, -1e10, 300.7, -129.5, 65504.0, 70000.0, 255.9, -0.9]
        values.flat[20:24] = [3.0000001, 1 + 2**-9, 1 + 3 * 2**-10, 16777217.0]
        with np.errstate(over="ignore"):  # 1e10 -> inf in f16, on purpose
            return cast_array(values, dtype)
    if dtype is DType.PRED:
        return rng.random((4, 8)) < 0.5
    info = np.iinfo(dtype.numpy)
    values = rng.integers(info.min, info.max, size=(4, 8), endpoint=True, dtype=dtype.numpy)
    specials = [info.min, info.max, 0, 1, 257, 16777217, 2**53 + 1]
    values.flat[:7] = ([v for v in specials if info.min <= v <= info.max] + [0] * 7)[:7]
    return values


@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: d.text)
def test_convert_matrix(check, rng, src):
    """convert from `src` to every dtype: wrapping ints, saturating float->int, rounding."""
    module = Module("cvt")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(src, (4, 8)))
    outputs = [b.add(Op.CONVERT, [x], Shape(dst, (4, 8))) for dst in ALL_DTYPES if dst is not src]
    b.build(b.tuple(outputs), entry=True)
    check(module, [_convert_inputs(src, rng)], rtol=0, atol=0)


BITCASTS = [
    (DType.F32, DType.S32),
    (DType.S32, DType.F32),
    (DType.F32, DType.U32),
    (DType.F64, DType.S64),
    (DType.U64, DType.F64),
    (DType.F16, DType.S16),
    (DType.BF16, DType.U16),
    (DType.U16, DType.F16),
    (DType.S16, DType.BF16),
    (DType.F16, DType.BF16),
    (DType.S8, DType.U8),
]


@pytest.mark.parametrize(
    "src", sorted({s for s, _ in BITCASTS}, key=lambda d: d.text), ids=lambda d: d.text
)
def test_bitcast_convert(check, rng, src):
    module = Module("bc")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(src, (4, 8)))
    dsts = [d for s, d in BITCASTS if s is src]
    b.build(b.tuple([b.bitcast_convert(x, d) for d in dsts]), entry=True)
    if src.is_float:
        value = special_floats(src, (4, 8))
    else:
        value = _convert_inputs(src, rng)
        if src in (DType.U16, DType.S16):  # avoid NaN payloads, which need not survive
            value = (value & 0x3FFF).astype(src.numpy)
    check(module, [value], rtol=0, atol=0)
