"""Matrix-vector products: contractions with a few rows of C (batch-1 layers) and a deep
k, the depth split across threads so that many threads share each output.

A tiled kernel would waste most of its tile on rows that do not exist, and a thread per
output runs the whole depth alone on few threads.  Two forms, by B's layout, both
accumulating every row of C (at most MAX_ROWS) per thread in f32:

- B's n adjacent in memory (x @ W): a block owns 32 columns; its 8 warps take every
  8th k, each warp reading 32 adjacent columns of a row of B (coalesced), then the
  warps' partial sums meet in shared memory;
- B's k adjacent (x @ W^T, Gemm transB=1): a warp per column, its lanes reading 32
  adjacent k (coalesced), summed by warp shuffles.

A contraction with few columns instead runs transposed (C^T = B^T A^T).  Where the
call needs only part of C (`Gemm.needed`), blocks of unneeded columns return at once,
the depth loop stops at the needed depth, and rows past the needed ones are not summed.
"""

from __future__ import annotations

from llvmlite import ir

from ..llvm.lltypes import F32, I32, I64, i32
from ..llvm.loops import for_range, if_then
from .context import GpuContext
from .device import WARP
from .gemm_plan import Gemm
from .kernel import exit_unless
from .reduction import shuffle_value

MAX_ROWS = 8
MIN_DEPTH = 64
BLOCK = 256
WARPS = BLOCK // WARP


def launch(gemm: Gemm) -> tuple[int, int]:
    """(grid, block) of the kernel for `gemm` (rows in m)."""
    return gemm.batch * -(-gemm.n // _columns(gemm)), BLOCK


def _columns(gemm: Gemm) -> int:
    """Columns of C a block computes: a lane's each, or a warp's each."""
    return WARP if gemm.b_n_fast else WARPS


def emit_gemv(ctx: GpuContext, kernel, gemm: Gemm, store) -> None:
    """The kernel's body: store(g, m, n, value) for each element of C."""
    b = ctx.builder
    assert b is not None
    kernel.cooperative = True  # barriers or warp shuffles
    tid = ctx.device.thread_index(ctx)
    lane, warp = b.urem(tid, i32(WARP)), b.udiv(tid, i32(WARP))
    per_block = _columns(gemm)
    tiles = -(-gemm.n // per_block)
    block = ctx.device.block_index(ctx)
    g = b.udiv(block, i32(tiles))
    n0 = b.mul(b.urem(block, i32(tiles)), i32(per_block))
    needed = gemm.needed(ctx) if gemm.needed is not None else None
    depth: int | ir.Value = gemm.k  # the depth summed: the call's, where it says
    if needed is not None:
        exit_unless(ctx, needed.holds(ctx, g, i32(0), n0))
        depth = gemm.k if needed.k is None else needed.k
    # a block's threads split (column, depth) as (lane, warp) or (warp, lane)
    column, first, stride = (lane, warp, WARPS) if gemm.b_n_fast else (warp, lane, WARP)
    n = b.add(n0, column)
    inside = b.icmp_unsigned("<", n, i32(gemm.n))
    n_read = ctx.intrinsic("llvm.umin", [n, i32(gemm.n - 1)])  # partial blocks read column N-1
    acc = [ctx.alloca(F32) for _ in range(gemm.m)]
    for slot in acc:
        b.store(ir.Constant(F32, 0.0), slot)
    zero = ir.Constant(F32, 0.0)
    fma = ctx.declare("llvm.fma.f32", F32, [zero, zero, zero], pure=True)
    if isinstance(depth, int):
        steps, last = -(-depth // stride), i32(depth) if depth % stride else None
    else:
        steps = b.zext(b.udiv(b.add(depth, i32(stride - 1)), i32(stride)), I64)
        last = depth
    with for_range(b, steps, "depth") as step:
        k = b.add(b.mul(b.trunc(step, I32), i32(stride)), first)
        with if_then(b, b.icmp_unsigned("<", k, last) if last is not None else None):
            column_value = gemm.b(ctx, g, k, n_read)
            rows = needed.m if needed is not None else None
            for m, slot in enumerate(acc):
                past = rows is not None and m > 0  # row 0 is always summed
                with if_then(b, b.icmp_unsigned("<", i32(m), rows) if past else None):
                    row_value = gemm.a(ctx, g, i32(m), k)
                    b.store(b.call(fma, [row_value, column_value, b.load(slot)]), slot)
    if gemm.b_n_fast:  # the warps' partials through shared memory, summed by warp 0
        partials = kernel.shared(ctx, WARPS * gemm.m * WARP * 4)

        def partial(w, m):
            position = b.add(b.mul(w, i32(gemm.m * WARP)), b.add(i32(m * WARP), lane))
            return b.gep(partials, [position], source_etype=F32)

        for m, slot in enumerate(acc):
            b.store(b.load(slot), partial(warp, m))
        ctx.device.barrier(ctx)
        leader = b.and_(b.icmp_unsigned("==", warp, i32(0)), inside)
        with if_then(b, leader):
            for m in range(gemm.m):
                total = b.load(partial(i32(0), m), typ=F32)
                for w in range(1, WARPS):
                    total = b.fadd(total, b.load(partial(i32(w), m), typ=F32))
                store(g, i32(m), n, total)
        return
    sums = []
    for slot in acc:  # every lane takes part in the shuffles
        value = b.load(slot)
        for mask in (16, 8, 4, 2, 1):
            value = b.fadd(value, shuffle_value(ctx, value, mask))
        sums.append(value)
    with if_then(b, b.and_(b.icmp_unsigned("==", lane, i32(0)), inside)):
        for m, value in enumerate(sums):
            store(g, i32(m), n, value)
