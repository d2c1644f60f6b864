"""onnxruntime's contrib attention ops (domain com.microsoft), as its transformer optimizer
writes them into BERT/GPT exports: RotaryEmbedding, MultiHeadAttention and the fused
BERT-style Attention (GroupQueryAttention: contrib_gqa.py).

Numerics follow onnxruntime's CPU kernels: scores = scale * Q K^T + attention_bias + mask,
where a masked key adds mask_filter_value (finite: a fully masked row still averages) and
a causal mask replaces it with float32's lowest; softmax and products run in float32
(float16 inputs are widened).  The heads, RoPE and causal masks are attention.py's.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DotDims, DType, Instruction, Op, Shape
from .attention import (
    cache_rows,
    grouped_dot,
    merge_heads,
    position_masks,
    rotate,
    softmax_last,
    split_heads,
)
from .helpers import Formula, binary, full, unidirectional
from .registry import MICROSOFT, NodeContext, onnx_op

# float16/bfloat16 are computed in float32, as the CPU kernels do
WIDE = {DType.F16: DType.F32, DType.BF16: DType.F32}
# what onnxruntime's causal mask writes (std::numeric_limits<float>::lowest())
F32_LOWEST = float(np.finfo(np.float32).min)


# -- shared pieces -------------------------------------------------------------------


def widen(b: ComputationBuilder, x: Instruction) -> Instruction:
    return b.convert(x, WIDE.get(x.array_shape.dtype, x.array_shape.dtype))


def attend(
    b: ComputationBuilder,
    q: Instruction,
    k: Instruction,
    v: Instruction,
    scale: float,
    bias: Instruction | None = None,
    softcap: float = 0.0,
    masked_rows: bool = False,
) -> Instruction:
    """softmax(scale q k^T (softcapped) + bias) v in the compute dtype: q (B, N, S, H),
    k and v (B, Nkv, T, H) with each kv head serving N / Nkv consecutive q heads, bias
    broadcasting to (B, N, S, T).  `masked_rows`: an all -inf row gives zeros."""
    q, k, v = widen(b, q), widen(b, k), widen(b, v)
    scores = grouped_dot(b, q, k, 3)
    f = Formula(b, scores)
    scores = f.mul(scores, float(np.float32(scale)))
    if softcap > 0:
        scores = f.mul(f.f(Op.TANH, f.div(scores, softcap)), softcap)
    if bias is not None:
        scores = b.binary(
            Op.ADD,
            scores,
            unidirectional(b, b.convert(bias, scores.array_shape.dtype), scores.array_shape.dims),
        )
    return grouped_dot(b, softmax_last(b, scores, masked_rows), v, 2)


def default_scale(ctx: NodeContext, head_size: int) -> float:
    """The scale attribute; 0 (its default) means 1/sqrt(head_size)."""
    scale = ctx.attr("scale", 0.0)
    return scale if scale != 0 else 1 / np.sqrt(np.float32(head_size))


def _keys_in(b: ComputationBuilder, dims: tuple[int, int], lo, hi) -> Instruction:
    """(B, T) pred: lo[b] <= key < hi[b], for (B,) bounds (None: unbounded)."""
    keys = b.iota(Shape(DType.S32, dims), 1)
    allowed = None
    for bound, direction in ((lo, Direction.GE), (hi, Direction.LT)):
        if bound is None:
            continue
        test = b.compare(keys, b.broadcast(b.convert(bound, DType.S32), [0], dims), direction)
        allowed = test if allowed is None else b.binary(Op.AND, allowed, test)
    return allowed


def key_mask_allowed(
    b: ComputationBuilder, mask: Instruction, batch: int, q_len: int, total: int, starts: bool
) -> Instruction:
    """The CPU kernels' mask_index forms as a (B, 1 or S, T) `allowed` pred: (B) key
    lengths, (2B) end then start positions (with `starts`), (B, T) or (B, S, T) 0/1."""
    dims = mask.array_shape.dims
    if dims == (batch,):
        return b.reshape(_keys_in(b, (batch, total), None, mask), [batch, 1, total])
    if starts and dims == (2 * batch,):
        ends = b.slice(mask, [0], [batch])
        begins = b.slice(mask, [batch], [2 * batch])
        return b.reshape(_keys_in(b, (batch, total), begins, ends), [batch, 1, total])
    if dims in ((batch, total), (batch, q_len, total)):
        zero = full(b, 0, mask.array_shape.dtype, dims)
        allowed = b.compare(mask, zero, Direction.GT)
        return b.reshape(allowed, [batch, 1, total]) if len(dims) == 2 else allowed
    if len(dims) == 1 and dims[0] == 3 * batch + 2:
        raise UnsupportedError("a (3 * batch + 2) mask_index (packed lengths) is not supported")
    if len(dims) == 4:
        raise UnsupportedError("a 4-D mask_index (Megatron) is not supported")
    raise ShapeError(
        f"mask {list(dims)} is none of ({batch}), ({batch}, {total}), ({batch}, {q_len}, {total})"
        + (f", ({2 * batch})" if starts else "")
    )


def ort_mask_bias(
    ctx: NodeContext,
    mask: Instruction | None,
    batch: int,
    q_len: int,
    past_len: int,
    total: int,
    starts: bool,
) -> Instruction | None:
    """The CPU kernels' additive float32 mask, (B, 1, S, T), or None: mask_filter_value
    where mask_index masks, float's lowest where `unidirectional` hides a key after the
    query's position past_len + i (only with more than one query)."""
    b = ctx.b
    causal = bool(ctx.attr("unidirectional", 0)) and q_len > 1
    if mask is None and not causal:
        return None
    dims = (batch, q_len, total)
    bias = full(b, 0, DType.F32, (batch, 1, total))
    if mask is not None:
        allowed = key_mask_allowed(b, mask, batch, q_len, total, starts)
        filler = full(
            b, ctx.attr("mask_filter_value", -10000.0), DType.F32, allowed.array_shape.dims
        )
        bias = b.select(allowed, full(b, 0, DType.F32, allowed.array_shape.dims), filler)
    bias = b.broadcast_to(bias, dims)
    if causal:
        (allowed,) = position_masks(b, past_len, q_len, total, causal=True)
        # the kernel leaves the last query row unmasked: all keys when K/V outrun the query
        last = b.iota(Shape(DType.S32, allowed.array_shape.dims), 0)
        last = b.compare(last, full(b, q_len - 1, DType.S32, last.array_shape.dims), Direction.EQ)
        allowed = b.broadcast(b.binary(Op.OR, allowed, last), [1, 2], dims)
        bias = b.select(allowed, bias, full(b, F32_LOWEST, DType.F32, dims))
    return b.reshape(bias, [batch, 1, q_len, total])


