"""onnxruntime's contrib ops (domain com.microsoft), as its transformer optimizer and
quantization tools write them into exported models; onnxruntime is the oracle."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper
from onnx_case_kit import (
    CaseList,
    Const,
    In,
    OnnxCase,
    f32,
    graph_case,
    ints,
    ort_reference,
    rng,
)

MS = "com.microsoft"


def contrib_case(
    name: str,
    op: str,
    inputs: dict,
    attrs: dict | None = None,
    outputs=("y",),
    consts: dict | None = None,
    domain: str = MS,
    order=None,
    **extra,
) -> OnnxCase:
    """One `domain` node over runtime `inputs` and constant `consts` (name -> array, or None
    for an omitted optional input), in that input order (or in `order`, "" for an omitted
    input), compared with onnxruntime."""
    consts = consts or {}
    names = list(inputs) + ["" if v is None else key for key, v in consts.items()]
    names = list(order) if order is not None else names
    consts = {key: v for key, v in consts.items() if v is not None}
    node = helper.make_node(op, names, list(outputs), domain=domain, **(attrs or {}))
    produced = [name for name in outputs if name]
    return graph_case(
        name, [node], inputs, consts, produced, domains={MS: 1}, reference=ort_reference, **extra
    )


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
    cases.add(
        contrib_case(
            "ms_fused_matmul_trans_batch_a",
            "FusedMatMul",
            {"a": f32(5, 2, 4), "b": f32(2, 5, 3)},
            both,
        )
    )
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
        cases.add(
            contrib_case(
                f"ms_fused_gemm_{activation.lower()}",
                "FusedGemm",
                gemm,
                attrs,
                consts=weights,
                atol=1e-5,
            )
        )

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
        cases.add(
            contrib_case(
                f"ms_fused_conv_{str(activation).lower()}",
                "FusedConv",
                {"x": x},
                attrs,
                consts=conv,
                rtol=1e-4,
                atol=1e-5,
            )
        )
    # Z, the residual, is added before the activation
    cases.add(
        contrib_case(
            "ms_fused_conv_sum",
            "FusedConv",
            {"x": x, "z": f32(1, 6, 3, 6)},
            {**shape, "activation": "Relu"},
            consts=conv,
            rtol=1e-4,
            atol=1e-5,
            order=["x", "w", "bias", "z"],
        )
    )


NORM_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
HALF_TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}


def _fused_norms(cases: CaseList) -> None:
    x, skip = f32(2, 3, 8), f32(2, 3, 8)
    gamma, beta, bias = f32(8), f32(8), f32(8)
    stats = ("y", "mean", "inv_std", "sum")
    cases.add(
        contrib_case(
            "ms_skip_layer_norm",
            "SkipLayerNormalization",
            {"x": x, "skip": skip},
            {"epsilon": 1e-5},
            stats,
            {"gamma": gamma, "beta": beta, "bias": bias},
            **NORM_TOLERANCE,
        )
    )
    # skip without the batch dim; no beta nor bias
    cases.add(
        contrib_case(
            "ms_skip_layer_norm_2d_skip",
            "SkipLayerNormalization",
            {"x": x, "skip": skip[0]},
            consts={"gamma": gamma},
            **NORM_TOLERANCE,
        )
    )
    cases.add(
        contrib_case(
            "ms_skip_layer_norm_tokens",
            "SkipLayerNormalization",
            {"x": x[0], "skip": skip[0]},
            outputs=("y", "", "", "sum"),
            consts={"gamma": gamma, "beta": beta},
            **NORM_TOLERANCE,
        )
    )
    half = {"x": x.astype(np.float16), "skip": skip.astype(np.float16)}
    half_params = {"gamma": gamma.astype(np.float16), "beta": beta.astype(np.float16)}
    cases.add(
        contrib_case(
            "ms_skip_layer_norm_f16",
            "SkipLayerNormalization",
            half,
            outputs=stats,
            consts=half_params,
            **HALF_TOLERANCE,
        )
    )
    cases.add(
        contrib_case(
            "ms_skip_simplified_layer_norm",
            "SkipSimplifiedLayerNormalization",
            {"x": x, "skip": skip},
            {"epsilon": 1e-6},
            ("y", "", "inv_std", "sum"),
            {"gamma": gamma, "bias": bias},
            order=["x", "skip", "gamma", "bias"],
            **NORM_TOLERANCE,
        )
    )

    # onnxruntime's ONNX-domain registrations, which onnx's checker does not know
    onnx_domain = {"domain": "", "opset": 13, "checked": False, **NORM_TOLERANCE}
    cases.add(
        contrib_case(
            "ort_simplified_layer_norm",
            "SimplifiedLayerNormalization",
            {"x": x},
            {"epsilon": 1e-6},
            ("y", "inv_std"),
            {"scale": gamma},
            **onnx_domain,
        )
    )
    cases.add(
        contrib_case(
            "ort_simplified_layer_norm_axis",
            "SimplifiedLayerNormalization",
            {"x": x.astype(np.float16)},
            {"axis": 1},
            ("y",),
            {"scale": f32(3, 8)},
            **onnx_domain,
        )
    )
    cases.add(
        contrib_case(
            "ort_layer_norm_opset13",
            "LayerNormalization",
            {"x": x},
            {"epsilon": 1e-6},
            ("y", "mean", "inv_std"),
            {"scale": gamma, "bias": beta},
            **onnx_domain,
        )
    )

    batch, sequence, hidden = 2, 5, 8
    ids = {
        "input_ids": ints(batch, sequence, low=0, high=12, dtype=np.int32),
        "segment_ids": ints(batch, sequence, low=0, high=2, dtype=np.int32),
    }
    tables = {
        "word_embedding": f32(12, hidden),
        "position_embedding": f32(7, hidden),
        "segment_embedding": f32(2, hidden),
        "gamma": f32(hidden),
        "beta": f32(hidden),
    }
    # mask_index counts the entries equal to 1
    mask = np.array([[1, 1, 1, 0, 0], [1, 2, 1, 1, 1]], dtype=np.int32)
    cases.add(
        contrib_case(
            "ms_embed_layer_norm",
            "EmbedLayerNormalization",
            {**ids, "mask": mask},
            outputs=("y", "mask_index", "sum"),
            consts=tables,
            order=[*ids, *tables, "mask"],
            **NORM_TOLERANCE,
        )
    )
    no_segment = [
        "input_ids",
        "",
        "word_embedding",
        "position_embedding",
        "",
        "gamma",
        "beta",
        "",
        "position_ids",
    ]
    positions = ints(batch, sequence, low=0, high=7, dtype=np.int32)
    del tables["segment_embedding"]
    cases.add(
        contrib_case(
            "ms_embed_layer_norm_positions",
            "EmbedLayerNormalization",
            {"input_ids": ids["input_ids"], "position_ids": positions},
            outputs=("y", "mask_index"),
            consts=tables,
            order=no_segment,
            **NORM_TOLERANCE,
        )
    )


def _tensor_ops(cases: CaseList) -> None:
    x = f32(2, 4, 5)
    cases.add(
        contrib_case(
            "ms_trilu_lower", "Trilu", {"x": x}, {"upper": 0}, consts={"k": np.array(1, np.int64)}
        )
    )
    cases.add(contrib_case("ms_trilu_upper", "Trilu", {"x": x}))
    for axis in (0, -1, 3):
        cases.add(
            contrib_case(
                f"ms_expand_dims_{axis}".replace("-", "m"),
                "ExpandDims",
                {"x": x},
                consts={"axis": np.array(axis, np.int32)},
            )
        )
    rows = {"a": f32(4, 3), "b": f32(5, 3)}
    cases.add(contrib_case("ms_cdist_sqeuclidean", "CDist", rows, atol=1e-5))
    cases.add(contrib_case("ms_cdist_euclidean", "CDist", rows, {"metric": "euclidean"}, atol=1e-5))
    # well conditioned: a dominant diagonal; the second needs row swaps (zero leading pivot)
    matrices = f32(2, 3, 4, 4) + 4 * np.eye(4, dtype=np.float32)
    cases.add(contrib_case("ms_inverse", "Inverse", {"x": matrices}, rtol=1e-4, atol=1e-5))
    swaps = np.array([[0, 2, 1], [1, 0, 3], [4, 1, 0]], dtype=np.float64)
    cases.add(contrib_case("ms_inverse_pivoting_f64", "Inverse", {"x": swaps}))


def _nbits_weights(
    n: int, k: int, block: int, bits: int, zero_points: str | None, dtype=np.float32
) -> dict:
    """MatMulNBits's B, scales and (packed uint8 or float) zero points: random bytes are
    valid packed values."""
    k_blocks = -(-k // block)
    weights = {
        "B": rng.integers(0, 256, (n, k_blocks, block * bits // 8), dtype=np.uint8),
        "scales": rng.uniform(0.01, 0.1, (n, k_blocks)).astype(dtype),
    }
    if zero_points == "uint8":
        packed = (k_blocks * bits + 7) // 8
        weights["zero_points"] = rng.integers(0, 256, (n, packed), dtype=np.uint8)
    elif zero_points == "float":
        weights["zero_points"] = rng.uniform(0, 2**bits - 1, (n, k_blocks)).astype(dtype)
    return weights


def _matmul_nbits(cases: CaseList) -> None:
    # name, (batch dims of A), K, N, block_size, bits, zero points, extra inputs, attrs
    variants = [
        ("bs16_k40", (2, 3), 40, 5, 16, 4, None, {}, {}),
        ("bs32_zp_bias", (3,), 100, 7, 32, 4, "uint8", {"bias": f32(7)}, {}),
        ("bs128_float_zp", (2, 1, 2), 200, 6, 128, 4, "float", {}, {}),
        ("bits2", (4,), 72, 3, 16, 2, "uint8", {}, {}),
        ("bits8", (4,), 72, 3, 32, 8, "uint8", {}, {}),
        ("accuracy4", (2, 3), 64, 5, 32, 4, "uint8", {}, {"accuracy_level": 4}),
    ]
    for name, batch, k, n, block, bits, zp, extra, attrs in variants:
        consts = _nbits_weights(n, k, block, bits, zp)
        if extra:  # bias, after the optional inputs before it (omitted where not given)
            consts.setdefault("zero_points", None)
            consts.update({"g_idx": None, **extra})
        # accuracy_level 4: onnxruntime quantizes A to int8 per block (about 1% error)
        tolerance = {"rtol": 2e-2, "atol": 5e-2} if attrs else {"rtol": 1e-4, "atol": 1e-5}
        attrs = {"K": k, "N": n, "bits": bits, "block_size": block, **attrs}
        cases.add(
            contrib_case(
                f"ms_matmul_nbits_{name}",
                "MatMulNBits",
                {"a": f32(*batch, k, low=-1, high=1)},
                attrs,
                consts=consts,
                **tolerance,
            )
        )
    # act-order: each row's block from g_idx (float zero points), float16
    k, n, block = 96, 4, 32
    groups = (np.arange(k) // block).astype(np.int32)
    rng.shuffle(groups)
    consts = _nbits_weights(n, k, block, 4, "float") | {"g_idx": groups}
    attrs = {"K": k, "N": n, "bits": 4, "block_size": block}
    cases.add(
        contrib_case(
            "ms_matmul_nbits_g_idx",
            "MatMulNBits",
            {"a": f32(3, k)},
            attrs,
            consts=consts,
            rtol=1e-4,
            atol=1e-5,
        )
    )
    consts = _nbits_weights(n, k, block, 4, "uint8", np.float16)
    a16 = f32(2, k, low=-1, high=1).astype(np.float16)
    cases.add(
        contrib_case(
            "ms_matmul_nbits_f16",
            "MatMulNBits",
            {"a": a16},
            attrs,
            consts=consts,
            rtol=1e-2,
            atol=2e-2,
        )
    )


def _quantize_dequantize(cases: CaseList) -> None:
    # halves (ties round to even), saturation both ways
    x = np.concatenate([np.arange(-6, 6) + 0.5, f32(12) * 300]).astype(np.float32).reshape(2, 12)
    scale = np.array(0.5, np.float32)
    axis0 = {"s": np.array([0.5, 2.0], np.float32), "z": np.array([3, -4], np.int8)}
    variants = [  # name, constant inputs, attributes
        ("u8_default", {"s": scale}, {}),
        ("s8_axis0", axis0, {"axis": 0}),
        (
            "u8_axis1",
            {"s": f32(12, low=0.5, high=4), "z": ints(12, low=0, high=255, dtype=np.uint8)},
            {},
        ),
        ("s16", {"s": scale, "z": np.array(-7, np.int16)}, {}),
        ("u16", {"s": scale, "z": np.array(300, np.uint16)}, {}),
    ]
    for name, consts, attrs in variants:
        cases.add(
            contrib_case(
                f"ms_quantize_linear_{name}", "QuantizeLinear", {"x": x}, attrs, consts=consts
            )
        )
        q = ort_reference(cases.cases[-1])[0]
        cases.add(
            contrib_case(
                f"ms_dequantize_linear_{name}", "DequantizeLinear", {"x": q}, attrs, consts=consts
            )
        )
    half = {"s": np.array(0.25, np.float16), "z": np.array(100, np.uint8)}
    cases.add(
        contrib_case(
            "ms_quantize_linear_f16",
            "QuantizeLinear",
            {"x": (x / 8).astype(np.float16)},
            consts=half,
        )
    )
    cases.add(
        contrib_case(
            "ms_dequantize_linear_f16",
            "DequantizeLinear",
            {"x": ints(2, 5, low=0, high=255, dtype=np.uint8)},
            consts=half,
        )
    )
    cases.add(
        contrib_case(
            "ms_dequantize_linear_s32",
            "DequantizeLinear",
            {"x": ints(3, 4, low=-5000, high=5000, dtype=np.int32)},
            consts={"s": scale},
        )
    )
    # int4: quantized, then cast to int8 for the comparison; and dequantized from int4 weights
    zero4 = np.array(-3, ml_dtypes.int4)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain=MS),
        helper.make_node("Cast", ["q"], ["y"], to=TensorProto.INT8),
    ]
    cases.add(
        graph_case(
            "ms_quantize_linear_int4",
            nodes,
            {"x": x},
            {"s": scale, "z": zero4},
            opset=21,
            domains={MS: 1},
            reference=ort_reference,
        )
    )
    weights = {"w": np.arange(-8, 8).reshape(2, 8).astype(ml_dtypes.int4), "z": zero4}
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["y"], domain=MS)]
    cases.add(
        graph_case(
            "ms_dequantize_linear_int4",
            nodes,
            {"s": scale},
            weights,
            domains={MS: 1},
            reference=ort_reference,
        )
    )


def _q(dtype, *shape) -> np.ndarray:
    """Random int8/uint8 values over the type's whole range."""
    info = np.iinfo(dtype)
    return ints(*shape, low=info.min, high=info.max + 1, dtype=dtype)


