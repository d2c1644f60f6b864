"""The GEMM kernel on CUDA cores (SIMT): every thread a TM x TN register tile.

Each block computes a BM x BN tile of C with 256 threads (128 for the small tiling),
each thread a TM x TN register tile: per step, the block stages A and B tiles in
shared memory (gemm_tiles.TileLoader) as k-major rows of 32-bit words (64-bit for f64),
then every thread runs one rank-1 update of its registers per row of words.  What a
word holds and how it is multiplied is the contraction's `Arithmetic`:

- floats (`float_sums`): one k value, fma in f32 (f64 for f64 results), elements of
  any float type rounded to the result's first, as the element rule does;
- bytes (`byte_sums`: u8/s8 values, possibly widened by the operand's own convert, as
  the ONNX frontend writes quantized products): 4 consecutive k values of a row (or
  column) of the tile, one byte each, and dp4a sums the four products into an exact
  i32 in one instruction;
- other integers (`WORD_SUMS`): one k value as i32, multiply and add, wrapping as the
  element rule's integer sums do.

A step is BK words deep whatever a word holds (`staged_tiling`), so that the shared
memory and the arithmetic per barrier are the float kernel's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from llvmlite import ir

from ...ir import DType
from ..llvm import scalar
from ..llvm.lltypes import F64, I32, constant, i32, register_type
from ..llvm.loops import for_range
from .context import GpuContext
from .gemm_plan import Gemm
from .gemm_tiles import (
    depth_steps,
    needed_tile,
    operand_loaders,
    store_inside,
    stored_batch,
    tile_origin,
)

PAD = 4  # words added to each shared row: conflict-free staging stores
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


@dataclass(frozen=True)
class Arithmetic:
    """How the register tiles sum products: operand values converted to `operand` and
    staged `per_word` consecutive k to a shared word, each pair of words multiplied
    and added into an accumulator of `dtype` by madd(ctx, a word, b word, acc)."""

    name: str  # fma, i32, dp4a
    dtype: DType  # the accumulator's (a shared word is as wide)
    operand: DType  # one k value as staged
    per_word: int
    madd: Callable[[GpuContext, ir.Value, ir.Value, ir.Value], ir.Value]

    @property
    def acc(self) -> ir.Type:
        return register_type(self.dtype)

    @property
    def staged(self) -> ir.Type:
        return register_type(self.operand)

    @property
    def word(self) -> ir.Type:
        """A shared word as loaded: the staged value, or `per_word` of them as one
        integer."""
        return self.staged if self.per_word == 1 else ir.IntType(8 * self.dtype.itemsize)


def _fma(ctx: GpuContext, a: ir.Value, b: ir.Value, acc: ir.Value) -> ir.Value:
    name = f"llvm.fma.{'f64' if acc.type == F64 else 'f32'}"
    return ctx.builder.call(ctx.declare(name, acc.type, [a, b, acc], pure=True), [a, b, acc])


def _multiply_add(ctx: GpuContext, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
    b: ir.IRBuilder = ctx.builder
    assert b is not None
    return b.add(b.mul(x, y), acc)


def float_sums(result: DType) -> Arithmetic:
    """fma in f32, or f64 for f64 results, of operands rounded to the result's type."""
    return Arithmetic("fma", DType.F64 if result is DType.F64 else DType.F32, result, 1, _fma)


# integers of at most 32 bits, as i32: sums that wrap, as the element rule's
WORD_SUMS = Arithmetic("i32", DType.S32, DType.S32, 1, _multiply_add)


def byte_sums(signed: tuple[bool, bool]) -> Arithmetic:
    """dp4a of bytes, whose values are s8 or u8 as `signed` says of A's and B's: a
    staged byte is an operand value's low 8 bits, all of it for bytes widened exactly."""

    def madd(ctx: GpuContext, a: ir.Value, b: ir.Value, acc: ir.Value) -> ir.Value:
        return ctx.device.dot4(ctx, a, b, acc, signed)

    return Arithmetic("dp4a", DType.S32, DType.S8, 4, madd)


def staged_tiling(t: Tiling, arithmetic: Arithmetic) -> Tiling:
    """`t` with BK counted in k values: BK words, each `per_word` values deep."""
    return replace(t, bk=t.bk * arithmetic.per_word)


