"""Convolution: the element rule (any dtype, any dims), and GEMM plans for f32/f64.

The rule: an output element sums, over its feature group's input features
and the window taps, input * kernel; taps landing in padding or between
base-dilated elements are skipped.  Batch groups (batch_group_count > 1)
pair output feature group g with the g-th block of input batch rows.

`plan_convolution` (for contraction.py) handles outputs laid out
[batch, feature, spatial...] (NCHW): per image and feature group a GEMM of
the weights [Cout_g, Cin_g*taps] by the image's columns [Cin_g*taps, pixels],
packed straight from the image (im2col.py; through the input's generator
for other layouts, 3-D windows or base dilation), or, for 1x1 stride-1
windows, the image itself as a strided matrix; depthwise convolutions (one
input channel per group) are a direct loop instead, and 3x3 stride-1 ones with a
constant kernel and channels enough Winograd F(2x2, 3x3) or F(4x4, 3x3) (winograd.py).
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...buffers import Slice
from ...ir import DType, Instruction
from ..llvm.context import Gen
from ..llvm.elemental import delinearize, split_index
from ..llvm.lltypes import I1, i64, register_type
from ..llvm.loops import branch_value, for_range, if_then
from ..llvm.window import all_of, tap_position
from . import winograd
from .blocked_gemm import emit_region
from .direct_conv import DirectConvPlan, plan_direct
from .gemm import GemmPlan
from .gemm_config import gemm_config
from .im2col import IMAGE_FIELDS, ImagePanels
from .pairs import paired_factory, pairs_of
from .panels import GeneratedPanels, StridedPanels
from .parallel import parallel_loop_nest
from .plane_conv import PlaneConvPlan, plan_planes
from .prepackable import StridedLayout, strided_layout
from .vectors import masked_load, pick_lanes, splat
from .views import affine, merged_stride

# -- GEMM plans (contraction.py) ---------------------------------------------------


def plan_convolution(
    target, conv: Instruction, views
) -> GemmPlan | DepthwisePlan | DirectConvPlan | PlaneConvPlan | winograd.WinogradPlan | None:
    """A convolution whose output is [batch, feature, spatial...] (NCHW-like) as GEMMs.

    Per image and feature group: C[Cout_g, pixels] = weights[Cout_g, Cin_g * taps]
    x columns[Cin_g * taps, pixels].  The columns are packed straight from the
    image (implicit im2col) or, for 1x1 stride-1 windows, are the image itself;
    depthwise convolutions run as a direct loop instead, and the 3x3 stride-1 ones that
    `winograd.eligible` takes as Winograd.
    """
    shape = conv.array_shape
    config = gemm_config(target, shape.dtype, conv.operands[0].shape.dtype)
    if config is None or conv.batch_group_count != 1:
        return None
    geometry = _Geometry(conv)
    if config.paired:
        return _plan_paired(config, geometry, *(affine(v) for v in views))
    if not geometry.nchw_output:
        return plan_direct(target, conv, views)
    if geometry.work == 0:
        return None
    lhs_view, rhs_view = views
    if geometry.cin_g == 1 and geometry.groups > 1:
        return _plan_depthwise(geometry, lhs_view)
    lhs_view, rhs_view = affine(lhs_view), affine(rhs_view)
    g = geometry
    weights_layout = _weights_layout(g, rhs_view)
    if target.winograd and winograd.eligible(g, lhs_view, weights_layout):
        return winograd.plan_winograd(config, g, lhs_view, weights_layout)
    weights = _weights_factory(g, weights_layout)
    planar = plan_planes(config, g, lhs_view, weights_layout, weights)
    if planar is not None:
        return planar
    columns = _columns_factory(g, lhs_view)
    return GemmPlan(
        config, (g.batch, g.groups), g.cout_g, g.pixels, g.k, g.pixels, weights, columns,
        *_placement(g), layouts=(weights_layout, None), operands=(1, 0),
    )  # fmt: skip


def _placement(g: _Geometry):
    """GemmPlan's `c_offset` and `out_index` of an NCHW convolution's result."""

    def c_offset(ctx, index):
        b = ctx.builder
        image, group = index
        return b.mul(b.add(b.mul(image, i64(g.cout)), b.mul(group, i64(g.cout_g))), i64(g.pixels))

    def out_index(ctx, index, row, col):
        image, group = index
        feature = ctx.builder.add(ctx.builder.mul(group, i64(g.cout_g)), row)
        return g.output_index(ctx.builder, image, feature, col)

    return c_offset, out_index


def _plan_paired(config, g: _Geometry, lhs_view, rhs_view) -> GemmPlan | None:
    """An integer convolution (16-bit pairs, pairs.py) as im2col GEMMs; depthwise ones
    and other layouts are left to the element rule."""
    if not g.nchw_output or g.work == 0 or (g.cin_g == 1 and g.groups > 1):
        return None
    weights_layout = _weights_layout(g, rhs_view)
    weights_source = rhs_view.dtype if weights_layout is not None else g.rhs.dtype
    if lhs_view is not None and (lhs_view.dtype is not DType.S16 or g.k % 2):
        lhs_view = None  # im2col packs whole pairs of s16 rows only
    columns_source = lhs_view.dtype if lhs_view is not None else g.lhs.dtype
    paired = []
    for factory, source in ((_weights_factory(g, weights_layout), weights_source),
                            (_columns_factory(g, lhs_view), columns_source)):  # fmt: skip
        paired.append(paired_factory(factory, source, g.k))
    return GemmPlan(
        config, (g.batch, g.groups), g.cout_g, g.pixels, pairs_of(g.k), g.pixels, *paired,
        *_placement(g), layouts=(weights_layout, None), operands=(1, 0), paired_k=g.k,
        sources=(weights_source, columns_source),
    )  # fmt: skip


class _Geometry:
    """Extents of one convolution, in the terms of its GEMM."""

    def __init__(self, conv: Instruction):
        self.conv = conv
        self.dims = dims = conv.conv
        self.window = conv.window
        self.lhs = conv.operands[0].shape
        self.rhs = conv.operands[1].shape
        self.out = conv.array_shape
        rank, spatial = self.out.rank, len(dims.output_spatial)
        self.nchw_output = (
            dims.output_spatial == tuple(range(rank - spatial, rank))
            and dims.output_feature == rank - spatial - 1
        )
        self.groups = conv.feature_group_count
        self.cin_g = self.rhs.dims[dims.kernel_input_feature]
        self.cout = self.rhs.dims[dims.kernel_output_feature]
        self.cout_g = self.cout // self.groups
        self.batch = self.lhs.dims[dims.input_batch]
        self.out_spatial = [self.out.dims[d] for d in dims.output_spatial]
        self.in_spatial = [self.lhs.dims[d] for d in dims.input_spatial]
        self.pixels = math.prod(self.out_spatial)
        self.taps = math.prod(self.window.size)
        self.k = self.cin_g * self.taps
        self.work = self.batch * self.cout * self.pixels * self.k

    def output_index(self, b, image, feature, pixel) -> list:
        index = [None] * self.out.rank
        index[self.dims.output_batch] = image
        index[self.dims.output_feature] = feature
        for d, value in zip(self.dims.output_spatial, split_index(b, pixel, self.out_spatial)):
            index[d] = value
        return index

    @property
    def is_pointwise(self) -> bool:
        """1x1 window, stride 1, no padding or dilation: the columns are the image."""
        w = self.window
        ones = (*w.size, *w.stride, *w.lhs_dilation)
        return all(v == 1 for v in ones) and not any((*w.pad_low, *w.pad_high))


def _weights_layout(g: _Geometry, view) -> StridedLayout | None:
    """A's layout when the kernel is in memory with (ci, taps...) merging into one stride:
    group `index[1]`'s rows start Cout_g rows further."""
    if view is None:
        return None
    dims = g.dims
    m_stride = view.strides[dims.kernel_output_feature]
    k_dims = (dims.kernel_input_feature, *dims.kernel_spatial)
    return strided_layout(view, dims.kernel_output_feature, k_dims, ((1, g.cout_g * m_stride),))


