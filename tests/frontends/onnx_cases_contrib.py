"""onnxruntime's contrib ops (domain com.microsoft), as its transformer optimizer and
quantization tools write them into exported models; onnxruntime is the oracle."""

from __future__ import annotations

from onnx import helper
from onnx_case_kit import CaseList, OnnxCase, f32, graph_case, ort_reference

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


CONTRIB_FAMILIES = (_activations,)
