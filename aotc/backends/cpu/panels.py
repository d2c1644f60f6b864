"""GEMM operands that pack themselves into the panels the micro-kernel reads (`Panels`).

An operand in strided memory is packed by packing.py's packers (`StridedPanels`), one
computed element by element by a loop over its panels (`GeneratedPanels`); a constant
operand that prepack.py packed at compile time into the weights blob is read in place
(`PackedPanels`), with no packing buffer, as may be A's rows in memory where the memory
plan has no room for its panels (`RowsInPlace`).  im2col.py's `ImagePanels` and pairs.py's
pair packers are `Panels` too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.lltypes import i64
from ..llvm.loops import branch_value, for_range
from .blocking import Blocking
from .packing import strided_packer


class Panels(Protocol):
    """A GEMM operand that packs itself: A with M as its panel dim, B with N.

    `pack` writes rows [p0, p0+count) of the panel dim and depth [k0, k0+kc)
    as ceil(count/width) panels of kc x width elements (panel-major, then k,
    then the width), zero-filling the last panel's rows past `count`, and
    returns where the panels are: `dst`, or for a pre-packed operand its own
    copy (p0 is then a multiple of `width`).
    """

    def pack(
        self, ctx: EmitContext, blocks: Blocking, dst, p0, count, k0, kc, width: int
    ) -> ir.Value: ...


@dataclass
class StridedPanels:
    """An operand in memory: element (p, k) at base + p*p_stride + k*k_stride elements."""

    base: ir.Value
    p_stride: int
    k_stride: int

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        b = ctx.builder
        offset = b.add(b.mul(p0, i64(self.p_stride)), b.mul(k0, i64(self.k_stride)))
        src = b.gep(self.base, [offset], source_etype=blocks.config.element)
        # 32-bit gather offsets when the panel's span allows (it does but for huge strides)
        gather = abs(self.p_stride) * width < 2**31
        packer = strided_packer(ctx, blocks.config, width, gather)
        b.call(packer, [src, i64(self.p_stride), i64(self.k_stride), count, kc, dst])
        return dst


@dataclass
class RowsInPlace:
    """A's rows read where they are, `p_stride` elements apart, k contiguous: the
    micro-kernel loads each row's values from them (`micro_kernel`'s `a_rows`), no
    packing buffer, as MLAS reads A.  `pack` gives where row p0's value k0 is."""

    base: ir.Value
    p_stride: int

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        b = ctx.builder
        offset = b.add(b.mul(p0, i64(self.p_stride)), k0)
        return b.gep(self.base, [offset], source_etype=blocks.config.element)


@dataclass
class GeneratedPanels:
    """An operand computed element by element: `element(p, k) -> value` (i64 indices)."""

    element: Callable[[ir.Value, ir.Value], ir.Value]

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        b = ctx.builder
        config = blocks.config
        zero = ir.Constant(config.element, 0)
        panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
        with for_range(b, panels, "gpanel") as panel:
            first = b.mul(panel, i64(width))
            out = b.gep(dst, [b.mul(first, kc)], source_etype=config.element)
            with for_range(b, kc, "gk") as k:
                row = b.gep(out, [b.mul(k, i64(width))], source_etype=config.element)
                with for_range(b, width, "gj") as j:
                    p = b.add(first, j)
                    inside = b.icmp_unsigned("<", p, count)
                    value = branch_value(
                        b, inside, lambda: self.element(b.add(p0, p), b.add(k0, k)), lambda: zero
                    )
                    b.store(value, b.gep(row, [j], source_etype=config.element))
        return dst


@dataclass
class PackedPanels:
    """A constant operand packed at compile time (prepack.py) for one blocking: K slice
    by K slice of `kc`, each slice all panels of `width` over the `padded` panel dim,
    so that a block's panels are contiguous and read in place."""

    base: ir.Value  # this batch element's panels
    padded: int  # the panel dim rounded up to `width`
    kc: int
    width: int

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        assert (blocks.kc, width) == (self.kc, self.width), "packed for another blocking"
        b = ctx.builder
        # the slices before k0 are whole: padded * k0 elements
        offset = b.add(b.mul(k0, i64(self.padded)), b.mul(p0, kc))
        return b.gep(self.base, [offset], source_etype=blocks.config.element)
