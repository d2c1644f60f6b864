"""Packed, cache-blocked GEMM in LLVM IR, in the BLIS/GotoBLAS style.

`emit_gemm` computes C[M, N] = A[M, K] B[K, N] for one batch element; C is
row-major with row stride `ldc` and unit column stride.  K goes in slices of
kc; per slice A is packed into MR-row panels (kc x MR each: the micro-panel
that stays in L1) over MB rows (L3), and B into NR-column panels (kc x NR
each, streamed from L2) over NB columns (the sizes: blocking.py); the
micro-kernel (tiles.py) multiplies one A panel by one B panel into an MR x NR
tile of C.  Panels are zero-padded at the M/N edges and partial tiles stored
under a mask, so any M, N, K works.

The loop nest is emitted inline in each kernel with its operands' packers
(panels.py) and the epilogue, which runs on each finished MR x NB sliver of C
while it is in cache; packing buffers live in the caller's scratch (the plan's
workspace).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.lltypes import I64, i64
from ..llvm.loops import for_range, if_then
from .blocking import Blocking, aligned, round_up
from .panels import PackedPanels, Panels, RowsInPlace
from .tiles import edge_kernel, fuses_edge, micro_kernel
from .vectors import smaller

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
    rows: ir.Value | None = None,
    cols: ir.Value | None = None,
    depth: ir.Value | None = None,
) -> None:
    """C = A B, blocked; `epilogue(m0, rows, n0, cols)` runs on each finished sliver.
    `rows`, `cols` (i64, at most M and N): only C's first rows and columns are needed;
    `depth` (an i64 from 1 to K): A's columns and B's rows past it are zeros."""
    b = ctx.builder
    region_a, region_b = _regions(ctx, blocks, a, b_operand, workspace)
    k = blocks.k if depth is None else depth
    m = blocks.m if rows is None else rows
    n = blocks.n if cols is None else cols

    with for_range(b, block_count(b, m, blocks.mb), "mblock") as mi:
        m0, mb = block_span(b, mi, blocks.mb, m)
        with for_range(b, block_count(b, k, blocks.kc), "kslice") as ki:
            k0, kc = block_span(b, ki, blocks.kc, k)
            packed_a = a.pack(ctx, blocks, region_a, m0, mb, k0, kc, blocks.mr)
            with for_range(b, block_count(b, n, blocks.nb), "nblock") as ni:
                n0, nb = block_span(b, ni, blocks.nb, n)
                packed_b = b_operand.pack(ctx, blocks, region_b, n0, nb, k0, kc, blocks.nr)
                block = (m0, mb, n0, nb)
                streams = isinstance(a, PackedPanels)
                multiply_blocks(
                    ctx, blocks, packed_a, packed_b, c, ldc, block, ki, epilogue, streams, depth,
                    a_rows(a),
                )  # fmt: skip


def a_rows(a: Panels) -> int:
    """The elements between A's rows where they are read in place, else 0 (packed)."""
    return a.p_stride if isinstance(a, RowsInPlace) else 0


