"""Sort, scatter and dynamic slices compiled: against the evaluator and numpy."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.backends.llvm.sort import sort_strategy
from aotc.ir import (
    Computation,
    ComputationBuilder,
    Direction,
    DType,
    Module,
    Op,
    ScatterDims,
    Shape,
    comparator,
    replacer,
    scalar_reducer,
)
from aotc.ir.types import cast_array

# -- sort ---------------------------------------------------------------------------------

# keys with ties; floats also with signed zeros, infinities and NaNs of both signs
SORT_POOLS = {
    DType.PRED: [True, False],
    DType.S8: [-128, 127, 0, 5, 5, -1],
    DType.U16: [0, 65535, 7, 7, 300],
    DType.S32: [-(2**31), 2**31 - 1, 0, 3, 3, -3],
    DType.U64: [0, 2**64 - 1, 2**63, 1, 1],
    DType.F16: [1.5, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 65504.0, -2.0, 1.5],
    DType.BF16: [1.5, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 3e38, -2.0, 1.5],
    DType.F32: [1.5, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -2.0, 1.5],
    DType.F64: [1.5, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 5e-324, -2.0, 1.5],
}


def pick(rng, dtype: DType, dims) -> np.ndarray:
    pool = SORT_POOLS[dtype]
    values = [pool[k] for k in rng.integers(0, len(pool), size=int(np.prod(dims)))]
    if dtype.is_float:
        return cast_array(np.array(values, dtype=np.float64).reshape(dims), dtype)
    return np.array(values, dtype=object).astype(dtype.numpy).reshape(dims)


def order_key(value, dtype: DType):
    """comparator()'s order written out: -0.0 == 0.0, NaN above +inf."""
    if dtype.is_float:
        return (1, 0.0) if np.isnan(value) else (0, float(value) + 0.0)
    return (0, int(value))


def stable_order(row, dtype: DType, descending: bool) -> list[int]:
    return sorted(range(len(row)), key=lambda k: order_key(row[k], dtype), reverse=descending)


@pytest.mark.parametrize("dtype", list(SORT_POOLS), ids=lambda d: d.text)
def test_sort_values_and_indices_like_topk(check, rng, dtype):
    """Keys with an iota along for the ride, both directions, stable on ties."""
    dims = (3, 11)
    module = Module("topk")
    b = ComputationBuilder(module, "main")
    keys = b.parameter(0, Shape(dtype, dims))
    iota = b.iota(Shape(DType.S32, dims), 1)
    outputs = []
    for direction in (Direction.GT, Direction.LT):
        cmp = comparator(module, dtype, direction, [DType.S32])
        s = b.sort([keys, iota], 1, cmp, is_stable=True)
        outputs += [b.get_tuple_element(s, 0), b.get_tuple_element(s, 1)]
    b.build(b.tuple(outputs), entry=True)
    values = pick(rng, dtype, dims)
    got = check(module, [values]).run(values)
    for k, descending in enumerate((True, False)):
        order = np.array([stable_order(row, dtype, descending) for row in values.tolist()])
        np.testing.assert_array_equal(got[2 * k + 1], order)
        np.testing.assert_array_equal(got[2 * k], np.take_along_axis(values, order, 1))


def test_sort_single_operand_along_outer_axis(check, rng):
    """One operand: the result is an array; rows run along dim 0 of a 3-d array."""
    module = Module("outer")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (7, 2, 3)))
    b.build(b.sort([x], 0, comparator(module, DType.F32, Direction.LT)), entry=True)
    xv = rng.standard_normal((7, 2, 3)).astype(np.float32)
    (got,) = check(module, [xv]).run(xv)
    np.testing.assert_array_equal(got, np.sort(xv, axis=0))


def test_sort_degenerate_rows(check):
    module = Module("tiny")
    b = ComputationBuilder(module, "main")
    one = b.parameter(0, Shape(DType.S32, (4, 1)))
    empty = b.parameter(1, Shape(DType.S32, (0, 5)))
    cmp = comparator(module, DType.S32, Direction.LT)
    b.build(b.tuple([b.sort([one], 1, cmp), b.sort([empty], 1, cmp)]), entry=True)
    ones, nothing = np.array([[3], [1], [2], [0]], np.int32), np.zeros((0, 5), np.int32)
    got = check(module, [ones, nothing]).run(ones, nothing)
    np.testing.assert_array_equal(got[0], ones)


