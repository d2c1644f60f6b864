"""Typed instruction attributes, one small frozen dataclass per family.

Frozen and made of tuples, so they compare and hash structurally (CSE keys).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


@dataclass(frozen=True)
class SliceSpec:
    """`slice={[start:limit:stride], ...}` per dimension."""

    starts: tuple[int, ...]
    limits: tuple[int, ...]
    strides: tuple[int, ...]

    def __post_init__(self):
        for field in ("starts", "limits", "strides"):
            object.__setattr__(self, field, _ints(getattr(self, field)))


@dataclass(frozen=True)
class PaddingConfig:
    """`padding=lo_hi_interior x ...`; low/high may be negative (cropping)."""

    low: tuple[int, ...]
    high: tuple[int, ...]
    interior: tuple[int, ...]

    def __post_init__(self):
        for field in ("low", "high", "interior"):
            object.__setattr__(self, field, _ints(getattr(self, field)))


@dataclass(frozen=True)
class Window:
    """Window of reduce-window and convolution, one entry per spatial dim."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_low: tuple[int, ...]
    pad_high: tuple[int, ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]

    def __post_init__(self):
        for field in ("size", "stride", "pad_low", "pad_high", "lhs_dilation", "rhs_dilation"):
            object.__setattr__(self, field, _ints(getattr(self, field)))

    @staticmethod
    def make(size, stride=None, pad_low=None, pad_high=None, lhs_dilation=None, rhs_dilation=None):
        """A window with defaults: stride/dilation 1, no padding."""
        n = len(size)
        return Window(
            tuple(size),
            tuple(stride or (1,) * n),
            tuple(pad_low or (0,) * n),
            tuple(pad_high or (0,) * n),
            tuple(lhs_dilation or (1,) * n),
            tuple(rhs_dilation or (1,) * n),
        )

    @property
    def rank(self) -> int:
        return len(self.size)

    def is_identity(self, dim: int) -> bool:
        """Whether the window leaves dim `dim` as it is: one element, stride 1, no
        padding or dilation."""
        return (
            self.size[dim],
            self.stride[dim],
            self.pad_low[dim],
            self.pad_high[dim],
            self.lhs_dilation[dim],
            self.rhs_dilation[dim],
        ) == (1, 1, 0, 0, 1, 1)


@dataclass(frozen=True)
class DotDims:
    """Dot dimension numbers (batch and contracting dims of each side)."""

    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]

    def __post_init__(self):
        for field in ("lhs_batch", "rhs_batch", "lhs_contracting", "rhs_contracting"):
            object.__setattr__(self, field, _ints(getattr(self, field)))


@dataclass(frozen=True)
class ConvDims:
    """Convolution dimension numbers (`dim_labels=b01f_01io->b01f` in text)."""

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]

    def __post_init__(self):
        for field in ("input_spatial", "kernel_spatial", "output_spatial"):
            object.__setattr__(self, field, _ints(getattr(self, field)))

    @staticmethod
    def nchw(spatial_rank: int) -> ConvDims:
        """ONNX layout: input NC(spatial), kernel OI(spatial), output NC(spatial)."""
        spatial = tuple(range(2, 2 + spatial_rank))
        return ConvDims(0, 1, spatial, 1, 0, spatial, 0, 1, spatial)

    @staticmethod
    def nhwc(spatial_rank: int) -> ConvDims:
        """Channels last (TensorFlow's, JAX's): input N(spatial)C, kernel (spatial)IO,
        output N(spatial)C."""
        spatial = tuple(range(1, 1 + spatial_rank))
        kernel = tuple(range(spatial_rank))
        last = spatial_rank + 1
        return ConvDims(0, last, spatial, spatial_rank, last, kernel, 0, last, spatial)


@dataclass(frozen=True)
class GatherDims:
    """XLA gather dimension numbers plus slice sizes."""

    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int
    slice_sizes: tuple[int, ...]
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()

    def __post_init__(self):
        for field in (
            "offset_dims",
            "collapsed_slice_dims",
            "start_index_map",
            "slice_sizes",
            "operand_batching_dims",
            "start_indices_batching_dims",
        ):
            object.__setattr__(self, field, _ints(getattr(self, field)))


@dataclass(frozen=True)
class ScatterDims:
    """XLA scatter dimension numbers (the window sizes come from the updates' dims)."""

    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int
    input_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()

    def __post_init__(self):
        for field in (
            "update_window_dims",
            "inserted_window_dims",
            "scatter_dims_to_operand_dims",
            "input_batching_dims",
            "scatter_indices_batching_dims",
        ):
            object.__setattr__(self, field, _ints(getattr(self, field)))


class FusionKind(enum.Enum):
    """What a fusion computes, in XLA's words: fusion_kinds.py works it out."""

    LOOP = "kLoop"
    INPUT = "kInput"
    OUTPUT = "kOutput"
    # fusions run as one kernel block by block (attention_chain.py); not an XLA kind
    CHAIN = "kChain"
