"""Operands of the byte-dot GEMM: 8-bit integers packed as quads along k.

A GEMM of 8-bit operands of the types the target's byte dots take (`GemmConfig.quads`:
u8 x s8 on vpdpbusd and usdot, s8 x s8 and u8 x u8 on sdot and udot) keeps the BLIS loop
nest and micro-kernel of the float one, on 32-bit panel elements that each hold four of
an operand's values, at k .. k + 3 (k in the lowest byte), so that one instruction
multiplies and sums the four byte pairs of a lane: twice the multiply-adds of the 16-bit
pairs (pairs.py) per instruction.  Its K counts quads, ceil(K / 4), the last one padded
with zeros.  The packers move bytes whatever their sign (a zero byte is 0 in u8 and s8);
the micro-kernel's multiply-add (vectors.quad_mul_add) reads them as their types.

`QuadStridedPanels` packs an operand read in place (the 8-bit values a dot's operand
converts), `QuadGeneratedPanels` one computed in a wider type whose values are 8-bit
(a quantization fused into the dot); prepackable.py's `quad_matrix` does the same in numpy for the operands packed
at compile time (prepack.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from llvmlite import ir

from ...ir import DType
from ..llvm.context import EmitContext
from ..llvm.lltypes import I8, I32, I64, PTR, i64
from ..llvm.loops import branch_value, for_range
from .blocking import Blocking
from .gemm_config import GemmConfig
from .im2col import ImagePanels
from .packing import panel_loop
from .panels import GeneratedPanels, StridedPanels
from .shared_functions import shared_function
from .vectors import i32_lanes, smaller

QUAD = 4  # values per panel element


def quads_of(k_values: int) -> int:
    """The quads that K values along k make."""
    return -(-k_values // QUAD)


def quad_factory(factory, k_values: int):
    """A GEMM operand factory `(ctx, sources, index) -> panels` whose panels hold quads
    of the 8-bit values that `factory` reads (in place, or through their generator)."""

    def quads(ctx, sources, index):
        panels = factory(ctx, sources, index)
        if isinstance(panels, ImagePanels):
            return QuadImagePanels(panels, k_values)
        if isinstance(panels, StridedPanels):
            return QuadStridedPanels(panels.base, panels.p_stride, panels.k_stride, k_values)
        if isinstance(panels, GeneratedPanels):
            return QuadGeneratedPanels(panels.element, k_values)
        raise TypeError(f"no quads of {type(panels).__name__}")

    return quads


@dataclass
class QuadGeneratedPanels:
    """An operand computed element by element (`element(p, k)`, i64 indices) in a wider
    integer type whose values are 8-bit ones, packed as quads along k; K = `k_values`."""

    element: Callable[[ir.Value, ir.Value], ir.Value]
    k_values: int

    def pack(self, ctx, blocks: Blocking, dst, p0, count, k0, kc, width):
        b = ctx.builder

        def quad(p, kq):
            def value(k):
                return b.zext(b.trunc(self.element(p, k), I8), I32)

            first = b.mul(kq, i64(QUAD))
            return _joined(b, _four(b, first, i64(self.k_values), value, ir.Constant(I32, 0)))

        return GeneratedPanels(quad).pack(ctx, blocks, dst, p0, count, k0, kc, width)


@dataclass
class QuadStridedPanels:
    """8-bit values in memory, element (p, k) at base + p*p_stride + k*k_stride bytes,
    packed as quads along k; K = `k_values`."""

    base: ir.Value
    p_stride: int
    k_stride: int
    k_values: int

    def pack(self, ctx, blocks: Blocking, dst, p0, count, k0, kc, width):
        b = ctx.builder
        first_k = b.mul(k0, i64(QUAD))
        offset = b.add(b.mul(p0, i64(self.p_stride)), b.mul(first_k, i64(self.k_stride)))
        src = b.gep(self.base, [offset], source_etype=I8)
        k_left = b.sub(i64(self.k_values), first_k)
        packer = quad_packer(ctx, width)
        b.call(packer, [src, i64(self.p_stride), i64(self.k_stride), count, kc, k_left, dst])
        return dst


@dataclass
class QuadImagePanels:
    """An 8-bit image's column matrix (im2col.py) as quads: the slice's rows that K has
    packed as bytes, then each four rows interleaved into one row of quads (which takes
    the same bytes), the rows past K as zeros.  The rows of a slice that K cuts short
    are packed densely, so the interleaving runs from the last quad back to the first:
    each quad's bytes go at or past where they were read, never over a row still to
    read."""

    image: ImagePanels
    k_values: int

    def pack(self, ctx, blocks: Blocking, dst, p0, count, k0, kc, width):
        b = ctx.builder
        cfg = blocks.config
        values = GemmConfig(DType.U8, cfg.lanes, cfg.blocks, cfg.fma)
        first = b.mul(k0, i64(QUAD))
        rows = smaller(b, b.mul(kc, i64(QUAD)), b.sub(i64(self.k_values), first))
        self.image.pack(ctx, replace(blocks, config=values), dst, p0, count, first, rows, width)
        panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
        b.call(_interleaver(ctx, width), [dst, panels, kc, rows])
        return dst


def _interleaver(ctx: EmitContext, width: int):
    """`interleave(dst, panels, quads, rows)`: `panels` panels of `rows` rows of `width`
    bytes each (k .. k + rows - 1), rewritten as panels of `quads` rows of `width` quads
    (rows past `rows` zero), from the last quad of the last panel back."""
    name = f"{ctx.prefix}.gemm.interleave_quads.{width}"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64])
    if b is None:
        return function
    dst, panels, quads, rows = function.args
    row_type = ir.VectorType(I8, width)
    zeros = ir.Constant(row_type, None)
    with for_range(b, panels, "panel") as back_panel:
        panel = b.sub(b.sub(panels, i64(1)), back_panel)
        source = b.gep(dst, [b.mul(b.mul(panel, rows), i64(width))], source_etype=I8)
        target = b.gep(dst, [b.mul(b.mul(panel, quads), i64(QUAD * width))], source_etype=I8)
        with for_range(b, quads, "quad") as back_quad:
            quad = b.sub(b.sub(quads, i64(1)), back_quad)

            def load(row):
                at = b.gep(source, [b.mul(row, i64(width))], source_etype=I8)
                return b.load(at, typ=row_type, align=1)

            found = _four(b, b.mul(quad, i64(QUAD)), rows, load, zeros)
            at = b.gep(target, [b.mul(quad, i64(QUAD * width))], source_etype=I8)
            b.store(_interleave(b, found, width), at, align=1)
    b.ret_void()
    return function


def _interleave(b: ir.IRBuilder, rows: list, width: int) -> ir.Value:
    """Four <width x i8> rows as <4 width x i8>: lane j's four bytes, row by row."""
    halves = i32_lanes(range(2 * width))
    order = i32_lanes(x for j in range(width) for x in (j, width + j, 2 * width + j, 3 * width + j))
    low = b.shuffle_vector(rows[0], rows[1], halves)
    high = b.shuffle_vector(rows[2], rows[3], halves)
    return b.shuffle_vector(low, high, order)


