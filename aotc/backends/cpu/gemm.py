"""A contraction as a batch of GEMMs, or of matrix-vector products (gemv.py) when M or
N is 1: `GemmPlan`, what dot.py and conv.py plan, and its emission.

Each GEMM is blocked_gemm.py's packed, cache-blocked loop nest over the operands'
`Panels` (panels.py): packed from memory or generated as the GEMM goes, or a
constant's panels packed at compile time (prepackable.py, prepack.py), which need no
packing buffer.  The epilogue runs on each finished sliver of C while it is in cache.
Big enough contractions are shared out to the runtime's threads (gemm_split.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from llvmlite import ir

from ...buffers import Slice
from ...ir import DType
from ..llvm.context import EmitContext
from ..llvm.elemental import linearize
from ..llvm.extents import GemmClip, inside
from ..llvm.lltypes import I8, I64, PTR, i64
from ..llvm.loops import for_range, if_then, loop_nest
from .blocked_gemm import (
    block_count,
    block_span,
    emit_gemm,
    emit_gemm_on_b,
    emit_region,
    multiply_blocks,
    pack_whole_b_part,
)
from .blocking import Blocking, blocking
from .gemm_config import GemmConfig
from .gemm_split import MAX_PARTS, Split, gemm_split, gemv_split, share_out, share_packing
from .gemv import emit_gemv, emit_packed_gemv, packed_width
from .panels import PackedPanels, Panels, RowsInPlace, StridedPanels
from .prepackable import PackedShape, Prepackable, StridedLayout, is_constant
from .vectors import smaller

# (ctx, sources, batch index) -> the operand for that batch element
OperandFactory = Callable[[EmitContext, list, list[ir.Value]], Panels]


# ctx -> the clip, computed where it is called (a thread's body computes its own)
Clipping = Callable[[EmitContext], GemmClip]


@dataclass
class GemmPlan(Prepackable):
    """A contraction as a batch of GEMMs; what dot.py and conv.py plan.

    C of batch element `index` starts `c_offset(ctx, index)` elements into
    the contraction's buffer; `out_index(ctx, index, m, n)` is the
    contraction's multi-index of C[m, n] there (for the epilogue).
    """

    config: GemmConfig
    batch: tuple[int, ...]  # extents of the loops around the GEMM
    m: int
    n: int
    k: int
    ldc: int
    a: OperandFactory
    b: OperandFactory
    c_offset: Callable[[EmitContext, list[ir.Value]], ir.Value]
    out_index: Callable[[EmitContext, list[ir.Value], ir.Value, ir.Value], list[ir.Value]]
    gemv: str | None = None  # `gemv_kind`: both operands are then StridedPanels
    # the operands' memory layouts where they are read as StridedPanels (A's, B's)
    layouts: tuple[StridedLayout | None, StridedLayout | None] = (None, None)
    # where prepack.py put pre-packed copies of the operands in the weights (A's, B's)
    packed: tuple[Slice | None, Slice | None] = (None, None)
    # the contraction operands that A and B are (a convolution's A is its kernel)
    operands: tuple[int, int] = (0, 1)
    paired_k: int = 0  # integer GEMM: the K values that its k pairs hold (pairs.py)
    # integer GEMM: the element types of A and B in memory (8-bit ones widen as packed)
    sources: tuple[DType, DType] | None = None
    # what of the GEMMs their readers need in a call (bounded dims; contraction.py sets
    # it), None: all; gemvs compute whole
    clip: Clipping | None = None
    # A's rows read where they are, not packed (`with_a_in_place`)
    a_in_place: bool = False

    def source(self, side: int) -> DType:
        return self.config.source if self.sources is None else self.sources[side]

    @property
    def kind(self) -> str:
        """ "gemm", or "gemv.axpy" / "gemv.dot"."""
        return "gemm" if self.gemv is None else f"gemv.{self.gemv}"

    @property
    def blocks(self) -> Blocking:
        return blocking(self.config, self.m, self.n, self.k)

    @property
    def split(self) -> Split | None:
        """How the work is shared out to the threads; None: on the calling thread."""
        if self.gemv is None:
            split = gemm_split(self.config, self.batch, self.m, self.n, self.k)
            if split is None:
                return None
            return replace(split, packed=self._unpacked_regions)
        return gemv_split(self.config, self.batch, max(self.m, self.n), self.k)

    @property
    def workspace_bytes(self) -> int:
        split = self.split
        if split is not None:
            return split.workspace_bytes
        return 0 if self.gemv else sum(self.blocks.region_bytes(self._unpacked_regions))

    @property
    def _unpacked_regions(self) -> tuple[bool, bool]:
        """Which operands need no packing region: pre-packed, or A read in place."""
        return self.is_packed[0] or self.a_in_place, self.is_packed[1]

    def with_a_in_place(self) -> GemmPlan | None:
        """This plan reading A's rows where they are (`RowsInPlace`), no packing region
        for them: where A is in memory with k contiguous and not a constant (pre-packed
        anyway); None otherwise."""
        layout = self.layouts[0]
        if self.gemv is not None or self.paired_k or layout is None or layout.k_stride != 1:
            return None
        if is_constant(layout) or self.is_packed[0]:
            return None
        return replace(self, a_in_place=True)

    @property
    def _a_rows(self) -> int:
        """`multiply_blocks`' a_rows: the elements between A's rows read in place."""
        layout = self.layouts[0]
        return layout.p_stride if self.a_in_place and layout is not None else 0

    def can_pack(self, side: int) -> bool:
        """GEMM operands, and an axpy gemv's matrix (as panels of outputs)."""
        if self.gemv is None:
            return super().can_pack(side)
        return self.gemv == "axpy" and side == self._matrix_side and super().can_pack(side)

    @property
    def _matrix_side(self) -> int:
        """The operand that is the matrix of a gemv (the other is the vector)."""
        return 1 if self.m == 1 else 0

    def packed_shape(self, side: int) -> PackedShape:
        """How operand `side` is pre-packed: for the serial blocking, whose kc and tile
        sizes the split's blocking shares."""
        layout = self.layouts[side]
        batch = tuple(d for d, stride in layout.batch if stride and self.batch[d] > 1)
        count = self.m if side == 0 else self.n
        extents = tuple(self.batch[d] for d in batch)
        if self.gemv is not None:  # one K slice of panels of outputs
            width = packed_width(self.config, count)
            return PackedShape(count, self.k, self.k, width, batch, extents)
        blocks = self.blocks
        width = blocks.mr if side == 0 else blocks.nr
        return PackedShape(
            count,
            self.k,
            blocks.kc,
            width,
            batch,
            extents,
            paired_k=self.paired_k,
            quads=self.config.quads,
        )

    def operand(self, side: int, ctx: EmitContext, sources: list, index) -> Panels:
        """Operand `side` (0: A, 1: B) of batch element `index`."""
        where = self.packed[side]
        if where is None:
            panels = (self.a, self.b)[side](ctx, sources, index)
            if side == 0 and self.a_in_place:
                assert isinstance(panels, StridedPanels) and panels.k_stride == 1
                return RowsInPlace(panels.base, panels.p_stride)
            return panels
        shape = self.packed_shape(side)
        b = ctx.builder
        element = linearize(b, [index[d] for d in shape.batch], shape.extents)
        offset = b.mul(element, i64(shape.padded * shape.k))
        base = b.gep(ctx.slice_pointer(where), [offset], source_etype=self.config.element)
        return PackedPanels(base, shape.padded, shape.kc, shape.width)

    def emit(self, ctx: EmitContext, sources: list, c: Slice, workspace: Slice, epilogue):
        """The GEMMs (or gemvs) of the batch into `c`, packing in `workspace`, each then
        its epilogue; shared out to the threads when big enough.  With `clip`, only
        what it says the readers need."""
        clip = self.clip if self.gemv is None else None
        split = self.split
        if split is not None and split.mode == "batch":
            self._emit_batch_split(ctx, sources, c, workspace, epilogue, split, clip)
            return
        turns = list(self.batch)
        if clip is not None:
            turns = [d if n is None else n for d, n in zip(self.batch, clip(ctx).batch)]
        with loop_nest(ctx.builder, turns, "batch") as index:
            if split is None:
                self._emit_one(ctx, sources, c, workspace, epilogue, index, clip)
            else:
                self._emit_split(ctx, sources, c, workspace, epilogue, split, index, clip)

    def _emit_batch_split(self, ctx, sources, c, workspace, epilogue, split: Split, clip) -> None:
        """Whole GEMMs (gemv pieces) of the batch in parallel, a region per thread."""
        batches = len(self.batch)

        def unit(index, slot, _):
            b = ctx.builder
            batch = index[:batches]
            a, b_operand, c_batch, region = self.batch_operands(ctx, sources, c, epilogue, batch)
            if self.gemv is None:
                offset = b.mul(slot, i64(split.part_bytes))
                pointer = b.gep(ctx.slice_pointer(workspace), [offset], source_etype=I8)
                needed = clip(ctx) if clip is not None else None
                with if_then(b, inside(b, batch, needed.batch) if needed else None):
                    clipped = needed or GemmClip([], None, None)
                    emit_gemm(
                        ctx,
                        split.blocks,
                        a,
                        b_operand,
                        c_batch,
                        self.ldc,
                        pointer,
                        region,
                        clipped.rows,
                        clipped.cols,
                        clipped.depth,
                    )
                return
            i0 = b.mul(index[batches], i64(split.per))
            count = smaller(b, i64(split.per), b.sub(i64(max(self.m, self.n)), i0))
            self._gemv(ctx, a, b_operand, c_batch, region, i0, count)

        share_out(ctx, split.grid, split.parts, unit)

    def _emit_split(
        self, ctx, sources, c, workspace, epilogue, split: Split, index, clip=None
    ) -> None:
        """One GEMM, BLIS-style: per K slice the shared operand's block packed once in
        parallel (unless pre-packed), then parts of the other operand's panels in
        parallel (each part computing the rows or columns `clip` leaves)."""
        b = ctx.builder
        blocks = split.blocks
        dst = b.ptrtoint(ctx.slice_pointer(workspace), I64)
        needed = clip(ctx) if clip is not None else GemmClip([], None, None)
        m = blocks.m if needed.rows is None else needed.rows
        n = blocks.n if needed.cols is None else needed.cols
        k = blocks.k if needed.depth is None else needed.depth
        k_slices = block_count(b, k, blocks.kc)
        if split.packs_whole_b:
            self._pack_whole_b(ctx, sources, split, index, dst)
            self._parts_on_whole_b(ctx, sources, c, workspace, epilogue, split, index, clip)
            return
        if split.mode == "m":
            with for_range(b, k_slices, "kslice") as ki:
                k0, kc = block_span(b, ki, blocks.kc, k)
                with for_range(b, block_count(b, n, blocks.nb), "nblock") as ni:
                    n0, nb = block_span(b, ni, blocks.nb, n)
                    if not split.packed[1]:
                        values = [*index, dst, n0, nb, k0, kc]
                        share_packing(
                            ctx, blocks, self._side(1, sources), values, blocks.nr, blocks.nb
                        )
                    values = [*index, n0, nb, ki]
                    self._parts(ctx, sources, c, workspace, epilogue, split, values, clip)
            return
        with for_range(b, block_count(b, m, blocks.mb), "mblock") as mi:
            m0, mb = block_span(b, mi, blocks.mb, m)
            with for_range(b, k_slices, "kslice") as ki:
                k0, kc = block_span(b, ki, blocks.kc, k)
                if not split.packed[0]:
                    values = [*index, dst, m0, mb, k0, kc]
                    share_packing(ctx, blocks, self._side(0, sources), values, blocks.mr, blocks.mb)
                values = [*index, m0, mb, ki]
                self._parts(ctx, sources, c, workspace, epilogue, split, values, clip)

    def _pack_whole_b(self, ctx, sources, split: Split, index, dst) -> None:
        """B packed whole at `dst` (blocked_gemm.pack_whole_b), (K slice, run of column
        panels) units shared out to the threads."""
        blocks = split.blocks
        assert blocks is not None  # a GEMM's split (not a gemv's) has its blocking
        batches = len(self.batch)
        panels = -(-blocks.n // blocks.nr)
        per = -(-panels // MAX_PARTS)
        grid = (-(-blocks.k // blocks.kc), -(-panels // per))

        def unit(position, slot, passed):
            b = ctx.builder
            batch, (packed,) = passed[:batches], passed[batches:]
            ki, part = position
            first = b.mul(part, i64(per * blocks.nr))
            count = smaller(b, i64(per * blocks.nr), b.sub(i64(blocks.n), first))
            operand = self.operand(1, ctx, sources, batch)
            pack_whole_b_part(ctx, blocks, operand, b.inttoptr(packed, PTR), ki, first, count)

        share_out(ctx, grid, min(math.prod(grid), MAX_PARTS), unit, [*index, dst])

    def _parts_on_whole_b(self, ctx, sources, c, workspace, epilogue, split, index, clip) -> None:
        """Parts of `per` row panels, each over every K slice of the whole packed B
        (`_pack_whole_b`), A's rows packed per slice into the thread's region."""
        blocks = split.blocks
        assert blocks is not None  # a GEMM's split (not a gemv's) has its blocking
        batches = len(self.batch)
        step = split.per * blocks.mr

        def unit(position, slot, passed):
            b = ctx.builder
            batch = passed[:batches]
            _, _, c_batch, region = self.batch_operands(ctx, sources, c, epilogue, batch)
            start = ctx.slice_pointer(workspace)
            offset = b.add(i64(split.shared_bytes), b.mul(slot, i64(split.part_bytes)))
            own_region = b.gep(start, [offset], source_etype=I8)
            p0 = b.mul(position[0], i64(step))
            rows = _needed(ctx, clip, "rows", blocks.m)
            depth = clip(ctx).depth if clip is not None else None
            with if_then(b, b.icmp_signed("<", p0, rows)):
                count = smaller(b, i64(step), b.sub(rows, p0))
                operand = self.operand(0, ctx, sources, batch)
                emit_gemm_on_b(
                    ctx,
                    blocks,
                    operand,
                    start,
                    c_batch,
                    self.ldc,
                    own_region,
                    count,
                    region,
                    m0=p0,
                    streams_a=self.packed[0] is not None,
                    depth=depth,
                )

        share_out(ctx, (split.parts,), split.parts, unit, list(index))

    def _side(self, side: int, sources):
        """(ctx, batch) -> operand `side`, as `share_packing` takes it."""
        return lambda ctx, batch: self.operand(side, ctx, sources, batch)

    def _parts(self, ctx, sources, c, workspace, epilogue, split, values, clip) -> None:
        """Parts of `per` panels of the split dim (all of it), each packed into its
        thread's region then multiplied by the shared block (K slice `ki`).  By rows
        with B pre-packed, a part packs its rows at the first N block only, into a
        region of its own: the other blocks of the K slice reuse them (a 64 x 512 x 784
        GEMM spent 5% packing A twice)."""
        blocks = split.blocks
        batches = len(self.batch)
        by_rows = split.mode == "m"
        own_side, shared_side = (0, 1) if by_rows else (1, 0)
        width = blocks.mr if by_rows else blocks.nr
        shared_width = blocks.nr if by_rows else blocks.mr
        total = blocks.m if by_rows else blocks.n
        step = split.per * width
        packs_once = by_rows and split.packed[1] and not split.packed[0] and blocks.nb < blocks.n

        def unit(index, slot, passed):
            b = ctx.builder
            batch, (s0, extent, ki) = passed[:batches], passed[batches:]
            _, _, c_batch, region = self.batch_operands(ctx, sources, c, epilogue, batch)
            depth = clip(ctx).depth if clip is not None else None
            k0, kc = block_span(b, ki, blocks.kc, blocks.k if depth is None else depth)
            start = ctx.slice_pointer(workspace)
            shared = start
            if split.packed[shared_side]:
                operand = self.operand(shared_side, ctx, sources, batch)
                shared = operand.pack(ctx, blocks, None, s0, extent, k0, kc, shared_width)
            # the running thread's region, which its next parts reuse while it is in
            # cache; or when packed once, the part's own: what it packs must outlive
            # the piece
            region_index = index[0] if packs_once else slot
            offset = b.add(i64(split.shared_bytes), b.mul(region_index, i64(split.part_bytes)))
            own_region = b.gep(start, [offset], source_etype=I8)
            p0 = b.mul(index[0], i64(step))
            needed = _needed(ctx, clip, "rows" if by_rows else "cols", total)
            with if_then(b, b.icmp_signed("<", p0, needed)):
                count = smaller(b, i64(step), b.sub(needed, p0))
                self._part(
                    ctx,
                    sources,
                    own_side,
                    batch,
                    blocks,
                    own_region,
                    shared,
                    c_batch,
                    region,
                    split,
                    (p0, count, s0, extent, k0, kc, ki, depth),
                    packs_once,
                )

        share_out(ctx, (split.parts,), split.parts, unit, values)

    def _part(self, ctx, sources, own_side, batch, blocks, own_region, shared, c_batch, region,
              split, span, packs_once) -> None:  # fmt: skip
        """One part of `_parts`: its panels of the own side packed, times the shared block."""
        b = ctx.builder
        p0, count, s0, extent, k0, kc, ki, depth = span
        by_rows = own_side == 0
        width = blocks.mr if by_rows else blocks.nr
        operand = self.operand(own_side, ctx, sources, batch)
        if packs_once:
            with if_then(b, b.icmp_unsigned("==", s0, i64(0))):
                operand.pack(ctx, blocks, own_region, p0, count, k0, kc, width)
            own = own_region
        else:
            own = operand.pack(ctx, blocks, own_region, p0, count, k0, kc, width)
        a, b_panels = (own, shared) if by_rows else (shared, own)
        block = (p0, count, s0, extent) if by_rows else (s0, extent, p0, count)
        multiply_blocks(
            ctx, blocks, a, b_panels, c_batch, self.ldc, block, ki, region,
            self.packed[0] is not None, depth, self._a_rows,
        )  # fmt: skip

    def _emit_one(
        self, ctx, sources, c: Slice, workspace: Slice, epilogue, index, clip=None
    ) -> None:
        """The GEMM (or gemv) of batch element `index`, on the calling thread."""
        a, b_operand, c_batch, region = self.batch_operands(ctx, sources, c, epilogue, index)
        if self.gemv is None:
            packing = ctx.slice_pointer(workspace)
            needed = clip(ctx) if clip is not None else GemmClip([], None, None)
            emit_gemm(
                ctx,
                self.blocks,
                a,
                b_operand,
                c_batch,
                self.ldc,
                packing,
                region,
                needed.rows,
                needed.cols,
                needed.depth,
            )
        else:
            self._gemv(ctx, a, b_operand, c_batch, region, i64(0), max(self.m, self.n))

    def batch_operands(self, ctx, sources, c: Slice, epilogue, index):
        """(A, B, C, epilogue region) of batch element `index`."""
        a = self.operand(0, ctx, sources, index)
        b_operand = self.operand(1, ctx, sources, index)
        offset = self.c_offset(ctx, index)
        c_batch = ctx.builder.gep(ctx.slice_pointer(c), [offset], source_etype=self.config.element)
        region = None
        if epilogue is not None:

            def region(m0, rows, n0, cols):
                def element(m, n):
                    epilogue(self.out_index(ctx, index, m, n))

                emit_region(ctx, m0, rows, n0, cols, element)

        return a, b_operand, c_batch, region

    def _gemv(self, ctx, a, b_operand, c, region, i0, count) -> None:
        """Outputs [i0, i0 + count) of a matrix-vector product, then their epilogue."""
        vector, matrix = (a, b_operand) if self.m == 1 else (b_operand, a)
        b = ctx.builder
        ty = self.config.element
        out = b.gep(c, [i0], source_etype=ty)
        if isinstance(matrix, PackedPanels):  # i0 starts a panel (pieces are whole panels)
            panels = b.gep(matrix.base, [b.mul(i0, i64(self.k))], source_etype=ty)
            emit_packed_gemv(ctx, self.config, matrix.width, count, self.k, vector, panels, out)
        else:
            self._strided_gemv(ctx, vector, matrix, out, i0, count)
        if region is not None:
            if self.m == 1:
                region(i64(0), 1, i0, count)
            else:
                region(i0, count, i64(0), 1)

    def _strided_gemv(self, ctx, vector, matrix, out, i0, count) -> None:
        """Outputs from i0 on of the gemv reading the matrix where it is."""
        # a constant axpy matrix of other strides is read only pre-packed (`gemv_kind`)
        assert self.gemv != "axpy" or matrix.p_stride == 1, "axpy gemv of an unpacked matrix"
        b = ctx.builder
        ty = self.config.element
        matrix = StridedPanels(
            b.gep(matrix.base, [b.mul(i0, i64(matrix.p_stride))], source_etype=ty),
            matrix.p_stride,
            matrix.k_stride,
        )
        emit_gemv(ctx, self.config, self.gemv, count, self.k, vector, matrix, out)


def _needed(ctx: EmitContext, clip: Clipping | None, side: str, whole: int) -> ir.Value:
    """C's rows or cols ("rows"/"cols") that `clip` needs, else all `whole` of them."""
    needed = getattr(clip(ctx), side) if clip is not None else None
    return i64(whole) if needed is None else needed
