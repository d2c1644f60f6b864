"""What a plan needs for its constant operands to be packed at compile time (prepack.py
puts the packed copies in the weights blob).

A constant operand read as a plain view has a `StridedLayout` (where its elements are);
its copy's `PackedShape` says how the panels are laid out (K slice by K slice, as
`PackedPanels` reads them), and `pack_operand` packs it with numpy.  Plans that read
GEMM-style operands are `Prepackable`; `use_packed` hands one the copies that the
plan's slices hold (under `packed_key`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from ...buffers import Blob, BufferKind, Slice
from ...ir import DType, Instruction
from .blocking import round_up
from .views import merged_stride


@dataclass(frozen=True)
class StridedLayout:
    """Where the elements of an operand read as `StridedPanels` are, for packing it at
    compile time: batch element `index` starts at `where` + sum(index[d] * stride for
    (d, stride) in `batch`) elements, its (p, k) p_stride * p + k_stride * k past it."""

    where: Slice
    batch: tuple[tuple[int, int], ...]  # (position in the GEMM's batch index, stride)
    p_stride: int
    k_stride: int


def is_constant(layout: StridedLayout | None) -> bool:
    """Whether an operand read through `layout` is a constant: one that prepack.py packs."""
    return layout is not None and layout.where.kind is BufferKind.CONSTANT


def strided_layout(view, p_dim: int, k_dims, batch=()) -> StridedLayout | None:
    """`view` read as a matrix with p along dim `p_dim` and k along `k_dims` merged
    (row-major), batch elements `batch` apart; None when those dims do not merge into
    one stride."""
    k_stride = merged_stride([view.dims[d] for d in k_dims], [view.strides[d] for d in k_dims])
    if k_stride is None:
        return None
    return StridedLayout(view.where, tuple(batch), view.strides[p_dim], k_stride)


@dataclass(frozen=True)
class PackedShape:
    """A pre-packed operand of a GEMM plan: for each of its batch elements (the GEMM
    batch positions `batch` select it), the `count` x `k` matrix as `PackedPanels`."""

    count: int
    k: int
    kc: int
    width: int
    batch: tuple[int, ...]
    extents: tuple[int, ...]
    transform: str = ""  # what the values went through before packing ("": none)
    paired_k: int = 0  # integer GEMM: the K values that the k pairs (or quads) hold
    quads: bool = False  # integer GEMM of 8-bit quads along k (quads.py), not pairs

    @property
    def padded(self) -> int:
        return round_up(self.count, self.width)

    @property
    def elements(self) -> int:
        return math.prod(self.extents) * self.padded * self.k


def pack_operand(values: np.ndarray, layout: StridedLayout, shape: PackedShape) -> np.ndarray:
    """The panels `PackedPanels` reads of each batch element of an operand whose buffer
    holds `values`: per K slice of kc, the count x kc matrix (zero rows up to `padded`)
    as panels of `width` rows, panel-major, then k, then the row in the panel."""
    strides = dict(layout.batch)
    rows = np.arange(shape.count)[:, None] * layout.p_stride
    depth = np.arange(shape.paired_k or shape.k)[None, :] * layout.k_stride
    out = []
    for element in itertools.product(*(range(e) for e in shape.extents)):
        start = sum(i * strides[d] for i, d in zip(element, shape.batch))
        found = values[start + rows + depth]
        if shape.paired_k:
            found = quad_matrix(found) if shape.quads else pair_matrix(found)
        matrix = np.zeros((shape.padded, shape.k), found.dtype)
        matrix[: shape.count] = found
        for k0 in range(0, shape.k, shape.kc):
            block = matrix[:, k0 : k0 + shape.kc]
            panels = block.reshape(-1, shape.width, block.shape[1]).transpose(0, 2, 1)
            out.append(panels.ravel())
    return np.concatenate(out)


def pair_matrix(matrix: np.ndarray) -> np.ndarray:
    """(count, K) integers of 16 bits -> (count, ceil(K / 2)) int32 pairs along k, the even
    k in the low half: the panel elements of an integer GEMM (pairs.py)."""
    halves = matrix.astype("<i2")
    if halves.shape[1] % 2:
        halves = np.pad(halves, ((0, 0), (0, 1)))
    return np.ascontiguousarray(halves).view("<i4")


def quad_matrix(matrix: np.ndarray) -> np.ndarray:
    """(count, K) 8-bit integers -> (count, ceil(K / 4)) int32 quads along k, k in the
    lowest byte: the panel elements of a byte-dot GEMM (quads.py)."""
    assert matrix.dtype.itemsize == 1, matrix.dtype
    pad = -matrix.shape[1] % 4
    if pad:
        matrix = np.pad(matrix, ((0, 0), (0, pad)))
    return np.ascontiguousarray(matrix).view("<i4")


def packed_key(kernel: Instruction, contraction: int, side: int) -> tuple:
    """The key in `BufferPlan.slices` of a pre-packed copy of operand `side` (0: A, 1: B)
    of contraction number `contraction` of `kernel` (set by prepack.py)."""
    return ("packed", id(kernel), contraction, side)


class Prepackable:
    """A plan that reads GEMM-style operands, which prepack.py may pack at compile time.

    It has `config`, `layouts` and `packed` (per side: A, B), `operands` (the
    contraction operand that each side reads) and `packed_shape(side)`;
    `PackedPanels` reads the copies.
    """

    layouts: tuple[StridedLayout | None, StridedLayout | None]

    def can_pack(self, side: int) -> bool:
        """Whether operand `side` (0: A, 1: B) is a constant that may be pre-packed."""
        return is_constant(self.layouts[side])

    @property
    def is_packed(self) -> tuple[bool, bool]:
        return self.packed[0] is not None, self.packed[1] is not None

    def source(self, side: int) -> DType:
        """The element type of operand `side` in memory."""
        return self.config.source

    def pack_constant(self, side: int, values: np.ndarray) -> np.ndarray:
        """The pre-packed copy of operand `side`, whose constant's elements are `values`."""
        return pack_operand(values, self.constant_layout(side), self.packed_shape(side))

    def constant_slices(self, side: int) -> tuple[Slice, ...]:
        """The constants that the copy of operand `side` is made from."""
        return (self.constant_layout(side).where,)

    def pack_weights(self, side: int, weights: Blob) -> bytes:
        """The pre-packed copy of operand `side` from the weights blob `weights`."""
        where = self.constant_layout(side).where
        values = constant_elements(weights, where, self.source(side).numpy)
        return self.pack_constant(side, values).tobytes()

    def constant_layout(self, side: int) -> StridedLayout:
        """Where the constant operand `side` is (one that `can_pack`)."""
        layout = self.layouts[side]
        assert layout is not None, "only a constant read as a plain view is pre-packed"
        return layout