def emit_tiles(
    ctx: GpuContext,
    kernel,
    gemm: Gemm,
    t: Tiling,
    arithmetic: Arithmetic,
    in_dtype: DType,
    store,
    slices: int = 1,
) -> None:
    """The kernel's body: store(g, m, n, value) for each element of C, or with `slices`
    > 1 (split-K) for each partial sum (g: gemm_tiles.stored_batch); `t` as
    `staged_tiling` gives it, the operands' values of `in_dtype`."""
    b = ctx.builder
    assert b is not None
    words, left = divmod(t.bk, arithmetic.per_word)
    assert left == 0, "a step stages whole words"
    tid = ctx.device.thread_index(ctx)
    g, m0, n0, depth_slice = tile_origin(ctx, gemm, t.bm, t.bn, slices)
    needed = gemm.needed(ctx) if gemm.needed is not None else None
    needed_tile(ctx, needed, g, m0, n0)
    columns = t.bn // t.tn
    tx = b.urem(tid, i32(columns))
    ty = b.udiv(tid, i32(columns))
    width = arithmetic.dtype.itemsize
    a_row, b_row = t.bm + PAD, t.bn + PAD
    a_shared = kernel.shared(ctx, words * a_row * width)
    b_shared = kernel.shared(ctx, words * b_row * width)
    zero = constant(arithmetic.dtype, 0)
    acc = [[ctx.alloca(arithmetic.acc) for _ in range(t.tn)] for _ in range(t.tm)]
    for row in acc:
        for slot in row:
            b.store(zero, slot)
    convert = lambda value: scalar.convert(ctx, in_dtype, arithmetic.operand, value)
    a_tile, b_tile = operand_loaders(
        ctx, gemm, tid, t.threads, (t.bm, t.bn, t.bk), convert, arithmetic.staged
    )

    def fetch(k0: ir.Value) -> None:
        a_tile.fetch(g, m0, k0)
        b_tile.fetch(g, n0, k0)

    def stage() -> None:  # k-major: a thread's rows of one word of k are adjacent
        a_tile.stage(lambda m, k, v: b.store(v, _staged_at(b, a_shared, arithmetic, k, a_row, m)))
        b_tile.stage(lambda n, k, v: b.store(v, _staged_at(b, b_shared, arithmetic, k, b_row, n)))

    rows = [_owned(b, ty, i, t.tm, t.bm // t.tm) for i in range(t.tm)]
    cols = [_owned(b, tx, j, t.tn, columns) for j in range(t.tn)]
    k0, steps = depth_steps(ctx, gemm, t.bk, slices, depth_slice, needed)
    out_g = stored_batch(ctx, gemm, g, depth_slice, slices)
    fetch(k0)
    with for_range(b, steps, "kstep") as step:
        stage()
        ctx.device.barrier(ctx)
        next_step = b.add(b.trunc(step, I32), i32(1))
        fetch(b.add(k0, b.mul(next_step, i32(t.bk))))  # unused past the end
        for word in range(words):
            a_vals = _shared_run(b, a_shared, arithmetic.word, word, a_row, rows)
            b_vals = _shared_run(b, b_shared, arithmetic.word, word, b_row, cols)
            for i in range(t.tm):
                for j in range(t.tn):
                    slot = acc[i][j]
                    b.store(arithmetic.madd(ctx, a_vals[i], b_vals[j], b.load(slot)), slot)
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


def _staged_at(b: ir.IRBuilder, array, arithmetic: Arithmetic, k: ir.Value, width: int, col):
    """Where depth k of a tile's row (or column) `col` is staged: word k / per_word of
    the column in k-major rows of `width` words, value k % per_word within it (byte
    k % 4 of a dp4a word, paired with the same byte of the other operand's word)."""
    per = i32(arithmetic.per_word)
    word = b.add(b.mul(b.udiv(k, per), i32(width)), col)
    position = b.add(b.mul(word, per), b.urem(k, per))
    return b.gep(array, [position], source_etype=arithmetic.staged)


def _shared_at(b: ir.IRBuilder, array, ty: ir.Type, row: ir.Value, width: int, col: ir.Value):
    position = b.add(b.mul(row, i32(width)), col)
    return b.gep(array, [position], source_etype=ty)
