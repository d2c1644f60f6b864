"""8- and 4-bit floats (float8 and f4e2m1fn) <-> f32, in integer IR.

Minifloats compute in f32 registers and live in memory as one byte holding
the code.  Both directions are shifts, adds and selects on the bit patterns,
parameterised by the format's `MiniFloat` description (no tables, no
libcalls), and follow ml_dtypes (as the evaluator): f32 -> minifloat rounds
to nearest even, overflow gives inf, NaN, or the largest magnitude for types
with neither.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir.types import MiniFloat

I8 = ir.IntType(8)
I32 = ir.IntType(32)
F32 = ir.FloatType()

F32_ABS_MASK = 0x7FFFFFFF
F32_INF_BITS = 0x7F800000
F32_NAN_BITS = 0x7FC00000
F32_MANTISSA_BITS = 23


def _k(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


def _ones(count: int) -> int:
    return (1 << count) - 1


def decode(b: ir.IRBuilder, fmt: MiniFloat, code: ir.Value) -> ir.Value:
    """The f32 value of an i8 code; bits above the format's width are ignored."""
    width = fmt.magnitude_bits + fmt.signed
    x = b.and_(b.zext(code, I32), _k(_ones(width)))
    if fmt.mantissa_bits == 0:
        return _decode_e8m0(b, x)
    m = fmt.mantissa_bits
    magnitude = b.and_(x, _k(_ones(fmt.magnitude_bits)))
    exponent = b.lshr(magnitude, _k(m))
    # normal: the code's bits moved into place and the exponent rebiased
    normal_bits = b.add(b.shl(magnitude, _k(F32_MANTISSA_BITS - m)), _k((127 - fmt.bias) << 23))
    # subnormal (exponent 0): the mantissa counts units of 2^(1 - bias - m)
    unit = ir.Constant(F32, 2.0 ** (1 - fmt.bias - m))
    subnormal = b.fmul(b.uitofp(magnitude, F32), unit)
    is_subnormal = b.icmp_unsigned("==", exponent, _k(0))
    bits = b.bitcast(b.select(is_subnormal, subnormal, b.bitcast(normal_bits, F32)), I32)
    top_exponent = _ones(fmt.exponent_bits)
    if fmt.has_inf:  # IEEE-style: all-ones exponent is inf (mantissa 0) or NaN
        special = b.icmp_unsigned("==", exponent, _k(top_exponent))
        is_inf = b.icmp_unsigned("==", magnitude, _k(top_exponent << m))
        bits = b.select(special, b.select(is_inf, _k(F32_INF_BITS), _k(F32_NAN_BITS)), bits)
    elif fmt.nan == "ones":
        is_nan = b.icmp_unsigned("==", magnitude, _k(_ones(fmt.magnitude_bits)))
        bits = b.select(is_nan, _k(F32_NAN_BITS), bits)
    sign = b.shl(b.lshr(x, _k(fmt.magnitude_bits)), _k(31))
    bits = b.or_(bits, sign)
    if fmt.nan == "negzero":  # the code of -0 is NaN
        is_nan = b.icmp_unsigned("==", x, _k(1 << fmt.magnitude_bits))
        bits = b.select(is_nan, _k(F32_NAN_BITS), bits)
    return b.bitcast(bits, F32)


