"""Depthwise convolutions (one input channel per feature group): a direct loop per plane.

The depthwise form of forms.py's CONV_FORMS: a float convolution with an NCHW output
whose feature groups each read one input channel (MobileNet's, ShuffleNet's 3x3
layers).  Per output plane (image, channel), shared out to the threads, each output row
sums its taps directly, a vector of output columns at a time, as pooling.py's window
rows do: each tap's valid columns are known at compile time (row_chunks.py, which
pooling.py shares), so the chunks every tap fills run in a loop of plain loads and
multiply-adds (stride-2 columns: one wide load, shuffled), and the edge chunks are
emitted one by one with constant lane masks.  The output rows whose window rows are
all inside the image run apart from those that padding reaches, which skip the
padded window rows per tap.  The epilogue then runs on the finished plane.
"""

from __future__ import annotations

from llvmlite import ir

from ...buffers import Slice
from ..llvm.lltypes import i64, register_type
from ..llvm.loops import for_range, if_then
from .blocked_gemm import emit_region
from .conv import ConvGeometry, ConvProblem, image_geometry
from .gemm_config import GemmConfig, gemm_config
from .im2col import IMAGE_FIELDS
from .parallel import parallel_loop_nest
from .row_chunks import RowChunks, valid_span
from .vectors import bits, masked_load, mul_add, pick_lanes, splat, store_first


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

    def __init__(self, geometry: ConvGeometry, image: tuple[int, ...]):
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
            for first, stop, padded in self._row_runs(out_height):
                with for_range(b, stop - first, "oh") as t:
                    oh = b.add(t, i64(first))
                    row = b.gep(plane_out, [b.mul(oh, i64(out_width))], source_etype=ty)
                    self._row(ctx, ty, row, plane_in, oh, weights, out_height, padded)
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

    def _row_runs(self, out_height: int) -> list[tuple[int, int, bool]]:
        """Runs of output rows [first, stop) and whether padding reaches their window."""
        p = self.image
        low, high = _valid_range(p["kh"], p["dh"], p["ph"], p["sh"], p["height"], out_height)
        if high <= low:
            return [(0, out_height, True)]
        runs = [(0, low, True), (low, high, False), (high, out_height, True)]
        return [run for run in runs if run[1] > run[0]]

    def _row(self, ctx, ty, row, plane_in, oh, weights, out_height: int, padded: bool) -> None:
        """One output row: in vectors where its columns are contiguous, else column by
        column."""
        config = gemm_config(ctx.target, self.g.out.dtype)
        if self.image["w_stride"] == 1 and config is not None:
            self._vector_row(ctx, config, row, plane_in, oh, weights, padded)
        else:
            self._column_row(ctx, ty, row, plane_in, oh, weights, out_height)

    def _vector_row(self, ctx, cfg: GemmConfig, row, plane_in, oh, weights, padded) -> None:
        """One output row, a vector of columns at a time, all taps summed in registers.

        The chunks whose lanes every tap reaches run in a loop; the others (the edges,
        the partial last chunk) are emitted one by one, their lane masks known here.  A
        lane a tap does not reach keeps its sum (never weight x 0: NaN for an infinite
        weight), as does every lane for a window row in the padding (`padded` rows)."""
        p, b = self.image, ctx.builder
        lanes = _chunk_lanes(cfg.lanes, p["out_width"])
        vec = ir.VectorType(cfg.element, lanes)
        lines = []  # per window row: the input row (row 0 where padded), whether it is real
        for kh in range(p["kh"]):
            line, real = self._input_line(ctx, cfg.element, plane_in, oh, kh)
            if padded:
                line = b.select(real, line, plane_in)
            lines.append((line, real if padded else None))
        taps = [kw * p["dw"] - p["pw"] for kw in range(p["kw"])]  # input column of column 0
        row_chunks = RowChunks(tuple(taps), p["sw"], p["width"], p["out_width"], lanes)
        whole = row_chunks.whole
        splats = [[splat(b, w, vec) for w in row_weights] for row_weights in weights]

        def emit(ow0: ir.Value, masks: list, count: int) -> None:
            sums = [ir.Constant(vec, None)] * SUMS
            for kh, ((line, real), row_weights) in enumerate(zip(lines, splats)):
                total = sums[kh % SUMS]
                for shift, mask, inside, w in zip(taps, masks, whole, row_weights):
                    if mask is not None and not any(mask):
                        continue
                    x = self._tap(ctx, cfg, line, ow0, shift, mask, inside)
                    summed = mul_add(ctx, b, cfg, w, x, total)
                    # lanes past the row's end are not stored: any sum will do there
                    keep = None
                    if mask is not None and not all(m or l >= count for l, m in enumerate(mask)):
                        keep = bits(mask)
                    if real is not None:
                        reals = splat(
                            b, real, keep.type if keep else ir.VectorType(real.type, lanes)
                        )
                        keep = reals if keep is None else b.and_(keep, reals)
                    total = summed if keep is None else b.select(keep, summed, total)
                sums[kh % SUMS] = total
            total = sums[0]
            for other in sums[1 : p["kh"]]:
                total = b.fadd(total, other)
            store_first(ctx, cfg, total, b.gep(row, [ow0], source_etype=cfg.element), count)

        row_chunks.emit(b, emit)

    def _tap(self, ctx, cfg: GemmConfig, line, ow0, shift: int, mask, inside: bool):
        """Lanes l: line[(ow0 + l) * sw + shift], zero where not mask[l] (mask None:
        every lane valid).  Strided columns come from one contiguous load, shuffled
        (masked to the span used unless `inside`: gathers were 5x slower)."""
        b, stride = ctx.builder, self.image["sw"]
        lanes = _chunk_lanes(cfg.lanes, self.image["out_width"])
        start = b.add(b.mul(ow0, i64(stride)), i64(shift))
        pointer = b.gep(line, [start], source_etype=cfg.element)
        wanted = [True] * lanes if mask is None else mask
        width = lanes * stride
        # from the first to the last lane wanted: a gap-free mask stays a masked load
        first = wanted.index(True) * stride
        last = (lanes - 1 - wanted[::-1].index(True)) * stride
        used = [first <= j <= last for j in range(width)]
        if all(used) or (mask is None and inside):
            x = b.load(pointer, typ=ir.VectorType(cfg.element, width), align=cfg.itemsize)
        else:
            x = masked_load(ctx, b, cfg, pointer, bits(used))
        return x if stride == 1 else pick_lanes(b, x, (j * stride for j in range(lanes)))

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


# partial sums per chunk, window rows taken in turn: shorter chains of dependent
# multiply-adds (a 5x5 window's 25 in one chain left 7-wide rows latency-bound)
SUMS = 2


def _chunk_lanes(lanes: int, out_width: int) -> int:
    """Lanes per chunk of a row: a full vector, or the smallest power of two that holds
    a narrower row (a 7-wide row in 8 lanes, not 16)."""
    return min(lanes, 1 << (out_width - 1).bit_length())


def _valid_range(taps: int, dilation: int, pad: int, stride: int, extent: int, out: int):
    """Output positions [low, high) where every tap lands inside the input."""
    low, high = 0, out
    for tap in range(taps):
        span = valid_span(tap * dilation - pad, stride, extent, out)
        low, high = max(low, span[0]), min(high, span[1])
    return low, high
