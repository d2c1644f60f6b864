"""onnxruntime's fused normalizations, as its transformer optimizer writes them:
SkipLayerNormalization, SkipSimplifiedLayerNormalization and EmbedLayerNormalization
(com.microsoft), and the two it registers in the ONNX domain where onnx has no schema:
SimplifiedLayerNormalization (RMS normalization, onnx's RMSNormalization-23 before it
existed) and LayerNormalization before opset 17.  The math is norm.py's."""

from __future__ import annotations

from ...errors import ShapeError
from ...ir import Direction, DType, Instruction, Op
from .dtypes import to_dtype
from .helpers import binary, full, normalize_axis, reduce
from .norm import layer_norm_of, rms_norm_of, stashed
from .registry import MICROSOFT, NodeContext, lower_as_onnx, onnx_op

# onnxruntime's defaults: its fusions' epsilon (BERT's), and its ONNX-domain schemas'
FUSED_EPSILON = 1e-12
ONNX_EPSILON = 1e-5
# f16 inputs are normalized in f32, as onnxruntime's kernels do
STATS = DType.F32


def _check_vector(v: Instruction | None, hidden: int, what: str) -> None:
    if v is not None and v.array_shape.dims != (hidden,):
        raise ShapeError(f"{what} has shape {list(v.array_shape.dims)}, expected [{hidden}]")


def _skip_sum(ctx: NodeContext, x, skip, bias) -> Instruction:
    """input + skip (+ bias) in the statistics' precision; skip may lack the batch dim."""
    b = ctx.b
    if x.shape.rank not in (2, 3):
        raise ShapeError(
            f"input must be (batch, sequence, hidden) or (tokens, hidden), got {list(x.shape.dims)}"
        )
    if skip.shape.dims[-2:] != x.shape.dims[-2:] or skip.shape.rank > x.shape.rank:
        raise ShapeError(
            f"skip has shape {list(skip.shape.dims)}; its last two dims must be "
            f"input's {list(x.shape.dims[-2:])}"
        )
    terms = [stashed(b, v, STATS) for v in (x, skip, bias) if v is not None]
    total = binary(b, Op.ADD, terms[0], terms[1])
    return binary(b, Op.ADD, total, terms[2]) if bias is not None else total


def _skip_norm(ctx: NodeContext, x, skip, gamma, beta, bias, simplified: bool) -> list:
    """[output, mean, inv_std_var, input_skip_bias_sum]: the residual sum normalized over
    its last dim (RMS form: no mean)."""
    hidden = x.shape.dims[-1]
    for v, what in ((gamma, "gamma"), (beta, "beta"), (bias, "bias")):
        _check_vector(v, hidden, what)
    total = _skip_sum(ctx, x, skip, bias)
    epsilon, last = ctx.attr("epsilon", FUSED_EPSILON), x.shape.rank - 1
    if simplified:
        y, inv_std = rms_norm_of(ctx.b, total, gamma, last, epsilon, STATS)
        mean = None
    else:
        y, mean, inv_std = layer_norm_of(ctx.b, total, gamma, beta, last, epsilon, STATS)
    return [y, mean, inv_std, ctx.b.convert(total, x.shape.dtype)]


@onnx_op("SkipLayerNormalization", domain=MICROSOFT, since=1, arity=((3, 5), (1, 4)))
def skip_layer_norm(ctx: NodeContext, x, skip, gamma, beta=None, bias=None) -> list:
    return _skip_norm(ctx, x, skip, gamma, beta, bias, simplified=False)


@onnx_op("SkipSimplifiedLayerNormalization", domain=MICROSOFT, since=1, arity=((3, 4), (1, 4)))
def skip_simplified_layer_norm(ctx: NodeContext, x, skip, gamma, bias=None) -> list:
    return _skip_norm(ctx, x, skip, gamma, None, bias, simplified=True)


def _stash(ctx: NodeContext) -> DType:
    return to_dtype(ctx.attr("stash_type", 1), "stash_type")


# onnxruntime's ONNX-domain form (opset 1): scale's type may differ from x's, as in
# RMSNormalization-23, whose math it shares
@onnx_op("SimplifiedLayerNormalization", since=1, arity=((2, 2), (1, 2)))
def simplified_layer_norm(ctx: NodeContext, x: Instruction, scale: Instruction) -> list:
    axis = normalize_axis(ctx.attr("axis", -1), x.array_shape.rank)
    epsilon = ctx.attr("epsilon", ONNX_EPSILON)
    return list(rms_norm_of(ctx.b, x, scale, axis, epsilon, _stash(ctx)))


