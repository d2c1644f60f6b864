"""Operands of special kernels read straight from memory: `View`s of buffers.

A value in a buffer (an entry value, or a fused parameter re-indexed by
transposes, broadcasts and reshapes inside a fusion) is a strided view of
that buffer; contraction.py's GEMM and depthwise plans and pooling read their
operands through views instead of element generators when they have one.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir

from ...buffers import BufferKind, BufferPlan, Slice
from ...ir import DType, Instruction, Op, Shape
from ..llvm.context import EmitContext
from ..llvm.lltypes import i64, storage_type

# A dim walked as mixed-radix digits: ((extent, stride), ...), outermost first.
Digits = tuple[tuple[int, int], ...]

# the ops `fused_view` follows: re-indexings that a strided view of their operand's
# buffer reads in place.  Not Trait.VIEW (no data movement at all): transpose
# and broadcast are here too, and get-tuple-element is not (fusion bodies hold arrays).
STRIDED_VIEW_OPS = frozenset({Op.TRANSPOSE, Op.BROADCAST, Op.RESHAPE, Op.BITCAST})


@dataclass(frozen=True)
class View:
    """An array in a buffer: element `index` at `where` + sum(index * strides) elements.

    A dim that a reshape made of dims with unrelated strides (a channel shuffle's
    reshape-transpose-reshape) has no single stride: its stride is None and
    `digits[dim]` walks it; `offset` handles both.  Plans that need plain strides
    take `affine(view)`.
    """

    where: Slice
    dims: tuple[int, ...]
    strides: tuple[int | None, ...]
    dtype: DType
    digits: tuple[Digits, ...] = ()  # per dim, set only when some stride is None

    @property
    def is_affine(self) -> bool:
        return None not in self.strides

    def dim_digits(self, dim: int) -> Digits:
        """Dim `dim` as (extent, stride) digits, outermost first."""
        if self.strides[dim] is not None:
            return ((self.dims[dim], self.strides[dim]),)
        return self.digits[dim]

    def offset(self, ctx: EmitContext, dim: int, position: ir.Value) -> ir.Value:
        """Elements from index 0 to `position` along `dim`."""
        b = ctx.builder
        if self.strides[dim] is not None:
            return b.mul(position, i64(self.strides[dim]))
        total, inner = i64(0), math.prod(e for e, _ in self.digits[dim])
        for extent, stride in self.digits[dim]:
            inner //= extent
            digit = b.udiv(position, i64(inner)) if inner > 1 else position
            if extent * inner != self.dims[dim]:  # not the outermost digit
                digit = b.urem(digit, i64(extent))
            total = b.add(total, b.mul(digit, i64(stride)))
        return total

    def pointer(self, ctx: EmitContext, offset: ir.Value | int = 0) -> ir.Value:
        """Address of the element `offset` elements past the view's start."""
        base = ctx.slice_pointer(self.where)
        if isinstance(offset, int):
            if offset == 0:
                return base
            offset = i64(offset)
        return ctx.builder.gep(base, [offset], source_etype=storage_type(self.dtype))


def affine(view: View | None) -> View | None:
    """`view` if every dim has one stride, else None (read through the generator)."""
    return view if view is not None and view.is_affine else None


def _row_major_strides(dims) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(dims):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def memory_view(plan: BufferPlan, operand: Instruction) -> View | None:
    """The row-major view of an entry value in its buffer (none for immediates)."""
    if not isinstance(operand.shape, Shape):
        return None
    if operand.op is Op.CONSTANT and operand.shape.size == 1:
        return None
    dims = operand.shape.dims
    return _make_view(plan.slice_of(operand), dims, _row_major_strides(dims), operand)


def _make_view(where: Slice, dims, strides, instr: Instruction, digits=()) -> View:
    return View(where, tuple(dims), tuple(strides), instr.array_shape.dtype, tuple(digits))


