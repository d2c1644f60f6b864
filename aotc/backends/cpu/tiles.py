"""Register tiles on vector types: per-target GEMM configuration, the micro-kernel,
panel packing from strided memory, and the vector memory helpers they share.

Everything here is an internal LLVM function emitted once per module and
configuration (`shared_function`), so that every GEMM of a model calls the
same code: the micro-kernel multiplies one packed A panel (kc x MR) by one
packed B panel (kc x NR) into an MR x NR tile of C held in `<W x float>`
registers (llvm.fma where the target has it); partial tiles are stored with
masked stores.  The packer lays a strided matrix out as such panels.
"""

from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from llvmlite import ir

from ...ir import DType
from ..llvm.context import EmitContext
from ..llvm.lltypes import I1, I32, I64, PTR, VOID, i64, register_type
from ..llvm.loops import entry_alloca, for_range, if_then


@dataclass(frozen=True)
class Blocks:
    """Register and cache blocking of one vector width.

    The micro-kernel keeps MR x NR of C in registers: `tiles` lists the
    (MR, vectors) shapes, NR = vectors registers wide, the preferred first;
    `blocking` picks per shape the one that pads M and N least.  Bytes budgets
    size the blocks: the A micro-panel (kc x MR) in L1, the B block (kc x NB)
    in L2, the A block (MB x kc) in L3.
    """

    tiles: tuple[tuple[int, int], ...]
    l1: int
    l2: int
    l3: int
    registers: int  # vector registers of the target


BLOCKING = {
    # AVX-512: 24 zmm accumulators of 32, as 12 x 2 or (for M = 8k, e.g. 64 channels)
    # 8 x 3 vectors, which loads fewer values per multiply-add; 8 x 2 for small N
    512: Blocks(((12, 2), (8, 3), (8, 2)), 18 * 1024, 720 * 1024, 4 * 2**20, 32),
    # AVX2: 12 ymm accumulators of 16
    256: Blocks(((6, 2),), 12 * 1024, 160 * 1024, 2 * 2**20, 16),
    # SSE: 8 xmm accumulators (no FMA: the products need temporaries)
    128: Blocks(((4, 2),), 8 * 1024, 128 * 1024, 2 * 2**20, 16),
}
NEON_BLOCKING = Blocks(((8, 2),), 16 * 1024, 256 * 1024, 2 * 2**20, 32)
# how far ahead a micro-kernel prefetches pre-packed weights (A panels), which stream
# from memory: ResNet-50's deep layers read megabytes of them per call, and the
# hardware prefetchers alone left it 1.24x slower (one thread; 2 KB ahead as fast,
# 1 KB 1.045x slower; runtime-packed A, already in L2, ran 1.03x slower prefetched)
A_PREFETCH_BYTES = 4096
# cost per multiply-add of a tile with fewer accumulators than the preferred one (an
# 8 x 2 AVX-512 tile: 131 against 145 GFLOP/s for 12 x 2 in the micro-kernel alone, but
# whole models, where it pads M less, run best with less)
FEWER_ACCUMULATORS_COST = 1.04


@dataclass(frozen=True)
class GemmConfig:
    """The blocking of one element type on one target.

    An integer GEMM (`paired`) multiplies 8- or 16-bit integer operands into s32 sums:
    each 32-bit panel element holds two of an operand's values along k (k and k + 1)
    as 16-bit halves, and a multiply-add takes the products of both halves at once
    (pmaddwd on x86: 2x the multiply-adds of an f32 FMA per instruction), so K counts
    pairs and C is s32.
    """

    dtype: DType  # C's element type, and the panels' (floats) or their pairs' (s32)
    lanes: int  # W: elements per vector register
    blocks: Blocks
    fma: bool
    operand: DType | None = None  # integer GEMM: the operands' type (else `dtype`)
    pmaddwd: bool = False  # integer GEMM: x86's pmaddwd is there at `lanes` (target.py)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def element(self) -> ir.Type:
        return register_type(self.dtype)

    @property
    def paired(self) -> bool:
        return self.operand is not None

    @property
    def source(self) -> DType:
        """The operands' element type in memory."""
        return self.operand or self.dtype


GEMM_DTYPES = frozenset({DType.F32, DType.F64})
# integer operands that pair into 16-bit halves (u8 and s8 widen exactly), summed in s32
PAIRED_OPERANDS = frozenset({DType.S8, DType.U8, DType.S16})


