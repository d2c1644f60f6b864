"""What every tiled GEMM kernel does with its tiles: find its block's tile, stage operand
tiles from global memory through registers into shared memory, and store results that
fall inside C.

A block computes a BM x BN tile of C[g] (`tile_origin`).  Per step of BK it stages an
A tile (BM x BK) and a B tile (BN x BK, read from B[g, k, n]) with `TileLoader`: the
loads are mapped so that consecutive threads read along the operand's innermost dim in
memory (coalesced), and a step's global loads are issued before the previous step's
arithmetic (register prefetch), which hides their latency.  How a staged element is
laid out in shared memory is the kernel's choice (`TileLoader.stage`'s `put`).

Where the call needs only part of C (`Gemm.needed`, bounded dims), `needed_tile` makes a
block whose tile holds none of it return at once, and `depth_steps` stops at the needed
depth (past it the padder's masks left zeros: the steps' last tile reads them).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ..llvm.lltypes import I64, i32
from ..llvm.loops import if_then
from ..llvm.scalar import zero_like
from ..llvm.window import all_of
from .context import GpuContext
from .gemm_plan import Element, Gemm, Needed
from .kernel import exit_unless


def tile_origin(ctx: GpuContext, gemm: Gemm, bm: int, bn: int, slices: int = 1):
    """(g, m0, n0, slice) of the tile this block computes and the slice of the depth it
    sums (split-K: `slices` > 1): blocks run over n, then m, then g, then slices."""
    b = ctx.builder
    assert b is not None
    tiles_m, tiles_n = -(-gemm.m // bm), -(-gemm.n // bn)
    block = ctx.device.block_index(ctx)
    depth_slice = i32(0)
    if slices > 1:
        per_slice = gemm.batch * tiles_m * tiles_n
        depth_slice = b.udiv(block, i32(per_slice))
        block = b.urem(block, i32(per_slice))
    g = b.udiv(block, i32(tiles_m * tiles_n))
    tile = b.urem(block, i32(tiles_m * tiles_n))
    m0 = b.mul(b.udiv(tile, i32(tiles_n)), i32(bm))
    n0 = b.mul(b.urem(tile, i32(tiles_n)), i32(bn))
    return g, m0, n0, depth_slice


def needed_tile(ctx: GpuContext, needed: Needed | None, g, m0, n0) -> None:
    """Return from the kernel where the block's tile at (g, m0, n0) holds nothing of C
    that the call needs."""
    if needed is not None:
        exit_unless(ctx, needed.holds(ctx, g, m0, n0))


def depth_steps(
    ctx: GpuContext,
    gemm: Gemm,
    bk: int,
    slices: int,
    depth_slice: ir.Value,
    needed: Needed | None = None,
):
    """(first k (i32), count of BK steps: int, or i64 where slices differ or the call
    needs less depth) of the depth that this block sums: all of it, or its slice's
    whole steps (split_steps), up to the needed depth (a slice past it sums nothing)."""
    steps = -(-gemm.k // bk)
    b = ctx.builder
    assert b is not None
    needed_steps = None
    if needed is not None and needed.k is not None:
        needed_steps = b.udiv(b.add(needed.k, i32(bk - 1)), i32(bk))
    if slices == 1:
        return i32(0), steps if needed_steps is None else b.zext(needed_steps, I64)
    per = split_steps(gemm.k, bk, slices)
    first = b.mul(depth_slice, i32(per))
    count = steps - per * (slices - 1)  # the last slice's
    if count != per:
        last = b.icmp_unsigned("==", depth_slice, i32(slices - 1))
        count = b.select(last, i32(count), i32(per))
    if needed_steps is not None:
        count = i32(count) if isinstance(count, int) else count
        left = b.sub(needed_steps, first)
        left = b.select(b.icmp_signed("<", left, i32(0)), i32(0), left)
        count = b.select(b.icmp_signed("<", left, count), left, count)
    if not isinstance(count, int):
        count = b.zext(count, I64)
    return b.mul(first, i32(bk)), count


def stored_batch(ctx: GpuContext, gemm: Gemm, g: ir.Value, depth_slice, slices: int):
    """The batch number results are stored under: g, or with split-K (partial sums) the
    slice's batch of partials, slice * batch + g."""
    if slices == 1:
        return g
    return ctx.builder.add(ctx.builder.mul(depth_slice, i32(gemm.batch)), g)


