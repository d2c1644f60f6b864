"""Attention-family ops: Attention (opsets 23-25), RotaryEmbedding, LinearAttention,
FlexAttention, SwiGLU, CausalConvWithState.

All are compositions of HLO dot (heads as batch dims), elementwise formulas, and
iota-built masks; recurrences (LinearAttention) are unrolled over the static
sequence length.  Numerics follow the ONNX spec and onnx.reference step by step
(including where the reference casts to the input precision).
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import (
    ComputationBuilder,
    ConvDims,
    Direction,
    DotDims,
    DType,
    GatherDims,
    Instruction,
    Op,
    Shape,
    Window,
)
from .dtypes import to_dtype
from .helpers import Formula, binary, full, reduce, unidirectional
from .registry import NodeContext, onnx_op

NEG_INF = -np.inf


# -- shared pieces -------------------------------------------------------------


def split_heads(b: ComputationBuilder, x: Instruction, heads: int) -> Instruction:
    """(B, S, H*D) -> (B, H, S, D)."""
    batch, seq, hidden = x.array_shape.dims
    if heads <= 0 or hidden % heads:
        raise ShapeError(f"hidden size {hidden} is not a multiple of {heads} heads")
    x = b.reshape(x, [batch, seq, heads, hidden // heads])
    return b.transpose(x, [0, 2, 1, 3])


def merge_heads(b: ComputationBuilder, x: Instruction) -> Instruction:
    """(B, H, S, D) -> (B, S, H*D)."""
    batch, heads, seq, size = x.array_shape.dims
    return b.reshape(b.transpose(x, [0, 2, 1, 3]), [batch, seq, heads * size])


def grouped_dot(b: ComputationBuilder, lhs: Instruction, rhs: Instruction, rhs_k: int):
    """lhs (B, Hq, M, K) times rhs (B, Hkv, K|N, ...) per head, where each rhs head
    serves Hq / Hkv consecutive lhs heads (GQA's interleaved repeat, without copying):
    the lhs is seen as (B, Hkv, Hq/Hkv * M, K).  `rhs_k` is rhs's contracting dim."""
    batch, q_heads, m, _ = lhs.array_shape.dims
    kv_heads = rhs.array_shape.dims[1]
    if kv_heads <= 0 or q_heads % kv_heads:
        raise ShapeError(f"{q_heads} query heads are not a multiple of {kv_heads} kv heads")
    grouped = b.reshape(lhs, [batch, kv_heads, q_heads // kv_heads * m, lhs.array_shape.dims[3]])
    out = b.dot(grouped, rhs, DotDims((0, 1), (0, 1), (3,), (rhs_k,)))
    return b.reshape(out, [batch, q_heads, m, out.array_shape.dims[3]])


def softmax_last(b: ComputationBuilder, x: Instruction, masked_rows: bool) -> Instruction:
    """exp(x - max) / sum over the last axis.  With `masked_rows`, an all -inf row gives
    zeros, not NaN (onnx.reference's Attention softmax: such a row's max is taken as 0
    and its zero sum as 1)."""
    f = Formula(b, x)
    axis = [x.array_shape.rank - 1]
    peak = b.broadcast_to(reduce(b, x, Op.MAXIMUM, axis, keepdims=True), x.array_shape.dims)
    if masked_rows:
        peak = f.where(peak, Direction.EQ, NEG_INF, 0, peak)
    exp = f.f(Op.EXP, b.binary(Op.SUBTRACT, x, peak))
    total = b.broadcast_to(reduce(b, exp, Op.ADD, axis, keepdims=True), x.array_shape.dims)
    if masked_rows:
        total = f.where(total, Direction.EQ, 0, 1, total)
    return b.binary(Op.DIVIDE, exp, total)


def sqrt_scale(b: ComputationBuilder, x: Instruction, scale: float) -> Instruction:
    """x * sqrt(scale), the factor rounded to x's dtype first (as the reference)."""
    return Formula(b, x).mul(x, float(np.sqrt(np.float64(scale))))


# -- Attention -------------------------------------------------------------------


def _allowed_bias(
    b: ComputationBuilder, allowed: Instruction, dtype: DType, per_batch: bool = False
) -> Instruction:
    """0 where allowed, -inf elsewhere.  A per-batch (B, q, kv) mask becomes
    (B, 1, q, kv), so that a rank-3 attn_mask keeps meaning (heads, q, kv)."""
    dims = allowed.array_shape.dims
    bias = b.select(allowed, full(b, 0, dtype, dims), full(b, NEG_INF, dtype, dims))
    if per_batch:
        bias = b.reshape(bias, [dims[0], 1, dims[1], dims[2]])
    return bias


def _mask_bias(
    b: ComputationBuilder, mask: Instruction, dtype: DType, q_len: int, kv_len: int
) -> Instruction:
    """attn_mask as an additive bias of at least (q, kv): a short key axis is padded
    with False / -inf, a boolean mask becomes 0 / -inf."""
    missing = kv_len - mask.array_shape.dims[-1]
    if missing < 0:
        raise ShapeError(f"attn_mask covers {mask.array_shape.dims[-1]} keys, there are {kv_len}")
    if missing:
        fill = False if mask.array_shape.dtype is DType.PRED else NEG_INF
        rank = mask.array_shape.rank
        value = b.scalar(fill, mask.array_shape.dtype)
        mask = b.pad(mask, value, [0] * rank, [0] * (rank - 1) + [missing])
    if mask.array_shape.dtype is DType.PRED:
        mask = _allowed_bias(b, mask, dtype, per_batch=False)
    return binary(b, Op.ADD, full(b, 0, dtype, (q_len, kv_len)), b.convert(mask, dtype))


def _position_masks(ctx: NodeContext, offset: int | Instruction, q_len: int, kv_len: int):
    """Attention-23's causal and sliding-window masks (its is_causal, left_window_size and
    right_window_size attributes): see position_masks."""
    causal = bool(ctx.attr("is_causal"))
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    return position_masks(ctx.b, offset, q_len, kv_len, causal, left, right)


def position_masks(
    b: ComputationBuilder,
    offset: int | Instruction,
    q_len: int,
    kv_len: int,
    causal: bool,
    left: int = -1,
    right: int = -1,
) -> list[Instruction]:
    """The causal and sliding-window `allowed` masks, (q, kv) or (B, q, kv): query i sits at
    absolute position i + offset (a per-batch (B,) s64 offset for an external cache) and
    key j at j; a window of `left` (`right`) < 0 is unbounded."""
    if not causal and left < 0 and right < 0:
        return []
    dims = (q_len, kv_len)
    i, j = b.iota(Shape(DType.S64, dims), 0), b.iota(Shape(DType.S64, dims), 1)
    if isinstance(offset, Instruction):
        dims = (offset.array_shape.dims[0], *dims)
        i = b.binary(Op.ADD, b.broadcast(i, [1, 2], dims), b.broadcast(offset, [0], dims))
        j = b.broadcast(j, [1, 2], dims)
    elif offset:
        i = Formula(b, i).add(i, offset)
    f = Formula(b, i)
    allowed = []
    if causal:  # j <= i
        allowed.append(b.compare(j, i, Direction.LE))
    if left >= 0:  # i - j <= left
        allowed.append(b.compare(f.add(j, left), i, Direction.GE))
    if right >= 0:  # j - i <= right
        allowed.append(b.compare(j, f.add(i, right), Direction.LE))
    return allowed


def _attention_bias(
    ctx: NodeContext, mask, nonpad, past_len: int, dtype: DType, q_len: int, kv_len: int
) -> Instruction | None:
    """The additive bias of the scores (None if nothing masks), composed like the
    reference: attn_mask + causal + sliding window + key padding."""
    b = ctx.b
    terms = [] if mask is None else [_mask_bias(b, mask, dtype, q_len, kv_len)]
    # the causal frontier and the window are offset by the keys before the query block
    offset: int | Instruction = past_len
    if nonpad is not None:
        offset = b.binary(Op.SUBTRACT, nonpad, full(b, q_len, DType.S64, nonpad.shape.dims))
    for allowed in _position_masks(ctx, offset, q_len, kv_len):
        terms.append(_allowed_bias(b, allowed, dtype, per_batch=allowed.shape.rank == 3))
    if nonpad is not None:
        dims = (nonpad.shape.dims[0], kv_len)
        keys = b.iota(Shape(DType.S64, dims), 1)
        valid = b.compare(keys, b.broadcast(nonpad, [0], dims), Direction.LT)
        terms.append(b.reshape(_allowed_bias(b, valid, dtype), [dims[0], 1, 1, kv_len]))
    bias = terms[0] if terms else None
    for term in terms[1:]:
        bias = binary(b, Op.ADD, bias, term)
    return bias


@onnx_op("Attention", since=23)
def attention(ctx: NodeContext, q, k, v, mask=None, past_key=None, past_value=None, nonpad=None):
    b = ctx.b
    if (past_key is None) != (past_value is None):
        raise ModelError("past_key and past_value must be given together")
    if nonpad is not None and past_key is not None:
        raise ModelError("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    if not q.shape.rank == k.shape.rank == v.shape.rank:
        raise ShapeError("Q, K and V must have one rank")
    dtype = q.shape.dtype
    rank = q.shape.rank
    if rank == 3:
        q_heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
        if q_heads is None or kv_heads is None:
            raise ModelError("3-D inputs need the q_num_heads and kv_num_heads attributes")
        q = split_heads(b, q, q_heads)
        k, v = split_heads(b, k, kv_heads), split_heads(b, v, kv_heads)
    elif rank != 4:
        raise ShapeError(f"Q, K and V must be 3-D or 4-D, not {rank}-D")
    scale = ctx.attr("scale")
    if scale is None:
        scale = 1 / np.sqrt(q.shape.dims[3])
    if past_key is not None:
        k = b.concatenate([b.convert(past_key, dtype), k], 2)
        v = b.concatenate([b.convert(past_value, v.shape.dtype), v], 2)
    present_key, present_value = k, v
    q_len, kv_len = q.shape.dims[2], k.shape.dims[2]
    past_len = past_key.shape.dims[2] if past_key is not None else 0
    bias = _attention_bias(ctx, mask, nonpad, past_len, dtype, q_len, kv_len)

    k_scaled = sqrt_scale(b, k, scale)
    raw = grouped_dot(b, sqrt_scale(b, q, scale), k_scaled, 3)
    scores = raw
    softcap = ctx.attr("softcap", 0.0)
    if softcap > 0:
        f = Formula(b, scores)
        scores = f.mul(f.f(Op.TANH, f.div(scores, softcap)), softcap)
    capped = scores
    if bias is not None:
        scores = b.binary(Op.ADD, scores, unidirectional(b, bias, scores.shape.dims))
    with_bias = scores
    precision = ctx.attr("softmax_precision")
    if precision is not None:
        scores = b.convert(scores, to_dtype(precision, "softmax_precision"))
    probs = softmax_last(b, scores, masked_rows=True)
    if bias is not None:
        # a row whose bias is all -inf attends nothing: zeros, even where the scores
        # are NaN (decided on the bias, as the spec says)
        row = reduce(b, bias, Op.MAXIMUM, [bias.array_shape.rank - 1], keepdims=True)
        dead = b.compare(row, full(b, NEG_INF, dtype, row.array_shape.dims), Direction.EQ)
        dead = unidirectional(b, dead, probs.array_shape.dims)
        probs = b.select(dead, full(b, 0, probs.array_shape.dtype, probs.array_shape.dims), probs)
    probs = b.convert(probs, dtype)
    y = grouped_dot(b, probs, b.convert(v, dtype), 2)
    if rank == 3:
        y = merge_heads(b, y)
    mode = ctx.attr("qk_matmul_output_mode", 0)
    # mode 0 is the raw product (the spec and function body; onnx.reference returns
    # the softcapped one there)
    qk_outputs = {0: raw, 1: capped, 2: with_bias, 3: probs}
    if mode not in qk_outputs:
        raise ModelError(f"qk_matmul_output_mode={mode} is not one of 0, 1, 2, 3")
    return [y, present_key, present_value, b.convert(qk_outputs[mode], dtype)]


# -- FlexAttention (ai.onnx.preview) -----------------------------------------------

# the softmax dtype when softmax_precision is not given: at least float32
FLEX_COMPUTE = {DType.F16: DType.F32, DType.BF16: DType.F32}


def _mod_graph(ctx: NodeContext, name: str, x: Instruction) -> Instruction:
    """Apply the graph attribute `name` (score_mod / prob_mod) to x, if it is given."""
    graph = ctx.attr(name)
    if graph is None:
        return x
    if ctx.lower_graph is None:
        raise UnsupportedError(f"the {name} graph cannot be lowered here")
    outputs = ctx.lower_graph(graph, [x])
    if len(outputs) != 1 or not isinstance(outputs[0], Instruction):
        raise ModelError(f"the {name} graph must have exactly one tensor output")
    out = outputs[0]
    if out.array_shape.dims != x.array_shape.dims:
        raise ShapeError(f"the {name} graph changes the shape {list(x.array_shape.dims)}")
    return ctx.b.convert(out, x.array_shape.dtype)


@onnx_op("FlexAttention", since=1, domain="ai.onnx.preview")
def flex_attention(ctx: NodeContext, q: Instruction, k: Instruction, v: Instruction):
    b = ctx.b
    if not q.array_shape.rank == k.array_shape.rank == v.array_shape.rank == 4:
        raise ShapeError("FlexAttention needs 4-D Q, K and V")
    dtype = q.array_shape.dtype
    scale = ctx.attr("scale")
    if scale is None:
        scale = 1 / np.sqrt(q.array_shape.dims[3])
    # the factor is computed in float32 here (Attention uses double)
    factor = float(np.sqrt(np.float32(scale)))
    f = Formula(b, q)
    scores = grouped_dot(b, f.mul(q, factor), Formula(b, k).mul(k, factor), 3)
    precision = ctx.attr("softmax_precision")
    compute = FLEX_COMPUTE.get(dtype, dtype)
    if precision is not None:
        compute = to_dtype(precision, "softmax_precision")
    scores = _mod_graph(ctx, "score_mod", b.convert(scores, compute))
    probs = _mod_graph(ctx, "prob_mod", softmax_last(b, scores, masked_rows=False))
    out = grouped_dot(b, probs, b.convert(v, compute), 2)
    return b.convert(out, v.array_shape.dtype)


# -- RotaryEmbedding, SwiGLU, CausalConvWithState ----------------------------------


def cache_rows(b: ComputationBuilder, cache: Instruction, positions: Instruction):
    """cache[positions]: rows of a (P, D/2) cache at (B, S) positions -> (B, S, D/2)."""
    half = cache.array_shape.dims[1]
    dims = GatherDims((2,), (0,), (0,), 2, (1, half))
    return b.gather(cache, b.convert(positions, DType.S64), dims)


@onnx_op("RotaryEmbedding", since=23)
def rotary_embedding(ctx: NodeContext, x, cos, sin, positions=None) -> Instruction:
    b = ctx.b
    rank = x.shape.rank
    if rank == 4:  # (B, H, S, D) -> (B, S, H, D)
        x = b.transpose(x, [0, 2, 1, 3])
    elif rank == 3:
        heads = ctx.attr("num_heads")
        if not heads:
            raise ModelError("a 3-D input needs the num_heads attribute")
        batch, seq, hidden = x.shape.dims
        if hidden % heads:
            raise ShapeError(f"hidden size {hidden} is not a multiple of {heads} heads")
        x = b.reshape(x, [batch, seq, heads, hidden // heads])
    else:
        raise ShapeError(f"input must be 3-D or 4-D, not {rank}-D")
    batch, seq, heads, size = x.shape.dims
    if positions is not None:
        cos, sin = cache_rows(b, cos, positions), cache_rows(b, sin, positions)
    if cos.shape.rank != 3 or sin.shape.rank != 3:
        raise ShapeError("cos/sin caches must be (B, S, D/2), or (P, D/2) with position_ids")
    rotary = ctx.attr("rotary_embedding_dim") or size
    rotated = rotate(b, x, cos, sin, rotary, bool(ctx.attr("interleaved")))
    if rank == 3:
        return b.reshape(rotated, [batch, seq, heads * size])
    return b.transpose(rotated, [0, 2, 1, 3])


def rotate(
    b: ComputationBuilder,
    x: Instruction,
    cos: Instruction,
    sin: Instruction,
    rotary: int,
    interleaved: bool,
) -> Instruction:
    """RoPE on x (B, S, H, D): its first `rotary` features rotated by the angles whose
    cos/sin are (B or 1, S, rotary/2), as (real, imag) pairs that are interleaved or the
    two halves; the features past `rotary` pass through."""
    batch, seq, heads, size = x.array_shape.dims
    if rotary % 2 or not 0 < rotary <= size:
        raise ModelError(f"rotary_embedding_dim {rotary} is not even and at most {size}")
    half = rotary // 2
    # (B, S, D/2) -> (B, S, H, D/2); a cache of batch 1 serves every batch (numpy rules)
    dims = (batch, seq, heads, half)
    cos, sin = (
        unidirectional(b, b.reshape(c, [*c.array_shape.dims[:2], 1, c.array_shape.dims[2]]), dims)
        for c in (cos, sin)
    )
    start, stop = [0, 0, 0, 0], [batch, seq, heads]
    if interleaved:
        x1 = b.slice(x, start, [*stop, rotary], [1, 1, 1, 2])
        x2 = b.slice(x, [0, 0, 0, 1], [*stop, rotary], [1, 1, 1, 2])
    else:
        x1 = b.slice(x, start, [*stop, half])
        x2 = b.slice(x, [0, 0, 0, half], [*stop, rotary])
    f = Formula(b, x1)
    real = b.binary(Op.SUBTRACT, f.mul(cos, x1), f.mul(sin, x2))
    imag = f.add(f.mul(sin, x1), f.mul(cos, x2))
    if interleaved:
        pairs = [b.reshape(r, [*dims, 1]) for r in (real, imag)]
        rotated = b.reshape(b.concatenate(pairs, 4), [*stop, rotary])
    else:
        rotated = b.concatenate([real, imag], 3)
    if rotary < size:
        rotated = b.concatenate([rotated, b.slice(x, [0, 0, 0, rotary], [*stop, size])], 3)
    return rotated


def _swish(f: Formula, x: Instruction, alpha: float) -> Instruction:
    """x * sigmoid(alpha x)."""
    return f.mul(x, f.f(Op.LOGISTIC, f.mul(x, alpha)))


@onnx_op("SwiGLU", since=28)
def swiglu(ctx: NodeContext, gate: Instruction, value: Instruction) -> Instruction:
    if gate.shape != value.shape:
        raise ShapeError(f"A {gate.shape} and B {value.shape} must have one shape and type")
    f = Formula(ctx.b, gate)
    return f.mul(_swish(f, gate, ctx.attr("alpha", 1.0)), value)


@onnx_op("CausalConvWithState", since=27)
def causal_conv_with_state(ctx: NodeContext, x, weight, bias=None, past=None):
    b = ctx.b
    activation = ctx.choice("activation", ("none", "silu", "swish"))
    if x.shape.rank != 3 or weight.shape.rank != 3:
        raise ShapeError("input must be (B, C, L) and weight (C, 1, k)")
    batch, channels, length = x.shape.dims
    width = weight.shape.dims[2]
    if weight.shape.dims[:2] != (channels, 1):
        raise ShapeError(f"weight {list(weight.shape.dims)} is not ({channels}, 1, k)")
    state_dims = (batch, channels, width - 1)
    if past is None:
        past = full(b, 0, x.shape.dtype, state_dims)
    elif past.shape.dims != state_dims:
        raise ShapeError(f"past_state {list(past.shape.dims)} is not {list(state_dims)}")
    padded = b.concatenate([past, x], 2) if width > 1 else x
    # depthwise: one group per channel, no padding (the state is the left context)
    out = b.convolution(padded, weight, Window.make([width]), ConvDims.nchw(1), groups=channels)
    if bias is not None:
        out = b.binary(Op.ADD, out, b.broadcast(bias, [1], out.array_shape.dims))
    if activation != "none":  # SiLU in float32, as the reference
        wide = b.convert(out, DType.F32) if out.array_shape.dtype.bits < 32 else out
        out = b.convert(_swish(Formula(b, wide), wide, 1.0), out.array_shape.dtype)
    total = length + width - 1
    present = b.slice(padded, [0, 0, length], [batch, channels, total])
    return [out, present]


# -- LinearAttention ---------------------------------------------------------------

UPDATE_RULES = {  # rule -> (gated by decay, delta-corrected by beta)
    "linear": (False, False),
    "gated": (True, False),
    "delta": (False, True),
    "gated_delta": (True, True),
}
# the recurrence is unrolled over the sequence, a few dozen instructions a step
MAX_LINEAR_ATTENTION_STEPS = 512


def _per_head_steps(b: ComputationBuilder, x: Instruction, heads: int, what: str):
    """A (B, T, H) or (B, T, H*D) input as float32 (B, H, T, 1 or D)."""
    batch, steps, last = x.array_shape.dims
    if last % heads:
        raise ShapeError(f"{what}'s last dim {last} is not a multiple of {heads} heads")
    x = b.reshape(b.convert(x, DType.F32), [batch, steps, heads, last // heads])
    return b.transpose(x, [0, 2, 1, 3])


def _step(b: ComputationBuilder, x: Instruction, t: int) -> Instruction:
    """x[:, :, t, :] of a (B, H, T, D) array: (B, H, D)."""
    batch, heads, _, size = x.array_shape.dims
    return b.reshape(b.slice(x, [0, 0, t, 0], [batch, heads, t + 1, size]), [batch, heads, size])


@onnx_op("LinearAttention", since=27)
def linear_attention(ctx: NodeContext, q, k, v, past=None, decay=None, beta=None):
    b = ctx.b
    rule = ctx.choice("update_rule", tuple(UPDATE_RULES))
    gated, delta = UPDATE_RULES[rule]
    for needed, value, name in ((gated, decay, "decay"), (delta, beta, "beta")):
        if needed != (value is not None):
            verb = "needs" if needed else "takes no"
            raise ModelError(f"update_rule '{rule}' {verb} the {name} input")
    q_heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if q_heads is None or kv_heads is None:
        raise ModelError("the q_num_heads and kv_num_heads attributes are required")
    if any(x.shape.rank != 3 for x in (q, k, v)):
        raise ShapeError("query, key and value must be (B, T, H*D)")
    batch, steps, _ = q.shape.dims
    if steps > MAX_LINEAR_ATTENTION_STEPS:
        raise UnsupportedError(
            f"sequence length {steps} > {MAX_LINEAR_ATTENTION_STEPS}: the recurrence is "
            "unrolled per token; split the sequence into shorter calls carrying the state"
        )
    q4 = _per_head_steps(b, q, q_heads, "query")
    k4, v4 = _per_head_steps(b, k, kv_heads, "key"), _per_head_steps(b, v, kv_heads, "value")
    d_k, d_v = k4.shape.dims[3], v4.shape.dims[3]
    state_dims = (batch, kv_heads, d_k, d_v)
    if past is None:
        state = full(b, 0, DType.F32, state_dims)
    elif past.shape.dims != state_dims:
        raise ShapeError(f"past_state {list(past.shape.dims)} is not {list(state_dims)}")
    else:
        state = b.convert(past, DType.F32)
    scale = ctx.attr("scale", 0.0) or 1 / np.sqrt(q4.shape.dims[3])
    if decay is not None:
        decay = b.unary(Op.EXP, _per_head_steps(b, decay, kv_heads, "decay"))
    if beta is not None:
        beta = _per_head_steps(b, beta, beta.shape.dims[2], "beta")
    outputs = []
    for t in range(steps):
        if decay is not None:  # S *= exp(g_t), per head or per key dim
            g_t = b.reshape(_step(b, decay, t), [batch, kv_heads, decay.shape.dims[3], 1])
            state = b.binary(Op.MULTIPLY, state, b.broadcast_to(g_t, state_dims))
        k_t, v_t = _step(b, k4, t), _step(b, v4, t)
        if beta is not None:  # v_t <- beta_t (v_t - S^T k_t)
            read = b.dot(state, k_t, DotDims((0, 1), (0, 1), (2,), (2,)))
            beta_t = b.broadcast_to(_step(b, beta, t), v_t.array_shape.dims)
            v_t = b.binary(Op.MULTIPLY, beta_t, b.binary(Op.SUBTRACT, v_t, read))
        outer = b.dot(
            b.reshape(k_t, [batch, kv_heads, d_k, 1]),
            b.reshape(v_t, [batch, kv_heads, 1, d_v]),
            DotDims((0, 1), (0, 1), (3,), (2,)),
        )
        state = b.binary(Op.ADD, state, outer)
        q_t = b.reshape(_step(b, q4, t), [batch, q_heads, 1, d_k])
        outputs.append(grouped_dot(b, q_t, state, 2))  # (B, Hq, 1, d_v)
    out = b.concatenate(outputs, 2)
    out = merge_heads(b, Formula(b, out).mul(out, float(scale)))
    state_dtype = past.shape.dtype if past is not None else q.shape.dtype
    return [b.convert(out, q.shape.dtype), b.convert(state, state_dtype)]
