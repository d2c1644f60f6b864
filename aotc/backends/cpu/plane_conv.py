"""Direct convolution of NCHW images on the GEMM's register tiles, no im2col.

The GEMM of a convolution (conv.py) is C[Cout, pixels] = weights[Cout, Cin*taps]
x columns[Cin*taps, pixels]; im2col packs the columns, a copy of the image per
tap.  Here the micro-kernel reads them from the image itself: the image is
copied once with its padding (and, for stride s, split into s x s phase planes,
plane (py, px) holding padded rows s*i + py, columns s*j + px), so that tap
(ky, kx) of output pixel (y, x) is element (y + ky//s)*Wq + x + kx//s of plane
(ky % s, kx % s), Wq the planes' width.  Over the "grid" q = y*Wq + x, every
tap's column row is then the plane read from a constant offset: an NR-pixel
tile of the grid loads NR contiguous values per (channel, tap), whatever the
stride, and its A values (MR output channels) come from the weights packed as
for the GEMM (prepack.py).  Grid columns x >= Wo are not output pixels: the
tiles compute them, and their stores skip them, unless the tiles are compact
(AVX-512, `compact_tiles`): then a tile's lanes are output pixels, each vector
loaded as one masked load per output row it touches.  An image read in place with its
padding masked (no planes: where the memory plan has no room for them) runs at stride
2 over "lane rows", output rows in whole vectors, so that each vector lies in one row.
A stride-1 convolution without padding reads an image that is in memory row after row
in place.  A grouped
convolution is one such convolution per feature group, on its slice of the
planes' channels into its slice of the output channels, A packed group by group.

Loops, per image: the planes (in parallel over channels), then (run of tiles,
group) pairs shared out to the threads; in one, per block of the group's input
channels (the A panel in L1, the run's planes in L2), per A panel, the run's tiles
(adding to C after the first block); then the epilogue on the group's channels
over the run's pixels, which are contiguous.

Where the memory plan has no room for the whole image's planes at the kernel's step
(its `Budget`), they are copied a band of output rows at a time (`banded`), each band
run as an image of its own whose planes cover the padded rows it reads.  Where the
epilogue reads an operand computed in place in the output, the values of a unit go to
its thread's region instead of C (`with_unit_values`), read from there by its epilogue.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

from llvmlite import ir

from ...buffers import Slice
from ..llvm.context import EmitContext
from ..llvm.lltypes import I1, I32, I64, PTR, i64, i64_table
from ..llvm.loops import entry_alloca, for_range, if_then
from .blocked_gemm import emit_region
from .blocking import Blocking, aligned, blocking
from .conv import ConvGeometry, ConvProblem
from .direct_conv import Image
from .gemm_config import GemmConfig
from .gemm_split import MAX_PARTS, share_out
from .parallel import parallel_loop_nest_passing
from .prepackable import PackedShape, Prepackable, StridedLayout, packed_workspace
from .shared_functions import shared_function
from .tiles import Tile
from .vectors import lanes_below, masked_load, smaller, splat, store_first, store_lanes
from .workspace import Budget

# Work on grid columns that are no pixels (past the rows' ends, the last tile's rest)
# against the pixels' own, at most.  Relative to im2col + GEMM, one thread: DenseNet-121's
# 3x3 128 -> 32 at 56x56 (4% waste) 0.89 of the time, at 28x28 (10%) 0.95, at 14x14
# (22%) 1.04; ResNet-50's 1x1 at 7x7 and 14x14 (grids of 49 and 196 in tiles of 48)
# 1.14-1.7.
MAX_WASTE = 1.12


@dataclass(frozen=True)
class TileRule:
    """How a convolution's register tile is sized, and the waste it may take."""

    edges: bool  # as the GEMM's, whose last columns the edge kernel takes (else: masked)
    max_waste: float


# (grouped, strided, most output channels per group, its rule): the first row that
# holds (None: either).  One group: the tile and limit measured above.  Grouped, where
# im2col packs every group's columns for a GEMM of that group's few rows, one thread
# against im2col: strided, 1.7-3x faster at 1.31 waste (7x7 outputs, 8-32 rows per
# group), 1.1-1.2x at 1.04; stride 1, up to 16 rows per group, 1.0-1.45x (7x7 at 1.31
# to 56x56), but 3-8% slower at 32 and 64 rows, waste or not.  Grouped tiles are sized
# by the grid in whole masked tiles (7x7: 8 x 32, not 8 x 48), as this form runs them.
TILE_RULES = (
    (False, None, math.inf, TileRule(edges=True, max_waste=MAX_WASTE)),
    (True, True, math.inf, TileRule(edges=False, max_waste=1.35)),
    (True, False, 16, TileRule(edges=False, max_waste=1.35)),
    (True, False, math.inf, TileRule(edges=False, max_waste=0.0)),
)

# An image read in place with its padding masked (`masks_padding`) loops over the taps
# outside its channels where a channel's plane takes at most these bytes, and plan_planes
# takes it over the copied planes at stride 1 there: against them, one thread, 3x3 at
# 40x40, 56x56 and 28x28 0.81-0.91 of the time (the channels outside: 1.07-1.19).  Above,
# the channels outside, only where the planes do not fit: 3x3 at 80x80 1.35, 112x112
# 1.23, 224x224 1.01-1.1 (the taps outside at 112x112 1.29: one tap's rows of all
# channels fall in few L1 sets); at stride 2, 3x3 to 28x28 and 56x56 in lane rows 1.13
# and 1.09 (in compact tiles 1.75), to 14x14 1.47 (3.0), to 7x7 (compact) 4.5.
TAPS_OUTSIDE_PLANE_BYTES = 16 * 1024

# Compact tiles (AVX-512 only, where a masked load is one instruction): a tile's lanes
# are output pixels, not grid columns, each vector loaded from the planes in one
# masked load per output row it touches (`segments`), so no work goes to the grid's
# junk columns.  At most this many loads per vector (rows at least 5 wide).
MAX_SEGMENTS = 4

# An image read in place at column stride 2 loads two vectors per row piece (a compact
# vector has two or more): there the tiles run over output rows in whole vectors
# (`lane_row_width`), one piece each, where that computes at most this many positions
# per pixel (rows of 28 and 14 in vectors of 16: 1.14).
MAX_LANE_ROW_WASTE = 1.15

# grid pixels of a unit of work: a few tiles, whose C (all output channels) stays in L2
# across the channel blocks
RUN_C_BYTES = 192 * 1024
# and the image's runs are at least this many (where it has the tiles), so that the
# threads share them out evenly
MIN_UNITS = 8
# values kept per unit (`with_unit_values`) go to at least this many threads' regions
MIN_VALUE_PARTS = 2
# bands of planes (`banded`) hold at least this many output pixels: each band costs
# two dispatches to the threads (its planes, its units)
MIN_BAND_PIXELS = 128


