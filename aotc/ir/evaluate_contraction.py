"""Evaluator rules of the contractions, dot and convolution (XLA semantics), which
accumulate in f64, or in 64-bit integers that wrap as the narrow types do.

`CONTRACTION_RULES` is this family's part of `evaluate.EVAL_RULES`.
"""

from __future__ import annotations

import string
from collections.abc import Callable

import numpy as np

from .evaluate_movement import pad_array, windows
from .module import Instruction
from .ops import Op


def _wide(x: np.ndarray) -> np.ndarray:
    """Accumulation type of dot and convolution: f64, or 64-bit integers (which wrap
    modulo 2^64, so narrowing the sum gives the narrow type's wrapped result)."""
    if x.dtype.kind == "f":
        return x.astype(np.float64)
    if x.dtype.kind == "u":
        return x.astype(np.uint64)
    return x.astype(np.int64)


def _dot(instr: Instruction, operands: list) -> np.ndarray:
    lhs, rhs = (_wide(x) for x in operands)
    d = instr.dot
    letters = iter(string.ascii_letters)
    lhs_sub = [""] * lhs.ndim
    rhs_sub = [""] * rhs.ndim
    for a, b in zip(d.lhs_batch + d.lhs_contracting, d.rhs_batch + d.rhs_contracting):
        lhs_sub[a] = rhs_sub[b] = next(letters)
    lhs_free = [i for i, s in enumerate(lhs_sub) if not s]
    rhs_free = [i for i, s in enumerate(rhs_sub) if not s]
    for i in lhs_free:
        lhs_sub[i] = next(letters)
    for i in rhs_free:
        rhs_sub[i] = next(letters)
    out = [lhs_sub[i] for i in d.lhs_batch]
    out += [lhs_sub[i] for i in lhs_free] + [rhs_sub[i] for i in rhs_free]
    spec = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(out)}"
    return np.einsum(spec, lhs, rhs, optimize=True)


def _convolution(instr: Instruction, operands: list) -> np.ndarray:
    """XLA convolution, computed in (batch, feature, spatial...) order: dilate and pad
    the input, take every window, contract each group with its kernel slice."""
    c, w = instr.conv, instr.window
    lhs, rhs = (_wide(x) for x in operands)
    n = len(c.input_spatial)
    lhs = lhs.transpose([c.input_batch, c.input_feature, *c.input_spatial])
    rhs = rhs.transpose([c.kernel_output_feature, c.kernel_input_feature, *c.kernel_spatial])
    lhs = pad_array(
        lhs, 0, (0, 0, *w.pad_low), (0, 0, *w.pad_high), (0, 0, *(d - 1 for d in w.lhs_dilation))
    )
    framed = windows(lhs, range(2, 2 + n), w.size, w.stride, w.rhs_dilation)
    # framed: (batch, in feature, out spatial..., window...)
    feature_groups, batch_groups = instr.feature_group_count, instr.batch_group_count
    assert feature_groups == 1 or batch_groups == 1, instr
    groups = max(feature_groups, batch_groups)
    batch, features, out_features = lhs.shape[0], lhs.shape[1], rhs.shape[0]
    window_axes = [1, *range(2 + n, 2 + 2 * n)]
    kernel_axes = [1, *range(2, 2 + n)]
    parts = []
    for g in range(groups):
        x = framed
        if batch_groups > 1:  # group g: batch rows g*B/G.., output features g*O/G..
            x = x[g * batch // groups : (g + 1) * batch // groups]
        if feature_groups > 1:  # group g: input features g*C/G.., output features g*O/G..
            x = x[:, g * features // groups : (g + 1) * features // groups]
        kernel = rhs[g * out_features // groups : (g + 1) * out_features // groups]
        parts.append(np.tensordot(x, kernel, axes=(window_axes, kernel_axes)))
    result = np.moveaxis(np.concatenate(parts, axis=-1), -1, 1)  # (batch, feature, spatial...)
    canonical = [0] * (n + 2)
    canonical[c.output_batch] = 0
    canonical[c.output_feature] = 1
    for i, s in enumerate(c.output_spatial):
        canonical[s] = 2 + i
    return result.transpose(canonical)


CONTRACTION_RULES: dict[Op, Callable] = {
    Op.DOT: _dot,
    Op.CONVOLUTION: _convolution,
}
