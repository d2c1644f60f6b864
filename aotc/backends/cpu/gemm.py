"""Packed, cache-blocked GEMM in LLVM IR, in the BLIS/GotoBLAS style.

`emit_gemm` computes C[M, N] = A[M, K] B[K, N] for one batch element; C is
row-major with row stride `ldc` and unit column stride.  K goes in slices of
KC; per slice A is packed into MR-row panels (kc x MR each: the micro-panel
that stays in L1) over MB rows (L3), and B into NR-column panels (kc x NR
each, streamed from L2) over NB columns.  The micro-kernel multiplies one A
panel by one B panel into an MR x NR tile of C held in `<W x float>`
registers (llvm.fma where the target has it).  Panels are zero-padded at the
M/N edges and partial tiles go through a stack tile, so any M, N, K works.

The micro-kernel and the strided-memory packer are internal functions
emitted once per module and configuration; the blocked loop nest is emitted
inline in each kernel with its operands' packers (`Panels`) and the
epilogue, which runs on each finished MR x NB sliver of C while it is in
cache.  Packing buffers live in the caller's scratch (the plan's workspace).
`emit_gemv` is the unpacked path for M == 1 or N == 1.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol

from llvmlite import ir

from ...ir import DType
from .context import EmitContext
from .lltypes import I1, I32, I64, PTR, VOID, i64, register_type
from .loops import branch_value, for_range, if_then, loop_nest

WORKSPACE_ALIGNMENT = 64



@dataclass(frozen=True)
class Blocks:
    """Register and cache blocking of one vector width.

    The micro-kernel keeps MR x NR of C in registers (MR from `rows`, chosen
    per M; NR = `vectors` registers wide).  Bytes budgets size the blocks:
    the A micro-panel (kc x MR) in L1, the B block (kc x NB) in L2, the A
    block (MB x kc) in L3.
    """

    rows: tuple[int, ...]  # MR choices, the preferred first
    vectors: int
    l1: int
    l2: int
    l3: int


BLOCKING = {
    # AVX-512: 24 (or 16) zmm accumulators of 32
    512: Blocks((12, 8), 2, 18 * 1024, 720 * 1024, 4 * 2**20),
    # AVX2: 12 ymm accumulators of 16
    256: Blocks((6,), 2, 12 * 1024, 160 * 1024, 2 * 2**20),
    # SSE: 8 xmm accumulators (no FMA: the products need temporaries)
    128: Blocks((4,), 2, 8 * 1024, 128 * 1024, 2 * 2**20),
}
NEON_BLOCKING = Blocks((8,), 2, 16 * 1024, 256 * 1024, 2 * 2**20)  # 32 vector registers
OTHER_ROWS_COST = 1.04  # a narrower tile's cost per row, relative to the preferred one


@dataclass(frozen=True)
class GemmConfig:
    """The blocking of one element type on one target."""

    dtype: DType
    lanes: int  # W: elements per vector register
    blocks: Blocks
    fma: bool

    @property
    def nr(self) -> int:
        return self.blocks.vectors * self.lanes

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def element(self) -> ir.Type:
        return register_type(self.dtype)


GEMM_DTYPES = frozenset({DType.F32, DType.F64})


def gemm_config(target, dtype: DType) -> GemmConfig | None:
    """The blocking for `dtype` on `target`; None for element types GEMM does not handle."""
    if dtype not in GEMM_DTYPES:
        return None
    bits = target.vector_bits if target is not None else 128
    blocks = NEON_BLOCKING if _is_arm(target) else BLOCKING[bits]
    lanes = bits // (8 * dtype.itemsize)
    return GemmConfig(dtype, lanes, blocks, fma=target is None or target.has_fma)


def _is_arm(target) -> bool:
    return target is not None and target.arch == "aarch64"


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
        packer = _strided_packer(ctx, blocks.config, width, gather)
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
    kernel = _micro_kernel(ctx, cfg, blocks.mr, blocks.nr)
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
                    rows = _min(b, i64(blocks.mr), b.sub(mb, i0))
                    a_panel = b.gep(packed_a, [b.mul(i0, kc)], source_etype=ty)
                    c_row = b.gep(c, [b.mul(b.add(m0, i0), i64(ldc))], source_etype=ty)
                    with for_range(b, col_panels, "jr") as jr:
                        j0 = b.mul(jr, i64(blocks.nr))
                        cols = _min(b, i64(blocks.nr), b.sub(nb, j0))
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
    return start, _min(b, i64(size), b.sub(i64(total), start))


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


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


def _micro_kernel(ctx: EmitContext, cfg: GemmConfig, mr: int, nr: int) -> ir.Function:
    """`kernel(kc, a, b, c, ldc, accumulate, rows, cols)`: C tile (+)= A panel x B panel.

    Only rows x cols of the MR x NR tile are stored (through a stack tile when
    partial); with `accumulate` the tile is added to C, else it replaces it.
    """
    name = f"{ctx.prefix}.gemm.kernel.{cfg.dtype.text}.{mr}x{nr}"
    function, b = shared_function(ctx, name, [I64, PTR, PTR, PTR, I64, I1, I64, I64])
    if b is None:
        return function
    kc, a_ptr, b_ptr, c_ptr, ldc, accumulate, rows, cols = function.args
    ty, vec = cfg.element, ir.VectorType(cfg.element, cfg.lanes)
    vectors = nr // cfg.lanes
    tail = nr % cfg.lanes  # nr below one vector (N < W): a narrower last vector
    widths = [cfg.lanes] * vectors + ([tail] if tail else [])
    vec_types = [ir.VectorType(ty, w) for w in widths]
    slots = [[_entry_slot(b, t) for t in vec_types] for _ in range(mr)]
    for row in slots:
        for slot, t in zip(row, vec_types):
            b.store(ir.Constant(t, None), slot)
    with for_range(b, kc, "k") as k:
        b_row = b.gep(b_ptr, [b.mul(k, i64(nr))], source_etype=ty)
        b_vecs = []
        offset = 0
        for t in vec_types:
            p = b.gep(b_row, [i64(offset)], source_etype=ty)
            b_vecs.append(b.load(p, typ=t, align=cfg.itemsize))
            offset += t.count
        a_row = b.gep(a_ptr, [b.mul(k, i64(mr))], source_etype=ty)
        for i in range(mr):
            a_value = b.load(b.gep(a_row, [i64(i)], source_etype=ty), typ=ty)
            for slot, b_vec, t in zip(slots[i], b_vecs, vec_types):
                acc = b.load(slot, typ=t)
                b.store(_mul_add(ctx, b, cfg, _splat(b, a_value, t), b_vec, acc), slot)
    full = b.and_(b.icmp_unsigned("==", rows, i64(mr)), b.icmp_unsigned("==", cols, i64(nr)))
    with b.if_else(full) as (then, otherwise):
        with then:
            _store_tile(ctx, b, cfg, slots, vec_types, c_ptr, ldc, accumulate)
        with otherwise:
            _store_tile(ctx, b, cfg, slots, vec_types, c_ptr, ldc, accumulate, rows, cols)
    b.ret_void()
    return function


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
                                    value = b.fadd(b.load(p, typ=t, align=cfg.itemsize), value)
                                b.store(value, p, align=cfg.itemsize)
                            else:
                                _masked_store(ctx, b, cfg, value, p, offset, cols, adding)
                            offset += t.count


def _masked_store(ctx, b, cfg, value, pointer, first: int, cols, adding: bool) -> None:
    """Store lanes first + l < cols of `value` (added to what is there when `adding`)."""
    t = value.type
    i32 = ir.IntType(32)
    lanes = ir.Constant(ir.VectorType(I64, t.count), [first + lane for lane in range(t.count)])
    mask = b.icmp_unsigned("<", lanes, _splat(b, cols, ir.VectorType(I64, t.count)))
    suffix = f"v{t.count}{'f32' if cfg.dtype is DType.F32 else 'f64'}.p0"
    align = ir.Constant(i32, cfg.itemsize)
    if adding:
        load = ctx.declare(f"llvm.masked.load.{suffix}", t, [pointer, align, mask, value])
        old = b.call(load, [pointer, align, mask, ir.Constant(t, None)])
        value = b.fadd(old, value)
    store = ctx.declare(f"llvm.masked.store.{suffix}", VOID, [value, pointer, align, mask])
    b.call(store, [value, pointer, align, mask])


def _entry_slot(b: ir.IRBuilder, ty: ir.Type) -> ir.Value:
    with b.goto_entry_block():
        return b.alloca(ty)


def _splat(b: ir.IRBuilder, value: ir.Value, vec: ir.VectorType) -> ir.Value:
    one = b.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
    return b.shuffle_vector(one, ir.Constant(vec, ir.Undefined), zeros)


def _mul_add(ctx, b: ir.IRBuilder, cfg: GemmConfig, x, y, acc) -> ir.Value:
    """x*y + acc: one fused instruction where the target has FMA (never emulated)."""
    if not cfg.fma:
        return b.fadd(b.fmul(x, y), acc)
    suffix = f"v{x.type.count}{'f32' if cfg.dtype is DType.F32 else 'f64'}"
    fma = ctx.declare(f"llvm.fma.{suffix}", x.type, [x, y, acc])
    return b.call(fma, [x, y, acc])


# -- packing from strided memory ----------------------------------------------------


def _strided_packer(ctx: EmitContext, cfg: GemmConfig, width: int, gather: bool):
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
    zero = ir.Constant(ty, 0)
    panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
    with for_range(b, panels, "panel") as panel:
        first = b.mul(panel, i64(width))
        valid = _min(b, i64(width), b.sub(count, first))
        source = b.gep(src, [b.mul(first, p_stride)], source_etype=ty)
        out = b.gep(dst, [b.mul(first, kc)], source_etype=ty)
        full = b.icmp_unsigned("==", valid, i64(width))
        contiguous = b.and_(full, b.icmp_unsigned("==", p_stride, i64(1)))
        with b.if_else(contiguous) as (vector, other):
            with vector:
                with for_range(b, kc, "k") as k:
                    p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
                    row = b.load(p, typ=row_type, align=cfg.itemsize)
                    q = b.gep(out, [b.mul(k, i64(width))], source_etype=ty)
                    b.store(row, q, align=cfg.itemsize)
            with other:
                transposing = b.icmp_unsigned("==", k_stride, i64(1))
                with b.if_else(b.and_(full, transposing)) as (rows, rest):
                    with rows:
                        _transposed_panel(b, ty, source, out, p_stride, kc, width)
                    with rest:
                        _other_panel(ctx, b, cfg, source, out, p_stride, k_stride, kc, valid, width, gather)
    b.ret_void()
    return function


def _transposed_panel(b, ty, source, out, p_stride, kc, width) -> None:
    """A full panel of rows contiguous along k (a row-major A): 4x4 blocks, transposed
    in registers, four rows at a time over all of k (reading all rows per k would
    touch `width` lines at once, which conflict in L1 for power-of-two strides)."""
    quad = ir.VectorType(ty, 4)
    i32 = ir.IntType(32)

    def shuffle(x, y, order):
        return b.shuffle_vector(x, y, ir.Constant(ir.VectorType(i32, 4), order))

    chunks = b.udiv(kc, i64(4))
    for group in range(0, width - width % 4, 4):
        rows = [b.gep(source, [b.mul(i64(group + r), p_stride)], source_etype=ty) for r in range(4)]
        with for_range(b, chunks, f"quad{group}") as chunk:
            k = b.mul(chunk, i64(4))
            x = [b.load(b.gep(row, [k], source_etype=ty), typ=quad, align=4) for row in rows]
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
                b.store(column, b.gep(out, [at], source_etype=ty), align=4)
    # the k past the last whole chunk, and the rows past the last group of four
    done = b.mul(chunks, i64(4))
    for j in range(width):
        row = b.gep(source, [b.mul(i64(j), p_stride)], source_etype=ty)
        start = done if j < width - width % 4 else i64(0)
        with for_range(b, b.sub(kc, start), f"t{j}") as t:
            k = b.add(start, t)
            value = b.load(b.gep(row, [k], source_etype=ty), typ=ty)
            b.store(value, b.gep(out, [b.add(b.mul(k, i64(width)), i64(j))], source_etype=ty))


def _other_panel(ctx, b, cfg, source, out, p_stride, k_stride, kc, valid, width, gather):
    """Strided or partial panels: gathered, or element by element."""
    ty = cfg.element
    if True:
        if True:
            if True:
                if gather:
                    lane = lanes(width)
                    offsets = b.mul(lane, splat(b, b.trunc(p_stride, I32), lane.type))
                    mask = b.icmp_unsigned("<", lane, splat(b, b.trunc(valid, I32), lane.type))
                    with for_range(b, kc, "k") as k:
                        p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
                        row = masked_gather(ctx, b, cfg, vector_gep(b, p, offsets, ty), mask)
                        q = b.gep(out, [b.mul(k, i64(width))], source_etype=ty)
                        b.store(row, q, align=cfg.itemsize)
                else:
                    _scalar_panel_rows(b, ty, source, out, p_stride, k_stride, kc, valid, width)


def _scalar_panel_rows(b, ty, source, out, p_stride, k_stride, kc, valid, width) -> None:
    """Panel rows element by element; element j clamped into the panel so its load
    stays inside, then replaced by zero past `valid`."""
    zero = ir.Constant(ty, 0)
    offsets = []
    for j in range(width):
        inside = b.icmp_unsigned("<", i64(j), valid)
        offsets.append((inside, b.mul(b.select(inside, i64(j), i64(0)), p_stride)))
    with for_range(b, kc, "k") as k:
        p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
        q = b.gep(out, [b.mul(k, i64(width))], source_etype=ty)
        for j, (inside, offset) in enumerate(offsets):
            value = b.load(b.gep(p, [offset], source_etype=ty), typ=ty)
            b.store(b.select(inside, value, zero), b.gep(q, [i64(j)], source_etype=ty))


# -- vector memory helpers (shared with im2col.py) -----------------------------------


def lanes(width: int) -> ir.Constant:
    """<0, 1, ..., width-1> as i32 lanes."""
    return ir.Constant(ir.VectorType(I32, width), list(range(width)))


def splat(b: ir.IRBuilder, value: ir.Value, vector: ir.VectorType) -> ir.Value:
    """`value` in every lane of a vector of type `vector`."""
    return _splat(b, value, vector)


def vector_gep(b: ir.IRBuilder, base: ir.Value, offsets: ir.Value, ty: ir.Type) -> ir.Value:
    """<N x ptr>: base + offsets[i] elements of `ty`."""
    pointers = b.gep(base, [offsets], source_etype=ty)
    # llvmlite infers a scalar pointer type for a GEP with vector indices
    pointers.type = ir.VectorType(PTR, offsets.type.count)
    return pointers


def masked_gather(ctx, b, cfg: GemmConfig, pointers, mask) -> ir.Value:
    """The lanes of `pointers` where `mask` holds, zeros elsewhere (never loaded)."""
    count = mask.type.count
    vec = ir.VectorType(cfg.element, count)
    name = f"llvm.masked.gather.v{count}{_type_tag(cfg)}.v{count}p0"
    align = ir.Constant(I32, cfg.itemsize)
    function = ctx.declare(name, vec, [pointers, align, mask, ir.Constant(vec, None)])
    return b.call(function, [pointers, align, mask, ir.Constant(vec, None)])


def masked_load(ctx, b, cfg: GemmConfig, pointer, mask) -> ir.Value:
    """A contiguous vector from `pointer`, lanes outside `mask` zero (never loaded)."""
    count = mask.type.count
    vec = ir.VectorType(cfg.element, count)
    name = f"llvm.masked.load.v{count}{_type_tag(cfg)}.p0"
    align = ir.Constant(I32, cfg.itemsize)
    function = ctx.declare(name, vec, [pointer, align, mask, ir.Constant(vec, None)])
    return b.call(function, [pointer, align, mask, ir.Constant(vec, None)])


def _type_tag(cfg: GemmConfig) -> str:
    return "f32" if cfg.dtype is DType.F32 else "f64"


# -- matrix-vector ------------------------------------------------------------------

GEMV_UNROLL = 4  # independent vector accumulators


def gemv_kind(m: int, n: int, matrix: tuple[int, int], vector_k_stride: int) -> str | None:
    """The unpacked matrix-vector path for M == 1 or N == 1, by the matrix's
    (p_stride, k_stride): "axpy" when contiguous along the outputs, "dot" when
    contiguous along K (with a contiguous vector); None: use the packed GEMM."""
    if m != 1 and n != 1:
        return None
    p_stride, k_stride = matrix
    if p_stride == 1:
        return "axpy"
    if k_stride == 1 and vector_k_stride == 1:
        return "dot"
    return None


def emit_gemv(
    ctx: EmitContext,
    cfg: GemmConfig,
    kind: str,
    count: int,
    depth: int,
    vector: StridedPanels,
    matrix: StridedPanels,
    out: ir.Value,
) -> None:
    """out[i] = sum_k vector[k] matrix[i, k] for i < count (`vector` indexes as (0, k))."""
    function = _gemv_function(ctx, cfg, kind)
    stride = matrix.k_stride if kind == "axpy" else matrix.p_stride
    args = [i64(count), i64(depth), vector.base, i64(vector.k_stride), matrix.base, i64(stride)]
    ctx.builder.call(function, [*args, out])


def _gemv_function(ctx: EmitContext, cfg: GemmConfig, kind: str) -> ir.Function:
    """`gemv(count, depth, x, x_stride, mat, stride, y)`.

    axpy: mat[i + k*stride], vectorized over i (UNROLL vectors of outputs in
    registers, one broadcast x[k] per k); dot: mat[i*stride + k], vectorized
    over k (UNROLL partial sums per output, reduced at the end).
    """
    name = f"{ctx.prefix}.gemv.{kind}.{cfg.dtype.text}"
    function, b = shared_function(ctx, name, [I64, I64, PTR, I64, PTR, I64, PTR])
    if b is None:
        return function
    count, depth, x, x_stride, mat, stride, y = function.args
    emit = _gemv_axpy if kind == "axpy" else _gemv_dot
    emit(ctx, b, cfg, count, depth, x, x_stride, mat, stride, y)
    b.ret_void()
    return function


def _gemv_axpy(ctx, b, cfg, count, depth, x, x_stride, mat, stride, y) -> None:
    ty = cfg.element
    vec = ir.VectorType(ty, cfg.lanes)
    done_slot = _entry_slot(b, I64)  # outputs finished by the wider steps
    b.store(i64(0), done_slot)
    for width, vectors in ((cfg.lanes * GEMV_UNROLL, GEMV_UNROLL), (cfg.lanes, 1), (1, 1)):
        t = vec if width > 1 else ty
        step = cfg.lanes if width > 1 else 1
        done = b.load(done_slot)
        blocks = b.udiv(b.sub(count, done), i64(width))
        with for_range(b, blocks, f"axpy{width}") as block:
            i0 = b.add(done, b.mul(block, i64(width)))
            accs = [_entry_slot(b, t) for _ in range(vectors)]
            for acc in accs:
                b.store(ir.Constant(t, None), acc)
            with for_range(b, depth, "k") as k:
                xk = b.load(b.gep(x, [b.mul(k, x_stride)], source_etype=ty), typ=ty)
                row = b.gep(mat, [b.add(b.mul(k, stride), i0)], source_etype=ty)
                splat = _splat(b, xk, vec) if width > 1 else xk
                for v, acc in enumerate(accs):
                    p = b.gep(row, [i64(v * step)], source_etype=ty)
                    value = b.load(p, typ=t, align=cfg.itemsize)
                    b.store(_mul_add_any(ctx, b, cfg, splat, value, b.load(acc)), acc)
            for v, acc in enumerate(accs):
                p = b.gep(y, [b.add(i0, i64(v * step))], source_etype=ty)
                b.store(b.load(acc), p, align=cfg.itemsize)
        b.store(b.add(done, b.mul(blocks, i64(width))), done_slot)


def _gemv_dot(ctx, b, cfg, count, depth, x, x_stride, mat, stride, y) -> None:
    ty = cfg.element
    vec = ir.VectorType(ty, cfg.lanes)
    width = cfg.lanes * GEMV_UNROLL
    chunks = b.udiv(depth, i64(width))
    done = b.mul(chunks, i64(width))
    with for_range(b, count, "out") as i:
        row = b.gep(mat, [b.mul(i, stride)], source_etype=ty)
        accs = [_entry_slot(b, vec) for _ in range(GEMV_UNROLL)]
        for acc in accs:
            b.store(ir.Constant(vec, None), acc)
        with for_range(b, chunks, "kc") as chunk:
            k0 = b.mul(chunk, i64(width))
            for v, acc in enumerate(accs):
                offset = b.add(k0, i64(v * cfg.lanes))
                xs = b.load(b.gep(x, [offset], source_etype=ty), typ=vec, align=cfg.itemsize)
                ms = b.load(b.gep(row, [offset], source_etype=ty), typ=vec, align=cfg.itemsize)
                b.store(_mul_add(ctx, b, cfg, xs, ms, b.load(acc)), acc)
        total = b.load(accs[0])
        for acc in accs[1:]:
            total = b.fadd(total, b.load(acc))
        scalar = _entry_slot(b, ty)
        b.store(_horizontal_sum(b, total), scalar)
        with for_range(b, b.sub(depth, done), "ktail") as t:
            k = b.add(done, t)
            xk = b.load(b.gep(x, [k], source_etype=ty), typ=ty)
            mk = b.load(b.gep(row, [k], source_etype=ty), typ=ty)
            b.store(b.fadd(b.load(scalar), b.fmul(xk, mk)), scalar)
        b.store(b.load(scalar), b.gep(y, [i], source_etype=ty))


def _horizontal_sum(b: ir.IRBuilder, vector: ir.Value) -> ir.Value:
    """Pairwise halving sum of a vector's lanes."""
    count = vector.type.count
    while count > 1:
        half = count // 2
        i32 = ir.IntType(32)
        low = b.shuffle_vector(
            vector, vector, ir.Constant(ir.VectorType(i32, half), list(range(half)))
        )
        high = b.shuffle_vector(
            vector, vector, ir.Constant(ir.VectorType(i32, half), list(range(half, count)))
        )
        vector = b.fadd(low, high)
        count = half
    return b.extract_element(vector, ir.Constant(ir.IntType(32), 0))


def _mul_add_any(ctx, b, cfg, x, y, acc) -> ir.Value:
    """`_mul_add` for vectors or scalars."""
    if isinstance(x.type, ir.VectorType):
        return _mul_add(ctx, b, cfg, x, y, acc)
    return b.fadd(b.fmul(x, y), acc)
