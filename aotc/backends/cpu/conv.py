"""A convolution as the CPU's kernel forms see it, and its im2col forms.

forms.py's CONV_FORMS asks each form in turn for a plan of a convolution; all read
one `ConvProblem`: the target, the convolution, its operands' memory views, the GEMM
blocking of its types (`config`: only convolutions that have one, of one batch group,
get a problem) and its extents in GEMM terms (`ConvGeometry`).  An output laid out
[batch, feature, spatial...] (NCHW) is, per image and feature group, the GEMM
C[Cout_g, pixels] = weights[Cout_g, Cin_g*taps] x columns[Cin_g*taps, pixels]; the
weights as that GEMM's A operand (`ConvProblem.weights_layout`, `weights_factory`)
serve the plane and Winograd forms too.

The im2col forms are here: that GEMM with the columns packed straight from the image
(im2col.py, any spatial rank; through the input's generator for other layouts or base
dilation), or, for 1x1 stride-1 windows, the image itself as a strided matrix; in f32
and f64 (`plan_im2col`) and in 16-bit integer pairs (`plan_paired_im2col`, pairs.py).
A 1x1 convolution of a single pixel is a matrix-vector product (`plan_gemv`).
Convolutions no form takes run by llvm/dot_conv.py's element rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

from llvmlite import ir

from ...ir import DType, Instruction
from ..llvm.context import Gen
from ..llvm.elemental import delinearize, split_index
from ..llvm.lltypes import i64, register_type
from ..llvm.loops import branch_value
from ..llvm.window import all_of, tap_position
from .amx import AmxPlan, tiled
from .gemm import GemmPlan
from .gemm_config import GemmConfig, gemm_config, takes_bytes
from .gemv import gemv_kind
from .im2col import ImagePanels
from .image_geometry import ImageGeometry
from .pairs import paired_factory, pairs_of
from .panels import GeneratedPanels, StridedPanels
from .prepackable import StridedLayout, is_constant, strided_layout
from .quads import quad_factory, quads_of
from .target import CpuTarget
from .views import View, affine, merged_stride
from .workspace import Budget

# -- the problem -------------------------------------------------------------------


def conv_problem(
    target: CpuTarget, conv: Instruction, views, budget: Budget | None = None
) -> ConvProblem | None:
    """The problem the forms plan `conv` from (`views`: its operands' memory views, or
    None; `budget`: what its workspace may take, None: any), or None: no form takes it
    (no GEMM blocking for its types, batch groups)."""
    config = gemm_config(target, conv.array_shape.dtype, conv.operands[0].array_shape.dtype)
    if config is None or conv.batch_group_count != 1:
        return None
    return ConvProblem(target, conv, tuple(views), config, ConvGeometry(conv), budget)


@dataclass
class ConvProblem:
    """One convolution to plan, and what several forms read of it."""

    target: CpuTarget
    conv: Instruction
    views: tuple[View | None, View | None]  # the image's and the kernel's, as found
    config: GemmConfig
    geometry: ConvGeometry
    # what the kernel's workspace may take without raising the memory plan's peak (the
    # forms that work in bands size theirs to it), None: any
    budget: Budget | None = None

    @property
    def float_nchw(self) -> bool:
        """A float convolution with an NCHW output and work to do: what the depthwise,
        Winograd, plane and im2col forms take."""
        g = self.geometry
        return not self.config.paired and g.nchw_output and g.work != 0

    @cached_property
    def image_view(self) -> View | None:
        """The image's view where it has one stride per dim."""
        return affine(self.views[0])

    @cached_property
    def kernel_view(self) -> View | None:
        """The kernel's view where it has one stride per dim."""
        return affine(self.views[1])

    @cached_property
    def weights_layout(self) -> StridedLayout | None:
        """The kernel as the GEMM's A in memory, or None: read through its generator."""
        return _weights_layout(self.geometry, self.kernel_view)

    def weights_factory(self):
        """A[m, k] = kernel[group*Cout_g + m, ci, taps...] with k = (ci, taps...)."""
        return _weights_factory(self.geometry, self.weights_layout)


class ConvGeometry:
    """Extents of one convolution, in the terms of its NCHW GEMM."""

    def __init__(self, conv: Instruction):
        dims, window = conv.conv, conv.window
        assert dims is not None and window is not None, conv.name
        self.conv = conv
        self.dims = dims
        self.window = window
        self.lhs = conv.operands[0].array_shape
        self.rhs = conv.operands[1].array_shape
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
    def is_depthwise(self) -> bool:
        """Feature groups of one input channel each."""
        return self.cin_g == 1 and self.groups > 1

    @property
    def base_dilated(self) -> bool:
        return any(d != 1 for d in self.window.lhs_dilation)

    @property
    def is_pointwise(self) -> bool:
        """1x1 window, stride 1, no padding or dilation: the columns are the image."""
        w = self.window
        ones = (*w.size, *w.stride, *w.lhs_dilation)
        return all(v == 1 for v in ones) and not any((*w.pad_low, *w.pad_high))