def _weights_factory(g: _Geometry, layout: StridedLayout | None):
    """A[m, k] = kernel[group*Cout_g + m, ci, taps...] with k = (ci, taps...)."""
    dims = g.dims
    k_dims = (dims.kernel_input_feature, *dims.kernel_spatial)
    k_extents = [g.rhs.dims[d] for d in k_dims]
    if layout is not None:
        ((_, group_stride),) = layout.batch

        def strided(ctx, sources, index):
            offset = ctx.builder.mul(index[1], i64(group_stride))
            view = sources[1].view
            return StridedPanels(view.pointer(ctx, offset), layout.p_stride, layout.k_stride)

        return strided

    def generated(ctx, sources, index):
        gen = sources[1].gen

        def element(m, k):
            b = ctx.builder
            kernel_index = [None] * g.rhs.rank
            kernel_index[dims.kernel_output_feature] = b.add(b.mul(index[1], i64(g.cout_g)), m)
            for d, value in zip(k_dims, delinearize(b, k, k_extents)):
                kernel_index[d] = value
            return gen(kernel_index)

        return GeneratedPanels(element)

    return generated


def _columns_factory(g: _Geometry, view):
    """B[k, pixel]: the image's window taps, k = (ci, taps...)."""
    dims = g.dims
    if view is not None and g.is_pointwise:
        spatial = merged_stride(g.in_spatial, [view.strides[d] for d in dims.input_spatial])
        if spatial is not None:
            feature = view.strides[dims.input_feature]

            def pointwise(ctx, sources, index):
                offset = _image_offset(ctx, g, view, index)
                return StridedPanels(sources[0].view.pointer(ctx, offset), spatial, feature)

            return pointwise
    # the packer's lane offsets are 32-bit
    small = g.lhs.size < 2**31
    if view is not None and small and len(g.in_spatial) <= 2 and _no_base_dilation(g):

        def image(ctx, sources, index):
            offset = _image_offset(ctx, g, view, index)
            return ImagePanels(sources[0].view.pointer(ctx, offset), image_geometry(g, view))

        return image

    def generated(ctx, sources, index):
        return GeneratedPanels(_column_element(ctx, g, sources[0].gen, index))

    return generated


