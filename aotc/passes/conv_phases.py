"""Stride phases: a convolution of a base-dilated input as convolutions of the input.

ONNX's ConvTranspose and JAX's conv_transpose are convolutions over their input
dilated with zeros (`lhs_dilation`, XLA's base dilation): computed as written, s^n of
every n-D window's taps multiply a zero.  This pass computes only the others.

Along a dim of base dilation s, window stride σ, kernel dilation δ and low padding
pl, output o's tap t reads the dilated position o*σ + t*δ - pl, which is input sample
(o*σ + t*δ - pl) / s where s divides it and zero elsewhere.  With P = s / gcd(σ, s)
and o = q*P + r, q*P*σ is a multiple of s, so for output phase r the taps that read
samples are the same for every q: those with (r*σ + t*δ - pl) ≡ 0 (mod s), an
arithmetic progression of kernel indices; tap t then reads input
q*σ/gcd(σ, s) + (r*σ + t*δ - pl) / s.  Each phase (r_1..r_n) is therefore an ordinary
convolution of the undilated input with its taps' sub-kernel (`phase_window`), and
the phases' outputs interleave into the result (`interleave`); a phase no tap lands
on for is zero.  Every phase computes ceil(O / P) outputs per dim; the grid's
outputs past O are cropped.

Along each dim, consecutive phases whose taps read alike (as many, from the same
input offset) form a run; the phases of a box of runs (one per dim) share one window
and are one convolution, their sub-kernels stacked on the output features (within
each feature group, so grouped and depthwise convolutions split too).  Kernel size =
stride without padding is one box of 1x1 windows: one GEMM of the input by all the
sub-kernels.  Batch-grouped convolutions (weight gradients) are left alone.  The
sub-kernels are slices of the kernel: constant folding computes them where the
weights are constants.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..ir import Instruction, Op, Window
from .rewrite import InsertingBuilder, rewrite, rule


@dataclass(frozen=True)
class PhaseTaps:
    """The kernel taps of one output phase along one dim, and what they read."""

    first: int  # kernel index of the first tap
    count: int
    step: int  # kernel indices between taps
    offset: int  # the input index the first tap reads for the phase's first output
    dilation: int  # input indices between taps

    @property
    def reads(self) -> tuple[int, int, int]:
        """What decides the phase's window along the dim (its first tap does not)."""
        return self.count, self.offset, self.dilation


@dataclass(frozen=True)
class DimSplit:
    """One spatial dim split into phases of `outputs` outputs each, `stride` apart in
    the input; `taps[r]` is phase r's, None where no tap lands on an input sample."""

    in_size: int
    outputs: int
    stride: int
    taps: tuple[PhaseTaps | None, ...]

    @property
    def phases(self) -> int:
        return len(self.taps)

    def runs(self) -> list[range]:
        """Consecutive phases whose taps read alike (None: none)."""
        runs = []
        for _, run in itertools.groupby(range(self.phases), lambda r: _reads(self.taps[r])):
            members = list(run)
            runs.append(range(members[0], members[-1] + 1))
        return runs


def _reads(taps: PhaseTaps | None):
    return None if taps is None else taps.reads