def quad_packer(ctx: EmitContext, width: int):
    """`pack(src, p_stride, k_stride, count, kc, k_left, dst)`: panels of `width` quads
    from 8-bit values in memory, k_left values left along k from `src` (zeros past them,
    and in the rows past `count`).

    Rows contiguous along k (a row-major activation matrix) take one 32-bit load per
    whole quad; whole panels of contiguous rows take four vector loads per quad,
    interleaved; the rest go byte by byte.
    """
    name = f"{ctx.prefix}.gemm.pack_quads.{width}"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64, I64, I64, PTR])
    if b is None:
        return function
    src, p_stride, k_stride, count, kc, k_left, dst = function.args
    with panel_loop(b, (src, I8), (dst, I32), p_stride, count, kc, width) as panel:
        source, out, valid, full = panel
        along_k = b.icmp_unsigned("==", k_stride, i64(1))
        across = b.and_(full, b.icmp_unsigned("==", p_stride, i64(1)))
        with b.if_else(along_k) as (rows, other):
            with rows:
                _row_quads(b, source, out, p_stride, kc, k_left, valid, width)
            with other, b.if_else(across) as (vector, rest):
                with vector:
                    _vector_quads(b, source, out, k_stride, kc, k_left, width)
                with rest:
                    _scalar_quads(b, source, out, p_stride, k_stride, kc, k_left, valid, width)
    b.ret_void()
    return function


