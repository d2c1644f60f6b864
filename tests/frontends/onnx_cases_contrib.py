"""onnxruntime's contrib ops (domain com.microsoft), as its transformer optimizer and
quantization tools write them into exported models; onnxruntime is the oracle."""

from __future__ import annotations

import numpy as np
from onnx import helper
from onnx_case_kit import CaseList, OnnxCase, f32, graph_case, ort_reference, rng

MS = "com.microsoft"


def contrib_case(name: str, op: str, inputs: dict, attrs: dict | None = None, outputs=("y",),
                 consts: dict | None = None, **extra) -> OnnxCase:  # fmt: skip
    """One com.microsoft node over runtime `inputs` and constant `consts` (name -> array, or
    None for an omitted optional input), in that input order, compared with onnxruntime."""
    consts = consts or {}
    names = list(inputs) + ["" if v is None else key for key, v in consts.items()]
    consts = {key: v for key, v in consts.items() if v is not None}
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


def _nbits_weights(n: int, k: int, block: int, bits: int, zero_points: str | None,
                   dtype=np.float32) -> dict:  # fmt: skip
    """MatMulNBits's B, scales and (packed uint8 or float) zero points: random bytes are
    valid packed values."""
    k_blocks = -(-k // block)
    weights = {"B": rng.integers(0, 256, (n, k_blocks, block * bits // 8), dtype=np.uint8),
               "scales": rng.uniform(0.01, 0.1, (n, k_blocks)).astype(dtype)}  # fmt: skip
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
        cases.add(contrib_case(f"ms_matmul_nbits_{name}", "MatMulNBits",
                               {"a": f32(*batch, k, low=-1, high=1)}, attrs, consts=consts,
                               **tolerance))  # fmt: skip
    # act-order: each row's block from g_idx (float zero points), float16
    k, n, block = 96, 4, 32
    groups = (np.arange(k) // block).astype(np.int32)
    rng.shuffle(groups)
    consts = _nbits_weights(n, k, block, 4, "float") | {"g_idx": groups}
    attrs = {"K": k, "N": n, "bits": 4, "block_size": block}
    cases.add(contrib_case("ms_matmul_nbits_g_idx", "MatMulNBits", {"a": f32(3, k)}, attrs,
                           consts=consts, rtol=1e-4, atol=1e-5))  # fmt: skip
    consts = _nbits_weights(n, k, block, 4, "uint8", np.float16)
    a16 = f32(2, k, low=-1, high=1).astype(np.float16)
    cases.add(contrib_case("ms_matmul_nbits_f16", "MatMulNBits", {"a": a16}, attrs,
                           consts=consts, rtol=1e-2, atol=2e-2))  # fmt: skip


def _quantized(cases: CaseList) -> None:
    _matmul_nbits(cases)


CONTRIB_FAMILIES = (_activations, _quantized)
