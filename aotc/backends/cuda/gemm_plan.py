"""Contractions seen as batched GEMMs, for the GPU's GEMM kernels.

`gemm_plan(dot or convolution, its kernel)` views it as C[g, m, n] = sum_k A[g, m, k] * B[g, k, n]
(`Gemm`): a dot's batch dims, free dims and contracting dims; a convolution as an
implicit GEMM per feature group (weights [Cout_g, Cin_g * taps] times image columns
[Cin_g * taps, pixels], the columns read straight from the image, padding and dilation
holes as zeros).  Operands are read through their element generators, so producers
fused into the contraction (transposes, converts, scaled weights) need no buffers.
Where bounded dims leave part of C unread in a call, `Gemm.needed` says which part
(`Needed`), and the kernels skip the rest: blocks of unneeded tiles return at once, the
depth loop stops where the operands' masked zeros start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from llvmlite import ir

from ...ir import Instruction, Op
from ...ir.fusion_kinds import output_contractions
from ..llvm.context import Gen
from ..llvm.extents import clips_dot, dot_clip, inside, limits, moved_free_dims, span
from ..llvm.lltypes import I32, I64, i32
from ..llvm.scalar import zero_like
from ..llvm.window import all_of, tap_position
from .context import GpuContext
from .elementwise import split_position

# (ctx, batch, row, col) -> element; batch/row/col are i32 values
Element = Callable[[GpuContext, ir.Value, ir.Value, ir.Value], ir.Value]


@dataclass
class Needed:
    """What of a Gemm's C the call's readers need (bounded dims: llvm/extents.py), read
    at the kernel's start: per batch dim (of extents `batch_dims`) the positions needed
    (i64; None: all), C's first `m` rows and `n` columns, and how deep `k` goes past
    the operands' masked zeros (i32s; None: all)."""

    batch: list[ir.Value | None]
    batch_dims: list[int]
    m: ir.Value | None
    n: ir.Value | None
    k: ir.Value | None

    def holds(self, ctx: GpuContext, g: ir.Value, m: ir.Value, n: ir.Value) -> ir.Value | None:
        """Whether C[g, m, n] (i32s) is needed, as an i1 (None: every element is); of a
        tile's first element, whether the tile holds any needed one."""
        b = ctx.builder
        assert b is not None
        conditions = [
            b.icmp_unsigned("<", at, count)
            for at, count in ((m, self.m), (n, self.n))
            if count is not None
        ]
        if any(c is not None for c in self.batch):
            conditions.append(inside(b, split_position(ctx, g, self.batch_dims), self.batch))
        return all_of(b, conditions)


# ctx -> what of the GEMM the call needs, computed where it is called (a kernel's start)
Needing = Callable[[GpuContext], Needed]


@dataclass
class Gemm:
    """A contraction as `batch` GEMMs of M x K by K x N, read through `a` and `b`."""

    batch: int
    m: int
    n: int
    k: int
    a: Element  # (g, m, k)
    b: Element  # (g, k, n)
    a_k_fast: bool  # consecutive k are adjacent in A's memory (else consecutive m)
    b_n_fast: bool  # consecutive n are adjacent in B's memory (else consecutive k)
    out_index: Callable[[GpuContext, ir.Value, ir.Value, ir.Value], list]  # (g, m, n)
    operands: tuple[int, int]  # the contraction's operands that A and B read
    needed: Needing | None = None  # None: all of C, every call


def transposed(gemm: Gemm) -> Gemm:
    """The same contraction as C^T = B^T A^T: m and n swap roles."""
    needed = gemm.needed
    swapped = None if needed is None else lambda ctx: _swapped(needed(ctx))
    return Gemm(
        gemm.batch,
        gemm.n,
        gemm.m,
        gemm.k,
        lambda ctx, g, n, k: gemm.b(ctx, g, k, n),
        lambda ctx, g, k, m: gemm.a(ctx, g, m, k),
        not gemm.b_n_fast,
        not gemm.a_k_fast,
        lambda ctx, g, n, m: gemm.out_index(ctx, g, m, n),
        gemm.operands[::-1],
        swapped,
    )


def _swapped(needed: Needed) -> Needed:
    return replace(needed, m=needed.n, n=needed.m)


