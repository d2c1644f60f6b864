"""A dot as the CPU's kernel forms see it (`DotProblem`), and its forms.

Output dims are [batch..., lhs free..., rhs free...].  `dot_problem` maps a dot to
batched GEMMs: M over the lhs free dims, N over the rhs free dims, K over the
contracting dims, each operand read from memory with merged strides when it is a
plain view, else through its generator.  forms.py's DOT_FORMS asks, in turn,
`plan_paired_dot` (integers in 16-bit pairs), `plan_gemv` (matrix-vector products,
gemv.py) and `plan_gemm`; contraction.py emits the plan.  Dots no form takes (other
dtypes, or fused into a consumer that is not their elementwise epilogue) run by
llvm/dot_conv.py's element rule, a loop over the contracting dims per element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...ir import DType, Instruction
from ...ir.fusion_kinds import BYTE_TYPES, byte_values
from ..llvm.elemental import delinearize, linearize, split_index
from ..llvm.extents import moved_free_dims
from ..llvm.lltypes import i64
from .amx import AmxPlan, tiled
from .gemm import GemmPlan
from .gemm_config import GemmConfig, gemm_config, takes_bytes
from .gemv import gemv_kind
from .nbits import NBitsPlan, NBitsWeight, plan_nbits
from .pairs import paired_factory, pairs_of
from .panels import GeneratedPanels, StridedPanels
from .prepackable import StridedLayout, is_constant, packed_workspace
from .quads import quad_factory, quads_of
from .views import affine, merged_stride
from .workspace import Budget

# -- the problem -------------------------------------------------------------------


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
    # the 8-bit integer type of the values, where they are 8-bit: in memory, or converted
    # to a wider type by the operand (quads.py packs them as bytes)
    bytes: DType | None = None

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
                    if d != ABSENT:  # a batch dim of the other operand only
                        operand_index[d] = value
            return gen(operand_index)

        return GeneratedPanels(element)


# a batch dim of the GEMM that one operand does not have (stride 0 in it)
ABSENT = -1


def dot_problem(target, dot: Instruction, views, budget=None) -> DotProblem | None:
    """The problem the forms plan `dot` from (`views`: its operands' memory views, or
    None), or None: no form takes it (no GEMM blocking for its types, nothing to do).
    `budget`: what the kernel's workspace may take (None: any).
    A float dot's leading lhs free dims run as batch dims where `moved_free_dims` says."""
    config = gemm_config(target, dot.array_shape.dtype, dot.operands[0].array_shape.dtype)
    if config is None:
        return None
    dims = dot.dot
    assert dims is not None
    moved = 0 if config.paired or any(_is_nbits(v) for v in views) else moved_free_dims(dot)
    lhs_free = [
        i
        for i in range(dot.operands[0].array_shape.rank)
        if i not in dims.lhs_batch + dims.lhs_contracting
    ]
    sides, layouts, weights = [], [], []
    for operand, batch, contracting in (
        (0, (*dims.lhs_batch, *lhs_free[:moved]), dims.lhs_contracting),
        (1, (*dims.rhs_batch, *[ABSENT] * moved), dims.rhs_contracting),
    ):
        shape = dot.operands[operand].shape
        free = tuple(d for d in range(shape.rank) if d not in batch + contracting)
        weight = views[operand] if isinstance(views[operand], NBitsWeight) else None
        weights.append(weight)
        view = None if weight is not None else affine(views[operand])
        strides = batch_strides = None
        source = shape.dtype
        if view is not None:
            panel = merged_stride([shape.dims[d] for d in free], [view.strides[d] for d in free])
            depth = merged_stride(
                [shape.dims[d] for d in contracting], [view.strides[d] for d in contracting]
            )
            if panel is not None and depth is not None:
                strides = (panel, depth)
                batch_strides = tuple(0 if d == ABSENT else view.strides[d] for d in batch)
                source = view.dtype  # 8-bit integers an integer GEMM widens as it packs
        narrow = byte_values(dot.operands[operand]) if strides is None else source
        side = _Side(operand, batch, free, contracting, shape.dims, strides, batch_strides, source)
        sides.append(replace(side, bytes=narrow if narrow in BYTE_TYPES else None))
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
    return DotProblem(config, batch, m, n, k, lhs, rhs, tuple(layouts), tuple(weights), budget)


def _is_nbits(view) -> bool:
    return isinstance(view, NBitsWeight)


