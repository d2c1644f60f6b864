"""Packed, cache-blocked GEMM in LLVM IR, in the BLIS/GotoBLAS style.

`emit_gemm` computes C[M, N] = A[M, K] B[K, N] for one batch element; C is
row-major with row stride `ldc` and unit column stride.  K goes in slices of
kc; per slice A is packed into MR-row panels (kc x MR each: the micro-panel
that stays in L1) over MB rows (L3), and B into NR-column panels (kc x NR
each, streamed from L2) over NB columns; the micro-kernel (tiles.py)
multiplies one A panel by one B panel into an MR x NR tile of C.  Panels are
zero-padded at the M/N edges and partial tiles stored under a mask, so any
M, N, K works.  `blocking` sizes the blocks for a shape from the target's
cache budgets and picks, of the target's register tiles, the one that pads
M and N least.

The loop nest is emitted inline in each kernel with its operands' packers
(`Panels`: strided memory, a generator, or an image in im2col.py) and the
epilogue, which runs on each finished MR x NB sliver of C while it is in
cache; packing buffers live in the caller's scratch (the plan's workspace).
A constant operand read as a plain view is packed at compile time instead
(prepack.py puts its panels in the weights blob): `PackedPanels` hands the
GEMM pointers into them, and it needs no packing buffer.
`GemmPlan` is a contraction as batched GEMMs, or as matrix-vector products
(gemv.py) when M or N is 1.

Big enough contractions are shared out to the runtime's threads (`Split`):
whole GEMMs of a large batch, or per GEMM BLIS-style (the shared operand's
block packed once, its panels in parallel, then parts of the other operand's
panels, each packing its own).  The partition and the workspace are fixed at
compile time, and every element sums the same K slices in the same order,
so results are bitwise the same for any thread count.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from llvmlite import ir

from ...buffers import BufferKind, Slice
from ...ir import DType, Instruction
from ..llvm.context import EmitContext
from ..llvm.elemental import delinearize, linearize
from ..llvm.lltypes import I8, I64, PTR, i64
from ..llvm.loops import branch_value, for_range, if_then, loop_nest
from .gemm_config import FEWER_ACCUMULATORS_COST, GemmConfig
from .gemv import GEMV_UNROLL, emit_gemv, emit_packed_gemv, packed_width
from .packing import strided_packer
from .parallel import parallel_chunks
from .tiles import edge_columns, edge_cost, edge_kernel, fuses_edge, micro_kernel
from .vectors import smaller
from .views import merged_stride

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
    def edge(self) -> int:
        """N's last columns past whole NR panels that the edge kernel takes (0: none)."""
        return edge_columns(self.config, self.mr, self.nr, self.n)

    @property
    def a_bytes(self) -> int:
        return aligned(self.mb * self.kc * self.config.itemsize)

    @property
    def b_bytes(self) -> int:
        return aligned(self.kc * self.nb * self.config.itemsize)

    @property
    def workspace_bytes(self) -> int:
        """Packed A block, then packed B block."""
        return self.a_bytes + self.b_bytes

    def region_bytes(self, packed: tuple[bool, bool]) -> tuple[int, int]:
        """Bytes of the A and B packing regions: none for a pre-packed operand."""
        return (0 if packed[0] else self.a_bytes), (0 if packed[1] else self.b_bytes)


