"""Vector math (backends/llvm/vmath.py): accuracy against numpy in float64, and vectorization.

Accuracy is measured in ulps of the float32 result (the spacing of f32 numbers at the exact
value, 2^-149 for denormals), over a strided sweep of all f32 bit patterns, dense samples of
each function's working range, the f32 numbers around its thresholds and the special values.
"""

from __future__ import annotations

import math
import platform
import re

import numpy as np
import pytest

from aotc.backends.cpu import emit_llvm_ir, parse_target
from aotc.backends.cpu.codegen import optimized_module
from aotc.buffers import assign_buffers
from aotc.ir import ComputationBuilder, DType, Module, Op, Shape

_erf = np.frompyfunc(math.erf, 1, 1)

# float64 references and the largest error allowed, in f32 ulps (measured maxima over 70M
# inputs, with and without FMA, are in vmath's docstrings)
REFERENCE = {
    Op.EXP: (np.exp, 1.0),
    Op.EXPM1: (np.expm1, 1.5),
    Op.LOG: (np.log, 1.0),
    Op.LOG1P: (np.log1p, 1.5),
    Op.TANH: (np.tanh, 2.0),
    Op.ERF: (lambda x: _erf(x).astype(np.float64), 1.5),
    Op.LOGISTIC: (lambda x: 1.0 / (1.0 + np.exp(-x)), 3.0),
}
FUNCTIONS = list(REFERENCE)

# where each function changes formula or its result changes regime
THRESHOLDS = [
    0.0,
    2.0**-126,
    2.0**-24,
    0.3466,
    0.625,
    0.6931,
    1.0,
    4.0 / 3.0,
    2.0 / 3.0,
    2.25,
    3.92,
    3.9375,
    9.01,
    9.5,
    17.33,
    18.0,
    87.336,
    88.7228,
    103.97,
    104.0,
]
SPECIALS = [
    0.0,
    -0.0,
    np.inf,
    -np.inf,
    np.nan,
    1.0,
    -1.0,
    2.0**-149,
    -(2.0**-149),
    2.0**-126 * 0.75,
    2.0**-126,
    3.4028235e38,
    -3.4028235e38,
    88.72283935546875,
    88.72284,
    -87.33654,
    -103.97208,
    -103.972084,
    -1.0 + 2.0**-24,
    1e-30,
    -1e-30,
]

X86 = platform.machine() in ("x86_64", "AMD64")


def sweep_inputs() -> np.ndarray:
    """f32 inputs: every 4099th bit pattern, dense samples, threshold neighbours, specials."""
    rng = np.random.default_rng(0)
    strided = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    dense = [rng.uniform(-lim, lim, 200_000) for lim in (1.0, 5.0, 20.0, 110.0)]
    around = []
    for t in THRESHOLDS:
        for v in (t, -t):
            center = np.float32(v).view(np.int32)
            around.append((center + np.arange(-512, 513, dtype=np.int32)).view(np.float32))
    values = [strided, *(d.astype(np.float32) for d in dense), *around]
    return np.concatenate([*values, np.array(SPECIALS, np.float32)])