def _no_base_dilation(g: _Geometry) -> bool:
    return all(d == 1 for d in g.window.lhs_dilation)


def _image_offset(ctx, g: _Geometry, view, index) -> ir.Value:
    """Elements from the input's start to image `index[0]`, channel group `index[1]`."""
    b = ctx.builder
    image, group = index
    batch = b.mul(image, i64(view.strides[g.dims.input_batch]))
    channels = b.mul(group, i64(g.cin_g * view.strides[g.dims.input_feature]))
    return b.add(batch, channels)


def image_geometry(g: _Geometry, view) -> tuple[int, ...]:
    """The im2col packer's geometry (1-D windows as 2-D ones of height 1)."""
    w = g.window
    dims = g.dims
    strides = [view.strides[d] for d in dims.input_spatial]
    fields = {
        "c_stride": view.strides[dims.input_feature],
        "h_stride": strides[0] if len(strides) == 2 else 0,
        "w_stride": strides[-1],
        "height": g.in_spatial[0] if len(strides) == 2 else 1,
        "width": g.in_spatial[-1],
        "kh": w.size[0] if len(strides) == 2 else 1,
        "kw": w.size[-1],
        "sh": w.stride[0] if len(strides) == 2 else 1,
        "sw": w.stride[-1],
        "ph": w.pad_low[0] if len(strides) == 2 else 0,
        "pw": w.pad_low[-1],
        "dh": w.rhs_dilation[0] if len(strides) == 2 else 1,
        "dw": w.rhs_dilation[-1],
        "out_width": g.out_spatial[-1],
    }
    return tuple(fields[name] for name in IMAGE_FIELDS)