def _weights_layout(g: ConvGeometry, view) -> StridedLayout | None:
    """A's layout when the kernel is in memory with (ci, taps...) merging into one stride:
    group `index[1]`'s rows start Cout_g rows further."""
    if view is None:
        return None
    dims = g.dims
    m_stride = view.strides[dims.kernel_output_feature]
    k_dims = (dims.kernel_input_feature, *dims.kernel_spatial)
    return strided_layout(view, dims.kernel_output_feature, k_dims, ((1, g.cout_g * m_stride),))


def _weights_factory(g: ConvGeometry, layout: StridedLayout | None):
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


# -- the im2col forms ------------------------------------------------------------------


def plan_im2col(problem: ConvProblem) -> GemmPlan | None:
    """A float NCHW convolution, depthwise ones aside, as GEMMs per image and feature
    group: C[Cout_g, pixels] = weights[Cout_g, Cin_g * taps] x columns[Cin_g * taps,
    pixels], the columns packed straight from the image (implicit im2col) or, for 1x1
    stride-1 windows, the image itself."""
    g = problem.geometry
    if not problem.float_nchw or g.is_depthwise:
        return None
    weights = problem.weights_factory()
    columns = _columns_factory(g, problem.image_view)
    return GemmPlan(
        problem.config,
        (g.batch, g.groups),
        g.cout_g,
        g.pixels,
        g.k,
        g.pixels,
        weights,
        columns,
        *_placement(g),
        layouts=(problem.weights_layout, None),
        operands=(1, 0),
    )


def plan_gemv(problem: ConvProblem) -> GemmPlan | None:
    """A float NCHW pointwise convolution of one pixel (a squeeze-excite block's fully
    connected layers) as a matrix-vector product per image and group: the weights'
    rows against the image's channels, both read where they are (gemv.py).  The GEMM
    would pack a one-column B and run its micro-kernel's edge on it."""
    g, weights = problem.geometry, problem.weights_layout
    view = problem.image_view
    if not problem.float_nchw or g.is_depthwise or g.pixels != 1 or not g.is_pointwise:
        return None
    if weights is None or view is None:
        return None
    channels = view.strides[g.dims.input_feature]
    strides = (weights.p_stride, weights.k_stride)
    kind = (
        None
        if channels is None
        else gemv_kind(g.cout_g, 1, strides, channels, is_constant(weights))
    )
    if kind is None:
        return None
    c_offset, out_index = _placement(g)
    return GemmPlan(
        problem.config,
        (g.batch, g.groups),
        g.cout_g,
        1,
        g.k,
        1,
        problem.weights_factory(),
        _columns_factory(g, view),
        c_offset,
        out_index,
        gemv=kind,
        layouts=(weights, None),
        operands=(1, 0),
    )


def plan_amx_im2col(problem: ConvProblem) -> AmxPlan | None:
    """An integer convolution of u8/s8 operands in memory by a constant kernel with an
    NCHW output, on a target with AMX-INT8: im2col products on tiles (amx.py), the
    kernel's rows pre-packed, the image's columns packed as quads per strip."""
    g, config = problem.geometry, problem.config
    if not (config.paired and config.tiles) or not g.nchw_output or g.work == 0:
        return None
    image, kernel, weights = problem.image_view, problem.kernel_view, problem.weights_layout
    if g.is_depthwise or image is None or kernel is None or weights is None:
        return None
    types = (kernel.dtype, image.dtype)
    if not set(types) <= {DType.U8, DType.S8} or g.base_dilated:
        return None
    quads = replace(config, quad_types=types)  # the packers'
    factories = (problem.weights_factory(), quad_factory(_columns_factory(g, image), g.k))
    return tiled(_integer_im2col(quads, g, factories, quads_of(g.k), weights, types), types)


