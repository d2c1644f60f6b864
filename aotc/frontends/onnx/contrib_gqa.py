"""onnxruntime's GroupQueryAttention (domain com.microsoft), as LLaMA/Mistral/Phi exports
use it, run as its CPU kernel runs it: the first prompt, or decoding on a past buffer of
static length whose valid rows per batch entry come from seqlens_k at run time.

Each batch entry b has T[b] = seqlens_k[b] + 1 tokens after the step, P[b] = T[b] - S of
them from before (0 for the first prompt, told apart by S == total_sequence_length).
present holds past rows [0, P[b]), the new keys at [P[b], T[b]) and zeros after; its
length is max(total_sequence_length, past length), so total_sequence_length must be a
compile-time value.  Query row s sits at position P[b] + s: it sees keys up to there (and,
with local_window_size W > 0, the W last of them); RoPE rotates it by that position.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DotDims, DType, Instruction, Op, Shape
from .attention import cache_rows, merge_heads, position_masks, rotate, split_heads
from .contrib_attention import attend, default_scale, refuse_inputs
from .helpers import full
from .registry import MICROSOFT, NodeContext, onnx_op

NEG_INF = -np.inf
UNSUPPORTED_INPUTS = {
    9: "position_ids",
    10: "attention_bias",
    11: "head_sink",
    12: "k_scale (quantized cache)",
    13: "v_scale (quantized cache)",
    14: "q_norm_weight",
    15: "k_norm_weight",
    16: "query_seqlens",
}
# attribute -> the only value implemented
FIXED_ATTRIBUTES = {
    "causal": 1,
    "smooth_softmax": -1,
    "qk_output": 0,
    "sliding_window_cache": 0,
    "k_quant_type": "NONE",
    "v_quant_type": "NONE",
}


def _check_attributes(ctx: NodeContext) -> None:
    for name, value in FIXED_ATTRIBUTES.items():
        given = ctx.attr(name, value)
        # smooth_softmax: any value but 1 is off
        if given != value and not (name == "smooth_softmax" and given != 1):
            raise UnsupportedError(f"attribute {name}={given!r} is not supported (only {value!r})")


def _unpack(b: ComputationBuilder, query, key, value, heads: int, kv_heads: int):
    """Q (B, S, N*H), K and V (B, S, Nkv*H), from a packed (B, S, (N + 2 Nkv) H) query
    where key and value are omitted."""
    if (key is None) != (value is None):
        raise ModelError("key and value must be given together (or both omitted: packed QKV)")
    if key is not None:
        return query, key, value
    batch, seq, width = query.shape.dims
    if width % (heads + 2 * kv_heads):
        raise ShapeError(f"packed QKV width {width} is not (num_heads + 2 kv_num_heads) * H")
    size = width // (heads + 2 * kv_heads)
    bounds = np.cumsum([0, heads * size, kv_heads * size, kv_heads * size])
    return [b.slice(query, [0, 0, lo], [batch, seq, hi]) for lo, hi in itertools.pairwise(bounds)]


def _rope(ctx: NodeContext, x: Instruction, cos, sin, positions: Instruction) -> Instruction:
    """x (B, N, S, H) rotated at (B, S) positions, in float32."""
    b = ctx.b
    if cos is None or sin is None:
        raise ModelError("do_rotary=1 needs cos_cache and sin_cache")
    if cos.shape.rank != 2 or cos.shape != sin.shape:
        raise ShapeError(f"cos_cache {cos.shape} and sin_cache {sin.shape} must be one 2-D shape")
    wide = DType.F32
    rows = [b.convert(cache_rows(b, c, positions), wide) for c in (cos, sin)]
    seq_major = b.convert(b.transpose(x, [0, 2, 1, 3]), wide)
    rotary = 2 * cos.shape.dims[1]
    interleaved = bool(ctx.attr("rotary_interleaved", 0))
    rotated = rotate(b, seq_major, rows[0], rows[1], rotary, interleaved)
    return b.convert(b.transpose(rotated, [0, 2, 1, 3]), x.array_shape.dtype)


def _place(b: ComputationBuilder, past, new: Instruction, start, length: int) -> Instruction:
    """The present buffer (B, Nkv, length, H): past rows before start[b], new's S rows from
    start[b] on, zeros after; `start` is 0 or a runtime (B,) s64."""
    batch, _, seq, _ = new.array_shape.dims
    if not isinstance(start, Instruction):  # the first prompt: the new rows, then zeros
        return b.pad(new, b.scalar(0, new.array_shape.dtype), [0] * 4, [0, 0, length - seq, 0])
    # new row s lands at row start[b] + s: a one-hot (B, length, S) product moves it there
    dims = (batch, length, seq)
    rows = b.iota(Shape(DType.S64, dims), 1)
    target = b.binary(Op.ADD, b.iota(Shape(DType.S64, dims), 2), b.broadcast(start, [0], dims))
    one_hot = b.convert(b.compare(rows, target, Direction.EQ), new.array_shape.dtype)
    placed = b.dot(one_hot, new, DotDims((0,), (0,), (2,), (2,)))  # (B, length, Nkv, H)
    placed = b.transpose(placed, [0, 2, 1, 3])
    old = b.pad(
        past, b.scalar(0, past.shape.dtype), [0] * 4, [0, 0, length - past.shape.dims[2], 0]
    )
    dims = placed.array_shape.dims
    before = b.compare(
        b.iota(Shape(DType.S64, dims), 2), b.broadcast(start, [0], dims), Direction.LT
    )
    return b.select(before, b.convert(old, new.array_shape.dtype), placed)


@onnx_op("GroupQueryAttention", domain=MICROSOFT, since=1, arity=((7, 17), (1, 4)))
def group_query_attention(
    ctx: NodeContext,
    query,
    key,
    value,
    past_key,
    past_value,
    seqlens_k,
    total_length,
    cos=None,
    sin=None,
    *_rest,
):
    b = ctx.b
    refuse_inputs(ctx, UNSUPPORTED_INPUTS)
    _check_attributes(ctx)
    if ctx.output_used(3):
        raise UnsupportedError("the output_qk output is not supported")
    heads, kv_heads = ctx.required_attr("num_heads"), ctx.required_attr("kv_num_heads")
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise ModelError(f"num_heads {heads} is not a positive multiple of kv_num_heads {kv_heads}")
    if query.shape.rank != 3:
        raise ShapeError(f"query must be (batch, sequence, hidden), not {query.shape}")
    query, key, value = _unpack(b, query, key, value, heads, kv_heads)
    batch, seq, _ = query.shape.dims
    q = split_heads(b, query, heads)
    k, v = split_heads(b, key, kv_heads), split_heads(b, value, kv_heads)
    if key.array_shape.dims[:2] != (batch, seq) or k.array_shape.dims[3] != q.array_shape.dims[3]:
        raise ShapeError(f"key {key.shape} does not match query {query.shape}")
    if (past_key is None) != (past_value is None):
        raise ModelError("past_key and past_value must be given together")
    past_len = 0 if past_key is None else past_key.shape.dims[2]
    if past_key is not None and past_key.shape.dims != (
        *k.array_shape.dims[:2],
        past_len,
        k.array_shape.dims[3],
    ):
        raise ShapeError(f"past_key {past_key.shape} is not (B, kv_num_heads, P, head_size)")
    if seqlens_k.shape.dims != (batch,):
        raise ShapeError(f"seqlens_k {list(seqlens_k.shape.dims)} is not ({batch})")
    # it sizes present: a compile-time value
    total = int(ctx.value(total_length, "total_sequence_length").reshape(-1)[0])
    length = max(total, past_len)
    start: int | Instruction = 0  # P[b]: the first prompt has none
    if seq != total:
        if past_key is None:
            raise ModelError(f"sequence length {seq} != total_sequence_length {total} needs a past")
        ones = full(b, 1 - seq, DType.S64, (batch,))
        start = b.binary(Op.ADD, b.convert(seqlens_k, DType.S64), ones)
    if ctx.attr("do_rotary", 0):
        steps = b.iota(Shape(DType.S64, (batch, seq)), 1)
        positions = (
            steps
            if isinstance(start, int)
            else b.binary(Op.ADD, steps, b.broadcast(start, [0], (batch, seq)))
        )
        q, k = _rope(ctx, q, cos, sin, positions), _rope(ctx, k, cos, sin, positions)
    present_k = _place(b, past_key, k, start, length)
    present_v = _place(b, past_value, v, start, length)
    # a window of W keys, the query's own included (the kernel's rule)
    window = ctx.attr("local_window_size", -1)
    allowed = position_masks(
        b, start, seq, length, causal=True, left=window - 1 if window > 0 else -1
    )
    bias = None
    for mask in allowed:
        mask = b.reshape(
            mask, [mask.array_shape.dims[0] if mask.array_shape.rank == 3 else 1, 1, seq, length]
        )
        dims = mask.array_shape.dims
        term = b.select(mask, full(b, 0, DType.F32, dims), full(b, NEG_INF, DType.F32, dims))
        bias = term if bias is None else b.binary(Op.ADD, bias, term)
    scale = default_scale(ctx, q.array_shape.dims[3])
    out = attend(b, q, present_k, present_v, scale, bias, ctx.attr("softcap", 0.0), True)
    return [b.convert(merge_heads(b, out), query.shape.dtype), present_k, present_v, None]
