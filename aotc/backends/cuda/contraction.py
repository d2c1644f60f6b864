"""Dot and convolution as tiled shared-memory GEMM kernels, with fused epilogues.

A kernel computes C[g, m, n] = sum_k A[g, m, k] * B[g, k, n] for a contraction seen
as batched GEMMs (`Gemm`): a dot's batch dims, free dims and contracting dims; a
convolution as an implicit GEMM per feature group (weights [Cout_g, Cin_g * taps]
times image columns [Cin_g * taps, pixels], the columns read straight from the
image, padding and dilation holes as zeros).  Operands are read through their element
generators, so producers fused into the contraction (transposes, converts, scaled
weights) need no buffers.

Each block computes a BM x BN tile of C with 256 threads, each a TM x TN register
tile: per step of BK, the block stages A and B tiles in shared memory (loads mapped so
that consecutive threads read along the operand's innermost dim in memory, to
coalesce), then every thread runs BK rank-1 updates on its registers with fma.  The
next step's global loads are issued before the current step's arithmetic (register
prefetch), which hides their latency.  Finished elements go through the fusion's
epilogue (bias, residual, activation) with the contraction's value from the
registers, then to memory.

Taken for float results (f16/bf16 accumulate in f32) when the GEMM is big enough;
a fusion qualifies when its root reads the contraction at its own output index
(index maps, see aotc/ir/index_maps.py).  Others run one thread per output element.
TF32 and f16/bf16 tensor cores (mma) are not used yet.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from ...ir import DType, Instruction, Op, Shape
from ...ir.index_maps import computation_maps, identity
from ..cpu import scalar
from ..cpu.elemental import Gen, bind_instructions
from ..cpu.lltypes import F64, I32, I64, register_type, round_to
from ..cpu.loops import for_range, if_then
from ..cpu.window import all_of, tap_position
from .context import GpuContext
from .elementwise import split_position, store_outputs
from .kernel import begin_kernel, finish_kernel, operand_generators

FLOAT_RESULTS = frozenset({DType.F32, DType.F16, DType.BF16, DType.F64})
# below this many multiply-adds a thread per output element is as good
MIN_WORK = 1 << 18
MIN_DEPTH = 8
MIN_SIDE = 16
PAD = 4  # floats added to each shared row: conflict-free staging stores
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
# enough blocks of the large tiling to fill a big GPU twice (132 SMs on an H100)
LARGE_BLOCKS = 264

# (ctx, batch, row, col) -> element; batch/row/col are i32 values
Element = Callable[[GpuContext, ir.Value, ir.Value, ir.Value], ir.Value]


@dataclass
class Gemm:
    """A contraction as `batch` GEMMs of M x K by K x N, read through `a` and `b`."""

    batch: int
    m: int
    n: int
    k: int
    a: Element  # (g, m, k)
    b: Element  # (g, k, n)
    a_k_fast: bool  # consecutive k are adjacent in A's memory (else consecutive m)
    b_n_fast: bool  # consecutive n are adjacent in B's memory (else consecutive k)
    out_index: Callable[[GpuContext, ir.Value, ir.Value, ir.Value], list]  # (g, m, n)


def emit_contraction(ctx: GpuContext, instr: Instruction, name: str, outputs):
    """The tiled kernel of a dot/convolution or of a fusion around one, else None."""
    contraction = _contraction(instr)
    if contraction is None or len(outputs) != 1:
        return None
    out_dtype = contraction.array_shape.dtype
    in_dtype = contraction.operands[0].shape.dtype
    if out_dtype not in FLOAT_RESULTS or not in_dtype.is_float:
        return None
    plan = _plan(contraction)
    if plan is None:
        return None
    kernel_gemm, make_gemm = plan
    if kernel_gemm.m * kernel_gemm.n * kernel_gemm.k * kernel_gemm.batch < MIN_WORK:
        return None
    if kernel_gemm.k < MIN_DEPTH or min(kernel_gemm.m, kernel_gemm.n) < MIN_SIDE:
        return None  # matrix-vector-like: a thread per output reads coalesced and fills more SMs
    tiling = _tiling(kernel_gemm)
    tiles_m = -(-kernel_gemm.m // tiling.bm)
    tiles_n = -(-kernel_gemm.n // tiling.bn)
    grid = kernel_gemm.batch * tiles_m * tiles_n
    kernel = begin_kernel(ctx, instr, name, tiling.threads, grid, "gemm")
    params = operand_generators(ctx, instr)
    current: dict[str, ir.Value] = {}
    if instr.op is Op.FUSION:
        gens = bind_instructions(ctx, instr.called[0], params,
                                 {id(contraction): lambda index: current["value"]})  # fmt: skip
        lhs, rhs = (gens[id(o)] for o in contraction.operands)
        root = gens[id(instr.called[0].root)]
    else:
        lhs, rhs = params
        root = lambda index: current["value"]
    gemm = make_gemm(lhs, rhs)
    converter = _converter(ctx, in_dtype, out_dtype)

    def store(g, m, n, value) -> None:
        current["value"] = round_to(ctx.builder, out_dtype, value)
        index = gemm.out_index(ctx, g, m, n)
        store_outputs(ctx, root(index), outputs, index)

    _emit_tiles(ctx, kernel, gemm, tiling, tiles_m, tiles_n, register_type(out_dtype),
                converter, store)  # fmt: skip
    return finish_kernel(ctx, instr, kernel)


def _converter(ctx: GpuContext, src: DType, dst: DType):
    return lambda value: scalar.convert(ctx, src, dst, value)


def _contraction(instr: Instruction) -> Instruction | None:
    """The dot/convolution a kernel computes as GEMM: itself, or the one in a fusion whose
    root reads it at the root's own index (an elementwise epilogue)."""
    if instr.op in (Op.DOT, Op.CONVOLUTION):
        return instr
    if instr.op is not Op.FUSION or not isinstance(instr.shape, Shape):
        return None
    fused = instr.called[0]
    found = [i for i in fused.instructions if i.op in (Op.DOT, Op.CONVOLUTION)]
    if len(found) != 1:
        return None
    (contraction,) = found
    if contraction.array_shape.dims != instr.shape.dims:
        return None
    maps = computation_maps(fused).get(id(contraction))
    if maps != frozenset({identity(instr.shape.rank)}):
        return None
    return contraction


