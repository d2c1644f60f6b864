"""Vectorizable f32 math: exp, expm1, log, log1p, tanh, erf, logistic and pow as straight-line IR.

A libm call in a loop body keeps LLVM's loop vectorizer from vectorizing the loop (and
`llvm.exp.v8f32` only gets split back into `expf` calls), so for f32 each function here
emits range reduction, a polynomial and `select`s for the special cases (NaN, +-inf,
overflow, underflow, denormals, -0): no calls, no branches.  Products feeding sums are
`llvm.fma` where the target has FMA and mul + add elsewhere; the bounds below hold for both.

Polynomials are minimax fits (relative error unless noted) with f32-rounded coefficients;
each table notes its interval and how far the rounded polynomial is from the function.
Each docstring gives the error bound tests/backends/test_vmath.py holds it to, in ulps of
the f32 result, and the largest error measured against a float64 reference over 70M
inputs (every 61st f32 bit pattern), with FMA and without.  f16/bf16 compute through these
at f32 (the rounded result is always one of the two neighbours of the exact value); f64
keeps libm (scalar.py).  pow works in f64 inside (see `pow`).  sin/cos/tan keep libm:
their range reduction for large arguments (Payne-Hanek) is not cheap without branches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from ...ir import Op
from .context import EmitContext
from .lltypes import F32, F64, I32, I64


def _f32(*hex_floats: str) -> tuple[float, ...]:
    return tuple(float.fromhex(h) for h in hex_floats)


LOG2E = float.fromhex("0x1.715476p+0")
# ln 2 = LN2_HI + LN2_LO; LN2_HI has 16 significant bits, so k * LN2_HI is exact for |k| < 2^8
LN2_HI = float.fromhex("0x1.62e4p-1")
LN2_LO = float.fromhex("0x1.7f7d1cp-20")
# x * LOG2E + SHIFTER rounds x / ln 2 to an integer n held in the low mantissa bits
SHIFTER = float.fromhex("0x1.8p+23")
SHIFTER_BITS = 0x4B400000
TWO_THIRDS_BITS = 0x3F2AAAAB  # log's mantissa lies in [2/3, 4/3)
MANTISSA_BITS = 23
EXPONENT_BIAS = 127

# expm1(r) = r + r^2 q(r) on |r| <= ln2/2: 0.004 ulp
EXPM1_Q = _f32(
    "0x1.p-1", "0x1.555554p-3", "0x1.5554f8p-5", "0x1.1112d4p-7", "0x1.6d3a5ep-10", "0x1.9e7c8p-13"
)
# log1p(r) = r + r^2 q(r) on |r| <= 1/3: 0.04 ulp
LOG1P_Q = _f32(
    "-0x1.p-1",
    "0x1.555506p-2",
    "-0x1.fffef4p-3",
    "0x1.99d062p-3",
    "-0x1.559d5p-3",
    "0x1.1ed398p-3",
    "-0x1.f31bd8p-4",
    "0x1.1e77acp-3",
    "-0x1.07f2dap-3",
)
# tanh(x) = x + x z q(z), z = x^2 on |x| <= TANH_SMALL: 0.002 ulp
TANH_Q = _f32(
    "-0x1.555554p-2",
    "0x1.11107ap-3",
    "-0x1.b9f188p-5",
    "0x1.63a55p-6",
    "-0x1.0c5ecep-7",
    "0x1.1a27fep-9",
)
TANH_SMALL = 0.625
TANH_ONE = 9.5  # tanh(x) rounds to 1 from 9.01 on
# erf(x) = x + x p(z), z = x^2 on |x| <= 1: 0.012 ulp
ERF_SMALL_P = _f32(
    "0x1.06eba8p-3",
    "-0x1.81273ep-2",
    "0x1.ce2ce6p-4",
    "-0x1.b7f71ap-6",
    "0x1.53f224p-8",
    "-0x1.a3515ep-11",
    "0x1.4771fcp-14",
)
# erfc(c + t) on |t| <= 0.625 (c = 1.625, x in [1, 2.25]) and |t| <= 0.84375 (c = 3.09375,
# x in [2.25, 3.9375]); absolute error 1.9e-9 and 2.4e-9 (0.03 and 0.04 ulp of erf's 1 - erfc)
ERFC_NEAR_CENTER = 1.625
ERFC_NEAR = _f32(
    "0x1.612d8ap-6",
    "-0x1.499d46p-4",
    "0x1.0bcfc2p-3",
    "-0x1.d66396p-4",
    "0x1.974eaep-5",
    "0x1.18d2dp-9",
    "-0x1.d8b6fap-7",
    "0x1.921a3cp-8",
    "0x1.47f3b4p-11",
    "-0x1.4f4ce6p-10",
    "0x1.09800cp-12",
)
ERFC_FAR_CENTER = 3.09375
ERFC_FAR = _f32(
    "0x1.970d76p-17",
    "-0x1.49d156p-14",
    "0x1.fe3bap-13",
    "-0x1.f32f44p-12",
    "0x1.5767f6p-11",
    "-0x1.5c2cd8p-11",
    "0x1.0c54dep-11",
    "-0x1.40bf12p-12",
    "0x1.020298p-13",
    "-0x1.2af9f2p-17",
    "-0x1.93b1f2p-17",
)
ERF_SPLIT = 2.25
ERF_ONE = 3.9375  # erf(x) rounds to 1 from 3.92 on (erfc < 2^-25)

# exp's clamp: below EXP_LO the result rounds to 0, above EXP_HI it overflows; both keep
# n = round(x / ln 2) within [-150, 128], which the two-step scaling by 2^n handles
EXP_LO = -104.0
EXP_HI = 89.0
EXPM1_LO = -18.0  # expm1(x) rounds to -1 below -17.33

# pow's f64 polynomials (least-squares fits, coefficients in f64).
# log2(m) = s P(s^2), s = (m - 1) / (m + 1), m in [2/3, 4/3) so s^2 <= 0.04: 2^-42 relative
POW_LOG2_P = (
    float.fromhex("0x1.71547652b7e86p+1"),
    float.fromhex("0x1.ec709dcb56667p-1"),
    float.fromhex("0x1.2776bc538d0b1p-1"),
    float.fromhex("0x1.a61e9aebeca7dp-2"),
    float.fromhex("0x1.46f31d6466c95p-2"),
    float.fromhex("0x1.29ca3167d324cp-2"),
)
# 2^f on |f| <= 1/2: 2^-40 relative
POW_EXP2_Q = (
    float.fromhex("0x1.ffffffffff815p-1"),
    float.fromhex("0x1.62e42fef85fe2p-1"),
    float.fromhex("0x1.ebfbdff928600p-3"),
    float.fromhex("0x1.c6b08dd49ec24p-5"),
    float.fromhex("0x1.3b2ab5d0ee01cp-7"),
    float.fromhex("0x1.5d874805b497fp-10"),
    float.fromhex("0x1.430ab9820d72ap-13"),
    float.fromhex("0x1.00daefd48feefp-16"),
    float.fromhex("0x1.61c32dabd42b5p-20"),
)
# t + SHIFTER_F64 rounds an f64 t to an integer held in the low mantissa bits
SHIFTER_F64 = float.fromhex("0x1.8p+52")
SHIFTER_F64_BITS = 0x4338000000000000
F64_MANTISSA_BITS = 52
# x^y = 2^t: the f32 result is 0 below t = -151 and inf from t = 128 on
POW_T_LO = -160.0
POW_T_HI = 130.0


class _Emitter:
    """Builder shorthands on f32/i32 scalars (mul_add, poly and clamp take f64 too), with
    mul_add fused where the target has FMA."""

    def __init__(self, ctx: EmitContext):
        self.ctx = ctx
        self.b = ctx.builder
        self.fused = ctx.target is not None and ctx.target.has_fma
        self.ldexp = ctx.target is not None and ctx.target.has_vector_ldexp

    def f(self, value: float) -> ir.Constant:
        return ir.Constant(F32, value)

    def i(self, value: int) -> ir.Constant:
        return ir.Constant(I32, value)

    def mul_add(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        """x * y + z."""
        if self.fused:
            return self.ctx.intrinsic("llvm.fma", [x, y, z])
        return self.b.fadd(self.b.fmul(x, y), z)

    def poly(self, x: ir.Value, coefficients: Sequence[ir.Value | float]) -> ir.Value:
        """c0 + c1 x + c2 x^2 + ... by Horner's rule (the best rounding, and vector
        throughput hides its latency); float coefficients take x's type."""
        terms = [ir.Constant(x.type, c) if isinstance(c, float) else c for c in coefficients]
        acc = terms[-1]
        for c in reversed(terms[:-1]):
            acc = self.mul_add(acc, x, c)
        return acc

    def abs(self, x: ir.Value) -> ir.Value:
        return self.ctx.intrinsic("llvm.fabs", [x])

    def copysign(self, magnitude: ir.Value, sign: ir.Value) -> ir.Value:
        return self.ctx.intrinsic("llvm.copysign", [magnitude, sign])

    def clamp(self, x: ir.Value, lo: float, hi: float) -> ir.Value:
        """x limited to [lo, hi] (in x's type); NaN stays NaN (ordered compares are false for
        it)."""
        b = self.b
        low, high = ir.Constant(x.type, lo), ir.Constant(x.type, hi)
        x = b.select(b.fcmp_ordered("<", x, low), low, x)
        return b.select(b.fcmp_ordered(">", x, high), high, x)

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n for an i32 n in [-126, 127]."""
        biased = self.b.add(n, self.i(EXPONENT_BIAS))
        return self.b.bitcast(self.b.shl(biased, self.i(MANTISSA_BITS)), F32)

    def is_equal(self, x: ir.Value, value: float) -> ir.Value:
        return self.b.fcmp_ordered("==", x, self.f(value))


# -- exp family ---------------------------------------------------------------


def _exp_reduce(m: _Emitter, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(n, r, r_low): x = n ln2 + r + r_low, n = round(x / ln2) as i32, |r| <= ln2/2 (plus
    rounding) and r_low the rounding error of r."""
    b = m.b
    shifted = m.mul_add(x, m.f(LOG2E), m.f(SHIFTER))
    n_float = b.fsub(shifted, m.f(SHIFTER))
    n = b.sub(b.bitcast(shifted, I32), m.i(SHIFTER_BITS))
    # Cody-Waite: n LN2_HI is exact and close to x (Sterbenz), so r_high is exact
    r_high = m.mul_add(n_float, m.f(-LN2_HI), x)
    r = m.mul_add(n_float, m.f(-LN2_LO), r_high)
    r_low = m.mul_add(n_float, m.f(-LN2_LO), b.fsub(r_high, r))
    return n, r, r_low


