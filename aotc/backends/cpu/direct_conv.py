"""Direct convolution of channels-last images on the GEMM's register tiles, no im2col.

conv_layout.py gives wide 2-D convolutions (and 1-D ones) the layout input
[batch, spatial..., feature], kernel [spatial..., in, out], output [batch,
spatial..., feature] (TensorFlow's and JAX's).  Per image, a register tile is
MR output pixels of one output row (for a pointwise convolution, whose pixels
form one strided matrix, any MR consecutive pixels) by NR output channels.  The
micro-kernel here reads its A values straight from the image: tile row i, tap
t, input channel c is at a + i*lda + offsets[t] + c, with lda and MR fixed when
it is emitted (x86 addressing takes them as displacements), so nothing is
packed or copied per tile.  B is the kernel as NR-column panels over K = (taps,
Cin), pre-packed into the weights (prepack.py) or packed once per call.  A
row's last MR-short tile is a kernel of its own height: no padded rows, no
reads past the image.

Padding is a zero border around a copy of the image in the workspace; without
padding the image is read in place when its channels are contiguous.  Loops:
blocks of output channels whose panels fit L2 outermost, then output rows (or
runs of flat tiles) shared out to the threads; in a row, per B panel, blocks of
input channels whose B slice fits L1 (the tiles add to C after the first), over
the row's tiles; then the epilogue on the row's channels of the block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from ...buffers import Slice
from ...ir import Instruction
from ..llvm.context import EmitContext, Gen
from ..llvm.elemental import split_index
from ..llvm.lltypes import I1, I64, PTR, i64, i64_table
from ..llvm.loops import for_range, loop_nest
from .blocked_gemm import emit_region
from .blocking import Blocking, aligned
from .conv import ConvProblem
from .gemm_config import FEWER_ACCUMULATORS_COST, GemmConfig
from .panels import GeneratedPanels, StridedPanels
from .parallel import parallel_loop_nest_passing
from .prepackable import PackedShape, Prepackable, StridedLayout, strided_layout
from .shared_functions import shared_function
from .tiles import Tile
from .vectors import smaller
from .views import View, merged_stride

# pixels of a unit of work of a pointwise convolution's flat tiles (about a row's worth)
FLAT_RUN = 48


@dataclass(frozen=True)
class Image:
    """One convolution in 2-D terms (a 1-D one has height 1)."""

    batch: int
    height: int
    width: int
    channels: int
    out_height: int
    out_width: int
    cout: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad_low: tuple[int, int]
    pad_high: tuple[int, int]

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    @property
    def k(self) -> int:
        return self.taps * self.channels

    @property
    def pixels(self) -> int:
        return self.out_height * self.out_width

    @property
    def padded(self) -> tuple[int, int]:
        """(height, width) of the image with its padding."""
        return (
            self.height + self.pad_low[0] + self.pad_high[0],
            self.width + self.pad_low[1] + self.pad_high[1],
        )

    @property
    def is_pointwise(self) -> bool:
        ones = (*self.kernel, *self.stride)
        return all(v == 1 for v in ones) and not any((*self.pad_low, *self.pad_high))


def channels_last_image(conv: Instruction) -> Image | None:
    """The convolution as an `Image`, if it is one the direct kernel computes: one
    feature group, no base dilation, at most 2 spatial dims, output [batch,
    spatial..., feature]; None otherwise."""
    dims, window = conv.conv, conv.window
    rank, spatial = conv.array_shape.rank, len(dims.output_spatial)
    if conv.feature_group_count != 1 or conv.batch_group_count != 1 or spatial not in (1, 2):
        return None
    if any(d != 1 for d in window.lhs_dilation):
        return None
    if (dims.output_batch, *dims.output_spatial, dims.output_feature) != tuple(range(rank)):
        return None
    lhs, rhs, out = conv.operands[0].shape, conv.operands[1].shape, conv.array_shape

    def pair(values, height=1):  # 1-D: a window of height 1, no padding there
        values = tuple(values)
        return values if spatial == 2 else (height, *values)

    in_spatial = pair(lhs.dims[d] for d in dims.input_spatial)
    out_spatial = pair(out.dims[d] for d in dims.output_spatial)
    return Image(
        batch=lhs.dims[dims.input_batch],
        height=in_spatial[0],
        width=in_spatial[1],
        channels=lhs.dims[dims.input_feature],
        out_height=out_spatial[0],
        out_width=out_spatial[1],
        cout=rhs.dims[dims.kernel_output_feature],
        kernel=pair(window.size),
        stride=pair(window.stride),
        dilation=pair(window.rhs_dilation),
        pad_low=pair(window.pad_low, 0),
        pad_high=pair(window.pad_high, 0),
    )


def plan_direct(problem: ConvProblem) -> DirectConvPlan | None:
    """The direct form of a float convolution whose output is not NCHW (conv.py's
    problem): of one that `channels_last_image` takes, else None."""
    config, conv = problem.config, problem.conv
    if config.paired or problem.geometry.nchw_output:
        return None
    image = channels_last_image(conv)
    if image is None or image.pixels * image.cout * image.k == 0:
        return None
    lhs_view, rhs_view = problem.image_view, problem.kernel_view
    flat = image.is_pointwise and _reads_in_place(conv, image, lhs_view, flat=True)
    in_place = flat or _reads_in_place(conv, image, lhs_view, flat=False)
    mr, nr = _tile(config, image.cout)
    return DirectConvPlan(
        config,
        conv,
        image,
        mr,
        nr,
        flat,
        lhs_view if in_place else None,
        layouts=(None, _weights_layout(conv, rhs_view)),
    )


def _reads_in_place(conv, image: Image, view: View | None, flat: bool) -> bool:
    """Whether the tiles read the image where it is: no padding, channels contiguous
    (and for `flat` tiles, rows back to back)."""
    if view is None or any((*image.pad_low, *image.pad_high)):
        return False
    dims = conv.conv
    if view.strides[dims.input_feature] != 1:
        return False
    if not flat:
        return True
    spatial = [view.dims[d] for d in dims.input_spatial]
    return merged_stride(spatial, [view.strides[d] for d in dims.input_spatial]) is not None


def _tile(config: GemmConfig, cout: int) -> tuple[int, int]:
    """(MR, NR) of the register tile: rows are never padded (a row's last tile is a
    shorter kernel), so of the target's tiles the one that pads the output channels
    least, per accumulator, a tile with fewer accumulators costing a little more."""
    lanes = config.lanes
    rows, vectors = config.blocks.tiles[0]
    best = rows * min(vectors, -(-cout // lanes))

    def cost(shape):
        mr, nr = shape
        padded = -(-cout // nr) * nr
        accumulators = mr * -(-nr // lanes)
        return padded * (1 if accumulators >= best else FEWER_ACCUMULATORS_COST)

    shapes = [(mr, min(v * lanes, -(-cout // lanes) * lanes)) for mr, v in config.blocks.tiles]
    return min(shapes, key=cost)


def _weights_layout(conv: Instruction, view: View | None) -> StridedLayout | None:
    """B's layout when the kernel's (taps, in) dims merge into one stride."""
    if view is None:
        return None
    dims = conv.conv
    k_dims = (*dims.kernel_spatial, dims.kernel_input_feature)
    return strided_layout(view, dims.kernel_output_feature, k_dims)


@dataclass
class DirectConvPlan(Prepackable):
    """How one channels-last convolution runs (see the module docstring)."""

    config: GemmConfig
    conv: Instruction
    image: Image
    mr: int
    nr: int
    flat: bool  # tiles run over all pixels (a pointwise convolution read in place)
    view: View | None  # the image read in place; None: a padded copy in the workspace
    layouts: tuple[StridedLayout | None, StridedLayout | None] = (None, None)
    packed: tuple[Slice | None, Slice | None] = (None, None)
    operands: tuple[int, int] = field(default=(0, 1))  # A: the image, B: the kernel
    kind = "direct"

    def packed_shape(self, side: int) -> PackedShape:
        """B as one K slice of NR-wide panels."""
        image = self.image
        return PackedShape(image.cout, image.k, image.k, self.nr, (), ())

    @property
    def _panel_bytes(self) -> int:
        """Workspace for B's panels: none when pre-packed."""
        if self.packed[1] is not None:
            return 0
        return aligned(self.packed_shape(1).elements * self.config.itemsize)

    @property
    def workspace_bytes(self) -> int:
        """B's panels, then the padded images (unless read in place)."""
        if self.view is not None:
            return self._panel_bytes
        height, width = self.image.padded
        images = self.image.batch * height * width * self.image.channels
        return self._panel_bytes + aligned(images * self.config.itemsize)

    @property
    def source_strides(self) -> tuple[int, int]:
        """Elements between rows and between columns of the image the tiles read."""
        if self.view is None:
            return self.image.padded[1] * self.image.channels, self.image.channels
        strides = [self.view.strides[d] for d in self.conv.conv.input_spatial]
        return (strides[0] if len(strides) == 2 else 0), strides[-1]

    def emit(self, ctx: EmitContext, sources, c: Slice, workspace: Slice, epilogue) -> None:
        """B packed (unless pre-packed) and the images copied (unless read in place),
        then per block of output channels the tiles, shared out to the threads."""
        image = self.image
        if self.packed[1] is None:
            self._pack_weights(ctx, sources[1], ctx.slice_pointer(workspace))
        if self.view is None:
            self._copy_images(ctx, sources[0].gen, self.copies(ctx, workspace))
        panels = -(-image.cout // self.nr)
        fitting = max(self.config.blocks.l2 // (image.k * self.nr * self.config.itemsize), 1)
        per_block = -(-panels // -(-panels // fitting))  # balanced blocks
        units = -(-image.pixels // self.run) if self.flat else image.out_height
        work = image.batch * image.pixels * image.cout * image.k
        b = ctx.builder
        with for_range(b, -(-panels // per_block), "nblock") as block:
            first = b.mul(block, i64(per_block))
            dims = [image.batch, units]
            with parallel_loop_nest_passing(ctx, dims, [first], "unit", work) as (index, passed):
                b = ctx.builder
                (first,) = passed
                count = smaller(b, i64(per_block), b.sub(i64(panels), first))
                tiles = _Tiles(self, ctx, c, workspace, epilogue, index[0], (first, count))
                if self.flat:
                    tiles.flat_run(index[1])
                else:
                    tiles.row(index[1])
            b = ctx.builder

    # -- operands -------------------------------------------------------------

    def _pack_weights(self, ctx, source, dst) -> None:
        """All of B as panels of NR output channels, once per call."""
        image = self.image
        layout = self.layouts[1]
        if layout is not None:
            operand = StridedPanels(source.view.pointer(ctx), layout.p_stride, layout.k_stride)
        else:
            operand = GeneratedPanels(self._kernel_element(ctx, source.gen))
        blocks = Blocking(
            self.config,
            image.pixels,
            image.cout,
            image.k,
            self.mr,
            self.nr,
            image.k,
            self.mr,
            image.cout,
        )
        operand.pack(ctx, blocks, dst, i64(0), i64(image.cout), i64(0), i64(image.k), self.nr)

    def _kernel_element(self, ctx, gen: Gen):
        """B[n, k] = kernel[taps..., in, out] with k = (taps..., in), n = out."""
        dims = self.conv.conv
        kernel = self.conv.operands[1].shape
        k_dims = (*dims.kernel_spatial, dims.kernel_input_feature)
        extents = [kernel.dims[d] for d in k_dims]

        def element(n, k):
            index = [None] * kernel.rank
            index[dims.kernel_output_feature] = n
            for d, value in zip(k_dims, split_index(ctx.builder, k, extents)):
                index[d] = value
            return gen(index)

        return element

    def copies(self, ctx, workspace: Slice) -> ir.Value:
        """Where the padded images are: after B's panels."""
        return ctx.byte_pointer(ctx.slice_pointer(workspace), self._panel_bytes)

    def _copy_images(self, ctx, gen: Gen, dst) -> None:
        """Every image into the workspace, its padding a zero border (negative padding
        crops)."""
        image, dims = self.image, self.conv.conv
        b = ctx.builder
        height, width = image.padded
        ty = self.config.element
        rank = self.conv.operands[0].array_shape.rank
        with loop_nest(b, [image.batch, height, width], "pad") as (n, hp, wp):
            pixel = b.add(b.mul(b.add(b.mul(n, i64(height)), hp), i64(width)), wp)
            row = b.gep(dst, [b.mul(pixel, i64(image.channels))], source_etype=ty)
            ih = b.sub(hp, i64(image.pad_low[0]))
            iw = b.sub(wp, i64(image.pad_low[1]))
            inside = b.and_(
                b.icmp_unsigned("<", ih, i64(image.height)),
                b.icmp_unsigned("<", iw, i64(image.width)),
            )
            with b.if_else(inside) as (copy, border):
                with copy, for_range(b, image.channels, "pc") as channel:
                    index = [None] * rank
                    index[dims.input_batch] = n
                    index[dims.input_feature] = channel
                    spatial = (ih, iw) if len(dims.input_spatial) == 2 else (iw,)
                    for d, value in zip(dims.input_spatial, spatial):
                        index[d] = value
                    b.store(gen(index), b.gep(row, [channel], source_etype=ty))
                with border, for_range(b, image.channels, "pz") as channel:
                    b.store(ir.Constant(ty, 0), b.gep(row, [channel], source_etype=ty))

    @property
    def run(self) -> int:
        """Pixels of a flat unit of work: whole tiles, about an output row's worth."""
        return -(-FLAT_RUN // self.mr) * self.mr

    @property
    def channel_block(self) -> int:
        """Input channels per pass over a run's tiles: the B slice (taps x block x NR)
        stays in L1 while every tile of the run reads it."""
        image, size = self.image, self.config.itemsize
        return max(min(self.config.blocks.l1 // (image.taps * self.nr * size), image.channels), 1)

    def tap_offsets(self) -> list[int]:
        """Each tap's offset from a tile row's first input element, in elements."""
        image = self.image
        rows, cols = self.source_strides
        return [
            kh * image.dilation[0] * rows + kw * image.dilation[1] * cols
            for kh in range(image.kernel[0])
            for kw in range(image.kernel[1])
        ]


class _Tiles:
    """The tiles of one unit of work (an output row, or a flat tile) of one image, for
    a range of B panels (first, count)."""

    def __init__(
        self, plan: DirectConvPlan, ctx, c: Slice, workspace, epilogue, image_index, panels
    ):
        self.plan, self.ctx, self.epilogue = plan, ctx, epilogue
        self.image_index, self.panels = image_index, panels
        b = ctx.builder
        ty = plan.config.element
        image = plan.image
        self.weights = (
            ctx.slice_pointer(plan.packed[1])
            if plan.packed[1] is not None
            else ctx.slice_pointer(workspace)
        )
        if plan.view is not None:
            batch_stride = plan.view.strides[plan.conv.conv.input_batch]
            self.source = plan.view.pointer(ctx, b.mul(image_index, i64(batch_stride)))
        else:
            height, width = image.padded
            size = height * width * image.channels
            copies = plan.copies(ctx, workspace)
            self.source = b.gep(copies, [b.mul(image_index, i64(size))], source_etype=ty)
        first_pixel = b.mul(image_index, i64(image.pixels * image.cout))
        self.out = b.gep(ctx.slice_pointer(c), [first_pixel], source_etype=ty)
        self.offsets = _tap_table(ctx, plan.tap_offsets())

    def row(self, oh) -> None:
        """Output row `oh`."""
        plan, b = self.plan, self.ctx.builder
        image = plan.image
        rows, cols = plan.source_strides
        line = b.mul(oh, i64(image.stride[0] * rows))
        self._run(line, image.stride[1] * cols, b.mul(oh, i64(image.out_width)), image.out_width)

    def flat_run(self, u) -> None:
        """Flat unit `u`: `run` pixels (the last unit fewer)."""
        plan, b = self.plan, self.ctx.builder
        _, lda = plan.source_strides
        p0 = b.mul(u, i64(plan.run))
        start = b.mul(p0, i64(lda))
        full, rest = divmod(plan.image.pixels, plan.run)
        if not rest:
            self._run(start, lda, p0, plan.run)
            return
        with b.if_else(b.icmp_unsigned("<", u, i64(full))) as (whole, last):
            with whole:
                self._run(start, lda, p0, plan.run)
            with last:
                self._run(start, lda, p0, rest)

    def _run(self, start, lda: int, p0, length: int) -> None:
        """`length` pixels from pixel `p0` of the image, pixel i's inputs at `start` +
        i*lda elements of the source: per B panel, channel block by channel block over
        its MR-pixel tiles (the last one shorter), then the epilogue."""
        plan, ctx = self.plan, self.ctx
        b = ctx.builder
        image, ty = plan.image, plan.config.element
        source = b.gep(self.source, [start], source_etype=ty)
        full, rest = divmod(length, plan.mr)
        tiles = [(plan.mr, t * plan.mr) for t in range(full)] + (
            [(rest, full * plan.mr)] if rest else []
        )
        block = plan.channel_block
        blocks = -(-image.channels // block)
        first, count = self.panels
        c_run = b.gep(self.out, [b.mul(p0, i64(image.cout))], source_etype=ty)
        with for_range(b, count, "panel") as j:
            panel = b.add(first, j)
            n0 = b.mul(panel, i64(plan.nr))
            cols = smaller(b, i64(plan.nr), b.sub(i64(image.cout), n0))
            weights = b.gep(self.weights, [b.mul(panel, i64(plan.nr * image.k))], source_etype=ty)
            c_panel = b.gep(c_run, [n0], source_etype=ty)
            with for_range(b, blocks, "cblock") as cb:
                c0 = b.mul(cb, i64(block))
                channels = smaller(b, i64(block), b.sub(i64(image.channels), c0))
                a_block = b.gep(source, [c0], source_etype=ty)
                b_block = b.gep(weights, [b.mul(c0, i64(plan.nr))], source_etype=ty)
                accumulate = b.icmp_unsigned("!=", cb, i64(0))
                for rows, offset in tiles:
                    kernel = direct_kernel(ctx, plan.config, rows, plan.nr, lda)
                    a = b.gep(a_block, [i64(offset * lda)], source_etype=ty)
                    c_tile = b.gep(c_panel, [i64(offset * image.cout)], source_etype=ty)
                    b.call(
                        kernel,
                        [
                            a,
                            self.offsets,
                            i64(image.taps),
                            channels,
                            i64(image.channels * plan.nr),
                            b_block,
                            c_tile,
                            i64(image.cout),
                            accumulate,
                            cols,
                        ],
                    )
        if self.epilogue is not None:  # on the run's channels of the block, all now summed
            n0 = b.mul(first, i64(plan.nr))
            cols = smaller(b, b.mul(count, i64(plan.nr)), b.sub(i64(image.cout), n0))
            emit_region(ctx, p0, length, n0, cols, self._element)

    def _element(self, pixel, feature) -> None:
        """The epilogue at output pixel `pixel` (of the image), channel `feature`."""
        image = self.plan.image
        extents = [image.out_height, image.out_width]
        if len(self.plan.conv.conv.output_spatial) == 1:
            extents = extents[1:]
        self.epilogue([self.image_index, *split_index(self.ctx.builder, pixel, extents), feature])


def _tap_table(ctx, offsets: list[int]) -> ir.Value:
    """A constant i64 table of tap offsets (one per distinct table in the module)."""
    return i64_table(ctx.module, f"{ctx.prefix}.conv.taps." + "_".join(map(str, offsets)), offsets)


def direct_kernel(ctx: EmitContext, cfg: GemmConfig, mr: int, nr: int, lda: int) -> ir.Function:
    """`kernel(a, offsets, taps, channels, b_tap, b, c, ldc, accumulate, cols)`: C tile
    (+)= A x B.

    A row i, tap t, channel ch is at a[i*lda + offsets[t] + ch] (MR and lda fixed
    here, so the row offsets are displacements); B's NR values for (t, ch) at
    b[t*b_tap + ch*NR]; only `cols` of the NR columns are stored.
    """
    name = f"{ctx.prefix}.conv.direct.{cfg.dtype.text}.{mr}x{nr}.{lda}"
    args = [PTR, PTR, I64, I64, I64, PTR, PTR, I64, I1, I64]
    function, b = shared_function(ctx, name, args)
    if b is None:
        return function
    a_ptr, offsets, taps, channels, b_tap_stride, b_ptr, c_ptr, ldc, accumulate, cols = (
        function.args
    )
    ty = cfg.element
    tile = Tile(b, cfg, mr, nr)
    with for_range(b, taps, "tap") as t:
        offset = b.load(b.gep(offsets, [t], source_etype=I64), typ=I64)
        a_tap = b.gep(a_ptr, [offset], source_etype=ty)
        b_tap = b.gep(b_ptr, [b.mul(t, b_tap_stride)], source_etype=ty)
        with for_range(b, channels, "ch") as ch:
            b_row = b.gep(b_tap, [b.mul(ch, i64(nr))], source_etype=ty)
            a_col = b.gep(a_tap, [ch], source_etype=ty)
            rows = [b.gep(a_col, [i64(i * lda)], source_etype=ty) for i in range(mr)]
            tile.add_products(ctx, b_row, rows)
    tile.store_clipped(ctx, c_ptr, ldc, accumulate, i64(mr), cols)
    b.ret_void()
    return function
