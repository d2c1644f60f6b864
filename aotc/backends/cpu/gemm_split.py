"""How a contraction is shared out to the runtime's threads (`Split`).

Whole GEMMs of a large batch, or per GEMM BLIS-style (the shared operand's block
packed once, its panels in parallel, then parts of the other operand's panels, each
packing its own); a matrix-vector product in pieces of whole vector blocks of
outputs.  The partition and the workspace are fixed at compile time, and every
element sums the same K slices in the same order, so results are bitwise the same
for any thread count.  `share_out` and `share_packing` emit the parallel loops.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..llvm.context import EmitContext
from ..llvm.elemental import delinearize
from ..llvm.lltypes import PTR, i64
from ..llvm.loops import for_range, if_then
from .blocked_gemm import whole_b_bytes
from .blocking import Blocking, aligned, balanced, blocking, round_up
from .gemm_config import GemmConfig
from .gemv import GEMV_UNROLL
from .parallel import parallel_chunks
from .vectors import smaller

# contractions of fewer multiply-adds than this run on the calling thread: a pool
# dispatch costs microseconds
MIN_PARALLEL_WORK = 1 << 20
# work goes in this many contiguous parts at most; a thread runs whole parts, packing
# into the workspace region of its slot (the runtime's slots are below the part count):
# the workspace is fixed at compile time and right for any thread count (beyond
# MAX_PARTS threads, some idle)
MAX_PARTS = 16
# batches of at least this many GEMMs are shared out a whole GEMM at a time
MIN_BATCH_PARTS = 8
# gemv pieces do at least this many multiply-adds
MIN_PIECE_WORK = 1 << 17
# a gemv streams its matrix (4 bytes per multiply-add in f32, from L3 or memory when
# the model's weights do not fit L2): shared out from this many, as each thread's part
# of the matrix then stays in its own L2 from call to call (an LSTM's step: 256 hidden,
# 4 x 256 x 256)
MIN_PARALLEL_GEMV_WORK = 1 << 18
# N parts of fewer B panels would reuse each A micro-panel (from L1) too little: parts of
# one panel made a 64 x 512 x 784 GEMM 20% slower on one thread
MIN_PART_COLUMN_PANELS = 4
# a split whose busiest thread (at 2 or 4 threads) gets more than this over an even share
# gives way to the other dimension's, if that one shares out better
MAX_IMBALANCE = 1.25
# shared blocks of fewer elements are packed by the calling thread, without a dispatch
# (a pointwise convolution's 240 x 196 image packed on one thread, then multiplied on
# two, ran slower at 2 threads than at 1: MobileNet-V3-small 1.08-1.29x faster at 2
# threads with its packing shared out from 2^12, not 2^16)
MIN_SHARED_PACKING = 1 << 12
# a parallel GEMM's A block takes 1/L3_SHARERS of the L3 budget (threads share L3)
L3_SHARERS = 4


@dataclass(frozen=True)
class Split:
    """How a contraction is shared out to the threads; fixed at compile time, so the
    results do not depend on the thread count (each element sums the same K slices in
    the same order as on one thread).

    `whole_b` (mode "m", one N block, several K slices, B small enough for L2): B is
    packed whole, every K slice at once, then each part multiplies its rows over all
    the slices: two dispatches, not two per K slice.

    mode "batch": whole GEMMs (or gemv pieces of `per` outputs) of the `grid` of units
    in `parts`, each thread's GEMMs packing into a region of its own.  "m": per K slice
    and N block, B's block is packed once (its panels in parallel) into the shared
    region, then `parts` of `per` A row panels each pack their rows into their
    thread's region and multiply.  "n": the same with the roles of A and B swapped:
    A's block is shared, parts of `per` B column panels (over all of N).  A pre-packed operand
    (`packed`: A's, B's) needs no region: a shared one is not packed at all.
    """

    mode: str
    blocks: Blocking | None
    parts: int
    grid: tuple[int, ...] = ()
    per: int = 0
    packed: tuple[bool, bool] = (False, False)
    whole_b: bool = False

    @property
    def packs_whole_b(self) -> bool:
        return self.whole_b and not self.packed[1]

    @property
    def shared_bytes(self) -> int:
        blocks = self.blocks
        if self.packs_whole_b and blocks is not None:
            return whole_b_bytes(blocks)
        if self.mode == "m" and not self.packed[1]:
            return blocks.b_bytes
        if self.mode == "n" and not self.packed[0]:
            return blocks.a_bytes
        return 0

    @property
    def part_bytes(self) -> int:
        blocks = self.blocks
        if blocks is None:
            return 0
        if self.mode == "batch":
            return sum(blocks.region_bytes(self.packed))
        if self.packed[0 if self.mode == "m" else 1]:
            return 0
        width = blocks.mr if self.mode == "m" else blocks.nr
        return aligned(self.per * width * blocks.kc * blocks.config.itemsize)

    @property
    def workspace_bytes(self) -> int:
        return self.shared_bytes + self.parts * self.part_bytes


def gemm_split(config: GemmConfig, batch: tuple[int, ...], m: int, n: int, k: int):
    """How a GEMM big enough is shared out (the serial blocking, its A block capped to
    a share of L3); None: it runs serially."""
    count = math.prod(batch)
    if count * m * n * k < MIN_PARALLEL_WORK:
        return None
    blocks = blocking(config, m, n, k)
    mr, nr, size = blocks.mr, blocks.nr, config.itemsize
    limit = max(config.blocks.l3 // L3_SHARERS // (blocks.kc * size) // mr, 1) * mr
    blocks = replace(blocks, mb=balanced(m, min(blocks.mb, limit), mr))
    if count >= MIN_BATCH_PARTS:
        return Split("batch", blocks, min(count, MAX_PARTS), grid=batch)
    rows, cols = -(-m // mr), -(-n // nr)
    by_rows = min(-(-rows // MAX_PARTS), max(blocks.mb // mr, 1))
    by_cols = min(max(-(-cols // MAX_PARTS), MIN_PART_COLUMN_PANELS), max(blocks.nb // nr, 1))
    splits = [("m", rows, by_rows), ("n", cols, by_cols)]
    if cols > rows:
        splits.reverse()
    # the longer dimension, unless its parts share out unevenly and the other's do not
    # (a 784-pixel convolution over N: 17 panels in parts of 4 ran 12 on one thread and
    # 5 on the other)
    if _imbalance(*splits[0][1:]) > MAX_IMBALANCE:
        splits.sort(key=lambda split: _imbalance(*split[1:]))
    mode, panels, per = splits[0]
    parts = -(-panels // per)
    if parts < 2:
        return None
    whole_b = (
        mode == "m"
        and blocks.nb >= n
        and k > blocks.kc
        and whole_b_bytes(blocks) <= config.blocks.l2
    )
    return Split(mode, blocks, parts, per=per, whole_b=whole_b)


def _imbalance(panels: int, per: int) -> float:
    """The busiest thread's share of the panels over an even share, at 2 and 4 threads,
    for parts of `per` panels run as the runtime shares them out to threads of equal
    speed (runtime_c's chunk_begin: contiguous shares, the first ones a part longer)."""
    parts = -(-panels // per)
    sizes = [min(per, panels - p * per) for p in range(parts)]
    worst = 1.0
    for threads in (2, 4):
        chunks = min(threads, parts)
        edges = [i * (parts // chunks) + min(i, parts % chunks) for i in range(chunks + 1)]
        busiest = max(sum(sizes[a:b]) for a, b in itertools.pairwise(edges))
        worst = max(worst, busiest * threads / panels)
    return worst


def gemv_split(config: GemmConfig, batch: tuple[int, ...], count: int, k: int):
    """A gemv big enough to share out, in pieces of whole vector blocks of outputs
    (the same outputs take the vector and scalar paths as in one call); None: serial."""
    total = math.prod(batch)
    if total * count * k < MIN_PARALLEL_GEMV_WORK:
        return None
    width = config.lanes * GEMV_UNROLL
    pieces = max(min(MAX_PARTS // total, count * k // MIN_PIECE_WORK), 1)
    per = round_up(-(-count // pieces), width)
    grid = (*batch, -(-count // per))
    if math.prod(grid) < 2:
        return None
    return Split("batch", None, min(math.prod(grid), MAX_PARTS), grid=grid, per=per)


def share_out(ctx: EmitContext, grid, parts: int, unit: Callable, values=()) -> None:
    """`unit(index, slot, values)` for each index of `grid`, run by the threads in
    `parts` contiguous parts; `slot` is the running thread's (below `parts`: the
    region it packs into); `values` (i64s of the kernel) as seen in the body."""
    items = math.prod(grid)
    with parallel_chunks(ctx, parts, "part", values) as (begin, end, slot, passed):
        b = ctx.builder
        first = b.udiv(b.mul(begin, i64(items)), i64(parts))
        last = b.udiv(b.mul(end, i64(items)), i64(parts))
        with for_range(b, b.sub(last, first), "unit") as t:
            unit(delinearize(b, b.add(first, t), grid), slot, passed)


def share_packing(ctx, blocks: Blocking, operand, dst_values, width: int, total: int) -> None:
    """Pack an operand's block (`dst_values`: its batch index..., then p0, count, k0,
    kc) into the shared region at the workspace's start, its panels in parallel
    (`operand(ctx, batch)` -> Panels in the body; `total`: the block's largest extent)."""
    if total * blocks.kc < MIN_SHARED_PACKING:  # cheaper than a dispatch: inline
        *batch, dst, p0, count, k0, kc = dst_values
        out = ctx.builder.inttoptr(dst, PTR)
        operand(ctx, batch).pack(ctx, blocks, out, p0, count, k0, kc, width)
        return
    panels = -(-total // width)
    per = -(-panels // MAX_PARTS)
    parts = -(-panels // per)

    def unit(index, slot, values):
        b = ctx.builder
        *batch, dst, p0, count, k0, kc = values
        first = b.mul(index[0], i64(per * width))
        with if_then(b, b.icmp_unsigned("<", first, count)):
            rows = smaller(b, i64(per * width), b.sub(count, first))
            out = b.gep(
                b.inttoptr(dst, PTR), [b.mul(first, kc)], source_etype=blocks.config.element
            )
            operand(ctx, batch).pack(ctx, blocks, out, b.add(p0, first), rows, k0, kc, width)

    share_out(ctx, (parts,), parts, unit, dst_values)