def _column_element(ctx, g: _Geometry, gen: Gen, index):
    """element(pixel, k) of the columns through the input's generator (any layout,
    base dilation, any spatial rank): zero in the padding."""
    dims, window = g.dims, g.window
    image, group = index
    k_extents = [g.cin_g, *window.size]

    def element(pixel, k):
        b = ctx.builder
        feature, *taps = delinearize(b, k, k_extents)
        outs = delinearize(b, pixel, g.out_spatial)
        lhs_index = [None] * g.lhs.rank
        lhs_index[dims.input_batch] = image
        lhs_index[dims.input_feature] = b.add(b.mul(group, i64(g.cin_g)), feature)
        conditions = []
        for i, (out, tap) in enumerate(zip(outs, taps)):
            where, inside = tap_position(b, out, tap, g.in_spatial[i], window, i)
            lhs_index[dims.input_spatial[i]] = where
            conditions += inside
        valid = all_of(b, conditions)
        if valid is None:
            return gen(lhs_index)
        zero = ir.Constant(register_type(g.lhs.dtype), 0)
        return branch_value(b, valid, lambda: gen(lhs_index), lambda: zero)

    return element


# -- depthwise ---------------------------------------------------------------------


def _plan_depthwise(g: _Geometry, view) -> DepthwisePlan | None:
    """Needs the image in memory; its channel dim may be shuffled (one stride per
    channel is enough: each channel's plane is read on its own)."""
    if view is None or len(g.in_spatial) > 2 or not _no_base_dilation(g):
        return None
    if any(view.strides[d] is None for d in (g.dims.input_batch, *g.dims.input_spatial)):
        return None
    return DepthwisePlan(g, image_geometry(g, view))


# depthwise output rows at most this wide are computed as one vector
VECTOR_ROW_WIDTH = 32


