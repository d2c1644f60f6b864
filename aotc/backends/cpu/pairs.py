"""Operands of the integer GEMM: 8- or 16-bit integers packed as 16-bit pairs along k.

An integer GEMM (`GemmConfig.paired`) keeps the BLIS loop nest and micro-kernel of the
float one, on 32-bit panel elements that each hold two of an operand's values, at k
and k + 1 (the even one in the low half), so that one pmaddwd multiplies and sums both
pairs of a lane.  Its K counts pairs: ceil(K / 2), an odd K's last pair ending in a zero.

`pair_up` turns the float GEMM's packers (`StridedPanels`, `GeneratedPanels`, im2col's
`ImagePanels`) into ones that write such pairs; prepackable.py's `pair_matrix` does the
same in numpy for the operands packed at compile time (prepack.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from llvmlite import ir

from ...ir import DType
from ..llvm.context import EmitContext
from ..llvm.lltypes import I16, I32, I64, PTR, i64, storage_type
from ..llvm.loops import branch_value, for_range
from .blocking import Blocking
from .gemm_config import GemmConfig
from .im2col import ImagePanels
from .packing import clamped_rows, panel_loop
from .panels import GeneratedPanels, StridedPanels
from .shared_functions import shared_function
from .vectors import i32_lanes


def pairs_of(k_values: int) -> int:
    """The pairs that K values along k make."""
    return -(-k_values // 2)


def paired_factory(factory, source: DType, k_values: int):
    """A GEMM operand factory `(ctx, sources, index) -> panels` whose panels hold pairs
    of `source` values along k (`pair_up`)."""
    return lambda ctx, sources, index: pair_up(factory(ctx, sources, index), source, k_values)


def pair_up(panels, source: DType, k_values: int):
    """Packers of pairs for an operand of `source` values that `panels` reads (their
    indices along k are then pairs), with K = `k_values` (even for an image's)."""
    if isinstance(panels, ImagePanels):
        assert k_values % 2 == 0 and source is DType.S16, "image pairs are whole s16 ones"
        return PairedImagePanels(panels)
    if isinstance(panels, StridedPanels):
        return PairedStridedPanels(panels.base, panels.p_stride, panels.k_stride, source, k_values)
    if isinstance(panels, GeneratedPanels):
        return PairedGeneratedPanels(panels.element, source, k_values)
    raise TypeError(f"no pairs of {type(panels).__name__}")


def _widen(b: ir.IRBuilder, value: ir.Value, source: DType) -> ir.Value:
    """A `source` value (or vector of them) as 16-bit integers."""
    if source is DType.S16:
        return value
    count = value.type.count if isinstance(value.type, ir.VectorType) else 0
    wide = ir.VectorType(I16, count) if count else I16
    return b.zext(value, wide) if source is DType.U8 else b.sext(value, wide)


def _pair(b: ir.IRBuilder, even: ir.Value, odd: ir.Value) -> ir.Value:
    """Two 16-bit values as one i32, `even` in the low half."""
    low = b.zext(even, I32)
    return b.or_(low, b.shl(b.zext(odd, I32), ir.Constant(I32, 16)))


@dataclass
class PairedGeneratedPanels:
    """An operand of `source` values computed element by element (`element(p, k)`, i64
    indices), packed as pairs along k; K = `k_values`."""

    element: Callable[[ir.Value, ir.Value], ir.Value]
    source: DType
    k_values: int

    def pack(self, ctx, blocks: Blocking, dst, p0, count, k0, kc, width):
        b = ctx.builder

        def pair(p, kp):
            k = b.mul(kp, i64(2))
            odd_k = b.add(k, i64(1))
            even = _widen(b, self.element(p, k), self.source)
            odd = branch_value(
                b,
                b.icmp_signed("<", odd_k, i64(self.k_values)),
                lambda: _widen(b, self.element(p, odd_k), self.source),
                lambda: ir.Constant(I16, 0),
            )
            return _pair(b, even, odd)

        return GeneratedPanels(pair).pack(ctx, blocks, dst, p0, count, k0, kc, width)


@dataclass
class PairedStridedPanels:
    """An operand of `source` values in memory, element (p, k) at base + p*p_stride +
    k*k_stride elements, packed as pairs along k; K = `k_values`."""

    base: ir.Value
    p_stride: int
    k_stride: int
    source: DType
    k_values: int

    def pack(self, ctx, blocks: Blocking, dst, p0, count, k0, kc, width):
        b = ctx.builder
        first_k = b.mul(k0, i64(2))
        offset = b.add(b.mul(p0, i64(self.p_stride)), b.mul(first_k, i64(self.k_stride)))
        src = b.gep(self.base, [offset], source_etype=storage_type(self.source))
        packer = pair_packer(ctx, self.source, width)
        k_left = b.sub(i64(self.k_values), first_k)
        b.call(packer, [src, i64(self.p_stride), i64(self.k_stride), count, kc, k_left, dst])
        return dst


def pair_packer(ctx: EmitContext, source: DType, width: int):
    """`pack(src, p_stride, k_stride, count, kc, k_left, dst)`: panels of `width` pairs
    from memory, k_left values left along k from `src` (an odd one's pair ends in zero).

    Whole panels of contiguous rows (p_stride == 1) take a vector load per k and
    interleave two of them; the rest go element by element (addresses clamped inside
    the operand, the values past it replaced by zeros).
    """
    name = f"{ctx.prefix}.gemm.pack_pairs.{source.text}.{width}"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64, I64, I64, PTR])
    if b is None:
        return function
    src, p_stride, k_stride, count, kc, k_left, dst = function.args
    ty = storage_type(source)
    with panel_loop(b, (src, ty), (dst, I32), p_stride, count, kc, width) as panel:
        source_panel, out, valid, full = panel
        contiguous = b.and_(full, b.icmp_unsigned("==", p_stride, i64(1)))
        with b.if_else(contiguous) as (vector, other):
            with vector:
                _vector_pairs(b, source, source_panel, out, k_stride, kc, k_left, width)
            with other:
                _scalar_pairs(
                    b, source, source_panel, out, p_stride, k_stride, kc, k_left, valid, width
                )
    b.ret_void()
    return function


