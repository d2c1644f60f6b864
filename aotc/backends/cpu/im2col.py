"""Implicit im2col: packing GEMM B panels straight from an image.

For a convolution of any spatial rank (1-D ones as 2-D of height 1) the B operand of
an image's GEMM is its column matrix: row k = (channel, taps...), column = output
pixel, value image[channel, o*s + tap*d - p per spatial dim], zero in the padding.
The innermost spatial dim is the image's columns; the outer ones, flattened, its rows
(for 3-D: depth x height), each tap's padding decided per dim.  It is never stored
whole: `ImagePanels.pack` writes the kc x NR panels the micro-kernel reads, through
one internal function per element type, panel width and geometry: with the geometry
constant, LLVM folds the index arithmetic and the choice of contiguous loads or
gathers (densenet121: im2col 15% -> 11% of the run); convolutions of the same
geometry share it.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.lltypes import I32, I64, PTR, i64
from ..llvm.loops import for_range
from .gemm_config import GemmConfig
from .image_geometry import ImageGeometry, split
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


@dataclass
class ImagePanels:
    """B panels of one image's columns; `base` points at the image's first channel."""

    base: ir.Value
    geometry: ImageGeometry

    def pack(self, ctx: EmitContext, blocks, dst, p0, count, k0, kc, width: int):
        packer = _packer(ctx, blocks.config, width, self.geometry)
        ctx.builder.call(packer, [self.base, p0, count, k0, kc, dst])
        return dst


def _packer(ctx: EmitContext, cfg: GemmConfig, width: int, geo: ImageGeometry) -> ir.Function:
    """`pack(src, p0, count, k0, kc, dst)`: pixels [p0, p0+count), rows
    [k0, k0+kc) of the column matrix as panels of `width` pixels.

    A panel row is written one vector-wide part at a time (a 48-pixel panel in
    three): the part's pixel coordinates are lane vectors (its flat output row and
    column, computed once per panel), the padding and the pixels past `count` a lane
    mask; a part reads contiguous input (stride 1 and the part inside one image row,
    or a same-size image stored densely) with a masked load, other parts output row
    by output row or with a masked gather (32-bit offsets: images under 2**31
    elements).
    """
    name = f"{ctx.prefix}.im2col.{cfg.dtype.text}.{width}.{geo.name}"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64, I64, PTR])
    if b is None:
        return function
    src, p0, count, k0, kc, dst = function.args
    ty = cfg.element
    part_width = cfg.lanes if width > cfg.lanes and width % cfg.lanes == 0 else width
    lane = lanes(part_width)
    vec32 = lane.type
    out_width = geo.out[-1]

    def wide(value: int) -> ir.Value:
        return splat(b, ir.Constant(I32, value), vec32)

    segments = _segment_count(geo, part_width)
    # the row's channel and tap per spatial dim, advanced row by row
    tap_slots = [_slot(b, I64) for _ in range(1 + geo.rank)]
    parts = range(width // part_width)
    coordinates = [{name: _slot(b, vec32) for name in ("oh", "ow")} for _ in parts]
    # the first panel's pixel coordinates; later panels advance them by `width` pixels,
    # which wraps a lane past the row end at most `wraps` times
    firsts = []
    for part in parts:
        pixels = b.add(splat(b, b.trunc(b.add(p0, i64(part * part_width)), I32), vec32), lane)
        firsts.append((b.udiv(pixels, wide(out_width)), b.urem(pixels, wide(out_width))))
    wraps = i64(width // out_width + 1)
    panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
    # rows in chunks, each swept across all panels: the input is read in order
    chunks = b.udiv(b.add(kc, i64(ROW_CHUNK - 1)), i64(ROW_CHUNK))
    with for_range(b, chunks, "chunk") as chunk:
        row0 = b.mul(chunk, i64(ROW_CHUNK))
        rows = smaller(b, i64(ROW_CHUNK), b.sub(kc, row0))
        start = split(b, b.add(k0, row0), (0, *geo.kernel))
        for (oh, ow), slot in zip(firsts, coordinates):
            b.store(oh, slot["oh"])
            b.store(ow, slot["ow"])
        with for_range(b, panels, "panel") as panel:
            first = b.mul(panel, i64(width))
            valid = smaller(b, b.sub(count, first), i64(width))
            views = [
                _part_view(b, geo, wide, slot, lane, valid, part * part_width)
                for part, slot in zip(parts, coordinates)
            ]
            out = b.gep(dst, [b.add(b.mul(first, kc), b.mul(row0, i64(width)))], source_etype=ty)
            for slot, value in zip(tap_slots, start):
                b.store(value, slot)
            with for_range(b, rows, "k") as r:
                ci, *taps = (b.load(slot) for slot in tap_slots)
                channel = b.gep(src, [b.mul(ci, i64(geo.c_stride))], source_etype=ty)
                for part, view in zip(parts, views):
                    target = b.gep(
                        out, [b.add(b.mul(r, i64(width)), i64(part * part_width))], source_etype=ty
                    )
                    row = _part_row(ctx, b, cfg, view, channel, taps, geo, wide, segments)
                    b.store(row, target, align=cfg.itemsize)
                _next_row(b, tap_slots, [ci, *taps], geo.kernel)
            # the next panel's coordinates
            for slot in coordinates:
                ow = b.add(b.load(slot["ow"]), wide(width))
                b.store(ow, slot["ow"])
                with for_range(b, wraps, "wrap"):
                    oh, ow = b.load(slot["oh"]), b.load(slot["ow"])
                    past = b.icmp_unsigned(">=", ow, wide(out_width))
                    b.store(b.select(past, b.sub(ow, wide(out_width)), ow), slot["ow"])
                    b.store(b.select(past, b.add(oh, wide(1)), oh), slot["oh"])
    b.ret_void()
    return function


def _next_row(b: ir.IRBuilder, slots, values, kernel) -> None:
    """The next row of the column matrix: the innermost tap first, carrying into the
    outer taps, then the channel."""
    carry = None
    for i in reversed(range(len(kernel))):
        value = values[1 + i]
        bumped = b.add(value, i64(1))
        value = bumped if carry is None else b.select(carry, bumped, value)
        carry = b.icmp_unsigned("==", value, i64(kernel[i]))
        b.store(b.select(carry, i64(0), value), slots[1 + i])
    ci = values[0]
    b.store(b.select(carry, b.add(ci, i64(1)), ci), slots[0])


@dataclass
class _PartView:
    """One vector-wide part of a panel: its pixels' coordinates and masks."""

    oh: ir.Value  # the flat output row (over the outer spatial dims)
    ow: ir.Value
    in_panel: ir.Value  # lanes of pixels before the panel's end
    row_bases: list[ir.Value]  # input row per outer dim, and column, of tap 0
    col_base: ir.Value
    contiguous: ir.Value  # its rows are contiguous input