def _sum_bias(b: ComputationBuilder, *terms: Instruction | None) -> Instruction | None:
    present = [t for t in terms if t is not None]
    if not present:
        return None
    total = b.convert(present[0], DType.F32)
    for term in present[1:]:
        total = binary(b, Op.ADD, total, b.convert(term, DType.F32))
    return total


def _check_attention_bias(
    bias: Instruction | None, batch: int, heads: int, q_len: int, total: int
) -> None:
    if bias is None:
        return
    dims = bias.array_shape.dims
    ok = len(dims) == 4 and dims[0] in (1, batch) and dims[1] in (1, heads)
    if not ok or dims[2:] != (q_len, total):
        raise ShapeError(
            f"attention_bias {list(dims)} is not ({batch} or 1, {heads} or 1, {q_len}, {total})"
        )


def refuse_inputs(ctx: NodeContext, names: dict[int, str]) -> None:
    """Refuse optional inputs (index -> name) this lowering does not implement."""
    for index, name in names.items():
        if index < len(ctx.inputs) and ctx.inputs[index] is not None:
            raise UnsupportedError(f"the {name} input is not supported")


# -- RotaryEmbedding -----------------------------------------------------------------


@onnx_op("RotaryEmbedding", domain=MICROSOFT, since=1, arity=((4, 4), (1, 1)))
def ms_rotary_embedding(ctx: NodeContext, x, positions, cos, sin) -> Instruction:
    """RotaryEmbedding-23's rotation; the caches are always (max_seq, rotary/2) rows, picked
    by (B, S) position_ids or, for a one-element position_ids, rows p, p+1, ...; with
    rotary_embedding_dim 0, the head size is twice the cache width."""
    b = ctx.b
    if ctx.attr("is_packed_batching", 0):
        raise UnsupportedError("is_packed_batching=1 (ragged batches) is not supported")
    if cos.shape.rank != 2 or cos.shape != sin.shape:
        raise ShapeError(f"cos_cache {cos.shape} and sin_cache {sin.shape} must be one 2-D shape")
    rotary = ctx.attr("rotary_embedding_dim", 0)
    heads = ctx.attr("num_heads", 0)
    if rotary > 0 and heads <= 0:
        raise ModelError("rotary_embedding_dim needs the num_heads attribute")
    rank = x.shape.rank
    if rank == 4:  # (B, N, S, H)
        batch, heads, seq, size = x.shape.dims
        x = b.transpose(x, [0, 2, 1, 3])
    elif rank == 3:
        batch, seq, hidden = x.shape.dims
        size = hidden // heads if rotary > 0 else 2 * cos.shape.dims[1]
        if size <= 0 or hidden % size:
            raise ShapeError(f"hidden size {hidden} is not a multiple of head size {size}")
        heads = hidden // size
        x = b.reshape(x, [batch, seq, heads, size])
    else:
        raise ShapeError(f"input must be 3-D or 4-D, not {rank}-D")
    rotary = rotary or size
    if cos.shape.dims[1] != rotary // 2:
        raise ShapeError(
            f"cos_cache width {cos.shape.dims[1]} is not rotary dim / 2 = {rotary // 2}"
        )
    if positions.shape.dims not in ((), (1,), (batch, seq)):
        raise ShapeError(
            f"position_ids {list(positions.shape.dims)} is not (1) or ({batch}, {seq})"
        )
    if positions.shape.dims != (batch, seq):  # a start position: rows start, start + 1, ...
        steps = b.iota(Shape(positions.shape.dtype, (1, seq)), 1)
        positions = binary(b, Op.ADD, b.reshape(positions, [1, 1]), steps)
    cos, sin = cache_rows(b, cos, positions), cache_rows(b, sin, positions)
    rotated = rotate(
        b, widen(b, x), widen(b, cos), widen(b, sin), rotary, bool(ctx.attr("interleaved", 0))
    )
    rotated = b.convert(rotated, x.shape.dtype)
    if rank == 3:
        return b.reshape(rotated, [batch, seq, heads * size])
    return b.transpose(rotated, [0, 2, 1, 3])