# what onnxruntime's optimizer writes into models of opsets before LayerNormalization-17
@onnx_op("LayerNormalization", since=1, until=16, arity=((2, 3), (1, 3)))
def layer_norm_before_17(ctx: NodeContext, x, scale, bias=None) -> list:
    axis = normalize_axis(ctx.attr("axis", -1), x.shape.rank)
    epsilon = ctx.attr("epsilon", ONNX_EPSILON)
    return list(layer_norm_of(ctx.b, x, scale, bias, axis, epsilon, _stash(ctx)))


def _embedding(ctx: NodeContext, table: Instruction, ids: Instruction) -> Instruction:
    """table[ids]: rows of an embedding table, by ONNX Gather."""
    if not ids.array_shape.dtype.is_int:
        raise ShapeError(f"ids must be integers, got {ids.array_shape.dtype.text}")
    if table.array_shape.rank != 2:
        raise ShapeError(f"embedding table must be 2-D, got {list(table.array_shape.dims)}")
    return lower_as_onnx(ctx, "Gather", 13, [table, ids], {"axis": 0})


def _positions(ctx: NodeContext, table: Instruction, position_ids, dims) -> Instruction:
    """The position embeddings of a (batch, sequence) grid: rows 0..S-1, or position_ids'."""
    b = ctx.b
    batch, sequence = dims
    hidden = table.array_shape.dims[-1]
    if position_ids is not None:
        if position_ids.shape.dims not in ((1, sequence), (batch, sequence)):
            raise ShapeError(
                f"position_ids has shape {list(position_ids.shape.dims)}, "
                f"expected [1, {sequence}] or [{batch}, {sequence}]"
            )
        rows = _embedding(ctx, table, position_ids)
        return b.broadcast_to(rows, (batch, sequence, hidden))
    if table.array_shape.dims[0] < sequence:
        raise ShapeError(
            f"position_embedding has {table.array_shape.dims[0]} rows, "
            f"fewer than the sequence length {sequence}"
        )
    rows = b.slice(table, [0, 0], [sequence, hidden])
    return b.broadcast(rows, [1, 2], (batch, sequence, hidden))


def _mask_index(ctx: NodeContext, mask: Instruction | None, dims) -> Instruction:
    """int32 (batch,): how many mask entries are 1 per sequence (zeros without a mask)."""
    b = ctx.b
    if mask is None:
        return full(b, 0, DType.S32, dims[:1])
    if mask.array_shape.dims != tuple(dims):
        raise ShapeError(f"mask has shape {list(mask.array_shape.dims)}, expected {list(dims)}")
    ones = b.compare(mask, full(b, 1, mask.array_shape.dtype, dims), Direction.EQ)
    counted = b.select(ones, full(b, 1, DType.S32, dims), full(b, 0, DType.S32, dims))
    return reduce(b, counted, Op.ADD, [1], keepdims=False)


@onnx_op("EmbedLayerNormalization", domain=MICROSOFT, since=1, arity=((7, 9), (1, 3)))
def embed_layer_norm(
    ctx: NodeContext,
    input_ids,
    segment_ids,
    word_embedding,
    position_embedding,
    segment_embedding,
    gamma,
    beta,
    mask=None,
    position_ids=None,
) -> list:
    """[output, mask_index, embedding_sum]: word + position (+ segment) embeddings,
    layer-normalized over the hidden dim.  mask_index_type does not change what
    onnxruntime's kernel computes, so it is not read."""
    b = ctx.b
    if input_ids.shape.rank != 2:
        raise ShapeError(f"input_ids must be (batch, sequence), got {list(input_ids.shape.dims)}")
    if (segment_ids is None) != (segment_embedding is None):
        raise ShapeError("segment_ids and segment_embedding come together or not at all")
    dims = input_ids.shape.dims
    hidden = word_embedding.shape.dims[-1]
    total = _embedding(ctx, word_embedding, input_ids)
    total = b.binary(Op.ADD, total, _positions(ctx, position_embedding, position_ids, dims))
    if segment_ids is not None:
        if segment_ids.shape.dims != dims:
            raise ShapeError(
                f"segment_ids has shape {list(segment_ids.shape.dims)}, expected {list(dims)}"
            )
        total = b.binary(Op.ADD, total, _embedding(ctx, segment_embedding, segment_ids))
    for v, what in ((gamma, "gamma"), (beta, "beta")):
        _check_vector(v, hidden, what)
    epsilon = ctx.attr("epsilon", FUSED_EPSILON)
    y, _, _ = layer_norm_of(b, total, gamma, beta, 2, epsilon, STATS)
    return [y, _mask_index(ctx, mask, dims), total]
