"""The 8- and 4-bit floats and the 4- and 2-bit integers in the evaluator.

References: ml_dtypes for the codes (the library onnx and JAX share), and a
rounding written out here from each format's parameters (frexp/ldexp, Python's
round-half-even) for ties, subnormals, overflow and single rounding from f64.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from aotc.ir import ComputationBuilder, DType, Module, Op, Shape
from aotc.ir.evaluate import evaluate
from aotc.ir.types import MINIFLOATS, SUB_BYTE_INTS, MiniFloat, cast_array, to_storage

SIGNED_MINIFLOATS = [dt for dt, fmt in MINIFLOATS.items() if fmt.signed]
ML_DTYPES = {
    DType.F8E4M3FN: ml_dtypes.float8_e4m3fn,
    DType.F8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    DType.F8E5M2: ml_dtypes.float8_e5m2,
    DType.F8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    DType.F8E8M0FNU: ml_dtypes.float8_e8m0fnu,
    DType.F4E2M1FN: ml_dtypes.float4_e2m1fn,
}
INT_RANGES = {DType.S4: (-8, 7), DType.U4: (0, 15), DType.S2: (-2, 1), DType.U2: (0, 3)}


def run(build, *args: np.ndarray, dtypes: list[DType]):
    module = Module("narrow")
    b = ComputationBuilder(module, "main")
    params = [b.parameter(i, Shape(dt, np.shape(a))) for i, (dt, a) in enumerate(zip(dtypes, args))]
    b.build(build(b, *params), entry=True)
    return evaluate(module, [np.asarray(a, dt.numpy) for a, dt in zip(args, dtypes)])


def largest(fmt: MiniFloat) -> float:
    """The largest finite magnitude, from the layout."""
    top_exponent = (1 << fmt.exponent_bits) - 1
    if fmt.has_inf:  # IEEE: the top exponent is reserved
        return (2 - 2.0**-fmt.mantissa_bits) * 2.0 ** (top_exponent - 1 - fmt.bias)
    if fmt.nan == "ones":  # only the all-ones mantissa of the top exponent is NaN
        return (2 - 2.0 ** (1 - fmt.mantissa_bits)) * 2.0 ** (top_exponent - fmt.bias)
    return (2 - 2.0**-fmt.mantissa_bits) * 2.0 ** (top_exponent - fmt.bias)


def reference_round(v: float, dtype: DType) -> float:
    """`v` rounded once to a signed minifloat: nearest, ties to even, non-saturating."""
    fmt = MINIFLOATS[dtype]
    m = fmt.mantissa_bits
    if math.isnan(v):
        # without NaN: ml_dtypes' zero of the opposite sign
        return math.nan if fmt.nan != "none" else -math.copysign(0.0, v)
    if math.isinf(v) or v == 0:
        rounded = v
    else:
        quantum = max(math.frexp(v)[1] - 1 - m, 1 - fmt.bias - m)
        # round() gives an int: copysign keeps the sign of a result rounded to 0
        rounded = math.copysign(math.ldexp(round(math.ldexp(v, -quantum)), quantum), v)
    if abs(rounded) > largest(fmt):
        if fmt.has_inf:
            return math.copysign(math.inf, v)
        return math.nan if fmt.nan != "none" else math.copysign(largest(fmt), v)
    if rounded == 0 and fmt.nan == "negzero":
        return 0.0  # no -0
    return rounded


def representable(dtype: DType) -> np.ndarray:
    """Every finite value of `dtype`, ascending."""
    codes = np.arange(1 << dtype.bits, dtype=np.uint8)
    values = codes.view(ML_DTYPES[dtype]).astype(np.float64)
    return np.unique(values[np.isfinite(values)])


def same(got, expected) -> bool:
    """Equal values, NaN where NaN, and the same sign of zero."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    both_nan = np.isnan(got) & np.isnan(expected)
    equal = (got == expected) & (np.signbit(got) == np.signbit(expected))
    return bool(np.all(both_nan | equal))


