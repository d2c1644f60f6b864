"""Sequence and optional values, and the ops on them.

A sequence is static in aotc: a `SequenceValue` is a tuple of instructions whose length is
known at compile time (a sequence input's length is part of the compile signature, see
`CompileOptions.input_structure`).  An optional holding nothing is `NO_VALUE`; an optional
holding something is that value itself, so tensor ops never see an optional wrapper.
Positions (SequenceAt's, SequenceInsert's...) must be compile-time constants.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import ModelError, ShapeError
from ...ir import DType, Instruction
from .dtypes import to_dtype
from .helpers import normalize_axis
from .registry import NodeContext, onnx_op


class SequenceValue(tuple):
    """An ONNX sequence of tensors: their instructions, in order."""

    def __repr__(self) -> str:
        return f"SequenceValue({list(self)!r})"


class NoValue:
    """The value of an optional that holds nothing."""

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE = NoValue()

# what a name in a graph's value table stands for
Value = Instruction | SequenceValue | NoValue


def as_sequence(value: Value | None, what: str) -> SequenceValue:
    if not isinstance(value, SequenceValue):
        raise ModelError(f"{what} must be a sequence, got {describe(value)}")
    return value


def as_tensor(value: Value | None, what: str) -> Instruction:
    if not isinstance(value, Instruction):
        raise ModelError(f"{what} must be a tensor, got {describe(value)}")
    return value


def describe(value: Value | None) -> str:
    if isinstance(value, SequenceValue):
        return f"a sequence of {len(value)} tensors"
    if value is None or value is NO_VALUE:
        return "no value"
    return f"a tensor {value.shape}"


def _position(ctx: NodeContext, index: int, length: int, default: int, end: bool) -> int:
    """Constant position input `index` (or `default`) in [-length, length) (] if `end`)."""
    values = ctx.const_ints(index)
    position = default if values is None else values[0]
    high = length if end else length - 1
    if not -length <= position <= high:
        raise ModelError(f"position {position} is out of range for a sequence of {length}")
    return position + length if position < 0 else position


def _same_dtype(items: Sequence[Instruction]) -> None:
    dtypes = {item.array_shape.dtype for item in items}
    if len(dtypes) > 1:
        raise ModelError(
            f"a sequence's tensors must share one type, got {sorted(map(str, dtypes))}"
        )


@onnx_op("SequenceEmpty", since=11)
def sequence_empty(ctx: NodeContext) -> SequenceValue:
    to_dtype(ctx.attr("dtype", 1), "attribute 'dtype'")  # refuse types aotc cannot hold
    return SequenceValue()


@onnx_op("SequenceConstruct", since=11)
def sequence_construct(ctx: NodeContext, *items: Value) -> SequenceValue:
    tensors = [as_tensor(item, f"input {i}") for i, item in enumerate(items)]
    _same_dtype(tensors)
    return SequenceValue(tensors)


@onnx_op("SequenceLength", since=11)
def sequence_length(ctx: NodeContext, seq: Value) -> Instruction:
    return ctx.b.scalar(len(as_sequence(seq, "input")), DType.S64)


@onnx_op("SequenceAt", since=11)
def sequence_at(ctx: NodeContext, seq: Value, position: Instruction) -> Instruction:
    items = as_sequence(seq, "input 'input_sequence'")
    return items[_position(ctx, 1, len(items), 0, end=False)]


@onnx_op("SequenceInsert", since=11)
def sequence_insert(ctx: NodeContext, seq: Value, tensor: Value, position=None) -> SequenceValue:
    items = list(as_sequence(seq, "input 'input_sequence'"))
    items.insert(_position(ctx, 2, len(items), len(items), end=True), as_tensor(tensor, "tensor"))
    _same_dtype(items)
    return SequenceValue(items)


@onnx_op("SequenceErase", since=11)
def sequence_erase(ctx: NodeContext, seq: Value, position=None) -> SequenceValue:
    items = list(as_sequence(seq, "input 'input_sequence'"))
    if not items:
        raise ModelError("cannot erase from an empty sequence")
    del items[_position(ctx, 1, len(items), -1, end=False)]
    return SequenceValue(items)


@onnx_op("SplitToSequence", since=11)
def split_to_sequence(ctx: NodeContext, x: Value, split=None) -> SequenceValue:
    x = as_tensor(x, "input")
    dims = x.array_shape.dims
    axis = normalize_axis(ctx.attr("axis", 0), len(dims))
    size = dims[axis]
    sizes = ctx.const_ints(1)
    if sizes is None:
        sizes = [1] * size
    elif ctx.const(1).ndim == 0:  # chunks of `split`, the last one possibly shorter
        if sizes[0] <= 0:
            raise ModelError(f"split {sizes[0]} must be positive")
        sizes = [min(sizes[0], size - start) for start in range(0, size, sizes[0])]
    if sum(sizes) != size or min(sizes, default=0) < 0:
        raise ShapeError(f"split {sizes} does not add up to dim {axis} of {list(dims)}")
    squeeze = split is None and not ctx.attr("keepdims", 1)
    items, start = [], 0
    for length in sizes:
        limits = [start + length if a == axis else d for a, d in enumerate(dims)]
        starts = [start if a == axis else 0 for a in range(len(dims))]
        piece = ctx.b.slice(x, starts, limits)
        if squeeze:
            piece = ctx.b.reshape(piece, dims[:axis] + dims[axis + 1 :])
        items.append(piece)
        start += length
    return SequenceValue(items)


@onnx_op("ConcatFromSequence", since=11)
def concat_from_sequence(ctx: NodeContext, seq: Value) -> Instruction:
    items = as_sequence(seq, "input")
    if not items:
        raise ModelError("cannot concatenate an empty sequence")
    rank = items[0].shape.rank
    if ctx.attr("new_axis", 0):
        axis = normalize_axis(ctx.required_attr("axis"), rank + 1)
        items = [
            ctx.b.reshape(item, item.shape.dims[:axis] + (1,) + item.shape.dims[axis:])
            for item in items
        ]
    else:
        axis = normalize_axis(ctx.required_attr("axis"), rank)
    return ctx.b.concatenate(items, axis)


@onnx_op("SequenceMap", since=17)
def sequence_map(ctx: NodeContext, seq: Value, *extra: Value) -> list[SequenceValue]:
    """The body applied to each position: extra sequences give their element, tensors
    themselves."""
    items = as_sequence(seq, "input 'input_sequence'")
    for i, value in enumerate(extra):
        if isinstance(value, SequenceValue) and len(value) != len(items):
            raise ModelError(
                f"additional input {i} has {len(value)} tensors, the sequence {len(items)}"
            )
    body = ctx.required_attr("body")
    results: list[list[Instruction]] = [[] for _ in body.output]
    for position, item in enumerate(items):
        args = [item] + [v[position] if isinstance(v, SequenceValue) else v for v in extra]
        for result, value in zip(results, ctx.lower_graph(body, args)):
            result.append(as_tensor(value, "a SequenceMap body output"))
    return [SequenceValue(result) for result in results]


@onnx_op("Optional", since=15)
def optional(ctx: NodeContext, value: Value | None = None) -> Value:
    return NO_VALUE if value is None else value


@onnx_op("OptionalHasElement", since=15)
def optional_has_element(ctx: NodeContext, value: Value | None = None) -> Instruction:
    return ctx.b.constant(np.array(value is not None and value is not NO_VALUE), DType.PRED)


@onnx_op("OptionalGetElement", since=15)
def optional_get_element(ctx: NodeContext, value: Value | None) -> Value:
    if value is None or value is NO_VALUE:
        raise ModelError("the optional input holds no value")
    return value
