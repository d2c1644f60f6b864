"""Row maximum and minimum in their cheap vector form (backends/llvm/extremum.py): the
results stay exactly the exact form's (NaN wherever a row holds one, +0 above -0 as
llvm.maximum orders them) for every row length, with NaN, infinities and signed zeros
at the head, middle and tail of rows, on each x86-64 level; and softmax rows built on
them match the evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from aotc_testing import hlo_reducer

from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module
from aotc.passes.dce import DeadCodeElimination
from aotc.passes.fusion import Fusion

LENGTHS = (1, 3, 15, 16, 17, 49, 128, 197, 1500)
TARGETS = ["host", "x86_64:x86-64-v3", "x86_64:x86-64-v2"]
NUMPY = {"f32": np.float32, "f64": np.float64}


def _edge_rows(n: int, dtype) -> np.ndarray:
    """Rows that test the cheap form's fix-ups, each special value at the row's first,
    middle and last element (the last one in a vector loop's remainder)."""
    rng = np.random.default_rng(n)
    rows = [rng.normal(size=n), rng.normal(size=n) - 10.0]
    for where in sorted({0, n // 2, n - 1}):
        for special in (np.nan, np.inf, -np.inf, 5.0):
            row = rng.normal(size=n)
            row[where] = special
            rows.append(row)
        negatives = -rng.uniform(1, 2, size=n)
        for zero in (-0.0, 0.0):
            row = negatives.copy()
            row[where] = zero
            rows.append(row)
            rows.append(-row)  # the minimum's case
        mixed = negatives.copy()
        mixed[where], mixed[(where + 1) % n] = -0.0, 0.0
        rows += [mixed, -mixed]
    rows += [np.full(n, -np.inf), np.full(n, np.inf), np.full(n, -0.0), np.full(n, 0.0)]
    return np.array(rows, dtype=dtype)


def _ieee_extremum(x: np.ndarray, op: str) -> np.ndarray:
    """IEEE 754-2019 maximum/minimum along rows: NaN if any, +0 above -0."""
    picked = (np.max if op == "maximum" else np.min)(x, axis=-1)
    zero = picked == 0
    positive_zero = ((x == 0) & ~np.signbit(x)).any(axis=-1)
    negative_zero = ((x == 0) & np.signbit(x)).any(axis=-1)
    sign = ~positive_zero if op == "maximum" else negative_zero
    picked = np.where(zero, np.where(sign, -0.0, 0.0), picked).astype(x.dtype)
    return np.where(np.isnan(x).any(axis=-1), np.nan, picked).astype(x.dtype)


def _extrema_module(dtype: str, rows: dict[int, int]) -> str:
    """max and min along the rows of the negation of one parameter per row length (the
    negation fuses: a reduction of a parameter itself is a pooling kernel's)."""
    params = ", ".join(f"x{n}: {dtype}[{r},{n}]" for n, r in rows.items())
    results = ", ".join(f"{dtype}[{r}]" for r in rows.values() for _ in range(2))
    body = [f"  %init = {dtype}[] constant(0)"]
    names = []
    for n, r in rows.items():
        body.append(f"  %x{n} = {dtype}[{r},{n}] parameter({len(names) // 2})")
        body.append(f"  %n{n} = {dtype}[{r},{n}] negate({dtype}[{r},{n}] %x{n})")
        for op, start in (("maximum", "-inf"), ("minimum", "inf")):
            body.append(f"  %{op}_init{n} = {dtype}[] constant({start})")
            body.append(
                f"  %{op}{n} = {dtype}[{r}] reduce({dtype}[{r},{n}] %n{n}, "
                f"{dtype}[] %{op}_init{n}), dimensions={{1}}, to_apply=%{op}"
            )
            names.append(f"%{op}{n}")
    body.append(f"  ROOT %t = ({results}) tuple({', '.join(names)})")
    reducers = hlo_reducer("maximum", "maximum", dtype) + hlo_reducer("minimum", "minimum", dtype)
    return (
        f"HloModule extrema\n{reducers}\nENTRY %main ({params}) -> ({results}) {{\n"
        + "\n".join(body[1:])
        + "\n}"
    )


def _fused(text: str):
    module = parse_module(text)
    Fusion().run(module)
    DeadCodeElimination().run(module)
    return module


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("target", TARGETS)
def test_row_extrema_equal_the_exact_form(compile_module, dtype, target):
    inputs = {n: _edge_rows(n, NUMPY[dtype]) for n in LENGTHS}
    text = _extrema_module(dtype, {n: len(x) for n, x in inputs.items()})
    args = list(inputs.values())
    got = compile_module(_fused(text), target=target).run(*args)
    reference = evaluate(parse_module(text), args)
    outputs = iter(zip(got, reference, strict=True))
    for n, x in inputs.items():
        for op in ("maximum", "minimum"):
            value, evaluated = next(outputs)
            what = f"{op} of rows of {n}"
            np.testing.assert_array_equal(value, evaluated, err_msg=what)  # NaN == NaN, -0 == 0
            expected = _ieee_extremum(-x, op)
            np.testing.assert_array_equal(value, expected, err_msg=what)
            assert (np.signbit(value) == np.signbit(expected))[expected == 0].all(), what


def _softmax_module(row_counts: dict[int, int]) -> str:
    """Softmax along the rows of one parameter per row length (n: its row count)."""
    params = ", ".join(f"x{n}: f32[{r},{n}]" for n, r in row_counts.items())
    results = ", ".join(f"f32[{r},{n}]" for n, r in row_counts.items())
    body = ["  %ninf = f32[] constant(-inf)", "  %zero = f32[] constant(0)"]
    for i, (n, rows) in enumerate(row_counts.items()):
        s, by_row = f"f32[{rows},{n}]", "dimensions={1}"
        body += [
            f"  %x{n} = {s} parameter({i})",
            f"  %mx{n} = f32[{rows}] reduce({s} %x{n}, f32[] %ninf), {by_row}, to_apply=%max",
            f"  %mxb{n} = {s} broadcast(f32[{rows}] %mx{n}), dimensions={{0}}",
            f"  %d{n} = {s} subtract({s} %x{n}, {s} %mxb{n})",
            f"  %e{n} = {s} exponential({s} %d{n})",
            f"  %sum{n} = f32[{rows}] reduce({s} %e{n}, f32[] %zero), {by_row}, to_apply=%add",
            f"  %sb{n} = {s} broadcast(f32[{rows}] %sum{n}), dimensions={{0}}",
            f"  %y{n} = {s} divide({s} %e{n}, {s} %sb{n})",
        ]
    body.append(f"  ROOT %t = ({results}) tuple({', '.join(f'%y{n}' for n in row_counts)})")
    reducers = hlo_reducer("add", "add") + hlo_reducer("max", "maximum")
    return (
        f"HloModule softmax\n{reducers}\nENTRY %main ({params}) -> ({results}) {{\n"
        + "\n".join(body)
        + "\n}"
    )


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_rows_with_special_values(compile_module, target):
    """Each length's rows through one row fusion: within 4 ulp-scale of the evaluator
    (rtol 2e-6, atol 1e-7: exp's error plus the reciprocal's), NaN where it has NaN."""
    inputs = [_edge_rows(n, np.float32) for n in LENGTHS]
    text = _softmax_module({n: len(x) for n, x in zip(LENGTHS, inputs, strict=True)})
    got = compile_module(_fused(text), target=target).run(*inputs)
    with np.errstate(all="ignore"):
        reference = evaluate(parse_module(text), inputs)
    for n, value, expected in zip(LENGTHS, got, reference, strict=True):
        np.testing.assert_allclose(value, expected, rtol=2e-6, atol=1e-7, err_msg=f"rows of {n}")