def lexicographic(module: Module) -> Computation:
    """By the s32 key ascending, then by the f16 value descending."""
    sub = ComputationBuilder(module, "lex")
    k0, k1 = (sub.parameter(i, Shape(DType.S32, ())) for i in range(2))
    v0, v1 = (sub.parameter(i, Shape(DType.F16, ())) for i in range(2, 4))
    first = sub.compare(k0, k1, Direction.LT)
    tie = sub.compare(k0, k1, Direction.EQ)
    second = sub.compare(v0, v1, Direction.GT)
    return sub.build(sub.binary(Op.OR, first, sub.binary(Op.AND, tie, second)))


def test_sort_by_a_multi_key_comparator(check, rng):
    module = Module("lex")
    b = ComputationBuilder(module, "main")
    keys = b.parameter(0, Shape(DType.S32, (2, 40)))
    values = b.parameter(1, Shape(DType.F16, (2, 40)))
    s = b.sort([keys, values], 1, lexicographic(module))
    b.build(b.tuple([b.get_tuple_element(s, 0), b.get_tuple_element(s, 1)]), entry=True)
    kv = rng.integers(0, 4, (2, 40)).astype(np.int32)
    vv = rng.integers(-3, 3, (2, 40)).astype(np.float16) / 2
    got_k, got_v = check(module, [kv, vv]).run(kv, vv)
    for r in range(2):
        expected = sorted(zip(kv[r].tolist(), vv[r].tolist()), key=lambda t: (t[0], -t[1]))
        assert list(zip(got_k[r].tolist(), got_v[r].tolist())) == expected


# -- long rows: TopK's selection and the merge sort -----------------------------------------

LONG = 3000


def top_k_module(dtype: DType, dims, k: int, descending: bool) -> Module:
    """TopK as the frontends write it: a stable sort of keys and positions, then slices
    of the first k along the sorted dim (dim 1)."""
    module = Module("topk_long")
    b = ComputationBuilder(module, "main")
    keys = b.parameter(0, Shape(dtype, dims))
    iota = b.iota(Shape(DType.S32, dims), 1)
    direction = Direction.GT if descending else Direction.LT
    cmp = comparator(module, dtype, direction, [DType.S32])
    s = b.sort([keys, iota], 1, cmp, is_stable=True)
    parts = [b.slice(b.get_tuple_element(s, e), [0, 0], [dims[0], k]) for e in range(2)]
    b.build(b.tuple(parts), entry=True)
    return module


# k -> how the CPU orders the rows: select up to about a quarter of them, else merge
LONG_K = {0: "select", 1: "select", 5: "select", 200: "select", 1000: "merge", LONG - 1: "merge"}
LONG_K[LONG] = "merge"


@pytest.mark.parametrize("k", list(LONG_K))
@pytest.mark.parametrize("descending", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("dtype", [DType.F32, DType.S32], ids=lambda d: d.text)
def test_top_k_of_long_rows_with_ties(check, rng, dtype, descending, k):
    """Rows of 3,000 drawn from a few values (floats with NaNs and signed zeros): the
    selection and the merge sort give numpy's stable order exactly."""
    dims = (3, LONG)
    module = top_k_module(dtype, dims, k, descending)
    sort = next(i for i in module.entry.instructions if i.op is Op.SORT)
    chosen = sort_strategy(sort, module.entry.post_order(), scratch=True).name
    assert chosen == LONG_K[k]
    keys = pick(rng, dtype, dims)
    values, indices = check(module, [keys]).run(keys)
    rows = [stable_order(row, dtype, descending)[:k] for row in keys.tolist()]
    order = np.array(rows, np.int64).reshape(dims[0], k)
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(keys, order, 1))


@pytest.mark.parametrize("n", [65, 100, 1000, 3001])
def test_long_rows_merge_sorted_along_an_outer_dim(check, rng, n):
    """Whole rows along dim 0 (strided) of three operands of different widths, merged
    through scratch in an odd (65, 100: 5) or even (1000: 8, 3001: 10) number of passes."""
    module = Module("merge")
    b = ComputationBuilder(module, "main")
    dims = (n, 2)
    keys = b.parameter(0, Shape(DType.F16, dims))
    flags = b.parameter(1, Shape(DType.PRED, dims))
    iota = b.iota(Shape(DType.S64, dims), 0)
    cmp = comparator(module, DType.F16, Direction.GT, [DType.PRED, DType.S64])
    s = b.sort([keys, flags, iota], 0, cmp, is_stable=True)
    b.build(b.tuple([b.get_tuple_element(s, e) for e in range(3)]), entry=True)
    kv = pick(rng, DType.F16, dims)
    fv = rng.random(dims) < 0.5
    got_k, got_f, got_i = check(module, [kv, fv]).run(kv, fv)
    order = np.array([stable_order(col, DType.F16, True) for col in kv.T.tolist()]).T
    np.testing.assert_array_equal(got_i, order)
    np.testing.assert_array_equal(got_k, np.take_along_axis(kv, order, 0))
    np.testing.assert_array_equal(got_f, np.take_along_axis(fv, order, 0))