def split_steps(depth: int, bk: int, slices: int) -> int:
    """BK steps per slice when `slices` slices share the depth's steps (the last one
    takes what is left: depth_slices makes it at least one)."""
    steps = -(-depth // bk)
    return -(-steps // slices)


def masked(ctx: GpuContext, element: Element, g, row: tuple, depth: tuple) -> ir.Value:
    """element(g, row, depth) for (value, extent, tile) pairs: 0 where a partial tile
    runs past the extent.  Depths are clamped always, since the prefetch after the last
    step reads one tile past the end (and never uses it)."""
    b = ctx.builder
    assert b is not None
    (row, rows, row_tile), (depth, depths, depth_tile) = row, depth
    conditions = []
    if rows % row_tile:
        conditions.append(b.icmp_unsigned("<", row, i32(rows)))
        row = ctx.intrinsic("llvm.umin", [row, i32(rows - 1)])
    if depths % depth_tile:
        conditions.append(b.icmp_unsigned("<", depth, i32(depths)))
    depth = ctx.intrinsic("llvm.umin", [depth, i32(depths - 1)])
    value = element(ctx, g, row, depth)
    valid = all_of(b, conditions)
    if valid is None:
        return value
    return b.select(valid, value, zero_like(value))


class TileLoader:
    """One operand's tile of `rows` x `depth` elements, staged by `threads` threads, each
    holding its share in registers between the global load and the shared store.

    `element(ctx, g, row, k)` reads the operand (rows of C's m for A, n for B); `rows_fast`
    says consecutive rows (not consecutive k) are adjacent in memory; `convert` turns a
    loaded value into the type kept in registers and shared memory.
    """

    def __init__(
        self,
        ctx: GpuContext,
        tid: ir.Value,
        threads: int,
        tile: tuple[int, int],
        extents: tuple[int, int],
        element: Element,
        rows_fast: bool,
        convert: Callable[[ir.Value], ir.Value],
        ty: ir.Type,
    ) -> None:
        self.ctx, self.tid, self.threads = ctx, tid, threads
        (self.rows, self.depth), self.extents = tile, extents
        self.element, self.rows_fast, self.convert = element, rows_fast, convert
        share, left = divmod(self.rows * self.depth, threads)
        assert left == 0, "a tile is shared out evenly"
        self.registers = [ctx.alloca(ty) for _ in range(share)]

    def place(self, r: int) -> tuple[ir.Value, ir.Value]:
        """(row, k) within the tile of the r-th element this thread stages."""
        b = self.ctx.builder
        assert b is not None
        e = b.add(self.tid, i32(r * self.threads))
        if self.rows_fast:
            return b.urem(e, i32(self.rows)), b.udiv(e, i32(self.rows))
        return b.udiv(e, i32(self.depth)), b.urem(e, i32(self.depth))

    def fetch(self, g: ir.Value, row0: ir.Value, k0: ir.Value) -> None:
        """Global loads of the tile at (row0, k0) into this thread's registers."""
        b = self.ctx.builder
        assert b is not None
        for r, slot in enumerate(self.registers):
            row, k = self.place(r)
            rows = (b.add(row0, row), self.extents[0], self.rows)
            depth = (b.add(k0, k), self.extents[1], self.depth)
            b.store(self.convert(masked(self.ctx, self.element, g, rows, depth)), slot)

    def stage(self, put: Callable[[ir.Value, ir.Value, ir.Value], None]) -> None:
        """put(row, k, value) for every element this thread fetched."""
        for r, slot in enumerate(self.registers):
            row, k = self.place(r)
            put(row, k, self.ctx.builder.load(slot))


def operand_loaders(
    ctx: GpuContext,
    gemm: Gemm,
    tid,
    threads: int,
    tiles: tuple[int, int, int],
    convert,
    ty: ir.Type,
) -> tuple[TileLoader, TileLoader]:
    """The loaders of A's BM x BK tiles and B's BN x BK tiles (`tiles` = (BM, BN, BK))."""
    bm, bn, bk = tiles
    b_element = lambda c, g, n, k: gemm.b(c, g, k, n)
    a = TileLoader(
        ctx, tid, threads, (bm, bk), (gemm.m, gemm.k), gemm.a, not gemm.a_k_fast, convert, ty
    )
    b = TileLoader(
        ctx, tid, threads, (bn, bk), (gemm.n, gemm.k), b_element, gemm.b_n_fast, convert, ty
    )
    return a, b


def store_inside(ctx: GpuContext, gemm: Gemm, tiles: tuple[int, int], g, m, n, store) -> None:
    """store(g, m, n) where (m, n) lies inside C (checked only where tiles can run past)."""
    b = ctx.builder
    assert b is not None
    bm, bn = tiles
    inside = all_of(
        b,
        [
            c
            for c in (
                b.icmp_unsigned("<", m, i32(gemm.m)) if gemm.m % bm else None,
                b.icmp_unsigned("<", n, i32(gemm.n)) if gemm.n % bn else None,
            )
            if c is not None
        ],
    )
    if inside is None:
        store(g, m, n)
    else:
        with if_then(b, inside):
            store(g, m, n)