def block_count(b: ir.IRBuilder, total: int | ir.Value, size: int) -> int | ir.Value:
    """How many blocks of `size` cover `total` (an int, or an i64 at run time)."""
    if isinstance(total, int):
        return -(-total // size)
    return b.udiv(b.add(total, i64(size - 1)), i64(size))


def whole_b_bytes(blocks: Blocking) -> int:
    """Bytes of B packed whole (`pack_whole_b`): every K slice's panels over all of N."""
    return aligned(round_up(blocks.n, blocks.nr) * blocks.k * blocks.config.itemsize)


def pack_whole_b(
    ctx: EmitContext,
    blocks: Blocking,
    b_operand: Panels,
    dst: ir.Value,
    cols: ir.Value | None = None,
    depth: ir.Value | None = None,
) -> None:
    """Pack all of B into `dst`, K slice after K slice, for `emit_gemm_on_b` to reuse:
    the attention kernel multiplies K^T and V by many blocks of rows.  With `cols` and
    `depth` (i64s), only B's first columns and rows (as `emit_gemm_on_b` reads them)."""
    b = ctx.builder
    assert b is not None
    k = blocks.k if depth is None else depth
    count = i64(blocks.n) if cols is None else cols
    with for_range(b, block_count(b, k, blocks.kc), "kslice") as ki:
        pack_whole_b_part(ctx, blocks, b_operand, dst, ki, i64(0), count, depth)


def pack_whole_b_part(
    ctx: EmitContext,
    blocks: Blocking,
    b_operand: Panels,
    dst: ir.Value,
    ki,
    first,
    count,
    depth: ir.Value | None = None,
) -> None:
    """Columns [first, first + count) (whole panels from `first`) of B's K slice `ki`
    (of `depth` rows, an i64, when given), packed where `pack_whole_b` puts them:
    threads may pack the parts apart."""
    b = ctx.builder
    assert b is not None
    k0, kc = block_span(b, ki, blocks.kc, blocks.k if depth is None else depth)
    out = b.gep(
        _whole_b_slice(ctx, blocks, dst, k0), [b.mul(first, kc)], source_etype=blocks.config.element
    )
    b_operand.pack(ctx, blocks, out, first, count, k0, kc, blocks.nr)


def _whole_b_slice(ctx: EmitContext, blocks: Blocking, packed_b: ir.Value, k0) -> ir.Value:
    """Where K slice `k0..` of B packed whole starts: the slices over all of N's panels."""
    b = ctx.builder
    assert b is not None
    width = round_up(blocks.n, blocks.nr)
    return b.gep(packed_b, [b.mul(k0, i64(width))], source_etype=blocks.config.element)


def emit_gemm_on_b(
    ctx: EmitContext,
    blocks: Blocking,
    a: Panels,
    packed_b: ir.Value,
    c: ir.Value,
    ldc: int,
    region_a: ir.Value,
    rows: ir.Value,
    epilogue: Epilogue | None = None,
    m0: ir.Value | None = None,
    streams_a: bool = False,
    cols: ir.Value | None = None,
    depth: ir.Value | None = None,
) -> None:
    """C = A B for `rows` rows of A from row `m0` (0 when not given), B packed whole by
    `pack_whole_b`; `region_a` holds a K slice of those rows of A (unless pre-packed:
    `streams_a`); `cols` (an i64): only C's first columns are needed; `depth` (an i64
    from 1 to K): A's columns and B's rows past it are zeros."""
    b = ctx.builder
    assert b is not None
    m0 = m0 if m0 is not None else i64(0)
    k = blocks.k if depth is None else depth
    with for_range(b, block_count(b, k, blocks.kc), "kslice") as ki:
        k0, kc = block_span(b, ki, blocks.kc, k)
        packed_a = a.pack(ctx, blocks, region_a, m0, rows, k0, kc, blocks.mr)
        slice_b = _whole_b_slice(ctx, blocks, packed_b, k0)
        block = (m0, rows, i64(0), i64(blocks.n) if cols is None else cols)
        multiply_blocks(
            ctx, blocks, packed_a, slice_b, c, ldc, block, ki, epilogue, streams_a, depth,
            a_rows(a),
        )  # fmt: skip


def _regions(ctx, blocks: Blocking, a, b_operand, workspace):
    """Where A's and B's blocks are packed: the workspace holds A's region, then B's
    (none for pre-packed operands)."""
    packed = (isinstance(a, (PackedPanels, RowsInPlace)), isinstance(b_operand, PackedPanels))
    a_bytes, _ = blocks.region_bytes(packed)
    return workspace, ctx.byte_pointer(workspace, a_bytes)


def multiply_blocks(
    ctx,
    blocks: Blocking,
    packed_a,
    packed_b,
    c,
    ldc,
    block,
    ki,
    epilogue,
    streams_a: bool,
    depth: ir.Value | None = None,
    a_rows: int = 0,
) -> None:
    """The packed A block times the packed B block of K slice `ki` into C's `block`
    (m0, rows, n0, cols), tile by tile; the epilogue on each sliver after the last slice
    (of `depth`, an i64, where only the first rows of B count).  `streams_a`: A is
    pre-packed (`micro_kernel` prefetches it); `a_rows`: A is its rows in memory, that
    many elements apart (`RowsInPlace`)."""
    b = ctx.builder
    ty = blocks.config.element
    kernel = micro_kernel(
        ctx, blocks.config, blocks.mr, blocks.nr, streams_a=streams_a, a_rows=a_rows
    )
    k = blocks.k if depth is None else depth
    k_slices = block_count(b, k, blocks.kc)
    m0, mb, n0, nb = block
    _, kc = block_span(b, ki, blocks.kc, k)
    accumulate = b.icmp_unsigned("!=", ki, i64(0))
    row_panels = b.udiv(b.add(mb, i64(blocks.mr - 1)), i64(blocks.mr))
    edge = blocks.edge  # then the last block's columns past whole panels go to the edge kernel
    col_panels = b.udiv(b.add(nb, i64(0 if edge else blocks.nr - 1)), i64(blocks.nr))
    has_edge = b.icmp_unsigned("<", b.mul(col_panels, i64(blocks.nr)), nb)
    # or with the last whole panel's call (then the loop leaves that one out)
    # (not with A's rows in place: the fused edge reads A as packed columns)
    fuses = edge and not a_rows and fuses_edge(blocks.config, blocks.mr, blocks.nr, edge)
    fused = has_edge if fuses else None
    if fused is not None:
        fused = b.and_(fused, b.icmp_unsigned("!=", col_panels, i64(0)))
        col_panels = b.sub(col_panels, b.zext(fused, I64))
    with for_range(b, row_panels, "ir") as ir_:
        i0 = b.mul(ir_, i64(blocks.mr))
        rows = smaller(b, i64(blocks.mr), b.sub(mb, i0))
        a_panel = b.gep(packed_a, [b.mul(i0, i64(a_rows) if a_rows else kc)], source_etype=ty)
        c_row = b.gep(c, [b.mul(b.add(m0, i0), i64(ldc))], source_etype=ty)
        with for_range(b, col_panels, "jr") as jr:
            j0 = b.mul(jr, i64(blocks.nr))
            cols = smaller(b, i64(blocks.nr), b.sub(nb, j0))
            b_panel = b.gep(packed_b, [b.mul(j0, kc)], source_etype=ty)
            c_tile = b.gep(c_row, [b.add(n0, j0)], source_etype=ty)
            args = [kc, a_panel, b_panel, c_tile, i64(ldc), accumulate, rows, cols]
            b.call(kernel, args)
        if edge:
            j0 = b.mul(col_panels, i64(blocks.nr))
            b_panel = b.gep(packed_b, [b.mul(j0, kc)], source_etype=ty)
            c_tile = b.gep(c_row, [b.add(n0, j0)], source_etype=ty)
            args = [kc, a_panel, b_panel, c_tile, i64(ldc), accumulate, rows]

            def alone():
                with if_then(b, has_edge):
                    kernel = edge_kernel(ctx, blocks.config, blocks.mr, edge, blocks.nr, a_rows)
                    b.call(kernel, args)

            if fused is None:
                alone()
            else:
                with b.if_else(fused) as (whole, otherwise):
                    with whole:
                        extra = micro_kernel(
                            ctx, blocks.config, blocks.mr, blocks.nr, edge, streams_a
                        )
                        edge_panel = b.gep(b_panel, [b.mul(i64(blocks.nr), kc)], source_etype=ty)
                        b.call(extra, [*args, i64(blocks.nr), edge_panel])
                    with otherwise:
                        alone()
        if epilogue is not None:
            final = i64(k_slices - 1) if isinstance(k_slices, int) else b.sub(k_slices, i64(1))
            last = b.icmp_unsigned("==", ki, final)
            with if_then(b, last):
                epilogue(b.add(m0, i0), rows, n0, nb)


def block_span(b: ir.IRBuilder, index: ir.Value, size: int, total: int | ir.Value):
    """(start, extent) of block `index` of `size` in `total` (the last one may be short;
    `total` an int, or an i64 at run time)."""
    start = b.mul(index, i64(size))
    if isinstance(total, int) and total <= size:
        return start, i64(total)
    end = total if isinstance(total, ir.Value) else i64(total)
    return start, smaller(b, i64(size), b.sub(end, start))


def emit_region(ctx: EmitContext, m0, rows, n0, cols, body: Callable) -> None:
    """`body(m, n)` for the rows x cols block of C at (m0, n0), n innermost."""
    b = ctx.builder
    with for_range(b, rows, "em") as i:
        m = b.add(m0, i)
        with for_range(b, cols, "en") as j:
            body(m, b.add(n0, j))
