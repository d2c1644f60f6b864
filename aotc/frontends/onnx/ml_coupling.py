"""LibSVM's pairwise coupling (`multiclass_probability`): class probabilities from the
probabilities of each pair of classes, an iterative solve unrolled for the compiler.

Per row, with r[i][j] the probability that class i beats class j, Q[i][i] is the sum over
j != i of r[j][i]^2 and Q[i][j] = -r[j][i] r[i][j]; p starts uniform, and each iteration
takes one coordinate step per class (Wu, Lin and Weng 2004, method 2) unless
max_i |(Qp)_i - p'Qp| < 0.005 / classes already holds, which ends the loop.

The ONNX frontend has no runtime loops, so (as the Loop lowering does) the iterations are
unrolled to onnxruntime's limit and each row's p is frozen by a `select` from the iteration
its stopping rule holds.  Each of a row's numbers (r[i][j], Q[i][j], p[i]...) is an array
of its own, and the sums run in onnxruntime's order, so the result is onnxruntime's, step
for step in float32.

Those arrays are (N, classes), the row's number repeated across the classes, and the result
takes its column c from p[c]: the whole solve is one elementwise computation, which the
fusion pass makes a single kernel written once.  ((N,) arrays joined by a concatenate would
fuse too, but each output column would carry its own copy of the code.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...ir import ComputationBuilder, Direction, DType, Instruction, Op, Shape
from .helpers import Formula, full

# onnxruntime's iteration limit (LibSVM's and onnx.reference's is max(100, classes))
COUPLING_ITERATIONS = 100
# the stopping tolerance, divided by the number of classes
COUPLING_TOLERANCE = 0.005


def _total(f: Formula, terms: Sequence[Instruction]) -> Instruction:
    """The sum of `terms`, left to right as onnxruntime's loops add them."""
    result = terms[0]
    for term in terms[1:]:
        result = f.add(result, term)
    return result


def pairwise_coupling(
    b: ComputationBuilder, r: Instruction, pairs: Sequence[tuple[int, int]], classes: int
) -> Instruction:
    """(N, classes) probabilities from r (N, pairs): the probability that pair (i, j)'s
    class i wins, clipped inside (0, 1)."""
    n = r.array_shape.dims[0]
    dims = (n, classes)
    wins = {}  # (i, j) -> r[i][j]
    for k, (i, j) in enumerate(pairs):
        column = b.reshape(b.slice(r, [0, k], [n, k + 1]), (n,))
        wins[i, j] = b.broadcast(column, [0], dims)
    f = Formula(b, wins[pairs[0]])
    one, two = f.k(1), f.k(2)  # shared by every step
    for i, j in pairs:
        wins[j, i] = f.sub(one, wins[i, j])
    q = [[None] * classes for _ in range(classes)]
    for i in range(classes):
        q[i][i] = _total(f, [f.mul(wins[j, i], wins[j, i]) for j in range(classes) if j != i])
        for j in range(i + 1, classes):
            q[i][j] = q[j][i] = f.mul(f.f(Op.NEGATE, wins[j, i]), wins[i, j])
    # float32 arithmetic as onnxruntime's: 1.0f / k and 0.005f / k
    p = [f.k(np.float32(1) / np.float32(classes))] * classes
    tolerance = f.k(np.float32(COUPLING_TOLERANCE) / np.float32(classes))
    running: Instruction | None = None
    for _ in range(COUPLING_ITERATIONS):
        # the stopping test, on Qp and p'Qp recomputed from p
        qp = [_total(f, [f.mul(q[i][j], p[j]) for j in range(classes)]) for i in range(classes)]
        pqp = _total(f, [f.mul(p[i], qp[i]) for i in range(classes)])
        error = f.f(Op.ABS, f.sub(qp[0], pqp))
        for qp_i in qp[1:]:
            error = f.max(error, f.f(Op.ABS, f.sub(qp_i, pqp)))
        going = b.compare(error, tolerance, Direction.GE)
        running = going if running is None else b.binary(Op.AND, running, going)
        stepped = _sweep(f, p, qp, pqp, q, one, two)
        p = [b.select(running, new, old) for new, old in zip(stepped, p)]
    columns = b.iota(Shape(DType.S32, dims), 1)
    result = p[-1]
    for c in reversed(range(classes - 1)):
        is_c = b.compare(columns, full(b, c, DType.S32, dims), Direction.EQ)
        result = b.select(is_c, p[c], result)
    return result


def _sweep(f: Formula, p: list, qp: list, pqp: Instruction, q: list, one, two) -> list:
    """p after one coordinate step per class, Qp and p'Qp updated as onnxruntime does
    rather than recomputed (so the roundings are its own)."""
    p, qp = list(p), list(qp)
    for i in range(len(p)):
        diff = f.div(f.sub(pqp, qp[i]), q[i][i])
        p[i] = f.add(p[i], diff)
        grow = f.add(one, diff)
        pqp = f.add(pqp, f.mul(diff, f.add(f.mul(diff, q[i][i]), f.mul(two, qp[i]))))
        pqp = f.div(f.div(pqp, grow), grow)
        qp = [f.div(f.add(qp[j], f.mul(diff, q[i][j])), grow) for j in range(len(p))]
        p = [f.div(p_j, grow) for p_j in p]
    return p