def fused_view(
    plan: BufferPlan,
    fusion: Instruction,
    instr: Instruction,
    operands: Sequence[Instruction | None] | None = None,
) -> View | None:
    """The memory view of `instr` inside `fusion`'s body, if it only re-indexes a
    fusion operand (parameter, transpose, broadcast, reshape).  `operands`: the entry
    values the fusion's operands are (default: themselves), None for one in no buffer
    (a fusion nested in a kChain fusion reads its parameters and its siblings)."""
    if operands is None:
        operands = fusion.operands
    steps: list[Instruction] = []  # the views from `instr` down to the parameter (no recursion)
    while instr.op is not Op.PARAMETER:
        if instr.op is not Op.SLICE and instr.op not in STRIDED_VIEW_OPS:
            return None
        steps.append(instr)
        instr = instr.operands[0]
    assert instr.index is not None  # the verifier's rule
    operand = operands[instr.index]
    view = None if operand is None else memory_view(plan, operand)
    for step in reversed(steps):
        if view is None:
            return None
        view = _sliced_view(view, step) if step.op is Op.SLICE else _strided_view(view, step)
    return view


def _strided_view(inner: View, instr: Instruction) -> View | None:
    """`inner` seen through a transpose, broadcast or reshape of it."""
    if instr.array_shape.dtype is not instr.operands[0].array_shape.dtype:
        return None
    dims = instr.array_shape.dims
    if instr.op is Op.TRANSPOSE:
        digits = [inner.dim_digits(d) for d in instr.dimensions]
    elif instr.op is Op.BROADCAST:
        digits = [((extent, 0),) for extent in dims]
        for source_dim, out_dim in enumerate(instr.dimensions):
            digits[out_dim] = inner.dim_digits(source_dim)
    else:
        found = _reshaped_digits(inner, dims)
        if found is None:
            return None
        digits = found
    strides = [_merged(d) for d in digits]
    kept = digits if None in strides else ()
    return _make_view(inner.where, dims, strides, instr, kept)


def _sliced_view(inner: View | None, instr: Instruction) -> View | None:
    """`inner` sliced: its start moved to the slice's first element, its strides times the
    slice's steps (YOLO's C2f convolutions read one half of a tensor's channels).
    Weights stay whole: prepacking knows constants by their slices."""
    dtype = instr.array_shape.dtype
    if inner is None or not inner.is_affine or inner.where.kind is BufferKind.CONSTANT:
        return None
    if dtype is not inner.dtype or dtype.bits % 8:
        return None
    spec = instr.slice
    assert spec is not None, instr.name  # the verifier's rule
    inner_strides = [stride for stride in inner.strides if stride is not None]  # affine
    start = sum(f * stride for f, stride in zip(spec.starts, inner_strides)) * (dtype.bits // 8)
    strides = [stride * step for stride, step in zip(inner_strides, spec.strides)]
    where = dataclasses.replace(
        inner.where, offset=inner.where.offset + start, size=inner.where.size - start
    )
    return _make_view(where, instr.array_shape.dims, strides, instr)


def _reshaped_digits(view: View, dims) -> list[Digits] | None:
    """The digits of each dim of `view` reshaped (row-major) to `dims`, or None when a
    new dim would cut across a digit unevenly."""
    queue = [d for dim in range(len(view.dims)) for d in view.dim_digits(dim) if d[0] != 1]
    result = []
    for extent in dims:
        taken, need = [], extent
        while need > 1:
            if not queue:
                return None
            digit_extent, stride = queue.pop(0)
            if digit_extent <= need:
                if need % digit_extent:
                    return None
                taken.append((digit_extent, stride))
                need //= digit_extent
            elif digit_extent % need == 0:  # the outer part of the digit; the rest stays
                rest = digit_extent // need
                taken.append((need, stride * rest))
                queue.insert(0, (rest, stride))
                need = 1
            else:
                return None
        result.append(tuple(taken) or ((1, 0),))
    return result if not queue else None


def merged_stride(extents, strides) -> int | None:
    """The stride of dims walked as one linear index (row-major order), if they merge
    (a dim without a single stride never does)."""
    pairs = [(e, s) for e, s in zip(extents, strides) if e != 1]
    for (_, outer), (extent, inner) in itertools.pairwise(pairs):
        if outer is None or inner is None or outer != inner * extent:
            return None
    return pairs[-1][1] if pairs else 1  # unit dims: any stride reads the same element


def _merged(digits: Digits) -> int | None:
    """One stride for the digits walked as a linear index, if they merge."""
    return merged_stride([e for e, _ in digits], [s for _, s in digits])
