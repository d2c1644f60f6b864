"""Moving values between padded layouts: an array whose dims have run-time extents
(bounded dims, Shape.dynamic) holds its values at the first extents of each dim; a
reshape that regroups bounded dims (a merge of two, a split into two) moves them.
`relayout` builds that move as a gather: result element o takes the value at o's
row-major position among the result's extents, read from the operand at that position
among its extents."""

from __future__ import annotations

from collections.abc import Sequence

from .attrs import GatherDims
from .builder import ComputationBuilder
from .module import Instruction
from .ops import Op
from .types import DType, Shape

SIZE = DType.S32  # the type of an extent at run time


def relayout(
    b: ComputationBuilder,
    x: Instruction,
    in_sizes: Sequence[Instruction],
    out_dims: Sequence[int],
    out_sizes: Sequence[Instruction],
) -> Instruction:
    """x's values, in row-major order at its extents `in_sizes` (s32 scalars, one per
    dim), as an array of `out_dims` (the bounds) at the extents `out_sizes`."""
    grid = tuple(out_dims)
    position = b.broadcast(b.scalar(0, SIZE), [], grid)
    stride = b.scalar(1, SIZE)
    for d in reversed(range(len(grid))):
        term = b.binary(Op.MULTIPLY, b.iota(Shape(SIZE, grid), d), b.broadcast(stride, [], grid))
        position = b.binary(Op.ADD, position, term)
        stride = b.binary(Op.MULTIPLY, stride, out_sizes[d])
    coords = []
    stride = b.scalar(1, SIZE)
    for d in reversed(range(len(in_sizes))):
        index = b.binary(Op.DIVIDE, position, b.broadcast(stride, [], grid))
        extent = b.binary(Op.MAXIMUM, in_sizes[d], b.scalar(1, SIZE))  # no remainder by 0
        coords.append(b.binary(Op.REMAINDER, index, b.broadcast(extent, [], grid)))
        stride = b.binary(Op.MULTIPLY, stride, in_sizes[d])
    coords.reverse()
    rank = x.array_shape.rank
    if rank == 0:
        return b.broadcast(x, [], grid)
    vectors = b.concatenate([b.reshape(c, (*grid, 1)) for c in coords], len(grid))
    dims = GatherDims(
        offset_dims=(),
        collapsed_slice_dims=tuple(range(rank)),
        start_index_map=tuple(range(rank)),
        index_vector_dim=len(grid),
        slice_sizes=(1,) * rank,
    )
    return b.gather(x, vectors, dims)