def ulp_error(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in ulps of f32 at `exact`; NaN must meet NaN and inf the overflowed
    value exactly (inf error otherwise)."""
    got = got.astype(np.float64)
    error = np.zeros(exact.shape)
    nan_got, nan_exact = np.isnan(got), np.isnan(exact)
    error[nan_got != nan_exact] = np.inf
    rounded = exact.astype(np.float32).astype(np.float64)  # +-inf where f32 overflows
    infinite = (np.isinf(got) | np.isinf(rounded)) & ~nan_got & ~nan_exact
    error[infinite & (got != rounded)] = np.inf
    finite = ~(nan_got | nan_exact | infinite)
    _, exponent = np.frexp(np.abs(exact[finite]))
    ulp = np.ldexp(1.0, np.maximum(exponent, -125) - 24)
    error[finite] = np.abs(got[finite] - exact[finite]) / ulp
    return error


def unary_module(dtype: DType, n: int) -> Module:
    """One parameter of n elements, one output per function."""
    module = Module("vm")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(dtype, (n,)))
    b.build(b.tuple([b.unary(op, x) for op in FUNCTIONS]), entry=True)
    return module


def _check_bound(op: Op, x: np.ndarray, got: np.ndarray, exact: np.ndarray, bound: float):
    errors = ulp_error(got, exact)
    i = int(np.argmax(errors))
    message = f"{op.text}: {errors[i]:.3f} ulp at x={x[i]!r}: got {got[i]!r}, exact {exact[i]!r}"
    assert errors[i] <= bound, message


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@pytest.mark.parametrize(
    "target",
    ["host", "x86_64:x86-64-v2", "x86_64:x86-64-v3"],
    ids=["host", "no-fma", "fma-no-ldexp"],
)
def test_f32_accuracy(compile_module, target):
    if target == "host" and not parse_target("host").has_fma:
        pytest.skip("the host has no FMA: the v2 case covers mul + add")
    x = sweep_inputs()
    outputs = compile_module(unary_module(DType.F32, x.size), target=target).run(x)
    with np.errstate(all="ignore"):  # NaN inputs, overflowing references
        wide = x.astype(np.float64)
        for op, got in zip(FUNCTIONS, outputs, strict=True):
            reference, bound = REFERENCE[op]
            _check_bound(op, x, got, reference(wide), bound)


def test_signed_zero_and_tiny_inputs(compile_module):
    """Odd functions and the -1 variants keep -0 and return denormal inputs unchanged."""
    x = np.array([-0.0, 0.0, 2.0**-149, -(2.0**-149), 2.0**-130, -(2.0**-127)], np.float32)
    got = dict(zip(FUNCTIONS, compile_module(unary_module(DType.F32, x.size)).run(x)))
    for op in (Op.EXPM1, Op.LOG1P, Op.TANH):
        np.testing.assert_array_equal(got[op], x, err_msg=op.text)
        assert np.array_equal(np.signbit(got[op]), np.signbit(x)), op.text
    assert np.signbit(got[Op.ERF][0]) and not np.signbit(got[Op.ERF][1])
    np.testing.assert_array_equal(got[Op.EXP], np.ones_like(x))
    np.testing.assert_array_equal(got[Op.LOGISTIC], np.full_like(x, 0.5))
    np.testing.assert_array_equal(got[Op.LOG][:2], [-np.inf, -np.inf])


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16], ids=lambda d: d.text)
def test_half_types_exhaustive(compile_module, dtype):
    """Every f16/bf16 input: the result is one of the two neighbours of the exact value."""
    from aotc.ir.types import from_storage

    bits = np.arange(1 << 16, dtype=np.uint16)
    x = from_storage(bits, dtype)  # f16 as float16, bf16 as float32 rounded to bf16
    outputs = compile_module(unary_module(dtype, x.size)).run(x)
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64)
        for op, got in zip(FUNCTIONS, outputs, strict=True):
            exact = REFERENCE[op][0](wide)
            below, above = _half_neighbours(exact, dtype)
            got64 = got.astype(np.float64)
            ok = (got64 == below) | (got64 == above) | (np.isnan(got64) & np.isnan(exact))
            bad = np.flatnonzero(~ok)
            assert bad.size == 0, (
                f"{op.text}({wide[bad[0]]!r}) = {got64[bad[0]]!r}, exact {exact[bad[0]]!r}"
            )


def _half_neighbours(exact: np.ndarray, dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    """The nearest values of `dtype` at or below and at or above each exact value."""
    from aotc.ir.types import cast_array

    nearest = cast_array(exact, dtype).astype(np.float64)
    narrow = np.float16 if dtype is DType.F16 else None
    if narrow is not None:
        down = np.nextafter(nearest.astype(narrow), narrow(-np.inf)).astype(np.float64)
        up = np.nextafter(nearest.astype(narrow), narrow(np.inf)).astype(np.float64)
    else:  # bf16: step the f32 bit pattern by one bf16 ulp (1 << 16)
        pattern = nearest.astype(np.float32).view(np.int32).astype(np.int64)
        step = np.where(nearest >= 0, 1 << 16, -(1 << 16))
        up_bits = np.where(nearest >= 0, pattern + step, pattern - step)
        down_bits = np.where(nearest >= 0, pattern - step, pattern + step)
        up = _from_bits(up_bits, nearest)
        down = _from_bits(down_bits, nearest)
    below = np.where(nearest <= exact, nearest, down)
    above = np.where(nearest >= exact, nearest, up)
    return below, above


def _from_bits(bits: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        values = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isfinite(fallback), values, fallback)


# -- vectorization ---------------------------------------------------------------


def _single(op: Op) -> Module:
    module = Module("vm")
    b = ComputationBuilder(module, "main")
    b.build(b.unary(op, b.parameter(0, Shape(DType.F32, (1024,)))), entry=True)
    return module


def _kernel_asm(op: Op, target: str) -> str:
    module = _single(op)
    parsed, machine = optimized_module(module, assign_buffers(module), "vm", parse_target(target))
    return machine.emit_assembly(parsed)


@pytest.mark.parametrize("op", FUNCTIONS, ids=lambda op: op.text)
def test_avx2_kernels_use_ymm_and_no_calls(op):
    asm = _kernel_asm(op, "x86_64:x86-64-v3")
    assert re.search(r"\tvfmadd\d+ps\t.*%ymm", asm), "no packed 256-bit FMA"
    calls = set(re.findall(r"\bcall[lq]?\s+(\S+)", asm))
    # no libm: the loop body is inline (calls only among the model's functions and to the
    # aotc runtime's thread pool)
    assert all(c.startswith(("vm", "aotc_")) for c in calls), calls


def test_avx512_exp_scales_with_vscalef():
    """AVX-512 scales by 2^n in one instruction (rounded once, denormals included)."""
    assert parse_target("x86_64:x86-64-v4").has_vector_ldexp
    assert not parse_target("x86_64:x86-64-v3").has_vector_ldexp  # ldexpf calls there
    asm = _kernel_asm(Op.EXP, "x86_64:x86-64-v4")
    assert re.search(r"\tvscalefps\t.*%zmm", asm), "no packed vscalefps"
    assert "ldexp" not in asm


def test_sse_kernel_uses_packed_xmm_ops():
    asm = _kernel_asm(Op.EXP, "x86_64:x86-64-v2")
    assert re.search(r"\tmulps\t.*%xmm", asm) and re.search(r"\taddps\t.*%xmm", asm)
    assert "ymm" not in asm and "fma" not in asm  # v2 has neither AVX nor FMA


@pytest.mark.parametrize("op", FUNCTIONS, ids=lambda op: op.text)
def test_neon_kernels_vectorize(op):
    module = _single(op)
    text = emit_llvm_ir(module, assign_buffers(module), "vm", parse_target("aarch64"))
    assert "<4 x float>" in text
    assert "@llvm.fma.v4f32" in text  # aarch64 always has FMA


def test_fma_only_where_the_target_has_it():
    module = _single(Op.TANH)
    plan = assign_buffers(module)
    with_fma = emit_llvm_ir(module, plan, "vm", parse_target("x86_64:x86-64-v3"))
    without = emit_llvm_ir(module, plan, "vm", parse_target("x86_64:x86-64-v2"))
    assert "@llvm.fma" in with_fma
    assert "fma" not in without


# -- pow ----------------------------------------------------------------------------

POW_BOUND = 0.51  # ulps; vmath.pow rounds an f64 value good to 2^-35 (0.5002 measured)
POW_GRID = [
    0.0,
    2.0**-149,
    2.0**-130,
    1.0,
    0.5,
    2.0,
    3.0,
    np.inf,
    2.0**24,
    2.0**24 + 2,
    2.0**24 - 1,
    0.75,
    1e-38,
    3e38,
]


def pow_module(dtype: DType, n: int) -> Module:
    module = Module("vm")
    b = ComputationBuilder(module, "main")
    x, y = (b.parameter(i, Shape(dtype, (n,))) for i in range(2))
    b.build(b.binary(Op.POWER, x, y), entry=True)
    return module


def exact_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C's pow in float64: the reference value, special cases included."""
    with np.errstate(all="ignore"):
        return np.power(x.astype(np.float64), y.astype(np.float64))


def _same_bits(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    return (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))


def pow_inputs() -> tuple[np.ndarray, np.ndarray]:
    """(x, y) pairs: random bit patterns; wide-range x with y putting x^y anywhere from
    below the denormals to past overflow; x near 1 with huge |y|; negative x with integer y."""
    rng = np.random.default_rng(0)
    n = 400_000
    bits = rng.integers(0, 1 << 32, (2, n), dtype=np.uint64).astype(np.uint32)
    x_wide = np.exp2(rng.uniform(-149, 128, n)).astype(np.float32)
    log2_x = np.log2(x_wide.astype(np.float64))
    log2_x[log2_x == 0] = 1.0
    y_range = rng.uniform(-155, 130, n) / log2_x  # log2 of the result
    x_near = (1 + rng.uniform(-2e-3, 2e-3, n)).astype(np.float32)
    log2_near = np.log2(x_near.astype(np.float64))
    log2_near[log2_near == 0] = 2.0**-23
    y_near = rng.uniform(-155, 130, n) / log2_near
    x_negative = -np.exp2(rng.uniform(-10, 10, n)).astype(np.float32)
    y_integer = rng.integers(-60, 61, n).astype(np.float64)
    x_small = rng.uniform(-1, 1, n).astype(np.float32)
    y_small = rng.uniform(-8, 8, n)
    xs = [bits[0].view(np.float32), x_wide, x_near, x_negative, x_small]
    ys = [bits[1].view(np.float32), y_range, y_near, y_integer, y_small]
    return (
        np.concatenate(xs).astype(np.float32),
        np.concatenate([y.astype(np.float32) for y in ys]),
    )


@pytest.mark.parametrize("target", ["host", "x86_64:x86-64-v2"], ids=["host", "no-fma"])
def test_pow_special_grid(compile_module, target):
    """All pairs of special values: exact results (NaN, +-inf, +-0, 1, signs, exact powers)
    bitwise as numpy's float32 and float64 pow; the rest within the bound."""
    if target != "host" and not X86:
        pytest.skip("runs x86-64 code")
    grid = np.array([v for g in POW_GRID for v in (g, -g)] + [np.nan], np.float32)
    x, y = (a.ravel() for a in np.meshgrid(grid, grid, indexing="ij"))
    (got,) = compile_module(pow_module(DType.F32, x.size), target=target).run(x, y)
    exact = exact_pow(x, y)
    with np.errstate(all="ignore"):
        rounded = exact.astype(np.float32)
        numpy_f32 = np.power(x, y)
    representable = (rounded.astype(np.float64) == exact) | np.isnan(exact)
    # numpy's float32 pow is not correctly rounded (SIMD code up to 1 ulp), so only the
    # exact results are compared with it
    for expected in (rounded, numpy_f32):
        bad = np.flatnonzero(representable & ~_same_bits(got, expected))
        assert bad.size == 0, [(x[i], y[i], got[i], expected[i]) for i in bad[:8]]
    _check_bound(Op.POWER, np.stack([x, y], 1), got, exact, POW_BOUND)


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@pytest.mark.parametrize("target", ["host", "x86_64:x86-64-v2"], ids=["host", "no-fma"])
def test_pow_accuracy(compile_module, target):
    if target == "host" and not parse_target("host").has_fma:
        pytest.skip("the host has no FMA: the v2 case covers mul + add")
    x, y = pow_inputs()
    (got,) = compile_module(pow_module(DType.F32, x.size), target=target).run(x, y)
    _check_bound(Op.POWER, np.stack([x, y], 1), got, exact_pow(x, y), POW_BOUND)


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16], ids=lambda d: d.text)
def test_pow_half_types(compile_module, dtype):
    """f16/bf16 pow computes at f32: the result is one of the two neighbours of the exact
    value."""
    from aotc.ir.types import from_storage

    rng = np.random.default_rng(1)
    bits = rng.integers(0, 1 << 16, (2, 200_000), dtype=np.uint64).astype(np.uint16)
    x, y = from_storage(bits[0], dtype), from_storage(bits[1], dtype)
    (got,) = compile_module(pow_module(dtype, x.size)).run(x, y)
    exact = exact_pow(x, y)
    below, above = _half_neighbours(exact, dtype)
    got64 = got.astype(np.float64)
    ok = (got64 == below) | (got64 == above) | (np.isnan(got64) & np.isnan(exact))
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, f"{x[bad[0]]!r} ** {y[bad[0]]!r} = {got64[bad[0]]!r}, {exact[bad[0]]!r}"


@pytest.mark.parametrize("target", ["x86_64:x86-64-v3", "x86_64:x86-64-v2", "aarch64"])
def test_pow_kernel_vectorizes(target):
    """The elementwise loop is vectorized (packed f32 and the f64 inside) with no pow call."""
    module = pow_module(DType.F32, 1024)
    text = emit_llvm_ir(module, assign_buffers(module), "vm", parse_target(target))
    lanes = {"x86_64:x86-64-v3": 8}.get(target, 4)
    assert f"<{lanes} x float>" in text and f"<{lanes} x double>" in text
    assert not re.search(r"@(llvm\.pow|powf?\b)", text)


def test_pow_f64_keeps_libm():
    module = pow_module(DType.F64, 1024)
    text = emit_llvm_ir(module, assign_buffers(module), "vm", parse_target("x86_64:x86-64-v3"))
    assert "@llvm.pow.v4f64" in text  # llvm.pow, vectorized as calls to pow