def _quad_at(b: ir.IRBuilder, at, k_stride, k, k_left) -> ir.Value:
    """The i32 of the four values from k at `at` (k_stride apart), zeros from k_left."""

    def load(kb):
        return b.zext(b.load(b.gep(at, [b.mul(kb, k_stride)], source_etype=I8), typ=I8), I32)

    return _joined(b, _four(b, k, k_left, load, ir.Constant(I32, 0)))


def _four(b: ir.IRBuilder, first, limit, value, zero) -> list[ir.Value]:
    """`value(k)` for k = first .. first + 3, `zero` from `limit` on (never evaluated
    there: a load past the operand's end is not made)."""
    found = []
    for offset in range(QUAD):
        k = b.add(first, i64(offset))
        inside = b.icmp_signed("<", k, limit)
        found.append(branch_value(b, inside, functools.partial(value, k), lambda: zero))
    return found


def _joined(b: ir.IRBuilder, values: list[ir.Value]) -> ir.Value:
    """Four i32s of byte values as one i32 quad, the first in the lowest byte."""
    quad = values[0]
    for byte, value in enumerate(values[1:], start=1):
        quad = b.or_(quad, b.shl(value, ir.Constant(I32, 8 * byte)))
    return quad


def _row_quads(b, source, out, p_stride, kc, k_left, valid, width: int) -> None:
    """Rows contiguous along k: a 32-bit load per whole quad, the last one byte by byte;
    the rows past `valid` zero."""
    whole = smaller(b, kc, b.sdiv(smaller(b, b.mul(kc, i64(QUAD)), k_left), i64(QUAD)))
    whole = b.select(b.icmp_signed("<", whole, i64(0)), i64(0), whole)
    with for_range(b, valid, "row") as j:
        row = b.gep(source, [b.mul(j, p_stride)], source_etype=I8)
        with for_range(b, whole, "kq") as kq:
            value = b.load(b.gep(row, [b.mul(kq, i64(QUAD))], source_etype=I8), typ=I32, align=1)
            b.store(value, b.gep(out, [b.add(b.mul(kq, i64(width)), j)], source_etype=I32))
        with for_range(b, b.sub(kc, whole), "kt") as t:
            kq = b.add(whole, t)
            value = _quad_at(b, row, i64(1), b.mul(kq, i64(QUAD)), k_left)
            b.store(value, b.gep(out, [b.add(b.mul(kq, i64(width)), j)], source_etype=I32))
    with for_range(b, b.sub(i64(width), valid), "pad") as t:
        j = b.add(valid, t)
        with for_range(b, kc, "kq") as kq:
            at = b.gep(out, [b.add(b.mul(kq, i64(width)), j)], source_etype=I32)
            b.store(ir.Constant(I32, 0), at)


def _vector_quads(b, source, out, k_stride, kc, k_left, width: int) -> None:
    """A whole panel of contiguous rows: k .. k + 3 as four vectors, interleaved."""
    row_type = ir.VectorType(I8, width)
    zeros = ir.Constant(row_type, None)

    def load(k):
        return b.load(b.gep(source, [b.mul(k, k_stride)], source_etype=I8), typ=row_type, align=1)

    with for_range(b, kc, "kq") as kq:
        rows = _four(b, b.mul(kq, i64(QUAD)), k_left, load, zeros)
        quads = b.bitcast(_interleave(b, rows, width), ir.VectorType(I32, width))
        b.store(quads, b.gep(out, [b.mul(kq, i64(width))], source_etype=I32), align=4)


def _scalar_quads(b, source, out, p_stride, k_stride, kc, k_left, valid, width: int) -> None:
    """Quads byte by byte; the rows past `valid` zero."""
    with for_range(b, kc, "kq") as kq:
        k = b.mul(kq, i64(QUAD))
        with for_range(b, i64(width), "j") as j:
            row = b.gep(source, [b.mul(j, p_stride)], source_etype=I8)

            def quad(row=row, k=k):
                return _quad_at(b, row, k_stride, k, k_left)

            inside = b.icmp_unsigned("<", j, valid)
            value = branch_value(b, inside, quad, lambda: ir.Constant(I32, 0))
            b.store(value, b.gep(out, [b.add(b.mul(kq, i64(width)), j)], source_etype=I32))
