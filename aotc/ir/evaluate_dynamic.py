"""Evaluator rules of the ops that move data by run-time values: sort, scatter,
dynamic-slice and dynamic-update-slice (XLA semantics).

Sort and scatter apply a called scalar computation (comparator, combiner) over
arrays with `evaluate.map_computation`; `evaluate` imports this module for its
rule table, so it is reached late, through `_evaluator()`.  `DYNAMIC_RULES` is
this family's part of `evaluate.EVAL_RULES`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from types import ModuleType

import numpy as np

from .evaluate_movement import as_index
from .module import Computation, Instruction
from .ops import Op


def _evaluator() -> ModuleType:
    """The evaluator, imported late: it imports this module (for its rule table)."""
    from . import evaluate

    return evaluate


def _clamped_starts(starts: list, dims, sizes) -> list[int]:
    """XLA clamps run-time starts so that the whole block lies inside the array."""
    return [int(np.clip(as_index(np.asarray(s)), 0, d - n)) for s, d, n in zip(starts, dims, sizes)]


def _dynamic_slice(instr: Instruction, operands: list) -> np.ndarray:
    x, *starts = operands
    sizes = instr.dynamic_slice_sizes
    begin = _clamped_starts(starts, x.shape, sizes)
    return x[tuple(slice(b, b + n) for b, n in zip(begin, sizes))]


def _get_dimension_size(instr: Instruction, operands: list) -> np.ndarray:
    """The extent of the array as evaluated: a static program's (a bounded one is
    padded to its bounds first, passes/bounded_dims.py, which replaces this op)."""
    (x,) = operands
    assert instr.dimensions is not None  # the op requires dimensions=
    return np.asarray(np.shape(x)[instr.dimensions[0]], np.int32)


def _set_dimension_size(instr: Instruction, operands: list) -> np.ndarray:
    return operands[0]  # the values; the extent is the bounded-dims pass's to carry


def _dynamic_update_slice(instr: Instruction, operands: list) -> np.ndarray:
    x, update, *starts = operands
    begin = _clamped_starts(starts, x.shape, update.shape)
    result = np.array(x, copy=True)
    result[tuple(slice(b, b + n) for b, n in zip(begin, update.shape))] = update
    return result


def _scatter(instr: Instruction, operands: list) -> np.ndarray:
    """XLA scatter, one update window at a time in row-major order of the update scatter
    indices (so repeated targets combine in that order).  A window not wholly inside
    the operand is skipped (as XLA's CPU and evaluator do)."""
    evaluator = _evaluator()
    operand, indices, updates = operands
    s = instr.scatter
    combiner = instr.called[0]
    result = np.array(operand, copy=True)
    if s.index_vector_dim == indices.ndim:
        indices = indices[..., None]
    starts = np.moveaxis(as_index(indices), s.index_vector_dim, -1)
    window = list(s.update_window_dims)
    scatter_dims = [d for d in range(updates.ndim) if d not in window]
    windows = np.moveaxis(updates, scatter_dims, range(len(scatter_dims)))
    removed = set(s.inserted_window_dims) | set(s.input_batching_dims)
    window_dims = [d for d in range(operand.ndim) if d not in removed]
    sizes = [1] * operand.ndim
    for k, d in enumerate(window_dims):
        sizes[d] = updates.shape[window[k]]
    # an index dim's position among the scatter dims (the indices' dims less the vector dim)
    batch_axes = [d if d < s.index_vector_dim else d - 1 for d in s.scatter_indices_batching_dims]
    for position in np.ndindex(starts.shape[:-1]):
        start = [0] * operand.ndim
        for k, d in enumerate(s.scatter_dims_to_operand_dims):
            start[d] = int(starts[position][k])
        for d, axis in zip(s.input_batching_dims, batch_axes):
            start[d] = position[axis]
        if any(b < 0 or b + n > extent for b, n, extent in zip(start, sizes, operand.shape)):
            continue
        region = tuple(
            slice(b, b + n) if d in window_dims else b for d, (b, n) in enumerate(zip(start, sizes))
        )
        result[region] = evaluator.map_computation(combiner, [result[region], windows[position]])
    return result


def _sort(instr: Instruction, operands: list) -> np.ndarray | tuple:
    """XLA sort: every row along the dimension permuted by the comparator's order.

    Always stable (is_stable=false allows any order of equivalent elements).  The
    comparator must be a strict weak order, as XLA requires; where it is not, the
    result is some permutation.
    """
    (axis,) = instr.dimensions
    moved = [np.moveaxis(x, axis, -1) for x in operands]
    n = moved[0].shape[-1]
    rows = [m.reshape(math.prod(m.shape[:-1]), n) for m in moved]
    order = sort_order(instr.called[0], rows)
    results = [
        np.moveaxis(np.take_along_axis(r, order, axis=1).reshape(m.shape), -1, axis)
        for r, m in zip(rows, moved)
    ]
    return results[0] if len(results) == 1 else tuple(results)


def sort_order(comparator: Computation, rows: list[np.ndarray]) -> np.ndarray:
    """order[r, k]: the position in row r of its k-th element in stable sorted order."""
    count, n = rows[0].shape
    if n < 2 or not _evaluator().is_mappable(comparator.post_order()):
        order = [order_by_pairs(comparator, [x[r] for x in rows]) for r in range(count)]
        return np.array(order, dtype=np.int64).reshape(count, n)
    order, broken = _merge_sort(comparator, rows)
    for r in np.flatnonzero(broken):  # not a strict weak order: positions collided
        order[r] = order_by_pairs(comparator, [x[r] for x in rows])
    return order


def _merge_sort(comparator: Computation, rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Bottom-up merge sort of all rows at once, numpy-vectorized: (order, broken rows).

    In a merge, an element moves ahead by the number of elements of the other run
    that precede it (strictly, for the run after it: stability), found for all
    elements at once by binary search: log(width) comparator calls per merge level.
    Rows are padded to a power of two with sentinels that sort last.
    """
    evaluator = _evaluator()
    count, n = rows[0].shape
    size = 1 << (n - 1).bit_length()
    position = np.arange(size)
    row = np.arange(count)[:, None]
    order = np.tile(position, (count, 1))  # element indices; n and above are sentinels
    broken = np.zeros(count, dtype=bool)
    flat = [np.ravel(x) for x in rows]  # 1-d takes are much faster than 2-d fancy indexing

    def less(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        picked = [row * n + np.minimum(lhs, n - 1), row * n + np.minimum(rhs, n - 1)]
        args = [np.take(x, side) for x in flat for side in picked]
        result = np.broadcast_to(evaluator.map_computation(comparator, args), lhs.shape)
        return (lhs < n) & ((rhs >= n) | result)

    width = 1
    while width < size:
        offset = position % (2 * width)
        first = offset < width
        other_run = position - offset + np.where(first, width, 0)
        ahead = np.zeros((count, size), dtype=np.int64)  # other run's elements before it
        step = width
        while step >= 1:
            probe = ahead + step
            other = order[row, other_run + np.minimum(probe, width) - 1]
            mine = order
            lhs, rhs = np.where(first, other, mine), np.where(first, mine, other)
            before = less(lhs, rhs)
            before = np.where(first, before, ~before)
            ahead = np.where((probe <= width) & before, probe, ahead)
            step //= 2
        target = position - offset + np.where(first, offset, offset - width) + ahead
        merged = np.full_like(order, -1)
        merged[row, target] = order
        broken |= (merged < 0).any(axis=1)  # two elements took one place, leaving a hole
        order = merged
        width *= 2
    return order[:, :n], broken


def order_by_pairs(comparator: Computation, row: list[np.ndarray]) -> list[int]:
    """Stable sort of one row by calling the comparator on pairs (Python's sort is stable
    and only asks `<`)."""

    def compare(i: int, j: int) -> int:
        args = [x[k] for x in row for k in (i, j)]
        return -1 if bool(_evaluator().map_computation(comparator, args)) else 0

    return sorted(range(len(row[0])), key=functools.cmp_to_key(compare))


DYNAMIC_RULES: dict[Op, Callable] = {
    Op.SCATTER: _scatter,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    Op.GET_DIMENSION_SIZE: _get_dimension_size,
    Op.SET_DIMENSION_SIZE: _set_dimension_size,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Op.SORT: _sort,
}
