"""Integer products on AMX tiles: 8-bit operands, one of them constant, into s32 sums.

Where the target has AMX-INT8 (`GemmConfig.tiles`), a product of 8-bit A (m, k) by
8-bit B (k, n), one of them a constant (a dot's weights, a convolution's kernel), runs
on the tile unit: one tdpb[su][su]d multiplies a 16 x 64 byte tile of A by a 16 x 16
tile of B's quads (64 k of 16 columns) into a 16 x 16 s32 tile of C, 16,384
multiply-adds, where vpdpbusd does 64.  The four sign forms of the instruction take u8
and s8 on either side, so no operand is shifted, and the sums are the exact s32 ones.

- A constant B (dots) is pre-packed at compile time (prepack.py) into strips of STRIP
  columns, each k step of 64 values the strip's two tiles one after the other
  (`AmxLayout`); zero past n and k.  A is then copied per call into the workspace,
  rows of k padded to 64 bytes with zeros and rows padded to BLOCK_ROWS (`_pack_a`).
- A constant A (im2col convolutions) is pre-packed as those padded rows; B's columns
  are then packed per strip into the thread's region by its quad panels (quads.py):
  two panels of 16 columns, each k quad by k quad.
- `_strips_function` computes strips of C, block of BLOCK_ROWS rows by block, in
  the four C tiles (tmm0..3), A's two tiles in tmm4..5 and B's in tmm6..7.  Whole
  blocks are stored into C, the edges through a block on the stack.  Runs of strips
  are shared out to the threads, each runs the epilogue on its run.

Tiles are per thread and caller-saved, so a strip's tile work stays in one function
that calls nothing.  Linux grants a process the tile state on request
(arch_prctl(ARCH_REQ_XCOMP_PERM)): NAME_run asks once (`_permit_function`) and returns
2 on a refusal, and the host target lists AMX only where this machine's kernel grants
it (target.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from ...buffers import Blob, Slice
from ...ir import DType
from ..llvm.context import EmitContext
from ..llvm.lltypes import I1, I8, I32, I64, PTR, VOID, i64
from ..llvm.loops import entry_alloca, for_range, if_then, loop_nest
from .blocking import aligned
from .gemm import GemmPlan
from .gemm_config import GemmConfig
from .gemm_split import MAX_PARTS, MIN_PARALLEL_WORK, share_out
from .panels import Panels, StridedPanels
from .prepackable import PackedShape, Prepackable, StridedLayout, constant_elements, is_constant
from .quads import quads_of
from .shared_functions import shared_function
from .target import ARCH_REQ_XCOMP_PERM, SYS_ARCH_PRCTL, XFEATURE_XTILEDATA
from .vectors import smaller

TILE_ROWS = 16
TILE_BYTES = 64  # a tile row: 64 bytes of A along k, or B's quads of 16 columns
K_STEP = TILE_BYTES  # the k values one tile product takes
BLOCK_ROWS = 2 * TILE_ROWS  # rows of C per block: A's two tiles
STRIP = 2 * TILE_ROWS  # columns of C per strip: B's two tiles
C_TILES, A_TILES, B_TILES = (0, 1, 2, 3), (4, 5), (6, 7)
MIN_EPILOGUE_STRIPS, MAX_EPILOGUE_STRIPS = 2, 8  # see `AmxPlan.strips_per_unit`
# K values below which a block's four tile stores (64 lines of C) and its strip's packing
# cost more than the tiles save: ResNet-50's int8 convolutions of K 64..147 ran 0.71-0.93x
# the byte quads' speed on tiles, those of K 256 and more 0.91-2.67x (most above 1.4)
MIN_TILED_DEPTH = 256

# (A's type, B's type) -> the tile product taking them (A is the instruction's first
# source, whose rows are C's)
TILE_PRODUCTS = {
    (DType.U8, DType.S8): "tdpbusd",
    (DType.S8, DType.U8): "tdpbsud",
    (DType.S8, DType.S8): "tdpbssd",
    (DType.U8, DType.U8): "tdpbuud",
}


@dataclass(frozen=True)
class AmxLayout:
    """Where the pre-packed copy of a constant (n, k) B puts its values: strip s,
    k step t, tile j (columns s * STRIP + j * 16 ..) at (s * steps + t) * 2 tiles + j,
    a tile being 16 rows of quads (k = 4 q .. 4 q + 3) by 16 columns."""

    n: int
    k: int

    @property
    def steps(self) -> int:
        return -(-self.k // K_STEP)

    @property
    def strips(self) -> int:
        return -(-self.n // STRIP)

    @property
    def strip_bytes(self) -> int:
        return self.steps * K_STEP * STRIP

    def pack(self, matrix: np.ndarray) -> bytes:
        """The copy of `matrix` (k, n) of 8-bit values."""
        padded = np.zeros((self.steps * K_STEP, self.strips * STRIP), matrix.dtype)
        padded[: self.k, : self.n] = matrix
        # (step, quad row, byte, strip, tile, column) -> (strip, step, tile, row, column, byte)
        parts = padded.reshape(self.steps, TILE_ROWS, 4, self.strips, 2, TILE_ROWS)
        return np.ascontiguousarray(parts.transpose(3, 0, 4, 1, 5, 2)).tobytes()


@dataclass
class AmxPlan(Prepackable):
    """A contraction of 8-bit A (m, k) by 8-bit B (k, n), batched, on AMX tiles; one
    operand is a constant, pre-packed: B (`constant` 1: a dot by weights), its strips
    read in place, A copied per call; or A (0: a convolution's kernel, im2col), its
    rows read in place, B's columns packed per strip by its quad panels (quads.py)."""

    config: GemmConfig
    types: tuple[DType, DType]  # A's and B's 8-bit types
    # the operands' factories (A's raw values, or B's quad panels), batch and placement
    gemm: GemmPlan
    constant: int
    layouts: tuple[StridedLayout | None, StridedLayout | None]
    packed: tuple[Slice | None, Slice | None] = (None, None)
    operands: tuple[int, int] = (0, 1)

    kind = "amx"

    @property
    def m(self) -> int:
        return self.gemm.m

    @property
    def n(self) -> int:
        return self.gemm.n

    @property
    def k(self) -> int:
        return self.gemm.paired_k

    @property
    def layout(self) -> AmxLayout:
        return AmxLayout(self.n, self.k)

    @property
    def a_rows(self) -> int:
        return -(-self.m // BLOCK_ROWS) * BLOCK_ROWS

    @property
    def a_stride(self) -> int:
        return self.layout.steps * K_STEP

    @property
    def parts(self) -> int:
        return 1 if self.m * self.n * self.k < MIN_PARALLEL_WORK else MAX_PARTS

    @property
    def panel_bytes(self) -> int:
        """A packed panel of B: its 16 columns' quads, k quad by k quad."""
        return quads_of(self.k) * TILE_BYTES

    @property
    def region_bytes(self) -> int:
        """A thread's packed strip of B, and the at most 15 quad rows that the last k
        step reads past it (their products are by A's zero padding)."""
        return aligned(2 * self.panel_bytes + TILE_ROWS * TILE_BYTES)

    @property
    def workspace_bytes(self) -> int:
        if self.constant == 1:
            return aligned(self.a_rows * self.a_stride)
        return self.parts * self.region_bytes

    def can_pack(self, side: int) -> bool:
        return side == self.constant and is_constant(self.layouts[side])

    def source(self, side: int) -> DType:
        return self.types[side]

    def packed_shape(self, side: int) -> PackedShape:
        steps = self.layout.steps * K_STEP
        if side == 1:
            return PackedShape(self.n, steps, steps, STRIP, (), (), "amx")
        return PackedShape(self.m, steps, steps, BLOCK_ROWS, (), (), "amx.rows")

    def pack_constant(self, side: int, values: np.ndarray) -> np.ndarray:
        layout = self.constant_layout(side)
        count = self.n if side == 1 else self.m
        rows = np.arange(count)[None, :] * layout.p_stride
        depth = np.arange(self.k)[:, None] * layout.k_stride
        matrix = values[rows + depth]  # (k, count)
        if side == 1:
            return np.frombuffer(self.layout.pack(matrix), np.uint8)
        padded = np.zeros((self.a_rows, self.a_stride), matrix.dtype)
        padded[: self.m, : self.k] = matrix.T
        return padded.view(np.uint8).ravel()

    def pack_weights(self, side: int, weights: Blob) -> bytes:
        where = self.constant_layout(side).where
        values = constant_elements(weights, where, self.source(side).numpy)
        return self.pack_constant(side, values).tobytes()

    def emit(self, ctx, sources: list, c: Slice, workspace: Slice, epilogue):
        where = self.packed[self.constant]
        assert where is not None, "an AMX contraction's constant is read pre-packed"
        _permit_function(ctx)  # NAME_run asks for the tiles before any kernel runs
        with loop_nest(ctx.builder, self.gemm.batch, "batch") as index:
            if self.constant == 1:
                self._emit_by_b(ctx, sources, c, workspace, epilogue, where, index)
            else:
                self._emit_by_a(ctx, sources, c, workspace, epilogue, where, index)

    def _emit_by_b(self, ctx, sources, c, workspace, epilogue, where, index) -> None:
        """A copied into the workspace, then runs of B's pre-packed strips in parallel."""
        lay = self.layout
        a, _, _, _ = self.gemm.batch_operands(ctx, sources, c, None, index)
        self._pack_a(ctx, a, ctx.slice_pointer(workspace))
        per = self.strips_per_unit()
        batches = len(index)

        def unit(position, slot, passed):
            b = ctx.builder
            batch = passed[:batches]
            _, _, c_batch, region = self.gemm.batch_operands(ctx, sources, c, epilogue, batch)
            first = b.mul(position[0], i64(per))
            n0 = b.mul(first, i64(STRIP))
            strips_b = b.gep(
                ctx.slice_pointer(where), [b.mul(first, i64(lay.strip_bytes))], source_etype=I8
            )
            count = smaller(b, i64(per), b.sub(i64(lay.strips), first))
            b_steps = (
                i64(lay.strip_bytes),
                i64(2 * TILE_BYTES * TILE_ROWS),
                i64(TILE_BYTES * TILE_ROWS),
            )
            a_rows = ctx.slice_pointer(workspace)
            self._strips(ctx, count, a_rows, strips_b, b_steps, c_batch, n0, per * STRIP)
            if region is not None:
                region(i64(0), self.m, n0, self._columns(b, n0, per * STRIP))

        units = -(-lay.strips // per)
        share_out(ctx, (units,), min(self.parts, units), unit, list(index))

    def _emit_by_a(self, ctx, sources, c, workspace, epilogue, where, index) -> None:
        """Runs of strips in parallel, each strip's B packed into the thread's region
        (two panels of 16 columns) then multiplied by A's pre-packed rows."""
        lay = self.layout
        per = self.strips_per_unit()
        batches = len(index)
        kq = quads_of(self.k)

        def unit(position, slot, passed):
            b = ctx.builder
            batch = passed[:batches]
            _, b_operand, c_batch, region = self.gemm.batch_operands(
                ctx, sources, c, epilogue, batch
            )
            offset = b.mul(slot, i64(self.region_bytes))
            own = b.gep(ctx.slice_pointer(workspace), [offset], source_etype=I8)
            first = b.mul(position[0], i64(per))
            count = smaller(b, i64(per), b.sub(i64(lay.strips), first))
            a_rows = ctx.slice_pointer(where)
            b_steps = (i64(0), i64(TILE_ROWS * TILE_BYTES), i64(self.panel_bytes))
            with for_range(b, count, "strip") as j:
                n0 = b.mul(b.add(first, j), i64(STRIP))
                cols = self._columns(b, n0, STRIP)
                b_operand.pack(ctx, self.gemm.blocks, own, n0, cols, i64(0), i64(kq), TILE_ROWS)
                self._strips(ctx, i64(1), a_rows, own, b_steps, c_batch, n0, STRIP)
            if region is not None:
                n0 = b.mul(first, i64(STRIP))
                region(i64(0), self.m, n0, self._columns(b, n0, per * STRIP))

        units = -(-lay.strips // per)
        share_out(ctx, (units,), min(self.parts, units), unit, list(index))

    def _columns(self, b: ir.IRBuilder, n0, width: int) -> ir.Value:
        """The columns of C from n0 on, at most `width`."""
        return smaller(b, i64(width), b.sub(i64(self.n), n0))

    def _strips(self, ctx, count, a_rows, strips_b, b_steps, c_batch, n0, width: int) -> None:
        """`count` strips of C from column n0 (at most `width` columns) by the tiles."""
        b = ctx.builder
        strip_bytes, b_step, b_tile = b_steps
        args = [
            count,
            i64(self.a_rows // BLOCK_ROWS),
            i64(self.layout.steps),
            a_rows,
            i64(self.a_stride),
            strips_b,
            strip_bytes,
            b_step,
            b_tile,
            b.gep(c_batch, [n0], source_etype=I32),
            i64(self.n),
            i64(self.m),
            self._columns(b, n0, width),
        ]
        b.call(_strips_function(ctx, self.types), args)

    def strips_per_unit(self) -> int:
        """Strips a unit of work computes before its epilogue: enough columns for the
        epilogue's loop to run in whole vectors (a strip's 32 left a GELU's erf to
        the scalar remainder loop: 0.5 ms of a 128 x 3072 layer), few enough for C's
        block to stay in cache and for `parts` units."""
        per = -(-self.layout.strips // self.parts)
        return max(MIN_EPILOGUE_STRIPS, min(MAX_EPILOGUE_STRIPS, per))

    def _pack_a(self, ctx: EmitContext, a, dst: ir.Value) -> None:
        """A's rows into `dst`, a_stride bytes apart, zero past m and k."""
        b = ctx.builder
        assert b is not None
        size = i64(self.a_rows * self.a_stride)
        args = [dst, ir.Constant(I8, 0), size, ir.Constant(I1, 0)]
        b.call(ctx.declare("llvm.memset.p0.i64", VOID, args), args)
        if isinstance(a, StridedPanels) and a.k_stride == 1:
            args = [a.base, i64(a.p_stride), i64(self.m), i64(self.k), dst, i64(self.a_stride)]
            b.call(_copy_rows_function(ctx), args)
            return
        with for_range(b, self.m, "arow") as p:
            row = b.gep(dst, [b.mul(p, i64(self.a_stride))], source_etype=I8)
            with for_range(b, self.k, "ak", vectorize=True) as k:
                b.store(b.trunc(_a_value(ctx, a, p, k), I8), b.gep(row, [k], source_etype=I8))


def _a_value(ctx: EmitContext, a, p, k) -> ir.Value:
    """A's (p, k) value as an integer (read in memory, or computed)."""
    b = ctx.builder
    assert b is not None
    if isinstance(a, StridedPanels):
        offset = b.add(b.mul(p, i64(a.p_stride)), b.mul(k, i64(a.k_stride)))
        return b.load(b.gep(a.base, [offset], source_etype=I8), typ=I8)
    return a.element(p, k)


def tiled(gemm: GemmPlan, types: tuple[DType, DType]) -> AmxPlan | None:
    """The AMX plan of an integer GEMM plan of 8-bit operands whose A or B is a
    constant read as a plain view (its factories: A's raw values, B's quad panels), or
    None where this form does not take it: no AMX-INT8, too shallow a K, or the
    constant differs along the batch."""
    if not gemm.config.tiles or types not in TILE_PRODUCTS or gemm.paired_k < MIN_TILED_DEPTH:
        return None
    for side in (1, 0):
        layout = gemm.layouts[side]
        shared = layout is not None and all(
            stride == 0 or gemm.batch[d] == 1 for d, stride in layout.batch
        )
        if is_constant(layout) and shared:
            layouts = (None, layout) if side == 1 else (layout, None)
            # the constant is read from its copy (prepack.py asks this plan, not the GEMM)
            plain = replace(gemm, layouts=(None, None))
            plain = replace(plain, b=_unused) if side == 1 else replace(plain, a=_unused)
            return AmxPlan(gemm.config, types, plain, side, layouts, operands=gemm.operands)
    return None


class _PrePacked:
    """The GEMM's operand that the tiles read pre-packed: never packed by the GEMM."""

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        raise AssertionError("an AMX plan reads its constant from the pre-packed copy")


def _unused(ctx, sources, index) -> Panels:
    return _PrePacked()


# -- kernels ------------------------------------------------------------------------


def _tile_call(ctx: EmitContext, b: ir.IRBuilder, name: str, *args) -> None:
    """Tile instruction `name` (llvm.x86's); int arguments are tile numbers."""
    values = [ir.Constant(I8, a) if isinstance(a, int) else a for a in args]
    b.call(ctx.declare(f"llvm.x86.{name}", VOID, values), values)


def _tile_config(ctx: EmitContext) -> ir.GlobalVariable:
    """The tile configuration (palette 1): the eight tiles 16 rows of 64 bytes."""
    name = f"{ctx.prefix}.amx.config"
    existing = ctx.module.globals.get(name)
    if existing is not None:
        return existing
    config = bytearray(64)
    config[0] = 1  # palette
    for tile in range(8):
        config[16 + 2 * tile : 18 + 2 * tile] = TILE_BYTES.to_bytes(2, "little")
        config[48 + tile] = TILE_ROWS
    ty = ir.ArrayType(I8, 64)
    variable = ir.GlobalVariable(ctx.module, ty, name)
    variable.global_constant = True
    variable.linkage = "internal"
    variable.align = 64
    variable.initializer = ir.Constant(ty, bytearray(config))
    return variable


def _strips_function(ctx: EmitContext, types: tuple[DType, DType]) -> ir.Function:
    """`strips(count, blocks, steps, a, lda, b, strip_bytes, b_step, b_tile, c, ldc, rows,
    cols)`: C[:rows, :cols] = A x `count` strips of B from `b` (strip_bytes apart; a
    strip's k step `b_step` bytes after the last, its second tile `b_tile` after its
    first), for A's `blocks` blocks of BLOCK_ROWS rows (lda bytes apart, `steps` k
    steps of 64 bytes).  The tile configuration is loaded once per call."""
    tag = f"{types[0].text}{types[1].text}"
    name = f"{ctx.prefix}.amx.strips.{tag}"
    args = [I64, I64, I64, PTR, I64, PTR, I64, I64, I64, PTR, I64, I64, I64]
    function, b = shared_function(ctx, name, args)
    if b is None:
        return function
    count, blocks, steps, a, lda, b_ptr, strip_bytes = function.args[:7]
    b_step, b_tile, c, ldc, rows, cols = function.args[7:]
    edge = entry_alloca(b, ir.ArrayType(I32, BLOCK_ROWS * STRIP), "edge")
    product = TILE_PRODUCTS[types]
    _tile_call(ctx, b, "ldtilecfg", _tile_config(ctx))
    c_bytes = b.mul(ldc, i64(4))
    with for_range(b, count, "strip") as strip:
        strip_b = b.gep(b_ptr, [b.mul(strip, strip_bytes)], source_etype=I8)
        n0 = b.mul(strip, i64(STRIP))
        strip_c = b.gep(c, [n0], source_etype=I32)
        strip_cols = smaller(b, i64(STRIP), b.sub(cols, n0))
        with for_range(b, blocks, "block") as block:
            m0 = b.mul(block, i64(BLOCK_ROWS))
            for tile in C_TILES:
                _tile_call(ctx, b, "tilezero", tile)
            a_block = b.gep(a, [b.mul(m0, lda)], source_etype=I8)
            a_lower = b.gep(a_block, [b.mul(lda, i64(TILE_ROWS))], source_etype=I8)
            with for_range(b, steps, "step") as step:
                a_at = b.mul(step, i64(K_STEP))
                for tile, base in zip(A_TILES, (a_block, a_lower)):
                    _tile_call(
                        ctx, b, "tileloadd64", tile, b.gep(base, [a_at], source_etype=I8), lda
                    )
                b_at = b.mul(step, b_step)
                for j, tile in enumerate(B_TILES):
                    at = b_at if j == 0 else b.add(b_at, b_tile)
                    b_tile_at = b.gep(strip_b, [at], source_etype=I8)
                    _tile_call(ctx, b, "tileloadd64", tile, b_tile_at, i64(TILE_BYTES))
                for i, a_tile in enumerate(A_TILES):
                    for j, b_tile in enumerate(B_TILES):
                        _tile_call(ctx, b, product, C_TILES[2 * i + j], a_tile, b_tile)
            whole = b.and_(
                b.icmp_unsigned("<=", b.add(m0, i64(BLOCK_ROWS)), rows),
                b.icmp_unsigned("==", strip_cols, i64(STRIP)),
            )
            with b.if_else(whole) as (then, otherwise):
                with then:
                    c_block = b.gep(strip_c, [b.mul(m0, ldc)], source_etype=I32)
                    _store_tiles(ctx, b, c_block, ldc, c_bytes)
                with otherwise:
                    _store_tiles(ctx, b, edge, i64(STRIP), i64(4 * STRIP))
                    edge_rows = smaller(b, i64(BLOCK_ROWS), b.sub(rows, m0))
                    with for_range(b, edge_rows, "er") as i:
                        source = b.gep(edge, [b.mul(i, i64(STRIP))], source_etype=I32)
                        target = b.gep(strip_c, [b.mul(b.add(m0, i), ldc)], source_etype=I32)
                        with for_range(b, strip_cols, "ec") as j:
                            value = b.load(b.gep(source, [j], source_etype=I32), typ=I32)
                            b.store(value, b.gep(target, [j], source_etype=I32))
    _tile_call(ctx, b, "tilerelease")
    b.ret_void()
    return function


def _store_tiles(ctx: EmitContext, b: ir.IRBuilder, c_block, ldc, c_bytes) -> None:
    """The four C tiles into the BLOCK_ROWS x STRIP block at `c_block` (ldc apart)."""
    for i in range(2):
        for j in range(2):
            offset = b.add(b.mul(i64(i * TILE_ROWS), ldc), i64(j * TILE_ROWS))
            at = b.gep(c_block, [offset], source_etype=I32)
            _tile_call(ctx, b, "tilestored64", C_TILES[2 * i + j], at, c_bytes)


def _copy_rows_function(ctx: EmitContext) -> ir.Function:
    """`copy(src, p_stride, rows, k, dst, ld)`: rows of k contiguous bytes (p_stride
    apart) to `dst` (ld apart), 64 bytes per vector."""
    name = f"{ctx.prefix}.amx.rows"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64, PTR, I64])
    if b is None:
        return function
    src, p_stride, rows, k, dst, ld = function.args
    vec = ir.VectorType(I8, TILE_BYTES)
    lanes = ir.Constant(ir.VectorType(I64, TILE_BYTES), list(range(TILE_BYTES)))
    load_args = [src, ir.Constant(I32, 1), ir.Constant(ir.VectorType(I1, TILE_BYTES), None)]
    load_args.append(ir.Constant(vec, None))
    masked_load = ctx.declare(f"llvm.masked.load.v{TILE_BYTES}i8.p0", vec, load_args)
    with for_range(b, rows, "row") as row:
        source = b.gep(src, [b.mul(row, p_stride)], source_etype=I8)
        target = b.gep(dst, [b.mul(row, ld)], source_etype=I8)
        with for_range(b, b.udiv(b.add(k, i64(TILE_BYTES - 1)), i64(TILE_BYTES)), "chunk") as chunk:
            first = b.mul(chunk, i64(TILE_BYTES))
            left = b.sub(k, first)
            splat = b.shuffle_vector(
                b.insert_element(ir.Constant(ir.VectorType(I64, TILE_BYTES), None), left, i64(0)),
                ir.Constant(ir.VectorType(I64, TILE_BYTES), None),
                ir.Constant(ir.VectorType(I32, TILE_BYTES), [0] * TILE_BYTES),
            )
            mask = b.icmp_unsigned("<", lanes, splat)
            at = b.gep(source, [first], source_etype=I8)
            values = b.call(masked_load, [at, ir.Constant(I32, 1), mask, ir.Constant(vec, None)])
            b.store(values, b.gep(target, [first], source_etype=I8), align=1)
    b.ret_void()
    return function


PERMIT_FUNCTION = "aotc.amx.permit"


def _permit_function(ctx: EmitContext) -> ir.Function:
    """`int permit()`: ask Linux for the tile data state once per process; 0 where it
    is granted.  NAME_run calls it before any kernel where the module has it, and
    returns 2 on a refusal (a kernel before 5.16, or one that forbids it), since a tile
    instruction would fault (program.py's `_checked_call`)."""
    existing = ctx.module.globals.get(PERMIT_FUNCTION)
    if existing is not None:
        return existing
    function = ir.Function(ctx.module, ir.FunctionType(I32, []), PERMIT_FUNCTION)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    b = ir.IRBuilder(function.append_basic_block("entry"))
    flag = ir.GlobalVariable(ctx.module, I32, "aotc.amx.granted")
    flag.linkage = "internal"
    flag.initializer = ir.Constant(I32, 0)
    granted = b.load(flag, align=4)  # a plain load: a repeated request is harmless
    with if_then(b, b.icmp_unsigned("!=", granted, ir.Constant(I32, 0))):
        b.ret(ir.Constant(I32, 0))
    syscall = ctx.module.globals.get("syscall")
    if syscall is None:
        syscall = ir.Function(ctx.module, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
    args = [i64(SYS_ARCH_PRCTL), i64(ARCH_REQ_XCOMP_PERM), i64(XFEATURE_XTILEDATA)]
    refused = b.icmp_signed("!=", b.call(syscall, args), i64(0))
    with if_then(b, refused):
        b.ret(ir.Constant(I32, 1))
    b.store(ir.Constant(I32, 1), flag, align=4)
    b.ret(ir.Constant(I32, 0))
    return function