# -- minifloats ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(MINIFLOATS), ids=lambda d: d.text)
def test_every_code_decodes_and_encodes_back(dtype):
    bits = dtype.bits
    codes = np.arange(1 << bits, dtype=np.uint8)
    carrier = DType.U8 if bits == 8 else DType.U4

    def build(b, c):
        values = b.convert(b.bitcast_convert(c, dtype), DType.F32)
        back = b.bitcast_convert(b.convert(values, dtype), carrier)
        return b.tuple([values, back])

    values, back = run(build, codes, dtypes=[carrier])
    expected = codes.view(ML_DTYPES[dtype]).astype(np.float32)
    assert same(values, expected)
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(back[finite], codes[finite])
    nan_codes = set(back[~finite].tolist())
    assert len(nan_codes) <= 2  # one canonical NaN (per sign)


@pytest.mark.parametrize("dtype", SIGNED_MINIFLOATS, ids=lambda d: d.text)
def test_rounding_ties_subnormals_and_overflow(dtype):
    grid = representable(dtype)
    midpoints = (grid[1:] + grid[:-1]) / 2
    ulp = np.diff(grid)
    limit = largest(MINIFLOATS[dtype])
    values = np.concatenate(
        [
            grid,
            midpoints,
            midpoints + ulp / 64,
            midpoints - ulp / 64,
            midpoints + 2.0**-40 * np.abs(midpoints),  # f64-only offsets: must round once
            [
                limit * 1.03,
                limit * 1.07,
                -limit * 1.1,
                1e30,
                -1e30,
                math.inf,
                -math.inf,
                math.nan,
                0.0,
                -0.0,
                1e-30,
                -1e-30,
            ],
        ]
    )
    expected = [reference_round(v, dtype) for v in values.tolist()]
    from_f64 = run(lambda b, x: b.convert(x, dtype), values, dtypes=[DType.F64])
    assert same(from_f64, expected)
    # from f32: every value except the f64-only offsets is an f32 (the rest round twice)
    f32_values = values[np.asarray(values, np.float32).astype(np.float64) == values]
    from_f32 = run(lambda b, x: b.convert(x, dtype), f32_values, dtypes=[DType.F32])
    assert same(from_f32, [reference_round(v, dtype) for v in f32_values.tolist()])


@pytest.mark.parametrize("dtype", list(MINIFLOATS), ids=lambda d: d.text)
def test_f32_rounding_matches_ml_dtypes(dtype):
    bits = np.random.default_rng(8).integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    halves = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
    values = np.concatenate([bits.view(np.float32), halves])
    got = run(lambda b, x: b.convert(x, dtype), values, dtypes=[DType.F32])
    with np.errstate(invalid="ignore", over="ignore"):
        expected = values.astype(ML_DTYPES[dtype]).astype(np.float32)
    assert same(got, expected)


def test_e8m0_powers_of_two():
    values = np.array([1.0, 1.5, 3.0, 0.75, 2.0**-127, 2.0**127, 0.0, -1.0, np.inf, np.nan])
    got = run(lambda b, x: b.convert(x, DType.F8E8M0FNU), values, dtypes=[DType.F32])
    # ties go up (away from zero) as in ml_dtypes; no zero, no sign: those are NaN
    nan = math.nan
    assert same(got, [1.0, 2.0, 4.0, 1.0, 2.0**-127, 2.0**127, nan, nan, nan, nan])


def test_minifloat_arithmetic_rounds_each_result():
    x = np.array([448.0, 1.0, 0.125, -3.0])
    y = np.array([32.0, 0.0625, 0.0078125, -0.5])
    dt = DType.F8E4M3FN
    got = run(
        lambda b, p, q: b.tuple([b.binary(Op.ADD, p, q), b.binary(Op.MULTIPLY, p, q)]),
        x,
        y,
        dtypes=[dt, dt],
    )
    assert same(got[0], [reference_round(a + c, dt) for a, c in zip(x, y)])
    assert same(got[1], [reference_round(a * c, dt) for a, c in zip(x, y)])