# -- scatter ------------------------------------------------------------------------------


def scatter_module(name, operand: Shape, indices: Shape, updates: Shape, dims, combiners):
    """One scatter per combiner (a function of the module) of the same three parameters."""
    module = Module(name)
    b = ComputationBuilder(module, "main")
    params = [b.parameter(k, s) for k, s in enumerate((operand, indices, updates))]
    outs = [b.scatter(*params, dims, make(module)) for make in combiners]
    b.build(b.tuple(outs), entry=True)
    return module


def add_of(dtype):
    return lambda module: scalar_reducer(module, Op.ADD, dtype)


def replace_of(dtype):
    return lambda module: replacer(module, dtype)


def multiply_add(module: Module) -> Computation:
    """current * 2 + update: not commutative, so the order of repeats shows."""
    sub = ComputationBuilder(module, "twice_plus")
    current, update = (sub.parameter(k, Shape(DType.F32, ())) for k in range(2))
    twice = sub.binary(Op.MULTIPLY, current, sub.scalar(2.0, DType.F32))
    return sub.build(sub.binary(Op.ADD, twice, update))


@pytest.mark.parametrize("dtype", [DType.F32, DType.S32, DType.F16, DType.BF16, DType.U8])
def test_scatter_elements_with_repeats_and_out_of_bounds(check, rng, dtype):
    """ONNX ScatterElements(axis=1): batching dim 0; -1 and 9 are outside, so skipped."""
    dims = ScatterDims((), (1,), (1,), 2, (0,), (0,))
    shapes = Shape(dtype, (3, 5)), Shape(DType.S64, (3, 4)), Shape(dtype, (3, 4))
    module = scatter_module("elements", *shapes, dims, [add_of(dtype), replace_of(dtype)])
    operand = cast_array(rng.integers(0, 9, (3, 5)), dtype)
    updates = cast_array(rng.integers(0, 9, (3, 4)), dtype)
    indices = np.array([[0, 4, 4, -1], [2, 2, 2, 2], [1, 9, 3, 0]], np.int64)
    added, replaced = check(module, [operand, indices, updates]).run(operand, indices, updates)
    want_added, want_replaced = operand.astype(np.float64), operand.astype(np.float64)
    for r in range(3):
        for c in range(4):
            if 0 <= indices[r, c] < 5:
                want_added[r, indices[r, c]] += updates[r, c]
                want_replaced[r, indices[r, c]] = updates[r, c]  # the last repeat wins
    np.testing.assert_array_equal(replaced, cast_array(want_replaced, dtype))
    np.testing.assert_array_equal(added, cast_array(want_added, dtype))  # small ints: exact


def test_scatter_nd_rows(check, rng):
    """ONNX ScatterND: index pairs along the last dim pick rows of dim 2."""
    dims = ScatterDims((2,), (0, 1), (0, 1), 2)
    module = scatter_module(
        "nd",
        Shape(DType.F32, (4, 5, 6)),
        Shape(DType.S32, (2, 3, 2)),
        Shape(DType.F32, (2, 3, 6)),
        dims,
        [add_of(DType.F32)],
    )
    operand = rng.standard_normal((4, 5, 6)).astype(np.float32)
    updates = rng.standard_normal((2, 3, 6)).astype(np.float32)
    indices = np.array([[[0, 1], [3, 4], [0, 1]], [[1, 0], [4, 0], [-1, 2]]], np.int32)
    (got,) = check(module, [operand, indices, updates]).run(operand, indices, updates)
    want = operand.astype(np.float64)
    for k in np.ndindex(2, 3):
        i, j = indices[k]
        if 0 <= i < 4 and 0 <= j < 5:
            want[i, j] += updates[k]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_scatter_2d_windows_skip_partly_outside(check, rng):
    """2x3 windows placed by one start index along dim 1; starts 5 and -1 do not fit."""
    dims = ScatterDims((1, 2), (), (1,), 1)
    module = scatter_module(
        "windows",
        Shape(DType.F32, (6, 7)),
        Shape(DType.U8, (5,)),
        Shape(DType.F32, (5, 2, 3)),
        dims,
        [multiply_add],
    )
    operand = rng.integers(-3, 3, (6, 7)).astype(np.float32)
    updates = rng.integers(-3, 3, (5, 2, 3)).astype(np.float32)
    indices = np.array([0, 4, 5, 255, 3], np.uint8)
    (got,) = check(module, [operand, indices, updates]).run(operand, indices, updates)
    want = operand.copy()
    for k, start in enumerate(indices.tolist()):
        if start + 3 <= 7:
            want[0:2, start : start + 3] = want[0:2, start : start + 3] * 2 + updates[k]
    np.testing.assert_array_equal(got, want)