@dataclass(frozen=True)
class Planes(Image):
    """One 2-D convolution (direct_conv.py's terms, no dilation) in plane terms, of
    `groups` feature groups (`channels` and `cout` count all groups')."""

    groups: int = 1

    @property
    def group_channels(self) -> int:
        return self.channels // self.groups

    @property
    def group_cout(self) -> int:
        return self.cout // self.groups

    @property
    def group_k(self) -> int:
        """K of one group's GEMM: its input channels' taps."""
        return self.taps * self.group_channels

    @property
    def phases(self) -> list[tuple[int, int]]:
        """The phase planes some tap reads, in order."""
        used = {
            (ky % self.stride[0], kx % self.stride[1])
            for ky in range(self.kernel[0])
            for kx in range(self.kernel[1])
        }
        return sorted(used)

    @property
    def plane_shape(self) -> tuple[int, int]:
        """(Hq, Wq): rows and columns of a phase plane of the padded image."""
        rows, cols = self.padded
        return -(-rows // self.stride[0]), -(-cols // self.stride[1])

    @property
    def plane_size(self) -> int:
        rows, cols = self.plane_shape
        return rows * cols

    @property
    def channel_size(self) -> int:
        """Elements of one input channel's planes."""
        return len(self.phases) * self.plane_size

    @property
    def grid(self) -> int:
        """Grid positions up to the last output pixel (the last row's junk left out)."""
        return (self.out_height - 1) * self.plane_shape[1] + self.out_width

    def tap_offsets(self) -> list[int]:
        """Each tap's offset, in elements, from a channel's planes to its column row."""
        cols = self.plane_shape[1]
        phases = self.phases
        sh, sw = self.stride
        return [
            phases.index((ky % sh, kx % sw)) * self.plane_size + (ky // sh) * cols + kx // sw
            for ky in range(self.kernel[0])
            for kx in range(self.kernel[1])
        ]

    @property
    def in_place(self) -> bool:
        """The planes are the image itself: stride 1, no padding."""
        return self.stride == (1, 1) and not any((*self.pad_low, *self.pad_high))


def plan_planes(problem: ConvProblem) -> PlaneConvPlan | None:
    """The plane form of a float NCHW convolution (conv.py's problem) over an image in
    memory, when its tiles waste little: at most its TILE_RULES row's `max_waste` of the
    pixels' work in grid columns past the rows' ends and in the last tile.  Small planes
    at stride 1 that `masks_padding` takes are read in place (faster than copied, see
    TAPS_OUTSIDE_PLANE_BYTES)."""
    found = _problem_planes(problem)
    if found is None:
        return None
    planes, rule, view = found
    g, config = problem.geometry, problem.config
    blocks = blocking(config, planes.group_cout, planes.grid, planes.group_k, rule.edges)
    # whether the planes pay is the grid's waste in whole tiles, as TILE_RULES measured
    # it (compact tiles admitting more one-group convolutions made some slower than
    # the GEMM: 3x3/2 128 -> 256 at 28x28 0.86)
    if -(-planes.grid // blocks.nr) * blocks.nr > rule.max_waste * planes.pixels:
        return None
    # (an unpadded image is read in place on the grid: no planes to copy)
    small = planes.stride == (1, 1) and _plane_bytes(planes, config) <= TAPS_OUTSIDE_PLANE_BYTES
    fast_masks = config.lanes * config.itemsize == 64  # AVX-512: one instruction each
    if small and fast_masks and not planes.in_place and masks_padding(planes, config, view, g):
        return plan_masked(problem)
    compact = False
    if compact_tiles(planes, config):
        fewer = blocking(config, planes.group_cout, planes.pixels, planes.group_k, rule.edges)
        columns = tile_columns(planes.pixels, fewer.nr, config.lanes)
        if columns < tile_columns(planes.grid, blocks.nr, config.lanes):
            compact, blocks = True, fewer
    plan = _plane_plan(problem, planes, view, blocks, compact)
    return plan.banded(problem.budget)


def plan_masked(problem: ConvProblem) -> PlaneConvPlan | None:
    """The plane form reading the image in place with its padding masked, where
    `masks_padding` takes it: no workspace (the weights pre-packed), in compact tiles
    over the pixels, whatever the grid would waste.  The last of the forms: the others
    that fit are faster, but for small planes (`plan_planes` takes it there)."""
    found = _problem_planes(problem)
    if found is None:
        return None
    planes, rule, view = found
    config = problem.config
    if not masks_padding(planes, config, view, problem.geometry):
        return None
    blocks = blocking(config, planes.group_cout, planes.pixels, planes.group_k, rule.edges)
    compact = replace(_plane_plan(problem, planes, view, blocks, True), masked_padding=True)
    lane_rows = replace(compact, compact=False)
    if (
        planes.stride[1] == 2
        and blocks.nr % config.lanes == 0
        and lane_rows.positions <= MAX_LANE_ROW_WASTE * planes.pixels
    ):
        return lane_rows
    return compact


def _problem_planes(problem: ConvProblem):
    """(planes, tile rule, image view) of a convolution the plane forms may take."""
    view = problem.image_view
    if not problem.float_nchw or view is None:
        return None
    planes = planes_of(problem.geometry)
    if planes is None:
        return None
    return planes, tile_rule(planes), view


def _plane_plan(problem: ConvProblem, planes: Planes, view, blocks, compact: bool):
    """The PlaneConvPlan of `problem` on `planes` in `blocks`' register tiles."""
    g = problem.geometry
    dims = g.dims
    strides = tuple(
        view.strides[d] for d in (dims.input_batch, dims.input_feature, *dims.input_spatial)
    )
    weights = problem.weights_factory()  # the kernel's GEMM panels, when not pre-packed
    return PlaneConvPlan(
        problem.config,
        planes,
        strides,
        g.output_index,
        blocks.mr,
        blocks.nr,
        layouts=(problem.weights_layout, None),
        weights=lambda ctx, sources, group: weights(ctx, sources, (None, group)),
        compact=compact,
    )


def _plane_bytes(planes: Planes, config: GemmConfig) -> int:
    """The bytes of one channel of the image."""
    return planes.height * planes.width * config.itemsize


def masks_padding(planes: Planes, config: GemmConfig, view, g: ConvGeometry) -> bool:
    """Whether the tiles read an image (column stride 1 or 2) where it is, its padding
    (if any) being the lanes their masked loads leave zero (`compact_tiles`' limit on
    the rows a vector touches, rows back to back): no planes to copy, no workspace."""
    dims = g.dims
    channel, row, column = (view.strides[d] for d in (dims.input_feature, *dims.input_spatial))
    in_memory = column == 1 and row == planes.width and channel == planes.height * planes.width
    return (
        in_memory
        and planes.stride[1] in (1, 2)
        and segments(planes.out_width, config.lanes) <= MAX_SEGMENTS
    )


def compact_tiles(planes: Planes, config: GemmConfig) -> bool:
    """Whether the tiles can be compact (MAX_SEGMENTS): the grid has junk columns,
    the vectors are AVX-512's and rows wide enough.  plan_planes takes them where
    they compute fewer columns (an even choice stays on the grid: fewer loads)."""
    width = planes.out_width
    return (
        planes.plane_shape[1] > width
        and config.lanes * config.itemsize == 64
        and segments(width, config.lanes) <= MAX_SEGMENTS
    )


def segments(width: int, lanes: int) -> int:
    """The most output rows `width` wide that `lanes` consecutive pixels touch."""
    return (width + lanes - 2) // width + 1


def tail_width(positions: int, nr: int, lanes: int) -> int:
    """The last tile's width: the positions left after whole NR tiles, its last
    vector rounded up to a power of two (all of NR when none are left)."""
    left = positions - (-(-positions // nr) - 1) * nr
    vectors, rest = divmod(left, lanes)
    return vectors * lanes + (1 << (rest - 1).bit_length() if rest else 0)


def tile_columns(positions: int, nr: int, lanes: int) -> int:
    """Columns the tiles compute over `positions`, in whole vectors: whole tiles,
    then the last one's."""
    last = -(-tail_width(positions, nr, lanes) // lanes) * lanes
    return (-(-positions // nr) - 1) * nr + min(last, nr)


def tile_rule(planes: Planes) -> TileRule:
    """The first of TILE_RULES that holds for `planes`."""
    grouped, strided = planes.groups > 1, planes.stride != (1, 1)
    return next(
        rule
        for is_grouped, is_strided, rows, rule in TILE_RULES
        if is_grouped == grouped and is_strided in (None, strided) and planes.group_cout <= rows
    )


def planes_of(g: ConvGeometry) -> Planes | None:
    """The `Planes` of a convolution's geometry `g`: a 2-D convolution without dilation and
    with padding not negative, not depthwise; None otherwise."""
    w = g.window
    if len(g.out_spatial) != 2 or g.is_depthwise:
        return None
    if any(d != 1 for d in (*w.lhs_dilation, *w.rhs_dilation)):
        return None
    if min(*w.pad_low, *w.pad_high) < 0:
        return None
    (height, width), (out_height, out_width) = g.in_spatial, g.out_spatial
    return Planes(
        g.batch,
        height,
        width,
        g.cin_g * g.groups,
        out_height,
        out_width,
        g.cout,
        tuple(w.size),
        tuple(w.stride),
        (1, 1),
        tuple(w.pad_low),
        tuple(w.pad_high),
        g.groups,
    )


@dataclass
class PlaneConvPlan(Prepackable):
    """How one NCHW convolution runs directly on its image planes (module docstring).
    A is the kernel (convolution operand 1), B the image."""

    config: GemmConfig
    planes: Planes
    image_strides: tuple[int, int, int, int]  # batch, channel, row, column (elements)
    # (builder, image, channel, pixel) -> the convolution's output index (conv.py's)
    output_index: object
    mr: int
    nr: int
    layouts: tuple[StridedLayout | None, None] = (None, None)
    packed: tuple[Slice | None, None] = (None, None)
    operands: tuple[int, int] = (1, 0)
    # (ctx, sources, group) -> Panels of a group's kernel, when not pre-packed
    weights: object = None
    compact: bool = False  # lanes are pixels (MAX_SEGMENTS), else grid columns
    # the values of a unit go to its thread's region of C (`with_unit_values`), not to
    # C itself: `value_parts` regions, the units shared out in that many parts
    value_parts: int = 0
    # tiles per unit (0: `run`'s own): fewer, so that the regions of unit values fit
    run_tiles: int = 0
    # output rows per band (0: the whole image at once): the planes of one band at a
    # time, where the whole image's would not fit the bytes free at the kernel's step
    band_rows: int = 0
    image: Planes | None = None  # a band's plan: the whole image's geometry
    # the padded image read where it is, its padding the lanes the compact tiles'
    # masked loads leave zero (`masks_padding`)
    masked_padding: bool = False
    kind = "planes"

    def can_pack(self, side: int) -> bool:
        return side == 0 and super().can_pack(side)

    @property
    def block(self) -> int:
        """A group's input channels per block: the A panel (MR x block*taps) fits L1."""
        p, size = self.planes, self.config.itemsize
        fitting = max(self.config.blocks.l1 // (self.mr * p.taps * size), 1)
        blocks = -(-p.group_channels // fitting)
        return -(-p.group_channels // blocks)

    @property
    def kc(self) -> int:
        return self.block * self.planes.taps

    def packed_shape(self, side: int) -> PackedShape:
        p = self.planes
        return PackedShape(p.group_cout, p.group_k, self.kc, self.mr, (1,), (p.groups,))

    @property
    def reads_in_place(self) -> bool:
        """The image is read where it is: in-place planes and rows back to back."""
        p = self.planes
        _, channel, row, column = self.image_strides
        rows_contiguous = row == p.width and column == 1
        unpadded = p.in_place or self.masked_padding
        return unpadded and rows_contiguous and channel == p.height * p.width

    @property
    def _panel_bytes(self) -> int:
        if self.packed[0] is not None:
            return 0
        return aligned(self.packed_shape(0).elements * self.config.itemsize)

    @property
    def _plane_bytes(self) -> int:
        """One image's planes, or one band's."""
        if self.reads_in_place:
            return 0
        p = self._band(self.band_rows).planes if self.band_rows else self.planes
        return aligned(p.channels * p.channel_size * self.config.itemsize)

    def banded(self, budget: Budget | None) -> PlaneConvPlan:
        """This plan in the tallest band (of balanced heights, at least MIN_BAND_PIXELS)
        whose workspace fits the bytes `budget` has free, else in the band of the
        smallest workspace; the whole image where its planes fit (or None: any)."""
        if budget is None or self.reads_in_place or packed_workspace(self) <= budget.free:
            return self
        p = self.planes
        shortest = min(-(-MIN_BAND_PIXELS // p.out_width), p.out_height)
        rows = p.out_height
        heights = sorted({-(-rows // n) for n in range(2, rows + 1)} - set(range(shortest)))
        plans = [replace(self, band_rows=h) for h in reversed(heights)]
        fitting = [plan for plan in plans if packed_workspace(plan) <= budget.free]
        if fitting:
            return fitting[0]
        return min(plans, key=packed_workspace, default=self)

    @property
    def workspace_bytes(self) -> int:
        """A's panels (unless pre-packed), then one image's planes (unless in place)."""
        return self._panel_bytes + self._plane_bytes

    @property
    def positions(self) -> int:
        """What the tiles cover: the pixels (compact), the lane rows (an image read in
        place, not compact) or the grid."""
        if self.compact:
            return self.planes.pixels
        return self.planes.out_height * self._grid_width

    @property
    def _grid_width(self) -> int:
        """Positions per output row: the planes' width, or for an image read in place
        with its padding masked, the output row in whole vectors (`lane_row_width`)."""
        if self.masked_padding:
            return lane_row_width(self.planes.out_width, self.config.lanes)
        return self.planes.plane_shape[1]

    @property
    def units(self) -> int:
        """Units of work per image and group: runs of `run` positions."""
        return -(-self.positions // self.run)

    @property
    def unit_bytes(self) -> int:
        """One unit's values: its group's output channels over `run` positions."""
        return aligned(self.planes.group_cout * self.run * self.config.itemsize)

    @property
    def values_bytes(self) -> int:
        """The regions of unit values (0: the values go to C)."""
        return self.value_parts * self.unit_bytes

    @property
    def least_values_bytes(self) -> int:
        """The regions of unit values at their smallest: MIN_VALUE_PARTS one-tile units."""
        return MIN_VALUE_PARTS * replace(self, run_tiles=1).unit_bytes

    def with_unit_values(self, free: int) -> PlaneConvPlan | None:
        """This plan keeping each unit's values in its thread's region until its epilogue
        has read them (an epilogue operand computed in place in C would be overwritten
        by C's values): as many regions as fit in `free` bytes, between MIN_VALUE_PARTS
        and MAX_PARTS (threads beyond them idle in this kernel), the units shortened
        (to one tile) where MIN_VALUE_PARTS would not fit; None where the regions
        would be no smaller than the whole output's values."""
        plan = self
        tiles = self.run // self.nr
        if MIN_VALUE_PARTS * self.unit_bytes > free and tiles > 1:
            tile_bytes = replace(self, run_tiles=1).unit_bytes
            plan = replace(
                self, run_tiles=min(max(free // (MIN_VALUE_PARTS * tile_bytes), 1), tiles)
            )
        most = min(plan.units * plan.planes.groups, MAX_PARTS)
        parts = min(max(free // plan.unit_bytes, MIN_VALUE_PARTS), most)
        whole = aligned(
            plan.planes.batch * plan.planes.cout * plan.planes.pixels * plan.config.itemsize
        )
        if parts * plan.unit_bytes >= whole:
            return None
        return replace(plan, value_parts=parts)

    @property
    def run(self) -> int:
        """Grid positions per unit of work: whole tiles, C of all channels in L2 (or
        `run_tiles`)."""
        if self.run_tiles:
            return self.run_tiles * self.nr
        p, size = self.planes, self.config.itemsize
        total = -(-self.positions // self.nr)
        tiles = min(RUN_C_BYTES // (p.cout * self.nr * size), -(-total // MIN_UNITS))
        return max(tiles, 1) * self.nr

    def emit(self, ctx: EmitContext, sources, c: Slice, workspace: Slice, epilogue) -> None:
        p = self.planes
        b = ctx.builder
        start = ctx.slice_pointer(workspace)
        if self.packed[0] is not None:
            weights = ctx.slice_pointer(self.packed[0])
        else:
            weights = start
            self._pack_weights(ctx, sources, weights)
        planes = ctx.byte_pointer(start, self._panel_bytes)
        with for_range(b, p.batch, "image") as n:
            image = sources[0].view.pointer(ctx, b.mul(n, i64(self.image_strides[0])))
            self._image(ctx, c, n, image, planes, weights, epilogue)

    def _image(self, ctx, c: Slice, n, image, planes, weights, epilogue) -> None:
        """Image `n` (at `image`): its planes (`planes`: where they go) and units, band
        by band where the plan has bands."""
        if self.reads_in_place:
            self._units(ctx, c, n, image, weights, epilogue)
            return
        if not self.band_rows:
            self._copy_planes(ctx, image, planes)
            self._units(ctx, c, n, planes, weights, epilogue)
            return
        first = 0
        for rows, count in self._bands():
            band = self._band(rows)
            with for_range(ctx.builder, count, "band") as k:
                b = ctx.builder
                y0 = b.add(i64(first), b.mul(k, i64(rows)))
                band._copy_planes(ctx, image, planes, y0)
                band._units(ctx, c, n, planes, weights, epilogue, y0)
            first += rows * count

    def _bands(self) -> list[tuple[int, int]]:
        """(output rows, how many bands of them) in order: the whole image in one band,
        or bands of `band_rows` then the rest."""
        rows = self.band_rows or self.planes.out_height
        full, rest = divmod(self.planes.out_height, rows)
        return [(rows, full)] + [(rest, 1)] * (rest > 0)

    def _band(self, rows: int) -> PlaneConvPlan:
        """The plan of a band of `rows` output rows (the whole image: this plan): its
        planes cover the padded rows those output rows read."""
        p = self.planes
        if rows == p.out_height and not self.band_rows:
            return self
        band = replace(
            p,
            height=p.stride[0] * (rows - 1) + p.kernel[0],
            out_height=rows,
            pad_low=(0, p.pad_low[1]),
            pad_high=(0, p.pad_high[1]),
        )
        return replace(self, planes=band, band_rows=0, image=p)

    def _units(self, ctx, c: Slice, n, source, weights, epilogue, y0=None) -> None:
        """The units of image `n` (of its band from output row `y0`; None: the whole
        image) over the planes or image at `source`, shared out to the threads."""
        p, b = self.planes, ctx.builder
        work = p.pixels * p.cout * p.group_k
        values = [n, b.ptrtoint(source, I64), b.ptrtoint(weights, I64)]
        values += [] if y0 is None else [y0]

        def unit(index, slot, passed):
            b = ctx.builder
            n, source, weights, *band = passed
            source, weights = b.inttoptr(source, PTR), b.inttoptr(weights, PTR)
            self._run(ctx, c, *index, n, source, weights, epilogue, slot, *band)

        dims = (self.units, p.groups)

        if self.value_parts:
            share_out(ctx, dims, self.value_parts, unit, values)
        else:
            with parallel_loop_nest_passing(ctx, dims, values, "run", work) as shared:
                unit(shared[0], None, shared[1])

    def _pack_weights(self, ctx, sources, dst) -> None:
        """A as the pre-packed copy would be: group by group, block by block of kc,
        panels of MR."""
        p, ty = self.planes, self.config.element
        m, k = p.group_cout, p.group_k
        padded = self.packed_shape(0).padded
        blocks = Blocking(self.config, m, p.grid, k, self.mr, self.nr, self.kc, m, self.nr)
        with for_range(ctx.builder, p.groups, "group") as group:
            b = ctx.builder
            operand = self.weights(ctx, sources, group)
            group_dst = b.gep(dst, [b.mul(group, i64(padded * k))], source_etype=ty)
            for k0 in range(0, k, self.kc):
                kc = min(self.kc, k - k0)
                at = b.gep(group_dst, [i64(k0 * padded)], source_etype=ty)
                operand.pack(ctx, blocks, at, i64(0), i64(m), i64(k0), i64(kc), self.mr)

    def _copy_planes(self, ctx, image, planes, y0=None) -> None:
        """The image's phase planes, padding zero, over (channel, row phase, plane row):
        each image row read once into the planes of all column phases; of a band's
        plan, the planes of its band from output row `y0` (an i64)."""
        p, ty = self.planes, self.config.element
        whole = self.image or p
        _, channel_stride, row_stride, _ = self.image_strides
        rows, cols = p.plane_shape
        sh = p.stride[0]
        top = whole.pad_low[0]
        # the phases are every row phase with every column phase, sorted
        row_phases = sorted({py for py, _ in p.phases})
        column_phases = sorted({px for _, px in p.phases})
        work = p.channels * p.channel_size
        dims = [p.channels, len(row_phases), rows]
        values = [ctx.builder.ptrtoint(image, I64), ctx.builder.ptrtoint(planes, I64)]
        if y0 is not None:  # the band's first plane row is the image's padded row y0*sh
            values.append(ctx.builder.sub(ctx.builder.mul(y0, i64(sh)), i64(top)))
        with parallel_loop_nest_passing(ctx, dims, values, "plane", work) as (index, passed):
            b = ctx.builder
            channel, row_phase, i = index
            image, planes = (b.inttoptr(v, PTR) for v in passed[:2])
            first = passed[2] if y0 is not None else i64(-top)
            y = b.add(b.add(b.mul(i, i64(sh)), _select(b, row_phase, row_phases)), first)
            inside = b.icmp_unsigned("<", y, i64(whole.height))
            src_row = b.gep(
                image,
                [b.add(b.mul(channel, i64(channel_stride)), b.mul(y, i64(row_stride)))],
                source_etype=ty,
            )
            first_plane = b.add(
                b.mul(channel, i64(p.channel_size)),
                b.mul(row_phase, i64(len(column_phases) * p.plane_size)),
            )
            outs = []
            for k in range(len(column_phases)):
                plane = b.add(first_plane, i64(k * p.plane_size))
                outs.append(b.gep(planes, [b.add(plane, b.mul(i, i64(cols)))], source_etype=ty))
            copy_row = self._copy_short_row if self._short_rows else self._copy_long_row
            copy_row(ctx, src_row, inside, outs, column_phases)

    @property
    def _short_rows(self) -> bool:
        """An image row and a plane row each fit two vectors, the row contiguous: each
        row is one masked load and, per column phase, a constant shuffle and a store."""
        p, most = self.planes, 2 * self.config.lanes
        return self.image_strides[3] == 1 and max(p.width, p.plane_shape[1]) <= most

    def _copy_short_row(self, ctx, src_row, inside, outs, column_phases) -> None:
        """Plane rows `outs` (one per column phase) of image row `src_row`, zero where
        not `inside` the image (_short_rows)."""
        p, cfg, b = self.planes, self.config, ctx.builder
        cols, sw, left = p.plane_shape[1], p.stride[1], p.pad_low[1]
        width = 1 << (p.width - 1).bit_length()
        in_row = lanes_below(b, i64(p.width), width)
        mask = b.select(inside, in_row, ir.Constant(in_row.type, None))
        row = masked_load(ctx, b, cfg, src_row, mask)
        zeros = ir.Constant(row.type, None)
        out_width = 1 << (cols - 1).bit_length()
        for out, px in zip(outs, column_phases):
            # plane column j holds image column sw*j + px - left, or zero (lane `width`)
            picks = [sw * j + px - left for j in range(out_width)]
            picks = [x if 0 <= x < p.width else width for x in picks]
            lanes = b.shuffle_vector(row, zeros, ir.Constant(ir.VectorType(I32, out_width), picks))
            store_first(ctx, cfg, lanes, out, cols)

    def _copy_long_row(self, ctx, src_row, inside, outs, column_phases) -> None:
        """Plane rows `outs` (one per column phase) of image row `src_row`, zero where
        not `inside` the image: a stride-2 row read once into its even and odd
        columns' planes (vector loads and two shuffles)."""
        p, ty, b = self.planes, self.config.element, ctx.builder
        column_stride = self.image_strides[3]
        cols, sw, left = p.plane_shape[1], p.stride[1], p.pad_low[1]
        spans = []
        for px in column_phases:
            # columns j whose x = sw*j + px - left is in [0, width): [first, last)
            first = _clamp(b, _ceil_div(b, i64(left - px), sw), cols)
            last = _clamp(b, _ceil_div(b, i64(left - px + p.width), sw), cols)
            spans.append((b.select(inside, first, i64(0)), b.select(inside, last, i64(0))))
        # the columns every phase copies, read as one interleaved run
        joint_first = spans[0][0]
        joint_last = spans[0][1]
        for first, last in spans[1:]:
            joint_first = b.select(b.icmp_signed(">", first, joint_first), first, joint_first)
            joint_last = b.select(b.icmp_signed("<", last, joint_last), last, joint_last)

        def copy(out, px, start, stop):
            with for_range(b, b.sub(stop, start), "cp") as t:
                j = b.add(start, t)
                x = b.sub(b.add(b.mul(j, i64(sw)), i64(px)), i64(left))
                at = b.gep(src_row, [b.mul(x, i64(column_stride))], source_etype=ty)
                b.store(b.load(at, typ=ty), b.gep(out, [j], source_etype=ty))

        def zero(out, start, stop):
            with for_range(b, b.sub(stop, start), "zero") as t:
                b.store(ir.Constant(ty, 0), b.gep(out, [b.add(start, t)], source_etype=ty))

        joint = b.icmp_signed("<", joint_first, joint_last)
        with b.if_else(joint) as (together, apart):
            with together:
                for out, px, (first, last) in zip(outs, column_phases, spans):
                    zero(out, i64(0), first)
                    copy(out, px, first, joint_first)
                    copy(out, px, joint_last, last)
                    zero(out, last, i64(cols))
                with for_range(b, b.sub(joint_last, joint_first), "cp", True) as t:
                    j = b.add(joint_first, t)
                    x = b.sub(b.mul(j, i64(sw)), i64(left))
                    for out, px in zip(outs, column_phases):
                        offset = b.mul(b.add(x, i64(px)), i64(column_stride))
                        value = b.load(b.gep(src_row, [offset], source_etype=ty), typ=ty)
                        b.store(value, b.gep(out, [j], source_etype=ty))
            with apart:
                for out, px, (first, last) in zip(outs, column_phases, spans):
                    zero(out, i64(0), first)
                    copy(out, px, first, last)
                    zero(out, last, i64(cols))

    def _run(self, ctx, c: Slice, unit, group, n, source, weights, epilogue, slot, y0=None):
        """Unit `unit` of group `group` of image `n` (of its band from output row `y0`):
        its tiles, then its epilogue (with unit values, `c` holds the regions and `slot`
        picks this thread's)."""
        p, ty, b = self.planes, self.config.element, ctx.builder
        pixels = (self.image or p).pixels  # C's, per output channel
        # the band's first pixel in C
        offset = i64(0) if y0 is None else b.mul(y0, i64(p.out_width))
        q0 = b.mul(unit, i64(self.run))
        q1 = smaller(b, b.add(q0, i64(self.run)), i64(self.positions))
        first, end = self._pixel(b, q0), self._pixel(b, q1)
        # elements from one group's A panels and planes to the next's
        sizes = (self.packed_shape(0).padded * p.group_k, p.group_channels * self._channel_stride)
        group_weights, group_planes = (
            b.gep(base, [b.mul(group, i64(size))], source_etype=ty)
            for base, size in zip((weights, source), sizes)
        )
        if self.value_parts:
            region = b.gep(
                ctx.slice_pointer(c),
                [b.mul(slot, i64(self.unit_bytes // self.config.itemsize))],
                source_etype=ty,
            )
            # the tiles store pixel `pixel` of channel m at region + m*run + pixel - first
            group_out = b.gep(region, [b.neg(first)], source_etype=ty)
        else:
            image_out = b.gep(
                ctx.slice_pointer(c), [b.mul(n, i64(p.cout * pixels))], source_etype=ty
            )
            if y0 is not None:
                image_out = b.gep(image_out, [offset], source_etype=ty)
            group_out = b.gep(
                image_out, [b.mul(group, i64(p.group_cout * pixels))], source_etype=ty
            )
        self._group_tiles(ctx, q0, q1, group_weights, group_planes, group_out)
        if epilogue is None:
            return
        m0 = b.mul(group, i64(p.group_cout))

        def finish(m, pixel):
            index = self.output_index(b, n, m, pixel if y0 is None else b.add(pixel, offset))
            if not self.value_parts:
                return epilogue(index)
            at = b.add(b.mul(b.sub(m, m0), i64(self.run)), pixel)
            return epilogue(index, b.gep(group_out, [at], source_etype=ty))

        emit_region(ctx, m0, i64(p.group_cout), first, b.sub(end, first), finish)

    def _group_tiles(self, ctx, q0, q1, weights, source, out) -> None:
        """One group's tiles of grid positions [q0, q1): block by block of its input
        channels (`source`: its first channel's planes), A panel by A panel (`weights`:
        its panels), into its output channels (`out`: its first one's)."""
        p, ty, b = self.planes, self.config.element, ctx.builder
        tiles = b.udiv(b.add(b.sub(q1, q0), i64(self.nr - 1)), i64(self.nr))
        padded = self.packed_shape(0).padded
        panels = -(-p.group_cout // self.mr)
        with for_range(b, -(-p.group_channels // self.block), "cblock") as cb:
            c0 = b.mul(cb, i64(self.block))
            channels = smaller(b, i64(self.block), b.sub(i64(p.group_channels), c0))
            kc = b.mul(channels, i64(p.taps))
            accumulate = b.icmp_unsigned("!=", cb, i64(0))
            block_a = b.gep(weights, [b.mul(c0, i64(p.taps * padded))], source_etype=ty)
            block_b = b.gep(source, [b.mul(c0, i64(self._channel_stride))], source_etype=ty)
            with for_range(b, panels, "apanel") as ip:
                m0 = b.mul(ip, i64(self.mr))
                rows = smaller(b, i64(self.mr), b.sub(i64(p.group_cout), m0))
                a_panel = b.gep(block_a, [b.mul(m0, kc)], source_etype=ty)
                c_rows = b.gep(out, [b.mul(m0, i64(self._ldc))], source_etype=ty)
                with for_range(b, tiles, "tile") as t:
                    q = b.add(q0, b.mul(t, i64(self.nr)))
                    cols = smaller(b, i64(self.nr), b.sub(q1, q))
                    whole = b.icmp_unsigned("==", cols, i64(self.nr))
                    args = [
                        a_panel,
                        block_b
                        if self.compact or self.masked_padding
                        else b.gep(block_b, [q], source_etype=ty),
                        channels,
                        c_rows,
                        q,
                        accumulate,
                        rows,
                        cols,
                    ]
                    with b.if_else(whole) as (full, partial):
                        with full:
                            b.call(self._kernel(ctx, masked=False), args)
                        with partial:
                            b.call(self._kernel(ctx, masked=True), args)

    @property
    def _ldc(self) -> int:
        """Elements from one output channel's values to the next's."""
        return self.run if self.value_parts else (self.image or self.planes).pixels

    @property
    def _channel_stride(self) -> int:
        """Elements between the planes of consecutive input channels."""
        if self.reads_in_place:
            return self.image_strides[1]
        return self.planes.channel_size

    def _pixel(self, b, q) -> ir.Value:
        """The first output pixel at position q or after."""
        p = self.planes
        if self.compact:
            return q
        cols = self._grid_width
        row = b.udiv(q, i64(cols))
        x = smaller(b, b.sub(q, b.mul(row, i64(cols))), i64(p.out_width))
        return b.add(b.mul(row, i64(p.out_width)), x)

    def _kernel(self, ctx, masked: bool) -> ir.Function:
        """The tile kernel; `masked`: the last tile's, narrower where fewer are left."""
        nr = tail_width(self.positions, self.nr, self.config.lanes) if masked else self.nr
        p = self.planes
        padding = None
        offsets, grid_width = tuple(p.tap_offsets()), p.plane_shape[1]
        if self.masked_padding:
            shifts = tuple(
                (ky - p.pad_low[0], kx - p.pad_low[1])
                for ky in range(p.kernel[0])
                for kx in range(p.kernel[1])
            )
            padding = Padding(p.height, p.width, shifts, p.stride)
            offsets = tuple(_shift_offset(shift, padding) for shift in shifts)
            grid_width = p.width if self.compact else self._grid_width
        return plane_kernel(
            ctx,
            self.config,
            self.mr,
            nr,
            self._channel_stride,
            offsets,
            grid_width,
            p.out_width,
            self._ldc,
            masked,
            self.compact,
            padding,
        )


def _select(b, index, values: list[int]) -> ir.Value:
    """values[index] for a small constant list."""
    result = i64(values[0])
    for k, value in enumerate(values[1:], 1):
        result = b.select(b.icmp_unsigned("==", index, i64(k)), i64(value), result)
    return result


def _ceil_div(b, x, d: int) -> ir.Value:
    """ceil(x / d) of a signed i64 and a positive constant."""
    return b.sdiv(b.add(x, i64(d - 1)), i64(d)) if d != 1 else x


def _clamp(b, x, high: int) -> ir.Value:
    """x clamped into [0, high]."""
    x = b.select(b.icmp_signed("<", x, i64(0)), i64(0), x)
    return smaller(b, x, i64(high))


@dataclass(frozen=True)
class Padding:
    """A padded image read in place (`masks_padding`): its rows and columns, and each
    tap's (row, column) shift from the output pixel to the value it reads."""

    height: int
    width: int
    shifts: tuple[tuple[int, int], ...]
    stride: tuple[int, int] = (1, 1)


def plane_kernel(
    ctx,
    cfg: GemmConfig,
    mr: int,
    nr: int,
    channel_stride: int,
    offsets,
    grid_width: int,
    out_width: int,
    ldc: int,
    masked: bool,
    compact: bool = False,
    padding: Padding | None = None,
) -> ir.Function:
    """`kernel(a, b, channels, c, q, accumulate, rows, cols)`: the tile at grid position
    q (+)= A x B.

    A holds MR values per k = (channel, tap), k ascending; B's NR values of (channel,
    tap) are at b + channel*channel_stride + offsets[tap].  The tile's grid column j
    is output pixel (row, x) = divmod(q + j, grid_width), stored at c[i*ldc + row *
    out_width + x] for rows i < `rows`, columns j < `cols` and x < out_width.
    `masked`: B's values past `cols` are not loaded (they may be past the image).
    `compact`: q and the tile's columns are output pixels, and b is at grid position
    0: column j's values are at grid position row*grid_width + x of pixel q + j.
    `padding` (compact tiles only): the grid is the unpadded image, and a tap's lanes
    whose value is in its padding are not loaded (zero)."""
    table_name = "_".join(map(str, offsets))
    form = ("m" if masked else "f") + ("c" if compact else "")
    if padding is not None:
        form += f"p{padding.height}s{padding.stride[0]}{padding.stride[1]}"
    name = (
        f"{ctx.prefix}.conv.planes.{cfg.dtype.text}.{mr}x{nr}.{channel_stride}."
        f"{grid_width}.{out_width}.{ldc}.{form}.{table_name}"
    )
    if len(name) > 200:
        # a digest, not hash(): the same model must give the same object in every process
        name = f"{name[:160]}.{hashlib.sha256(table_name.encode()).hexdigest()[:16]}"
    function, b = shared_function(ctx, name, [PTR, PTR, I64, PTR, I64, I1, I64, I64])
    if b is None:
        return function
    a_ptr, b_ptr, channels, c_ptr, q, accumulate, rows, cols = function.args
    tile = Tile(b, cfg, mr, nr)
    firsts = [sum(t.count for t in tile.types[:k]) for k in range(len(tile.types))]
    lane_masks = [lanes_below(b, cols, t.count, first) for t, first in zip(tile.types, firsts)]
    masks = lane_masks if masked or compact else None
    pieces = None
    if compact:
        pieces = [
            _row_pieces(b, q, first, mask, grid_width, out_width)
            for first, mask in zip(firsts, lane_masks)
        ]
    elif padding is not None:
        pieces = [
            _lane_row_piece(b, q, first, mask, grid_width, out_width)
            for first, mask in zip(firsts, lane_masks)
        ]
    if padding is not None:
        by_channel = padding.height * padding.width * cfg.itemsize > TAPS_OUTSIDE_PLANE_BYTES
        if by_channel:
            _padded_products_by_channel(
                ctx, b, cfg, tile, pieces, (a_ptr, b_ptr), channels, channel_stride, padding,
                table_name,
            )  # fmt: skip
        else:
            _padded_products(
                ctx, b, cfg, tile, pieces, (a_ptr, b_ptr), channels, channel_stride, padding
            )
    else:
        _grid_products(
            ctx,
            b,
            cfg,
            tile,
            pieces,
            masks,
            (a_ptr, b_ptr),
            channels,
            channel_stride,
            offsets,
            table_name,
        )
    if compact:  # the pixels are C's columns
        grid_width = out_width
    _store_grid_tile(
        ctx, b, cfg, tile, c_ptr, q, accumulate, rows, cols, grid_width, out_width, ldc
    )
    b.ret_void()
    return function


def _grid_products(ctx, b, cfg, tile: Tile, pieces, masks, pointers, channels, channel_stride,
                   offsets, table_name) -> None:  # fmt: skip
    """The tile += A x B over the channels and taps, B's values of a tap at its offset
    from each channel's planes (or its compact vectors' row pieces)."""
    ty, mr = cfg.element, len(tile.slots)
    a_ptr, b_ptr = pointers
    taps = len(offsets)
    with for_range(b, channels, "ch") as ch:
        base = b.gep(b_ptr, [b.mul(ch, i64(channel_stride))], source_etype=ty)
        a_channel = b.gep(a_ptr, [b.mul(ch, i64(taps * mr))], source_etype=ty)
        if pieces is None:
            for tap, tap_offset in enumerate(offsets):
                row = b.gep(base, [i64(tap_offset)], source_etype=ty)
                a_row = b.gep(a_channel, [i64(tap * mr)], source_etype=ty)
                a_values = [b.gep(a_row, [i64(i)], source_etype=ty) for i in range(mr)]
                tile.add_products(ctx, row, a_values, masks)
        else:
            # a loop over the taps: unrolled, LLVM loads ahead of the FMAs and spills
            table = i64_table(ctx.module, f"{ctx.prefix}.conv.taps.{table_name}", offsets)
            with for_range(b, i64(taps), "tap") as tap:
                offset = b.load(b.gep(table, [i64(0), tap]), typ=I64)
                row = b.gep(base, [offset], source_etype=ty)
                a_row = b.gep(a_channel, [b.mul(tap, i64(mr))], source_etype=ty)
                a_values = [b.gep(a_row, [i64(i)], source_etype=ty) for i in range(mr)]
                vectors = []
                for vector_pieces in pieces:
                    value = None
                    for at, mask, *_ in vector_pieces:
                        pointer = b.gep(row, [at], source_etype=ty)
                        value = masked_load(ctx, b, cfg, pointer, mask, value)
                    vectors.append(value)
                tile.add_outer(ctx, vectors, a_values)


def _padded_products(ctx, b, cfg, tile: Tile, pieces, pointers, channels, channel_stride,
                     padding: Padding) -> None:  # fmt: skip
    """The tile += A x B over the taps and channels of an image read in place: per tap,
    each vector's row pieces shifted by it, their lanes whose value is in the padding
    (row or column outside the image) left out of the masks, then the channels (taps
    outside: their masks then stay in registers; faster than the channels outside with
    the masks kept per tap, at 28x28 and 56x56)."""
    ty, mr = cfg.element, len(tile.slots)
    a_ptr, b_ptr = pointers
    taps = len(padding.shifts)
    for tap, shift in enumerate(padding.shifts):
        loads = [[_TapLoad.of(b, piece, shift, padding) for piece in vp] for vp in pieces]
        with for_range(b, channels, "ch") as ch:
            base = b.gep(b_ptr, [b.mul(ch, i64(channel_stride))], source_etype=ty)
            a_row = b.gep(a_ptr, [b.add(b.mul(ch, i64(taps * mr)), i64(tap * mr))], source_etype=ty)
            a_values = [b.gep(a_row, [i64(i)], source_etype=ty) for i in range(mr)]
            vectors = []
            for vector_loads in loads:
                value = None
                for load in vector_loads:
                    value = load.load(ctx, b, cfg, base, load.position, value)
                vectors.append(value)
            tile.add_outer(ctx, vectors, a_values)


def _padded_products_by_channel(ctx, b, cfg, tile: Tile, pieces, pointers, channels,
                                channel_stride, padding: Padding, table_name: str) -> None:  # fmt: skip
    """`_padded_products` with the channels outside and the taps inside, each tap's
    masks kept on the stack: for planes big enough that the channels' rows of one tap
    fall in few L1 sets."""
    ty, mr = cfg.element, len(tile.slots)
    a_ptr, b_ptr = pointers
    taps = len(padding.shifts)
    # per vector and piece: the first tap's load, and each tap's masks on the stack
    firsts = [[_TapLoad.of(b, piece, padding.shifts[0], padding) for piece in vp] for vp in pieces]
    stacks = [
        [[entry_alloca(b, ir.ArrayType(m.type, taps)) for m in load.masks] for load in vl]
        for vl in firsts
    ]
    for tap, shift in enumerate(padding.shifts):
        for vector_pieces, vector_stacks in zip(pieces, stacks):
            for piece, arrays in zip(vector_pieces, vector_stacks):
                for mask, array in zip(_TapLoad.of(b, piece, shift, padding).masks, arrays):
                    b.store(mask, b.gep(array, [i64(0), i64(tap)]))
    first_shift = _shift_offset(padding.shifts[0], padding)
    offsets = [_shift_offset(shift, padding) - first_shift for shift in padding.shifts]
    table = i64_table(ctx.module, f"{ctx.prefix}.conv.taps.{table_name}", offsets)
    with for_range(b, channels, "ch") as ch:
        base = b.gep(b_ptr, [b.mul(ch, i64(channel_stride))], source_etype=ty)
        a_channel = b.gep(a_ptr, [b.mul(ch, i64(taps * mr))], source_etype=ty)
        with for_range(b, i64(taps), "tap") as tap:
            row = b.gep(base, [b.load(b.gep(table, [i64(0), tap]), typ=I64)], source_etype=ty)
            a_row = b.gep(a_channel, [b.mul(tap, i64(mr))], source_etype=ty)
            a_values = [b.gep(a_row, [i64(i)], source_etype=ty) for i in range(mr)]
            vectors = []
            for vector_loads, vector_stacks in zip(firsts, stacks):
                value = None
                for load, arrays in zip(vector_loads, vector_stacks):
                    masks = [
                        b.load(b.gep(array, [i64(0), tap]), typ=m.type)
                        for m, array in zip(load.masks, arrays)
                    ]
                    value = replace(load, masks=tuple(masks)).load(
                        ctx, b, cfg, row, load.position, value
                    )
                vectors.append(value)
            tile.add_outer(ctx, vectors, a_values)


def _shift_offset(shift: tuple[int, int], padding: Padding) -> int:
    """Elements from an output pixel's input position to a tap's value."""
    dy, dx = shift
    return dy * padding.width + dx


@dataclass(frozen=True)
class _TapLoad:
    """How one row piece of a compact vector (`_row_pieces`) loads a tap's values from
    an image read in place: from element `position` of a channel, one masked load per
    mask (at column stride 2, two, whose even lanes are the values; `masks[lanes]`
    then the piece's lanes that the loads set)."""

    position: ir.Value
    masks: tuple[ir.Value, ...]
    lanes: int = 0

    @staticmethod
    def of(b, piece, shift: tuple[int, int], padding: Padding) -> _TapLoad:
        _, mask, x, row, x_first = piece
        (dy, dx), (sy, sx) = shift, padding.stride
        columns = b.add(b.mul(x, splat(b, i64(sx), x.type)), splat(b, i64(dx), x.type))
        inside = b.icmp_unsigned("<", columns, splat(b, i64(padding.width), x.type))
        y = b.add(b.mul(row, i64(sy)), i64(dy))
        on_image = b.icmp_unsigned("<", y, i64(padding.height))
        lanes = b.select(on_image, b.and_(mask, inside), ir.Constant(mask.type, None))
        position = b.add(b.mul(y, i64(padding.width)), b.add(b.mul(x_first, i64(sx)), i64(dx)))
        if sx == 1:
            return _TapLoad(position, (lanes,))
        count = mask.type.count
        none = ir.Constant(mask.type, None)
        # lane j of the two loads is output lane j // 2's value where j is even
        spread = [j // 2 if j % 2 == 0 else count for j in range(2 * count)]
        wide = b.shuffle_vector(lanes, none, _i32s(spread))
        low = b.shuffle_vector(wide, wide, _i32s(range(count)))
        high = b.shuffle_vector(wide, wide, _i32s(range(count, 2 * count)))
        return _TapLoad(position, (low, high, lanes), 2)

    def load(self, ctx, b, cfg, base, position, passthru) -> ir.Value:
        """The piece's values from the channel at `base`, the other lanes `passthru`'s."""
        ty = cfg.element
        if len(self.masks) == 1:
            pointer = b.gep(base, [position], source_etype=ty)
            return masked_load(ctx, b, cfg, pointer, self.masks[0], passthru)
        count = self.masks[0].type.count
        low = masked_load(ctx, b, cfg, b.gep(base, [position], source_etype=ty), self.masks[0])
        at = b.add(position, i64(count))
        high = masked_load(ctx, b, cfg, b.gep(base, [at], source_etype=ty), self.masks[1])
        values = b.shuffle_vector(low, high, _i32s(range(0, 2 * count, 2)))
        if passthru is None:
            return values
        return b.select(self.masks[self.lanes], values, passthru)


def _i32s(values) -> ir.Constant:
    """A constant vector of i32 lanes (shuffle indices)."""
    values = list(values)
    return ir.Constant(ir.VectorType(I32, len(values)), values)


def lane_row_width(out_width: int, lanes: int) -> int:
    """An output row in whole vectors: the grid width of tiles whose vectors each lie in
    one output row (an image read in place at column stride 2 loads twice per piece)."""
    return -(-out_width // lanes) * lanes


def _lane_row_piece(b, q, first: int, mask, grid_width: int, out_width: int) -> list:
    """`_row_pieces` of a vector of grid positions q + first + l on a grid of output rows
    `grid_width` (a whole number of vectors) wide: one piece, its lanes past the row's
    `out_width` pixels left out."""
    count = mask.type.count
    start = b.add(q, i64(first))
    row = b.udiv(start, i64(grid_width))
    x0 = b.sub(start, b.mul(row, i64(grid_width)))
    lane_x = b.add(
        ir.Constant(ir.VectorType(I64, count), list(range(count))),
        splat(b, x0, ir.VectorType(I64, count)),
    )
    on_row = b.icmp_unsigned("<", lane_x, splat(b, i64(out_width), lane_x.type))
    return [(start, b.and_(on_row, mask), lane_x, row, x0)]


def _row_pieces(b, q, first: int, mask, grid_width: int, out_width: int) -> list:
    """[(grid position, lanes, x, row, first x)] of a compact vector of pixels q + first
    + l (l over `mask`'s lanes, those set): one piece per output row the pixels may
    touch, its lanes read from grid position + l, their output columns x (a vector: of
    the lanes on that row), that output row, and lane 0's x on it."""
    count = mask.type.count
    start = b.add(q, i64(first))
    row = b.udiv(start, i64(out_width))
    x0 = b.sub(start, b.mul(row, i64(out_width)))
    at = b.add(start, b.mul(row, i64(grid_width - out_width)))
    lane_x = b.add(
        ir.Constant(ir.VectorType(I64, count), list(range(count))),
        splat(b, x0, ir.VectorType(I64, count)),
    )
    pieces = []
    for s in range(segments(out_width, count)):
        # lanes on row row + s: 0 <= x0 + l - s*out_width < out_width
        x = b.sub(lane_x, splat(b, i64(s * out_width), lane_x.type))
        on_row = b.icmp_unsigned("<", x, splat(b, i64(out_width), lane_x.type))
        offset = b.add(at, i64(s * (grid_width - out_width)))
        first_x = b.sub(x0, i64(s * out_width))
        pieces.append((offset, b.and_(on_row, mask), x, b.add(row, i64(s)), first_x))
    return pieces


def _store_grid_tile(
    ctx,
    b,
    cfg,
    tile: Tile,
    c_ptr,
    q,
    accumulate,
    rows,
    cols,
    grid_width: int,
    out_width: int,
    ldc: int,
) -> None:
    """Store (or add) the tile's grid columns that are output pixels: per vector, one
    masked store per output row it touches."""
    ty = cfg.element
    if grid_width == out_width:  # no junk columns: the grid is the pixels
        tile.store_clipped(
            ctx, b.gep(c_ptr, [q], source_etype=ty), i64(ldc), accumulate, rows, cols
        )
        return
    junk = grid_width - out_width
    segments = []  # per vector: [(mask, pointer offset)] for each output row it touches
    lane = 0
    for t in tile.types:
        start = b.add(q, i64(lane))
        row = b.udiv(start, i64(grid_width))
        x0 = b.sub(start, b.mul(row, i64(grid_width)))
        touched = (t.count - 1 + grid_width - 1) // grid_width + 1
        in_tile = lanes_below(b, cols, t.count, lane)
        lane_x = b.add(
            ir.Constant(ir.VectorType(I64, t.count), list(range(t.count))),
            splat(b, x0, ir.VectorType(I64, t.count)),
        )
        parts = []
        for s in range(touched):
            # lanes on output row row + s: x0 + l - s*grid_width in [0, out_width)
            x = b.sub(lane_x, splat(b, i64(s * grid_width), lane_x.type))
            on_row = b.icmp_unsigned("<", x, splat(b, i64(out_width), lane_x.type))
            mask = b.and_(on_row, in_tile)
            shift = b.sub(start, b.mul(b.add(row, i64(s)), i64(junk)))
            parts.append((mask, shift))
        segments.append(parts)
        lane += t.count
    with b.if_else(accumulate) as (add, replace):
        for branch, adding in ((add, True), (replace, False)):
            with branch:
                for i, slots in enumerate(tile.slots):
                    with if_then(b, b.icmp_unsigned("<", i64(i), rows)):
                        c_row = b.gep(c_ptr, [i64(i * ldc)], source_etype=ty)
                        for slot, t, parts in zip(slots, tile.types, segments):
                            value = b.load(slot, typ=t)
                            for mask, shift in parts:
                                at = b.gep(c_row, [shift], source_etype=ty)
                                stored = value
                                if adding:
                                    stored = b.fadd(masked_load(ctx, b, cfg, at, mask), value)
                                store_lanes(ctx, b, cfg, stored, at, mask)