def _offset_exp(
    m: _Emitter, offset: ir.Value, r: ir.Value, r_low: ir.Value, offset_low: ir.Value | None
) -> ir.Value:
    """(offset + offset_low) + expm1(r + r_low), for |r| <= ln2/2 and offset = 0 or
    |offset| >= 1/2, with one rounding that matters: offset + r is split exactly into its
    sum and error (Fast2Sum), the small terms join the error, and the sum absorbs them last.
    """
    b = m.b
    total = b.fadd(offset, r)
    error = b.fsub(r, b.fsub(total, offset))
    if offset_low is not None:
        error = b.fadd(error, offset_low)
    low = b.fadd(error, m.mul_add(r_low, r, r_low))  # expm1(r + r_low) ~ expm1(r) + r_low e^r
    return b.fadd(total, m.mul_add(b.fmul(r, r), m.poly(r, EXPM1_Q), low))


def _scale(m: _Emitter, x: ir.Value, n: ir.Value) -> ir.Value:
    """x * 2^n for n in [-252, 254], rounded once: `llvm.ldexp` where the target has it
    as one vector instruction (AVX-512's vscalefps); elsewhere two factors, so that
    neither overflows and a denormal result is rounded in the second product only."""
    b = m.b
    if m.ldexp:
        return m.ctx.intrinsic("llvm.ldexp", [x, n])
    half = b.ashr(n, m.i(1))
    return b.fmul(b.fmul(x, m.pow2(half)), m.pow2(b.sub(n, half)))