def constant_elements(weights: Blob, where: Slice, dtype: np.dtype) -> np.ndarray:
    """The elements of constant slice `where` of the weights blob `weights`."""
    return np.frombuffer(weights.read(where.offset, where.size), dtype)


def use_packed(planned, slices: dict, kernel: Instruction, contraction: int):
    """`planned` reading the pre-packed copies of its operands that `slices` holds."""
    if not isinstance(planned, Prepackable):
        return planned
    found = tuple(slices.get(packed_key(kernel, contraction, side)) for side in (0, 1))
    return planned if found == (None, None) else replace(planned, packed=found)


# where a plan's copy will be, for `packed_workspace` (its place does not matter)
_TO_BE_PACKED = Slice(BufferKind.CONSTANT, 0, 0, 0)


def packed_workspace(plan) -> int:
    """The workspace `plan` needs once prepack.py has packed its constant operands: what
    a choice by the bytes free compares, the same before prepack.py runs (which plans on
    that choice) as after."""
    if isinstance(plan, Prepackable):
        packed = tuple(
            where if where is not None or not plan.can_pack(side) else _TO_BE_PACKED
            for side, where in enumerate(plan.packed)  # type: ignore[attr-defined]
        )
        plan = replace(plan, packed=packed)  # type: ignore[type-var]
    return plan.workspace_bytes
