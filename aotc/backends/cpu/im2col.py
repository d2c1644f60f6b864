"""Implicit im2col: packing GEMM B panels straight from an image.

For a 2-D convolution (1-D ones as height 1) the B operand of an image's
GEMM is its column matrix: row k = (channel, kh, kw), column = output pixel
(oh, ow), value image[channel, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw], zero
in the padding.  It is never stored whole: `ImagePanels.pack` writes the
kc x NR panels the micro-kernel reads, through one shared internal function
per element type and panel width whose geometry arguments are run-time
values, so every convolution of a model shares its code.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .context import EmitContext
from .gemm import (
    Blocking,
    GemmConfig,
    lanes,
    masked_gather,
    masked_load,
    shared_function,
    splat,
    vector_gep,
)
from .lltypes import I32, I64, PTR, i64
from .loops import for_range

# the geometry arguments, in order (strides in elements; ph/pw may be negative)
IMAGE_FIELDS = (
    "c_stride", "h_stride", "w_stride", "height", "width", "kh", "kw",
    "sh", "sw", "ph", "pw", "dh", "dw", "out_width",
)  # fmt: skip


@dataclass
class ImagePanels:
    """B panels of one image's columns; `base` points at the image's first channel."""

    base: ir.Value
    geometry: tuple[int, ...]  # values of IMAGE_FIELDS

    def pack(self, ctx: EmitContext, blocks: Blocking, dst, p0, count, k0, kc, width: int):
        packer = _packer(ctx, blocks.config, width)
        args = [self.base, *(i64(v) for v in self.geometry), p0, count, k0, kc, dst]
        ctx.builder.call(packer, args)


def _packer(ctx: EmitContext, cfg: GemmConfig, width: int) -> ir.Function:
    """`pack(src, geometry..., p0, count, k0, kc, dst)`: pixels [p0, p0+count), rows
    [k0, k0+kc) of the column matrix as panels of `width` pixels.

    Each panel row is one vector: the pixels' input coordinates are lane
    vectors (computed once per panel), the padding and the rows past `count`
    a lane mask; a row reads contiguous input (stride 1 and the panel inside
    one image row, or a same-size image stored densely) with a masked load,
    other rows with a masked gather (32-bit offsets: images under 2**31
    elements).
    """
    name = f"{ctx.prefix}.im2col.{cfg.dtype.text}.{width}"
    arg_types = [PTR, *[I64] * len(IMAGE_FIELDS), I64, I64, I64, I64, PTR]
    function, b = shared_function(ctx, name, arg_types)
    if b is None:
        return function
    src, *rest = function.args
    g = dict(zip(IMAGE_FIELDS, rest))
    g32 = {name: b.trunc(value, I32) for name, value in g.items()}
    p0, count, k0, kc, dst = rest[len(IMAGE_FIELDS) :]
    ty = cfg.element
    lane = lanes(width)
    vec32 = lane.type

    def wide(name):
        return splat(b, g32[name], vec32)

    taps = b.mul(g["kh"], g["kw"])
    slots = {name: _slot(b) for name in ("ci", "kh", "kw")}
    # densely stored image of the output's size at stride 1: pixel p's tap is p + shift
    dense = b.and_(
        b.and_(b.icmp_unsigned("==", g["out_width"], g["width"]),
               b.icmp_unsigned("==", g["h_stride"], g["width"])),
        b.icmp_unsigned("==", g["sh"], i64(1)),
    )  # fmt: skip
    unit = b.and_(
        b.icmp_unsigned("==", g["sw"], i64(1)), b.icmp_unsigned("==", g["w_stride"], i64(1))
    )
    panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
    with for_range(b, panels, "panel") as panel:
        first = b.mul(panel, i64(width))
        valid = b.sub(count, first)  # may exceed width
        pixel = b.add(p0, first)
        ow0 = b.urem(pixel, g["out_width"])
        pixels = b.add(splat(b, b.trunc(pixel, I32), vec32), lane)
        oh = b.udiv(pixels, wide("out_width"))
        ow = b.urem(pixels, wide("out_width"))
        in_panel = b.icmp_unsigned(
            "<", lane, splat(b, b.trunc(_min(b, valid, i64(width)), I32), vec32)
        )
        row_base = b.sub(b.mul(oh, wide("sh")), wide("ph"))
        col_base = b.sub(b.mul(ow, wide("sw")), wide("pw"))
        one_row = b.icmp_unsigned("<=", b.add(ow0, i64(width)), g["out_width"])
        contiguous = b.and_(unit, b.or_(one_row, dense))
        out = b.gep(dst, [b.mul(first, kc)], source_etype=ty)
        remainder = b.urem(k0, taps)
        b.store(b.udiv(k0, taps), slots["ci"])
        b.store(b.udiv(remainder, g["kw"]), slots["kh"])
        b.store(b.urem(remainder, g["kw"]), slots["kw"])
        with for_range(b, kc, "k") as k:
            ci, kh, kw = (b.load(slots[n]) for n in ("ci", "kh", "kw"))
            ih = b.add(row_base, splat(b, b.trunc(b.mul(kh, g["dh"]), I32), vec32))
            iw = b.add(col_base, splat(b, b.trunc(b.mul(kw, g["dw"]), I32), vec32))
            inside = b.and_(
                b.icmp_unsigned("<", ih, wide("height")), b.icmp_unsigned("<", iw, wide("width"))
            )
            mask = b.and_(in_panel, inside)
            channel = b.gep(src, [b.mul(ci, g["c_stride"])], source_etype=ty)
            target = b.gep(out, [b.mul(k, i64(width))], source_etype=ty)
            with b.if_else(contiguous) as (load, gather):
                with load:
                    first_row = b.sext(b.extract_element(ih, ir.Constant(I32, 0)), I64)
                    first_col = b.sext(b.extract_element(iw, ir.Constant(I32, 0)), I64)
                    start = b.add(b.mul(first_row, g["h_stride"]), first_col)
                    row = masked_load(ctx, b, cfg, b.gep(channel, [start], source_etype=ty), mask)
                    b.store(row, target, align=cfg.itemsize)
                with gather:
                    offsets = b.add(b.mul(ih, wide("h_stride")), b.mul(iw, wide("w_stride")))
                    pointers = vector_gep(b, channel, offsets, ty)
                    b.store(masked_gather(ctx, b, cfg, pointers, mask), target, align=cfg.itemsize)
            # next row of the column matrix: kw, then kh, then the channel
            kw = b.add(kw, i64(1))
            kw_wrap = b.icmp_unsigned("==", kw, g["kw"])
            kh = b.select(kw_wrap, b.add(kh, i64(1)), kh)
            kh_wrap = b.icmp_unsigned("==", kh, g["kh"])
            b.store(b.select(kw_wrap, i64(0), kw), slots["kw"])
            b.store(b.select(kh_wrap, i64(0), kh), slots["kh"])
            b.store(b.select(kh_wrap, b.add(ci, i64(1)), ci), slots["ci"])
    b.ret_void()
    return function


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _slot(b: ir.IRBuilder) -> ir.Value:
    with b.goto_entry_block():
        return b.alloca(I64)
