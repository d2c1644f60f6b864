"""reduce (plain, variadic, half floats) and reduce-window (pooling, padding, dilation)."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.ir import ComputationBuilder, Direction, DType, Module, Op, Shape, Window, scalar_reducer
from aotc.ir.types import cast_array


@pytest.mark.parametrize(
    "dtype",
    [DType.F32, DType.F64, DType.F16, DType.BF16, DType.S32, DType.U8],
    ids=lambda d: d.text,
)
def test_reduce_sum_max_over_axes(check, rng, dtype):
    module = Module("red")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(dtype, (3, 5, 7)))
    add = scalar_reducer(module, Op.ADD, dtype)
    mx = scalar_reducer(module, Op.MAXIMUM, dtype)
    zero = b.scalar(0, dtype)
    lowest = b.scalar(-np.inf if dtype.is_float else np.iinfo(dtype.numpy).min, dtype)
    outputs = [b.reduce(x, zero, axes, add) for axes in [(0,), (2,), (0, 2), (0, 1, 2)]]
    outputs += [b.reduce(x, lowest, (1,), mx)]
    b.build(b.tuple(outputs), entry=True)
    xv = cast_array(
        rng.uniform(-2, 2, (3, 5, 7)) if dtype.is_float else rng.integers(0, 9, (3, 5, 7)), dtype
    )
    rtol = {DType.F16: 2e-3, DType.BF16: 1e-2}.get(dtype, 1e-5)
    check(module, [xv], rtol=rtol, atol=rtol)


def test_variadic_reduce_argmax(check, rng):
    """(value, index) pairs reduced with a tuple-valued reducer; tuple-shaped result."""
    module = Module("argmax")
    rb = ComputationBuilder(module, "argmax_reducer")
    acc_v = rb.parameter(0, Shape(DType.F32, ()))
    acc_i = rb.parameter(1, Shape(DType.S32, ()))
    v = rb.parameter(2, Shape(DType.F32, ()))
    i = rb.parameter(3, Shape(DType.S32, ()))
    take = rb.compare(v, acc_v, Direction.GT)
    reducer = rb.build(rb.tuple([rb.select(take, v, acc_v), rb.select(take, i, acc_i)]))
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (4, 6)))
    idx = b.iota(Shape(DType.S32, (4, 6)), 1)
    init_v, init_i = b.scalar(-np.inf, DType.F32), b.scalar(-1, DType.S32)
    both = b.add(Op.REDUCE, [x, idx, init_v, init_i], dimensions=(1,), called=(reducer,))
    b.build(b.tuple([b.get_tuple_element(both, 0), b.get_tuple_element(both, 1)]), entry=True)
    xv = rng.standard_normal((4, 6)).astype(np.float32)
    values, indices = check(module, [xv]).run(xv)
    np.testing.assert_array_equal(indices, xv.argmax(axis=1))
    np.testing.assert_array_equal(values, xv.max(axis=1))


def test_reduce_window_pooling(check, rng):
    module = Module("pool")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (2, 3, 9, 8)))
    mx = scalar_reducer(module, Op.MAXIMUM, DType.F32)
    add = scalar_reducer(module, Op.ADD, DType.F32)
    lowest, zero = b.scalar(-np.inf, DType.F32), b.scalar(0.0, DType.F32)
    outputs = [
        # 3x3 max pool, stride 2, padding 1 (NCHW)
        b.reduce_window(
            x, lowest, Window.make((1, 1, 3, 3), (1, 1, 2, 2), (0, 0, 1, 1), (0, 0, 1, 1)), mx
        ),
        # sum pool with asymmetric padding and window dilation
        b.reduce_window(
            x,
            zero,
            Window.make(
                (1, 1, 2, 3), (1, 1, 1, 2), (0, 0, 0, 2), (0, 0, 1, 0), rhs_dilation=(1, 1, 2, 1)
            ),
            add,
        ),
        # base dilation, and an init that is not the identity (padding sees it)
        b.reduce_window(
            x,
            b.scalar(0.5, DType.F32),
            Window.make(
                (1, 1, 2, 2), (1, 1, 1, 1), (0, 0, 1, 0), (0, 0, 0, 1), lhs_dilation=(1, 1, 2, 1)
            ),
            add,
        ),
    ]
    b.build(b.tuple(outputs), entry=True)
    xv = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    got = check(module, [xv], rtol=1e-5, atol=1e-5).run(xv)
    padded = np.pad(xv, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    expected = np.zeros((2, 3, 5, 4), np.float32)
    for i in range(5):
        for j in range(4):
            expected[:, :, i, j] = padded[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max((2, 3))
    np.testing.assert_array_equal(got[0], expected)
