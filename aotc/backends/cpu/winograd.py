"""Winograd F(m x m, 3x3): 3x3 stride-1 convolutions with fewer multiply-adds.

Per m x m output tile, the (m + 2)^2 input tile d and the 3x3 kernel g:
Y = A^T [(G g G^T) . (B^T d B)] A.  F(2x2, 3x3) (`F2`) does 2.25x fewer
multiply-adds than the direct sum, F(4x4, 3x3) (`F4`) 4x fewer; F4 runs where its
tiles are enough for the GEMMs.  With P = (m + 2)^2 phases, per image, one kernel
runs three steps, the first and last shared out over channels, the middle one over
its GEMMs:

- V = B^T d B of every tile: [P][Cin][tiles] in the workspace, vectorized over a
  tile row (the tiles' input columns de-interleaved from m loads);
- M = U V: P GEMMs [Cout, Cin] x [Cin, tiles] (gemm.py) into [P][Cout][tiles],
  U = G g G^T computed and packed at compile time (`pack_constant`, via prepack.py);
- Y = A^T M A: per output channel and tile row, the m x m output phases from P
  vectors of M, interleaved into the convolution's m output rows, then the
  epilogue on the rows just finished.

A band's Y is written after the next band's V is read, so that the output may take
the bytes of an image of its shape that dies there (assign_buffers' `overwrites`,
contraction.overwritable_image): the rows a band overwrites are read by no later
band, and the plan's peak at the convolution is one image, not two.

The three steps run per band of tile rows, V and M holding one band's tiles: the
kernel's temporary is then about (P / m^2) x (Cin + Cout) x the band's output rows
instead of the whole image's.  The plan takes the tallest band whose temporary fits
the bytes the memory plan has free while the kernel runs (`banded`), so that a
Winograd convolution does not raise the plan's peak where a band fits.

Only constant kernels qualify (U is computed when compiling).  The transforms
reassociate the sums; F2's matrices hold 0, +-1 and 1/2, so its f32 rounding stays
close to the direct sum, F4's entries up to 8 give about 3-4x that (still some 1e-6
of the outputs' magnitude).  An infinite input gives NaN where the direct sum gives
an infinity, as in every Winograd implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from ...buffers import BufferKind, Slice
from ...ir import DType
from ..llvm.context import EmitContext
from ..llvm.lltypes import I1, I32, i64
from ..llvm.loops import for_range, if_then
from .blocked_gemm import emit_region
from .blocking import aligned
from .conv import ConvGeometry, ConvProblem
from .gemm import GemmPlan
from .gemm_config import GemmConfig
from .panels import StridedPanels
from .parallel import parallel_loop_nest_passing
from .prepackable import PackedShape, Prepackable, StridedLayout, pack_operand
from .vectors import i32_lanes, lanes_below, masked_load, masked_store, mul_add, pick_lanes, splat
from .workspace import Budget

# The saved multiply-adds pay for the transforms (with F2, V and M take 4x the image's and
# the output's memory) with enough channels on both sides and tiles enough for the GEMMs'
# N.  F2's thresholds, from two-layer chains of 3x3 convolutions + ReLU, time against
# im2col + GEMM (one AVX-512 thread): 64 channels at 56x56 0.79, 128 at 28x28 0.68, 256 at
# 14x14 0.37, 64 -> 256 at 13x13 0.64, 128 <-> 32 at 56x56 0.81 (both ways in turn), 16 ->
# 64 at 55x55 0.73-0.97 (SqueezeNet 1.1 at 16 channels and up: 0.84 of the time, at 32 and
# up 0.96); at 7x7 slower (4x4 tiles are too few for the GEMMs): 256 channels 1.02-1.13,
# 512 1.08.  Few output channels are no reason to stay direct: against the planes form,
# DenseNet-121 (its 3x3 layers are 128 -> 32) 0.86 of the time, YOLOv8n (16 and 32 out)
# 0.96, GoogLeNet and CRNN unchanged.
MIN_CHANNELS = 16
MIN_OUTPUT_CHANNELS = 16
MIN_OUTPUT_SIZE = 8
# F4 against F2, the same chains: 64 channels at 56x56 (196 F4 tiles) 0.69-0.76, 128
# at 28x28 (49) 0.87-0.90, 256 at 14x14 (16, a quarter of them padding) 1.37-1.5;
# VGG-19 0.62-0.70, ResNet-50 0.955-0.97.
MIN_F4_TILES = 36
# a band's tiles are the GEMMs' N: at least this many (or the whole image's) keep the
# GEMMs on full register tiles; and where U is beyond a share of L3 (read from memory
# for each band), at least Cin x Cout / (Cin + Cout), so that reading U again per band
# costs no more than the band's own V and M (bands of one tile row where the plan had no
# room made GoogLeNet 4-10% slower for 30% less scratch: the floor holds everywhere)
MIN_BAND_TILES = 32
U_L3_SHARE = 4

# U's place until prepack.py packs it (the GEMMs are sized for a pre-packed A throughout)
NOT_YET_PACKED = Slice(BufferKind.CONSTANT, -1, 0, 0)


@dataclass(frozen=True)
class Transform:
    """F(m x m, 3x3): an m x m output tile from an (m + 2)^2 input tile, its matrices
    B^T (input), G (kernel) and A^T (output) from the interpolation points."""

    m: int
    b_t: tuple[tuple[float, ...], ...]
    g: tuple[tuple[float, ...], ...]
    a_t: tuple[tuple[float, ...], ...]

    @property
    def alpha(self) -> int:
        """The input tile's side."""
        return self.m + 2

    @property
    def phases(self) -> int:
        """Transformed values per tile: the GEMMs' count."""
        return self.alpha * self.alpha


