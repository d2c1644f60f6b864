"""The GEMM kernel on CUDA cores (SIMT): every thread a TM x TN register tile, fma.

Each block computes a BM x BN tile of C with 256 threads (128 for the small tiling),
each thread a TM x TN register tile: per step of BK, the block stages A and B tiles in
shared memory (gemm_tiles.TileLoader, k-major rows here), then every thread runs BK
rank-1 updates on its registers with fma.  Elements of any float type are computed in
the accumulator's type (f32; f64 for f64 results).
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..llvm.lltypes import F64, I32, i32
from ..llvm.loops import for_range
from .context import GpuContext
from .gemm_plan import Gemm
from .gemm_tiles import (
    depth_steps,
    operand_loaders,
    store_inside,
    stored_batch,
    tile_origin,
)

PAD = 4  # elements added to each shared row: conflict-free staging stores
VECTOR = 4  # a thread's rows and columns come in runs of 4: 16-byte shared loads


@dataclass(frozen=True)
class Tiling:
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


LARGE = Tiling(128, 128, 8, 8, 8)
SMALL = Tiling(64, 64, 16, 4, 4)


def emit_tiles(
    ctx: GpuContext,
    kernel,
    gemm: Gemm,
    t: Tiling,
    acc_type: ir.Type,
    convert,
    store,
    slices: int = 1,
) -> None:
    """The kernel's body: store(g, m, n, value) for each element of C, or with `slices`
    > 1 (split-K) for each partial sum (g: gemm_tiles.stored_batch)."""
    b = ctx.builder
    tid = ctx.device.thread_index(ctx)
    g, m0, n0, depth_slice = tile_origin(ctx, gemm, t.bm, t.bn, slices)
    columns = t.bn // t.tn
    tx = b.urem(tid, i32(columns))
    ty = b.udiv(tid, i32(columns))
    width = 8 if acc_type == F64 else 4
    a_row, b_row = t.bm + PAD, t.bn + PAD
    a_shared = kernel.shared(ctx, t.bk * a_row * width)
    b_shared = kernel.shared(ctx, t.bk * b_row * width)
    zero = ir.Constant(acc_type, 0.0)
    acc = [[ctx.alloca(acc_type) for _ in range(t.tn)] for _ in range(t.tm)]
    for row in acc:
        for slot in row:
            b.store(zero, slot)
    a_tile, b_tile = operand_loaders(
        ctx, gemm, tid, t.threads, (t.bm, t.bn, t.bk), convert, acc_type
    )

    def fetch(k0: ir.Value) -> None:
        a_tile.fetch(g, m0, k0)
        b_tile.fetch(g, n0, k0)

    def stage() -> None:  # k-major: a thread's rows of one k are adjacent
        a_tile.stage(lambda m, k, v: b.store(v, _shared_at(b, a_shared, acc_type, k, a_row, m)))
        b_tile.stage(lambda n, k, v: b.store(v, _shared_at(b, b_shared, acc_type, k, b_row, n)))

    rows = [_owned(b, ty, i, t.tm, t.bm // t.tm) for i in range(t.tm)]
    cols = [_owned(b, tx, j, t.tn, columns) for j in range(t.tn)]
    k0, steps = depth_steps(ctx, gemm, t.bk, slices, depth_slice)
    out_g = stored_batch(ctx, gemm, g, depth_slice, slices)
    fetch(k0)
    fma = ctx.declare(
        f"llvm.fma.{'f64' if acc_type == F64 else 'f32'}", acc_type, [zero, zero, zero], pure=True
    )
    with for_range(b, steps, "kstep") as step:
        stage()
        ctx.device.barrier(ctx)
        next_step = b.add(b.trunc(step, I32), i32(1))
        fetch(b.add(k0, b.mul(next_step, i32(t.bk))))  # unused past the end
        for kk in range(t.bk):
            a_vals = _shared_run(b, a_shared, acc_type, kk, a_row, rows)
            b_vals = _shared_run(b, b_shared, acc_type, kk, b_row, cols)
            for i in range(t.tm):
                for j in range(t.tn):
                    slot = acc[i][j]
                    b.store(b.call(fma, [a_vals[i], b_vals[j], b.load(slot)]), slot)
        ctx.device.barrier(ctx)
    for i in range(t.tm):
        for j in range(t.tn):
            value = lambda g_, m, n, slot=acc[i][j]: store(g_, m, n, b.load(slot))
            store_inside(
                ctx, gemm, (t.bm, t.bn), out_g, b.add(m0, rows[i]), b.add(n0, cols[j]), value
            )


def _owned(b: ir.IRBuilder, thread: ir.Value, i: int, count: int, threads: int) -> ir.Value:
    """The i-th of the `count` rows (or columns) of the tile a thread owns: runs of
    VECTOR adjacent ones (read from shared memory as one vector load), the runs of all
    `threads` threads side by side, then the next runs."""
    run = VECTOR if count % VECTOR == 0 else 1
    first = b.mul(thread, i32(run))
    return b.add(first, i32(i % run + (i // run) * run * threads))


def _shared_run(b: ir.IRBuilder, array, ty: ir.Type, row: int, width: int, owned: list):
    """A thread's elements of one shared row: `owned` columns, loaded VECTOR at a time
    where they come in runs (16-byte aligned: rows and runs start at multiples of 4)."""
    if len(owned) % VECTOR:
        return [b.load(_shared_at(b, array, ty, i32(row), width, c), typ=ty) for c in owned]
    vector = ir.VectorType(ty, VECTOR)
    values = []
    for first in owned[::VECTOR]:
        pointer = _shared_at(b, array, ty, i32(row), width, first)
        loaded = b.load(pointer, typ=vector, align=16)
        values += [b.extract_element(loaded, i32(lane)) for lane in range(VECTOR)]
    return values


def _shared_at(b: ir.IRBuilder, array, ty: ir.Type, row: ir.Value, width: int, col: ir.Value):
    position = b.add(b.mul(row, i32(width)), col)
    return b.gep(array, [position], source_etype=ty)
