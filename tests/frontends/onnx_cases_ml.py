"""ai.onnx.ml cases: the classical machine-learning ops (trees, linear models, SVMs,
encoders) that scikit-learn exports produce, which the node conformance suite barely
reaches."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper
from onnx_case_kit import CaseList, OnnxCase, f32, graph_case

ML = "ai.onnx.ml"


def ml_case(name: str, op: str, inputs: dict, attrs: dict, opset: int, outputs=("y",),
            **extra) -> OnnxCase:  # fmt: skip
    """One ai.onnx.ml node of opset `opset` over runtime `inputs` (name -> array)."""
    node = helper.make_node(op, list(inputs), list(outputs), domain=ML, **attrs)
    return graph_case(name, [node], inputs, outputs=outputs, domains={ML: opset}, **extra)


def _encoders_trees(cases: CaseList) -> None:
    x = np.array([[0.2, np.nan, 3.0], [-1.0, 0.0, 1.0], [0.5, 0.3, np.nan]], np.float32)
    tree = {
        "nodes_featureids": [0, 1, 2, 2], "nodes_truenodeids": [1, 0, 1, 3],
        "nodes_trueleafs": [0, 1, 1, 1], "nodes_falsenodeids": [2, 1, 3, 2],
        "nodes_falseleafs": [0, 1, 1, 1], "nodes_missing_value_tracks_true": [1, 0, 0, 1],
        "nodes_modes": numpy_helper.from_array(np.array([1, 2, 5, 3], np.uint8)),
        "nodes_splits": numpy_helper.from_array(np.array([0.3, 0.1, 3.0, 0.0], np.float32)),
        "leaf_targetids": [0, 1, 1, 0], "tree_roots": [0, 3], "n_targets": 2,
        "leaf_weights": numpy_helper.from_array(np.array([1.5, -2, 3, 4], np.float32)),
    }  # fmt: skip
    for aggregate in (0, 3):
        attrs = tree | {"aggregate_function": aggregate}
        cases.add(ml_case(f"tree_ensemble_aggregate{aggregate}", "TreeEnsemble", {"x": x},
                           attrs, 5))  # fmt: skip
    codes = np.array([[3, 7, 1], [5, 3, 0]], np.int64)
    cases.add(ml_case("label_encoder_int_to_float", "LabelEncoder", {"x": codes},
                       {"keys_int64s": [3, 5, 1], "values_floats": [0.5, -1.0, 2.0]},
                       4))  # fmt: skip
    cases.add(ml_case("array_feature_extractor_negative", "ArrayFeatureExtractor",
                       {"x": f32(2, 5), "i": np.array([[-1, 0], [2, -5]], np.int64)}, {},
                       1))  # fmt: skip


ML_FAMILIES = (_encoders_trees,)