@pytest.mark.parametrize("dtype", SIGNED_MINIFLOATS, ids=lambda d: d.text)
def test_minifloat_limits(dtype):
    low, high = dtype.limits
    if MINIFLOATS[dtype].has_inf:
        assert (low, high) == (-math.inf, math.inf)
    else:
        assert (low, high) == (-largest(MINIFLOATS[dtype]), largest(MINIFLOATS[dtype]))


# -- sub-byte integers ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", sorted(SUB_BYTE_INTS, key=lambda d: d.text), ids=str)
def test_sub_byte_int_converts(dtype):
    low, high = INT_RANGES[dtype]
    assert dtype.limits == (low, high)
    floats = np.array([0.0, 1.9, -1.9, 2.5, 100.0, -100.0, math.inf, -math.inf, math.nan])
    ints = np.arange(-20, 21, dtype=np.int32)

    def build(b, f, i):
        return b.tuple(
            [b.convert(f, dtype), b.convert(i, dtype), b.convert(b.convert(i, dtype), DType.F32)]
        )

    from_float, from_int, back = run(build, floats, ints, dtypes=[DType.F64, DType.S32])
    # float -> int truncates toward zero and saturates, NaN -> 0 (XLA)
    whole = [0 if math.isnan(v) else math.trunc(v) if math.isfinite(v) else v for v in floats]
    expected = [min(max(v, low), high) for v in whole]
    assert from_float.tolist() == expected
    # int -> narrower int keeps the low bits, read in the narrow type
    width = dtype.bits
    wrapped = [(v - low) % (1 << width) + low for v in ints.tolist()]
    assert from_int.tolist() == wrapped
    assert back.tolist() == wrapped


def test_sub_byte_int_arithmetic_wraps():
    x = np.array([7, -8, 5, -1], np.int8)
    y = np.array([1, -1, 5, -8], np.int8)
    s4 = DType.S4
    ops = (Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.MAXIMUM)
    got = run(lambda b, p, q: b.tuple([b.binary(op, p, q) for op in ops]), x, y, dtypes=[s4, s4])

    def wrap(v: int) -> int:
        return (v + 8) % 16 - 8

    a, c = x.tolist(), y.tolist()
    assert got[0].tolist() == [wrap(p + q) for p, q in zip(a, c)]
    assert got[1].tolist() == [wrap(p - q) for p, q in zip(a, c)]
    assert got[2].tolist() == [wrap(p * q) for p, q in zip(a, c)]
    assert got[3].tolist() == [max(p, q) for p, q in zip(a, c)]


def test_bitcast_convert_between_4_bit_types():
    codes = np.arange(16, dtype=np.uint8)

    def build(b, u):
        s = b.bitcast_convert(u, DType.S4)
        f = b.bitcast_convert(u, DType.F4E2M1FN)
        return b.tuple([s, f, b.bitcast_convert(s, DType.U4), b.bitcast_convert(f, DType.U4)])

    s, f, u_from_s, u_from_f = run(build, codes, dtypes=[DType.U4])
    assert s.tolist() == [v - 16 if v >= 8 else v for v in range(16)]
    assert same(f, codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32))
    assert u_from_s.tolist() == list(range(16))
    assert u_from_f.tolist() == list(range(16))


def test_storage_is_one_byte_per_element():
    assert to_storage(np.array([-8, 7, -1], np.int8), DType.S4).tolist() == [-8, 7, -1]
    assert to_storage(np.array([1.5, -448.0], np.float32), DType.F8E4M3FN).tolist() == [
        0x3C,
        0xFE,
    ]
    assert cast_array(np.array([300, -9]), DType.S4).tolist() == [-4, 7]
    assert all(dt.itemsize == 1 for dt in [*MINIFLOATS, *SUB_BYTE_INTS])
