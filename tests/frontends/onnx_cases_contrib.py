"""onnxruntime's contrib ops (domain com.microsoft), as its transformer optimizer and
quantization tools write them into exported models; onnxruntime is the oracle."""

from __future__ import annotations

import numpy as np
from onnx import helper
from onnx_case_kit import (
    CaseList,
    Const,
    In,
    OnnxCase,
    f32,
    graph_case,
    ints,
    ort_reference,
)

MS = "com.microsoft"


def contrib_case(name: str, op: str, inputs: dict, attrs: dict | None = None, outputs=("y",),
                 consts: dict | None = None, **extra) -> OnnxCase:  # fmt: skip
    """One com.microsoft node over runtime `inputs` and constant `consts` (name -> array),
    in that input order, compared with onnxruntime."""
    names = list(inputs) + list(consts or {})
    node = helper.make_node(op, names, list(outputs), domain=MS, **(attrs or {}))
    return graph_case(name, [node], inputs, consts, outputs, domains={MS: 1},
                      reference=ort_reference, **extra)  # fmt: skip


def _activations(cases: CaseList) -> None:
    x = f32(2, 3, 8, low=-4, high=4)
    bias = f32(8)
    cases.add(contrib_case("ms_gelu", "Gelu", {"x": x}))
    cases.add(contrib_case("ms_bias_gelu", "BiasGelu", {"x": x}, consts={"bias": bias}))
    cases.add(contrib_case("ms_fast_gelu", "FastGelu", {"x": x}))
    cases.add(contrib_case("ms_fast_gelu_bias", "FastGelu", {"x": x}, consts={"bias": bias}))
    cases.add(contrib_case("ms_quick_gelu", "QuickGelu", {"x": x}, {"alpha": 1.5}))


def ms_case(name: str, op: str, args: list, attrs: dict | None = None, outputs: int = 1,
            **extra) -> OnnxCase:  # fmt: skip
    """One com.microsoft node over In/Const/None `args` in its input order (None: an
    omitted optional input), compared with onnxruntime."""
    inputs, consts, names = {}, {}, []
    for i, arg in enumerate(args):
        names.append("" if arg is None else f"x{i}")
        if arg is not None:
            (inputs if isinstance(arg, In) else consts)[f"x{i}"] = arg.value
    out_names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, out_names, domain=MS, **(attrs or {}))
    return graph_case(name, [node], inputs, consts, out_names, domains={MS: 1},
                      reference=ort_reference, **extra)  # fmt: skip