def _as_i32(ctx: GpuContext, value: ir.Value | None) -> ir.Value | None:
    b = ctx.builder
    assert b is not None
    return None if value is None else b.trunc(value, I32)


def contraction_of(instr: Instruction) -> Instruction | None:
    """The dot/convolution a kernel computes as GEMM: itself, or the one of an OUTPUT
    fusion (its root reads it through an elementwise epilogue)."""
    found = output_contractions(instr)
    return found[0] if len(found) == 1 else None


# -- contractions as GEMMs ---------------------------------------------------------------


def gemm_plan(contraction: Instruction, kernel: Instruction):
    """(shape-only Gemm for sizing, factory(lhs gen, rhs gen) -> Gemm), or None, for the
    contraction that `kernel` (itself, or an output fusion of it) computes."""
    if contraction.op is Op.DOT:
        return _dot_plan(contraction, kernel)
    return _conv_plan(contraction, kernel)


def _innermost(dims: tuple[int, ...]) -> int | None:
    live = [d for d, extent in enumerate(dims) if extent != 1]
    return live[-1] if live else None


def _dot_plan(dot: Instruction, kernel: Instruction):
    """The dot's batch dims as the GEMM's, and where its extents clip two or more lhs
    free dims the leading ones too (`moved_free_dims`: b GEMMs of s rows, not the b x S
    rows that cover them)."""
    d = dot.dot
    lhs_dims, rhs_dims = dot.operands[0].array_shape.dims, dot.operands[1].array_shape.dims
    lhs_free = [i for i in range(len(lhs_dims)) if i not in d.lhs_batch + d.lhs_contracting]
    rhs_free = [i for i in range(len(rhs_dims)) if i not in d.rhs_batch + d.rhs_contracting]
    clipped = clips_dot(kernel, dot)
    moved = moved_free_dims(dot) if clipped else 0
    lhs_batch, lhs_free = [*d.lhs_batch, *lhs_free[:moved]], lhs_free[moved:]
    batch_ext = [lhs_dims[i] for i in lhs_batch]
    m_ext = [lhs_dims[i] for i in lhs_free]
    n_ext = [rhs_dims[i] for i in rhs_free]
    k_ext = [lhs_dims[i] for i in d.lhs_contracting]
    sizes = (math.prod(batch_ext), math.prod(m_ext), math.prod(n_ext), math.prod(k_ext))
    a_k_fast = _innermost(lhs_dims) in d.lhs_contracting
    b_n_fast = _innermost(rhs_dims) in rhs_free

    def place(rank, groups):
        index = [None] * rank
        for dims, values in groups:
            for dim, value in zip(dims, values):
                index[dim] = value
        return index

    def needed(ctx: GpuContext) -> Needed:
        clip = dot_clip(ctx, kernel, dot, len(lhs_batch))
        rows, cols, depth = (_as_i32(ctx, v) for v in (clip.rows, clip.cols, clip.depth))
        return Needed(clip.batch, batch_ext, rows, cols, depth)

    def make(lhs: Gen, rhs: Gen) -> Gemm:
        def a(ctx, g, m, k):
            groups = [
                (lhs_batch, split_position(ctx, g, batch_ext)),
                (lhs_free, split_position(ctx, m, m_ext)),
                (d.lhs_contracting, split_position(ctx, k, k_ext)),
            ]
            return lhs(place(len(lhs_dims), groups))

        def b(ctx, g, k, n):  # B has no dims of the moved lhs free ones
            groups = [
                (d.rhs_batch, split_position(ctx, g, batch_ext)[: len(d.rhs_batch)]),
                (rhs_free, split_position(ctx, n, n_ext)),
                (d.rhs_contracting, split_position(ctx, k, k_ext)),
            ]
            return rhs(place(len(rhs_dims), groups))

        def out_index(ctx, g, m, n):
            return [
                *split_position(ctx, g, batch_ext),
                *split_position(ctx, m, m_ext),
                *split_position(ctx, n, n_ext),
            ]

        return Gemm(
            *sizes, a, b, a_k_fast, b_n_fast, out_index, (0, 1), needed if clipped else None
        )

    return Gemm(*sizes, None, None, a_k_fast, b_n_fast, None, (0, 1)), make


