"""Implicit im2col: packing GEMM B panels straight from an image.

For a 2-D convolution (1-D ones as height 1) the B operand of an image's
GEMM is its column matrix: row k = (channel, kh, kw), column = output pixel
(oh, ow), value image[channel, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw], zero
in the padding.  It is never stored whole: `ImagePanels.pack` writes the
kc x NR panels the micro-kernel reads, through one internal function per
element type, panel width and geometry: with the geometry constant, LLVM
folds the index arithmetic and the choice of contiguous loads or gathers
(densenet121: im2col 15% -> 11% of the run); convolutions of the same
geometry share it.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.lltypes import I32, I64, PTR, i64
from ..llvm.loops import for_range
from .gemm_config import GemmConfig
from .shared_functions import shared_function
from .vectors import (
    i32_lanes,
    lanes,
    masked_gather,
    masked_load,
    pick_lanes,
    smaller,
    splat,
    vector_gep,
)

ROW_CHUNK = 16  # column-matrix rows packed per sweep over the panels
# a panel row spanning more output rows than this is gathered instead of read row by row
MAX_SEGMENTS = 4

# the geometry arguments, in order (strides in elements; ph/pw may be negative)
IMAGE_FIELDS = (
    "c_stride",
    "h_stride",
    "w_stride",
    "height",
    "width",
    "kh",
    "kw",
    "sh",
    "sw",
    "ph",
    "pw",
    "dh",
    "dw",
    "out_width",
)


@dataclass
class ImagePanels:
    """B panels of one image's columns; `base` points at the image's first channel."""

    base: ir.Value
    geometry: tuple[int, ...]  # values of IMAGE_FIELDS

    def pack(self, ctx: EmitContext, blocks, dst, p0, count, k0, kc, width: int):
        packer = _packer(ctx, blocks.config, width, self.geometry)
        ctx.builder.call(packer, [self.base, p0, count, k0, kc, dst])
        return dst


def _packer(ctx: EmitContext, cfg: GemmConfig, width: int, geometry) -> ir.Function:
    """`pack(src, p0, count, k0, kc, dst)`: pixels [p0, p0+count), rows
    [k0, k0+kc) of the column matrix as panels of `width` pixels.

    A panel row is written one vector-wide part at a time (a 48-pixel panel in
    three): the part's pixel coordinates are lane vectors (computed once per
    panel), the padding and the pixels past `count` a lane mask; a part reads
    contiguous input (stride 1 and the part inside one image row, or a
    same-size image stored densely) with a masked load, other parts output row
    by output row or with a masked gather (32-bit offsets: images under 2**31
    elements).
    """
    shape = "_".join(str(v) for v in geometry)
    name = f"{ctx.prefix}.im2col.{cfg.dtype.text}.{width}.{shape}"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64, I64, PTR])
    if b is None:
        return function
    src, p0, count, k0, kc, dst = function.args
    g = {field: i64(v) for field, v in zip(IMAGE_FIELDS, geometry)}
    g32 = {field: ir.Constant(I32, v) for field, v in zip(IMAGE_FIELDS, geometry)}
    ty = cfg.element
    part_width = cfg.lanes if width > cfg.lanes and width % cfg.lanes == 0 else width
    lane = lanes(part_width)
    vec32 = lane.type

    def wide(name):
        return splat(b, g32[name], vec32)

    taps = b.mul(g["kh"], g["kw"])
    segments = _segment_count(geometry, part_width)
    slots = {name: _slot(b, I64) for name in ("ci", "kh", "kw")}
    parts = range(width // part_width)
    coordinates = [{name: _slot(b, vec32) for name in ("oh", "ow")} for _ in parts]
    # densely stored image of the output's size at stride 1: pixel p's tap is p + shift
    dense = b.and_(
        b.and_(
            b.icmp_unsigned("==", g["out_width"], g["width"]),
            b.icmp_unsigned("==", g["h_stride"], g["width"]),
        ),
        b.icmp_unsigned("==", g["sh"], i64(1)),
    )
    unit = b.and_(
        b.icmp_unsigned("==", g["sw"], i64(1)), b.icmp_unsigned("==", g["w_stride"], i64(1))
    )
    # the first panel's pixel coordinates; later panels advance them by `width` pixels,
    # which wraps a lane past the row end at most `wraps` times
    firsts = []
    for part in parts:
        pixels = b.add(splat(b, b.trunc(b.add(p0, i64(part * part_width)), I32), vec32), lane)
        firsts.append((b.udiv(pixels, wide("out_width")), b.urem(pixels, wide("out_width"))))
    wraps = b.add(b.udiv(i64(width), g["out_width"]), i64(1))
    panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
    # rows in chunks, each swept across all panels: the input is read in order
    chunks = b.udiv(b.add(kc, i64(ROW_CHUNK - 1)), i64(ROW_CHUNK))
    with for_range(b, chunks, "chunk") as chunk:
        row0 = b.mul(chunk, i64(ROW_CHUNK))
        rows = smaller(b, i64(ROW_CHUNK), b.sub(kc, row0))
        k = b.add(k0, row0)
        start = (
            b.udiv(k, taps),
            b.udiv(b.urem(k, taps), g["kw"]),
            b.urem(b.urem(k, taps), g["kw"]),
        )
        for (oh, ow), slot in zip(firsts, coordinates):
            b.store(oh, slot["oh"])
            b.store(ow, slot["ow"])
        with for_range(b, panels, "panel") as panel:
            first = b.mul(panel, i64(width))
            valid = smaller(b, b.sub(count, first), i64(width))
            views = [
                _part_view(b, g, wide, slot, lane, valid, part * part_width, unit, dense)
                for part, slot in zip(parts, coordinates)
            ]
            out = b.gep(dst, [b.add(b.mul(first, kc), b.mul(row0, i64(width)))], source_etype=ty)
            for slot, value in zip(("ci", "kh", "kw"), start):
                b.store(value, slots[slot])
            with for_range(b, rows, "k") as r:
                ci, kh, kw = (b.load(slots[n]) for n in ("ci", "kh", "kw"))
                channel = b.gep(src, [b.mul(ci, g["c_stride"])], source_etype=ty)
                for part, view in zip(parts, views):
                    target = b.gep(
                        out, [b.add(b.mul(r, i64(width)), i64(part * part_width))], source_etype=ty
                    )
                    row = _part_row(ctx, b, cfg, view, channel, kh, kw, g, wide, geometry, segments)
                    b.store(row, target, align=cfg.itemsize)
                # next row of the column matrix: kw, then kh, then the channel
                kw = b.add(kw, i64(1))
                kw_wrap = b.icmp_unsigned("==", kw, g["kw"])
                kh = b.select(kw_wrap, b.add(kh, i64(1)), kh)
                kh_wrap = b.icmp_unsigned("==", kh, g["kh"])
                b.store(b.select(kw_wrap, i64(0), kw), slots["kw"])
                b.store(b.select(kh_wrap, i64(0), kh), slots["kh"])
                b.store(b.select(kh_wrap, b.add(ci, i64(1)), ci), slots["ci"])
            # the next panel's coordinates
            for slot in coordinates:
                ow = b.add(b.load(slot["ow"]), splat(b, ir.Constant(I32, width), vec32))
                b.store(ow, slot["ow"])
                with for_range(b, wraps, "wrap"):
                    oh, ow = b.load(slot["oh"]), b.load(slot["ow"])
                    past = b.icmp_unsigned(">=", ow, wide("out_width"))
                    b.store(b.select(past, b.sub(ow, wide("out_width")), ow), slot["ow"])
                    b.store(
                        b.select(past, b.add(oh, splat(b, ir.Constant(I32, 1), vec32)), oh),
                        slot["oh"],
                    )
    b.ret_void()
    return function


@dataclass
class _PartView:
    """One vector-wide part of a panel: its pixels' coordinates and masks."""

    oh: ir.Value
    ow: ir.Value
    in_panel: ir.Value  # lanes of pixels before the panel's end
    row_base: ir.Value  # input row and column of tap (0, 0)
    col_base: ir.Value
    contiguous: ir.Value  # its rows are contiguous input