def exp(ctx: EmitContext, x: ir.Value) -> ir.Value:
    """e^x for f32 x; at most 1 ulp (measured over every f32 input: 0.982 with FMA,
    with and without vscalefps; 0.952 without FMA).

    Cheaper than expm1's form (no compensation of r's rounding, no Fast2Sum): e^r is
    near 1, so 1 + expm1(r) rounded once stays within 1 ulp, and the scaling by 2^n is
    one instruction where the target has one.  Softmax and logistic spend most of
    their time here."""
    m = _Emitter(ctx)
    n, r, _ = _exp_reduce(m, m.clamp(x, EXP_LO, EXP_HI))
    # NaN: the clamp keeps it and it propagates through r
    b = m.b
    assert b is not None  # inside a kernel
    tail = m.mul_add(b.fmul(r, r), m.poly(r, EXPM1_Q), r)
    return _scale(m, b.fadd(m.f(1.0), tail), n)


def expm1(ctx: EmitContext, x: ir.Value) -> ir.Value:
    """e^x - 1 for f32 x; at most 1.5 ulp (0.94 measured).

    expm1(x) = 2^n (expm1(r) + (1 - 2^-n)), the sum rounded once (see `_offset_exp`).
    """
    m = _Emitter(ctx)
    b = m.b
    n, r, r_low = _exp_reduce(m, m.clamp(x, EXPM1_LO, EXP_HI))
    # 2^-n for n <= 126; for larger n, 1 - 2^-n is 1 to far below an ulp
    minus_n = b.select(b.icmp_signed(">", n, m.i(126)), m.i(-126), b.neg(n))
    power = m.pow2(minus_n)
    offset = b.fsub(m.f(1.0), power)
    offset_low = b.fsub(b.fsub(m.f(1.0), offset), power)  # -2^-n where 1 - 2^-n rounds to 1
    result = _scale(m, _offset_exp(m, offset, r, r_low, offset_low), n)
    return b.select(m.is_equal(x, 0.0), x, result)  # keeps -0


