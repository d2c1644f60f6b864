"""onnxruntime's contrib ops (domain com.microsoft), as its transformer optimizer and
quantization tools write them into exported models; onnxruntime is the oracle."""

from __future__ import annotations

import numpy as np
from onnx import helper
from onnx_case_kit import CaseList, OnnxCase, f32, graph_case, ints, ort_reference

MS = "com.microsoft"


def contrib_case(name: str, op: str, inputs: dict, attrs: dict | None = None, outputs=("y",),
                 consts: dict | None = None, domain: str = MS, order=None,
                 **extra) -> OnnxCase:  # fmt: skip
    """One `domain` node over runtime `inputs` and constant `consts` (name -> array), in
    that input order (or in `order`, "" for an omitted input), compared with onnxruntime."""
    names = list(order) if order is not None else list(inputs) + list(consts or {})
    node = helper.make_node(op, names, list(outputs), domain=domain, **(attrs or {}))
    produced = [name for name in outputs if name]
    return graph_case(name, [node], inputs, consts, produced, domains={MS: 1},
                      reference=ort_reference, **extra)  # fmt: skip


def _activations(cases: CaseList) -> None:
    x = f32(2, 3, 8, low=-4, high=4)
    bias = f32(8)
    cases.add(contrib_case("ms_gelu", "Gelu", {"x": x}))
    cases.add(contrib_case("ms_bias_gelu", "BiasGelu", {"x": x}, consts={"bias": bias}))
    cases.add(contrib_case("ms_fast_gelu", "FastGelu", {"x": x}))
    cases.add(contrib_case("ms_fast_gelu_bias", "FastGelu", {"x": x}, consts={"bias": bias}))
    cases.add(contrib_case("ms_quick_gelu", "QuickGelu", {"x": x}, {"alpha": 1.5}))


def _fused_math(cases: CaseList) -> None:
    matmul = {"a": f32(2, 3, 5, 4), "b": f32(3, 6, 5)}
    flags = {"transA": 1, "transB": 1, "alpha": 0.5}
    cases.add(contrib_case("ms_fused_matmul_trans", "FusedMatMul", matmul, flags))
    # transBatch: dim 0 moves in front of the last dim, before trans swaps the last two
    batched = {"a": f32(4, 2, 3, 5), "b": f32(6, 2, 3, 5)}
    flags = {"transBatchA": 1, "transBatchB": 1, "transB": 1}
    cases.add(contrib_case("ms_fused_matmul_trans_batch", "FusedMatMul", batched, flags))
    both = {"transBatchA": 1, "transA": 1}
    cases.add(contrib_case("ms_fused_matmul_trans_batch_a", "FusedMatMul",
                           {"a": f32(5, 2, 4), "b": f32(2, 5, 3)}, both))  # fmt: skip
    vector = {"a": f32(5), "b": f32(2, 5, 3)}
    cases.add(contrib_case("ms_fused_matmul_vector", "FusedMatMul", vector, {"transA": 1}))
    plain = {"a": f32(5, 4), "b": f32(3, 5)}
    flags = {"transA": 1, "transB": 1, "alpha": 2.0}
    cases.add(contrib_case("ms_transpose_matmul", "TransposeMatMul", plain, flags))

    gemm = {"a": f32(3, 4)}
    weights = {"b": f32(5, 4), "c": f32(5)}
    for activation, params in (
        ("Relu", {}),
        ("LeakyRelu", {"activation_alpha": 0.2}),
        ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}),
        ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.2}),
        ("Softplus", {}),
    ):
        attrs = {"activation": activation, "transB": 1, "alpha": 0.7, "beta": 1.5, **params}
        cases.add(contrib_case(f"ms_fused_gemm_{activation.lower()}", "FusedGemm", gemm,
                               attrs, consts=weights, atol=1e-5))  # fmt: skip

    x = f32(1, 4, 6, 6)
    conv = {"w": f32(6, 2, 3, 3), "bias": f32(6)}
    shape = {"pads": [1, 1, 1, 1], "strides": [2, 1], "group": 2}
    for activation, params in (
        (None, []),
        ("Relu", []),
        ("Clip", [-0.5, 0.5]),
        ("HardSigmoid", [0.2, 0.5]),
        ("LeakyRelu", [0.1]),
        ("Tanh", []),
    ):
        attrs = {**shape, "activation": activation, "activation_params": params}
        attrs = {k: v for k, v in attrs.items() if v}
        cases.add(contrib_case(f"ms_fused_conv_{str(activation).lower()}", "FusedConv", {"x": x},
                               attrs, consts=conv, rtol=1e-4, atol=1e-5))  # fmt: skip
    # Z, the residual, is added before the activation
    cases.add(contrib_case("ms_fused_conv_sum", "FusedConv", {"x": x, "z": f32(1, 6, 3, 6)},
                           {**shape, "activation": "Relu"}, consts=conv, rtol=1e-4, atol=1e-5,
                           order=["x", "w", "bias", "z"]))  # fmt: skip


NORM_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
HALF_TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}