def _part_view(b, g, wide, slot, lane, valid, offset: int, unit, dense) -> _PartView:
    oh, ow = b.load(slot["oh"]), b.load(slot["ow"])
    vec32 = lane.type
    left = b.sub(valid, i64(offset))  # the part's pixels before the panel's end (may be none)
    left = b.select(b.icmp_signed(">", left, i64(0)), left, i64(0))
    in_panel = b.icmp_unsigned("<", lane, splat(b, b.trunc(left, I32), vec32))
    ow0 = b.zext(b.extract_element(ow, ir.Constant(I32, 0)), I64)
    one_row = b.icmp_unsigned("<=", b.add(ow0, i64(vec32.count)), g["out_width"])
    return _PartView(
        oh,
        ow,
        in_panel,
        b.sub(b.mul(oh, wide("sh")), wide("ph")),
        b.sub(b.mul(ow, wide("sw")), wide("pw")),
        b.and_(unit, b.or_(one_row, dense)),
    )


def _part_row(ctx, b, cfg, view: _PartView, channel, kh, kw, g, wide, geometry, segments):
    """The part's values in column-matrix row (channel, kh, kw)."""
    vec32 = view.oh.type
    ih = b.add(view.row_base, splat(b, b.trunc(b.mul(kh, g["dh"]), I32), vec32))
    iw = b.add(view.col_base, splat(b, b.trunc(b.mul(kw, g["dw"]), I32), vec32))
    inside = b.and_(
        b.icmp_unsigned("<", ih, wide("height")), b.icmp_unsigned("<", iw, wide("width"))
    )
    mask = b.and_(view.in_panel, inside)
    with b.if_else(view.contiguous) as (load, gather):
        with load:
            top = b.sext(b.extract_element(ih, ir.Constant(I32, 0)), I64)
            left = b.sext(b.extract_element(iw, ir.Constant(I32, 0)), I64)
            at = b.gep(channel, [b.add(b.mul(top, g["h_stride"]), left)], source_etype=cfg.element)
            loaded = masked_load(ctx, b, cfg, at, mask)
            load_block = b.block
        with gather:
            if segments:
                spot = (view.oh, view.ow, kh, kw)
                gathered = _row_segments(ctx, b, cfg, channel, spot, mask, geometry, segments)
            else:
                offsets = b.add(b.mul(ih, wide("h_stride")), b.mul(iw, wide("w_stride")))
                pointers = vector_gep(b, channel, offsets, cfg.element)
                gathered = masked_gather(ctx, b, cfg, pointers, mask)
            gather_block = b.block
    row = b.phi(loaded.type)
    row.add_incoming(loaded, load_block)
    row.add_incoming(gathered, gather_block)
    return row


