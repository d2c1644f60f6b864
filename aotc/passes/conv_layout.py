"""Convolution layout assignment: each convolution in the layout the CPU computes best.

ONNX writes convolutions NCHW; JAX and TensorFlow channels-last
(`dim_labels=b01f_01io->b01f`) or in other dimension orders.  The CPU backend
has two fast forms: channels-last (`ConvDims.nhwc`: a direct convolution on
register tiles of one output row's pixels by output channels) and NCHW
(`ConvDims.nchw`: im2col + GEMM, and the depthwise loop).  A channels-last
convolution with one feature group and output rows wide enough to fill the
tiles stays channels-last (its kernel to [spatial..., in, out]); every other
convolution goes NCHW.  Like XLA CPU's
ConvCanonicalization, this pass rewrites a convolution in another layout as
the chosen one between transposes: the kernel's transpose folds away when the
weights are constants, and the algebraic simplifier moves the image's
transposes through elementwise ops and pooling and cancels back-to-back ones,
so a chain of convolutions in one layout keeps it in between.
"""

from __future__ import annotations

from ..ir import ConvDims, DType, Instruction, Op
from .rewrite import InsertingBuilder, rewrite, rule

# channels-last needs output rows at least this wide: narrower rows leave the direct
# kernel's MR-pixel register tiles mostly empty
MIN_CHANNELS_LAST_WIDTH = 16
CHANNELS_LAST_DTYPES = frozenset({DType.F32, DType.F64})


def preferred_layout(conv: Instruction) -> ConvDims:
    """The layout `conv` runs best in on the CPU: channels-last when it is written so
    (its image and result channels-last) and the direct kernel suits it, else NCHW.

    An NCHW convolution stays NCHW: moving ONNX's ResNet-50 to channels-last (the
    transposes cancel between convolutions) measured within 3% of the NCHW GEMMs,
    not worth the layout changes it leaves around other ops."""
    dims, window = conv.conv, conv.window
    spatial = len(dims.output_spatial)
    rank = conv.array_shape.rank
    width = conv.array_shape.dims[dims.output_spatial[-1]] if spatial else 0
    channels_last = (
        spatial in (1, 2)
        and dims.input_feature == rank - 1
        and dims.output_feature == rank - 1
        and conv.feature_group_count == 1
        and conv.batch_group_count == 1
        and all(d == 1 for d in window.lhs_dilation)
        and conv.array_shape.dtype in CHANNELS_LAST_DTYPES
        and width >= MIN_CHANNELS_LAST_WIDTH
    )
    return ConvDims.nhwc(spatial) if channels_last else ConvDims.nchw(spatial)


@rule(Op.CONVOLUTION)
def assign_layout(b: InsertingBuilder, instr: Instruction):
    dims = instr.conv
    layout = preferred_layout(instr)
    if dims == layout:
        return None
    lhs, rhs = instr.operands
    lhs = b.transpose(lhs, _input_order(dims, layout))
    rhs = b.transpose(rhs, _kernel_order(dims, layout))
    out_order = _output_order(dims, layout)
    out = b.add(
        Op.CONVOLUTION,
        [lhs, rhs],
        shape=instr.array_shape.with_dims(tuple(instr.array_shape.dims[d] for d in out_order)),
        window=instr.window,
        conv=layout,
        feature_group_count=instr.feature_group_count,
        batch_group_count=instr.batch_group_count,
    )
    # result dim out_order[j] is the new convolution's dim j
    position = [0] * instr.array_shape.rank
    for j, d in enumerate(out_order):
        position[d] = j
    return b.transpose(out, position)


def _input_order(dims: ConvDims, layout: ConvDims) -> list[int]:
    """order[j]: the dim of `dims`' input that is dim j of `layout`'s."""
    return _order(
        (dims.input_batch, dims.input_feature, *dims.input_spatial),
        (layout.input_batch, layout.input_feature, *layout.input_spatial),
    )


def _kernel_order(dims: ConvDims, layout: ConvDims) -> list[int]:
    return _order(
        (dims.kernel_output_feature, dims.kernel_input_feature, *dims.kernel_spatial),
        (layout.kernel_output_feature, layout.kernel_input_feature, *layout.kernel_spatial),
    )


def _output_order(dims: ConvDims, layout: ConvDims) -> list[int]:
    return _order(
        (dims.output_batch, dims.output_feature, *dims.output_spatial),
        (layout.output_batch, layout.output_feature, *layout.output_spatial),
    )


def _order(source: tuple[int, ...], target: tuple[int, ...]) -> list[int]:
    """The permutation putting each role's dim in `source` at its position in `target`
    (roles: batch, feature, spatial... in both tuples)."""
    order = [0] * len(source)
    for s, t in zip(source, target):
        order[t] = s
    return order


class ConvLayoutAssignment:
    name = "conv_layout"

    def run(self, module) -> bool:
        return rewrite(module, [assign_layout])