def _vector_pairs(b, source: DType, src, out, k_stride, kc, k_left, width: int) -> None:
    """Rows k and k + 1 of a whole contiguous panel as vectors, interleaved into pairs."""
    ty = storage_type(source)
    row_type = ir.VectorType(ty, width)
    zeros = ir.Constant(ir.VectorType(I16, width), None)
    interleave = i32_lanes(x for j in range(width) for x in (j, width + j))
    with for_range(b, kc, "kp") as kp:
        k = b.mul(kp, i64(2))
        even = b.load(b.gep(src, [b.mul(k, k_stride)], source_etype=ty), typ=row_type, align=1)
        odd_k = b.add(k, i64(1))

        def odd_row():
            row = b.gep(src, [b.mul(odd_k, k_stride)], source_etype=ty)
            return _widen(b, b.load(row, typ=row_type, align=1), source)

        odd = branch_value(b, b.icmp_signed("<", odd_k, k_left), odd_row, lambda: zeros)
        pairs = b.shuffle_vector(_widen(b, even, source), odd, interleave)
        vector = b.bitcast(pairs, ir.VectorType(I32, width))
        b.store(vector, b.gep(out, [b.mul(kp, i64(width))], source_etype=I32), align=4)


def _scalar_pairs(b, source: DType, src, out, p_stride, k_stride, kc, k_left, valid, width):
    """Pairs element by element; rows past `valid` and the odd k past `k_left` zero."""
    ty = storage_type(source)
    zero = ir.Constant(I16, 0)
    rows = clamped_rows(b, valid, p_stride, width)
    with for_range(b, kc, "kp") as kp:
        k = b.mul(kp, i64(2))
        odd_k = b.add(k, i64(1))
        has_odd = b.icmp_signed("<", odd_k, k_left)
        even_at = b.gep(src, [b.mul(k, k_stride)], source_etype=ty)
        odd_at = b.gep(src, [b.mul(b.select(has_odd, odd_k, k), k_stride)], source_etype=ty)
        q = b.gep(out, [b.mul(kp, i64(width))], source_etype=I32)
        for j, (inside, offset) in enumerate(rows):
            even = _widen(b, b.load(b.gep(even_at, [offset], source_etype=ty), typ=ty), source)
            odd = _widen(b, b.load(b.gep(odd_at, [offset], source_etype=ty), typ=ty), source)
            even = b.select(inside, even, zero)
            odd = b.select(b.and_(inside, has_odd), odd, zero)
            b.store(_pair(b, even, odd), b.gep(q, [i64(j)], source_etype=I32))


@dataclass
class PairedImagePanels:
    """An s16 image's column matrix (im2col.py) as pairs: its 2 kc rows packed as s16
    panels, then each two rows interleaved in place into one row of pairs (which takes
    the same bytes).  K must be even, so that no pair reads past the last row."""

    image: ImagePanels

    def pack(self, ctx, blocks: Blocking, dst, p0, count, k0, kc, width):
        b = ctx.builder
        cfg = blocks.config
        halves = GemmConfig(DType.S16, cfg.lanes, cfg.blocks, cfg.fma)
        rows = b.mul(kc, i64(2))
        self.image.pack(
            ctx, replace(blocks, config=halves), dst, p0, count, b.mul(k0, i64(2)), rows, width
        )
        panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
        b.call(_interleaver(ctx, width), [dst, b.mul(panels, kc)])
        return dst


def _interleaver(ctx: EmitContext, width: int):
    """`interleave(panels, rows)`: each of `rows` rows of `width` pairs, stored as two
    rows of `width` s16 values (k, then k + 1), rewritten as the pairs."""
    name = f"{ctx.prefix}.gemm.interleave_pairs.{width}"
    function, b = shared_function(ctx, name, [PTR, I64])
    if b is None:
        return function
    dst, rows = function.args
    row_type = ir.VectorType(I16, width)
    order = i32_lanes(x for j in range(width) for x in (j, width + j))
    with for_range(b, rows, "row") as row:
        even_at = b.gep(dst, [b.mul(row, i64(2 * width))], source_etype=I16)
        odd_at = b.gep(even_at, [i64(width)], source_etype=I16)
        even = b.load(even_at, typ=row_type, align=2)
        odd = b.load(odd_at, typ=row_type, align=2)
        b.store(b.shuffle_vector(even, odd, order), even_at, align=2)
    b.ret_void()
    return function
