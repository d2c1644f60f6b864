"""Packed, cache-blocked GEMM in LLVM IR, in the BLIS/GotoBLAS style.

`emit_gemm` computes C[M, N] = A[M, K] B[K, N] for one batch element; C is
row-major with row stride `ldc` and unit column stride.  K goes in slices of
kc; per slice A is packed into MR-row panels (kc x MR each: the micro-panel
that stays in L1) over MB rows (L3), and B into NR-column panels (kc x NR
each, streamed from L2) over NB columns; the micro-kernel (tiles.py)
multiplies one A panel by one B panel into an MR x NR tile of C.  Panels are
zero-padded at the M/N edges and partial tiles stored under a mask, so any
M, N, K works.  `blocking` sizes the blocks for a shape from the target's
cache budgets and picks the tile height that pads M least.

The loop nest is emitted inline in each kernel with its operands' packers
(`Panels`: strided memory, a generator, or an image in im2col.py) and the
epilogue, which runs on each finished MR x NB sliver of C while it is in
cache; packing buffers live in the caller's scratch (the plan's workspace).
`GemmPlan` is a contraction as batched GEMMs, or as matrix-vector products
(gemv.py) when M or N is 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from llvmlite import ir

from .context import EmitContext
from .gemv import emit_gemv
from .lltypes import i64
from .loops import branch_value, for_range, if_then, loop_nest
from .tiles import OTHER_ROWS_COST, GemmConfig, micro_kernel, smaller, strided_packer

WORKSPACE_ALIGNMENT = 64


@dataclass(frozen=True)
class Blocking:
    """The blocks of one GEMM shape."""

    config: GemmConfig
    m: int
    n: int
    k: int
    mr: int
    nr: int
    kc: int
    mb: int
    nb: int

    @property
    def a_bytes(self) -> int:
        return _align(self.mb * self.kc * self.config.itemsize)

    @property
    def workspace_bytes(self) -> int:
        """Packed A block, then packed B block."""
        return self.a_bytes + _align(self.kc * self.nb * self.config.itemsize)


def blocking(config: GemmConfig, m: int, n: int, k: int) -> Blocking:
    """Blocks for an M x N x K product: the tile height that pads M least, narrower
    tiles for small M/N; K, M and N slices balanced so that none is a sliver."""
    blocks, size = config.blocks, config.itemsize

    def padded_cost(rows: int) -> float:
        cost = -(-m // rows) * rows
        return cost if rows == blocks.rows[0] else cost * OTHER_ROWS_COST

    mr = min(min(blocks.rows, key=padded_cost), m)
    nr = min(config.nr, _round_up(n, config.lanes))
    kc = _balanced(k, max(blocks.l1 // (mr * size), 1), 1)
    nb = _balanced(n, max(blocks.l2 // (kc * size) // nr, 1) * nr, nr)
    mb = _balanced(m, max(blocks.l3 // (kc * size) // mr, 1) * mr, mr)
    return Blocking(config, m, n, k, mr, nr, kc, mb, nb)


def _balanced(total: int, limit: int, multiple: int) -> int:
    """The block size splitting `total` into the fewest even blocks of at most `limit`,
    rounded up to `multiple`."""
    count = -(-max(total, 1) // limit)
    return _round_up(-(-max(total, 1) // count), multiple)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _align(size: int) -> int:
    return _round_up(size, WORKSPACE_ALIGNMENT)


# -- operands -------------------------------------------------------------------


class Panels(Protocol):
    """A GEMM operand that packs itself: A with M as its panel dim, B with N.

    `pack` writes rows [p0, p0+count) of the panel dim and depth [k0, k0+kc)
    as ceil(count/width) panels of kc x width elements (panel-major, then k,
    then the width), zero-filling the last panel's rows past `count`.
    """

    def pack(self, ctx: EmitContext, blocks: Blocking, dst, p0, count, k0, kc, width: int): ...


@dataclass
class StridedPanels:
    """An operand in memory: element (p, k) at base + p*p_stride + k*k_stride elements."""

    base: ir.Value
    p_stride: int
    k_stride: int

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        b = ctx.builder
        offset = b.add(b.mul(p0, i64(self.p_stride)), b.mul(k0, i64(self.k_stride)))
        src = b.gep(self.base, [offset], source_etype=blocks.config.element)
        # 32-bit gather offsets when the panel's span allows (it does but for huge strides)
        gather = abs(self.p_stride) * width < 2**31
        packer = strided_packer(ctx, blocks.config, width, gather)
        b.call(packer, [src, i64(self.p_stride), i64(self.k_stride), count, kc, dst])


@dataclass
class GeneratedPanels:
    """An operand computed element by element: `element(p, k) -> value` (i64 indices)."""

    element: Callable[[ir.Value, ir.Value], ir.Value]

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        b = ctx.builder
        config = blocks.config
        zero = ir.Constant(config.element, 0)
        panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
        with for_range(b, panels, "gpanel") as panel:
            first = b.mul(panel, i64(width))
            out = b.gep(dst, [b.mul(first, kc)], source_etype=config.element)
            with for_range(b, kc, "gk") as k:
                row = b.gep(out, [b.mul(k, i64(width))], source_etype=config.element)
                with for_range(b, width, "gj") as j:
                    p = b.add(first, j)
                    inside = b.icmp_unsigned("<", p, count)
                    value = branch_value(
                        b, inside, lambda: self.element(b.add(p0, p), b.add(k0, k)), lambda: zero
                    )
                    b.store(value, b.gep(row, [j], source_etype=config.element))


# -- the blocked product ----------------------------------------------------------

Epilogue = Callable[[ir.Value, int | ir.Value, ir.Value, int | ir.Value], None]


def emit_gemm(
    ctx: EmitContext,
    blocks: Blocking,
    a: Panels,
    b_operand: Panels,
    c: ir.Value,
    ldc: int,
    workspace: ir.Value,
    epilogue: Epilogue | None = None,
) -> None:
    """C = A B, blocked; `epilogue(m0, rows, n0, cols)` runs on each finished sliver."""
    b = ctx.builder
    cfg = blocks.config
    ty = cfg.element
    packed_a = workspace
    packed_b = ctx.byte_pointer(workspace, blocks.a_bytes)
    kernel = micro_kernel(ctx, cfg, blocks.mr, blocks.nr)
    k_slices = -(-blocks.k // blocks.kc)

    with for_range(b, -(-blocks.m // blocks.mb), "mblock") as mi:
        m0, mb = _block(b, mi, blocks.mb, blocks.m)
        with for_range(b, k_slices, "kslice") as ki:
            k0, kc = _block(b, ki, blocks.kc, blocks.k)
            a.pack(ctx, blocks, packed_a, m0, mb, k0, kc, blocks.mr)
            accumulate = b.icmp_unsigned("!=", ki, i64(0))
            with for_range(b, -(-blocks.n // blocks.nb), "nblock") as ni:
                n0, nb = _block(b, ni, blocks.nb, blocks.n)
                b_operand.pack(ctx, blocks, packed_b, n0, nb, k0, kc, blocks.nr)
                row_panels = b.udiv(b.add(mb, i64(blocks.mr - 1)), i64(blocks.mr))
                col_panels = b.udiv(b.add(nb, i64(blocks.nr - 1)), i64(blocks.nr))
                with for_range(b, row_panels, "ir") as ir_:
                    i0 = b.mul(ir_, i64(blocks.mr))
                    rows = smaller(b, i64(blocks.mr), b.sub(mb, i0))
                    a_panel = b.gep(packed_a, [b.mul(i0, kc)], source_etype=ty)
                    c_row = b.gep(c, [b.mul(b.add(m0, i0), i64(ldc))], source_etype=ty)
                    with for_range(b, col_panels, "jr") as jr:
                        j0 = b.mul(jr, i64(blocks.nr))
                        cols = smaller(b, i64(blocks.nr), b.sub(nb, j0))
                        b_panel = b.gep(packed_b, [b.mul(j0, kc)], source_etype=ty)
                        c_tile = b.gep(c_row, [b.add(n0, j0)], source_etype=ty)
                        args = [kc, a_panel, b_panel, c_tile, i64(ldc), accumulate, rows, cols]
                        b.call(kernel, args)
                    if epilogue is not None:
                        last = b.icmp_unsigned("==", ki, i64(k_slices - 1))
                        with if_then(b, last):
                            epilogue(b.add(m0, i0), rows, n0, nb)


def _block(b: ir.IRBuilder, index: ir.Value, size: int, total: int):
    """(start, extent) of block `index` of `size` in `total` (the last one may be short)."""
    start = b.mul(index, i64(size))
    if total <= size:
        return start, i64(total)
    return start, smaller(b, i64(size), b.sub(i64(total), start))


def split_index(b: ir.IRBuilder, linear: ir.Value, extents) -> list[ir.Value]:
    """The row-major multi-index of `linear` (known to be in range): quotients by
    division, remainders by subtraction and no wrap of the outermost dim, so that
    address arithmetic on it folds back to `linear` (the loop vectorizer then sees
    the unit stride of an epilogue loop)."""
    index = []
    for extent in reversed(extents[1:]):
        quotient = b.udiv(linear, i64(extent)) if extent != 1 else linear
        index.append(b.sub(linear, b.mul(quotient, i64(extent))) if extent != 1 else i64(0))
        linear = quotient
    index.append(linear)
    return index[::-1] if extents else []


def emit_region(ctx: EmitContext, m0, rows, n0, cols, body: Callable) -> None:
    """`body(m, n)` for the rows x cols block of C at (m0, n0), n innermost."""
    b = ctx.builder
    with for_range(b, rows, "em") as i:
        m = b.add(m0, i)
        with for_range(b, cols, "en") as j:
            body(m, b.add(n0, j))


# (ctx, sources, batch index) -> the operand for that batch element
OperandFactory = Callable[[EmitContext, list, list[ir.Value]], Panels]


@dataclass
class GemmPlan:
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

    @property
    def kind(self) -> str:
        """ "gemm", or "gemv.axpy" / "gemv.dot"."""
        return "gemm" if self.gemv is None else f"gemv.{self.gemv}"

    @property
    def blocks(self) -> Blocking:
        return blocking(self.config, self.m, self.n, self.k)

    @property
    def workspace_bytes(self) -> int:
        return 0 if self.gemv else self.blocks.workspace_bytes

    def emit(self, ctx: EmitContext, sources: list, c, workspace, epilogue) -> None:
        """The loops over the batch, each a GEMM (or gemv) then its epilogue."""
        b = ctx.builder
        with loop_nest(b, self.batch, "batch") as index:
            a = self.a(ctx, sources, index)
            b_operand = self.b(ctx, sources, index)
            c_batch = b.gep(c, [self.c_offset(ctx, index)], source_etype=self.config.element)
            region = None
            if epilogue is not None:

                def region(m0, rows, n0, cols, index=index):
                    def element(m, n):
                        epilogue(self.out_index(ctx, index, m, n))

                    emit_region(ctx, m0, rows, n0, cols, element)

            if self.gemv is None:
                emit_gemm(ctx, self.blocks, a, b_operand, c_batch, self.ldc, workspace, region)
            elif self.m == 1:
                emit_gemv(ctx, self.config, self.gemv, self.n, self.k, a, b_operand, c_batch)
            else:
                emit_gemv(ctx, self.config, self.gemv, self.m, self.k, b_operand, a, c_batch)
            if self.gemv is not None and region is not None:
                region(i64(0), self.m, i64(0), self.n)
