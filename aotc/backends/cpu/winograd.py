"""Winograd F(2x2, 3x3): 3x3 stride-1 convolutions with 2.25x fewer multiply-adds.

Per 2x2 output tile, the 4x4 input tile d and the 3x3 kernel g:
Y = A^T [(G g G^T) . (B^T d B)] A.  Per image, one kernel runs three steps, the
first and last shared out over channels, the middle one over its GEMMs:

- V = B^T d B of every tile: [16][Cin][tiles] in the workspace, vectorized over a
  tile row (the tiles' even and odd input columns de-interleaved from two loads);
- M = U V: 16 GEMMs [Cout, Cin] x [Cin, tiles] (gemm.py) into [16][Cout][tiles],
  U = G g G^T computed and packed at compile time (`pack_constant`, via prepack.py);
- Y = A^T M A: per output channel and tile row, the four output phases from 16
  vectors of M, interleaved into the convolution's two output rows, then the
  epilogue on the finished plane.

Only constant kernels qualify (U is computed when compiling).  The transforms
reassociate the sums (their matrices hold 0, +-1 and 1/2, so f32 rounding stays
close to the direct sum); an infinite input gives NaN where the direct sum gives
an infinity, as in every Winograd implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from ...buffers import BufferKind, Slice
from ...ir import DType
from .context import EmitContext
from .gemm import (
    GemmPlan,
    PackedShape,
    Prepackable,
    StridedLayout,
    StridedPanels,
    aligned,
    emit_region,
    pack_operand,
)
from .lltypes import I1, I32, i64
from .loops import for_range, if_then
from .parallel import parallel_loop_nest_passing
from .tiles import GemmConfig, i32_lanes, lanes_below, masked_load, masked_store, splat

# The saved multiply-adds pay for the transforms (V and M take 4x the image's and the
# output's memory) with enough channels on both sides and tiles enough for the GEMMs'
# N.  Two-layer chains of 3x3 convolutions + ReLU, time against im2col + GEMM (one
# AVX-512 thread): 64 channels at 56x56 0.79, 128 at 28x28 0.68, 256 at 14x14 0.37,
# 64 -> 256 at 13x13 0.64, 128 <-> 32 at 56x56 0.81 (both ways in turn), 16 -> 64 at
# 55x55 0.73-0.97 (SqueezeNet 1.1 at 16 channels and up: 0.84 of the time, at 32 and
# up 0.96); at 7x7 slower (4x4 tiles are too few for the GEMMs): 256 channels
# 1.02-1.13, 512 1.08.  Few output channels reuse each packed V panel too little
# (once per MR of them): DenseNet-121, whose 3x3 layers are 128 -> 32, ran 0.88-0.90
# of the time with them on im2col.
MIN_CHANNELS = 16
MIN_OUTPUT_CHANNELS = 64
MIN_OUTPUT_SIZE = 8

B_T = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
A_T = ((1, 1, 1, 0), (0, 1, -1, -1))
PHASES = 16  # the 4x4 transformed values per tile
# U's place until prepack.py packs it (the GEMMs are sized for a pre-packed A throughout)
NOT_YET_PACKED = Slice(BufferKind.CONSTANT, -1, 0, 0)


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

    @property
    def tile_rows(self) -> int:
        return -(-self.out_height // 2)

    @property
    def tile_columns(self) -> int:
        return -(-self.out_width // 2)

    @property
    def tiles(self) -> int:
        return self.tile_rows * self.tile_columns


def eligible(g, image_view, weights_layout) -> bool:
    """An f32 2-D convolution with a constant 3x3 kernel at stride 1 (no dilation, one
    group, padding not negative) over an image in memory with unit column stride,
    at least MIN_CHANNELS in, MIN_OUTPUT_CHANNELS out, and outputs of at least
    MIN_OUTPUT_SIZE both ways."""
    w = g.window
    if g.out.dtype is not DType.F32 or len(g.out_spatial) != 2 or g.groups != 1:
        return False
    if tuple(w.size) != (3, 3) or any(v != 1 for v in (*w.stride, *w.lhs_dilation,
                                                      *w.rhs_dilation)):  # fmt: skip
        return False
    if min(*w.pad_low, *w.pad_high) < 0:
        return False
    if weights_layout is None or weights_layout.where.kind is not BufferKind.CONSTANT:
        return False
    if image_view is None or image_view.strides[g.dims.input_spatial[1]] != 1:
        return False
    channels = g.cin_g >= MIN_CHANNELS and g.cout >= MIN_OUTPUT_CHANNELS
    return channels and min(g.out_spatial) >= MIN_OUTPUT_SIZE


def plan_winograd(config: GemmConfig, g, image_view, weights_layout) -> WinogradPlan:
    """The plan of a convolution that `eligible` accepts (`g`: conv.py's geometry)."""
    dims = g.dims
    strides = tuple(image_view.strides[d] for d in (dims.input_batch, dims.input_feature,
                                                   dims.input_spatial[0]))  # fmt: skip
    geometry = WinogradGeometry(g.batch, g.cin_g, g.cout, *g.in_spatial, *g.out_spatial,
                                *g.window.pad_low, strides)  # fmt: skip
    return WinogradPlan(config, geometry, g.output_index, layouts=(weights_layout, None))


def transformed_kernel(kernel: np.ndarray) -> np.ndarray:
    """U = G g G^T of a [Cout, Cin, 3, 3] kernel: [16, Cout, Cin] (rounded once, from
    float64 sums)."""
    g = np.array(G)
    u = np.einsum("ar,bs,oirs->aboi", g, g, kernel.astype(np.float64))
    return u.reshape(PHASES, *kernel.shape[:2]).astype(kernel.dtype)


@dataclass
class WinogradPlan(Prepackable):
    """A convolution as Winograd F(2x2, 3x3); what conv.py plans for the shapes it pays
    on.  Operand A (the kernel, convolution operand 1) is always pre-packed, as U."""

    config: GemmConfig
    geometry: WinogradGeometry
    # (builder, image, channel, pixel) -> the convolution's output index (conv.py's)
    output_index: Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], list[ir.Value]]
    layouts: tuple[StridedLayout | None, None] = (None, None)
    packed: tuple[Slice | None, None] = (None, None)
    operands: tuple[int, int] = (1, 0)
    kind = "winograd"

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
            transformed_kernel(kernel).ravel(), self._u_layout(), self.packed_shape(0)
        )

    @property
    def _v_bytes(self) -> int:
        g = self.geometry
        return aligned(PHASES * g.cin * g.tiles * self.config.itemsize)

    @property
    def _m_bytes(self) -> int:
        g = self.geometry
        return aligned(PHASES * g.cout * g.tiles * self.config.itemsize)

    @property
    def workspace_bytes(self) -> int:
        """V, then M, then the GEMMs' packing."""
        return self._v_bytes + self._m_bytes + self._gemm().workspace_bytes

    def _u_layout(self) -> StridedLayout:
        """U as [16][Cout][Cin] (where it came from: the kernel's constant)."""
        g = self.geometry
        return StridedLayout(self.layouts[0].where, ((0, g.cout * g.cin),), g.cin, 1)

    def _gemm(self, v: Slice | None = None) -> GemmPlan:
        """M[p] = U[p] V[p] for the 16 phases p, V read from the slice `v`: [16][Cin][tiles],
        packed block by block as any strided B (V written as packed panels in place took
        longer: its stores scatter)."""
        g = self.geometry

        def unpacked(ctx, sources, index):
            raise AssertionError("U is always pre-packed")

        def columns(ctx, sources, index):
            b = ctx.builder
            offset = b.mul(index[0], i64(g.cin * g.tiles))
            base = b.gep(ctx.slice_pointer(v), [offset], source_etype=self.config.element)
            return StridedPanels(base, 1, g.tiles)

        def c_offset(ctx, index):
            return ctx.builder.mul(index[0], i64(g.cout * g.tiles))

        return GemmPlan(self.config, (PHASES,), g.cout, g.tiles, g.cin, g.tiles, unpacked,
                        columns, c_offset, out_index=None, layouts=(self._u_layout(), None),
                        packed=(self.packed[0] or NOT_YET_PACKED, None))  # fmt: skip

    def emit(self, ctx: EmitContext, sources, c: Slice, workspace: Slice, epilogue) -> None:
        """Per image: V, the GEMMs into M, then the output and its epilogue."""
        assert self.packed[0] not in (None, NOT_YET_PACKED), "U is pre-packed by prepack.py"
        g = self.geometry
        v = Slice(BufferKind.ARENA, 0, workspace.offset, self._v_bytes)
        m = Slice(BufferKind.ARENA, 0, v.offset + v.size, self._m_bytes)
        rest = m.offset + m.size
        packing = Slice(BufferKind.ARENA, 0, rest, workspace.offset + workspace.size - rest)
        gemm = self._gemm(v)
        image = sources[0].view
        with for_range(ctx.builder, g.batch, "image") as n:
            self._input_transform(ctx, image, n, v)
            gemm.emit(ctx, sources, m, packing, None)
            self._output_transform(ctx, m, c, n, epilogue)

    # -- V = B^T d B --------------------------------------------------------------

    def _input_transform(self, ctx: EmitContext, image, number, v: Slice) -> None:
        """V of image `number`, over (channel, tile row)."""
        g, cfg = self.geometry, self.config
        blocks = -(-g.tile_columns // cfg.lanes)
        work = g.cin * g.tiles * PHASES * 4
        dims = [g.cin, g.tile_rows]
        with parallel_loop_nest_passing(ctx, dims, [number], "vin", work) as ((channel, row), (n,)):
            b = ctx.builder
            batch_stride, channel_stride, row_stride = g.image_strides
            offset = b.add(b.mul(n, i64(batch_stride)), b.mul(channel, i64(channel_stride)))
            plane = image.pointer(ctx, offset)
            lines = []
            for r in range(4):
                at = b.add(b.sub(b.mul(row, i64(2)), i64(g.top)), i64(r))
                inside = b.and_(b.icmp_signed(">=", at, i64(0)),
                                b.icmp_signed("<", at, i64(g.height)))  # fmt: skip
                line = b.gep(plane, [b.mul(at, i64(row_stride))], source_etype=cfg.element)
                lines.append((line, inside))
            tiles = b.add(b.mul(channel, i64(g.tiles)), b.mul(row, i64(g.tile_columns)))
            out = b.gep(ctx.slice_pointer(v), [tiles], source_etype=cfg.element)
            with for_range(b, blocks, "vblock") as block:
                first = b.mul(block, i64(cfg.lanes))
                count = b.sub(i64(g.tile_columns), first)
                column = b.sub(b.mul(first, i64(2)), i64(g.left))
                d = [self._tile_columns(ctx, line, inside, column) for line, inside in lines]
                for a, by_column in enumerate(_apply(b, B_T, d)):  # B^T d: [a][s]
                    for s, value in enumerate(_apply(b, B_T, by_column)):
                        phase = (4 * a + s) * g.cin * g.tiles
                        at = b.gep(out, [b.add(first, i64(phase))], source_etype=cfg.element)
                        masked_store(ctx, b, cfg, value, at, 0, count, False)

    def _tile_columns(self, ctx, line, inside, column) -> list[ir.Value]:
        """Input columns column + 2t + s (s = 0..3) for the tiles t of a vector, zero
        outside the image or the row not `inside`."""
        g, cfg = self.geometry, self.config
        b = ctx.builder
        lanes = cfg.lanes
        offsets = i32_lanes(range(2 * lanes))
        out = []
        for shift in (0, 2):
            start = b.add(column, i64(shift))
            # 32-bit lanes: the row's columns fit, and the mask legalizes as the load's
            positions = b.add(splat(b, b.trunc(start, I32), offsets.type), offsets)
            valid = b.and_(b.icmp_signed(">=", positions, splat(b, ir.Constant(I32, 0), offsets.type)),
                           b.icmp_signed("<", positions, splat(b, ir.Constant(I32, g.width), offsets.type)))  # fmt: skip
            valid = b.and_(valid, splat(b, inside, ir.VectorType(I1, 2 * lanes)))
            pointer = b.gep(line, [start], source_etype=cfg.element)
            # two vectors, de-interleaved into the even and odd columns (one masked load
            # of both came out wrong on AVX2: its upper lanes read past the mask)
            halves = [_lanes(b, valid, range(h * lanes, (h + 1) * lanes)) for h in (0, 1)]
            low, high = (masked_load(ctx, b, cfg, b.gep(pointer, [i64(h * lanes)], source_etype=cfg.element), mask)
                         for h, mask in enumerate(halves))  # fmt: skip
            for parity in (0, 1):
                out.append(b.shuffle_vector(low, high, i32_lanes(range(parity, 2 * lanes, 2))))
        return out

    # -- Y = A^T M A ----------------------------------------------------------------

    def _output_transform(self, ctx: EmitContext, m: Slice, c: Slice, number, epilogue) -> None:
        """Y of image `number` and its epilogue, over output channels."""
        g, cfg = self.geometry, self.config
        lanes = cfg.lanes
        blocks = -(-g.tile_columns // lanes)
        pixels = g.out_height * g.out_width
        work = g.cout * g.tiles * PHASES * 4
        with parallel_loop_nest_passing(ctx, [g.cout], [number], "vout", work) as (
            (channel,),
            (n,),
        ):
            b = ctx.builder
            ty = cfg.element
            phases = b.gep(ctx.slice_pointer(m), [b.mul(channel, i64(g.tiles))], source_etype=ty)
            plane_index = b.add(b.mul(n, i64(g.cout)), channel)
            plane = b.gep(ctx.slice_pointer(c), [b.mul(plane_index, i64(pixels))], source_etype=ty)
            with for_range(b, g.tile_rows, "yrow") as row, for_range(b, blocks, "yblock") as block:
                first = b.mul(block, i64(lanes))
                count = b.sub(i64(g.tile_columns), first)
                tile = b.add(b.mul(row, i64(g.tile_columns)), first)
                values = []
                for p in range(PHASES):
                    at = b.gep(phases, [b.add(i64(p * g.cout * g.tiles), tile)], source_etype=ty)
                    values.append(self._load(ctx, at, count))
                by_row = _apply(b, A_T, [values[4 * a : 4 * a + 4] for a in range(4)])
                for half, by_column in enumerate(by_row):
                    out_row = b.add(b.mul(row, i64(2)), i64(half))
                    even, odd = _apply(b, A_T, by_column)
                    with if_then(b, b.icmp_unsigned("<", out_row, i64(g.out_height))):
                        line = b.gep(plane, [b.mul(out_row, i64(g.out_width))], source_etype=ty)
                        self._store_interleaved(ctx, line, b.mul(first, i64(2)), even, odd)
            if epilogue is not None:  # on the plane just computed

                def element(row, pixel):
                    epilogue(self.output_index(ctx.builder, n, row, pixel))

                emit_region(ctx, channel, 1, i64(0), pixels, element)

    def _load(self, ctx, pointer, count) -> ir.Value:
        """`lanes` values from `pointer`, only the first `count` of them (the rest zero)."""
        b = ctx.builder
        return masked_load(ctx, b, self.config, pointer, lanes_below(b, count, self.config.lanes))

    def _store_interleaved(self, ctx, line, column, even, odd) -> None:
        """Columns column + 2t (`even`) and column + 2t + 1 (`odd`) of an output row,
        those inside the row."""
        cfg = self.config
        b = ctx.builder
        lanes = cfg.lanes
        for half in range(2):
            order = [i + lanes * parity for i in range(half * lanes // 2, (half + 1) * lanes // 2)
                     for parity in (0, 1)]  # fmt: skip
            value = b.shuffle_vector(even, odd, i32_lanes(order))
            start = b.add(column, i64(half * lanes))
            at = b.gep(line, [start], source_etype=cfg.element)
            left = b.sub(i64(self.geometry.out_width), start)  # negative past the row's end
            masked_store(ctx, b, cfg, value, at, 0, left, False)


def _lanes(b: ir.IRBuilder, vector, which) -> ir.Value:
    """The lanes `which` of `vector`."""
    return b.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined), i32_lanes(which))


def _apply(b: ir.IRBuilder, matrix, values: list) -> list:
    """matrix x values (lists of vectors, or of lists of them), its 0/+-1 entries as
    adds and subtracts (the added terms first, so that no negation is needed)."""
    out = []
    for coefficients in matrix:
        terms = sorted(((-c, v) for c, v in zip(coefficients, values) if c), key=lambda t: t[0])
        (first_sign, total), *rest = terms
        if first_sign > 0:
            total = _negate(b, total)
        for sign, value in rest:
            total = _add(b, total, value, -sign)
        out.append(total)
    return out


def _add(b, total, value, coefficient):
    if isinstance(total, list):
        return [_add(b, t, v, coefficient) for t, v in zip(total, value)]
    return b.fadd(total, value) if coefficient == 1 else b.fsub(total, value)


def _negate(b, value):
    if isinstance(value, list):
        return [_negate(b, v) for v in value]
    return b.fneg(value)