def logistic(ctx: EmitContext, x: ir.Value) -> ir.Value:
    """1 / (1 + e^-x) for f32 x; at most 3 ulp (2.3 measured), denormal results included.

    Computed from e = e^-|x| <= 1 as 1 / (1 + e) or e / (1 + e), so no term overflows and
    tiny results (x < -87) come out as e^x's denormals, not 0.
    """
    m = _Emitter(ctx)
    b = m.b
    e = exp(ctx, b.fneg(m.abs(x)))
    numerator = b.select(b.fcmp_ordered(">=", x, m.f(0.0)), m.f(1.0), e)
    return b.fdiv(numerator, b.fadd(m.f(1.0), e))


def tanh(ctx: EmitContext, x: ir.Value) -> ir.Value:
    """tanh of f32 x; at most 2 ulp (1.31 measured).

    |x| <= 0.625: an odd polynomial; beyond: 1 - 2 / (e^2|x| + 1) (|x| clamped at 9.5,
    where it has rounded to 1) with the sign of x.
    """
    m = _Emitter(ctx)
    b = m.b
    a = m.abs(x)
    z = b.fmul(a, a)
    small = m.mul_add(b.fmul(a, z), m.poly(z, TANH_Q), a)
    n, r, r_low = _exp_reduce(m, b.fmul(m.clamp(a, 0.0, TANH_ONE), m.f(2.0)))
    e = b.fmul(_offset_exp(m, m.f(1.0), r, r_low, None), m.pow2(n))  # normal: 2|x| <= 19
    large = b.fsub(m.f(1.0), b.fdiv(m.f(2.0), b.fadd(e, m.f(1.0))))
    # NaN fails the compare and propagates through the large branch; copysign keeps -0
    return m.copysign(b.select(b.fcmp_ordered("<=", a, m.f(TANH_SMALL)), small, large), x)


def erf(ctx: EmitContext, x: ir.Value) -> ir.Value:
    """erf of f32 x; at most 1.5 ulp (1.18 measured).

    |x| <= 1: x + x p(x^2); beyond: 1 - erfc(|x|) with erfc a polynomial around the
    center of [1, 2.25] or [2.25, 3.9375] (coefficients chosen per lane by select; |x|
    clamped at 3.9375, where erf has rounded to 1), with the sign of x.
    """
    m = _Emitter(ctx)
    b = m.b
    a = m.abs(x)
    small = m.mul_add(a, m.poly(b.fmul(a, a), ERF_SMALL_P), a)
    near = b.fcmp_ordered("<", a, m.f(ERF_SPLIT))
    pick = [b.select(near, m.f(c), m.f(d)) for c, d in zip(ERFC_NEAR, ERFC_FAR, strict=True)]
    center = b.select(near, m.f(ERFC_NEAR_CENTER), m.f(ERFC_FAR_CENTER))
    t = b.fsub(m.clamp(a, 0.0, ERF_ONE), center)
    large = b.fsub(m.f(1.0), m.poly(t, pick))
    # NaN fails the compare and propagates through the large branch; copysign keeps -0
    return m.copysign(b.select(b.fcmp_ordered("<=", a, m.f(1.0)), small, large), x)