def _decode_e8m0(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """f8e8m0fnu: 2^(code - 127); code 0 is the f32 subnormal 2^-127, 0xFF is NaN."""
    bits = b.shl(x, _k(23))
    bits = b.select(b.icmp_unsigned("==", x, _k(0)), _k(1 << 22), bits)
    bits = b.select(b.icmp_unsigned("==", x, _k(0xFF)), _k(F32_NAN_BITS), bits)
    return b.bitcast(bits, F32)


def encode(b: ir.IRBuilder, fmt: MiniFloat, value: ir.Value) -> ir.Value:
    """The i8 code of an f32 value, rounded to nearest even (overflow as the format says)."""
    bits = b.bitcast(value, I32)
    magnitude_f32 = b.and_(bits, _k(F32_ABS_MASK))
    sign = b.lshr(bits, _k(31))
    is_nan = b.icmp_unsigned(">", magnitude_f32, _k(F32_INF_BITS))
    if fmt.mantissa_bits == 0:
        return b.trunc(_encode_e8m0(b, magnitude_f32, sign, is_nan), I8)
    m = fmt.mantissa_bits
    shift = F32_MANTISSA_BITS - m
    # normal results: round the f32 bits at the target's last mantissa bit, ties to even,
    # then rebias the exponent (the f32 exponent field moves down with the mantissa)
    lsb = b.and_(b.lshr(magnitude_f32, _k(shift)), _k(1))
    rounded = b.add(magnitude_f32, b.add(lsb, _k(_ones(shift - 1))))
    normal = b.sub(b.lshr(rounded, _k(shift)), _k((127 - fmt.bias) << m))
    # subnormal results: adding 2^(24 - bias - m) makes the FPU round |x| at the target's
    # subnormal unit (the f32 ulp there); the low bits of the sum count those units
    magic_bits = (127 + 24 - fmt.bias - m) << 23
    magic = b.bitcast(_k(magic_bits), F32)
    summed = b.fadd(b.bitcast(magnitude_f32, F32), magic)
    subnormal = b.sub(b.bitcast(summed, I32), _k(magic_bits))
    is_subnormal = b.icmp_unsigned("<", magnitude_f32, _k((127 + 1 - fmt.bias) << 23))
    magnitude = b.select(is_subnormal, subnormal, normal)
    top = _ones(fmt.magnitude_bits)
    if fmt.has_inf:
        largest, overflow_code = (_ones(fmt.exponent_bits) << m) - 1, _ones(fmt.exponent_bits) << m
    elif fmt.nan == "ones":
        largest, overflow_code = top - 1, top
    else:  # "negzero" handles overflow below; "none" saturates
        largest, overflow_code = top, top
    overflow = b.icmp_unsigned(">", magnitude, _k(largest))
    magnitude = b.select(overflow, _k(overflow_code), magnitude)
    code = b.or_(b.shl(sign, _k(fmt.magnitude_bits)), magnitude)
    if fmt.nan == "negzero":  # no -0; NaN and overflow are the code of -0
        code = b.select(b.icmp_unsigned("==", magnitude, _k(0)), _k(0), code)
        code = b.select(b.or_(is_nan, overflow), _k(1 << fmt.magnitude_bits), code)
    elif fmt.nan == "none":  # ml_dtypes maps NaN to a zero of the opposite sign
        flipped = b.shl(b.xor(sign, _k(1)), _k(fmt.magnitude_bits))
        code = b.select(is_nan, flipped, code)
    else:  # canonical quiet NaN with the input's sign
        quiet = top if fmt.nan == "ones" else (_ones(fmt.exponent_bits) << m) | (1 << (m - 1))
        code = b.select(is_nan, b.or_(b.shl(sign, _k(fmt.magnitude_bits)), _k(quiet)), code)
    return b.trunc(code, I8)


def _encode_e8m0(b: ir.IRBuilder, magnitude_f32, sign, is_nan) -> ir.Value:
    """f8e8m0fnu as ml_dtypes: the nearest power of two, ties up (the f32 subnormals
    above 2^-127 round up to 2^-126); zero, negatives, NaN, inf and overflow -> NaN."""
    subnormal = b.icmp_unsigned("<", magnitude_f32, _k(1 << 23))
    half = b.select(subnormal, _k((1 << 22) - 1), _k(1 << 22))
    code = b.lshr(b.add(magnitude_f32, half), _k(23))
    invalid = b.or_(is_nan, b.icmp_unsigned(">", code, _k(0xFE)))
    invalid = b.or_(invalid, b.icmp_unsigned("!=", sign, _k(0)))
    invalid = b.or_(invalid, b.icmp_unsigned("==", magnitude_f32, _k(0)))
    return b.select(invalid, _k(0xFF), code)
