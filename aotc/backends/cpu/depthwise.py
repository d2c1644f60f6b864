"""Depthwise convolutions (one input channel per feature group): a direct loop per plane.

The depthwise form of forms.py's CONV_FORMS: a float convolution with an NCHW output
whose feature groups each read one input channel (MobileNet's, ShuffleNet's 3x3
layers, ConvNeXt's 7x7).  Per output plane (image, channel), shared out to the
threads, the output rows sum their taps directly: where the columns are contiguous, in
bands of rows a vector of output columns at a time (depthwise_bands.py: each input
vector loaded once for the rows of the band that read it; the valid taps of each row
and column chunk known at compile time), else column by column.  The epilogue then
runs on the finished plane.
"""

from __future__ import annotations

from llvmlite import ir

from ...buffers import Slice
from ..llvm.lltypes import i64, register_type
from ..llvm.loops import for_range, if_then
from .blocked_gemm import emit_region
from .conv import ConvGeometry, ConvProblem, image_geometry
from .depthwise_bands import emit_bands
from .gemm_config import gemm_config
from .image_geometry import ImageGeometry
from .parallel import parallel_loop_nest
from .row_chunks import valid_span


def plan_depthwise(problem: ConvProblem) -> DepthwisePlan | None:
    """A float NCHW convolution of one input channel per feature group, over an image in
    memory (at most 2 spatial dims, no base dilation); its channel dim may be shuffled
    (one stride per channel is enough: each channel's plane is read on its own)."""
    g, view = problem.geometry, problem.views[0]
    if not problem.float_nchw or not g.is_depthwise:
        return None
    if view is None or len(g.in_spatial) > 2 or g.base_dilated:
        return None
    if any(view.strides[d] is None for d in (g.dims.input_batch, *g.dims.input_spatial)):
        return None
    return DepthwisePlan(g, image_geometry(g, view))


class DepthwisePlan:
    """Feature groups of one input channel: a direct loop per output row, vectorized
    over its width (columns contiguous in memory; else column by column), each tap's
    valid output range known at compile time."""

    workspace_bytes = 0
    kind = "depthwise"

    def __init__(self, geometry: ConvGeometry, image: ImageGeometry):
        self.g = geometry
        self.image = image.plane()

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
            config = gemm_config(ctx.target, g.out.dtype)
            if p["w_stride"] == 1 and config is not None:  # rows as vectors
                emit_bands(ctx, config, p, (plane_in, plane_out), weights, out_height)
            else:
                with for_range(b, out_height, "oh") as oh:
                    row = b.gep(plane_out, [b.mul(oh, i64(out_width))], source_etype=ty)
                    self._column_row(ctx, ty, row, plane_in, oh, weights, out_height)
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