# -- log family ---------------------------------------------------------------


def _log_parts(m: _Emitter, u: ir.Value, k_offset: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(hi, lo) with log(u 2^k_offset) ~ hi + lo for a positive normal finite u.

    u = 2^k m, m in [2/3, 4/3); the log is (k + k_offset) ln2 + log1p(r), r = m - 1 exact.
    hi = (k + k_offset) LN2_HI + r, lo its rounding error and the small terms.
    """
    b = m.b
    bits = b.bitcast(u, I32)
    k = b.ashr(b.sub(bits, m.i(TWO_THIRDS_BITS)), m.i(MANTISSA_BITS))
    mantissa = b.bitcast(b.sub(bits, b.shl(k, m.i(MANTISSA_BITS))), F32)
    r = b.fsub(mantissa, m.f(1.0))
    k_float = b.sitofp(b.add(k, k_offset), F32)
    # Fast2Sum: |k LN2_HI| >= |r| unless k = 0, where the sum is exact anyway
    k_ln2 = b.fmul(k_float, m.f(LN2_HI))
    hi = b.fadd(k_ln2, r)
    error = b.fsub(r, b.fsub(hi, k_ln2))
    small = m.mul_add(b.fmul(r, r), m.poly(r, LOG1P_Q), error)
    return hi, m.mul_add(k_float, m.f(LN2_LO), small)


def _log_specials(m: _Emitter, x: ir.Value, zero_at: float, result: ir.Value) -> ir.Value:
    """log-like results at the edges: NaN below `zero_at` and for NaN, -inf at it, +inf at
    +inf."""
    b = m.b
    inf = float("inf")
    result = b.select(m.is_equal(x, inf), m.f(inf), result)
    result = b.select(m.is_equal(x, zero_at), m.f(-inf), result)
    return b.select(b.fcmp_unordered("<", x, m.f(zero_at)), m.f(float("nan")), result)


def log(ctx: EmitContext, x: ir.Value) -> ir.Value:
    """Natural log of f32 x; at most 1 ulp (0.89 measured), denormal x included."""
    m = _Emitter(ctx)
    b = m.b
    # denormals: scale into the normal range first
    tiny = b.fcmp_ordered("<", x, m.f(2.0**-126))
    u = b.select(tiny, b.fmul(x, m.f(2.0**MANTISSA_BITS)), x)
    hi, lo = _log_parts(m, u, b.select(tiny, m.i(-MANTISSA_BITS), m.i(0)))
    result = b.fadd(hi, lo)
    return _log_specials(m, x, 0.0, result)


def log1p(ctx: EmitContext, x: ir.Value) -> ir.Value:
    """log(1 + x) for f32 x; at most 1.5 ulp (0.94 measured).

    u = 1 + x rounds; log1p(x) = log(u) + c / u with c = (1 + x) - u from a TwoSum.
    """
    m = _Emitter(ctx)
    b = m.b
    one = m.f(1.0)
    u = b.fadd(one, x)
    # TwoSum: the exact rounding error of 1 + x, whichever operand is larger
    back = b.fsub(u, one)
    error = b.fadd(b.fsub(one, b.fsub(u, back)), b.fsub(x, back))
    hi, lo = _log_parts(m, u, m.i(0))
    result = b.fadd(hi, b.fadd(lo, b.fdiv(error, u)))
    result = _log_specials(m, x, -1.0, result)
    return b.select(m.is_equal(x, 0.0), x, result)  # keeps -0


# -- pow ------------------------------------------------------------------------


def _log2_f64(m: _Emitter, a: ir.Value) -> ir.Value:
    """log2(a) in f64 (2^-42 relative) for a positive finite f32 a, denormals included.

    a = 2^k mantissa, mantissa in [2/3, 4/3) split off in f32 (exact); only the polynomial
    runs in f64, so no i64 -> f64 conversion (none packed before AVX-512) is needed.
    """
    b = m.b
    tiny = b.fcmp_ordered("<", a, m.f(2.0**-126))
    u = b.select(tiny, b.fmul(a, m.f(2.0**MANTISSA_BITS)), a)
    bits = b.bitcast(u, I32)
    k = b.ashr(b.sub(bits, m.i(TWO_THIRDS_BITS)), m.i(MANTISSA_BITS))
    mantissa = b.bitcast(b.sub(bits, b.shl(k, m.i(MANTISSA_BITS))), F32)
    k = b.add(k, b.select(tiny, m.i(-MANTISSA_BITS), m.i(0)))
    wide = b.fpext(mantissa, F64)
    one = ir.Constant(F64, 1.0)
    s = b.fdiv(b.fsub(wide, one), b.fadd(wide, one))  # both exact
    return m.mul_add(s, m.poly(b.fmul(s, s), POW_LOG2_P), b.sitofp(k, F64))


def _exp2_f64(m: _Emitter, t: ir.Value) -> ir.Value:
    """2^t in f64 (2^-40 relative) for t in [-1022, 1023]: 2^f by a polynomial, |f| <= 1/2,
    times 2^n added into the exponent bits (the result stays normal)."""
    b = m.b
    shifter = ir.Constant(F64, SHIFTER_F64)
    shifted = b.fadd(t, shifter)
    f = b.fsub(t, b.fsub(shifted, shifter))  # exact
    n = b.sub(b.bitcast(shifted, I64), ir.Constant(I64, SHIFTER_F64_BITS))
    power = b.shl(n, ir.Constant(I64, F64_MANTISSA_BITS))
    return b.bitcast(b.add(b.bitcast(m.poly(f, POW_EXP2_Q), I64), power), F64)


def pow(ctx: EmitContext, x: ir.Value, y: ir.Value) -> ir.Value:
    """x^y for f32 x, y with C's powf special cases; at most 0.51 ulp (0.5002 measured over
    15M pairs: random bits, results across the whole f32 range, x near 1 with huge |y|).

    |x|^y = 2^t, t = y log2|x|, in f64 (as glibc's powf): the relative error before the one
    rounding to f32 is about 2^-35 at most, for every |t| that does not over- or underflow, so the
    result is within 0.5 + 2^-11 ulp (denormal results included: f64 holds them exactly).
    An exact half-way case may round either way (x^2 of 3 * 2^-75 = 4.5 * 2^-149).
    """
    m = _Emitter(ctx)
    b = m.b
    inf = float("inf")
    a = m.abs(x)
    # log2 of 0 and inf: t = y log2|x| is then +-inf (NaN for y = 0, replaced below)
    log2 = _log2_f64(m, a)
    log2 = b.select(m.is_equal(a, 0.0), ir.Constant(F64, -inf), log2)
    log2 = b.select(m.is_equal(a, inf), ir.Constant(F64, inf), log2)
    t = m.clamp(b.fmul(b.fpext(y, F64), log2), POW_T_LO, POW_T_HI)
    magnitude = b.fptrunc(_exp2_f64(m, t), F32)
    magnitude = b.select(m.is_equal(a, 1.0), m.f(1.0), magnitude)  # 1 for y = +-inf too
    # y's parity: an integer whose half is not one (|y| >= 2^24 and +-inf count as even)
    is_integer = b.fcmp_ordered("==", ctx.intrinsic("llvm.floor", [y]), y)
    half = b.fmul(y, m.f(0.5))
    is_odd = b.and_(is_integer, b.fcmp_ordered("!=", ctx.intrinsic("llvm.floor", [half]), half))
    sign_set = b.icmp_signed("<", b.bitcast(x, I32), m.i(0))  # -0 and -inf included
    result = b.select(b.and_(sign_set, is_odd), b.fneg(magnitude), magnitude)
    finite_negative = b.and_(b.fcmp_ordered("<", x, m.f(0.0)), b.fcmp_ordered(">", x, m.f(-inf)))
    result = b.select(b.and_(finite_negative, b.not_(is_integer)), m.f(float("nan")), result)
    result = b.select(b.fcmp_unordered("uno", x, y), b.fadd(x, y), result)
    return b.select(b.or_(m.is_equal(x, 1.0), m.is_equal(y, 0.0)), m.f(1.0), result)


F32_BINARY: dict[Op, Callable[[EmitContext, ir.Value, ir.Value], ir.Value]] = {Op.POWER: pow}

F32_UNARY: dict[Op, Callable[[EmitContext, ir.Value], ir.Value]] = {
    Op.EXP: exp,
    Op.EXPM1: expm1,
    Op.LOG: log,
    Op.LOG1P: log1p,
    Op.TANH: tanh,
    Op.ERF: erf,
    Op.LOGISTIC: logistic,
}
