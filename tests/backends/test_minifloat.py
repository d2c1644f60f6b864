"""Compiled minifloat (float8, f4e2m1fn) and sub-byte integer code against the evaluator.

The evaluator itself is checked against ml_dtypes and a written-out rounding
in tests/ir/test_narrow_types.py; here codes are compared bit for bit (as
bitcast-converted integers) and values with NaN where NaN.
"""

from __future__ import annotations

import numpy as np

from aotc.ir import ComputationBuilder, Direction, DType, Module, Op, Shape, scalar_reducer
from aotc.ir.types import MINIFLOATS, SUB_BYTE_INTS, cast_array

SUB_BYTE = sorted(SUB_BYTE_INTS, key=lambda d: d.text)


def carrier(dtype: DType) -> DType:
    """The unsigned integer type of the same width, to compare codes exactly."""
    return DType.U8 if dtype.bits == 8 else DType.U4


def f32_samples() -> np.ndarray:
    """Every f16 value (as f32), random f32 bit patterns and the special values."""
    halves = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
    bits = np.random.default_rng(3).integers(0, 2**32, 30000, dtype=np.uint64).astype(np.uint32)
    specials = np.array(
        [
            0x7F800000,
            0xFF800000,
            0x7FC00000,
            0xFFC00000,
            0x7F800001,
            1,
            0x80000001,
            0x00400000,
            0x00400001,
            0x7F7FFFFF,
        ],
        np.uint32,
    )
    return np.concatenate([halves, bits.view(np.float32), specials.view(np.float32)])


def test_minifloat_encode_and_decode(check):
    x = f32_samples()
    module = Module("mini")
    b = ComputationBuilder(module, "main")
    p = b.parameter(0, Shape(DType.F32, x.shape))
    codes = b.parameter(1, Shape(DType.U8, (256,)))
    outputs = []
    for dtype in MINIFLOATS:
        narrow = b.convert(p, dtype)
        outputs += [b.bitcast_convert(narrow, carrier(dtype)), b.convert(narrow, DType.F32)]
        source = codes if dtype.bits == 8 else b.convert(codes, DType.U4)
        outputs.append(b.convert(b.bitcast_convert(source, dtype), DType.F32))
    b.build(b.tuple(outputs), entry=True)
    check(module, [x, np.arange(256, dtype=np.uint8)], rtol=0, atol=0)


def test_minifloat_round_once_from_f64_and_wide_ints(check):
    rng = np.random.default_rng(5)
    # midpoints of e4m3 and e5m2 values nudged by amounts only f64 holds, and big integers
    base = cast_array(rng.uniform(-500, 500, 64), DType.F8E4M3FN).astype(np.float64)
    wide = np.concatenate(
        [
            base * (1 + 2.0**-4) + 2.0**-35,
            base * (1 + 2.0**-3) - 2.0**-33,
            rng.normal(0, 1e4, 64),
            [1e300, -1e300, 2.0**-1070],
        ]
    )
    ints = np.concatenate([rng.integers(-(2**40), 2**40, 64), [2**25 + 1, 3 * 2**24 + 1]])
    module = Module("once")
    b = ComputationBuilder(module, "main")
    f = b.parameter(0, Shape(DType.F64, wide.shape))
    i = b.parameter(1, Shape(DType.S64, ints.shape))
    outputs = []
    for dtype in MINIFLOATS:
        for source in (f, i):
            outputs.append(b.bitcast_convert(b.convert(source, dtype), carrier(dtype)))
    b.build(b.tuple(outputs), entry=True)
    check(module, [wide, ints.astype(np.int64)], rtol=0, atol=0)


def test_minifloat_arithmetic_and_reduce(check):
    rng = np.random.default_rng(9)
    dtype = DType.F8E4M3FN
    x = cast_array(rng.uniform(-20, 20, (6, 16)), dtype)
    y = cast_array(rng.uniform(-3, 3, (6, 16)), dtype)
    module = Module("arith")
    b = ComputationBuilder(module, "main")
    p, q = (b.parameter(k, Shape(dtype, (6, 16))) for k in range(2))
    outputs = [b.binary(op, p, q) for op in (Op.ADD, Op.MULTIPLY, Op.DIVIDE, Op.MAXIMUM)]
    outputs.append(b.compare(p, q, Direction.LT))
    outputs.append(b.reduce(p, b.scalar(0.0, dtype), [1], scalar_reducer(module, Op.ADD, dtype)))
    outputs.append(b.convert(p, DType.F16))
    b.build(b.tuple(outputs), entry=True)
    check(module, [x, y], rtol=0, atol=0)


def test_sub_byte_int_converts(check):
    floats = np.array(
        [
            0.0,
            1.9,
            -1.9,
            2.5,
            7.5,
            -8.5,
            100.0,
            -100.0,
            np.inf,
            -np.inf,
            np.nan,
            15.2,
            3.0,
            -3.0,
            0.5,
            -0.5,
        ],
        np.float32,
    )
    ints = np.arange(-40, 40, 5, dtype=np.int32)
    module = Module("subbyte")
    b = ComputationBuilder(module, "main")
    f = b.parameter(0, Shape(DType.F32, floats.shape))
    i = b.parameter(1, Shape(DType.S32, ints.shape))
    outputs = []
    for dtype in SUB_BYTE:
        from_float, from_int = b.convert(f, dtype), b.convert(i, dtype)
        outputs += [from_float, from_int, b.convert(from_int, DType.F32)]
        outputs += [b.convert(from_int, DType.S64), b.convert(from_int, DType.PRED)]
    b.build(b.tuple(outputs), entry=True)
    check(module, [floats, ints], rtol=0, atol=0)


def test_sub_byte_int_arithmetic(check):
    rng = np.random.default_rng(2)
    module = Module("subarith")
    b = ComputationBuilder(module, "main")
    inputs, outputs = [], []
    for k, dtype in enumerate(SUB_BYTE):
        low, high = dtype.limits
        for _ in range(2):
            inputs.append(rng.integers(low, high, 32, endpoint=True).astype(dtype.numpy))
        p = b.parameter(2 * k, Shape(dtype, (32,)))
        q = b.parameter(2 * k + 1, Shape(dtype, (32,)))
        ops = (Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.DIVIDE, Op.REMAINDER, Op.MAXIMUM, Op.MINIMUM)
        outputs += [b.binary(op, p, q) for op in ops]
        outputs += [b.compare(p, q, Direction.LT), b.unary(Op.NEGATE, p), b.unary(Op.ABS, p)]
        outputs.append(b.bitcast_convert(p, DType.U4 if dtype.bits == 4 else DType.U2))
    outputs.append(b.bitcast_convert(b.parameter(8, Shape(DType.U4, (16,))), DType.F4E2M1FN))
    outputs.append(b.bitcast_convert(b.parameter(9, Shape(DType.F4E2M1FN, (16,))), DType.S4))
    b.build(b.tuple(outputs), entry=True)
    codes = np.arange(16, dtype=np.uint8)
    f4 = codes.view(MINIFLOATS[DType.F4E2M1FN].ml_dtype).astype(np.float32)
    check(module, [*inputs, codes, f4], rtol=0, atol=0)