# points 0, 1, -1 (and infinity): 2.25x fewer multiply-adds, entries 0, +-1 and 1/2
F2 = Transform(
    2,
    b_t=((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
    g=((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0)),
    a_t=((1, 1, 1, 0), (0, 1, -1, -1)),
)
# points 0, +-1/2, +-2 (and infinity): 4x fewer multiply-adds, B^T as sparse as with
# 0, +-1, +-2 and entries up to 8 in A^T, but about 1.5x less rounding error (rms, over
# 64-256 channels of ReLU'd input, against the direct sum in f64: 1.0-1.9e-6 of the
# outputs' rms, against 1.5-2.9e-6; F2: 0.4e-6)
F4 = Transform(
    4,
    b_t=(
        (1, 0, -17 / 4, 0, 1, 0),
        (0, -2, -4, 1 / 2, 1, 0),
        (0, 2, -4, -1 / 2, 1, 0),
        (0, -1 / 2, -1 / 4, 2, 1, 0),
        (0, 1 / 2, -1 / 4, -2, 1, 0),
        (0, 1, 0, -17 / 4, 0, 1),
    ),
    g=(
        (1, 0, 0),
        (-8 / 15, -4 / 15, -2 / 15),
        (-8 / 15, 4 / 15, -2 / 15),
        (1 / 30, 1 / 15, 2 / 15),
        (1 / 30, -1 / 15, 2 / 15),
        (0, 0, 1),
    ),
    a_t=(
        (1, 1, 1, 1, 1, 0),
        (0, 1 / 2, -1 / 2, 2, -2, 0),
        (0, 1 / 4, 1 / 4, 4, 4, 0),
        (0, 1 / 8, -1 / 8, 8, -8, 1),
    ),
)


@dataclass(frozen=True)
class WinogradGeometry:
    """One convolution's extents and its image's strides (the columns' stride is 1)."""

    batch: int
    cin: int
    cout: int
    height: int
    width: int
    out_height: int
    out_width: int
    top: int  # padding above and left of the image
    left: int
    image_strides: tuple[int, int, int]  # batch, channel, row
    transform: Transform

    @property
    def tile_rows(self) -> int:
        return -(-self.out_height // self.transform.m)

    @property
    def tile_columns(self) -> int:
        return -(-self.out_width // self.transform.m)

    @property
    def tiles(self) -> int:
        return self.tile_rows * self.tile_columns


def plan_winograd(problem: ConvProblem) -> WinogradPlan | None:
    """The Winograd form of a convolution (conv.py's problem), where the target allows it
    (not below -O2) and `eligible` accepts it."""
    g, image_view, weights_layout = problem.geometry, problem.image_view, problem.weights_layout
    if not (problem.target.winograd and problem.float_nchw):
        return None
    if not eligible(g, image_view, weights_layout):
        return None
    dims = g.dims
    strides = tuple(
        image_view.strides[d] for d in (dims.input_batch, dims.input_feature, dims.input_spatial[0])
    )
    transform = choose_transform(g.out_spatial)
    geometry = WinogradGeometry(
        g.batch,
        g.cin_g,
        g.cout,
        *g.in_spatial,
        *g.out_spatial,
        *g.window.pad_low,
        strides,
        transform,
    )
    whole = WinogradPlan(problem.config, geometry, g.output_index, layouts=(weights_layout, None))
    return whole.banded(problem.budget)


def eligible(g: ConvGeometry, image_view, weights_layout) -> bool:
    """An f32 2-D convolution with a constant 3x3 kernel at stride 1 (no dilation, one
    group, padding not negative) over an image in memory with unit column stride,
    at least MIN_CHANNELS in, MIN_OUTPUT_CHANNELS out, and outputs of at least
    MIN_OUTPUT_SIZE both ways."""
    w = g.window
    if g.out.dtype is not DType.F32 or len(g.out_spatial) != 2 or g.groups != 1:
        return False
    if tuple(w.size) != (3, 3) or any(
        v != 1 for v in (*w.stride, *w.lhs_dilation, *w.rhs_dilation)
    ):
        return False
    if min(*w.pad_low, *w.pad_high) < 0:
        return False
    if weights_layout is None or weights_layout.where.kind is not BufferKind.CONSTANT:
        return False
    if image_view is None or image_view.strides[g.dims.input_spatial[1]] != 1:
        return False
    channels = g.cin_g >= MIN_CHANNELS and g.cout >= MIN_OUTPUT_CHANNELS
    return channels and min(g.out_spatial) >= MIN_OUTPUT_SIZE


def choose_transform(out_spatial) -> Transform:
    """F4 where its tiles are enough columns for the GEMMs, else F2."""
    tiles = [-(-size // F4.m) for size in out_spatial]
    return F4 if tiles[0] * tiles[1] >= MIN_F4_TILES else F2


def transformed_kernel(kernel: np.ndarray, transform: Transform) -> np.ndarray:
    """U = G g G^T of a [Cout, Cin, 3, 3] kernel: [phases, Cout, Cin] (rounded once,
    from float64 sums)."""
    g = np.array(transform.g, np.float64)
    u = np.einsum("ar,bs,oirs->aboi", g, g, kernel.astype(np.float64))
    return u.reshape(transform.phases, *kernel.shape[:2]).astype(kernel.dtype)


@dataclass
class WinogradPlan(Prepackable):
    """A convolution as Winograd F(m x m, 3x3), for the shapes it pays on.  Operand A (the kernel, convolution operand 1) is always pre-packed, as U."""

    config: GemmConfig
    geometry: WinogradGeometry
    # (builder, image, channel, pixel) -> the convolution's output index (conv.py's)
    output_index: Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], list[ir.Value]]
    layouts: tuple[StridedLayout | None, None] = (None, None)
    packed: tuple[Slice | None, None] = (None, None)
    operands: tuple[int, int] = (1, 0)
    band_rows: int = 0  # tile rows per band (`banded`); 0: all of them
    kind = "winograd"

    @property
    def _band_rows(self) -> int:
        return self.band_rows or self.geometry.tile_rows

    @property
    def band_tiles(self) -> int:
        """Tiles per band: the GEMMs' N, and the columns of V and M."""
        return self._band_rows * self.geometry.tile_columns

    def banded(self, budget: Budget | None) -> WinogradPlan:
        """This plan in the tallest band (of balanced heights: the last band pads fewer
        rows than there are bands) whose workspace fits the bytes `budget` has free, no
        shorter than `_band_floor(True)` where one that tall fits, nor than
        `_band_floor(False)` where one that tall fits or the budget is not strict, else
        in the band of the smallest workspace; None: the whole image.  (A strict budget
        takes bands shorter than the floors before another form: a band of one tile
        row took 1.1-1.3x the time of the tallest in GoogLeNet's layers, the planes
        2.4x.)"""
        if budget is None:
            return self
        rows = self.geometry.tile_rows
        heights = sorted({-(-rows // n) for n in range(1, rows + 1)}, reverse=True)
        plans = [replace(self, band_rows=h) for h in heights]
        fitting = [p for p in plans if p.workspace_bytes <= budget.free]
        floored = [p for p in plans if p.band_rows >= self._band_floor(False)]
        for_speed = [p for p in fitting if p.band_rows >= self._band_floor(False)]
        preferred = [p for p in for_speed if p.band_rows >= self._band_floor(True)]
        shortest = (fitting if budget.strict else []) or [
            min(floored, key=lambda p: p.workspace_bytes)
        ]
        return (preferred or for_speed or shortest)[0]

    def _band_floor(self, streaming: bool) -> int:
        """Tile rows of the shortest band worth its cost in speed: MIN_BAND_TILES, and
        with `streaming`, where U streams from beyond L3, Cin x Cout / (Cin + Cout)
        tiles (U re-read per band costs about as much as the band's V and M then: a
        band shorter than that only where it keeps the plan's peak down)."""
        g = self.geometry
        u_bytes = g.transform.phases * g.cin * g.cout * self.config.itemsize
        streamed = streaming and u_bytes > self.config.blocks.l3 // U_L3_SHARE
        tiles = max(MIN_BAND_TILES, g.cin * g.cout // (g.cin + g.cout) if streamed else 0)
        return min(g.tile_rows, -(-tiles // g.tile_columns))

    def can_pack(self, side: int) -> bool:
        return side == 0 and super().can_pack(side)

    def packed_shape(self, side: int) -> PackedShape:
        return replace(self._gemm().packed_shape(0), transform="winograd")

    def pack_constant(self, side: int, values: np.ndarray) -> np.ndarray:
        """U of the kernel whose elements are `values` (laid out as `layouts[0]`), packed
        as the GEMMs read it."""
        g, layout = self.geometry, self.layouts[0]
        rows = np.arange(g.cout)[:, None] * layout.p_stride
        depth = np.arange(g.cin * 9)[None, :] * layout.k_stride
        kernel = values[rows + depth].reshape(g.cout, g.cin, 3, 3)
        return pack_operand(
            transformed_kernel(kernel, g.transform).ravel(), self._u_layout(), self.packed_shape(0)
        )

    @property
    def _v_bytes(self) -> int:
        g = self.geometry
        return aligned(g.transform.phases * g.cin * self.band_tiles * self.config.itemsize)

    @property
    def _m_bytes(self) -> int:
        g = self.geometry
        return aligned(g.transform.phases * g.cout * self.band_tiles * self.config.itemsize)

    @property
    def workspace_bytes(self) -> int:
        """V, then M, then the GEMMs' packing."""
        return self._v_bytes + self._m_bytes + self._gemm().workspace_bytes

    def _u_layout(self) -> StridedLayout:
        """U as [P][Cout][Cin] (where it came from: the kernel's constant)."""
        g = self.geometry
        return StridedLayout(self.layouts[0].where, ((0, g.cout * g.cin),), g.cin, 1)

    def _gemm(self, v: Slice | None = None) -> GemmPlan:
        """M[p] = U[p] V[p] for the P phases p, V read from the slice `v`: [P][Cin][band
        tiles], packed block by block as any strided B (V written as packed panels in
        place took longer: its stores scatter)."""
        g, tiles = self.geometry, self.band_tiles

        def unpacked(ctx, sources, index):
            raise AssertionError("U is always pre-packed")

        def columns(ctx, sources, index):
            b = ctx.builder
            offset = b.mul(index[0], i64(g.cin * tiles))
            base = b.gep(ctx.slice_pointer(v), [offset], source_etype=self.config.element)
            return StridedPanels(base, 1, tiles)

        def c_offset(ctx, index):
            return ctx.builder.mul(index[0], i64(g.cout * tiles))

        phases = (g.transform.phases,)
        return GemmPlan(
            self.config,
            phases,
            g.cout,
            tiles,
            g.cin,
            tiles,
            unpacked,
            columns,
            c_offset,
            out_index=None,
            layouts=(self._u_layout(), None),
            packed=(self.packed[0] or NOT_YET_PACKED, None),
        )

    def emit(self, ctx: EmitContext, sources, c: Slice, workspace: Slice, epilogue) -> None:
        """Per image and band: V, the GEMMs into M, then the output and its epilogue."""
        assert self.packed[0] not in (None, NOT_YET_PACKED), "U is pre-packed by prepack.py"
        g = self.geometry
        v = Slice(BufferKind.ARENA, 0, workspace.offset, self._v_bytes)
        m = Slice(BufferKind.ARENA, 0, v.offset + v.size, self._m_bytes)
        rest = m.offset + m.size
        packing = Slice(BufferKind.ARENA, 0, rest, workspace.offset + workspace.size - rest)
        gemm = self._gemm(v)
        image, b = sources[0].view, ctx.builder
        assert b is not None
        bands, rows = -(-g.tile_rows // self._band_rows), self._band_rows
        # the next band's V before this band's Y (V is free once the GEMMs read it): an
        # output given its image's bytes then overwrites only rows no later band reads
        # (of the image's shape, its top padding is at most 2 rows, a band m >= 2 rows)
        with for_range(b, g.batch, "image") as n:
            self._input_transform(ctx, image, n, i64(0), v)
            with for_range(b, bands, "band") as band:
                gemm.emit(ctx, sources, m, packing, None)
                after = b.add(band, i64(1))
                with if_then(b, b.icmp_signed("<", after, i64(bands))):
                    self._input_transform(ctx, image, n, b.mul(after, i64(rows)), v)
                self._output_transform(ctx, m, c, n, b.mul(band, i64(rows)), epilogue)

    # -- V = B^T d B --------------------------------------------------------------

    def _input_transform(self, ctx: EmitContext, image, number, first_row, v: Slice) -> None:
        """V of the band of image `number` from tile row `first_row`, over (channel, tile
        row); rows past the image's read zeros."""
        g, cfg = self.geometry, self.config
        t, tiles = g.transform, self.band_tiles
        blocks = -(-g.tile_columns // cfg.lanes)
        work = g.cin * tiles * t.phases * 4
        dims = [g.cin, self._band_rows]
        with parallel_loop_nest_passing(ctx, dims, [number, first_row], "vin", work) as (
            (channel, in_band),
            (n, first),
        ):
            b = ctx.builder
            assert b is not None
            row = b.add(first, in_band)
            batch_stride, channel_stride, row_stride = g.image_strides
            offset = b.add(b.mul(n, i64(batch_stride)), b.mul(channel, i64(channel_stride)))
            plane = image.pointer(ctx, offset)
            lines = []
            for r in range(t.alpha):
                at = b.add(b.sub(b.mul(row, i64(t.m)), i64(g.top)), i64(r))
                inside = b.and_(
                    b.icmp_signed(">=", at, i64(0)), b.icmp_signed("<", at, i64(g.height))
                )
                line = b.gep(plane, [b.mul(at, i64(row_stride))], source_etype=cfg.element)
                lines.append((line, inside))
            at_tile = b.add(b.mul(channel, i64(tiles)), b.mul(in_band, i64(g.tile_columns)))
            out = b.gep(ctx.slice_pointer(v), [at_tile], source_etype=cfg.element)
            with for_range(b, blocks, "vblock") as block:
                first = b.mul(block, i64(cfg.lanes))
                count = b.sub(i64(g.tile_columns), first)
                column = b.sub(b.mul(first, i64(t.m)), i64(g.left))
                d = [self._tile_columns(ctx, line, inside, column) for line, inside in lines]
                for a, by_column in enumerate(self._apply(ctx, t.b_t, d)):  # B^T d: [a][s]
                    for s, value in enumerate(self._apply(ctx, t.b_t, by_column)):
                        phase = (t.alpha * a + s) * g.cin * tiles
                        at = b.gep(out, [b.add(first, i64(phase))], source_etype=cfg.element)
                        masked_store(ctx, b, cfg, value, at, 0, count, False)

    def _tile_columns(self, ctx, line, inside, column) -> list[ir.Value]:
        """Input columns column + m*t + s (s = 0..alpha-1) for the tiles t of a vector,
        zero outside the image or the row not `inside`: s < m de-interleaved from m
        vectors at `column`, the last two from m vectors at column + m."""
        g, cfg = self.geometry, self.config
        m, b, lanes = g.transform.m, ctx.builder, cfg.lanes
        # 32-bit lanes: the row's columns fit, and the mask legalizes as the load's
        i32_vector = ir.VectorType(I32, lanes)
        zero, width = (ir.Constant(i32_vector, v) for v in (0, g.width))
        out = []
        for shift, phases in ((0, m), (m, 2)):
            start = b.add(column, i64(shift))
            vectors = []  # one masked load each (one load of two vectors' worth came out
            for h in range(m):  # wrong on AVX2: its upper lanes read past the mask)
                at = b.add(start, i64(h * lanes))
                positions = b.add(splat(b, b.trunc(at, I32), i32_vector), i32_lanes(range(lanes)))
                valid = b.and_(
                    b.icmp_signed(">=", positions, zero), b.icmp_signed("<", positions, width)
                )
                valid = b.and_(valid, splat(b, inside, ir.VectorType(I1, lanes)))
                pointer = b.gep(line, [at], source_etype=cfg.element)
                vectors.append(masked_load(ctx, b, cfg, pointer, valid))
            row = _concatenate(b, vectors)
            out += [pick_lanes(b, row, range(s, m * lanes, m)) for s in range(phases)]
        return out

    # -- Y = A^T M A ----------------------------------------------------------------

    def _output_transform(
        self, ctx: EmitContext, m: Slice, c: Slice, number, first_row, epilogue
    ) -> None:
        """Y of the band of image `number` from tile row `first_row`, and the epilogue on
        its rows, over output channels."""
        g, cfg = self.geometry, self.config
        t, tiles = g.transform, self.band_tiles
        lanes = cfg.lanes
        blocks = -(-g.tile_columns // lanes)
        pixels = g.out_height * g.out_width
        work = g.cout * tiles * t.phases * 4
        with parallel_loop_nest_passing(ctx, [g.cout], [number, first_row], "vout", work) as (
            (channel,),
            (n, first_tile_row),
        ):
            b = ctx.builder
            assert b is not None
            ty = cfg.element
            phases = b.gep(ctx.slice_pointer(m), [b.mul(channel, i64(tiles))], source_etype=ty)
            plane_index = b.add(b.mul(n, i64(g.cout)), channel)
            plane = b.gep(ctx.slice_pointer(c), [b.mul(plane_index, i64(pixels))], source_etype=ty)
            with (
                for_range(b, self._band_rows, "yrow") as in_band,
                for_range(b, blocks, "yblock") as block,
            ):
                row = b.add(first_tile_row, in_band)
                first = b.mul(block, i64(lanes))
                count = b.sub(i64(g.tile_columns), first)
                tile = b.add(b.mul(in_band, i64(g.tile_columns)), first)
                values = []
                for p in range(t.phases):
                    at = b.gep(phases, [b.add(i64(p * g.cout * tiles), tile)], source_etype=ty)
                    values.append(self._load(ctx, at, count))
                rows = [values[t.alpha * a : t.alpha * (a + 1)] for a in range(t.alpha)]
                for i, by_column in enumerate(self._apply(ctx, t.a_t, rows)):
                    out_row = b.add(b.mul(row, i64(t.m)), i64(i))
                    with if_then(b, b.icmp_unsigned("<", out_row, i64(g.out_height))):
                        line = b.gep(plane, [b.mul(out_row, i64(g.out_width))], source_etype=ty)
                        outputs = self._apply(ctx, t.a_t, by_column)
                        self._store_interleaved(ctx, line, b.mul(first, i64(t.m)), outputs)
            if epilogue is not None:  # on the band's rows of the plane just computed
                start = b.mul(first_tile_row, i64(t.m * g.out_width))
                end = b.add(start, i64(self._band_rows * t.m * g.out_width))
                end = b.select(b.icmp_signed("<", end, i64(pixels)), end, i64(pixels))

                def element(row, pixel):
                    epilogue(self.output_index(ctx.builder, n, row, pixel))

                emit_region(ctx, channel, 1, start, b.sub(end, start), element)

    def _load(self, ctx, pointer, count) -> ir.Value:
        """`lanes` values from `pointer`, only the first `count` of them (the rest zero)."""
        b = ctx.builder
        return masked_load(ctx, b, self.config, pointer, lanes_below(b, count, self.config.lanes))

    def _store_interleaved(self, ctx, line, column, outputs) -> None:
        """Columns column + m*t + j (`outputs[j]`, j < m) of an output row, those inside
        the row."""
        cfg = self.config
        b = ctx.builder
        lanes = cfg.lanes
        row = _interleave(b, outputs)
        for h in range(len(outputs)):
            start = b.add(column, i64(h * lanes))
            at = b.gep(line, [start], source_etype=cfg.element)
            left = b.sub(i64(self.geometry.out_width), start)  # negative past the row's end
            value = pick_lanes(b, row, range(h * lanes, (h + 1) * lanes))
            masked_store(ctx, b, cfg, value, at, 0, left, False)

    def _apply(self, ctx, matrix, values: list) -> list:
        """matrix x values (lists of vectors, or of lists of them): a term of coefficient
        1 first where a row has one (no multiply, no negation), then the other +-1 terms
        as adds and subtracts, the rest as multiply-adds."""
        b, cfg = ctx.builder, self.config
        out = []
        for coefficients in matrix:
            terms = sorted(
                ((c, v) for c, v in zip(coefficients, values) if c),
                key=lambda t: (t[0] != 1, -t[0]),
            )
            (first, total), *rest = terms
            if first != 1:
                total = _scale(b, total, first)
            for c, value in rest:
                total = _add(ctx, b, cfg, total, value, c)
            out.append(total)
        return out


def _concatenate(b: ir.IRBuilder, vectors: list) -> ir.Value:
    """One vector of `vectors` (2^k of one type) end to end."""
    while len(vectors) > 1:
        width = 2 * vectors[0].type.count
        vectors = [
            b.shuffle_vector(x, y, i32_lanes(range(width)))
            for x, y in zip(vectors[::2], vectors[1::2])
        ]
    return vectors[0]


def _interleave(b: ir.IRBuilder, vectors: list) -> ir.Value:
    """One vector of lane 0 of each of `vectors` (2^k of one type), then lane 1 of
    each, ...: the interleave of the even-numbered ones with that of the odd."""
    if len(vectors) == 1:
        return vectors[0]
    x, y = _interleave(b, vectors[::2]), _interleave(b, vectors[1::2])
    width = x.type.count
    return b.shuffle_vector(x, y, i32_lanes(i // 2 + (i % 2) * width for i in range(2 * width)))


def _scale(b, value, factor):
    """value * factor."""
    if isinstance(value, list):
        return [_scale(b, v, factor) for v in value]
    return b.fmul(value, ir.Constant(value.type, [float(factor)] * value.type.count))


def _add(ctx, b, cfg, total, value, coefficient):
    """total + coefficient * value."""
    if isinstance(total, list):
        return [_add(ctx, b, cfg, t, v, coefficient) for t, v in zip(total, value)]
    if coefficient in (1, -1):
        return b.fadd(total, value) if coefficient == 1 else b.fsub(total, value)
    factor = ir.Constant(value.type, [float(coefficient)] * value.type.count)
    return mul_add(ctx, b, cfg, value, factor, total)
