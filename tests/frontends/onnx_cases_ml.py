"""ai.onnx.ml cases: the classical machine-learning ops (trees, linear models, SVMs,
encoders) that scikit-learn exports produce, which the node conformance suite barely
reaches."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper
from onnx_case_kit import CaseList, OnnxCase, f32, graph_case, ints, ort_reference

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


# the kernels with their kernel_params (gamma, coef0, degree)
SVM_KERNELS = {
    "LINEAR": [0.0, 0.0, 0.0],
    "POLY": [0.4, 0.5, 3.0],
    "RBF": [0.3, 0.0, 0.0],
    "SIGMOID": [0.2, 0.1, 0.0],
}


def _svm_regressors(cases: CaseList, x: np.ndarray) -> None:
    vectors = f32(5, x.shape[1])
    model = {"support_vectors": vectors.ravel().tolist(), "n_supports": 5,
             "coefficients": f32(5).tolist(), "rho": [0.25]}  # fmt: skip
    for kernel, params in SVM_KERNELS.items():
        attrs = model | {"kernel_type": kernel, "kernel_params": params}
        cases.add(ml_case(f"svm_regressor_{kernel.lower()}", "SVMRegressor", {"x": x}, attrs, 1))
    rbf = model | {"kernel_type": "RBF", "kernel_params": SVM_KERNELS["RBF"]}
    cases.add(ml_case("svm_regressor_one_class", "SVMRegressor", {"x": x},
                      rbf | {"one_class": 1, "rho": [-0.45]}, 1))  # fmt: skip
    # no support vectors: the coefficients are a linear model's weights
    linear = {"coefficients": f32(x.shape[1]).tolist(), "rho": [0.5], "n_supports": 0}
    cases.add(ml_case("svm_regressor_no_support_vectors", "SVMRegressor", {"x": x}, linear, 1))
    # onnxruntime leaves the value alone (onnx.reference refuses it)
    cases.add(ml_case("svm_regressor_post_transform_ignored", "SVMRegressor", {"x": x},
                      rbf | {"post_transform": "LOGISTIC"}, 1, reference=ort_reference))  # fmt: skip
    # features far from 0 relative to their spread: |x - s|^2 must not cancel in float32
    offset = 50 + f32(*x.shape, low=-1, high=1)
    far = rbf | {"support_vectors": (50 + vectors / 2).ravel().tolist(),
                 "kernel_params": [0.5, 0.0, 0.0]}  # fmt: skip
    cases.add(ml_case("svm_regressor_rbf_offset_features", "SVMRegressor", {"x": offset},
                      far, 1, atol=1e-5))  # fmt: skip


def _svm_classifier(name: str, x: np.ndarray, attrs: dict, **extra) -> OnnxCase:
    """An SVMClassifier case (label and scores) checked against onnxruntime, which this
    follows where onnx.reference differs (binary scores and labels, pairwise coupling)."""
    return ml_case(name, "SVMClassifier", {"x": x}, attrs, 1, outputs=("label", "scores"),
                   reference=ort_reference, **extra)  # fmt: skip


def _one_vs_one(counts: list[int], features: int, kernel: str = "RBF") -> dict:
    """A one-vs-one classifier with `counts` support vectors per class."""
    classes, vectors = len(counts), sum(counts)
    return {
        "classlabels_ints": [3 + 4 * c for c in range(classes)],
        "vectors_per_class": counts,
        "support_vectors": f32(vectors, features).ravel().tolist(),
        "coefficients": f32(classes - 1, vectors).ravel().tolist(),
        "rho": f32(classes * (classes - 1) // 2, low=-0.5, high=0.5).tolist(),
        "kernel_type": kernel,
        "kernel_params": SVM_KERNELS[kernel],
    }


def _platt(pairs: int) -> dict:
    return {"prob_a": f32(pairs, low=-3, high=-0.5).tolist(),
            "prob_b": f32(pairs, low=-0.3, high=0.3).tolist()}  # fmt: skip


def _svm_classifiers(cases: CaseList, x: np.ndarray) -> None:
    features = x.shape[1]
    for kernel in SVM_KERNELS:
        attrs = _one_vs_one([2, 3, 2], features, kernel)
        cases.add(_svm_classifier(f"svm_classifier_3class_{kernel.lower()}", x, attrs))
    # rho chosen for varied labels and three-way vote ties (rows 0 and 5: the first wins)
    three = _one_vs_one([2, 1, 3], features) | {"rho": [-0.8, -0.6, 0.0]}
    for transform in ("LOGISTIC", "SOFTMAX_ZERO"):
        attrs = three | {"post_transform": transform}
        cases.add(_svm_classifier(f"svm_classifier_3class_{transform.lower()}", x, attrs))
    # two classes: one decision value, written as two scores in onnxruntime's ways
    two = _one_vs_one([3, 2], features)
    for transform in ("NONE", "LOGISTIC", "SOFTMAX"):
        attrs = two | {"post_transform": transform}
        cases.add(_svm_classifier(f"svm_classifier_2class_{transform.lower()}", x, attrs))
    # Platt scaling and pairwise coupling (an unrolled iterative solve)
    cases.add(_svm_classifier("svm_classifier_3class_probabilities", x, three | _platt(3),
                              atol=1e-5))  # fmt: skip
    cases.add(_svm_classifier("svm_classifier_2class_probabilities_logistic", x,
                              two | _platt(1) | {"post_transform": "LOGISTIC"},
                              atol=1e-5))  # fmt: skip
    cases.add(_svm_classifier("svm_classifier_int64_input", ints(4, features, low=-2, high=3),
                              _one_vs_one([1, 2, 2], features, "POLY")))  # fmt: skip
    cases.add(_svm_classifier("svm_classifier_vector_input", x[0], three))
    # no support vectors: one linear model per class; two classes choose their label
    # their own way, which depends on whether every coefficient is >= 0
    for name, weights in (("mixed", f32(2 * features)), ("positive", f32(2 * features, low=0))):
        attrs = {"classlabels_ints": [2, 7], "coefficients": weights.tolist(), "rho": [-0.2],
                 "kernel_params": [0.0, 0.0, 0.0]}  # fmt: skip
        cases.add(_svm_classifier(f"svm_classifier_linear_2class_{name}", x, attrs))
    linear = {"classlabels_ints": [1, 5, 6], "coefficients": f32(3 * features).tolist(),
              "rho": [0.3], "kernel_params": [0.0, 0.0, 0.0], "post_transform": "SOFTMAX"}  # fmt: skip
    cases.add(_svm_classifier("svm_classifier_linear_3class_softmax", x, linear))
    # one class: onnxruntime applies only PROBIT to its single column
    probit = {"classlabels_ints": [4], "coefficients": f32(features, low=-0.2, high=0.2).tolist(),
              "rho": [0.5], "kernel_params": [0.0, 0.0, 0.0], "post_transform": "PROBIT"}  # fmt: skip
    cases.add(_svm_classifier("svm_classifier_linear_1class_probit", x, probit))


def _svms(cases: CaseList) -> None:
    x = f32(6, 4)
    _svm_regressors(cases, x)
    _svm_classifiers(cases, x)


ML_FAMILIES = (_encoders_trees, _svms)
