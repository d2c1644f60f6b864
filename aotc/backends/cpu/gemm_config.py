"""The GEMM configuration of one element type on one target: vector width, register
tiles, cache budgets, and whether FMA and pmaddwd are there.

`gemm_config` reads it off the target's vector unit (`BLOCKING`: one `Blocks` per
vector width, `NEON_BLOCKING` on AArch64); `fits_gemm` says which contractions a GEMM
computes at all.  The GEMM and the kernels built on its vectors and tiles (gemv, the
direct, plane and Winograd convolutions, pooling) take their lanes and tiles from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...ir import DType
from ..llvm.lltypes import register_type


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
    pairs and C is s32.  Where the operands' 8-bit types are those the target's byte
    dots take (`byte_dots`: one u8 and one s8 for vpdpbusd and usdot, two s8 or two u8
    for sdot and udot), an element holds four values instead (`quads`: 4x the
    multiply-adds of an FMA), and K counts quads.
    """

    dtype: DType  # C's element type, and the panels' (floats) or their pairs' (s32)
    lanes: int  # W: elements per vector register
    blocks: Blocks
    fma: bool
    operand: DType | None = None  # integer GEMM: the operands' type (else `dtype`)
    pmaddwd: bool = False  # integer GEMM: x86's pmaddwd is there at `lanes` (target.py)
    # integer GEMM: the operand types that the target's byte dots at `lanes` take
    # (CpuTarget.byte_dot_signs): "mixed" (vpdpbusd, usdot), "same" (sdot, udot) or None
    byte_dots: str | None = None
    tiles: bool = False  # integer GEMM: x86's AMX-INT8 tile products are there (amx.py)
    # a GEMM of 8-bit quads (quads.py): the types of A's and B's values (u8 or s8)
    quad_types: tuple[DType, DType] | None = None

    @property
    def quads(self) -> bool:
        """Each 32-bit panel element holds four 8-bit values along k (quads.py)."""
        return self.quad_types is not None

    @property
    def values_per_element(self) -> int:
        """The operand values along k that one panel element holds: 4, 2 or 1."""
        return 4 if self.quads else 2 if self.paired else 1

    @property
    def kernel_tag(self) -> str:
        """The micro-kernels' name part: the element type, and for quads A's and B's
        types (their multiply-adds differ), e.g. "u8s8", "s8s8"."""
        if self.quad_types is not None:
            return "".join(t.text for t in self.quad_types)
        return self.dtype.text

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
# 8-bit operands that quads hold (quads.py)
BYTE_OPERANDS = frozenset({DType.S8, DType.U8})


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
    byte_dots = target.byte_dot_signs if target is not None else None
    tiles = target is not None and target.has_amx_int8
    return GemmConfig(dtype, lanes, blocks, fma, operand, pmaddwd, byte_dots, tiles=tiles)


def takes_bytes(config: GemmConfig, a: DType, b: DType) -> bool:
    """Whether the byte dots of an integer GEMM's target (`config.byte_dots`) take A's
    values of type `a` by B's of type `b` (8-bit types), so that the GEMM runs on quads."""
    if a not in BYTE_OPERANDS or b not in BYTE_OPERANDS:
        return False
    return config.byte_dots == ("same" if a is b else "mixed")


def fits_gemm(result: DType, operands) -> bool:
    """Whether GEMM computes a `result` contraction of operands of these types: floats of
    the result's own type, or 8/16-bit integers (one type) summed in s32."""
    kinds = set(operands)
    if result in GEMM_DTYPES:
        return kinds == {result}
    return result is DType.S32 and len(kinds) == 1 and kinds <= PAIRED_OPERANDS


def _is_arm(target) -> bool:
    return target is not None and target.arch == "aarch64"
