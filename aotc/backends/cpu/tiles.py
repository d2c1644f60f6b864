"""Register tiles: MR x NR accumulators in vector registers, and the GEMM micro-kernel
and edge kernels built on them.

The micro-kernel multiplies one packed A panel (kc x MR) by one packed B panel
(kc x NR) into an MR x NR tile of C held in `<W x float>` registers (llvm.fma where
the target has it); partial tiles are stored with masked stores.  N's columns past
its last whole panel go to an edge kernel when that costs fewer multiply-adds
(`edge_columns`).  Each kernel is an internal function emitted once per module and
configuration (shared_functions.py), so that every GEMM of a model calls the same
code.  The direct and plane convolutions accumulate in `Tile`s too.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.lltypes import I1, I32, I64, PTR, VOID, i64
from ..llvm.loops import entry_alloca, for_range, if_then
from .gemm_config import GemmConfig
from .shared_functions import shared_function
from .vectors import masked_load, masked_store, mul_add, plus, splat

# how far ahead a micro-kernel prefetches pre-packed weights (A panels), which stream
# from memory: ResNet-50's deep layers read megabytes of them per call, and the
# hardware prefetchers alone left it 1.24x slower (one thread; 2 KB ahead as fast,
# 1 KB 1.045x slower; runtime-packed A, already in L2, ran 1.03x slower prefetched)
A_PREFETCH_BYTES = 4096


def micro_kernel(
    ctx: EmitContext,
    cfg: GemmConfig,
    mr: int,
    nr: int,
    extra: int = 0,
    streams_a: bool = False,
    a_rows: int = 0,
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

    `a_rows`: A is not packed but its rows in memory, that many elements apart (a at
    row 0's first value; rows past `rows` read row 0's, and are not stored).
    """
    assert not (a_rows and extra), "the edge columns read A as packed columns"
    name = f"{ctx.prefix}.gemm.kernel.{cfg.kernel_tag}.{mr}x{nr}" + (f"+{extra}" if extra else "")
    name += ".stream" if streams_a else ""
    name += f".rows{a_rows}" if a_rows else ""
    args = [I64, PTR, PTR, PTR, I64, I1, I64, I64] + ([PTR] if extra else [])
    function, b = shared_function(ctx, name, args)
    if b is None:
        return function
    kc, a_ptr, b_ptr, c_ptr, ldc, accumulate, rows, cols = function.args[:8]
    tile = Tile(b, cfg, mr, nr, extra)
    if a_rows:
        tile.add_rows(ctx, kc, _row_starts(b, cfg, a_ptr, rows, mr, a_rows), b_ptr, nr)
    else:
        ahead = A_PREFETCH_BYTES if streams_a else 0
        tile.add_panels(ctx, kc, a_ptr, b_ptr, nr, *function.args[8:], ahead=ahead)
    tile.store_clipped(ctx, c_ptr, ldc, accumulate, rows, cols)
    if extra:
        c_extra = b.gep(c_ptr, [i64(nr)], source_etype=cfg.element)
        _store_columns(b, cfg, tile.column_values(), c_extra, ldc, accumulate, rows)
    b.ret_void()
    return function


def _row_starts(b: ir.IRBuilder, cfg: GemmConfig, a_ptr, rows, mr: int, a_rows: int) -> list:
    """Where each of the MR rows of A read in place starts (`a_rows` elements apart);
    rows past `rows` (an i64) at row 0's, which is in memory (their sums are not stored)."""
    return [
        b.gep(
            a_ptr,
            [b.select(b.icmp_unsigned("<", i64(i), rows), i64(i * a_rows), i64(0))],
            source_etype=cfg.element,
        )
        for i in range(mr)
    ]


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


def edge_kernel(
    ctx: EmitContext, cfg: GemmConfig, mr: int, cols: int, nr: int, a_rows: int = 0
) -> ir.Function:
    """`kernel(kc, a, b, c, ldc, accumulate, rows)`: C[:rows, :cols] (+)= A panel x the
    first `cols` columns of a B panel NR wide, in the cheaper of two forms.

    - Column vectors: each column is one accumulator over the tile's MR rows (A's
      packed k-step is MR contiguous values) times B's value broadcast, `cols`
      multiply-adds per k (few columns: 1 against a whole tile's MR x NR / W).
    - A narrower tile: MR rows of just enough vectors for `cols` (16 columns of a
      48-wide panel: one vector per row, where columns would take 16 half vectors).

    `a_rows`: A is its rows in memory (`micro_kernel`'s), the tile form then.
    """
    name = f"{ctx.prefix}.gemm.edge.{cfg.kernel_tag}.{mr}x{cols}.{nr}"
    name += f".rows{a_rows}" if a_rows else ""
    function, b = shared_function(ctx, name, [I64, PTR, PTR, PTR, I64, I1, I64])
    if b is None:
        return function
    if edge_form(cfg, mr, cols) == "columns" and not a_rows:
        _column_edge(ctx, b, cfg, mr, cols, nr, function.args)
    else:
        kc, a_ptr, b_ptr, c_ptr, ldc, accumulate, rows = function.args
        tile = Tile(b, cfg, mr, min(-(-cols // cfg.lanes) * cfg.lanes, nr))
        if a_rows:
            tile.add_rows(ctx, kc, _row_starts(b, cfg, a_ptr, rows, mr, a_rows), b_ptr, nr)
        else:
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
        self.add_outer(ctx, b_vecs, a_pointers)

    def add_outer(self, ctx, b_vecs: list[ir.Value], a_pointers: list[ir.Value]) -> None:
        """Tile += outer product of row i's A value (at a_pointers[i]) and B's vectors."""
        b, cfg = self.b, self.cfg
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
            self.add_products(
                ctx, b_row, [b.gep(a_row, [i64(i)], source_etype=ty) for i in range(mr)]
            )
            if self.columns:
                extra_row = b.gep(b_extra, [b.mul(k, i64(b_stride))], source_etype=ty)
                _add_column_products(ctx, b, cfg, self.columns, a_row, extra_row)

    def add_rows(self, ctx, kc, a_starts: list[ir.Value], b_ptr, b_stride: int) -> None:
        """Tile += A's rows in memory (row i's values from a_starts[i] on) x B panel."""
        b, ty = self.b, self.cfg.element
        with for_range(b, kc, "k") as k:
            b_row = b.gep(b_ptr, [b.mul(k, i64(b_stride))], source_etype=ty)
            self.add_products(ctx, b_row, [b.gep(a, [k], source_etype=ty) for a in a_starts])

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
        _store_tile(
            ctx, self.b, self.cfg, self.slots, self.types, c_ptr, ldc, accumulate, rows, cols
        )


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
                                    value = plus(
                                        b, cfg, b.load(p, typ=t, align=cfg.itemsize), value
                                    )
                                b.store(value, p, align=cfg.itemsize)
                            else:
                                masked_store(ctx, b, cfg, value, p, offset, cols, adding)
                            offset += t.count
