"""Dot and convolution as tiled GEMM kernels, with fused producers and epilogues.

A contraction is seen as batched GEMMs C[g] = A[g] B[g] (gemm_plan.py) and computed by
blocks of BM x BN tiles of C (gemm_tiles.py), on one of two kernels:

- tensor cores (mma_gemm.py) when both operands are f16 or both bf16, or both f32 and
  the target asks for TF32 (`cuda:sm_90+tf32`); they accumulate in f32;
- CUDA cores (simt_gemm.py) otherwise, in f32 (f64 for f64 results), and s32 results
  of integers (the ONNX frontend's quantized products) in exact i32 sums: by dp4a
  where both operands' values are bytes (u8/s8, or widened from them by the operand's
  convert), else by i32 multiply-adds (`ARITHMETIC`);

and float matrix-vector products (a few rows or columns of C, a deep k) split the depth
across threads instead (gemv.py).  A tiled GEMM of too few blocks to fill the GPU
splits its depth into slices (split-K, `depth_slices`): their partial sums go to a
temporary of the plan (`partial_sums`: the driver plans them into the arena, live while
the instruction runs), and a second kernel adds them up in slice order and
finishes each element.

Finished elements go through the fusion's epilogue (bias, residual, activation, a
requantization to bytes) with the contraction's value from the registers, then to
memory.  Taken when the GEMM is big enough; a fusion qualifies when it is an OUTPUT
fusion of one contraction (its root reads it through elementwise ops at its own output
index, see aotc/ir/fusion_kinds.py).  Others run one thread per output element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llvmlite import ir

from ...buffers import BufferPlan
from ...ir import DType, Instruction, Op, Shape
from ...ir.fusion_kinds import byte_values
from ..llvm import scalar
from ..llvm.elemental import bind_instructions, element_pointer, memory_generator
from ..llvm.lltypes import I32, I64, round_to, store_element
from ..llvm.loops import if_then
from . import elementwise, gemv, mma_gemm, simt_gemm
from .context import GpuContext
from .elementwise import store_outputs
from .gemm_plan import Gemm, contraction_of, gemm_plan, transposed
from .gemm_tiles import split_steps
from .kernel import KernelLaunch, begin_kernel, finish_kernel, operand_generators, thread_count

FLOAT_RESULTS = frozenset({DType.F32, DType.F16, DType.BF16, DType.F64})
# below this many multiply-adds a thread per output element is as good
MIN_WORK = 1 << 18
MIN_DEPTH = 8
MIN_SIDE = 16
# enough blocks of the large tiling to fill a big GPU twice (132 SMs on an H100)
LARGE_BLOCKS = 264
# GEMMs of fewer than half as many blocks split their depth into slices (split-K) for
# about this many blocks, each slice at least MIN_SLICE_STEPS steps of BK deep
SPLIT_BLOCKS = 264
MIN_SLICE_STEPS = 4


@dataclass
class _Choice:
    """How a contraction is computed: its GEMM view and the kernel that runs it."""

    contraction: Instruction
    sizes: Gemm  # shape only (gemm_plan)
    make_gemm: object  # (lhs gen, rhs gen) -> Gemm
    vector: bool  # a matrix-vector product (gemv.py)
    arithmetic: simt_gemm.Arithmetic  # the SIMT sums (their type: split-K's, mma's too)
    kind: object  # the tensor-core kind (mma_gemm.mma_kind), or None
    tiling: object  # the tiled kernels' tiling
    slices: int  # split-K: slices of the depth summed apart (1: none)

    @property
    def partial_bytes(self) -> int:
        """The workspace of the split-K partial sums (0 without)."""
        if self.slices == 1:
            return 0
        width = self.arithmetic.dtype.itemsize
        return self.slices * self.sizes.batch * self.sizes.m * self.sizes.n * width


def _float_sums(contraction: Instruction, gemm: Gemm) -> simt_gemm.Arithmetic | None:
    """Float results of float operands: fma (where tensor cores do not take them)."""
    out_dtype = contraction.array_shape.dtype
    if out_dtype in FLOAT_RESULTS and contraction.operands[0].array_shape.dtype.is_float:
        return simt_gemm.float_sums(out_dtype)
    return None


def _byte_sums(contraction: Instruction, gemm: Gemm) -> simt_gemm.Arithmetic | None:
    """s32 sums of two operands whose values are bytes: dp4a, four products at a time
    (the signs those of A's and B's values: a convolution's A is its kernel)."""
    if contraction.array_shape.dtype is not DType.S32:
        return None
    a, b = (byte_values(contraction.operands[i]) for i in gemm.operands)
    if a is None or b is None:
        return None
    return simt_gemm.byte_sums((a.is_signed_int, b.is_signed_int))


def _word_sums(contraction: Instruction, gemm: Gemm) -> simt_gemm.Arithmetic | None:
    """s32 sums of other integers of at most 32 bits (16-bit centered values): i32."""
    in_dtype = contraction.operands[0].array_shape.dtype
    if contraction.array_shape.dtype is DType.S32 and in_dtype.is_int and in_dtype.bits <= 32:
        return simt_gemm.WORD_SUMS
    return None


# the tiled kernels' sums, by the first row that takes the contraction seen as `gemm`
# (none: a thread per output element)
ARITHMETIC = (_float_sums, _byte_sums, _word_sums)


def _arithmetic(contraction: Instruction, gemm: Gemm) -> simt_gemm.Arithmetic | None:
    """The sums of the first row of ARITHMETIC that takes `contraction`, or None."""
    for row in ARITHMETIC:
        found = row(contraction, gemm)
        if found is not None:
            return found
    return None


def _choose(target, instr: Instruction) -> _Choice | None:
    contraction = contraction_of(instr)
    if contraction is None:
        return None
    plan = gemm_plan(contraction, instr)
    if plan is None:
        return None
    sizes, make_gemm = plan
    arithmetic = _arithmetic(contraction, sizes)
    if arithmetic is None:
        return None
    if _matrix_vector(sizes, arithmetic):
        return _Choice(contraction, sizes, make_gemm, True, arithmetic, None, None, 1)
    if sizes.m * sizes.n * sizes.k * sizes.batch < MIN_WORK:
        return None
    if sizes.k < MIN_DEPTH or min(sizes.m, sizes.n) < MIN_SIDE:
        return None  # a thread per output reads coalesced and fills more SMs
    kind = mma_gemm.mma_kind(contraction, target)
    if kind:
        tiling, bk = _tiling(sizes, (mma_gemm.LARGE, mma_gemm.SMALL)), mma_gemm.step_depth(kind)
    else:
        tiling = _tiling(sizes, (simt_gemm.LARGE, simt_gemm.SMALL))
        tiling = simt_gemm.staged_tiling(tiling, arithmetic)
        bk = tiling.bk
    slices = depth_slices(sizes, tiling, bk)
    return _Choice(contraction, sizes, make_gemm, False, arithmetic, kind, tiling, slices)


def depth_slices(sizes: Gemm, tiling, bk: int) -> int:
    """Split-K: slices of the depth that blocks sum apart where the tiles of C alone are
    too few blocks to fill the GPU (ResNet's 7 x 7 layers at batch 1: 8 blocks, k =
    4608): enough for SPLIT_BLOCKS blocks, each at least MIN_SLICE_STEPS steps deep."""
    blocks = sizes.batch * _tiles(sizes, tiling)
    steps = -(-sizes.k // bk)
    if blocks * 2 > SPLIT_BLOCKS:
        return 1
    slices = min(-(-SPLIT_BLOCKS // blocks), steps // MIN_SLICE_STEPS)
    if slices < 2:
        return 1
    return -(-steps // split_steps(sizes.k, bk, slices))  # no slice left empty


def partial_sums(target, plan: BufferPlan) -> dict[int, int]:
    """id(instruction) -> the bytes of its split-K partial sums, for each kernel of
    `plan` that splits its depth (the driver plans them into the arena)."""
    found = {}
    for instr in plan.schedule:
        if plan.needs_code(instr) and instr.op is not Op.PARAMETER:
            choice = _choose(target, instr)
            if choice is not None and choice.partial_bytes:
                found[id(instr)] = choice.partial_bytes
    return found


def emit_contraction(ctx: GpuContext, instr: Instruction, name: str, outputs):
    """The tiled kernel(s) of a dot/convolution or of a fusion around one, else None."""
    choice = _choose(ctx.target, instr)
    if choice is None or len(outputs) != 1:
        return None
    contraction, sizes = choice.contraction, choice.sizes
    out_dtype = contraction.array_shape.dtype
    flip = choice.vector and sizes.m > sizes.n
    if choice.vector:
        grid, threads = gemv.launch(transposed(sizes) if flip else sizes)
        kernel = begin_kernel(ctx, instr, name, threads, grid, "gemv")
    else:
        grid = choice.slices * sizes.batch * _tiles(sizes, choice.tiling)
        kernel = begin_kernel(ctx, instr, name, choice.tiling.threads, grid, "gemm")
    params = operand_generators(ctx, instr)
    current: dict[str, ir.Value] = {}
    if instr.op is Op.FUSION:
        gens = bind_instructions(
            ctx, instr.called[0], params, {id(contraction): lambda index: current["value"]}
        )
        lhs, rhs = (gens[id(o)] for o in contraction.operands)
        root = gens[id(instr.called[0].root)]
    else:
        lhs, rhs = params
        root = lambda index: current["value"]
    gemm = choice.make_gemm(lhs, rhs)
    if flip:
        gemm = transposed(gemm)

    def store(g, m, n, value) -> None:
        current["value"] = round_to(ctx.builder, out_dtype, value)
        index = gemm.out_index(ctx, g, m, n)
        store_outputs(ctx, root(index), outputs, index)

    partials = _partials(ctx, choice)
    tile_store = store if partials is None else partials.store
    if choice.vector:
        gemv.emit_gemv(ctx, kernel, gemm, store)
    elif choice.kind:
        mma_gemm.emit_tiles(
            ctx, kernel, gemm, choice.tiling, choice.kind, tile_store, choice.slices
        )
    else:
        simt_gemm.emit_tiles(
            ctx,
            kernel,
            gemm,
            choice.tiling,
            choice.arithmetic,
            contraction.operands[0].array_shape.dtype,
            tile_store,
            choice.slices,
        )
    launches = [finish_kernel(ctx, instr, kernel)]
    if partials is not None:
        launches.append(partials.emit_sum(instr, f"{name}_sum", gemm, store))
    return launches


class _Partials:
    """Split-K's partial sums in the workspace, [slices, batch, m, n] in the accumulator's
    type, and the kernel that adds them up in slice order (the same sums every run) and
    finishes each element as the unsplit kernel would (epilogue, store); of C only what
    the call needs (`Gemm.needed`): the tiles' kernel wrote no partials of the rest."""

    def __init__(self, ctx: GpuContext, choice: _Choice):
        self.ctx, self.choice = ctx, choice
        sizes = choice.sizes
        dtype = choice.arithmetic.dtype
        self.shape = Shape(dtype, (choice.slices * sizes.batch, sizes.m, sizes.n))

    def store(self, g, m, n, value) -> None:
        ctx = self.ctx
        index = [ctx.builder.zext(v, I64) for v in (g, m, n)]
        pointer = element_pointer(ctx, ctx.slice_pointer(ctx.workspace), self.shape, index)
        store_element(ctx.builder, self.shape.dtype, value, pointer)

    def emit_sum(self, instr: Instruction, name: str, gemm: Gemm, store) -> KernelLaunch:
        ctx, sizes, slices = self.ctx, self.choice.sizes, self.choice.slices
        dims = (sizes.batch, sizes.m, sizes.n)
        per_thread = elementwise.elements_per_thread(dims)
        threads = thread_count(math.prod(dims), per_thread)
        kernel = begin_kernel(
            ctx,
            instr,
            name,
            elementwise.BLOCK,
            thread_count(threads, elementwise.BLOCK),
            "elementwise",
        )
        b = ctx.builder
        assert b is not None
        partial = memory_generator(ctx, ctx.workspace, self.shape)
        positions = elementwise.grid_elements(ctx, dims, per_thread)
        needed = gemm.needed(ctx) if gemm.needed is not None else None

        def total_at(index):
            g, m, n = index
            total = partial([g, m, n])
            for s in range(1, slices):
                g_s = b.add(g, ir.Constant(I64, s * sizes.batch))
                total = scalar.binary(ctx, Op.ADD, self.shape.dtype, total, partial([g_s, m, n]))
            return total

        if needed is None:  # every position's loads first, in flight together
            sums = [total_at(position.index) for position in positions]
            for position, total in zip(positions, sums):
                with if_then(b, position.inside):
                    store(*(b.trunc(v, I32) for v in position.index), total)
        else:  # only the elements the call needs
            for position in positions:
                at = [b.trunc(v, I32) for v in position.index]
                inside = needed.holds(ctx, *at)
                if position.inside is not None:
                    inside = position.inside if inside is None else b.and_(inside, position.inside)
                with if_then(b, inside):
                    store(*at, total_at(position.index))
        launch = finish_kernel(ctx, instr, kernel)
        element_bytes = self.shape.dtype.itemsize
        count = math.prod(dims)
        read = slices * count * element_bytes
        return replace(launch, bytes=read + count * element_bytes, flops=slices * count)


def _partials(ctx: GpuContext, choice: _Choice) -> _Partials | None:
    return _Partials(ctx, choice) if choice.slices > 1 else None


def _matrix_vector(gemm: Gemm, arithmetic: simt_gemm.Arithmetic) -> bool:
    """Few rows or columns of C and a deep k, summed in f32 (gemv's: not for f64 or
    integer results)."""
    few = min(gemm.m, gemm.n) <= gemv.MAX_ROWS
    return few and gemm.k >= gemv.MIN_DEPTH and arithmetic.dtype is DType.F32


def _tiles(gemm: Gemm, tiling) -> int:
    return -(-gemm.m // tiling.bm) * -(-gemm.n // tiling.bn)


def _tiling(gemm: Gemm, choices):
    """The large tiling where it makes enough blocks, else the small one."""
    large, small = choices
    return large if gemm.batch * _tiles(gemm, large) >= LARGE_BLOCKS else small