def _half(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


HALF_TOL = {"rtol": 3e-3, "atol": 3e-3}


def _rotary_cases(cases: CaseList) -> None:
    x3, x4 = f32(2, 4, 16), f32(2, 2, 4, 8)
    angles = np.outer(np.arange(8), 1.0 / 10000 ** (np.arange(4) / 4)).astype(np.float32)
    cos, sin = Const(np.cos(angles)), Const(np.sin(angles))
    positions = In(ints(2, 4, low=0, high=8))
    start = In(np.array([3], np.int64))
    for name, x, pos, attrs in (
        ("ms_rotary", x3, positions, {}),
        ("ms_rotary_start_interleaved", x3, start, {"interleaved": 1}),
        ("ms_rotary_4d", x4, positions, {}),
    ):
        cases.add(ms_case(name, "RotaryEmbedding", [In(x), pos, cos, sin], attrs))
    half_angles = angles[:, :2]
    partial = [In(x3), start, Const(np.cos(half_angles)), Const(np.sin(half_angles))]
    cases.add(ms_case("ms_rotary_partial", "RotaryEmbedding", partial,
                      {"rotary_embedding_dim": 4, "num_heads": 2}))  # fmt: skip
    halves = [In(_half(x3)), positions, Const(_half(np.cos(angles))), Const(_half(np.sin(angles)))]
    cases.add(ms_case("ms_rotary_f16", "RotaryEmbedding", halves, {"interleaved": 1}, **HALF_TOL))


def _mha_cases(cases: CaseList) -> None:
    q, kv = f32(2, 4, 16), f32(2, 5, 16)
    heads = {"num_heads": 2}
    cases.add(ms_case("ms_mha_cross", "MultiHeadAttention", [In(q), In(kv), In(f32(2, 5, 16))],
                      heads))  # fmt: skip
    lengths = In(np.array([3, 5], np.int32))
    args = [In(q), In(kv), In(kv), Const(f32(48)), lengths]
    cases.add(ms_case("ms_mha_bias_key_lengths", "MultiHeadAttention", args,
                      {**heads, "scale": 0.3}))  # fmt: skip
    mask2d = In(np.array([[1, 1, 0, 1, 1], [0, 1, 1, 1, 0]], np.int32))
    args = [In(q), In(kv), In(kv), None, mask2d, In(f32(1, 2, 4, 5))]
    cases.add(ms_case("ms_mha_mask2d_attention_bias", "MultiHeadAttention", args,
                      {**heads, "mask_filter_value": -500.0}))  # fmt: skip
    x, past = f32(2, 3, 16), f32(2, 2, 2, 8)
    mask3d = In(ints(2, 3, 5, low=0, high=2, dtype=np.int32))
    args = [In(x), In(f32(2, 3, 16)), In(f32(2, 3, 16)), Const(f32(48)), mask3d, None, In(past),
            In(f32(2, 2, 2, 8))]  # fmt: skip
    cases.add(ms_case("ms_mha_past_causal_mask3d", "MultiHeadAttention", args,
                      {**heads, "unidirectional": 1}, outputs=3))  # fmt: skip
    split = [In(q), In(f32(2, 2, 5, 8)), In(f32(2, 2, 5, 8))]
    cases.add(ms_case("ms_mha_kv_heads", "MultiHeadAttention", split,
                      {**heads, "unidirectional": 1}))  # fmt: skip
    halves = [In(_half(x)), In(_half(x)), In(_half(f32(2, 3, 16))), Const(_half(f32(48)))]
    cases.add(ms_case("ms_mha_f16_causal", "MultiHeadAttention", halves,
                      {"num_heads": 4, "unidirectional": 1}, outputs=3, **HALF_TOL))  # fmt: skip


def _fused_attention_cases(cases: CaseList) -> None:
    x, w, bias = f32(2, 4, 16), f32(16, 48, low=-0.5, high=0.5), f32(48)
    heads = {"num_heads": 2}
    base = [In(x), Const(w), Const(bias)]
    cases.add(ms_case("ms_attention", "Attention", base, heads))
    masks = {
        "key_lengths": np.array([2, 4], np.int32),
        "ends_starts": np.array([4, 3, 1, 0], np.int32),
        "mask2d": np.array([[1, 0, 1, 1], [1, 1, 1, 0]], np.int32),
    }
    for label, mask in masks.items():
        cases.add(ms_case(f"ms_attention_{label}", "Attention", [*base, In(mask)],
                          {**heads, "unidirectional": int(label == "mask2d")}))  # fmt: skip
    past = In(f32(2, 2, 2, 3, 8))
    mask3d = In(ints(2, 4, 7, low=0, high=2, dtype=np.int32))
    cases.add(ms_case("ms_attention_past_causal_mask3d", "Attention", [*base, mask3d, past],
                      {**heads, "unidirectional": 1}, outputs=2))  # fmt: skip
    sizes = [In(x), Const(f32(16, 40, low=-0.5, high=0.5)), None, None, None, In(f32(2, 1, 4, 4))]
    cases.add(ms_case("ms_attention_qkv_sizes_attention_bias", "Attention", sizes,
                      {"num_heads": 4, "qkv_hidden_sizes": [16, 16, 8], "scale": 0.5}))  # fmt: skip
    halves = [In(_half(x)), Const(_half(w)), Const(_half(bias)), In(masks["key_lengths"])]
    cases.add(ms_case("ms_attention_f16", "Attention", halves, {**heads, "unidirectional": 1},
                      outputs=2, **HALF_TOL))  # fmt: skip


def _gqa_cases(cases: CaseList) -> None:
    # the CPU kernel takes head sizes that are multiples of 8 (16 with rotary)
    heads = {"num_heads": 4, "kv_num_heads": 2}
    angles = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(8) / 8)).astype(np.float32)
    cos, sin = Const(np.cos(angles)), Const(np.sin(angles))

    def total(n: int) -> Const:
        return Const(np.array(n, np.int32))

    full_prompt = In(np.array([3, 3], np.int32))
    prompt = [In(f32(2, 4, 32)), In(f32(2, 4, 16)), In(f32(2, 4, 16)), None, None, full_prompt,
              total(4)]  # fmt: skip
    cases.add(ms_case("ms_gqa_prompt", "GroupQueryAttention", prompt, heads, outputs=3))
    rotary = [In(f32(2, 4, 64)), In(f32(2, 4, 32)), In(f32(2, 4, 32)), None, None, full_prompt,
              total(4), cos, sin]  # fmt: skip
    attrs = {**heads, "do_rotary": 1, "rotary_interleaved": 1, "local_window_size": 2}
    cases.add(ms_case("ms_gqa_prompt_rotary_window", "GroupQueryAttention", rotary, attrs,
                      outputs=3))  # fmt: skip
    packed = [In(f32(2, 4, 64)), None, None, None, None, full_prompt, total(4)]
    cases.add(ms_case("ms_gqa_packed_softcap", "GroupQueryAttention", packed,
                      {**heads, "softcap": 1.5, "scale": 0.5}, outputs=3))  # fmt: skip
    step = [In(f32(2, 1, 32)), In(f32(2, 1, 16)), In(f32(2, 1, 16))]
    past = [In(f32(2, 2, 5, 8)), In(f32(2, 2, 5, 8))]
    decode = [*step, *past, In(np.array([5, 3], np.int32)), total(6)]
    cases.add(ms_case("ms_gqa_decode", "GroupQueryAttention", decode, heads, outputs=3))
    window = {**heads, "local_window_size": 2}
    decode = [*step, *past, In(np.array([4, 1], np.int32)), total(5)]
    cases.add(ms_case("ms_gqa_decode_window", "GroupQueryAttention", decode, window, outputs=3))
    # a later chunk of a prompt (the kernel takes several new tokens on a past at batch 1)
    chunk = [In(f32(1, 3, 32)), In(f32(1, 3, 16)), In(f32(1, 3, 16)), In(f32(1, 2, 8, 8)),
             In(f32(1, 2, 8, 8)), In(np.array([5], np.int32)), total(6)]  # fmt: skip
    cases.add(ms_case("ms_gqa_chunk_on_past", "GroupQueryAttention", chunk, window, outputs=3))
    step = [In(_half(f32(2, 1, 64))), In(_half(f32(2, 1, 32))), In(_half(f32(2, 1, 32)))]
    past = [In(_half(f32(2, 2, 6, 16))), In(_half(f32(2, 2, 6, 16)))]
    decode = [*step, *past, In(np.array([5, 2], np.int32)), total(6), Const(_half(cos.value)),
              Const(_half(sin.value))]  # fmt: skip
    cases.add(ms_case("ms_gqa_decode_f16_rotary", "GroupQueryAttention", decode,
                      {**heads, "do_rotary": 1}, outputs=3, **HALF_TOL))  # fmt: skip


def _attention(cases: CaseList) -> None:
    _rotary_cases(cases)
    _mha_cases(cases)
    _fused_attention_cases(cases)
    _gqa_cases(cases)


CONTRIB_FAMILIES = (_activations, _attention)