class DepthwisePlan:
    """Feature groups of one input channel: a direct loop per output row, vectorized
    over its width, each tap's valid output range known at compile time."""

    workspace_bytes = 0
    kind = "depthwise"

    def __init__(self, geometry: _Geometry, image: tuple[int, ...]):
        self.g = geometry
        self.image = dict(zip(IMAGE_FIELDS, image))

    def emit(self, ctx, sources, c: Slice, workspace: Slice, epilogue) -> None:
        """Output planes (image, channel), shared out to the threads when big enough."""
        g, p = self.g, self.image
        ty = register_type(g.out.dtype)
        multiplier = g.cout // g.groups
        out_height = g.out_spatial[0] if len(g.out_spatial) == 2 else 1
        out_width = p["out_width"]
        view = sources[0].view
        planes = [g.batch, g.cout]
        work = g.batch * g.cout * g.pixels * g.taps
        with parallel_loop_nest(ctx, planes, "plane", work=work) as (image, channel):
            b = ctx.builder
            source = b.udiv(channel, i64(multiplier)) if multiplier > 1 else channel
            offset = b.add(
                b.mul(image, i64(view.strides[g.dims.input_batch])),
                view.offset(ctx, g.dims.input_feature, source),
            )
            plane_in = view.pointer(ctx, offset)
            plane = b.add(b.mul(image, i64(g.cout)), channel)
            plane_out = b.gep(ctx.slice_pointer(c), [b.mul(plane, i64(g.pixels))], source_etype=ty)
            weights = self._weights(ctx, sources[1].gen, channel)
            with for_range(b, out_height, "oh") as oh:
                row = b.gep(plane_out, [b.mul(oh, i64(out_width))], source_etype=ty)
                self._row(ctx, ty, row, plane_in, oh, weights, out_height)
            if epilogue is not None:  # on the plane just computed

                def element(m, n):
                    epilogue(g.output_index(ctx.builder, image, m, n))

                emit_region(ctx, channel, 1, i64(0), g.pixels, element)

    def _weights(self, ctx, gen, channel) -> list[list[ir.Value]]:
        """The channel's kernel taps, loaded once (stores to the output could alias)."""
        g, p = self.g, self.image
        dims = g.dims
        rows = []
        for kh in range(p["kh"]):
            row = []
            for kw in range(p["kw"]):
                index = [None] * g.rhs.rank
                index[dims.kernel_output_feature] = channel
                index[dims.kernel_input_feature] = i64(0)
                spatial = (kh, kw) if len(dims.kernel_spatial) == 2 else (kw,)
                for d, value in zip(dims.kernel_spatial, spatial):
                    index[d] = i64(value)
                row.append(gen(index))
            rows.append(row)
        return rows

    def _row(self, ctx, ty, row, plane_in, oh, weights, out_height: int) -> None:
        """One output row: as one vector when narrow, else column by column."""
        if self.image["out_width"] <= VECTOR_ROW_WIDTH and self.image["w_stride"] == 1:
            self._vector_row(ctx, ty, row, plane_in, oh, weights)
        else:
            self._column_row(ctx, ty, row, plane_in, oh, weights, out_height)

    def _vector_row(self, ctx, ty, row, plane_in, oh, weights) -> None:
        """A narrow output row as one vector: each tap loads its valid columns under a
        lane mask and adds its products there; no loops, which on 7 and 14 wide rows
        cost more than the arithmetic."""
        p = self.image
        b = ctx.builder
        config = gemm_config(ctx.target, self.g.out.dtype)
        width = p["out_width"]
        vec = ir.VectorType(ty, width)
        zeros = ir.Constant(vec, None)
        total = zeros
        for kh in range(p["kh"]):
            line, inside = self._input_line(ctx, ty, plane_in, oh, kh)
            row_mask = splat(b, inside, ir.VectorType(I1, width))
            for kw in range(p["kw"]):
                shift = kw * p["dw"] - p["pw"]
                low, high = valid_span(shift, p["sw"], p["width"], width)
                if high <= low:
                    continue
                lanes = [low <= ow < high for ow in range(width)]
                mask = b.and_(row_mask, ir.Constant(ir.VectorType(I1, width), lanes))
                x = self._tap_columns(ctx, config, line, shift, lanes, inside)
                product = b.fmul(splat(b, weights[kh][kw], vec), x)
                # masked-off lanes add +0, never weight x 0 (NaN for an infinite weight)
                total = b.fadd(total, b.select(mask, product, zeros))
        b.store(total, row, align=config.itemsize)

    def _tap_columns(self, ctx, config, line, shift: int, lanes: list[bool], inside):
        """The inputs of one tap across a narrow row (zero outside `lanes`, and all zero
        unless the input row is `inside`): one masked load, of every stride-th column
        for a strided window (then picked out by a shuffle: gathers were 5x slower)."""
        b = ctx.builder
        stride, width = self.image["sw"], len(lanes)
        wide = [lanes[j // stride] and j % stride == 0 for j in range(width * stride)]
        mask_type = ir.VectorType(I1, width * stride)
        mask = b.and_(ir.Constant(mask_type, wide), splat(b, inside, mask_type))
        start = b.gep(line, [i64(shift)], source_etype=config.element)
        x = masked_load(ctx, b, config, start, mask)
        if stride == 1:
            return x
        return pick_lanes(b, x, (j * stride for j in range(width)))

    def _column_row(self, ctx, ty, row, plane_in, oh, weights, out_height: int) -> None:
        """One output row.  Where every tap is inside the image (all but the rows and
        columns that padding reaches) one pass sums all taps in registers; elsewhere
        each tap adds its valid span to the zeroed row.  Both sum the taps in the same
        order, so every element gets the same bits either way."""
        p = self.image
        b = ctx.builder
        rows = _valid_range(p["kh"], p["dh"], p["ph"], p["sh"], p["height"], out_height)
        cols = _valid_range(p["kw"], p["dw"], p["pw"], p["sw"], p["width"], p["out_width"])
        if rows[1] <= rows[0] or cols[1] <= cols[0]:
            self._tap_by_tap(ctx, ty, row, plane_in, oh, weights, (0, p["out_width"]))
            return
        low = b.icmp_unsigned(">=", oh, i64(rows[0]))
        interior = b.and_(low, b.icmp_unsigned("<", oh, i64(rows[1])))
        with b.if_else(interior) as (inner, edge):
            with inner:
                self._tap_by_tap(ctx, ty, row, plane_in, oh, weights, (0, cols[0]))
                self._all_taps(ctx, ty, row, plane_in, oh, weights, cols)
                self._tap_by_tap(ctx, ty, row, plane_in, oh, weights, (cols[1], p["out_width"]))
            with edge:
                self._tap_by_tap(ctx, ty, row, plane_in, oh, weights, (0, p["out_width"]))

    def _input_line(self, ctx, ty, plane_in, oh, kh) -> tuple[ir.Value, ir.Value]:
        """(input row of tap row `kh` for output row `oh`, whether it is inside)."""
        p = self.image
        b = ctx.builder
        ih = b.sub(b.add(b.mul(oh, i64(p["sh"])), i64(kh * p["dh"])), i64(p["ph"]))
        inside = b.icmp_unsigned("<", ih, i64(p["height"]))
        return b.gep(plane_in, [b.mul(ih, i64(p["h_stride"]))], source_etype=ty), inside

    def _tap_input(self, ctx, ty, line, ow, kw) -> ir.Value:
        p = self.image
        b = ctx.builder
        iw = b.add(b.mul(ow, i64(p["sw"])), i64(kw * p["dw"] - p["pw"]))
        return b.load(b.gep(line, [b.mul(iw, i64(p["w_stride"]))], source_etype=ty), typ=ty)

    def _all_taps(self, ctx, ty, row, plane_in, oh, weights, columns) -> None:
        """Columns [start, stop) of a row whose taps are all inside: summed in registers."""
        p = self.image
        b = ctx.builder
        lines = [self._input_line(ctx, ty, plane_in, oh, kh)[0] for kh in range(p["kh"])]
        start, stop = columns
        with for_range(b, stop - start, "ow") as t:
            ow = b.add(t, i64(start))
            total = ir.Constant(ty, 0)
            for kh, line in enumerate(lines):
                for kw in range(p["kw"]):
                    x = self._tap_input(ctx, ty, line, ow, kw)
                    total = b.fadd(total, b.fmul(weights[kh][kw], x))
            b.store(total, b.gep(row, [ow], source_etype=ty))

    def _tap_by_tap(self, ctx, ty, row, plane_in, oh, weights, columns) -> None:
        """Columns [start, stop) of a row: zeroed, then each tap adds its valid span."""
        p = self.image
        b = ctx.builder
        start, stop = columns
        if stop <= start:
            return
        with for_range(b, stop - start, "zero") as t:
            b.store(ir.Constant(ty, 0), b.gep(row, [b.add(t, i64(start))], source_etype=ty))
        for kh in range(p["kh"]):
            line, inside = self._input_line(ctx, ty, plane_in, oh, kh)
            with if_then(b, inside):
                for kw in range(p["kw"]):
                    shift = kw * p["dw"] - p["pw"]
                    low, high = valid_span(shift, p["sw"], p["width"], p["out_width"])
                    low, high = max(low, start), min(high, stop)
                    if high <= low:
                        continue
                    with for_range(b, high - low, "ow") as t:
                        ow = b.add(t, i64(low))
                        x = self._tap_input(ctx, ty, line, ow, kw)
                        target = b.gep(row, [ow], source_etype=ty)
                        total = b.fadd(b.load(target, typ=ty), b.fmul(weights[kh][kw], x))
                        b.store(total, target)


def _valid_range(taps: int, dilation: int, pad: int, stride: int, extent: int, out: int):
    """Output positions [low, high) where every tap lands inside the input."""
    low, high = 0, out
    for tap in range(taps):
        span = valid_span(tap * dilation - pad, stride, extent, out)
        low, high = max(low, span[0]), min(high, span[1])
    return low, high


def valid_span(shift: int, stride: int, width: int, out_width: int) -> tuple[int, int]:
    """Output columns [low, high) whose input column ow*stride + shift is in [0, width)."""
    low = 0
    while low < out_width and low * stride + shift < 0:
        low += 1
    high = out_width
    while high > low and (high - 1) * stride + shift >= width:
        high -= 1
    return low, high