def _params(scale: float, zero_point: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    return np.array(scale, np.float32), np.array(zero_point, dtype)


# one zero point per type, away from the middle so the ranges are asymmetric
ZERO_POINTS = {np.uint8: 100, np.int8: -20}


def _qlinear_elementwise(cases: CaseList) -> None:
    for dtype in (np.uint8, np.int8):
        kind = np.dtype(dtype).name
        zp = ZERO_POINTS[dtype]
        a_s, a_z = _params(0.05, zp, dtype)
        b_s, b_z = _params(0.02, zp // 2, dtype)
        c_s, c_z = _params(0.07, zp // 4, dtype)
        for op in ("QLinearAdd", "QLinearMul"):
            # B broadcast along A's last dim
            consts = {
                "as": a_s,
                "az": a_z,
                "b": _q(dtype, 6),
                "bs": b_s,
                "bz": b_z,
                "cs": c_s,
                "cz": c_z,
            }
            cases.add(
                contrib_case(
                    f"ms_{op.lower()}_{kind}", op, {"a": _q(dtype, 2, 3, 6)}, consts=consts
                )
            )
        for op, attrs in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})):
            consts = {"xs": a_s, "xz": a_z, "ys": _params(1 / 256, 0, dtype)[0], "yz": c_z}
            if op == "QLinearLeakyRelu":
                consts["ys"] = c_s
            cases.add(
                contrib_case(
                    f"ms_{op.lower()}_{kind}", op, {"x": _q(dtype, 4, 16)}, attrs, consts=consts
                )
            )
        where = {
            "p": _q(dtype, 2, 5),
            "ps": a_s,
            "pz": a_z,
            "q": _q(dtype, 5),
            "qs": b_s,
            "qz": b_z,
            "zs": c_s,
            "zz": c_z,
        }
        cases.add(
            contrib_case(
                f"ms_qlinear_where_{kind}",
                "QLinearWhere",
                {"c": rng.random((2, 5)) < 0.5},
                consts=where,
            )
        )
    # no output zero point: 0 (onnxruntime's type inference refuses omitted inner ones)
    s, z = _params(0.05, 3, np.uint8)
    consts = {"as": s, "az": z, "b": _q(np.uint8, 6), "bs": s, "bz": z, "cs": s}
    cases.add(
        contrib_case(
            "ms_qlinearadd_no_zero_point", "QLinearAdd", {"a": _q(np.uint8, 3, 6)}, consts=consts
        )
    )


