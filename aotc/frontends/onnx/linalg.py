"""Matrix products: MatMul (numpy semantics) and Gemm, as HLO dot; the shape checks the
unrolled matrix factorizations (Det, Inverse) share."""

from __future__ import annotations

import math

from ...errors import ShapeError, UnsupportedError
from ...ir import DotDims, Instruction, Op
from .helpers import broadcast_dims, full_like, unidirectional
from .registry import NodeContext, onnx_op


def square_matrices(x: Instruction, op: str, largest: int) -> tuple[int, tuple[int, ...], int]:
    """n, the leading dims and their count for a float x of [..., n, n] matrices; refuses
    other shapes, and n above `largest` (the factorizations are unrolled)."""
    if not x.array_shape.dtype.is_float:
        raise UnsupportedError(f"{op} input must be a float tensor, not {x.array_shape.dtype.text}")
    if x.array_shape.rank < 2 or x.array_shape.dims[-1] != x.array_shape.dims[-2]:
        raise ShapeError(f"{op} needs [..., n, n], got {list(x.array_shape.dims)}")
    n = x.array_shape.dims[-1]
    if n > largest:
        raise UnsupportedError(f"{op} of {n}x{n} matrices (unrolled; at most {largest})")
    lead = tuple(x.array_shape.dims[:-2])
    return n, lead, math.prod(lead)


@onnx_op("MatMul")
def matmul(ctx: NodeContext, lhs: Instruction, rhs: Instruction, dtype=None) -> Instruction:
    """numpy's matmul; `dtype`: the result's type where it is not the operands'."""
    b = ctx.b
    if lhs.array_shape.rank == 0 or rhs.array_shape.rank == 0:
        raise ShapeError("MatMul operands must have rank >= 1")
    # numpy: a 1-D lhs is a row vector, a 1-D rhs a column; the unit dim is dropped after
    lhs_vector, rhs_vector = lhs.array_shape.rank == 1, rhs.array_shape.rank == 1
    if lhs_vector:
        lhs = b.reshape(lhs, (1, *lhs.array_shape.dims))
    if rhs_vector:
        rhs = b.reshape(rhs, (*rhs.array_shape.dims, 1))
    if rhs.array_shape.rank == 2:
        # (..., M, K) x (K, N): a plain contraction keeps lhs's leading dims unbroadcast
        dims = DotDims((), (), (lhs.array_shape.rank - 1,), (0,))
    else:
        batch = broadcast_dims(lhs.array_shape.dims[:-2], rhs.array_shape.dims[:-2])
        lhs = b.broadcast_to(lhs, batch + lhs.array_shape.dims[-2:])
        rhs = b.broadcast_to(rhs, batch + rhs.array_shape.dims[-2:])
        n = len(batch)
        dims = DotDims(range(n), range(n), (n + 1,), (n,))
    out = b.dot(lhs, rhs, dims, dtype)
    out_dims = list(out.array_shape.dims)
    if rhs_vector:
        out_dims.pop(-1)
    if lhs_vector:
        out_dims.pop(-1 if rhs_vector else -2)
    return b.reshape(out, out_dims)


@onnx_op("Gemm")
def gemm(ctx: NodeContext, a: Instruction, x: Instruction, c: Instruction | None = None):
    b = ctx.b
    if a.array_shape.rank != 2 or x.array_shape.rank != 2:
        raise ShapeError("Gemm operands A and B must be 2-D")
    # the transposes become the choice of contracting dims
    a_k = 0 if ctx.attr("transA") else 1
    x_k = 1 if ctx.attr("transB") else 0
    out = b.dot(a, x, DotDims((), (), (a_k,), (x_k,)))
    alpha, beta = ctx.attr("alpha"), ctx.attr("beta")
    if alpha != 1.0:
        out = b.binary(Op.MULTIPLY, out, full_like(b, alpha, out))
    if c is not None and beta != 0.0:
        c = unidirectional(b, b.convert(c, out.array_shape.dtype), out.array_shape.dims)
        if beta != 1.0:
            c = b.binary(Op.MULTIPLY, c, full_like(b, beta, c))
        out = b.binary(Op.ADD, out, c)
    return out
