"""Dot and convolution as tiled GEMM kernels, with fused producers and epilogues.

A contraction is seen as batched GEMMs C[g] = A[g] B[g] (gemm_plan.py) and computed by
blocks of BM x BN tiles of C (gemm_tiles.py), on one of two kernels:

- tensor cores (mma_gemm.py) when both operands are f16 or both bf16, or both f32 and
  the target asks for TF32 (`cuda:sm_90+tf32`); they accumulate in f32;
- CUDA cores (simt_gemm.py) otherwise, in f32 (f64 for f64 results);

and matrix-vector products (a few rows or columns of C, a deep k) split the depth across
threads instead (gemv.py).

Finished elements go through the fusion's epilogue (bias, residual, activation) with the
contraction's value from the registers, then to memory.  Taken for float results when
the GEMM is big enough; a fusion qualifies when its root reads the contraction at its
own output index (index maps, see aotc/ir/index_maps.py).  Others run one thread per
output element.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import DType, Instruction, Op
from ..cpu import scalar
from ..cpu.elemental import bind_instructions
from ..cpu.lltypes import register_type, round_to
from . import gemv, mma_gemm, simt_gemm
from .context import GpuContext
from .elementwise import store_outputs
from .gemm_plan import Gemm, contraction_of, gemm_plan, transposed
from .kernel import begin_kernel, finish_kernel, operand_generators

FLOAT_RESULTS = frozenset({DType.F32, DType.F16, DType.BF16, DType.F64})
# below this many multiply-adds a thread per output element is as good
MIN_WORK = 1 << 18
MIN_DEPTH = 8
MIN_SIDE = 16
# enough blocks of the large tiling to fill a big GPU twice (132 SMs on an H100)
LARGE_BLOCKS = 264


def emit_contraction(ctx: GpuContext, instr: Instruction, name: str, outputs):
    """The tiled kernel of a dot/convolution or of a fusion around one, else None."""
    contraction = contraction_of(instr)
    if contraction is None or len(outputs) != 1:
        return None
    out_dtype = contraction.array_shape.dtype
    in_dtype = contraction.operands[0].shape.dtype
    if out_dtype not in FLOAT_RESULTS or not in_dtype.is_float:
        return None
    plan = gemm_plan(contraction)
    if plan is None:
        return None
    sizes, make_gemm = plan
    vector = _matrix_vector(sizes, out_dtype)
    if vector:
        flip = sizes.m > sizes.n
        grid, threads = gemv.launch(transposed(sizes) if flip else sizes)
        kernel = begin_kernel(ctx, instr, name, threads, grid, "gemv")
    else:
        if sizes.m * sizes.n * sizes.k * sizes.batch < MIN_WORK:
            return None
        if sizes.k < MIN_DEPTH or min(sizes.m, sizes.n) < MIN_SIDE:
            return None  # a thread per output reads coalesced and fills more SMs
        kind = mma_gemm.mma_kind(contraction, ctx.target)
        tiling = _tiling(sizes, (mma_gemm.LARGE, mma_gemm.SMALL) if kind else
                         (simt_gemm.LARGE, simt_gemm.SMALL))  # fmt: skip
        grid = sizes.batch * _tiles(sizes, tiling)
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
    if vector and flip:
        gemm = transposed(gemm)

    def store(g, m, n, value) -> None:
        current["value"] = round_to(ctx.builder, out_dtype, value)
        index = gemm.out_index(ctx, g, m, n)
        store_outputs(ctx, root(index), outputs, index)

    if vector:
        gemv.emit_gemv(ctx, kernel, gemm, store)
    elif kind:
        mma_gemm.emit_tiles(ctx, kernel, gemm, tiling, kind, store)
    else:
        convert = lambda value: scalar.convert(ctx, in_dtype, out_dtype, value)
        simt_gemm.emit_tiles(ctx, kernel, gemm, tiling, register_type(out_dtype), convert,
                             store)  # fmt: skip
    return finish_kernel(ctx, instr, kernel)


def _matrix_vector(gemm: Gemm, out_dtype: DType) -> bool:
    """Few rows or columns of C and a deep k (f32 accumulation: not for f64)."""
    few = min(gemm.m, gemm.n) <= gemv.MAX_ROWS
    return few and gemm.k >= gemv.MIN_DEPTH and out_dtype is not DType.F64


def _tiles(gemm: Gemm, tiling) -> int:
    return -(-gemm.m // tiling.bm) * -(-gemm.n // tiling.bn)


def _tiling(gemm: Gemm, choices):
    """The large tiling where it makes enough blocks, else the small one."""
    large, small = choices
    return large if gemm.batch * _tiles(gemm, large) >= LARGE_BLOCKS else small