def gemm_config(target, dtype: DType, operand: DType | None = None) -> GemmConfig | None:
    """The blocking for a `dtype` result of `operand`s (default: `dtype`) on `target`;
    None for the types GEMM does not handle."""
    operand = operand or dtype
    if not fits_gemm(dtype, [operand]):
        return None
    bits = target.vector_bits if target is not None else 128
    blocks = NEON_BLOCKING if _is_arm(target) else BLOCKING[bits]
    lanes = bits // (8 * dtype.itemsize)
    fma = target is None or target.has_fma
    if dtype.is_float:
        return GemmConfig(dtype, lanes, blocks, fma)
    pmaddwd = target is not None and target.has_pmaddwd
    return GemmConfig(dtype, lanes, blocks, fma, operand, pmaddwd)


def fits_gemm(result: DType, operands) -> bool:
    """Whether GEMM computes a `result` contraction of operands of these types: floats of
    the result's own type, or 8/16-bit integers (one type) summed in s32."""
    kinds = set(operands)
    if result in GEMM_DTYPES:
        return kinds == {result}
    return result is DType.S32 and len(kinds) == 1 and kinds <= PAIRED_OPERANDS


def _is_arm(target) -> bool:
    return target is not None and target.arch == "aarch64"


# -- the micro-kernel -------------------------------------------------------------


def shared_function(ctx: EmitContext, name: str, args: list[ir.Type]):
    """(function, builder or None): the internal function `name`; a builder at its entry
    when it still has to be emitted."""
    existing = ctx.module.globals.get(name)
    if existing is not None:
        return existing, None
    function = ir.Function(ctx.module, ir.FunctionType(VOID, args), name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")  # one copy per module keeps compile time flat
    return function, ir.IRBuilder(function.append_basic_block("entry"))


def micro_kernel(
    ctx: EmitContext, cfg: GemmConfig, mr: int, nr: int, extra: int = 0, streams_a: bool = False
) -> ir.Function:
    """`kernel(kc, a, b, c, ldc, accumulate, rows, cols[, b_extra])`: C tile (+)= A panel
    x B panel.

    `streams_a`: A is pre-packed weights, whose panels come one after the other from
    memory (each read once per K slice and N block): the kernel prefetches them
    A_PREFETCH_BYTES ahead, into the next panel.

    Only rows x cols of the MR x NR tile are stored (masked when partial); with
    `accumulate` the tile is added to C, else it replaces it.  With `extra` columns,
    also the first `extra` of the B panel at `b_extra` into the C columns right of
    the tile, as `edge_kernel`'s column vectors: N's edge at the cost of `extra`
    multiply-adds per k in the last whole panel's call (see `fuses_edge`).
    """
    name = f"{ctx.prefix}.gemm.kernel.{cfg.dtype.text}.{mr}x{nr}" + (f"+{extra}" if extra else "")
    name += ".stream" if streams_a else ""
    args = [I64, PTR, PTR, PTR, I64, I1, I64, I64] + ([PTR] if extra else [])
    function, b = shared_function(ctx, name, args)
    if b is None:
        return function
    kc, a_ptr, b_ptr, c_ptr, ldc, accumulate, rows, cols = function.args[:8]
    tile = Tile(b, cfg, mr, nr, extra)
    ahead = A_PREFETCH_BYTES if streams_a else 0
    tile.add_panels(ctx, kc, a_ptr, b_ptr, nr, *function.args[8:], ahead=ahead)
    tile.store_clipped(ctx, c_ptr, ldc, accumulate, rows, cols)
    if extra:
        c_extra = b.gep(c_ptr, [i64(nr)], source_etype=cfg.element)
        _store_columns(b, cfg, tile.column_values(), c_extra, ldc, accumulate, rows)
    b.ret_void()
    return function


def prefetch(ctx: EmitContext, b: ir.IRBuilder, pointer: ir.Value) -> None:
    """Prefetch the line at `pointer` into L1 (for a read)."""
    args = [pointer, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)]
    b.call(ctx.declare("llvm.prefetch.p0", VOID, args), args)


EDGE_IN_FLIGHT = 8  # multiply-adds in flight: 4 cycles of latency x 2 per cycle