def test_scatter_into_an_intermediate(check, rng):
    """The operand is computed in the arena, the result returned through an output."""
    module = Module("chain")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (8,)))
    i = b.parameter(1, Shape(DType.S32, (3, 1)))
    u = b.parameter(2, Shape(DType.F32, (3,)))
    doubled = b.binary(Op.ADD, x, x)
    dims = ScatterDims((), (0,), (0,), 1)
    s = b.scatter(doubled, i, u, dims, replacer(module, DType.F32))
    b.build(b.tuple([b.unary(Op.NEGATE, s), doubled]), entry=True)
    xv = rng.standard_normal(8).astype(np.float32)
    iv = np.array([[7], [0], [7]], np.int32)
    uv = np.array([1.0, 2.0, 3.0], np.float32)
    compiled = check(module, [xv, iv, uv])
    plan = compiled.plan
    assert not plan.slice_of(s).overlaps(plan.slice_of(doubled))
    negated, _ = compiled.run(xv, iv, uv)
    want = 2 * xv
    want[[0, 7]] = [2.0, 3.0]
    np.testing.assert_array_equal(negated, -want)


# -- dynamic-slice, dynamic-update-slice ------------------------------------------------------

# start values per index dtype: in range, past the end, negative or huge (clamped)
STARTS = {
    DType.S32: [[0, 0], [2, 3], [5, -1], [-7, 100]],
    DType.U8: [[0, 0], [2, 3], [5, 255], [1, 2]],
    DType.S64: [[1, 1], [-(2**63), 2**63 - 1]],
    DType.U64: [[3, 1], [2**64 - 1, 2**63]],
}


@pytest.mark.parametrize("index_dtype", list(STARTS), ids=lambda d: d.text)
def test_dynamic_slice_and_update_clamp_starts(check, rng, index_dtype):
    module = Module("dyn")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.BF16, (4, 6)))
    update = b.parameter(1, Shape(DType.BF16, (2, 3)))
    starts = [b.parameter(2 + k, Shape(index_dtype, ())) for k in range(2)]
    sliced = b.dynamic_slice(x, starts, [2, 3])
    updated = b.dynamic_update_slice(x, update, starts)
    b.build(b.tuple([sliced, updated]), entry=True)
    xv = cast_array(rng.standard_normal((4, 6)), DType.BF16)
    uv = cast_array(rng.standard_normal((2, 3)), DType.BF16)
    for pair in STARTS[index_dtype]:
        values = [np.array(v, dtype=object).astype(index_dtype.numpy) for v in pair]
        got_slice, got_update = check(module, [xv, uv, *values]).run(xv, uv, *values)
        i, j = min(max(pair[0], 0), 2), min(max(pair[1], 0), 3)
        np.testing.assert_array_equal(got_slice, xv[i : i + 2, j : j + 3])
        want = xv.copy()
        want[i : i + 2, j : j + 3] = uv
        np.testing.assert_array_equal(got_update, want)


def test_dynamic_ops_whole_and_empty_blocks(check, rng):
    """Blocks as big as the operand (start clamped to 0) and empty ones, on a 3-d s16."""
    module = Module("edges")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.S16, (2, 3, 4)))
    full = b.parameter(1, Shape(DType.S16, (2, 3, 4)))
    empty = b.parameter(2, Shape(DType.S16, (2, 0, 4)))
    start = b.parameter(3, Shape(DType.S32, ()))
    starts = [start] * 3
    outs = [
        b.dynamic_slice(x, starts, [2, 3, 4]),
        b.dynamic_slice(x, starts, [1, 0, 2]),
        b.dynamic_update_slice(x, full, starts),
        b.dynamic_update_slice(x, empty, starts),
        b.dynamic_slice(x, starts, [1, 2, 2]),
    ]
    b.build(b.tuple(outs), entry=True)
    xv = rng.integers(-99, 99, (2, 3, 4)).astype(np.int16)
    fv = rng.integers(-99, 99, (2, 3, 4)).astype(np.int16)
    ev = np.zeros((2, 0, 4), np.int16)
    sv = np.array(1, np.int32)
    got = check(module, [xv, fv, ev, sv]).run(xv, fv, ev, sv)
    np.testing.assert_array_equal(got[0], xv)
    np.testing.assert_array_equal(got[2], fv)
    np.testing.assert_array_equal(got[3], xv)
    np.testing.assert_array_equal(got[4], xv[1:2, 1:3, 1:3])