def blocking(config: GemmConfig, m: int, n: int, k: int) -> Blocking:
    """Blocks for an M x N x K product: the register tile that pads M and N least
    (narrower for small M/N); K, M and N slices balanced so that none is a sliver."""
    blocks, size = config.blocks, config.itemsize
    mr, nr = min((_tile(config, rows, vectors, m, n) for rows, vectors in blocks.tiles),
                 key=lambda tile: _padded_cost(config, tile, m, n))  # fmt: skip
    kc = _balanced(k, max(blocks.l1 // (mr * size), 1), 1)
    nb = _balanced(n, max(blocks.l2 // (kc * size) // nr, 1) * nr, nr)
    mb = _balanced(m, max(blocks.l3 // (kc * size) // mr, 1) * mr, mr)
    return Blocking(config, m, n, k, mr, nr, kc, mb, nb)


def _tile(config: GemmConfig, rows: int, vectors: int, m: int, n: int) -> tuple[int, int]:
    """(MR, NR) of a register tile shape, cut down to M and N."""
    return min(rows, m), min(vectors * config.lanes, _round_up(n, config.lanes))


def _padded_cost(config: GemmConfig, tile: tuple[int, int], m: int, n: int) -> float:
    """Multiply-adds of the M x N product padded to whole tiles (or with the edge
    kernel's column vectors), weighted by the tile's efficiency."""
    mr, nr = tile
    rows, vectors = config.blocks.tiles[0]
    edge = edge_columns(config, mr, nr, n)
    edge_lanes = edge_cost(config, mr, edge) * config.lanes / mr if edge else 0  # per row of C
    cost = _round_up(m, mr) * (_round_up(n - edge, nr) + edge_lanes)
    full = min(rows, m) * min(vectors, -(-n // config.lanes))
    return cost if mr * -(-nr // config.lanes) >= full else cost * FEWER_ACCUMULATORS_COST


def _balanced(total: int, limit: int, multiple: int) -> int:
    """The block size splitting `total` into the fewest even blocks of at most `limit`,
    rounded up to `multiple`."""
    count = -(-max(total, 1) // limit)
    return _round_up(-(-max(total, 1) // count), multiple)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def aligned(size: int) -> int:
    return _round_up(size, WORKSPACE_ALIGNMENT)


# -- operands -------------------------------------------------------------------


class Panels(Protocol):
    """A GEMM operand that packs itself: A with M as its panel dim, B with N.

    `pack` writes rows [p0, p0+count) of the panel dim and depth [k0, k0+kc)
    as ceil(count/width) panels of kc x width elements (panel-major, then k,
    then the width), zero-filling the last panel's rows past `count`, and
    returns where the panels are: `dst`, or for a pre-packed operand its own
    copy (p0 is then a multiple of `width`).
    """

    def pack(
        self, ctx: EmitContext, blocks: Blocking, dst, p0, count, k0, kc, width: int
    ) -> ir.Value: ...


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
        return dst


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
        return dst


@dataclass
class PackedPanels:
    """A constant operand packed at compile time (prepack.py) for one blocking: K slice
    by K slice of `kc`, each slice all panels of `width` over the `padded` panel dim,
    so that a block's panels are contiguous and read in place."""

    base: ir.Value  # this batch element's panels
    padded: int  # the panel dim rounded up to `width`
    kc: int
    width: int

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        assert (blocks.kc, width) == (self.kc, self.width), "packed for another blocking"
        b = ctx.builder
        # the slices before k0 are whole: padded * k0 elements
        offset = b.add(b.mul(k0, i64(self.padded)), b.mul(p0, kc))
        return b.gep(self.base, [offset], source_etype=blocks.config.element)


@dataclass(frozen=True)
class StridedLayout:
    """Where the elements of an operand read as `StridedPanels` are, for packing it at
    compile time: batch element `index` starts at `where` + sum(index[d] * stride for
    (d, stride) in `batch`) elements, its (p, k) p_stride * p + k_stride * k past it."""

    where: Slice
    batch: tuple[tuple[int, int], ...]  # (position in the GEMM's batch index, stride)
    p_stride: int
    k_stride: int


def strided_layout(view, p_dim: int, k_dims, batch=()) -> StridedLayout | None:
    """`view` read as a matrix with p along dim `p_dim` and k along `k_dims` merged
    (row-major), batch elements `batch` apart; None when those dims do not merge into
    one stride."""
    k_stride = merged_stride([view.dims[d] for d in k_dims], [view.strides[d] for d in k_dims])
    if k_stride is None:
        return None
    return StridedLayout(view.where, tuple(batch), view.strides[p_dim], k_stride)


@dataclass(frozen=True)
class PackedShape:
    """A pre-packed operand of a GEMM plan: for each of its batch elements (the GEMM
    batch positions `batch` select it), the `count` x `k` matrix as `PackedPanels`."""

    count: int
    k: int
    kc: int
    width: int
    batch: tuple[int, ...]
    extents: tuple[int, ...]
    transform: str = ""  # what the values went through before packing ("": none)
    paired_k: int = 0  # integer GEMM: the K values that the k pairs hold (pairs.py)

    @property
    def padded(self) -> int:
        return _round_up(self.count, self.width)

    @property
    def elements(self) -> int:
        return math.prod(self.extents) * self.padded * self.k


def pack_operand(values: np.ndarray, layout: StridedLayout, shape: PackedShape) -> np.ndarray:
    """The panels `PackedPanels` reads of each batch element of an operand whose buffer
    holds `values`: per K slice of kc, the count x kc matrix (zero rows up to `padded`)
    as panels of `width` rows, panel-major, then k, then the row in the panel."""
    strides = dict(layout.batch)
    rows = np.arange(shape.count)[:, None] * layout.p_stride
    depth = np.arange(shape.paired_k or shape.k)[None, :] * layout.k_stride
    out = []
    for element in itertools.product(*(range(e) for e in shape.extents)):
        start = sum(i * strides[d] for i, d in zip(element, shape.batch))
        found = values[start + rows + depth]
        if shape.paired_k:
            found = pair_matrix(found)
        matrix = np.zeros((shape.padded, shape.k), found.dtype)
        matrix[: shape.count] = found
        for k0 in range(0, shape.k, shape.kc):
            block = matrix[:, k0 : k0 + shape.kc]
            panels = block.reshape(-1, shape.width, block.shape[1]).transpose(0, 2, 1)
            out.append(panels.ravel())
    return np.concatenate(out)


def pair_matrix(matrix: np.ndarray) -> np.ndarray:
    """(count, K) integers of 16 bits -> (count, ceil(K / 2)) int32 pairs along k, the even
    k in the low half: the panel elements of an integer GEMM (pairs.py)."""
    halves = matrix.astype("<i2")
    if halves.shape[1] % 2:
        halves = np.pad(halves, ((0, 0), (0, 1)))
    return np.ascontiguousarray(halves).view("<i4")


def packed_key(kernel: Instruction, contraction: int, side: int) -> tuple:
    """The key in `BufferPlan.slices` of a pre-packed copy of operand `side` (0: A, 1: B)
    of contraction number `contraction` of `kernel` (set by prepack.py)."""
    return ("packed", id(kernel), contraction, side)


class Prepackable:
    """A plan that reads GEMM-style operands, which prepack.py may pack at compile time.

    It has `config`, `layouts` and `packed` (per side: A, B), `operands` (the
    contraction operand that each side reads) and `packed_shape(side)`;
    `PackedPanels` reads the copies.
    """

    def can_pack(self, side: int) -> bool:
        """Whether operand `side` (0: A, 1: B) is a constant that may be pre-packed."""
        layout = self.layouts[side]
        return layout is not None and layout.where.kind is BufferKind.CONSTANT

    @property
    def is_packed(self) -> tuple[bool, bool]:
        return self.packed[0] is not None, self.packed[1] is not None

    def source(self, side: int) -> DType:
        """The element type of operand `side` in memory."""
        return self.config.source

    def pack_constant(self, side: int, values: np.ndarray) -> np.ndarray:
        """The pre-packed copy of operand `side`, whose constant's elements are `values`."""
        return pack_operand(values, self.layouts[side], self.packed_shape(side))


def use_packed(planned, slices: dict, kernel: Instruction, contraction: int):
    """`planned` reading the pre-packed copies of its operands that `slices` holds."""
    if not isinstance(planned, Prepackable):
        return planned
    found = tuple(slices.get(packed_key(kernel, contraction, side)) for side in (0, 1))
    return planned if found == (None, None) else replace(planned, packed=found)


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
    region_a, region_b = _regions(ctx, blocks, a, b_operand, workspace)
    k_slices = -(-blocks.k // blocks.kc)

    with for_range(b, -(-blocks.m // blocks.mb), "mblock") as mi:
        m0, mb = _block(b, mi, blocks.mb, blocks.m)
        with for_range(b, k_slices, "kslice") as ki:
            k0, kc = _block(b, ki, blocks.kc, blocks.k)
            packed_a = a.pack(ctx, blocks, region_a, m0, mb, k0, kc, blocks.mr)
            with for_range(b, -(-blocks.n // blocks.nb), "nblock") as ni:
                n0, nb = _block(b, ni, blocks.nb, blocks.n)
                packed_b = b_operand.pack(ctx, blocks, region_b, n0, nb, k0, kc, blocks.nr)
                block = (m0, mb, n0, nb)
                streams = isinstance(a, PackedPanels)
                _multiply(ctx, blocks, packed_a, packed_b, c, ldc, block, ki, epilogue, streams)


def _regions(ctx, blocks: Blocking, a, b_operand, workspace):
    """Where A's and B's blocks are packed: the workspace holds A's region, then B's
    (none for pre-packed operands)."""
    packed = (isinstance(a, PackedPanels), isinstance(b_operand, PackedPanels))
    a_bytes, _ = blocks.region_bytes(packed)
    return workspace, ctx.byte_pointer(workspace, a_bytes)


def _multiply(ctx, blocks: Blocking, packed_a, packed_b, c, ldc, block, ki, epilogue,
              streams_a: bool) -> None:  # fmt: skip
    """The packed A block times the packed B block of K slice `ki` into C's `block`
    (m0, rows, n0, cols), tile by tile; the epilogue on each sliver after the last slice.
    `streams_a`: A is pre-packed (`micro_kernel` prefetches it)."""
    b = ctx.builder
    ty = blocks.config.element
    kernel = micro_kernel(ctx, blocks.config, blocks.mr, blocks.nr, streams_a=streams_a)
    k_slices = -(-blocks.k // blocks.kc)
    m0, mb, n0, nb = block
    _, kc = _block(b, ki, blocks.kc, blocks.k)
    accumulate = b.icmp_unsigned("!=", ki, i64(0))
    row_panels = b.udiv(b.add(mb, i64(blocks.mr - 1)), i64(blocks.mr))
    edge = blocks.edge  # then the last block's columns past whole panels go to the edge kernel
    col_panels = b.udiv(b.add(nb, i64(0 if edge else blocks.nr - 1)), i64(blocks.nr))
    has_edge = b.icmp_unsigned("<", b.mul(col_panels, i64(blocks.nr)), nb)
    # or with the last whole panel's call (then the loop leaves that one out)
    fused = has_edge if edge and fuses_edge(blocks.config, blocks.mr, blocks.nr, edge) else None
    if fused is not None:
        fused = b.and_(fused, b.icmp_unsigned("!=", col_panels, i64(0)))
        col_panels = b.sub(col_panels, b.zext(fused, I64))
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
        if edge:
            j0 = b.mul(col_panels, i64(blocks.nr))
            b_panel = b.gep(packed_b, [b.mul(j0, kc)], source_etype=ty)
            c_tile = b.gep(c_row, [b.add(n0, j0)], source_etype=ty)
            args = [kc, a_panel, b_panel, c_tile, i64(ldc), accumulate, rows]

            def alone():
                with if_then(b, has_edge):
                    b.call(edge_kernel(ctx, blocks.config, blocks.mr, edge, blocks.nr), args)

            if fused is None:
                alone()
            else:
                with b.if_else(fused) as (whole, otherwise):
                    with whole:
                        extra = micro_kernel(ctx, blocks.config, blocks.mr, blocks.nr, edge,
                                             streams_a)  # fmt: skip
                        edge_panel = b.gep(b_panel, [b.mul(i64(blocks.nr), kc)], source_etype=ty)
                        b.call(extra, [*args, i64(blocks.nr), edge_panel])
                    with otherwise:
                        alone()
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


def emit_region(ctx: EmitContext, m0, rows, n0, cols, body: Callable) -> None:
    """`body(m, n)` for the rows x cols block of C at (m0, n0), n innermost."""
    b = ctx.builder
    with for_range(b, rows, "em") as i:
        m = b.add(m0, i)
        with for_range(b, cols, "en") as j:
            body(m, b.add(n0, j))


# -- sharing out over threads -------------------------------------------------------

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
# N parts of fewer B panels would reuse each A micro-panel (from L1) too little: parts of
# one panel made a 64 x 512 x 784 GEMM 20% slower on one thread
MIN_PART_COLUMN_PANELS = 4
# a split whose busiest thread (at 2 or 4 threads) gets more than this over an even share
# gives way to the other dimension's, if that one shares out better
MAX_IMBALANCE = 1.25
# shared blocks of fewer elements are packed by the calling thread, without a dispatch
MIN_SHARED_PACKING = 1 << 16
# a parallel GEMM's A block takes 1/L3_SHARERS of the L3 budget (threads share L3)
L3_SHARERS = 4


@dataclass(frozen=True)
class Split:
    """How a contraction is shared out to the threads; fixed at compile time, so the
    results do not depend on the thread count (each element sums the same K slices in
    the same order as on one thread).

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

    @property
    def shared_bytes(self) -> int:
        blocks = self.blocks
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
    blocks = replace(blocks, mb=_balanced(m, min(blocks.mb, limit), mr))
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
    return Split(mode, blocks, parts, per=per)


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
    if total * count * k < MIN_PARALLEL_WORK:
        return None
    width = config.lanes * GEMV_UNROLL
    pieces = max(min(MAX_PARTS // total, count * k // MIN_PIECE_WORK), 1)
    per = _round_up(-(-count // pieces), width)
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


# (ctx, sources, batch index) -> the operand for that batch element
OperandFactory = Callable[[EmitContext, list, list[ir.Value]], Panels]


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
            return replace(split, packed=self.is_packed)
        return gemv_split(self.config, self.batch, max(self.m, self.n), self.k)

    @property
    def workspace_bytes(self) -> int:
        split = self.split
        if split is not None:
            return split.workspace_bytes
        return 0 if self.gemv else sum(self.blocks.region_bytes(self.is_packed))

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
        return PackedShape(count, self.k, blocks.kc, width, batch, extents,
                           paired_k=self.paired_k)  # fmt: skip

    def operand(self, side: int, ctx: EmitContext, sources: list, index) -> Panels:
        """Operand `side` (0: A, 1: B) of batch element `index`."""
        where = self.packed[side]
        if where is None:
            return (self.a, self.b)[side](ctx, sources, index)
        shape = self.packed_shape(side)
        b = ctx.builder
        element = linearize(b, [index[d] for d in shape.batch], shape.extents)
        offset = b.mul(element, i64(shape.padded * shape.k))
        base = b.gep(ctx.slice_pointer(where), [offset], source_etype=self.config.element)
        return PackedPanels(base, shape.padded, shape.kc, shape.width)

    def emit(self, ctx: EmitContext, sources: list, c: Slice, workspace: Slice, epilogue):
        """The GEMMs (or gemvs) of the batch into `c`, packing in `workspace`, each then
        its epilogue; shared out to the threads when big enough."""
        split = self.split
        if split is None:
            with loop_nest(ctx.builder, self.batch, "batch") as index:
                self._emit_one(ctx, sources, c, workspace, epilogue, index)
            return
        if split.mode == "batch":
            self._emit_batch_split(ctx, sources, c, workspace, epilogue, split)
            return
        with loop_nest(ctx.builder, self.batch, "batch") as index:
            self._emit_split(ctx, sources, c, workspace, epilogue, split, index)

    def _emit_batch_split(self, ctx, sources, c, workspace, epilogue, split: Split) -> None:
        """Whole GEMMs (gemv pieces) of the batch in parallel, a region per thread."""
        batches = len(self.batch)

        def unit(index, slot, _):
            b = ctx.builder
            batch = index[:batches]
            a, b_operand, c_batch, region = self._operands(ctx, sources, c, epilogue, batch)
            if self.gemv is None:
                offset = b.mul(slot, i64(split.part_bytes))
                pointer = b.gep(ctx.slice_pointer(workspace), [offset], source_etype=I8)
                emit_gemm(ctx, split.blocks, a, b_operand, c_batch, self.ldc, pointer, region)
                return
            i0 = b.mul(index[batches], i64(split.per))
            count = smaller(b, i64(split.per), b.sub(i64(max(self.m, self.n)), i0))
            self._gemv(ctx, a, b_operand, c_batch, region, i0, count)

        share_out(ctx, split.grid, split.parts, unit)

    def _emit_split(self, ctx, sources, c, workspace, epilogue, split: Split, index) -> None:
        """One GEMM, BLIS-style: per K slice the shared operand's block packed once in
        parallel (unless pre-packed), then parts of the other operand's panels in
        parallel."""
        b = ctx.builder
        blocks = split.blocks
        dst = b.ptrtoint(ctx.slice_pointer(workspace), I64)
        k_slices = -(-blocks.k // blocks.kc)
        if split.mode == "m":
            with for_range(b, k_slices, "kslice") as ki:
                k0, kc = _block(b, ki, blocks.kc, blocks.k)
                with for_range(b, -(-blocks.n // blocks.nb), "nblock") as ni:
                    n0, nb = _block(b, ni, blocks.nb, blocks.n)
                    if not split.packed[1]:
                        values = [*index, dst, n0, nb, k0, kc]
                        share_packing(ctx, blocks, self._side(1, sources), values, blocks.nr,
                                      blocks.nb)  # fmt: skip
                    self._parts(ctx, sources, c, workspace, epilogue, split, [*index, n0, nb, ki])
            return
        with for_range(b, -(-blocks.m // blocks.mb), "mblock") as mi:
            m0, mb = _block(b, mi, blocks.mb, blocks.m)
            with for_range(b, k_slices, "kslice") as ki:
                k0, kc = _block(b, ki, blocks.kc, blocks.k)
                if not split.packed[0]:
                    values = [*index, dst, m0, mb, k0, kc]
                    share_packing(ctx, blocks, self._side(0, sources), values, blocks.mr,
                                  blocks.mb)  # fmt: skip
                self._parts(ctx, sources, c, workspace, epilogue, split, [*index, m0, mb, ki])

    def _side(self, side: int, sources):
        """(ctx, batch) -> operand `side`, as `share_packing` takes it."""
        return lambda ctx, batch: self.operand(side, ctx, sources, batch)

    def _parts(self, ctx, sources, c, workspace, epilogue, split, values) -> None:
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
            _, _, c_batch, region = self._operands(ctx, sources, c, epilogue, batch)
            k0, kc = _block(b, ki, blocks.kc, blocks.k)
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
            count = smaller(b, i64(step), b.sub(i64(total), p0))
            operand = self.operand(own_side, ctx, sources, batch)
            if packs_once:
                with if_then(b, b.icmp_unsigned("==", s0, i64(0))):
                    operand.pack(ctx, blocks, own_region, p0, count, k0, kc, width)
                own = own_region
            else:
                own = operand.pack(ctx, blocks, own_region, p0, count, k0, kc, width)
            if by_rows:
                block = (p0, count, s0, extent)
                _multiply(ctx, blocks, own, shared, c_batch, self.ldc, block, ki, region,
                          split.packed[0])  # fmt: skip
            else:
                block = (s0, extent, p0, count)
                _multiply(ctx, blocks, shared, own, c_batch, self.ldc, block, ki, region,
                          split.packed[0])  # fmt: skip

        share_out(ctx, (split.parts,), split.parts, unit, values)

    def _emit_one(self, ctx, sources, c: Slice, workspace: Slice, epilogue, index) -> None:
        """The GEMM (or gemv) of batch element `index`, on the calling thread."""
        a, b_operand, c_batch, region = self._operands(ctx, sources, c, epilogue, index)
        if self.gemv is None:
            packing = ctx.slice_pointer(workspace)
            emit_gemm(ctx, self.blocks, a, b_operand, c_batch, self.ldc, packing, region)
        else:
            self._gemv(ctx, a, b_operand, c_batch, region, i64(0), max(self.m, self.n))

    def _operands(self, ctx, sources, c: Slice, epilogue, index):
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
        b = ctx.builder
        ty = self.config.element
        matrix = StridedPanels(
            b.gep(matrix.base, [b.mul(i0, i64(matrix.p_stride))], source_etype=ty),
            matrix.p_stride,
            matrix.k_stride,
        )
        emit_gemv(ctx, self.config, self.gemv, count, self.k, vector, matrix, out)