# -- MultiHeadAttention --------------------------------------------------------------


def _add_bias_part(
    b: ComputationBuilder, x: Instruction, bias: Instruction | None, start: int
) -> Instruction:
    """x (B, S, D) + bias[start:start + D]."""
    if bias is None:
        return x
    size = x.array_shape.dims[2]
    return binary(b, Op.ADD, x, b.slice(bias, [start], [start + size]))


@onnx_op("MultiHeadAttention", domain=MICROSOFT, since=1, arity=((1, 10), (1, 4)))
def multi_head_attention(
    ctx: NodeContext,
    query,
    key=None,
    value=None,
    bias=None,
    key_padding_mask=None,
    attention_bias=None,
    past_key=None,
    past_value=None,
    *_rest,
):
    """Separate Q (B, S, D) and K/V (B, L, D) projections with optional bias and past, or
    K/V already split into heads (B, N, L, H) (no bias, no past)."""
    b = ctx.b
    refuse_inputs(ctx, {8: "past_sequence_length (shared buffer)", 9: "cache_indirection"})
    if ctx.output_used(3):
        raise UnsupportedError("the qk output is not supported")
    heads = ctx.required_attr("num_heads")
    if query.shape.rank == 5:
        raise UnsupportedError("packed QKV (a 5-D query) is not supported")
    if key is None or value is None:
        raise UnsupportedError("a missing key/value (packed QKV) is not supported")
    if key.shape.rank == 5:
        raise UnsupportedError("packed KV (a 5-D key) is not supported")
    if query.shape.rank != 3:
        raise ShapeError(f"query must be (batch, sequence, hidden), not {query.shape}")
    if (past_key is None) != (past_value is None):
        raise ModelError("past_key and past_value must be given together")
    batch, q_len, hidden = query.shape.dims
    q = split_heads(b, _add_bias_part(b, query, bias, 0), heads)
    if key.shape.rank == 4 and value.shape.rank == 4:  # already (B, N, L, H)
        if bias is not None or past_key is not None:
            raise UnsupportedError("key/value split into heads take no bias and no past")
        if key.shape.dims[:2] != (batch, heads) or key.shape.dims[3] != hidden // heads:
            raise ShapeError(
                f"key {list(key.shape.dims)} is not ({batch}, {heads}, L, {hidden // heads})"
            )
        k, v = key, value
    elif key.shape.rank == 3 and value.shape.rank == 3:
        k = split_heads(b, _add_bias_part(b, key, bias, hidden), heads)
        v = split_heads(b, _add_bias_part(b, value, bias, 2 * hidden), heads)
    else:
        raise ShapeError(f"key {key.shape} and value {value.shape} must be both 3-D or 4-D")
    past_len = 0
    if past_key is not None:
        past_len = past_key.shape.dims[2]
        k, v = b.concatenate([past_key, k], 2), b.concatenate([past_value, v], 2)
    total = k.shape.dims[2]
    _check_attention_bias(attention_bias, batch, heads, q_len, total)
    mask = ort_mask_bias(ctx, key_padding_mask, batch, q_len, past_len, total, starts=False)
    out = attend(
        b, q, k, v, default_scale(ctx, q.array_shape.dims[3]), _sum_bias(b, attention_bias, mask)
    )
    return [b.convert(merge_heads(b, out), query.shape.dtype), k, v, None]


