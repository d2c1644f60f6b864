"""Convolution frames: a convolution with unit window dims as one of fewer spatial dims.

The CPU backend's fast convolution forms (Winograd, plane, direct, its im2col
column packer) take 1-D and 2-D convolutions.  A video network's 3-D convolutions
are mostly factored: R(2+1)D's (1,3,3) spatial and (3,1,1) temporal windows.  Along
a spatial dim whose window is trivial (one tap, stride 1, no padding, no dilation)
every output reads the input at its own index, so the dim is a batch of independent
convolutions:

- the trivial dims at the end of the spatial dims (H and W of a (3,1,1) window)
  merge into one spatial dim: a (3,1) convolution over [N, C, T, H*W], reshapes only
  in the NC-spatial layout every 3-D convolution has after conv_layout;
- the other trivial dims (T of a (1,3,3) window) move into the batch: a (3,3)
  convolution of N*T frames, the input transposed to put T next to N and the result
  transposed back (the algebraic simplifier moves these transposes through the
  elementwise ops between convolutions, fusion puts the rest in loops).

Every output is the same products summed over the same taps.  Feature groups are
per feature and unaffected; batch groups split the batch and are left alone.  The
new convolution is NC-spatial whatever the layout of the old one (transposes where
that differs: the layout conv_layout gives every convolution of over 2 spatial dims).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir import ConvDims, Instruction, Op, Window
from .rewrite import InsertingBuilder, rewrite, rule

# the window fields, and the value each has along a dim that is a batch of frames
TRIVIAL = {
    "size": 1,
    "stride": 1,
    "pad_low": 0,
    "pad_high": 0,
    "lhs_dilation": 1,
    "rhs_dilation": 1,
}
# 1-D and 2-D convolutions already take the fast forms: rewriting them only adds
# transposes
MIN_SPATIAL = 3


@dataclass(frozen=True)
class FramePlan:
    """Spatial dims (indices into the window) by what they become."""

    framed: tuple[int, ...]  # trivial, into the batch
    kept: tuple[int, ...]  # with taps: the new convolution's spatial dims
    merged: tuple[int, ...]  # the trailing trivial dims: one spatial dim of the new one

    @property
    def spatial(self) -> int:
        return len(self.kept) + bool(self.merged)


def is_trivial(window: Window, dim: int) -> bool:
    return all(getattr(window, field)[dim] == value for field, value in TRIVIAL.items())


def plan_frames(conv: Instruction) -> FramePlan | None:
    """How `conv`'s spatial dims split; None where the rewrite would not shrink it."""
    window = conv.window
    assert window is not None
    n = window.rank
    if n < MIN_SPATIAL or conv.batch_group_count != 1:
        return None
    trivial = [is_trivial(window, d) for d in range(n)]
    tail = n
    while tail > 0 and trivial[tail - 1]:
        tail -= 1
    plan = FramePlan(
        framed=tuple(d for d in range(tail) if trivial[d]),
        kept=tuple(d for d in range(tail) if not trivial[d]),
        merged=tuple(range(tail, n)),
    )
    return plan if plan.spatial < n else None


@rule(Op.CONVOLUTION)
def convolve_frames(b: InsertingBuilder, conv: Instruction):
    plan = plan_frames(conv)
    if plan is None:
        return None
    dims, window = conv.conv, conv.window
    assert dims is not None and window is not None
    lhs, rhs = conv.operands
    image = _operand(b, lhs, dims.input_batch, dims.input_feature, dims.input_spatial, plan)
    # a kernel's framed dims have size 1: beside its output feature, they leave it as is
    kernel_features = (dims.kernel_output_feature, dims.kernel_input_feature)
    kernel = _operand(b, rhs, *kernel_features, dims.kernel_spatial, plan)
    out = b.convolution(
        image,
        kernel,
        _frame_window(window, plan),
        ConvDims.nchw(plan.spatial),
        conv.feature_group_count,
        conv.array_shape.dtype,
    )
    return _result(b, out, conv, plan)


def _order(first: int, feature: int, spatial, plan: FramePlan) -> list[int]:
    """An array's dims as [first, framed..., feature, kept..., merged...]."""
    framed = [spatial[d] for d in plan.framed]
    return [first, *framed, feature, *(spatial[d] for d in plan.kept + plan.merged)]


def _operand(b, x: Instruction, first: int, feature: int, spatial, plan: FramePlan):
    """`x` in the new convolution's NC-spatial form: the framed dims merged into its
    first dim (the image's batch, the kernel's output feature), the merged dims one."""
    order = _order(first, feature, spatial, plan)
    sizes = [x.array_shape.dims[d] for d in order]
    kept = len(plan.framed) + 1, len(plan.framed) + 2 + len(plan.kept)
    dims = [math.prod(sizes[: kept[0]]), *sizes[kept[0] : kept[1]]]
    if plan.merged:
        dims.append(math.prod(sizes[kept[1] :]))
    return b.reshape(b.transpose(x, order), dims)


def _frame_window(window: Window, plan: FramePlan) -> Window:
    """The window along the kept dims, and a trivial entry for the merged ones."""
    merged = 1 if plan.merged else 0
    fields = {
        field: tuple(getattr(window, field)[d] for d in plan.kept) + (value,) * merged
        for field, value in TRIVIAL.items()
    }
    return Window(**fields)


def _result(b, out: Instruction, conv: Instruction, plan: FramePlan) -> Instruction:
    """The new convolution's result back in `conv`'s shape and dim order."""
    dims = conv.conv
    assert dims is not None
    order = _order(dims.output_batch, dims.output_feature, dims.output_spatial, plan)
    split = b.reshape(out, [conv.array_shape.dims[d] for d in order])
    # dim j of `split` is the result's dim order[j]
    position = [0] * len(order)
    for j, d in enumerate(order):
        position[d] = j
    return b.transpose(split, position)


class ConvFrames:
    name = "conv_frames"

    def run(self, module) -> bool:
        return rewrite(module, [convolve_frames])