@dataclass(frozen=True)
class DotProblem:
    """One dot as batched GEMMs: M, N over the free dims, K over the contracting ones."""

    config: GemmConfig
    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    lhs: _Side
    rhs: _Side
    layouts: tuple[StridedLayout | None, ...]  # A's, B's
    # block-dequantized weights of constants (nbits.py): where their parts are
    weights: tuple[NBitsWeight | None, ...] = (None, None)
    # what the kernel's workspace may take without raising the memory plan's peak,
    # None: any
    budget: Budget | None = None

    def gemm(self, factories, k: int, gemv: str | None = None, **paired) -> GemmPlan:
        """The GemmPlan of the batch, K `k` deep, reading A and B through `factories`."""
        placement = _placement(self.batch, self.m, self.n, self.lhs, self.rhs)
        return GemmPlan(
            self.config,
            self.batch,
            self.m,
            self.n,
            k,
            self.n,
            *factories,
            *placement,
            gemv,
            self.layouts,
            **paired,
        )


def plan_nbits_dot(problem: DotProblem) -> NBitsPlan | None:
    """A float dot by a block-dequantized constant weight: nbits.py's kernels on its
    pre-packed values."""
    weight = problem.weights[1]
    return None if weight is None else plan_nbits(problem, weight)


def plan_amx_dot(problem: DotProblem) -> AmxPlan | None:
    """An integer dot of 8-bit operands, one a constant, on a target with AMX-INT8: tile
    products (amx.py), A read as its values, B as quad panels."""
    config, lhs, rhs, k = problem.config, problem.lhs, problem.rhs, problem.k
    if not (config.paired and config.tiles) or lhs.bytes is None or rhs.bytes is None:
        return None
    types = (lhs.bytes, rhs.bytes)
    quads = replace(config, quad_types=types)  # the packers'
    factories = (lhs.factory(), quad_factory(rhs.factory(), k))
    gemm = replace(problem, config=quads).gemm(
        factories, quads_of(k), paired_k=k, sources=(lhs.source, rhs.source)
    )
    return tiled(gemm, types)


def plan_quad_dot(problem: DotProblem) -> GemmPlan | None:
    """A dot of 8-bit operands (in memory, or converted from them by the operand's
    computation) of the types the target's byte dots take (one u8 and one s8 for
    vpdpbusd and usdot, two s8 or two u8 for sdot and udot): GEMMs of 8-bit quads
    (quads.py)."""
    config, lhs, rhs, k = problem.config, problem.lhs, problem.rhs, problem.k
    if not config.paired or lhs.bytes is None or rhs.bytes is None:
        return None
    if not takes_bytes(config, lhs.bytes, rhs.bytes):
        return None
    quads = replace(config, quad_types=(lhs.bytes, rhs.bytes))
    factories = tuple(quad_factory(s.factory(), k) for s in (lhs, rhs))
    return replace(problem, config=quads).gemm(
        factories, quads_of(k), paired_k=k, sources=(lhs.source, rhs.source)
    )


def plan_paired_dot(problem: DotProblem) -> GemmPlan | None:
    """An integer dot: GEMMs of K in pairs of values (pairs.py); no gemv kernels of them."""
    if not problem.config.paired:
        return None
    lhs, rhs, k = problem.lhs, problem.rhs, problem.k
    factories = tuple(paired_factory(s.factory(), s.source, k) for s in (lhs, rhs))
    return problem.gemm(factories, pairs_of(k), paired_k=k, sources=(lhs.source, rhs.source))


def plan_gemv(problem: DotProblem) -> GemmPlan | None:
    """A float matrix-vector product (M or N 1) of operands in memory: gemv.py's kernels,
    where `gemv_kind` has one for their strides."""
    lhs, rhs, m, n = problem.lhs, problem.rhs, problem.m, problem.n
    if problem.config.paired or lhs.strides is None or rhs.strides is None:
        return None
    if m == 1:
        gemv = gemv_kind(m, n, rhs.strides, lhs.strides[1], is_constant(problem.layouts[1]))
    elif n == 1:
        gemv = gemv_kind(m, n, lhs.strides, rhs.strides[1], is_constant(problem.layouts[0]))
    else:
        return None
    if gemv is None:
        return None
    return problem.gemm((lhs.factory(), rhs.factory()), problem.k, gemv)


def plan_gemm(problem: DotProblem) -> GemmPlan | None:
    """A float dot as batched GEMMs."""
    if problem.config.paired:
        return None
    plan = problem.gemm((problem.lhs.factory(), problem.rhs.factory()), problem.k)
    budget = problem.budget
    if budget is None or not budget.strict or packed_workspace(plan) <= budget.free:
        return plan
    # A's rows read in place where its packing region would raise the peak: 0.85-1.11
    # of packed A's time (f32, M 16-1024, K 256-4096, one and two threads), no region
    in_place = plan.with_a_in_place()
    if in_place is not None and packed_workspace(in_place) < packed_workspace(plan):
        return in_place
    return plan


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
