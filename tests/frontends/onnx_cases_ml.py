"""ai.onnx.ml cases: the classical machine-learning ops (trees, linear models, SVMs,
encoders) that scikit-learn exports produce, which the node conformance suite barely
reaches."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper
from onnx_case_kit import CaseList, OnnxCase, f32, graph_case, ort_reference

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


POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def _linear_preprocess(cases: CaseList) -> None:
    """The linear models and the preprocessing ops; onnxruntime is the oracle where it and
    onnx.reference disagree (see ml_linear.py and ml_preprocess.py)."""
    rng = np.random.default_rng(7)  # its own, so other families' draws do not move these

    def add(name: str, op: str, inputs: dict, attrs: dict, **extra) -> None:
        cases.add(ml_case(name, op, inputs, attrs, 1, **extra))

    x = rng.uniform(-2, 2, (6, 3)).astype(np.float32)
    x[0] = [0.2, 0.0, -1.0]  # only the zero-weight class scores >= 0: SOFTMAX_ZERO moves argmax
    weights = [0.0, 0.0, 0.0, 0.5, -0.25, 0.1, -0.3, 0.2, 0.4]
    multi = {"coefficients": weights, "intercepts": [0.0, -0.1, 0.2],
             "classlabels_ints": [10, 20, 30]}  # fmt: skip
    # PROBIT wants scores in (0, 1)
    probit = {"coefficients": [w / 10 for w in weights], "intercepts": [0.5, 0.4, 0.6]}

    def classifier(name: str, attrs: dict, x: np.ndarray, **extra) -> None:
        add(f"linear_classifier_{name}", "LinearClassifier", {"x": x}, attrs,
            outputs=("label", "scores"), **extra)  # fmt: skip

    for transform in POST_TRANSFORMS:
        attrs = multi | (probit if transform == "PROBIT" else {}) | {"post_transform": transform}
        # onnx.reference takes SOFTMAX_ZERO's label from the transformed scores
        oracle = ort_reference if transform == "SOFTMAX_ZERO" else None
        classifier(f"multi_{transform.lower()}", attrs, x, reference=oracle)
    softmax = multi | {"post_transform": "SOFTMAX", "multi_class": 1}
    # the reference's scores for a double input are double, the spec's (onnxruntime's) float
    classifier("double", softmax, x.astype(np.float64), reference=ort_reference)
    classifier("int64", multi, rng.integers(-3, 4, (4, 3)))
    classifier("one_row_1d", multi, x[1], reference=ort_reference)
    binary = {"coefficients": [0.3, -0.2, 0.1], "intercepts": [0.05], "classlabels_ints": [3, 7]}
    for transform in POST_TRANSFORMS[:-1]:  # PROBIT is refused (test_onnx_import)
        attrs = binary | {"post_transform": transform}
        classifier(f"binary_{transform.lower()}", attrs, x, reference=ort_reference)
    lone = {"coefficients": [0.3, -0.2, 0.1], "intercepts": [0.05]}
    for transform in ("NONE", "LOGISTIC"):
        attrs = lone | {"post_transform": transform}
        classifier(f"lone_{transform.lower()}", attrs, x, reference=ort_reference)
    # one label: onnxruntime refuses, so the reference's threshold rule
    classifier("one_label", lone | {"classlabels_ints": [5], "post_transform": "LOGISTIC"}, x)

    def regressor(name: str, targets: int, transform: str, **extra) -> None:
        attrs = {"coefficients": weights, "intercepts": [0.3, -0.2, 0.1]}
        if transform == "PROBIT":
            attrs = probit
        attrs = {"coefficients": attrs["coefficients"][: 3 * targets],
                 "intercepts": attrs["intercepts"][:targets], "targets": targets,
                 "post_transform": transform}  # fmt: skip
        add(f"linear_regressor_{name}", "LinearRegressor", {"x": x}, attrs, **extra)

    regressor("1_target", 1, "NONE")
    regressor("3_targets", 3, "NONE")
    # the reference implements NONE only
    for transform in POST_TRANSFORMS[1:]:
        regressor(f"3_targets_{transform.lower()}", 3, transform, reference=ort_reference)
    regressor("1_target_logistic", 1, "LOGISTIC", reference=ort_reference)  # untransformed
    regressor("1_target_probit", 1, "PROBIT", reference=ort_reference)

    rows = np.array([[0.5, -1, 2], [0, 0, 0], [-3, 2, 0.1], [-1, -2, -4]], np.float32)
    for norm in ("MAX", "L1", "L2"):
        # MAX: onnxruntime divides by the signed max (as the spec), the reference by max |x|
        oracle = ort_reference if norm == "MAX" else None
        add(f"normalizer_{norm.lower()}", "Normalizer", {"x": rows}, {"norm": norm},
            reference=oracle)  # fmt: skip
    # the reference keeps a double or integer input's type, the spec (onnxruntime) gives float
    add("normalizer_l1_int64", "Normalizer", {"x": rows.astype(np.int64)}, {"norm": "L1"},
        reference=ort_reference)  # fmt: skip

    add("scaler_scalar", "Scaler", {"x": x}, {"offset": [0.5], "scale": [2.0]})
    per_feature = {"offset": [0.5, -1.0, 2.0], "scale": [2.0, 0.5, -3.0]}
    add("scaler_per_feature", "Scaler", {"x": x}, per_feature)
    add("scaler_double", "Scaler", {"x": x.astype(np.float64)}, per_feature,
        reference=ort_reference)  # fmt: skip
    add("scaler_int64", "Scaler", {"x": rng.integers(-5, 5, (3, 4))},
        {"offset": [0.5], "scale": [1.5]}, reference=ort_reference)  # fmt: skip

    gaps = x.copy()
    gaps[[0, 2, 5], [1, 0, 2]] = np.nan
    gaps[3, 1] = 0.0
    per_column = {"imputed_value_floats": [7.0, 8.0, 9.0], "replaced_value_float": np.nan}
    add("imputer_nan", "Imputer", {"x": gaps}, per_column)
    # the schema's default replaced value is 0.0, not NaN
    add("imputer_default_zero", "Imputer", {"x": gaps}, {"imputed_value_floats": [-1.0]})
    codes = np.array([[1, -1, 3], [-1, 5, -1]], np.int64)
    ints = {"imputed_value_int64s": [7, 8, 9], "replaced_value_int64": -1}
    add("imputer_int64", "Imputer", {"x": codes}, ints)

    cats = {"cats_int64s": [1, 3, 5, 7]}
    add("one_hot_encoder_unknown", "OneHotEncoder", {"x": codes}, cats)
    known = np.array([7, 1, 1, 5], np.int64)
    add("one_hot_encoder_zeros0_known", "OneHotEncoder", {"x": known}, cats | {"zeros": 0})
    # floats are truncated to integers (onnxruntime); the reference compares them as floats
    floats = np.array([[3.7, 7.0, -1.2], [5.5, 2.9, 1.0]], np.float32)
    add("one_hot_encoder_float", "OneHotEncoder", {"x": floats},
        {"cats_int64s": [1, 3, 5, 7, -1]}, reference=ort_reference)  # fmt: skip
    add("one_hot_encoder_repeated", "OneHotEncoder", {"x": codes},
        {"cats_int64s": [5, -1, 5, 3]}, reference=ort_reference)  # fmt: skip

    wide = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
    narrow = rng.uniform(-1, 1, (2, 1)).astype(np.float32)
    add("feature_vectorizer_pad_cut", "FeatureVectorizer", {"a": wide, "b": narrow, "c": wide},
        {"inputdimensions": [2, 3, 4]})  # fmt: skip
    # 1-D inputs are one row (onnxruntime); the reference makes them a column
    vectors = {"a": np.array([4, -2, 9], np.int64), "b": np.array([[1, 2]], np.int64)}
    add("feature_vectorizer_1d_int64", "FeatureVectorizer", vectors,
        {"inputdimensions": [2, 3]}, reference=ort_reference)  # fmt: skip


ML_FAMILIES = (_encoders_trees, _linear_preprocess)
