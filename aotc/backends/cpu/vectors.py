"""Vector building blocks of the CPU kernels, in a GEMM configuration's element type.

Splats, lane constants and shuffles, lane masks, multiply-adds (FMA where the target
has it; pmaddwd on 16-bit pairs for the integer GEMM), masked and gathered loads and
masked stores; and `smaller`, the i64 minimum that clips a short last block or panel.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import DType
from ..llvm.lltypes import I32, I64, PTR, VOID
from .gemm_config import GemmConfig

# -- lanes and shuffles -----------------------------------------------------------


def splat(b: ir.IRBuilder, value: ir.Value, vec: ir.VectorType) -> ir.Value:
    """`value` in every lane of a vector of type `vec`."""
    one = b.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
    return b.shuffle_vector(one, ir.Constant(vec, ir.Undefined), zeros)


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


def lanes_below(b: ir.IRBuilder, count: ir.Value, width: int, first: int = 0) -> ir.Value:
    """<width x i1>: lane l is set where first + l < count (an i64; none when negative)."""
    lanes = ir.Constant(ir.VectorType(I64, width), [first + lane for lane in range(width)])
    return b.icmp_signed("<", lanes, splat(b, count, lanes.type))


def smaller(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """The signed minimum of two i64 values."""
    return b.select(b.icmp_signed("<", x, y), x, y)


# -- arithmetic in C's type --------------------------------------------------------


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


# (lanes, the operands' types) -> the instruction summing four byte products per 32-bit
# lane, (acc, x, y): u8 x s8 on x86's vpdpbusd at 8 and 16 lanes and AArch64's usdot at
# NEON's 4 (`CpuTarget.byte_dot_signs` "mixed"), s8 x s8 and u8 x u8 on AArch64's sdot
# and udot ("same")
BYTE_DOTS = {
    (4, "u8s8"): "llvm.aarch64.neon.usdot.v4i32.v16i8",
    (8, "u8s8"): "llvm.x86.avx512.vpdpbusd.256",
    (16, "u8s8"): "llvm.x86.avx512.vpdpbusd.512",
    (4, "s8s8"): "llvm.aarch64.neon.sdot.v4i32.v16i8",
    (4, "u8u8"): "llvm.aarch64.neon.udot.v4i32.v16i8",
}


def quad_mul_add(ctx, b: ir.IRBuilder, cfg: GemmConfig, x, y, acc) -> ir.Value:
    """acc + the sum of the four byte products per 32-bit lane of <W x i32> vectors of
    quads (quads.py), x A's and y B's, of the types `cfg.quad_types` (u8 or s8).  Each
    lane's four products sum to at most 4 x 255 x 255 in size, and the sums wrap modulo
    2**32 like the pairs': the exact s32 sum.

    vpdpbusd, usdot, sdot or udot where the target's byte dots take these types at this
    width (`cfg.byte_dots`); elsewhere (a tile's narrower vectors) the plain form."""
    assert cfg.quad_types is not None
    count = x.type.count
    operands = list(zip((x, y), cfg.quad_types))
    if cfg.quad_types == (DType.S8, DType.U8):
        operands.reverse()  # vpdpbusd and usdot take the u8 operand first
    types = "".join(dtype.text for _, dtype in operands)
    signs = "same" if operands[0][1] is operands[1][1] else "mixed"
    quad_bytes = ir.VectorType(ir.IntType(8), 4 * count)
    instruction = BYTE_DOTS.get((count, types))
    if cfg.byte_dots == signs and instruction is not None and count == cfg.lanes:
        args = [acc, *(b.bitcast(v, quad_bytes) for v, _ in operands)]
        return b.call(ctx.declare(instruction, x.type, args), args)
    wide = ir.VectorType(ir.IntType(32), 4 * count)
    (u, u_type), (v, v_type) = operands
    products = b.mul(_widened(b, u, u_type, wide), _widened(b, v, v_type, wide))
    total = acc
    for byte in range(4):
        total = b.add(total, pick_lanes(b, products, range(byte, 4 * count, 4)))
    return total


def _widened(b: ir.IRBuilder, quads, dtype: DType, wide: ir.VectorType) -> ir.Value:
    """The bytes of a vector of quads (of 8-bit values of `dtype`) as the lanes of `wide`."""
    values = b.bitcast(quads, ir.VectorType(ir.IntType(8), wide.count))
    return b.zext(values, wide) if dtype is DType.U8 else b.sext(values, wide)


def mul_add(ctx, b: ir.IRBuilder, cfg: GemmConfig, x, y, acc) -> ir.Value:
    """x*y + acc: one fused instruction where the target has FMA (never emulated); for
    an integer GEMM the pairs' or quads' products (`pair_mul_add`, `quad_mul_add`)."""
    if cfg.quads:
        return quad_mul_add(ctx, b, cfg, x, y, acc)
    if cfg.paired:
        return pair_mul_add(ctx, b, cfg, x, y, acc)
    if not cfg.fma:
        return b.fadd(b.fmul(x, y), acc)
    suffix = f"v{x.type.count}{'f32' if cfg.dtype is DType.F32 else 'f64'}"
    fma = ctx.declare(f"llvm.fma.{suffix}", x.type, [x, y, acc])
    return b.call(fma, [x, y, acc])


# -- masked and gathered memory ----------------------------------------------------


def vector_gep(b: ir.IRBuilder, base: ir.Value, offsets: ir.Value, ty: ir.Type) -> ir.Value:
    """<N x ptr>: base + offsets[i] elements of `ty`."""
    pointers = b.gep(base, [offsets], source_etype=ty)
    # llvmlite infers a scalar pointer type for a GEP with vector indices
    pointers.type = ir.VectorType(PTR, offsets.type.count)
    return pointers


def masked_gather(ctx, b, cfg: GemmConfig, pointers, mask) -> ir.Value:
    """The lanes of `pointers` where `mask` holds, zeros elsewhere (never loaded)."""
    count = mask.type.count
    return _masked(
        ctx, b, cfg, f"llvm.masked.gather.v{count}{_type_tag(cfg)}.v{count}p0", pointers, mask
    )


def masked_load(ctx, b, cfg: GemmConfig, pointer, mask, passthru=None) -> ir.Value:
    """A contiguous vector from `pointer`; lanes outside `mask` are never loaded and
    are `passthru`'s (zero without one)."""
    count = mask.type.count
    name = f"llvm.masked.load.v{count}{_type_tag(cfg)}.p0"
    return _masked(ctx, b, cfg, name, pointer, mask, passthru)


def _masked(ctx, b, cfg: GemmConfig, name: str, address, mask, passthru=None) -> ir.Value:
    """Call masked load/gather intrinsic `name`: (address, align, mask, passthru)."""
    vec = ir.VectorType(cfg.element, mask.type.count)
    rest = passthru if passthru is not None else ir.Constant(vec, None)
    args = [address, ir.Constant(I32, cfg.itemsize), mask, rest]
    return b.call(ctx.declare(name, vec, args), args)


def store_lanes(ctx, b, cfg, value, pointer, mask) -> None:
    """Store the lanes of `value` where `mask` holds (the others are not touched)."""
    t = value.type
    align = ir.Constant(I32, cfg.itemsize)
    name = f"llvm.masked.store.v{t.count}{_type_tag(cfg)}.p0"
    b.call(ctx.declare(name, VOID, [value, pointer, align, mask]), [value, pointer, align, mask])


def masked_store(ctx, b, cfg, value, pointer, first: int, cols, adding: bool) -> None:
    """Store lanes first + l < cols of `value` (added to what is there when `adding`)."""
    mask = lanes_below(b, cols, value.type.count, first)
    if adding:
        value = plus(b, cfg, masked_load(ctx, b, cfg, pointer, mask), value)
    store_lanes(ctx, b, cfg, value, pointer, mask)


def bits(flags) -> ir.Constant:
    """A constant <N x i1> lane mask."""
    flags = list(flags)
    return ir.Constant(ir.VectorType(ir.IntType(1), len(flags)), [int(f) for f in flags])


def store_first(ctx, cfg: GemmConfig, value, pointer, count: int) -> None:
    """Store the first `count` lanes of `value` at `pointer` (all: a plain store)."""
    if count == value.type.count:
        ctx.builder.store(value, pointer, align=cfg.itemsize)
        return
    store_lanes(
        ctx, ctx.builder, cfg, value, pointer, bits(l < count for l in range(value.type.count))
    )


def _type_tag(cfg: GemmConfig) -> str:
    return {DType.F32: "f32", DType.F64: "f64"}.get(cfg.dtype, f"i{cfg.dtype.bits}")