def edge_columns(cfg: GemmConfig, mr: int, nr: int, n: int) -> int:
    """Columns of N past its last whole NR panel that `edge_kernel` takes (0: none, the
    last panel is a zero-padded tile): when that costs fewer multiply-adds per k."""
    cols = n % nr
    return cols if cols and edge_cost(cfg, mr, cols) < mr * -(-nr // cfg.lanes) else 0


def fuses_edge(cfg: GemmConfig, mr: int, nr: int, cols: int) -> bool:
    """Whether N's edge columns go with the last whole panel's micro-kernel call (as
    its `extra` columns) rather than a call of their own: column vectors that fit in
    the registers beside the tile's (a 1-column edge cost resnet50 2% on its own, at
    one half-width multiply-add per two loads)."""
    vectors = -(-nr // cfg.lanes)
    in_use = mr * vectors + cols * -(-mr // cfg.lanes) + vectors + 3  # B, A, a broadcast
    return edge_form(cfg, mr, cols) == "columns" and in_use <= cfg.blocks.registers


def edge_cost(cfg: GemmConfig, mr: int, cols: int) -> float:
    """Vector multiply-adds per k of `edge_kernel`'s cheaper form."""
    return min(_column_cost(cfg, mr, cols), mr * -(-cols // cfg.lanes))


def edge_form(cfg: GemmConfig, mr: int, cols: int) -> str:
    """Which form `edge_kernel` takes: "columns" or "tile" (see there)."""
    return "columns" if _column_cost(cfg, mr, cols) <= edge_cost(cfg, mr, cols) else "tile"


def _column_cost(cfg: GemmConfig, mr: int, cols: int) -> float:
    """Column vectors' multiply-adds per k; infinite past the registers of the target's
    preferred tile."""
    per_column = -(-mr // cfg.lanes)  # vectors over the MR rows
    rows, vectors = cfg.blocks.tiles[0]
    return cols * per_column if cols * per_column <= rows * vectors else math.inf


def edge_kernel(ctx: EmitContext, cfg: GemmConfig, mr: int, cols: int, nr: int) -> ir.Function:
    """`kernel(kc, a, b, c, ldc, accumulate, rows)`: C[:rows, :cols] (+)= A panel x the
    first `cols` columns of a B panel NR wide, in the cheaper of two forms.

    - Column vectors: each column is one accumulator over the tile's MR rows (A's
      packed k-step is MR contiguous values) times B's value broadcast, `cols`
      multiply-adds per k (few columns: 1 against a whole tile's MR x NR / W).
    - A narrower tile: MR rows of just enough vectors for `cols` (16 columns of a
      48-wide panel: one vector per row, where columns would take 16 half vectors).
    """
    name = f"{ctx.prefix}.gemm.edge.{cfg.dtype.text}.{mr}x{cols}.{nr}"
    function, b = shared_function(ctx, name, [I64, PTR, PTR, PTR, I64, I1, I64])
    if b is None:
        return function
    if edge_form(cfg, mr, cols) == "columns":
        _column_edge(ctx, b, cfg, mr, cols, nr, function.args)
    else:
        kc, a_ptr, b_ptr, c_ptr, ldc, accumulate, rows = function.args
        tile = Tile(b, cfg, mr, min(-(-cols // cfg.lanes) * cfg.lanes, nr))
        tile.add_panels(ctx, kc, a_ptr, b_ptr, nr)
        tile.store(ctx, c_ptr, ldc, accumulate, rows, i64(cols))
    b.ret_void()
    return function


def _column_edge(ctx, b: ir.IRBuilder, cfg: GemmConfig, mr: int, cols: int, nr: int, args):
    """The column-vector form of `edge_kernel`."""
    kc, a_ptr, b_ptr, c_ptr, ldc, accumulate, rows = args
    ty = cfg.element
    vec = ir.VectorType(ty, mr)
    # few columns: k split over several accumulators per column, so that the chains
    # of dependent multiply-adds overlap
    chains = max(min(-(-EDGE_IN_FLIGHT // cols), EDGE_IN_FLIGHT), 1)
    slots = [[entry_alloca(b, vec) for _ in range(cols)] for _ in range(chains)]
    for chain in slots:
        for slot in chain:
            b.store(ir.Constant(vec, None), slot)

    def step(k, chain):
        a_row = b.gep(a_ptr, [b.mul(k, i64(mr))], source_etype=ty)
        _add_column_products(
            ctx, b, cfg, chain, a_row, b.gep(b_ptr, [b.mul(k, i64(nr))], source_etype=ty)
        )

    rounds = b.udiv(kc, i64(chains))
    with for_range(b, rounds, "k") as r:
        for c, chain in enumerate(slots):
            step(b.add(b.mul(r, i64(chains)), i64(c)), chain)
    with for_range(b, b.sub(kc, b.mul(rounds, i64(chains))), "kt") as t:
        step(b.add(b.mul(rounds, i64(chains)), t), slots[0])
    columns = []
    for j in range(cols):
        total = b.load(slots[0][j], typ=vec)
        for chain in slots[1:]:
            total = plus(b, cfg, total, b.load(chain[j], typ=vec))
        columns.append(total)
    _store_columns(b, cfg, columns, c_ptr, ldc, accumulate, rows)


def _add_column_products(ctx, b: ir.IRBuilder, cfg: GemmConfig, slots, a_row, b_row) -> None:
    """Column vector j (a slot, lane i: row i) += A's k-step (the MR values at `a_row`)
    x B's value j (at `b_row`)."""
    vec = slots[0].allocated_type
    a_column = b.load(a_row, typ=vec, align=cfg.itemsize)
    for j, slot in enumerate(slots):
        value = b.load(b.gep(b_row, [i64(j)], source_etype=cfg.element), typ=cfg.element)
        b.store(mul_add(ctx, b, cfg, a_column, splat(b, value, vec), b.load(slot, typ=vec)), slot)


def _store_columns(b: ir.IRBuilder, cfg: GemmConfig, columns, c_ptr, ldc, accumulate, rows):
    """Store (or add) column vectors (lane i: row i) to C's first columns, `rows` rows."""
    ty = cfg.element
    with b.if_else(accumulate) as (add, replace):
        for branch, adding in ((add, True), (replace, False)):
            with branch:
                for i in range(columns[0].type.count):
                    with if_then(b, b.icmp_unsigned("<", i64(i), rows)):
                        c_row = b.gep(c_ptr, [b.mul(i64(i), ldc)], source_etype=ty)
                        for j, column in enumerate(columns):
                            p = b.gep(c_row, [i64(j)], source_etype=ty)
                            value = b.extract_element(column, ir.Constant(I32, i))
                            if adding:
                                value = plus(b, cfg, b.load(p, typ=ty), value)
                            b.store(value, p)


class Tile:
    """An MR x NR tile of accumulators in vector registers (stack slots that LLVM
    promotes), zeroed at the builder's position; NR below one vector (N < W) makes
    a narrower last vector."""

    def __init__(self, b: ir.IRBuilder, cfg: GemmConfig, mr: int, nr: int, extra: int = 0):
        self.b, self.cfg = b, cfg
        vectors, tail = divmod(nr, cfg.lanes)
        widths = [cfg.lanes] * vectors + ([tail] if tail else [])
        self.types = [ir.VectorType(cfg.element, w) for w in widths]
        self.slots = [[entry_alloca(b, t) for t in self.types] for _ in range(mr)]
        for row in self.slots:
            for slot, t in zip(row, self.types):
                b.store(ir.Constant(t, None), slot)
        # `extra` column vectors over the MR rows (micro_kernel's edge columns)
        self.column_type = ir.VectorType(cfg.element, mr)
        self.columns = [entry_alloca(b, self.column_type) for _ in range(extra)]
        for slot in self.columns:
            b.store(ir.Constant(self.column_type, None), slot)

    def add_products(self, ctx, b_row: ir.Value, a_pointers: list[ir.Value], masks=None) -> None:
        """Tile += outer product of row i's A value (at a_pointers[i]) and B's NR values
        (at b_row; with `masks`, one per vector, only the lanes they hold are loaded)."""
        b, cfg = self.b, self.cfg
        b_vecs, offset = [], 0
        for k, t in enumerate(self.types):
            p = b.gep(b_row, [i64(offset)], source_etype=cfg.element)
            if masks is None:
                b_vecs.append(b.load(p, typ=t, align=cfg.itemsize))
            else:
                b_vecs.append(masked_load(ctx, b, cfg, p, masks[k]))
            offset += t.count
        for slots, pointer in zip(self.slots, a_pointers):
            a_value = b.load(pointer, typ=cfg.element)
            for slot, b_vec, t in zip(slots, b_vecs, self.types):
                acc = b.load(slot, typ=t)
                b.store(mul_add(ctx, b, cfg, splat(b, a_value, t), b_vec, acc), slot)

    def add_panels(self, ctx, kc, a_ptr, b_ptr, b_stride: int, b_extra=None, ahead=0) -> None:
        """Tile += packed A panel (MR values per k) x B panel (rows `b_stride` apart);
        the column vectors += A x the first columns of the B panel at `b_extra`.  With
        `ahead`, A's bytes that far on are prefetched into L1 at each k."""
        b, cfg, mr = self.b, self.cfg, len(self.slots)
        ty = cfg.element
        with for_range(b, kc, "k") as k:
            b_row = b.gep(b_ptr, [b.mul(k, i64(b_stride))], source_etype=ty)
            a_row = b.gep(a_ptr, [b.mul(k, i64(mr))], source_etype=ty)
            if ahead:
                prefetch(ctx, b, b.gep(a_row, [i64(ahead // cfg.itemsize)], source_etype=ty))
            self.add_products(ctx, b_row, [b.gep(a_row, [i64(i)], source_etype=ty)
                                           for i in range(mr)])  # fmt: skip
            if self.columns:
                extra_row = b.gep(b_extra, [b.mul(k, i64(b_stride))], source_etype=ty)
                _add_column_products(ctx, b, cfg, self.columns, a_row, extra_row)

    def column_values(self) -> list[ir.Value]:
        return [self.b.load(slot, typ=self.column_type) for slot in self.columns]

    def store_clipped(self, ctx, c_ptr, ldc, accumulate, rows, cols) -> None:
        """Store (or add) rows x cols of the tile: all of it without masks when whole."""
        b, mr, nr = self.b, len(self.slots), sum(t.count for t in self.types)
        full = b.and_(b.icmp_unsigned("==", rows, i64(mr)), b.icmp_unsigned("==", cols, i64(nr)))
        with b.if_else(full) as (then, otherwise):
            with then:
                self.store(ctx, c_ptr, ldc, accumulate)
            with otherwise:
                self.store(ctx, c_ptr, ldc, accumulate, rows, cols)

    def store(self, ctx, c_ptr, ldc, accumulate, rows=None, cols=None) -> None:
        """Store (or add) the tile to C; only `rows` x `cols` of it when given."""
        _store_tile(ctx, self.b, self.cfg, self.slots, self.types, c_ptr, ldc, accumulate,
                    rows, cols)  # fmt: skip


def _store_tile(ctx, b, cfg, slots, vec_types, c_ptr, ldc, accumulate, rows=None, cols=None):
    """Store (or add) the accumulators to C; only `rows` x `cols` of it when given
    (masked stores for the columns)."""
    ty = cfg.element
    with b.if_else(accumulate) as (add, replace):
        for branch, adding in ((add, True), (replace, False)):
            with branch:
                for i, row in enumerate(slots):
                    guard = b.icmp_unsigned("<", i64(i), rows) if rows is not None else None
                    with if_then(b, guard) if guard is not None else nullcontext():
                        c_row = b.gep(c_ptr, [b.mul(i64(i), ldc)], source_etype=ty)
                        offset = 0
                        for slot, t in zip(row, vec_types):
                            p = b.gep(c_row, [i64(offset)], source_etype=ty)
                            value = b.load(slot, typ=t)
                            if cols is None:
                                if adding:
                                    value = plus(b, cfg, b.load(p, typ=t, align=cfg.itemsize),
                                                value)  # fmt: skip
                                b.store(value, p, align=cfg.itemsize)
                            else:
                                masked_store(ctx, b, cfg, value, p, offset, cols, adding)
                            offset += t.count


def masked_store(ctx, b, cfg, value, pointer, first: int, cols, adding: bool) -> None:
    """Store lanes first + l < cols of `value` (added to what is there when `adding`)."""
    mask = lanes_below(b, cols, value.type.count, first)
    if adding:
        value = plus(b, cfg, masked_load(ctx, b, cfg, pointer, mask), value)
    store_lanes(ctx, b, cfg, value, pointer, mask)


def lanes_below(b: ir.IRBuilder, count: ir.Value, width: int, first: int = 0) -> ir.Value:
    """<width x i1>: lane l is set where first + l < count (an i64; none when negative)."""
    lanes = ir.Constant(ir.VectorType(I64, width), [first + lane for lane in range(width)])
    return b.icmp_signed("<", lanes, splat(b, count, lanes.type))


def store_lanes(ctx, b, cfg, value, pointer, mask) -> None:
    """Store the lanes of `value` where `mask` holds (the others are not touched)."""
    t = value.type
    align = ir.Constant(I32, cfg.itemsize)
    name = f"llvm.masked.store.v{t.count}{_type_tag(cfg)}.p0"
    b.call(ctx.declare(name, VOID, [value, pointer, align, mask]), [value, pointer, align, mask])


def smaller(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """The signed minimum of two i64 values."""
    return b.select(b.icmp_signed("<", x, y), x, y)


def splat(b: ir.IRBuilder, value: ir.Value, vec: ir.VectorType) -> ir.Value:
    """`value` in every lane of a vector of type `vec`."""
    one = b.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
    return b.shuffle_vector(one, ir.Constant(vec, ir.Undefined), zeros)


def plus(b: ir.IRBuilder, cfg: GemmConfig, x, y) -> ir.Value:
    """x + y in C's type."""
    return b.add(x, y) if cfg.paired else b.fadd(x, y)


# x86's pmaddwd per vector width (i32 lanes): (<2W x i16>, <2W x i16>) -> <W x i32>
PMADDWD = {
    4: "llvm.x86.sse2.pmadd.wd",
    8: "llvm.x86.avx2.pmadd.wd",
    16: "llvm.x86.avx512.pmaddw.d.512",
}


def pair_mul_add(ctx, b: ir.IRBuilder, cfg: GemmConfig, x, y, acc) -> ir.Value:
    """acc + even(x) * even(y) + odd(x) * odd(y) per 32-bit lane of <W x i32> vectors, each
    lane two signed 16-bit halves.  Sums wrap modulo 2**32, so the result is the exact
    s32 sum (XLA's integer dot wraps too).

    On x86 it is pmaddwd and an add (vpdpwssd on VNNI CPUs: LLVM fuses them).  The
    intrinsic is called by name because LLVM, seeing one operand a broadcast, would
    rewrite the plain form into 32-bit multiplies; elsewhere the plain form it is."""
    count = x.type.count
    if cfg.pmaddwd and count in PMADDWD and count <= cfg.lanes:
        halves = ir.VectorType(ir.IntType(16), 2 * count)
        args = [b.bitcast(x, halves), b.bitcast(y, halves)]
        return b.add(b.call(ctx.declare(PMADDWD[count], x.type, args), args), acc)
    halves = ir.VectorType(ir.IntType(16), 2 * count)

    def half(v, odd: int):
        picked = pick_lanes(b, b.bitcast(v, halves), range(odd, 2 * count, 2))
        return b.sext(picked, x.type)

    products = b.add(b.mul(half(x, 0), half(y, 0)), b.mul(half(x, 1), half(y, 1)))
    return b.add(products, acc)


def mul_add(ctx, b: ir.IRBuilder, cfg: GemmConfig, x, y, acc) -> ir.Value:
    """x*y + acc: one fused instruction where the target has FMA (never emulated); for
    an integer GEMM the pairs' products (`pair_mul_add`)."""
    if cfg.paired:
        return pair_mul_add(ctx, b, cfg, x, y, acc)
    if not cfg.fma:
        return b.fadd(b.fmul(x, y), acc)
    suffix = f"v{x.type.count}{'f32' if cfg.dtype is DType.F32 else 'f64'}"
    fma = ctx.declare(f"llvm.fma.{suffix}", x.type, [x, y, acc])
    return b.call(fma, [x, y, acc])


# -- packing from strided memory ----------------------------------------------------


def strided_packer(ctx: EmitContext, cfg: GemmConfig, width: int, gather: bool):
    """`pack(src, p_stride, k_stride, count, kc, dst)`: panels of `width` from memory.

    Panels whose rows are contiguous (p_stride == 1) are copied as vectors;
    others (transposing, strided, the partial last panel) are gathered with
    32-bit lane offsets (`gather`: p_stride * width fits), else copied element
    by element; rows past `count` are zeros.
    """
    name = f"{ctx.prefix}.gemm.pack.{cfg.dtype.text}.{width}{'' if gather else '.wide'}"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64, I64, PTR])
    if b is None:
        return function
    src, p_stride, k_stride, count, kc, dst = function.args
    ty = cfg.element
    row_type = ir.VectorType(ty, width)
    with panel_loop(b, (src, ty), (dst, ty), p_stride, count, kc, width) as panel:
        source, out, valid, full = panel
        contiguous = b.and_(full, b.icmp_unsigned("==", p_stride, i64(1)))
        transposing = b.and_(full, b.icmp_unsigned("==", k_stride, i64(1)))
        with b.if_else(contiguous) as (vector, other):
            with vector, for_range(b, kc, "k") as k:
                p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
                row = b.load(p, typ=row_type, align=cfg.itemsize)
                b.store(
                    row, b.gep(out, [b.mul(k, i64(width))], source_etype=ty), align=cfg.itemsize
                )
            with other, b.if_else(transposing) as (rows, rest):
                with rows:
                    _transposed_panel(b, cfg, source, out, p_stride, kc, width)
                with rest:
                    if gather:
                        _gathered_panel(
                            ctx, b, cfg, source, out, p_stride, k_stride, kc, valid, width
                        )
                    else:
                        _scalar_panel(b, ty, source, out, p_stride, k_stride, kc, valid, width)
    b.ret_void()
    return function


@contextmanager
def panel_loop(b: ir.IRBuilder, src, dst, p_stride, count, kc, width: int):
    """A loop over the panels of `width` rows that a packer writes from strided memory:
    yields (where the panel's first row starts in `src`, where its kc x width elements go
    in `dst`, its rows before `count`, whether it has all `width`); `src` and `dst` are
    (pointer, element type)."""
    (src, src_type), (dst, dst_type) = src, dst
    panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
    with for_range(b, panels, "panel") as panel:
        first = b.mul(panel, i64(width))
        valid = smaller(b, i64(width), b.sub(count, first))
        source = b.gep(src, [b.mul(first, p_stride)], source_etype=src_type)
        out = b.gep(dst, [b.mul(first, kc)], source_etype=dst_type)
        yield source, out, valid, b.icmp_unsigned("==", valid, i64(width))


def _transposed_panel(b, cfg: GemmConfig, source, out, p_stride, kc, width) -> None:
    """A full panel of rows contiguous along k (a row-major A): 4x4 blocks, transposed
    in registers, four rows at a time over all of k (reading all rows per k would
    touch `width` lines at once, which conflict in L1 for power-of-two strides)."""
    ty, align = cfg.element, cfg.itemsize
    quad = ir.VectorType(ty, 4)
    i32 = ir.IntType(32)

    def shuffle(x, y, order):
        return b.shuffle_vector(x, y, ir.Constant(ir.VectorType(i32, 4), order))

    chunks = b.udiv(kc, i64(4))
    for group in range(0, width - width % 4, 4):
        rows = [b.gep(source, [b.mul(i64(group + r), p_stride)], source_etype=ty) for r in range(4)]
        with for_range(b, chunks, f"quad{group}") as chunk:
            k = b.mul(chunk, i64(4))
            x = [b.load(b.gep(row, [k], source_etype=ty), typ=quad, align=align) for row in rows]
            low = [shuffle(x[0], x[1], [0, 4, 1, 5]), shuffle(x[2], x[3], [0, 4, 1, 5])]
            high = [shuffle(x[0], x[1], [2, 6, 3, 7]), shuffle(x[2], x[3], [2, 6, 3, 7])]
            columns = [
                shuffle(low[0], low[1], [0, 1, 4, 5]),
                shuffle(low[0], low[1], [2, 3, 6, 7]),
                shuffle(high[0], high[1], [0, 1, 4, 5]),
                shuffle(high[0], high[1], [2, 3, 6, 7]),
            ]
            for t, column in enumerate(columns):
                at = b.add(b.mul(b.add(k, i64(t)), i64(width)), i64(group))
                b.store(column, b.gep(out, [at], source_etype=ty), align=align)
    # the k past the last whole chunk, and the rows past the last group of four
    done = b.mul(chunks, i64(4))
    for j in range(width):
        row = b.gep(source, [b.mul(i64(j), p_stride)], source_etype=ty)
        start = done if j < width - width % 4 else i64(0)
        with for_range(b, b.sub(kc, start), f"t{j}") as t:
            k = b.add(start, t)
            value = b.load(b.gep(row, [k], source_etype=ty), typ=ty)
            b.store(value, b.gep(out, [b.add(b.mul(k, i64(width)), i64(j))], source_etype=ty))


def _gathered_panel(ctx, b, cfg, source, out, p_stride, k_stride, kc, valid, width) -> None:
    """Panel rows as masked gathers with 32-bit lane offsets; lanes past `valid` zero."""
    ty = cfg.element
    lane = lanes(width)
    offsets = b.mul(lane, splat(b, b.trunc(p_stride, I32), lane.type))
    mask = b.icmp_unsigned("<", lane, splat(b, b.trunc(valid, I32), lane.type))
    with for_range(b, kc, "k") as k:
        p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
        row = masked_gather(ctx, b, cfg, vector_gep(b, p, offsets, ty), mask)
        b.store(row, b.gep(out, [b.mul(k, i64(width))], source_etype=ty), align=cfg.itemsize)


def clamped_rows(b: ir.IRBuilder, valid, p_stride, width: int) -> list:
    """Per row j of a panel: (whether it is before `valid`, its offset, row 0's past
    `valid` so that a load there stays inside the operand)."""
    rows = []
    for j in range(width):
        inside = b.icmp_unsigned("<", i64(j), valid)
        rows.append((inside, b.mul(b.select(inside, i64(j), i64(0)), p_stride)))
    return rows


def _scalar_panel(b, ty, source, out, p_stride, k_stride, kc, valid, width) -> None:
    """Panel rows element by element; element j clamped into the panel so its load
    stays inside, then replaced by zero past `valid`."""
    zero = ir.Constant(ty, 0)
    offsets = clamped_rows(b, valid, p_stride, width)
    with for_range(b, kc, "k") as k:
        p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
        q = b.gep(out, [b.mul(k, i64(width))], source_etype=ty)
        for j, (inside, offset) in enumerate(offsets):
            value = b.load(b.gep(p, [offset], source_etype=ty), typ=ty)
            b.store(b.select(inside, value, zero), b.gep(q, [i64(j)], source_etype=ty))


# -- vector memory helpers (shared with im2col.py) -----------------------------------


def lanes(width: int) -> ir.Constant:
    """<0, 1, ..., width-1> as i32 lanes."""
    return i32_lanes(range(width))


def pick_lanes(b: ir.IRBuilder, vector: ir.Value, which) -> ir.Value:
    """A vector of the lanes `which` of `vector` (in that order)."""
    return b.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined), i32_lanes(which))


def i32_lanes(values) -> ir.Constant:
    """A constant i32 vector of `values` (lane indices, shuffle masks)."""
    values = list(values)
    return ir.Constant(ir.VectorType(I32, len(values)), values)


def vector_gep(b: ir.IRBuilder, base: ir.Value, offsets: ir.Value, ty: ir.Type) -> ir.Value:
    """<N x ptr>: base + offsets[i] elements of `ty`."""
    pointers = b.gep(base, [offsets], source_etype=ty)
    # llvmlite infers a scalar pointer type for a GEP with vector indices
    pointers.type = ir.VectorType(PTR, offsets.type.count)
    return pointers


def masked_gather(ctx, b, cfg: GemmConfig, pointers, mask) -> ir.Value:
    """The lanes of `pointers` where `mask` holds, zeros elsewhere (never loaded)."""
    count = mask.type.count
    return _masked(ctx, b, cfg, f"llvm.masked.gather.v{count}{_type_tag(cfg)}.v{count}p0",
                   pointers, mask)  # fmt: skip


def masked_load(ctx, b, cfg: GemmConfig, pointer, mask) -> ir.Value:
    """A contiguous vector from `pointer`, lanes outside `mask` zero (never loaded)."""
    count = mask.type.count
    return _masked(ctx, b, cfg, f"llvm.masked.load.v{count}{_type_tag(cfg)}.p0", pointer, mask)


def _masked(ctx, b, cfg: GemmConfig, name: str, address, mask) -> ir.Value:
    """Call masked load/gather intrinsic `name`: (address, align, mask, zeros)."""
    vec = ir.VectorType(cfg.element, mask.type.count)
    args = [address, ir.Constant(I32, cfg.itemsize), mask, ir.Constant(vec, None)]
    return b.call(ctx.declare(name, vec, args), args)


def _type_tag(cfg: GemmConfig) -> str:
    return {DType.F32: "f32", DType.F64: "f64"}.get(cfg.dtype, f"i{cfg.dtype.bits}")