def _fused_norms(cases: CaseList) -> None:
    x, skip = f32(2, 3, 8), f32(2, 3, 8)
    gamma, beta, bias = f32(8), f32(8), f32(8)
    stats = ("y", "mean", "inv_std", "sum")
    cases.add(contrib_case("ms_skip_layer_norm", "SkipLayerNormalization",
                           {"x": x, "skip": skip}, {"epsilon": 1e-5}, stats,
                           {"gamma": gamma, "beta": beta, "bias": bias}, **NORM_TOLERANCE))  # fmt: skip
    # skip without the batch dim; no beta nor bias
    cases.add(contrib_case("ms_skip_layer_norm_2d_skip", "SkipLayerNormalization",
                           {"x": x, "skip": skip[0]}, consts={"gamma": gamma},
                           **NORM_TOLERANCE))  # fmt: skip
    cases.add(contrib_case("ms_skip_layer_norm_tokens", "SkipLayerNormalization",
                           {"x": x[0], "skip": skip[0]}, outputs=("y", "", "", "sum"),
                           consts={"gamma": gamma, "beta": beta}, **NORM_TOLERANCE))  # fmt: skip
    half = {"x": x.astype(np.float16), "skip": skip.astype(np.float16)}
    half_params = {"gamma": gamma.astype(np.float16), "beta": beta.astype(np.float16)}
    cases.add(contrib_case("ms_skip_layer_norm_f16", "SkipLayerNormalization", half,
                           outputs=stats, consts=half_params, **HALF_TOLERANCE))  # fmt: skip
    cases.add(contrib_case("ms_skip_simplified_layer_norm", "SkipSimplifiedLayerNormalization",
                           {"x": x, "skip": skip}, {"epsilon": 1e-6}, ("y", "", "inv_std", "sum"),
                           {"gamma": gamma, "bias": bias}, order=["x", "skip", "gamma", "bias"],
                           **NORM_TOLERANCE))  # fmt: skip

    # onnxruntime's ONNX-domain registrations, which onnx's checker does not know
    onnx_domain = {"domain": "", "opset": 13, "checked": False, **NORM_TOLERANCE}
    cases.add(contrib_case("ort_simplified_layer_norm", "SimplifiedLayerNormalization",
                           {"x": x}, {"epsilon": 1e-6}, ("y", "inv_std"), {"scale": gamma},
                           **onnx_domain))  # fmt: skip
    cases.add(contrib_case("ort_simplified_layer_norm_axis", "SimplifiedLayerNormalization",
                           {"x": x.astype(np.float16)}, {"axis": 1}, ("y",),
                           {"scale": f32(3, 8)}, **onnx_domain))  # fmt: skip
    cases.add(contrib_case("ort_layer_norm_opset13", "LayerNormalization", {"x": x},
                           {"epsilon": 1e-6}, ("y", "mean", "inv_std"),
                           {"scale": gamma, "bias": beta}, **onnx_domain))  # fmt: skip

    batch, sequence, hidden = 2, 5, 8
    ids = {"input_ids": ints(batch, sequence, low=0, high=12, dtype=np.int32),
           "segment_ids": ints(batch, sequence, low=0, high=2, dtype=np.int32)}  # fmt: skip
    tables = {"word_embedding": f32(12, hidden), "position_embedding": f32(7, hidden),
              "segment_embedding": f32(2, hidden), "gamma": f32(hidden), "beta": f32(hidden)}  # fmt: skip
    # mask_index counts the entries equal to 1
    mask = np.array([[1, 1, 1, 0, 0], [1, 2, 1, 1, 1]], dtype=np.int32)
    cases.add(contrib_case("ms_embed_layer_norm", "EmbedLayerNormalization",
                           {**ids, "mask": mask}, outputs=("y", "mask_index", "sum"),
                           consts=tables, order=[*ids, *tables, "mask"],
                           **NORM_TOLERANCE))  # fmt: skip
    no_segment = ["input_ids", "", "word_embedding", "position_embedding", "", "gamma", "beta",
                  "", "position_ids"]  # fmt: skip
    positions = ints(batch, sequence, low=0, high=7, dtype=np.int32)
    del tables["segment_embedding"]
    cases.add(contrib_case("ms_embed_layer_norm_positions", "EmbedLayerNormalization",
                           {"input_ids": ids["input_ids"], "position_ids": positions},
                           outputs=("y", "mask_index"), consts=tables, order=no_segment,
                           **NORM_TOLERANCE))  # fmt: skip


def _tensor_ops(cases: CaseList) -> None:
    x = f32(2, 4, 5)
    cases.add(contrib_case("ms_trilu_lower", "Trilu", {"x": x}, {"upper": 0},
                           consts={"k": np.array(1, np.int64)}))  # fmt: skip
    cases.add(contrib_case("ms_trilu_upper", "Trilu", {"x": x}))
    for axis in (0, -1, 3):
        cases.add(contrib_case(f"ms_expand_dims_{axis}".replace("-", "m"), "ExpandDims",
                               {"x": x}, consts={"axis": np.array(axis, np.int32)}))  # fmt: skip
    rows = {"a": f32(4, 3), "b": f32(5, 3)}
    cases.add(contrib_case("ms_cdist_sqeuclidean", "CDist", rows, atol=1e-5))
    cases.add(contrib_case("ms_cdist_euclidean", "CDist", rows, {"metric": "euclidean"},
                           atol=1e-5))  # fmt: skip
    # well conditioned: a dominant diagonal; the second needs row swaps (zero leading pivot)
    matrices = f32(2, 3, 4, 4) + 4 * np.eye(4, dtype=np.float32)
    cases.add(contrib_case("ms_inverse", "Inverse", {"x": matrices}, rtol=1e-4, atol=1e-5))
    swaps = np.array([[0, 2, 1], [1, 0, 3], [4, 1, 0]], dtype=np.float64)
    cases.add(contrib_case("ms_inverse_pivoting_f64", "Inverse", {"x": swaps}))


CONTRIB_FAMILIES = (_activations, _fused_math, _fused_norms, _tensor_ops)
