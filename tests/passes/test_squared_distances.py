"""Squared distances as a matrix product (aotc/passes/squared_distances.py): which
reductions it rewrites, and how close the expansion stays to the direct sum."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.ir import ComputationBuilder, DType, Module, Op, Shape
from aotc.ir.builder import scalar_reducer
from aotc.ir.evaluate import evaluate
from aotc.ir.verify import verify
from aotc.passes.squared_distances import SquaredDistances


def _cdist(x_shape, x_dims, c, c_dims, out_dims, reduced, dtype=DType.F32, constant=True):
    """reduce(+, (broadcast(x) - broadcast(c))^2) over `reduced`; c a constant (else
    a second parameter)."""
    module = Module("cdist")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(dtype, x_shape))
    side = b.constant(c, dtype) if constant else b.parameter(1, Shape(dtype, c.shape))
    diff = b.binary(
        Op.SUBTRACT, b.broadcast(x, x_dims, out_dims), b.broadcast(side, c_dims, out_dims)
    )
    square = b.binary(Op.MULTIPLY, diff, diff)
    add = scalar_reducer(module, Op.ADD, dtype)
    b.build(b.reduce(square, b.scalar(0, dtype), reduced, add), entry=True)
    return module


def _ops(module) -> list[Op]:
    return [i.op for i in module.entry.instructions]


def test_knn_cdist_becomes_a_dot_accurate_near_the_rows():
    """x (rows near c's, features around 50, spread 1) against 300 constant rows: one
    dot; within 2e-5 of the exact sum (uncentred, |x|^2 ~ 25,000 would cost ~1e-2)."""
    rng = np.random.default_rng(0)
    c = (50 + rng.standard_normal((300, 10))).astype(np.float32)
    module = _cdist((16, 10), [1, 2], c, [0, 2], (300, 16, 10), [2])
    x = np.concatenate([c[:8], c[8:16] + 1e-3 * rng.standard_normal((8, 10))]).astype(np.float32)
    assert SquaredDistances().run(module)
    verify(module)
    ops = _ops(module)
    assert Op.DOT in ops and ops.count(Op.REDUCE) == 1  # x's norms only
    got = evaluate(module, [x])
    exact = ((c[:, None, :].astype(np.float64) - x[None].astype(np.float64)) ** 2).sum(-1)
    assert got.shape == exact.shape == (300, 16)
    np.testing.assert_allclose(got, exact, atol=2e-5, rtol=1e-5)
    assert (got >= 0).all()  # clamped: x on a row of c gives 0, not a negative rounding


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64])
def test_output_dims_in_the_reductions_order(dtype):
    """c's rows first in the difference, x's last, reduced dim in the middle: the dot's
    dims (x's, then c's) are transposed back."""
    rng = np.random.default_rng(1)
    c = rng.standard_normal((7, 5)).astype(dtype.numpy)
    module = _cdist((5, 3), [1, 2], c, [0, 1], (7, 5, 3), [1], dtype)
    reference = _cdist((5, 3), [1, 2], c, [0, 1], (7, 5, 3), [1], dtype)
    x = rng.standard_normal((5, 3)).astype(dtype.numpy)
    assert SquaredDistances().run(module)
    verify(module)
    assert Op.TRANSPOSE in _ops(module)
    rtol = 1e-5 if dtype is DType.F32 else 1e-12
    np.testing.assert_allclose(
        evaluate(module, [x]), evaluate(reference, [x]), rtol=rtol, atol=rtol
    )


def test_single_constant_vector_is_exact():
    """c one vector (no rows): its centre is itself, so x' = x - c and nothing cancels."""
    c = np.array([1e4, -3e4, 2.5], np.float32)
    module = _cdist((6, 3), [0, 1], c, [1], (6, 3), [1])
    reference = _cdist((6, 3), [0, 1], c, [1], (6, 3), [1])
    x = (c + np.arange(18, dtype=np.float32).reshape(6, 3) * 1e-2).astype(np.float32)
    assert SquaredDistances().run(module)
    np.testing.assert_allclose(evaluate(module, [x]), evaluate(reference, [x]), rtol=1e-6)


def _not_rewritten(module) -> None:
    before = _ops(module)
    assert not SquaredDistances().run(module)
    assert _ops(module) == before


def test_two_inputs_are_left_alone():
    """No constant side: no centre known at compile time, so no expansion."""
    c = np.zeros((4, 3), np.float32)
    _not_rewritten(_cdist((5, 3), [1, 2], c, [0, 2], (4, 5, 3), [2], constant=False))


def test_shared_kept_dims_are_left_alone():
    """A dim in both sides but not reduced (a batch dim) is not a plain matrix product."""
    c = np.ones((4, 3), np.float32)
    _not_rewritten(_cdist((4, 3), [0, 1], c, [0, 1], (4, 3), [1]))


def test_other_reductions_are_left_alone():
    """A max of squared differences, or a sum not starting at 0, is not a distance."""
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (5, 3)))
    c = b.constant(np.ones((4, 3), np.float32), DType.F32)
    diff = b.binary(
        Op.SUBTRACT, b.broadcast(x, [1, 2], (4, 5, 3)), b.broadcast(c, [0, 2], (4, 5, 3))
    )
    square = b.binary(Op.MULTIPLY, diff, diff)
    largest = b.reduce(
        square, b.scalar(0, DType.F32), [2], scalar_reducer(module, Op.MAXIMUM, DType.F32)
    )
    offset = b.reduce(
        square, b.scalar(1, DType.F32), [2], scalar_reducer(module, Op.ADD, DType.F32)
    )
    b.build(b.tuple([largest, offset]), entry=True)
    _not_rewritten(module)
