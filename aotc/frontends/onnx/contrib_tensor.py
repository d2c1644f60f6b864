"""onnxruntime's small tensor ops (domain com.microsoft) that its CPU provider runs:
Trilu and ExpandDims (ONNX's Trilu and Unsqueeze under older names), CDist (pairwise
distances between two sets of row vectors) and Inverse (of square matrices)."""

from __future__ import annotations

from ...errors import ModelError, ShapeError
from ...ir import ComputationBuilder, Direction, DType, Instruction, Op, Shape
from .helpers import Formula, full, full_like, reduce
from .linalg import square_matrices
from .registry import MICROSOFT, NodeContext, lower_as_onnx, onnx_op


@onnx_op("Trilu", domain=MICROSOFT, since=1, arity=((1, 2), (1, 1)))
def ms_trilu(ctx: NodeContext, x: Instruction, k: Instruction | None = None) -> Instruction:
    return lower_as_onnx(ctx, "Trilu", 14, [x, k], {"upper": ctx.attr("upper", 1)})


@onnx_op("ExpandDims", domain=MICROSOFT, since=1, arity=((2, 2), (1, 1)))
def expand_dims(ctx: NodeContext, x: Instruction, axis: Instruction) -> Instruction:
    """x with a unit dim inserted at `axis` (a constant scalar, counted in the result)."""
    (where,) = ctx.const_ints(1)
    return lower_as_onnx(ctx, "Unsqueeze", 11, [x], {"axes": [where]})


CDIST_METRICS = ("sqeuclidean", "euclidean")


@onnx_op("CDist", domain=MICROSOFT, since=1, arity=((2, 2), (1, 1)))
def cdist(ctx: NodeContext, a: Instruction, b: Instruction) -> Instruction:
    """(M, N) distances between the rows of a (M, K) and b (N, K): sum((a_i - b_j)^2), or
    its square root for metric=euclidean.  The differences are summed directly (not as
    |a|^2 + |b|^2 - 2 a.b), so coincident rows are exactly 0."""
    metric = ctx.attr("metric", "sqeuclidean")
    if metric not in CDIST_METRICS:
        raise ModelError(f"attribute metric={metric!r} is not one of {', '.join(CDIST_METRICS)}")
    if (
        a.array_shape.rank != 2
        or b.array_shape.rank != 2
        or a.array_shape.dims[1] != b.array_shape.dims[1]
    ):
        raise ShapeError(
            f"CDist needs (M, K) and (N, K) inputs, got {list(a.array_shape.dims)} "
            f"and {list(b.array_shape.dims)}"
        )
    (m, k), n = a.array_shape.dims, b.array_shape.dims[0]
    pairs = (m, n, k)
    diff = ctx.b.binary(
        Op.SUBTRACT, ctx.b.broadcast(a, [0, 2], pairs), ctx.b.broadcast(b, [1, 2], pairs)
    )
    squares = Formula(ctx.b, diff).mul(diff, diff)
    total = reduce(ctx.b, squares, Op.ADD, [2], keepdims=False)
    return ctx.b.unary(Op.SQRT, total) if metric == "euclidean" else total


# Inverse is unrolled, one elimination step per column (as Det)
MAX_INVERSE_SIZE = 64


@onnx_op("Inverse", domain=MICROSOFT, since=1, arity=((1, 1), (1, 1)))
def inverse(ctx: NodeContext, x: Instruction) -> Instruction:
    """The inverse of each (n, n) matrix of x: Gauss-Jordan elimination with partial
    pivoting on [x | I]; a singular matrix gives infinities or NaNs, as LU does."""
    b = ctx.b
    dtype = x.array_shape.dtype
    n, lead, batch = square_matrices(x, "Inverse", MAX_INVERSE_SIZE)
    work = DType.F32 if dtype.bits < 32 else dtype
    dims = (batch, n, n)
    square = b.reshape(b.convert(x, work), dims)
    diagonal = b.compare(_index(b, dims, 1), _index(b, dims, 2), Direction.EQ)
    identity = b.select(diagonal, full(b, 1, work, dims), full(b, 0, work, dims))
    augmented = b.concatenate([square, identity], 2)
    for column in range(n):
        augmented = _eliminate(b, augmented, column)
    result = b.slice(augmented, [0, 0, n], [batch, n, 2 * n])
    return b.convert(b.reshape(result, (*lead, n, n)), dtype)


def _index(b: ComputationBuilder, dims, dim: int) -> Instruction:
    return b.iota(Shape(DType.S32, tuple(dims)), dim)


def _eliminate(b: ComputationBuilder, m: Instruction, j: int) -> Instruction:
    """One Gauss-Jordan step on [batch, n, 2n]: the largest |m[r, j]| of rows r >= j is
    swapped into row j and scaled to 1, and column j cleared from every other row."""
    dims = m.array_shape.dims
    batch, n, width = dims
    row_ids = _index(b, (batch, n), 1)
    column = b.reshape(b.slice(m, [0, 0, j], [batch, n, j + 1]), [batch, n])
    below = b.compare(row_ids, full(b, j, DType.S32, (batch, n)), Direction.GE)
    magnitude = b.select(below, b.unary(Op.ABS, column), full_like(b, -1, column))
    largest = reduce(b, magnitude, Op.MAXIMUM, [1], keepdims=False)
    is_largest = b.compare(magnitude, b.broadcast(largest, [0], (batch, n)), Direction.EQ)
    # the first row holding the largest magnitude is the pivot row
    candidates = b.select(is_largest, row_ids, full_like(b, n, row_ids))
    first = reduce(b, candidates, Op.MINIMUM, [1], keepdims=False)
    pivot_mask = b.broadcast(
        b.compare(row_ids, b.broadcast(first, [0], (batch, n)), Direction.EQ), [0, 1], dims
    )
    pivot_row = reduce(b, b.select(pivot_mask, m, full_like(b, 0, m)), Op.ADD, [1], False)
    row_j = b.reshape(b.slice(m, [0, j, 0], [batch, j + 1, width]), [batch, width])
    # swap rows j and the pivot's: row j's values go where the pivot was
    m = b.select(pivot_mask, b.broadcast(row_j, [0, 2], dims), m)
    pivot = b.reshape(b.slice(pivot_row, [0, j], [batch, j + 1]), [batch])
    unit_row = b.binary(Op.DIVIDE, pivot_row, b.broadcast(pivot, [0], (batch, width)))
    factors = b.reshape(b.slice(m, [0, 0, j], [batch, n, j + 1]), [batch, n])
    update = b.binary(
        Op.MULTIPLY, b.broadcast(factors, [0, 1], dims), b.broadcast(unit_row, [0, 2], dims)
    )
    cleared = b.binary(Op.SUBTRACT, m, update)
    is_j = b.compare(_index(b, dims, 1), full(b, j, DType.S32, dims), Direction.EQ)
    return b.select(is_j, b.broadcast(unit_row, [0, 2], dims), cleared)
