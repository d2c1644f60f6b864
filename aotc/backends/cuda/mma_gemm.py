"""The GEMM kernel on tensor cores: warps of mma.sync m16n8k16 (f16, bf16) or m16n8k8
(TF32, only when the target asks: `cuda:sm_90+tf32`), accumulating in f32.

A block of 8 warps (4 for the small tiling) computes a BM x BN tile of C, each warp a
(16 FM) x (8 FN) part of it as FM x FN mma tiles.  Per step of BK the block stages A
(BM x BK) and B (BN x BK) in shared memory, k fastest within a row, in the operand type
(f16/bf16 bits, or f32 rounded to TF32); rows are padded by 4 words so that the
fragment loads below hit 32 different banks.

Fragments, as PTX's mma.sync defines them for lane = 4 g + t (g in 0..8, t in 0..4),
in 32-bit words of `P` elements each (P = 2 for 16-bit types, 1 for TF32), one mma
covering 8 words of depth:

    A (16 x 8 words), register r in 0..4:  row g + 8 (r % 2),  word t + 4 (r // 2)
    B (8 words x 8),  register r in 0..2:  column g,           word t + 4 r
    C (16 x 8 f32),   register c in 0..4:  row g + 8 (c // 2), column 2 t + c % 2

so every register is one 32-bit shared load.  The device computes the mma
(`Device.mma`: the NVVM intrinsic, or an emulation of these semantics in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...ir import DType, Instruction
from ..llvm.lltypes import F32, I32, i32, storage_type, to_storage
from ..llvm.loops import for_range
from .context import GpuContext
from .device import WARP
from .gemm_plan import Gemm
from .gemm_tiles import (
    depth_steps,
    needed_tile,
    operand_loaders,
    store_inside,
    stored_batch,
    tile_origin,
)

WORD_PAD = 4  # words added to each shared row: conflict-free fragment loads
MMA_WORDS = 8  # depth of one mma, in 32-bit words


@dataclass(frozen=True)
class MmaKind:
    """An mma.sync variant: operands of `dtype` (`per_word` to a 32-bit register)."""

    name: str  # f16, bf16, tf32 (what Device.mma is asked for)
    dtype: DType  # the operands' element type
    per_word: int  # one mma is 8 words deep: k = 16 for the 16-bit types, 8 for TF32


F16_MMA = MmaKind("f16", DType.F16, 2)
BF16_MMA = MmaKind("bf16", DType.BF16, 2)
TF32_MMA = MmaKind("tf32", DType.F32, 1)
HALF_KINDS = {DType.F16: F16_MMA, DType.BF16: BF16_MMA}
MMA_RESULTS = frozenset({DType.F32, DType.F16, DType.BF16})


@dataclass(frozen=True)
class WarpTiling:
    bm: int
    bn: int
    warps_m: int
    warps_n: int

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n

    @property
    def fm(self) -> int:
        """mma tiles of 16 rows per warp."""
        return self.bm // self.warps_m // 16

    @property
    def fn(self) -> int:
        """mma tiles of 8 columns per warp."""
        return self.bn // self.warps_n // 8


LARGE = WarpTiling(128, 128, 2, 4)  # a warp computes 64 x 32 (16 mma per step)
SMALL = WarpTiling(64, 64, 2, 2)  # 32 x 32
STEP_WORDS = 2 * MMA_WORDS  # BK, in words: two mma deep per staged tile


def mma_kind(contraction: Instruction, target) -> MmaKind | None:
    """The tensor-core variant computing `contraction`, or None for the SIMT kernel."""
    lhs = contraction.operands[0].array_shape.dtype  # the IR gives both operands one dtype
    if contraction.array_shape.dtype not in MMA_RESULTS:
        return None
    if lhs in HALF_KINDS:
        return HALF_KINDS[lhs]
    if lhs is DType.F32 and target.tf32:
        return TF32_MMA
    return None


def step_depth(kind: MmaKind) -> int:
    """BK: the depth of C staged per step, in elements."""
    return STEP_WORDS * kind.per_word


def emit_tiles(
    ctx: GpuContext, kernel, gemm: Gemm, t: WarpTiling, kind: MmaKind, store, slices: int = 1
) -> None:
    """The kernel's body: store(g, m, n, value) for each element of C, or with `slices`
    > 1 (split-K) for each partial sum (g: gemm_tiles.stored_batch)."""
    b = ctx.builder
    assert b is not None
    tid = ctx.device.thread_index(ctx)
    g, m0, n0, depth_slice = tile_origin(ctx, gemm, t.bm, t.bn, slices)
    needed = gemm.needed(ctx) if gemm.needed is not None else None
    needed_tile(ctx, needed, g, m0, n0)
    warp, lane = b.udiv(tid, i32(WARP)), b.urem(tid, i32(WARP))
    warp_m0 = b.mul(b.udiv(warp, i32(t.warps_n)), i32(16 * t.fm))
    warp_n0 = b.mul(b.urem(warp, i32(t.warps_n)), i32(8 * t.fn))
    group, thread = b.udiv(lane, i32(4)), b.urem(lane, i32(4))
    bk = step_depth(kind)
    row_words = STEP_WORDS + WORD_PAD
    element = storage_type(kind.dtype) if kind.per_word == 2 else I32
    a_shared = kernel.shared(ctx, t.bm * row_words * 4)
    b_shared = kernel.shared(ctx, t.bn * row_words * 4)
    a_tile, b_tile = operand_loaders(
        ctx, gemm, tid, t.threads, (t.bm, t.bn, bk), _operand(ctx, kind), element
    )
    acc = [[[ctx.alloca(F32) for _ in range(4)] for _ in range(t.fn)] for _ in range(t.fm)]
    for slot in (s for row in acc for tile in row for s in tile):
        b.store(ir.Constant(F32, 0.0), slot)

    def fetch(k0: ir.Value) -> None:
        a_tile.fetch(g, m0, k0)
        b_tile.fetch(g, n0, k0)

    def put(array):
        def at(row, k, value):
            position = b.add(b.mul(row, i32(row_words * kind.per_word)), k)
            b.store(value, b.gep(array, [position], source_etype=element))

        return at

    def word(array, row: ir.Value, column: int) -> ir.Value:
        position = b.add(b.mul(row, i32(row_words)), b.add(thread, i32(column)))
        return b.load(b.gep(array, [position], source_etype=I32), typ=I32)

    k0, steps = depth_steps(ctx, gemm, bk, slices, depth_slice, needed)
    out_g = stored_batch(ctx, gemm, g, depth_slice, slices)
    fetch(k0)
    with for_range(b, steps, "kstep") as step:
        a_tile.stage(put(a_shared))
        b_tile.stage(put(b_shared))
        ctx.device.barrier(ctx)
        next_step = b.add(b.trunc(step, I32), i32(1))
        fetch(b.add(k0, b.mul(next_step, i32(bk))))  # unused past the end
        for s in range(0, STEP_WORDS, MMA_WORDS):
            a_frags = []
            for i in range(t.fm):
                top = b.add(warp_m0, b.add(group, i32(16 * i)))
                bottom = b.add(top, i32(8))
                a_frags.append(
                    [
                        word(a_shared, top, s),
                        word(a_shared, bottom, s),
                        word(a_shared, top, s + 4),
                        word(a_shared, bottom, s + 4),
                    ]
                )
            for j in range(t.fn):
                column = b.add(warp_n0, b.add(group, i32(8 * j)))
                b_frag = [word(b_shared, column, s), word(b_shared, column, s + 4)]
                for i in range(t.fm):
                    slots = acc[i][j]
                    c = [b.load(slot) for slot in slots]
                    for slot, value in zip(
                        slots, ctx.device.mma(ctx, kind.name, a_frags[i], b_frag, c)
                    ):
                        b.store(value, slot)
        ctx.device.barrier(ctx)
    pair = b.mul(thread, i32(2))
    for i in range(t.fm):
        for j in range(t.fn):
            for c, slot in enumerate(acc[i][j]):
                m = b.add(m0, b.add(warp_m0, b.add(group, i32(16 * i + 8 * (c // 2)))))
                n = b.add(n0, b.add(warp_n0, b.add(pair, i32(8 * j + c % 2))))
                value = lambda g_, m_, n_, slot=slot: store(g_, m_, n_, b.load(slot))
                store_inside(ctx, gemm, (t.bm, t.bn), out_g, m, n, value)


def _operand(ctx: GpuContext, kind: MmaKind):
    """An operand's value (f32 registers) -> its bits in shared memory."""
    if kind.per_word == 2:
        return lambda value: to_storage(ctx.builder, kind.dtype, value)
    return lambda value: ctx.device.to_tf32(ctx, value)
