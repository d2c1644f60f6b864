"""Numeric ops of the ai.onnx.ml domain: Binarizer, ArrayFeatureExtractor and
LabelEncoder (numeric keys and values); the tree ensembles are in ml_tree_ops.py.

aotc has no string type, so string inputs, keys and values are refused.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import (
    ComputationBuilder,
    Direction,
    DType,
    GatherDims,
    Instruction,
    Op,
)
from .dtypes import tensor_to_array
from .helpers import Formula, full, full_like
from .registry import NodeContext, onnx_op

ML = "ai.onnx.ml"


@onnx_op("Binarizer", domain=ML, since=1)
def binarizer(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    threshold = ctx.attr("threshold")
    if not x.array_shape.dtype.is_float:
        threshold = math.floor(threshold)  # for integers, x > t exactly when x > floor(t)
    return f.where(x, Direction.GT, threshold, 1, 0)


def take_last(b: ComputationBuilder, x: Instruction, indices: Instruction) -> Instruction:
    """x[..., indices] for a (K,) integer index vector: shape x.dims[:-1] + (K,)."""
    rank = x.array_shape.rank
    dims = GatherDims(
        offset_dims=tuple(range(rank - 1)),
        collapsed_slice_dims=(rank - 1,),
        start_index_map=(rank - 1,),
        index_vector_dim=1,
        slice_sizes=(*x.array_shape.dims[:-1], 1),
    )
    return b.gather(x, b.reshape(indices, [indices.array_shape.size, 1]), dims)


def float_rows(b: ComputationBuilder, x: Instruction) -> Instruction:
    """x as float32 rows (N, features); a vector is one row, as onnxruntime reads it."""
    if x.array_shape.rank == 1:
        x = b.reshape(x, [1, x.array_shape.dims[0]])
    elif x.array_shape.rank != 2:
        raise ShapeError(f"input must be N x features or one row, got {list(x.array_shape.dims)}")
    return b.convert(x, DType.F32)


@onnx_op("ArrayFeatureExtractor", domain=ML, since=1)
def array_feature_extractor(ctx: NodeContext, x: Instruction, indices: Instruction):
    """x[..., indices] with the indices flattened; a vector is taken as one row."""
    b = ctx.b
    if indices.array_shape.dtype.is_float:
        raise ModelError("indices must be integers")
    if x.array_shape.rank == 1:
        x = b.reshape(x, [1, x.array_shape.dims[0]])
    flat = b.convert(b.reshape(indices, [indices.array_shape.size]), DType.S64)
    # negative indices count from the end, as numpy's
    size = full_like(b, x.array_shape.dims[-1], flat)
    negative = b.compare(flat, full_like(b, 0, flat), Direction.LT)
    flat = b.select(negative, b.binary(Op.ADD, flat, size), flat)
    return take_last(b, x, flat)


# -- LabelEncoder -----------------------------------------------------------------

# the list attributes that may hold a LabelEncoder's keys or values, and their types
LABEL_LISTS: dict[str, dict[str, DType]] = {
    "keys": {"keys_int64s": DType.S64, "keys_floats": DType.F32},
    "values": {"values_int64s": DType.S64, "values_floats": DType.F32},
}


def _label_list(ctx: NodeContext, role: str) -> tuple[np.ndarray, DType]:
    """The keys or values of a LabelEncoder, from the list or tensor attribute."""
    if ctx.attr(f"{role}_strings"):
        raise UnsupportedError(f"string {role} are not supported (aotc has no string type)")
    tensor = ctx.attr(f"{role}_tensor")
    if tensor is not None:
        return tensor_to_array(tensor, f"attribute '{role}_tensor'", ctx.arrays)
    for name, dtype in LABEL_LISTS[role].items():
        if ctx.attr(name):
            return np.asarray(ctx.attr(name), dtype=dtype.numpy), dtype
    raise ModelError(f"LabelEncoder has no {role}")


@onnx_op("LabelEncoder", domain=ML, since=2)
def label_encoder(ctx: NodeContext, x: Instruction) -> Instruction:
    """values[i] where x == keys[i] (the first such i), else the default."""
    b = ctx.b
    keys, key_dtype = _label_list(ctx, "keys")
    values, value_dtype = _label_list(ctx, "values")
    if keys.size != values.size:
        raise ModelError(f"{keys.size} keys but {values.size} values")
    if x.array_shape.dtype is not key_dtype:
        raise ModelError(
            f"input type {x.array_shape.dtype.text} differs from the keys' {key_dtype.text}"
        )
    if ctx.attr("default_tensor") is not None:
        tensor = ctx.attr("default_tensor")
        default, _ = tensor_to_array(tensor, "attribute 'default_tensor'", ctx.arrays)
        default = default.reshape(-1)[0]
    else:
        default = ctx.attr("default_float" if value_dtype.is_float else "default_int64")
    out = full(b, default, value_dtype, x.array_shape.dims)
    # the last select wins, so go backwards for the first matching key to win
    for key, value in reversed(list(zip(keys.reshape(-1), values.reshape(-1)))):
        if key_dtype.is_float and np.isnan(key):
            hit = b.compare(x, x, Direction.NE)  # a NaN key maps NaN inputs
        else:
            hit = b.compare(x, full_like(b, key, x), Direction.EQ)
        out = b.select(hit, full(b, value, value_dtype, x.array_shape.dims), out)
    return out