def plan_quad_im2col(problem: ConvProblem) -> GemmPlan | None:
    """An integer convolution of 8-bit operands in memory (the other read through their
    widening converts) of the types the target's byte dots take (`plan_quad_dot`), with
    an NCHW output: im2col GEMMs of 8-bit quads (quads.py)."""
    g, config = problem.geometry, problem.config
    if not config.paired or not g.nchw_output or g.work == 0:
        return None
    image, kernel, weights = problem.image_view, problem.kernel_view, problem.weights_layout
    if g.is_depthwise or image is None or kernel is None or weights is None:
        return None
    if not takes_bytes(config, kernel.dtype, image.dtype) or g.base_dilated:
        return None
    quads = replace(config, quad_types=(kernel.dtype, image.dtype))
    factories = (problem.weights_factory(), _columns_factory(g, image))
    return _integer_im2col(
        quads,
        g,
        tuple(quad_factory(factory, g.k) for factory in factories),
        quads_of(g.k),
        weights,
        (kernel.dtype, image.dtype),
    )


def plan_paired_im2col(problem: ConvProblem) -> GemmPlan | None:
    """An integer convolution (16-bit pairs, pairs.py) with an NCHW output as im2col
    GEMMs; depthwise ones and other layouts are left to the element rule."""
    g, config = problem.geometry, problem.config
    if not config.paired or not g.nchw_output or g.work == 0 or g.is_depthwise:
        return None
    lhs_view, weights_layout = problem.image_view, problem.weights_layout
    kernel_view = problem.kernel_view  # not None where the weights have a layout
    weights_source = (
        g.rhs.dtype if kernel_view is None or weights_layout is None else kernel_view.dtype
    )
    if lhs_view is not None and (lhs_view.dtype is not DType.S16 or g.k % 2):
        lhs_view = None  # im2col packs whole pairs of s16 rows only
    columns_source = lhs_view.dtype if lhs_view is not None else g.lhs.dtype
    paired = tuple(
        paired_factory(factory, source, g.k)
        for factory, source in (
            (problem.weights_factory(), weights_source),
            (_columns_factory(g, lhs_view), columns_source),
        )
    )
    sources = (weights_source, columns_source)
    return _integer_im2col(config, g, paired, pairs_of(g.k), weights_layout, sources)


def _integer_im2col(config, g: ConvGeometry, factories, k: int, weights, sources) -> GemmPlan:
    """The im2col GemmPlan of an integer convolution whose K values make `k` panel
    elements (pairs or quads) read through `factories` (the weights', the columns')."""
    c_offset, out_index = _placement(g)
    return GemmPlan(
        config,
        (g.batch, g.groups),
        g.cout_g,
        g.pixels,
        k,
        g.pixels,
        factories[0],
        factories[1],
        c_offset,
        out_index,
        layouts=(weights, None),
        operands=(1, 0),
        paired_k=g.k,
        sources=sources,
    )


def _placement(g: ConvGeometry):
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


def _columns_factory(g: ConvGeometry, view):
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
    if view is not None and small and not g.base_dilated:

        def image(ctx, sources, index):
            offset = _image_offset(ctx, g, view, index)
            return ImagePanels(sources[0].view.pointer(ctx, offset), image_geometry(g, view))

        return image

    def generated(ctx, sources, index):
        return GeneratedPanels(_column_element(ctx, g, sources[0].gen, index))

    return generated


def _image_offset(ctx, g: ConvGeometry, view, index) -> ir.Value:
    """Elements from the input's start to image `index[0]`, channel group `index[1]`."""
    b = ctx.builder
    image, group = index
    batch = b.mul(image, i64(view.strides[g.dims.input_batch]))
    channels = b.mul(group, i64(g.cin_g * view.strides[g.dims.input_feature]))
    return b.add(batch, channels)


def image_geometry(g: ConvGeometry, view) -> ImageGeometry:
    """The packers' geometry of the image (1-D windows as 2-D ones of height 1)."""
    w = g.window
    spatial = [
        (view.strides[d], size, k, s, p, dil, out)
        for d, size, k, s, p, dil, out in zip(
            g.dims.input_spatial,
            g.in_spatial,
            w.size,
            w.stride,
            w.pad_low,
            w.rhs_dilation,
            g.out_spatial,
        )
    ]
    if len(spatial) == 1:
        spatial.insert(0, _UNIT_ROW)
    strides, sizes, kernel, stride, pad, dilation, out = (tuple(f) for f in zip(*spatial))
    c_stride = view.strides[g.dims.input_feature]
    return ImageGeometry(c_stride, strides, sizes, kernel, stride, pad, dilation, out)


# a spatial dim of extent 1: (memory stride, size, window, stride, pad, dilation, out)
_UNIT_ROW = (0, 1, 1, 1, 0, 1, 1)


def _column_element(ctx, g: ConvGeometry, gen: Gen, index):
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
