"""Random ops: RandomUniform, RandomNormal (and their -Like forms), Bernoulli,
Multinomial, and Dropout's training-mode mask.

Their bits are Philox4x32-10 (`ir.random_bits.philox_bits`, the generator XLA and
cuRAND use), keyed by the node's `seed` attribute, or by a hash of the node's
first output name where it has none.  The counter is the draw's own
`rng-get-and-update-state`: 0 on the first run after the program is loaded, then
advanced past the numbers each run used.  So every run draws afresh, as in
onnxruntime, and a seeded model repeats the same sequence of runs each time it
is loaded.  Two nodes with the same seed draw the same stream, as in
onnxruntime, where each seeded kernel owns a generator.
"""

from __future__ import annotations

import struct
import zlib

from ...errors import ModelError, ShapeError
from ...ir import ComputationBuilder, Direction, DType, Instruction, Op
from ...ir.random_bits import normal, uniform
from .dtypes import to_dtype
from .helpers import Formula, full_like, reduce
from .indexing import cumulative
from .registry import NodeContext, onnx_op


def generator_key(ctx: NodeContext) -> int:
    """The Philox key: the seed's float bits, else a hash of the node's output name."""
    seed = ctx.attr("seed")
    if seed is not None:
        return struct.unpack("<I", struct.pack("<f", float(seed)))[0]
    return zlib.crc32(ctx.node.output[0].encode()) | 1 << 32


def _output_dtype(ctx: NodeContext, like: Instruction | None) -> DType:
    """The `dtype` attribute, else the input's type (the -Like ops), else float32."""
    elem = ctx.attr("dtype")
    if elem is not None:
        return to_dtype(elem, "attribute 'dtype'")
    return like.array_shape.dtype if like is not None else DType.F32


def _affine(b: ComputationBuilder, x: Instruction, scale: float, shift: float) -> Instruction:
    f = Formula(b, x)
    return f.add(f.mul(x, scale), shift)


def _uniform_node(ctx: NodeContext, dims, like=None) -> Instruction:
    low, high = ctx.attr("low"), ctx.attr("high")
    unit = uniform(ctx.b, generator_key(ctx), _output_dtype(ctx, like), dims)
    return _affine(ctx.b, unit, high - low, low)


def _normal_node(ctx: NodeContext, dims, like=None) -> Instruction:
    z = normal(ctx.b, generator_key(ctx), _output_dtype(ctx, like), dims)
    return _affine(ctx.b, z, ctx.attr("scale"), ctx.attr("mean"))


@onnx_op("RandomUniform")
def random_uniform(ctx: NodeContext) -> Instruction:
    return _uniform_node(ctx, ctx.required_attr("shape"))


@onnx_op("RandomNormal")
def random_normal(ctx: NodeContext) -> Instruction:
    return _normal_node(ctx, ctx.required_attr("shape"))


@onnx_op("RandomUniformLike")
def random_uniform_like(ctx: NodeContext, x: Instruction) -> Instruction:
    return _uniform_node(ctx, x.array_shape.dims, like=x)


@onnx_op("RandomNormalLike")
def random_normal_like(ctx: NodeContext, x: Instruction) -> Instruction:
    return _normal_node(ctx, x.array_shape.dims, like=x)


@onnx_op("Bernoulli", since=15)
def bernoulli(ctx: NodeContext, p: Instruction) -> Instruction:
    """1 where a uniform draw falls below the element's probability, else 0."""
    b = ctx.b
    if not p.array_shape.dtype.is_float:
        raise ModelError(f"probabilities must be floats, got {p.array_shape.dtype.text}")
    draws = uniform(b, generator_key(ctx), p.array_shape.dtype, p.array_shape.dims)
    hit = b.compare(draws, p, Direction.LT)
    return b.convert(hit, _output_dtype(ctx, p))


@onnx_op("Multinomial", since=7)
def multinomial(ctx: NodeContext, logits: Instruction) -> Instruction:
    """`sample_size` class indices per row, drawn from softmax(logits) by inverting its
    cumulative distribution: the count of classes whose running sum lies at or below
    u * total."""
    b = ctx.b
    if logits.array_shape.rank != 2 or not logits.array_shape.dtype.is_float:
        raise ShapeError(f"input must be float [batch, classes], got {logits.shape}")
    batch, classes = logits.array_shape.dims
    samples = ctx.attr("sample_size")
    out_dtype = to_dtype(ctx.attr("dtype"), "attribute 'dtype'")
    if out_dtype not in (DType.S32, DType.S64):
        raise ModelError(f"dtype must be int32 or int64, got {out_dtype.text}")
    f = Formula(b, logits)
    peak = b.broadcast_to(
        reduce(b, logits, Op.MAXIMUM, [1], keepdims=True), logits.array_shape.dims
    )
    cdf = cumulative(b, f.f(Op.EXP, f.sub(logits, peak)), 1, Op.ADD, exclusive=False, reverse=False)
    total = b.slice(cdf, [0, classes - 1], [batch, classes])  # (batch, 1)
    draws = uniform(b, generator_key(ctx), logits.array_shape.dtype, (batch, samples))
    threshold = b.binary(
        Op.MULTIPLY, draws, b.broadcast(b.reshape(total, [batch]), [0], draws.array_shape.dims)
    )
    dims3 = (batch, samples, classes)
    below = b.compare(
        b.broadcast(cdf, [0, 2], dims3), b.broadcast(threshold, [0, 1], dims3), Direction.LE
    )
    count = reduce(b, b.convert(below, out_dtype), Op.ADD, [2], keepdims=False)
    # u * total rounds up to total at worst: never past the last class
    return Formula(b, count).min(count, classes - 1)


def dropout_mask(ctx: NodeContext, x: Instruction, ratio: float) -> Instruction:
    """Training-mode Dropout's keep mask: true with probability 1 - ratio."""
    b = ctx.b
    draws = uniform(b, generator_key(ctx), x.array_shape.dtype, x.array_shape.dims)
    return b.compare(draws, full_like(b, ratio, draws), Direction.GE)