def _segment_count(geometry, width: int) -> int:
    """How many output rows a panel of `width` pixels spans at most, when its rows are
    read row by row (unit or stride-2 columns of a unit-stride image row); 0: gather."""
    field = dict(zip(IMAGE_FIELDS, geometry))
    if field["w_stride"] != 1 or field["sw"] not in (1, 2):
        return 0
    out_width = field["out_width"]
    rows = (out_width + width - 2) // out_width + 1
    return rows if rows <= MAX_SEGMENTS else 0


def _row_segments(ctx, b, cfg: GemmConfig, channel, spot, mask, geometry, segments: int):
    """One panel row read output row by output row: the lanes of each are a contiguous
    run of the image row (every other element at stride 2: twice the lanes loaded, the
    even ones kept), loaded under the lane mask and merged."""
    field = dict(zip(IMAGE_FIELDS, geometry))
    oh, ow, kh, kw = spot
    width = mask.type.count
    stride = field["sw"]
    first_oh = b.zext(b.extract_element(oh, ir.Constant(I32, 0)), I64)
    first_ow = b.zext(b.extract_element(ow, ir.Constant(I32, 0)), I64)
    left = b.sub(b.mul(kw, i64(field["dw"])), i64(field["pw"]))
    result = ir.Constant(ir.VectorType(cfg.element, width), None)
    for r in range(segments):
        out_row = b.add(first_oh, i64(r))
        in_row = b.add(
            b.sub(b.mul(out_row, i64(field["sh"])), i64(field["ph"])), b.mul(kh, i64(field["dh"]))
        )
        same_row = b.icmp_unsigned("==", oh, splat(b, b.trunc(out_row, I32), oh.type))
        lanes_in = b.and_(mask, same_row)
        # the run's first lane and its column: the panel's own, or column 0 past a wrap
        if r == 0:
            start, column = i64(0), b.mul(first_ow, i64(stride))
        else:
            start = b.add(
                b.sub(i64(field["out_width"]), first_ow), i64((r - 1) * field["out_width"])
            )
            column = i64(0)
        offset = b.add(b.mul(in_row, i64(field["h_stride"])), b.add(column, left))
        # lane l of the run at offset + (l - start) * stride (masked lanes never touched)
        base = b.gep(channel, [b.sub(offset, b.mul(start, i64(stride)))], source_etype=cfg.element)
        if stride == 1:
            run = masked_load(ctx, b, cfg, base, lanes_in)
        else:
            spread = [lane // 2 if lane % 2 == 0 else width for lane in range(2 * width)]
            off = ir.Constant(lanes_in.type, None)
            wide_mask = b.shuffle_vector(lanes_in, off, i32_lanes(spread))
            loaded = masked_load(ctx, b, cfg, base, wide_mask)
            run = pick_lanes(b, loaded, range(0, 2 * width, 2))
        result = b.select(lanes_in, run, result)
    return result


def _slot(b: ir.IRBuilder, ty: ir.Type) -> ir.Value:
    with b.goto_entry_block():
        return b.alloca(ty)
