"""Dot: the element rule (any dtype), and the GEMM plan for f32/f64 kernels.

Output dims are [batch..., lhs free..., rhs free...].  The rule computes an
element as a loop over the contracting dims (used for other dtypes and where
a dot is fused into a consumer that is not its elementwise epilogue);
`plan_dot` maps a dot to batched GEMMs (contraction.py emits them): M over
the lhs free dims, N over the rhs free dims, K over the contracting dims,
each operand read from memory with merged strides when it is a plain view,
else through its generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir import DType, Instruction
from ..llvm.elemental import delinearize, linearize, split_index
from ..llvm.lltypes import i64
from .gemm import GemmPlan
from .gemm_config import gemm_config
from .gemv import gemv_kind
from .pairs import paired_factory, pairs_of
from .panels import GeneratedPanels, StridedPanels
from .prepackable import StridedLayout
from .views import affine, merged_stride

# -- GEMM plans (contraction.py) ---------------------------------------------------


@dataclass(frozen=True)
class _Side:
    """One dot operand as a GEMM operand: panel dims (free), depth dims (contracting)."""

    operand: int
    batch: tuple[int, ...]
    free: tuple[int, ...]
    contracting: tuple[int, ...]
    dims: tuple[int, ...]
    strides: tuple[int, int] | None  # merged (panel, depth) strides when in plain memory
    batch_strides: tuple[int, ...]
    source: DType  # the element type read: the view's in memory, else the operand's

    def factory(self):
        if self.strides is not None:
            return self._strided
        return self._generated

    def _strided(self, ctx, sources, index):
        view = sources[self.operand].view
        b = ctx.builder
        offset = i64(0)
        for value, stride in zip(index, self.batch_strides):
            offset = b.add(offset, b.mul(value, i64(stride)))
        return StridedPanels(view.pointer(ctx, offset), *self.strides)

    def _generated(self, ctx, sources, index):
        gen = sources[self.operand].gen
        free_extents = [self.dims[d] for d in self.free]
        depth_extents = [self.dims[d] for d in self.contracting]

        def element(p, k):
            b = ctx.builder
            operand_index = [None] * len(self.dims)
            groups = (
                (self.batch, index),
                (self.free, delinearize(b, p, free_extents)),
                (self.contracting, delinearize(b, k, depth_extents)),
            )
            for dims, values in groups:
                for d, value in zip(dims, values):
                    operand_index[d] = value
            return gen(operand_index)

        return GeneratedPanels(element)


def plan_dot(target, dot: Instruction, views) -> GemmPlan | None:
    """A dot as batched GEMMs: M, N over the free dims, K over the contracting ones."""
    config = gemm_config(target, dot.array_shape.dtype, dot.operands[0].shape.dtype)
    if config is None:
        return None
    dims = dot.dot
    sides, layouts = [], []
    for operand, batch, contracting in (
        (0, dims.lhs_batch, dims.lhs_contracting),
        (1, dims.rhs_batch, dims.rhs_contracting),
    ):
        shape = dot.operands[operand].shape
        free = tuple(d for d in range(shape.rank) if d not in batch + contracting)
        view = affine(views[operand])
        strides = batch_strides = None
        source = shape.dtype
        if view is not None:
            panel = merged_stride([shape.dims[d] for d in free], [view.strides[d] for d in free])
            depth = merged_stride(
                [shape.dims[d] for d in contracting], [view.strides[d] for d in contracting]
            )
            if panel is not None and depth is not None:
                strides = (panel, depth)
                batch_strides = tuple(view.strides[d] for d in batch)
                source = view.dtype  # 8-bit integers an integer GEMM widens as it packs
        sides.append(
            _Side(operand, batch, free, contracting, shape.dims, strides, batch_strides, source)
        )
        layout = None
        if strides is not None:  # batch dim j of the operand is position j of the GEMM's
            layout = StridedLayout(view.where, tuple(enumerate(batch_strides)), *strides)
        layouts.append(layout)
    lhs, rhs = sides
    m = math.prod(lhs.dims[d] for d in lhs.free)
    n = math.prod(rhs.dims[d] for d in rhs.free)
    k = math.prod(lhs.dims[d] for d in lhs.contracting)
    if m * n * k == 0:
        return None
    batch = tuple(lhs.dims[d] for d in lhs.batch)
    factories = (lhs.factory(), rhs.factory())
    gemv = None
    if config.paired:  # K in pairs of values; no gemv kernels of pairs
        factories = tuple(paired_factory(f, s.source, k) for f, s in zip(factories, sides))
        return GemmPlan(config, batch, m, n, pairs_of(k), n, *factories,
                        *_placement(batch, m, n, lhs, rhs), None, tuple(layouts),
                        paired_k=k, sources=(lhs.source, rhs.source))  # fmt: skip
    if lhs.strides is not None and rhs.strides is not None:
        if m == 1:
            gemv = gemv_kind(m, n, rhs.strides, lhs.strides[1])
        elif n == 1:
            gemv = gemv_kind(m, n, lhs.strides, rhs.strides[1])
    return GemmPlan(config, batch, m, n, k, n, *factories, *_placement(batch, m, n, lhs, rhs),
                    gemv, tuple(layouts))  # fmt: skip


def _placement(batch, m: int, n: int, lhs: _Side, rhs: _Side):
    """GemmPlan's `c_offset` and `out_index` of a dot's result."""
    free_m = [lhs.dims[d] for d in lhs.free]
    free_n = [rhs.dims[d] for d in rhs.free]

    def c_offset(ctx, index):
        return ctx.builder.mul(linearize(ctx.builder, index, batch), i64(m * n))

    def out_index(ctx, index, row, col):
        b = ctx.builder
        return [*index, *split_index(b, row, free_m), *split_index(b, col, free_n)]

    return c_offset, out_index

