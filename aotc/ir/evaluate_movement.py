"""Evaluator rules of the ops that move data by static attributes: broadcast,
reshape, transpose, slice, concatenate, pad, reverse and gather (XLA semantics).

Also the array helpers other rules share: `pad_array` (XLA's pad),
`windows` (every window position, for reduce-window and convolution),
`as_index` and `along`.  `MOVEMENT_RULES` is this family's part of
`evaluate.EVAL_RULES`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .module import Instruction
from .ops import Op


def _broadcast(instr: Instruction, operands: list) -> np.ndarray:
    (x,) = operands
    out = instr.array_shape.dims
    placed = [1] * len(out)
    for i, d in enumerate(instr.dimensions):
        placed[d] = x.shape[i]
    return np.broadcast_to(x.reshape(placed), out)


def _reshape(instr: Instruction, operands: list) -> np.ndarray:
    return operands[0].reshape(instr.array_shape.dims)


def _transpose(instr: Instruction, operands: list) -> np.ndarray:
    return np.transpose(operands[0], instr.dimensions)


def _slice(instr: Instruction, operands: list) -> np.ndarray:
    s = instr.slice
    return operands[0][tuple(map(slice, s.starts, s.limits, s.strides))]


def _concatenate(instr: Instruction, operands: list) -> np.ndarray:
    return np.concatenate(operands, axis=instr.dimensions[0])


def pad_array(x: np.ndarray, value, low, high, interior) -> np.ndarray:
    """XLA pad: `interior` fill between elements, then `low`/`high` at the edges
    (negative amounts crop)."""
    dilated = [d + max(d - 1, 0) * i for d, i in zip(x.shape, interior)]
    grow_low = [max(lo, 0) for lo in low]
    grow_high = [max(hi, 0) for hi in high]
    grown = [lo + d + hi for lo, d, hi in zip(grow_low, dilated, grow_high)]
    full = np.full(grown, value, dtype=x.dtype)
    full[tuple(slice(lo, lo + d, i + 1) for lo, d, i in zip(grow_low, dilated, interior))] = x
    crop = [slice(max(-lo, 0), g - max(-hi, 0)) for lo, hi, g in zip(low, high, grown)]
    return full[tuple(crop)]


def _pad(instr: Instruction, operands: list) -> np.ndarray:
    x, value = operands
    p = instr.padding
    return pad_array(x, value, p.low, p.high, p.interior)


def _reverse(instr: Instruction, operands: list) -> np.ndarray:
    return np.flip(operands[0], axis=tuple(instr.dimensions))


def _gather(instr: Instruction, operands: list) -> np.ndarray:
    """XLA gather: builds, per operand dim, the index of every output element."""
    operand, indices = operands
    g = instr.gather
    out_dims = instr.array_shape.dims
    rank = len(out_dims)
    if g.index_vector_dim == indices.ndim:
        indices = indices[..., None]
    batch_index_dims = [d for d in range(indices.ndim) if d != g.index_vector_dim]
    starts = np.moveaxis(as_index(indices), g.index_vector_dim, -1)
    batch_dims = starts.shape[:-1]
    batch_positions = [i for i in range(rank) if i not in g.offset_dims]
    removed = set(g.collapsed_slice_dims) | set(g.operand_batching_dims)
    offset_operand_dims = [d for d in range(operand.ndim) if d not in removed]

    def to_output(batch_array: np.ndarray) -> np.ndarray:
        placed = [1] * rank
        for position, extent in zip(batch_positions, batch_dims):
            placed[position] = extent
        return batch_array.reshape(placed)

    coords = []
    for d in range(operand.ndim):
        if d in g.start_index_map:
            # XLA clamps the start so the whole slice stays in bounds
            start = starts[..., g.start_index_map.index(d)]
            start = np.clip(start, 0, operand.shape[d] - g.slice_sizes[d])
        elif d in g.operand_batching_dims:
            paired = g.start_indices_batching_dims[g.operand_batching_dims.index(d)]
            axis = batch_index_dims.index(paired)
            start = along(np.arange(batch_dims[axis]), axis, len(batch_dims))
            start = np.broadcast_to(start, batch_dims)
        else:
            start = np.zeros(batch_dims, dtype=np.int64)
        coord = to_output(np.asarray(start))
        if d in offset_operand_dims:
            position = g.offset_dims[offset_operand_dims.index(d)]
            coord = coord + along(np.arange(g.slice_sizes[d]), position, rank)
        coords.append(np.broadcast_to(coord, out_dims))
    return operand[tuple(coords)]


def as_index(indices: np.ndarray) -> np.ndarray:
    """Integer indices as int64 (huge u64 ones capped: out of range either way)."""
    if indices.dtype == np.uint64:  # huge values would wrap negative in int64
        indices = np.minimum(indices, np.uint64(2**62))
    return indices.astype(np.int64)


def windows(x: np.ndarray, axes, size, stride, dilation) -> np.ndarray:
    """Every window position along `axes`: x's dims (those in `axes` now counting
    positions), then the window's elements (`size` per axis, `dilation` apart)."""
    axes = list(axes)
    extent = [(s - 1) * d + 1 for s, d in zip(size, dilation)]
    if any(x.shape[a] < e for a, e in zip(axes, extent)):  # no position fits
        dims = list(x.shape)
        for a in axes:
            dims[a] = 0
        return np.zeros(dims + list(size), dtype=x.dtype)
    view = sliding_window_view(x, extent, axis=axes)
    picks = [slice(None)] * view.ndim
    for a, s in zip(axes, stride):
        picks[a] = slice(None, None, s)
    for i, d in enumerate(dilation):
        picks[x.ndim + i] = slice(None, None, d)
    return view[tuple(picks)]


def along(vector: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A 1-d array reshaped to lie along `axis` of a rank-`rank` array."""
    shape = [1] * rank
    shape[axis] = vector.shape[0]
    return vector.reshape(shape)


MOVEMENT_RULES: dict[Op, Callable] = {
    Op.BROADCAST: _broadcast,
    Op.RESHAPE: _reshape,
    Op.BITCAST: _reshape,
    Op.TRANSPOSE: _transpose,
    Op.SLICE: _slice,
    Op.CONCATENATE: _concatenate,
    Op.PAD: _pad,
    Op.REVERSE: _reverse,
    Op.GATHER: _gather,
}