def _tiling(gemm: Gemm) -> Tiling:
    blocks = gemm.batch * -(-gemm.m // LARGE.bm) * -(-gemm.n // LARGE.bn)
    return LARGE if blocks >= LARGE_BLOCKS else SMALL


# -- the kernel --------------------------------------------------------------------------


def _emit_tiles(ctx: GpuContext, kernel, gemm: Gemm, t: Tiling, tiles_m: int, tiles_n: int,
                acc_type: ir.Type, convert, store) -> None:  # fmt: skip
    b = ctx.builder
    tid = ctx.device.thread_index(ctx)
    block = ctx.device.block_index(ctx)
    g = b.udiv(block, _i32(tiles_m * tiles_n))
    tile = b.urem(block, _i32(tiles_m * tiles_n))
    m0 = b.mul(b.udiv(tile, _i32(tiles_n)), _i32(t.bm))
    n0 = b.mul(b.urem(tile, _i32(tiles_n)), _i32(t.bn))
    columns = t.bn // t.tn
    tx = b.urem(tid, _i32(columns))
    ty = b.udiv(tid, _i32(columns))
    width = 8 if acc_type == F64 else 4
    a_row, b_row = t.bm + PAD, t.bn + PAD
    a_shared = kernel.shared(ctx, t.bk * a_row * width)
    b_shared = kernel.shared(ctx, t.bk * b_row * width)
    zero = ir.Constant(acc_type, 0.0)
    acc = [[ctx.alloca(acc_type) for _ in range(t.tn)] for _ in range(t.tm)]
    for row in acc:
        for slot in row:
            b.store(zero, slot)
    a_loads = t.bm * t.bk // t.threads
    b_loads = t.bk * t.bn // t.threads
    a_regs = [ctx.alloca(acc_type) for _ in range(a_loads)]
    b_regs = [ctx.alloca(acc_type) for _ in range(b_loads)]

    def a_place(r: int) -> tuple[ir.Value, ir.Value]:
        """(m, k) within the tile of the r-th A element this thread stages."""
        e = b.add(tid, _i32(r * t.threads))
        if gemm.a_k_fast:
            return b.udiv(e, _i32(t.bk)), b.urem(e, _i32(t.bk))
        return b.urem(e, _i32(t.bm)), b.udiv(e, _i32(t.bm))

    def b_place(r: int) -> tuple[ir.Value, ir.Value]:
        """(k, n) within the tile of the r-th B element this thread stages."""
        e = b.add(tid, _i32(r * t.threads))
        if gemm.b_n_fast:
            return b.udiv(e, _i32(t.bn)), b.urem(e, _i32(t.bn))
        return b.urem(e, _i32(t.bk)), b.udiv(e, _i32(t.bk))

    def fetch(k0: ir.Value) -> None:
        """Global loads of the tiles at depth k0 into this thread's staging registers."""
        for r, slot in enumerate(a_regs):
            m, k = a_place(r)
            row, depth = (b.add(m0, m), gemm.m, t.bm), (b.add(k0, k), gemm.k, t.bk)
            b.store(convert(_masked(ctx, gemm.a, g, row, depth)), slot)
        for r, slot in enumerate(b_regs):
            k, n = b_place(r)
            row, depth = (b.add(n0, n), gemm.n, t.bn), (b.add(k0, k), gemm.k, t.bk)
            b_element = lambda c, g_, n_, k_: gemm.b(c, g_, k_, n_)
            b.store(convert(_masked(ctx, b_element, g, row, depth)), slot)

    def stage() -> None:
        for r, slot in enumerate(a_regs):
            m, k = a_place(r)
            b.store(b.load(slot), _shared_at(b, a_shared, acc_type, k, a_row, m))
        for r, slot in enumerate(b_regs):
            k, n = b_place(r)
            b.store(b.load(slot), _shared_at(b, b_shared, acc_type, k, b_row, n))

    rows = [_owned(b, ty, i, t.tm, t.bm // t.tm) for i in range(t.tm)]
    cols = [_owned(b, tx, j, t.tn, columns) for j in range(t.tn)]
    steps = -(-gemm.k // t.bk)
    fetch(_i32(0))
    fma = ctx.declare(f"llvm.fma.{'f64' if acc_type == F64 else 'f32'}", acc_type,
                      [zero, zero, zero], pure=True)  # fmt: skip
    with for_range(b, steps, "kstep") as step:
        stage()
        ctx.device.barrier(ctx)
        next_k0 = b.mul(b.add(b.trunc(step, I32), _i32(1)), _i32(t.bk))
        fetch(next_k0)  # past the end it reads zeros, and nothing uses them
        for kk in range(t.bk):
            a_vals = _shared_run(b, a_shared, acc_type, kk, a_row, rows)
            b_vals = _shared_run(b, b_shared, acc_type, kk, b_row, cols)
            for i in range(t.tm):
                for j in range(t.tn):
                    slot = acc[i][j]
                    b.store(b.call(fma, [a_vals[i], b_vals[j], b.load(slot)]), slot)
        ctx.device.barrier(ctx)
    for i in range(t.tm):
        m = b.add(m0, rows[i])
        for j in range(t.tn):
            n = b.add(n0, cols[j])
            inside = all_of(b, [c for c in (
                b.icmp_unsigned("<", m, _i32(gemm.m)) if gemm.m % t.bm else None,
                b.icmp_unsigned("<", n, _i32(gemm.n)) if gemm.n % t.bn else None,
            ) if c is not None])  # fmt: skip
            if inside is None:
                store(g, m, n, b.load(acc[i][j]))
            else:
                with if_then(b, inside):
                    store(g, m, n, b.load(acc[i][j]))


def _owned(b: ir.IRBuilder, thread: ir.Value, i: int, count: int, threads: int) -> ir.Value:
    """The i-th of the `count` rows (or columns) of the tile a thread owns: runs of
    VECTOR adjacent ones (read from shared memory as one vector load), the runs of all
    `threads` threads side by side, then the next runs."""
    run = VECTOR if count % VECTOR == 0 else 1
    first = b.mul(thread, _i32(run))
    return b.add(first, _i32(i % run + (i // run) * run * threads))


def _shared_run(b: ir.IRBuilder, array, ty: ir.Type, row: int, width: int, owned: list):
    """A thread's elements of one shared row: `owned` columns, loaded VECTOR at a time
    where they come in runs (16-byte aligned: rows and runs start at multiples of 4)."""
    if len(owned) % VECTOR:
        return [b.load(_shared_at(b, array, ty, _i32(row), width, c), typ=ty) for c in owned]
    vector = ir.VectorType(ty, VECTOR)
    values = []
    for first in owned[::VECTOR]:
        pointer = _shared_at(b, array, ty, _i32(row), width, first)
        loaded = b.load(pointer, typ=vector, align=16)
        values += [b.extract_element(loaded, _i32(lane)) for lane in range(VECTOR)]
    return values


def _i32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


def _shared_at(b: ir.IRBuilder, array, ty: ir.Type, row: ir.Value, width: int, col: ir.Value):
    position = b.add(b.mul(row, _i32(width)), col)
    return b.gep(array, [position], source_etype=ty)


def _masked(ctx: GpuContext, element: Element, g, row: tuple, depth: tuple) -> ir.Value:
    """element(g, row, depth) for (value, extent, tile) pairs: 0 where a partial tile
    runs past the extent.  Depths are clamped always, since the prefetch after the last
    step reads one tile past the end (and never uses it)."""
    b = ctx.builder
    (row, rows, row_tile), (depth, depths, depth_tile) = row, depth
    conditions = []
    if rows % row_tile:
        conditions.append(b.icmp_unsigned("<", row, _i32(rows)))
        row = ctx.intrinsic("llvm.umin", [row, _i32(rows - 1)])
    if depths % depth_tile:
        conditions.append(b.icmp_unsigned("<", depth, _i32(depths)))
    depth = ctx.intrinsic("llvm.umin", [depth, _i32(depths - 1)])
    value = element(ctx, g, row, depth)
    valid = all_of(b, conditions)
    if valid is None:
        return value
    return b.select(valid, value, _zero(value.type))


def _zero(ty: ir.Type) -> ir.Constant:
    return ir.Constant(ty, 0 if isinstance(ty, ir.IntType) else 0.0)


# -- contractions as GEMMs ---------------------------------------------------------------


def _plan(contraction: Instruction):
    """(shape-only Gemm for sizing, factory(lhs gen, rhs gen) -> Gemm), or None."""
    if contraction.op is Op.DOT:
        return _dot_plan(contraction)
    return _conv_plan(contraction)


def _innermost(dims: tuple[int, ...]) -> int | None:
    live = [d for d, extent in enumerate(dims) if extent != 1]
    return live[-1] if live else None


def _dot_plan(dot: Instruction):
    d = dot.dot
    lhs_dims, rhs_dims = dot.operands[0].shape.dims, dot.operands[1].shape.dims
    lhs_free = [i for i in range(len(lhs_dims)) if i not in d.lhs_batch + d.lhs_contracting]
    rhs_free = [i for i in range(len(rhs_dims)) if i not in d.rhs_batch + d.rhs_contracting]
    batch_ext = [lhs_dims[i] for i in d.lhs_batch]
    m_ext = [lhs_dims[i] for i in lhs_free]
    n_ext = [rhs_dims[i] for i in rhs_free]
    k_ext = [lhs_dims[i] for i in d.lhs_contracting]
    sizes = (math.prod(batch_ext), math.prod(m_ext), math.prod(n_ext), math.prod(k_ext))
    a_k_fast = _innermost(lhs_dims) in d.lhs_contracting
    b_n_fast = _innermost(rhs_dims) in rhs_free

    def place(rank, groups):
        index = [None] * rank
        for dims, values in groups:
            for dim, value in zip(dims, values):
                index[dim] = value
        return index

    def make(lhs: Gen, rhs: Gen) -> Gemm:
        def a(ctx, g, m, k):
            groups = [(d.lhs_batch, split_position(ctx, g, batch_ext)),
                      (lhs_free, split_position(ctx, m, m_ext)),
                      (d.lhs_contracting, split_position(ctx, k, k_ext))]  # fmt: skip
            return lhs(place(len(lhs_dims), groups))

        def b(ctx, g, k, n):
            groups = [(d.rhs_batch, split_position(ctx, g, batch_ext)),
                      (rhs_free, split_position(ctx, n, n_ext)),
                      (d.rhs_contracting, split_position(ctx, k, k_ext))]  # fmt: skip
            return rhs(place(len(rhs_dims), groups))

        def out_index(ctx, g, m, n):
            return [*split_position(ctx, g, batch_ext), *split_position(ctx, m, m_ext),
                    *split_position(ctx, n, n_ext)]  # fmt: skip

        return Gemm(*sizes, a, b, a_k_fast, b_n_fast, out_index)

    return Gemm(*sizes, None, None, a_k_fast, b_n_fast, None), make


def _conv_plan(conv: Instruction):
    """Per feature group: weights [Cout_g, Cin_g*taps] x columns [Cin_g*taps, pixels]."""
    if conv.batch_group_count != 1:
        return None
    dims, window = conv.conv, conv.window
    lhs_dims, rhs_dims = conv.operands[0].shape.dims, conv.operands[1].shape.dims
    out_dims = conv.array_shape.dims
    groups = conv.feature_group_count
    cin_g = rhs_dims[dims.kernel_input_feature]
    cout_g = rhs_dims[dims.kernel_output_feature] // groups
    taps = list(window.size)
    pixels = [out_dims[dims.output_batch], *(out_dims[d] for d in dims.output_spatial)]
    in_spatial = [lhs_dims[d] for d in dims.input_spatial]
    # depth order follows the image's memory: channels outermost for NCHW, innermost NHWC
    channels_first = dims.input_feature < min(dims.input_spatial, default=dims.input_feature)
    k_ext = [cin_g, *taps] if channels_first else [*taps, cin_g]
    sizes = (groups, cout_g, math.prod(pixels), math.prod(k_ext))
    a_k_fast = _innermost(rhs_dims) != dims.kernel_output_feature
    b_n_fast = _innermost(lhs_dims) in dims.input_spatial

    def depth(ctx, k):
        parts = split_position(ctx, k, k_ext)
        return (parts[0], parts[1:]) if channels_first else (parts[-1], parts[:-1])

    def make(lhs: Gen, rhs: Gen) -> Gemm:
        def a(ctx, g, m, k):  # the kernel: [g*Cout_g + m, ci, taps]
            b = ctx.builder
            channel, tap = depth(ctx, k)
            index = [None] * len(rhs_dims)
            out_feature = b.add(b.mul(g, _i32(cout_g)), m) if groups > 1 else m
            index[dims.kernel_output_feature] = b.zext(out_feature, I64)
            index[dims.kernel_input_feature] = channel
            for d, value in zip(dims.kernel_spatial, tap):
                index[d] = value
            return rhs(index)

        def b_(ctx, g, k, n):  # the image: [batch, g*Cin_g + ci, position of the tap]
            b = ctx.builder
            channel, tap = depth(ctx, k)
            batch, *out = split_position(ctx, n, pixels)
            index = [None] * len(lhs_dims)
            index[dims.input_batch] = batch
            if groups > 1:
                channel = b.add(b.mul(b.zext(g, I64), ir.Constant(I64, cin_g)), channel)
            index[dims.input_feature] = channel
            conditions = []
            for i, (o, tp) in enumerate(zip(out, tap)):
                where, inside = tap_position(b, o, tp, in_spatial[i], window, i)
                conditions += inside
                # out-of-range taps read position 0 instead (then zeroed)
                index[dims.input_spatial[i]] = (
                    where if not inside else b.select(all_of(b, inside), where, ir.Constant(I64, 0))
                )
            value = lhs(index)
            valid = all_of(b, conditions)
            if valid is None:
                return value
            return b.select(valid, value, _zero(value.type))

        def out_index(ctx, g, m, n):
            b = ctx.builder
            batch, *out = split_position(ctx, n, pixels)
            index = [None] * len(out_dims)
            index[dims.output_batch] = batch
            feature = b.add(b.mul(g, _i32(cout_g)), m) if groups > 1 else m
            index[dims.output_feature] = b.zext(feature, I64)
            for d, value in zip(dims.output_spatial, out):
                index[d] = value
            return index

        return Gemm(*sizes, a, b_, a_k_fast, b_n_fast, out_index)

    return Gemm(*sizes, None, None, a_k_fast, b_n_fast, None), make