def _part_view(b, geo: ImageGeometry, wide, slot, lane, valid, offset: int) -> _PartView:
    oh, ow = b.load(slot["oh"]), b.load(slot["ow"])
    vec32 = lane.type
    left = b.sub(valid, i64(offset))  # the part's pixels before the panel's end (may be none)
    left = b.select(b.icmp_signed(">", left, i64(0)), left, i64(0))
    in_panel = b.icmp_unsigned("<", lane, splat(b, b.trunc(left, I32), vec32))
    ow0 = b.zext(b.extract_element(ow, ir.Constant(I32, 0)), I64)
    one_row = b.icmp_unsigned("<=", b.add(ow0, i64(vec32.count)), i64(geo.out[-1]))
    outer = split(b, oh, geo.out[:-1])
    row_bases = [
        b.sub(b.mul(o, wide(geo.stride[i])), wide(geo.pad[i])) for i, o in enumerate(outer)
    ]
    contiguous = ir.Constant(ir.IntType(1), geo.unit_columns)
    if not geo.dense:
        contiguous = b.and_(contiguous, one_row)
    return _PartView(
        oh,
        ow,
        in_panel,
        row_bases,
        b.sub(b.mul(ow, wide(geo.stride[-1])), wide(geo.pad[-1])),
        contiguous,
    )