def split_dim(window: Window, dim: int, in_size: int, out_size: int) -> DimSplit:
    """The phases of spatial dim `dim` (see the module docstring for the algebra)."""
    s, sigma = window.lhs_dilation[dim], window.stride[dim]
    delta, low = window.rhs_dilation[dim], window.pad_low[dim]
    phases = s // math.gcd(sigma, s)
    taps = []
    for r in range(phases):
        # dilated position r*σ + t*δ - pl of q = 0 (a multiple of s: a sample)
        landing = {t: r * sigma + t * delta - low for t in range(window.size[dim])}
        kernel = [t for t, position in landing.items() if position % s == 0]
        taps.append(_phase_taps(kernel, [landing[t] // s for t in kernel]))
    outputs = -(-out_size // phases)
    return DimSplit(in_size, outputs, sigma // math.gcd(sigma, s), tuple(taps))


def _phase_taps(kernel: list[int], reads: list[int]) -> PhaseTaps | None:
    """Taps at kernel indices `kernel` reading input `reads` (progressions both)."""
    if not kernel:
        return None
    if len(kernel) == 1:
        return PhaseTaps(kernel[0], 1, 1, reads[0], 1)
    return PhaseTaps(kernel[0], len(kernel), kernel[1] - kernel[0], reads[0], reads[1] - reads[0])


def phase_window(splits: list[DimSplit], phase: tuple[int, ...]) -> Window | None:
    """The undilated input's window of one phase; None where it has no taps."""
    taps = [split.taps[r] for split, r in zip(splits, phase)]
    if any(t is None for t in taps):
        return None
    size, stride, low, high, dilation = [], [], [], [], []
    for split, t in zip(splits, taps):
        assert t is not None
        extent = (t.count - 1) * t.dilation + 1
        size.append(t.count)
        stride.append(split.stride)
        low.append(-t.offset)
        # the padded input holds exactly `outputs` windows
        high.append((split.outputs - 1) * split.stride + extent - split.in_size + t.offset)
        dilation.append(t.dilation)
    return Window.make(size, stride, low, high, None, dilation)


@rule(Op.CONVOLUTION)
def split_into_phases(b: InsertingBuilder, conv: Instruction):
    window, dims = conv.window, conv.conv
    assert window is not None and dims is not None
    lhs = conv.operands[0]
    if all(s == 1 for s in window.lhs_dilation) or conv.batch_group_count != 1:
        return None
    if conv.array_shape.size == 0 or lhs.array_shape.size == 0:
        return None
    in_dims, out_dims = lhs.array_shape.dims, conv.array_shape.dims
    splits = [
        split_dim(window, d, in_dims[i], out_dims[o])
        for d, (i, o) in enumerate(zip(dims.input_spatial, dims.output_spatial))
    ]
    runs = [split.runs() for split in splits]
    parts = {box: _box_outputs(b, conv, splits, box) for box in itertools.product(*runs)}
    return interleave(b, conv, splits, _stack_boxes(b, runs, parts, dims.output_feature + 1))


def _box_outputs(b, conv: Instruction, splits, box: tuple[range, ...]) -> Instruction:
    """The outputs of the phases of `box` (a run per dim), their features split as
    (group, the box's phases along each dim..., feature in group)."""
    lhs, rhs = conv.operands
    dims, groups = conv.conv, conv.feature_group_count
    assert dims is not None
    shape = list(conv.array_shape.dims)
    for o, split in zip(dims.output_spatial, splits):
        shape[o] = split.outputs
    f = dims.output_feature
    split_shape = [*shape[:f], groups, *map(len, box), shape[f] // groups, *shape[f + 1 :]]
    window = phase_window(splits, tuple(run[0] for run in box))
    if window is None:
        return b.broadcast(b.scalar(0, conv.array_shape.dtype), [], split_shape)
    phases = itertools.product(*box)
    kernels = [_sub_kernel(b, rhs, dims.kernel_spatial, splits, p) for p in phases]
    kernel = _stack_features(b, kernels, dims.kernel_output_feature, groups)
    out = b.convolution(lhs, kernel, window, dims, groups, conv.array_shape.dtype)
    return b.reshape(out, split_shape)


def _sub_kernel(b, rhs: Instruction, spatial, splits, phase) -> Instruction:
    """The kernel's taps of one phase (a strided slice along each spatial dim)."""
    rank = rhs.array_shape.rank
    starts, limits, strides = [0] * rank, list(rhs.array_shape.dims), [1] * rank
    for k, split, r in zip(spatial, splits, phase):
        t = split.taps[r]
        starts[k], limits[k], strides[k] = t.first, t.first + (t.count - 1) * t.step + 1, t.step
    if starts == [0] * rank and limits == list(rhs.array_shape.dims) and strides == [1] * rank:
        return rhs
    return b.slice(rhs, starts, limits, strides)


def _stack_features(b, kernels: list[Instruction], feature: int, groups: int) -> Instruction:
    """Sub-kernels stacked on the output features, phase-major within each group."""
    if len(kernels) == 1:
        return kernels[0]
    dims = list(kernels[0].array_shape.dims)
    split = [*dims[:feature], groups, 1, dims[feature] // groups, *dims[feature + 1 :]]
    stacked = b.concatenate([b.reshape(k, split) for k in kernels], feature + 1)
    dims[feature] *= len(kernels)
    return b.reshape(stacked, dims)


def _stack_boxes(b, runs, parts, axis: int, box: tuple[range, ...] = ()) -> Instruction:
    """The boxes' outputs put together along the phase dims, `axis` the first: all the
    phases' outputs, features as (group, phases along each dim..., feature in group)."""
    d = len(box)
    if d == len(runs):
        return parts[box]
    pieces = [_stack_boxes(b, runs, parts, axis, (*box, run)) for run in runs[d]]
    return b.concatenate(pieces, axis + d)


def interleave(b, conv: Instruction, splits, stacked: Instruction) -> Instruction:
    """The result from the phases' outputs `stacked`: output q of phase (r_1..r_n)
    goes to q_d * P_d + r_d along each dim."""
    dims = conv.conv
    assert dims is not None
    f = dims.output_feature
    spatial = {o: d for d, o in enumerate(dims.output_spatial)}
    # the dims of `stacked`, labelled, and the result's order: each output dim before
    # its phase dim
    source: list[tuple] = []
    target: list[tuple] = []
    for i in range(conv.array_shape.rank):
        if i == f:
            source += [("group",), *(("phase", d) for d in range(len(splits))), ("feature",)]
            target += [("group",), ("feature",)]
        elif i in spatial:
            source.append(("output", spatial[i]))
            target += [("output", spatial[i]), ("phase", spatial[i])]
        else:
            source.append(("batch",))
            target.append(("batch",))
    moved = b.transpose(stacked, [source.index(label) for label in target])
    grid = list(conv.array_shape.dims)
    for o, split in zip(dims.output_spatial, splits):
        grid[o] = split.outputs * split.phases
    merged = b.reshape(moved, grid)
    if grid == list(conv.array_shape.dims):
        return merged
    return b.slice(merged, [0] * len(grid), conv.array_shape.dims)


class ConvPhases:
    name = "conv_phases"

    def run(self, module) -> bool:
        return rewrite(module, [split_into_phases])
