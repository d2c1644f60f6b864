"""Convolution canonicalization: every convolution in ONNX's NCHW layout.

JAX and TensorFlow write convolutions channels-last (`dim_labels=b01f_01io->b01f`)
or in other dimension orders; the backends lower one layout well: input
[batch, feature, spatial...], kernel [out, in, spatial...], output [batch,
feature, spatial...] (`ConvDims.nchw`).  Like XLA CPU's ConvCanonicalization,
this pass rewrites any other convolution as that one between transposes:
the kernel's transpose folds away when the weights are constants, the
others are copies that cost a fraction of the convolution (an NHWC 3x3
convolution ran 70x slower through the generic loop than canonicalized),
and the algebraic simplifier merges back-to-back transposes.
"""

from __future__ import annotations

from ..ir import ConvDims, Instruction, Op
from .rewrite import InsertingBuilder, rewrite, rule


@rule(Op.CONVOLUTION)
def canonical_convolution(b: InsertingBuilder, instr: Instruction):
    dims = instr.conv
    canonical = ConvDims.nchw(len(dims.input_spatial))
    if dims == canonical:
        return None
    lhs, rhs = instr.operands
    lhs = b.transpose(lhs, (dims.input_batch, dims.input_feature, *dims.input_spatial))
    rhs = b.transpose(
        rhs, (dims.kernel_output_feature, dims.kernel_input_feature, *dims.kernel_spatial)
    )
    out = b.add(
        Op.CONVOLUTION,
        [lhs, rhs],
        shape=instr.shape.with_dims(_canonical_dims(instr.shape.dims, dims)),
        window=instr.window,
        conv=canonical,
        feature_group_count=instr.feature_group_count,
        batch_group_count=instr.batch_group_count,
    )
    # result dim d is canonical dim position[d]
    position = [0] * instr.shape.rank
    position[dims.output_batch] = 0
    position[dims.output_feature] = 1
    for i, d in enumerate(dims.output_spatial):
        position[d] = 2 + i
    return b.transpose(out, position)


def _canonical_dims(out_dims, dims: ConvDims) -> tuple[int, ...]:
    order = (dims.output_batch, dims.output_feature, *dims.output_spatial)
    return tuple(out_dims[d] for d in order)


class ConvCanonicalization:
    name = "conv_layout"

    def run(self, module) -> bool:
        return rewrite(module, [canonical_convolution])