# -- Attention (BERT's fused op) -----------------------------------------------------


def _qkv_sizes(ctx: NodeContext, width: int, heads: int) -> list[int]:
    sizes = ctx.attr("qkv_hidden_sizes")
    if sizes is None:
        if width % 3:
            raise ShapeError(f"weights width {width} is not 3 * hidden (set qkv_hidden_sizes)")
        sizes = [width // 3] * 3
    sizes = [int(s) for s in sizes]
    if len(sizes) != 3 or sum(sizes) != width or sizes[0] != sizes[1]:
        raise ModelError(f"qkv_hidden_sizes {sizes} are not (D, D, Dv) summing to {width}")
    if any(s <= 0 or s % heads for s in sizes):
        raise ModelError(f"qkv_hidden_sizes {sizes} are not positive multiples of {heads} heads")
    return sizes


@onnx_op("Attention", domain=MICROSOFT, since=1, arity=((2, 7), (1, 2)))
def ms_attention(
    ctx: NodeContext,
    x,
    weights,
    bias=None,
    mask_index=None,
    past=None,
    attention_bias=None,
    past_sequence_length=None,
):
    """QKV = x W + bias, split into heads, then the CPU kernel's masked attention; past and
    present stack K and V: (2, B, N, T, H)."""
    b = ctx.b
    if ctx.attr("past_present_share_buffer", 0) or past_sequence_length is not None:
        raise UnsupportedError("past_present_share_buffer (past_sequence_length) is not supported")
    if ctx.attr("do_rotary", 0):
        raise UnsupportedError("do_rotary=1 is not supported (the CPU kernel has no rotary)")
    heads = ctx.required_attr("num_heads")
    if x.shape.rank != 3 or weights.shape.rank != 2 or weights.shape.dims[0] != x.shape.dims[2]:
        raise ShapeError(
            f"input {x.shape} and weights {weights.shape} are not (B, S, Din), (Din, *)"
        )
    batch, q_len, _ = x.shape.dims
    sizes = _qkv_sizes(ctx, weights.shape.dims[1], heads)
    qkv = b.dot(widen(b, x), widen(b, weights), DotDims((), (), (2,), (0,)))
    if bias is not None:
        qkv = binary(b, Op.ADD, qkv, widen(b, bias))
    starts = itertools.pairwise(np.cumsum([0, *sizes]))
    q, k, v = (
        split_heads(b, b.slice(qkv, [0, 0, lo], [batch, q_len, hi]), heads) for lo, hi in starts
    )
    past_len = 0
    if past is not None:
        if sizes[1] != sizes[2]:
            raise ShapeError("a past needs Q, K and V of one hidden size")
        dims = (2, *k.array_shape.dims[:2], past.array_shape.dims[3], k.array_shape.dims[3])
        if past.shape.rank != 5 or past.shape.dims != dims:
            raise ShapeError(f"past {list(past.shape.dims)} is not (2, B, N, P, H)")
        past_len = past.shape.dims[3]
        past_k, past_v = (
            b.reshape(b.slice(past, [i, 0, 0, 0, 0], [i + 1, *dims[1:]]), dims[1:]) for i in (0, 1)
        )
        k = b.concatenate([widen(b, past_k), k], 2)
        v = b.concatenate([widen(b, past_v), v], 2)
    total = k.array_shape.dims[2]
    _check_attention_bias(attention_bias, batch, heads, q_len, total)
    mask = ort_mask_bias(ctx, mask_index, batch, q_len, past_len, total, starts=True)
    out = attend(
        b, q, k, v, default_scale(ctx, q.array_shape.dims[3]), _sum_bias(b, attention_bias, mask)
    )
    present = None
    if ctx.output_used(1):
        stacked = b.concatenate([b.reshape(t, [1, *t.array_shape.dims]) for t in (k, v)], 0)
        present = b.convert(stacked, x.shape.dtype)
    return [b.convert(merge_heads(b, out), x.shape.dtype), present]