def _part_row(ctx, b, cfg, view: _PartView, channel, taps, geo: ImageGeometry, wide, segments):
    """The part's values in column-matrix row (channel, taps...)."""
    vec32 = view.oh.type

    def shifted(base, tap, dim):
        return b.add(base, splat(b, b.trunc(b.mul(tap, i64(geo.dilation[dim])), I32), vec32))

    last = geo.rank - 1
    rows = [shifted(base, tap, i) for i, (base, tap) in enumerate(zip(view.row_bases, taps))]
    iw = shifted(view.col_base, taps[-1], last)
    inside = b.icmp_unsigned("<", iw, wide(geo.sizes[-1]))
    for i, ih in enumerate(rows):
        inside = b.and_(b.icmp_unsigned("<", ih, wide(geo.sizes[i])), inside)
    mask = b.and_(view.in_panel, inside)

    def first_lane(vector):
        return b.sext(b.extract_element(vector, ir.Constant(I32, 0)), I64)

    with b.if_else(view.contiguous) as (load, gather):
        with load:
            at = first_lane(iw)
            for i, ih in enumerate(rows):
                at = b.add(b.mul(first_lane(ih), i64(geo.strides[i])), at)
            loaded = masked_load(ctx, b, cfg, b.gep(channel, [at], source_etype=cfg.element), mask)
            load_block = b.block
        with gather:
            if segments:
                spot = (view.oh, view.ow, taps)
                gathered = _row_segments(ctx, b, cfg, channel, spot, mask, geo, segments)
            else:
                offsets = b.mul(iw, wide(geo.strides[-1]))
                for i, ih in enumerate(rows):
                    offsets = b.add(b.mul(ih, wide(geo.strides[i])), offsets)
                pointers = vector_gep(b, channel, offsets, cfg.element)
                gathered = masked_gather(ctx, b, cfg, pointers, mask)
            gather_block = b.block
    row = b.phi(loaded.type)
    row.add_incoming(loaded, load_block)
    row.add_incoming(gathered, gather_block)
    return row


def _segment_count(geo: ImageGeometry, width: int) -> int:
    """How many output rows a panel of `width` pixels spans at most, when its rows are
    read row by row (unit or stride-2 columns of a unit-stride image row); 0: gather."""
    if geo.strides[-1] != 1 or geo.stride[-1] not in (1, 2):
        return 0
    out_width = geo.out[-1]
    rows = (out_width + width - 2) // out_width + 1
    return rows if rows <= MAX_SEGMENTS else 0


def _row_segments(ctx, b, cfg: GemmConfig, channel, spot, mask, geo: ImageGeometry, segments):
    """One panel row read output row by output row: the lanes of each are a contiguous
    run of the image row (every other element at stride 2: twice the lanes loaded, the
    even ones kept), loaded under the lane mask and merged."""
    oh, ow, taps = spot
    width = mask.type.count
    stride, out_width = geo.stride[-1], geo.out[-1]
    first_oh = b.zext(b.extract_element(oh, ir.Constant(I32, 0)), I64)
    first_ow = b.zext(b.extract_element(ow, ir.Constant(I32, 0)), I64)
    left = b.sub(b.mul(taps[-1], i64(geo.dilation[-1])), i64(geo.pad[-1]))
    result = ir.Constant(ir.VectorType(cfg.element, width), None)
    for r in range(segments):
        out_row = b.add(first_oh, i64(r))
        row_offset = None
        for i, o in enumerate(split(b, out_row, geo.out[:-1])):
            in_row = b.add(
                b.sub(b.mul(o, i64(geo.stride[i])), i64(geo.pad[i])),
                b.mul(taps[i], i64(geo.dilation[i])),
            )
            term = b.mul(in_row, i64(geo.strides[i]))
            row_offset = term if row_offset is None else b.add(row_offset, term)
        same_row = b.icmp_unsigned("==", oh, splat(b, b.trunc(out_row, I32), oh.type))
        lanes_in = b.and_(mask, same_row)
        # the run's first lane and its column: the panel's own, or column 0 past a wrap
        if r == 0:
            start, column = i64(0), b.mul(first_ow, i64(stride))
        else:
            start = b.add(b.sub(i64(out_width), first_ow), i64((r - 1) * out_width))
            column = i64(0)
        offset = b.add(row_offset, b.add(column, left))
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