def _conv_plan(conv: Instruction, kernel: Instruction):
    """Per feature group: weights [Cout_g, Cin_g*taps] x columns [Cin_g*taps, pixels];
    bounded dims clip the pixels (batch and spatial positions) to those needed."""
    if conv.batch_group_count != 1:
        return None
    dims, window = conv.conv, conv.window
    assert dims is not None and window is not None  # the verifier requires them
    lhs_dims, rhs_dims = conv.operands[0].array_shape.dims, conv.operands[1].array_shape.dims
    out_dims = conv.array_shape.dims
    groups = conv.feature_group_count
    cin_g = rhs_dims[dims.kernel_input_feature]
    cout_g = rhs_dims[dims.kernel_output_feature] // groups
    taps = list(window.size)
    pixels = [out_dims[dims.output_batch], *(out_dims[d] for d in dims.output_spatial)]
    in_spatial = [lhs_dims[d] for d in dims.input_spatial]
    # depth order follows the image's memory: channels outermost for NCHW, innermost NHWC
    channels_first = dims.input_feature < min(dims.input_spatial, default=dims.input_feature)
    k_ext = [cin_g, *taps] if channels_first else [*taps, cin_g]
    sizes = (groups, cout_g, math.prod(pixels), math.prod(k_ext))
    a_k_fast = _innermost(rhs_dims) != dims.kernel_output_feature
    b_n_fast = _innermost(lhs_dims) in dims.input_spatial

    pixel_dims = [dims.output_batch, *dims.output_spatial]

    def pixels_needed(ctx: GpuContext) -> Needed:
        counts = limits(ctx, kernel) or [None] * len(out_dims)
        needed = span(ctx.builder, [counts[d] for d in pixel_dims], pixels)
        n = None if isinstance(needed, int) else _as_i32(ctx, needed)
        return Needed([], [], None, n, None)

    needed = pixels_needed if kernel.extents is not None else None

    def depth(ctx, k):
        parts = split_position(ctx, k, k_ext)
        return (parts[0], parts[1:]) if channels_first else (parts[-1], parts[:-1])

    def make(lhs: Gen, rhs: Gen) -> Gemm:
        def a(ctx, g, m, k):  # the kernel: [g*Cout_g + m, ci, taps]
            b = ctx.builder
            assert b is not None
            channel, tap = depth(ctx, k)
            index = [None] * len(rhs_dims)
            out_feature = b.add(b.mul(g, i32(cout_g)), m) if groups > 1 else m
            index[dims.kernel_output_feature] = b.zext(out_feature, I64)
            index[dims.kernel_input_feature] = channel
            for d, value in zip(dims.kernel_spatial, tap):
                index[d] = value
            return rhs(index)

        def b_(ctx, g, k, n):  # the image: [batch, g*Cin_g + ci, position of the tap]
            b = ctx.builder
            assert b is not None
            channel, tap = depth(ctx, k)
            batch, *out = split_position(ctx, n, pixels)
            index = [None] * len(lhs_dims)
            index[dims.input_batch] = batch
            if groups > 1:
                channel = b.add(b.mul(b.zext(g, I64), ir.Constant(I64, cin_g)), channel)
            index[dims.input_feature] = channel
            conditions = []
            for i, (o, tp) in enumerate(zip(out, tap)):
                where, inside = tap_position(b, o, tp, in_spatial[i], window, i)
                conditions += inside
                # out-of-range taps read position 0 instead (then zeroed)
                index[dims.input_spatial[i]] = (
                    where if not inside else b.select(all_of(b, inside), where, ir.Constant(I64, 0))
                )
            value = lhs(index)
            valid = all_of(b, conditions)
            if valid is None:
                return value
            return b.select(valid, value, zero_like(value))

        def out_index(ctx, g, m, n):
            b = ctx.builder
            assert b is not None
            batch, *out = split_position(ctx, n, pixels)
            index = [None] * len(out_dims)
            index[dims.output_batch] = batch
            feature = b.add(b.mul(g, i32(cout_g)), m) if groups > 1 else m
            index[dims.output_feature] = b.zext(feature, I64)
            for d, value in zip(dims.output_spatial, out):
                index[d] = value
            return index

        return Gemm(*sizes, a, b_, a_k_fast, b_n_fast, out_index, (1, 0), needed)

    return Gemm(*sizes, None, None, a_k_fast, b_n_fast, None, (1, 0)), make