def _qlinear_softmax_concat(cases: CaseList) -> None:
    for dtype, y_zp in ((np.uint8, 0), (np.int8, -128)):
        kind = np.dtype(dtype).name
        x_s, x_z = _params(0.1, ZERO_POINTS[dtype], dtype)
        y_s = np.array(1 / 256, np.float32)
        for opset, axis in ((13, -1), (13, 1), (12, 1)):
            consts = {"xs": x_s, "xz": x_z, "ys": y_s, "yz": np.array(y_zp, dtype)}
            cases.add(
                contrib_case(
                    f"ms_qlinear_softmax_{kind}_opset{opset}_axis{axis}",
                    "QLinearSoftmax",
                    {"x": _q(dtype, 2, 4, 8)},
                    {"opset": opset, "axis": axis},
                    consts=consts,
                )
            )
        y_s, y_z = _params(0.04, ZERO_POINTS[dtype] // 2, dtype)
        # the second input has Y's parameters (copied), the third 1-element vectors
        inputs = {
            "ys": y_s,
            "yz": y_z,
            "a": _q(dtype, 2, 3),
            "as": x_s,
            "az": x_z,
            "b": _q(dtype, 2, 2),
            "bs": y_s,
            "bz": y_z,
            "c": _q(dtype, 2, 1),
            "cs": np.array([0.5], np.float32),
            "cz": np.array([1], dtype),
        }
        cases.add(
            contrib_case(
                f"ms_qlinear_concat_{kind}", "QLinearConcat", {}, {"axis": 1}, consts=inputs
            )
        )
    softmax13 = {
        "xs": np.array(0.1, np.float32),
        "xz": np.array(3, np.uint8),
        "ys": np.array(0.003, np.float32),
        "yz": np.array(7, np.uint8),
    }
    cases.add(
        contrib_case(
            "ms_qlinear_softmax_odd_scale",
            "QLinearSoftmax",
            {"x": _q(np.uint8, 3, 5)},
            {"opset": 13},
            consts=softmax13,
        )
    )


def _qlinear_pools(cases: CaseList) -> None:
    for dtype in (np.uint8, np.int8):
        kind = np.dtype(dtype).name
        x_s, x_z = _params(0.05, ZERO_POINTS[dtype], dtype)
        y_s, y_z = _params(0.03, ZERO_POINTS[dtype] // 2, dtype)
        consts = {"xs": x_s, "xz": x_z, "ys": y_s, "yz": y_z}
        for last in (0, 1):
            cases.add(
                contrib_case(
                    f"ms_qlinear_global_average_pool_{kind}_last{last}",
                    "QLinearGlobalAveragePool",
                    {"x": _q(dtype, 2, 3, 5, 4)},
                    {"channels_last": last},
                    consts=consts,
                )
            )
        variants = [
            ("k3s2", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
            ("include_pad", {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "count_include_pad": 1}),
            (
                "ceil_last",
                {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "channels_last": 1},
            ),
            (
                "ceil_include_pad",
                {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1},
            ),
        ]
        for name, attrs in variants:
            # onnxruntime sums the window in float in its own order: one quantum near ties
            cases.add(
                contrib_case(
                    f"ms_qlinear_average_pool_{kind}_{name}",
                    "QLinearAveragePool",
                    {"x": _q(dtype, 2, 3, 7, 6)},
                    attrs,
                    consts=consts,
                    atol=1,
                )
            )


def _quantized_matmuls(cases: CaseList) -> None:
    for dtype in (np.uint8, np.int8):
        kind = np.dtype(dtype).name
        a_s, a_z = _params(0.05, ZERO_POINTS[dtype], dtype)
        w = _q(np.int8, 6, 5)
        w_s, w_z = f32(5, low=0.01, high=0.05), ints(5, low=-5, high=5, dtype=np.int8)
        y_s, y_z = _params(0.5, ZERO_POINTS[dtype] // 2, dtype)
        bias = ints(5, low=-500, high=500, dtype=np.int32)
        variants = [  # name, A's shape, B, its parameters, C, y parameters, attributes
            ("float", (3, 6), w, _params(0.02, 0, np.int8), None, (None, None), {}),
            ("per_column_bias", (3, 6), w, (w_s, w_z), bias, (y_s, y_z), {"alpha": 0.5}),
            ("trans", (6, 3), w.T.copy(), (w_s, w_z), None, (y_s, y_z), {"transA": 1, "transB": 1}),
            (
                "uint8_b_float",
                (3, 6),
                _q(np.uint8, 6, 5),
                _params(0.02, 128, np.uint8),
                bias,
                (None, None),
                {},
            ),
        ]
        for name, shape, bm, (bs, bz), c, (ys, yz), attrs in variants:
            if bm.dtype != np.int8 and dtype == np.int8:
                continue  # onnxruntime's kernel takes int8 A only with int8 B
            consts = {"as": a_s, "az": a_z, "b": bm, "bs": bs, "bz": bz, "c": c, "ys": ys, "yz": yz}
            while list(consts.values())[-1] is None:
                consts.popitem()
            cases.add(
                contrib_case(
                    f"ms_qgemm_{kind}_{name}",
                    "QGemm",
                    {"a": _q(dtype, *shape)},
                    attrs,
                    consts=consts,
                    rtol=1e-5,
                    atol=1e-5,
                )
            )
        # MatMulIntegerToFloat: batched A, per-column B parameters, bias
        consts = {"b": w, "as": a_s, "bs": w_s, "az": a_z, "bz": w_z, "bias": f32(5)}
        cases.add(
            contrib_case(
                f"ms_matmul_integer_to_float_{kind}",
                "MatMulIntegerToFloat",
                {"a": _q(dtype, 2, 3, 6)},
                consts=consts,
                rtol=1e-5,
                atol=1e-5,
            )
        )
        bm = _q(dtype, 6, 5)
        weights = {
            "b": bm,
            "bs": np.array(0.03, np.float32),
            "bz": np.array(ZERO_POINTS[dtype] // 3, dtype),
        }
        cases.add(
            contrib_case(
                f"ms_dynamic_quantize_matmul_{kind}",
                "DynamicQuantizeMatMul",
                {"a": f32(2, 3, 6)},
                consts=weights,
                rtol=1e-5,
                atol=1e-5,
            )
        )
    consts = {"b": w, "bs": w_s, "bz": w_z, "bias": f32(5)}
    cases.add(
        contrib_case(
            "ms_dynamic_quantize_matmul_per_column_bias",
            "DynamicQuantizeMatMul",
            {"a": f32(4, 6)},
            consts=consts,
            rtol=1e-5,
            atol=1e-5,
        )
    )
    cases.add(
        contrib_case(
            "ms_matmul_integer16",
            "MatMulInteger16",
            {"a": ints(2, 3, 7, low=-3000, high=3000, dtype=np.int16)},
            consts={"b": ints(7, 4, low=-3000, high=3000, dtype=np.int16)},
        )
    )


def _quantized(cases: CaseList) -> None:
    _matmul_nbits(cases)
    _quantize_dequantize(cases)
    _qlinear_elementwise(cases)
    _qlinear_softmax_concat(cases)
    _qlinear_pools(cases)
    _quantized_matmuls(cases)


def ms_case(
    name: str, op: str, args: list, attrs: dict | None = None, outputs: int = 1, **extra
) -> OnnxCase:
    """contrib_case with the inputs as In/Const/None `args` in the op's input order (None: an
    omitted optional input), as op_case takes them."""
    inputs, consts, order = {}, {}, []
    for i, arg in enumerate(args):
        order.append("" if arg is None else f"x{i}")
        if arg is not None:
            (inputs if isinstance(arg, In) else consts)[f"x{i}"] = arg.value
    out_names = tuple(f"y{i}" for i in range(outputs))
    return contrib_case(name, op, inputs, attrs, out_names, consts, order=order, **extra)


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
    cases.add(
        ms_case(
            "ms_rotary_partial",
            "RotaryEmbedding",
            partial,
            {"rotary_embedding_dim": 4, "num_heads": 2},
        )
    )
    halves = [In(_half(x3)), positions, Const(_half(np.cos(angles))), Const(_half(np.sin(angles)))]
    cases.add(ms_case("ms_rotary_f16", "RotaryEmbedding", halves, {"interleaved": 1}, **HALF_TOL))


def _mha_cases(cases: CaseList) -> None:
    q, kv = f32(2, 4, 16), f32(2, 5, 16)
    heads = {"num_heads": 2}
    cases.add(
        ms_case("ms_mha_cross", "MultiHeadAttention", [In(q), In(kv), In(f32(2, 5, 16))], heads)
    )
    lengths = In(np.array([3, 5], np.int32))
    args = [In(q), In(kv), In(kv), Const(f32(48)), lengths]
    cases.add(
        ms_case("ms_mha_bias_key_lengths", "MultiHeadAttention", args, {**heads, "scale": 0.3})
    )
    mask2d = In(np.array([[1, 1, 0, 1, 1], [0, 1, 1, 1, 0]], np.int32))
    args = [In(q), In(kv), In(kv), None, mask2d, In(f32(1, 2, 4, 5))]
    cases.add(
        ms_case(
            "ms_mha_mask2d_attention_bias",
            "MultiHeadAttention",
            args,
            {**heads, "mask_filter_value": -500.0},
        )
    )
    x, past = f32(2, 3, 16), f32(2, 2, 2, 8)
    mask3d = In(ints(2, 3, 5, low=0, high=2, dtype=np.int32))
    args = [
        In(x),
        In(f32(2, 3, 16)),
        In(f32(2, 3, 16)),
        Const(f32(48)),
        mask3d,
        None,
        In(past),
        In(f32(2, 2, 2, 8)),
    ]
    cases.add(
        ms_case(
            "ms_mha_past_causal_mask3d",
            "MultiHeadAttention",
            args,
            {**heads, "unidirectional": 1},
            outputs=3,
        )
    )
    split = [In(q), In(f32(2, 2, 5, 8)), In(f32(2, 2, 5, 8))]
    cases.add(
        ms_case("ms_mha_kv_heads", "MultiHeadAttention", split, {**heads, "unidirectional": 1})
    )
    halves = [In(_half(x)), In(_half(x)), In(_half(f32(2, 3, 16))), Const(_half(f32(48)))]
    cases.add(
        ms_case(
            "ms_mha_f16_causal",
            "MultiHeadAttention",
            halves,
            {"num_heads": 4, "unidirectional": 1},
            outputs=3,
            **HALF_TOL,
        )
    )


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
        cases.add(
            ms_case(
                f"ms_attention_{label}",
                "Attention",
                [*base, In(mask)],
                {**heads, "unidirectional": int(label == "mask2d")},
            )
        )
    past = In(f32(2, 2, 2, 3, 8))
    mask3d = In(ints(2, 4, 7, low=0, high=2, dtype=np.int32))
    cases.add(
        ms_case(
            "ms_attention_past_causal_mask3d",
            "Attention",
            [*base, mask3d, past],
            {**heads, "unidirectional": 1},
            outputs=2,
        )
    )
    sizes = [In(x), Const(f32(16, 40, low=-0.5, high=0.5)), None, None, None, In(f32(2, 1, 4, 4))]
    cases.add(
        ms_case(
            "ms_attention_qkv_sizes_attention_bias",
            "Attention",
            sizes,
            {"num_heads": 4, "qkv_hidden_sizes": [16, 16, 8], "scale": 0.5},
        )
    )
    halves = [In(_half(x)), Const(_half(w)), Const(_half(bias)), In(masks["key_lengths"])]
    cases.add(
        ms_case(
            "ms_attention_f16",
            "Attention",
            halves,
            {**heads, "unidirectional": 1},
            outputs=2,
            **HALF_TOL,
        )
    )


def _gqa_cases(cases: CaseList) -> None:
    # the CPU kernel takes head sizes that are multiples of 8 (16 with rotary)
    heads = {"num_heads": 4, "kv_num_heads": 2}
    angles = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(8) / 8)).astype(np.float32)
    cos, sin = Const(np.cos(angles)), Const(np.sin(angles))

    def total(n: int) -> Const:
        return Const(np.array(n, np.int32))

    full_prompt = In(np.array([3, 3], np.int32))
    prompt = [
        In(f32(2, 4, 32)),
        In(f32(2, 4, 16)),
        In(f32(2, 4, 16)),
        None,
        None,
        full_prompt,
        total(4),
    ]
    cases.add(ms_case("ms_gqa_prompt", "GroupQueryAttention", prompt, heads, outputs=3))
    rotary = [
        In(f32(2, 4, 64)),
        In(f32(2, 4, 32)),
        In(f32(2, 4, 32)),
        None,
        None,
        full_prompt,
        total(4),
        cos,
        sin,
    ]
    attrs = {**heads, "do_rotary": 1, "rotary_interleaved": 1, "local_window_size": 2}
    cases.add(
        ms_case("ms_gqa_prompt_rotary_window", "GroupQueryAttention", rotary, attrs, outputs=3)
    )
    packed = [In(f32(2, 4, 64)), None, None, None, None, full_prompt, total(4)]
    cases.add(
        ms_case(
            "ms_gqa_packed_softcap",
            "GroupQueryAttention",
            packed,
            {**heads, "softcap": 1.5, "scale": 0.5},
            outputs=3,
        )
    )
    step = [In(f32(2, 1, 32)), In(f32(2, 1, 16)), In(f32(2, 1, 16))]
    past = [In(f32(2, 2, 5, 8)), In(f32(2, 2, 5, 8))]
    decode = [*step, *past, In(np.array([5, 3], np.int32)), total(6)]
    cases.add(ms_case("ms_gqa_decode", "GroupQueryAttention", decode, heads, outputs=3))
    window = {**heads, "local_window_size": 2}
    decode = [*step, *past, In(np.array([4, 1], np.int32)), total(5)]
    cases.add(ms_case("ms_gqa_decode_window", "GroupQueryAttention", decode, window, outputs=3))
    # a later chunk of a prompt (the kernel takes several new tokens on a past at batch 1)
    chunk = [
        In(f32(1, 3, 32)),
        In(f32(1, 3, 16)),
        In(f32(1, 3, 16)),
        In(f32(1, 2, 8, 8)),
        In(f32(1, 2, 8, 8)),
        In(np.array([5], np.int32)),
        total(6),
    ]
    cases.add(ms_case("ms_gqa_chunk_on_past", "GroupQueryAttention", chunk, window, outputs=3))
    step = [In(_half(f32(2, 1, 64))), In(_half(f32(2, 1, 32))), In(_half(f32(2, 1, 32)))]
    past = [In(_half(f32(2, 2, 6, 16))), In(_half(f32(2, 2, 6, 16)))]
    decode = [
        *step,
        *past,
        In(np.array([5, 2], np.int32)),
        total(6),
        Const(_half(cos.value)),
        Const(_half(sin.value)),
    ]
    cases.add(
        ms_case(
            "ms_gqa_decode_f16_rotary",
            "GroupQueryAttention",
            decode,
            {**heads, "do_rotary": 1},
            outputs=3,
            **HALF_TOL,
        )
    )


def _attention(cases: CaseList) -> None:
    _rotary_cases(cases)
    _mha_cases(cases)
    _fused_attention_cases(cases)
    _gqa_cases(cases)


CONTRIB_FAMILIES = (
    _activations,
    _fused_math,
    _fused_norms,
    _tensor_ops,
    _quantized,
    _attention,
)
