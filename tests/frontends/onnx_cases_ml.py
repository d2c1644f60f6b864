"""ai.onnx.ml cases: the classical machine-learning ops (trees, linear models, SVMs,
encoders) that scikit-learn exports produce, which the node conformance suite barely
reaches."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx_case_kit import (
    CaseList,
    OnnxCase,
    f32,
    graph_case,
    ints,
    onnxruntime_outputs,
    ort_reference,
)

from aotc.frontends.onnx.ml_scores import POST_TRANSFORMS

ML = "ai.onnx.ml"


def ml_case(
    name: str, op: str, inputs: dict, attrs: dict, opset: int, outputs=("y",), **extra
) -> OnnxCase:
    """One ai.onnx.ml node of opset `opset` over runtime `inputs` (name -> array)."""
    node = helper.make_node(op, list(inputs), list(outputs), domain=ML, **attrs)
    return graph_case(name, [node], inputs, outputs=outputs, domains={ML: opset}, **extra)


def _encoders_trees(cases: CaseList) -> None:
    x = np.array([[0.2, np.nan, 3.0], [-1.0, 0.0, 1.0], [0.5, 0.3, np.nan]], np.float32)
    tree = {
        "nodes_featureids": [0, 1, 2, 2],
        "nodes_truenodeids": [1, 0, 1, 3],
        "nodes_trueleafs": [0, 1, 1, 1],
        "nodes_falsenodeids": [2, 1, 3, 2],
        "nodes_falseleafs": [0, 1, 1, 1],
        "nodes_missing_value_tracks_true": [1, 0, 0, 1],
        "nodes_modes": numpy_helper.from_array(np.array([1, 2, 5, 3], np.uint8)),
        "nodes_splits": numpy_helper.from_array(np.array([0.3, 0.1, 3.0, 0.0], np.float32)),
        "leaf_targetids": [0, 1, 1, 0],
        "tree_roots": [0, 3],
        "n_targets": 2,
        "leaf_weights": numpy_helper.from_array(np.array([1.5, -2, 3, 4], np.float32)),
    }
    for aggregate in (0, 3):
        attrs = tree | {"aggregate_function": aggregate}
        cases.add(
            ml_case(f"tree_ensemble_aggregate{aggregate}", "TreeEnsemble", {"x": x}, attrs, 5)
        )
    codes = np.array([[3, 7, 1], [5, 3, 0]], np.int64)
    cases.add(
        ml_case(
            "label_encoder_int_to_float",
            "LabelEncoder",
            {"x": codes},
            {"keys_int64s": [3, 5, 1], "values_floats": [0.5, -1.0, 2.0]},
            4,
        )
    )
    cases.add(
        ml_case(
            "array_feature_extractor_negative",
            "ArrayFeatureExtractor",
            {"x": f32(2, 5), "i": np.array([[-1, 0], [2, -5]], np.int64)},
            {},
            1,
        )
    )


def _linear_preprocess(cases: CaseList) -> None:
    """The linear models and the preprocessing ops; onnxruntime is the oracle where it and
    onnx.reference disagree (see ml_linear.py and ml_preprocess.py)."""
    rng = np.random.default_rng(7)  # its own, so other families' draws do not move these

    def add(name: str, op: str, inputs: dict, attrs: dict, **extra) -> None:
        cases.add(ml_case(name, op, inputs, attrs, 1, **extra))

    x = rng.uniform(-2, 2, (6, 3)).astype(np.float32)
    x[0] = [0.2, 0.0, -1.0]  # only the zero-weight class scores >= 0: SOFTMAX_ZERO moves argmax
    weights = [0.0, 0.0, 0.0, 0.5, -0.25, 0.1, -0.3, 0.2, 0.4]
    multi = {
        "coefficients": weights,
        "intercepts": [0.0, -0.1, 0.2],
        "classlabels_ints": [10, 20, 30],
    }
    # PROBIT wants scores in (0, 1)
    probit = {"coefficients": [w / 10 for w in weights], "intercepts": [0.5, 0.4, 0.6]}

    def classifier(name: str, attrs: dict, x: np.ndarray, **extra) -> None:
        add(
            f"linear_classifier_{name}",
            "LinearClassifier",
            {"x": x},
            attrs,
            outputs=("label", "scores"),
            **extra,
        )

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
        attrs = {
            "coefficients": attrs["coefficients"][: 3 * targets],
            "intercepts": attrs["intercepts"][:targets],
            "targets": targets,
            "post_transform": transform,
        }
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
        add(
            f"normalizer_{norm.lower()}",
            "Normalizer",
            {"x": rows},
            {"norm": norm},
            reference=oracle,
        )
    # the reference keeps a double or integer input's type, the spec (onnxruntime) gives float
    add(
        "normalizer_l1_int64",
        "Normalizer",
        {"x": rows.astype(np.int64)},
        {"norm": "L1"},
        reference=ort_reference,
    )

    add("scaler_scalar", "Scaler", {"x": x}, {"offset": [0.5], "scale": [2.0]})
    per_feature = {"offset": [0.5, -1.0, 2.0], "scale": [2.0, 0.5, -3.0]}
    add("scaler_per_feature", "Scaler", {"x": x}, per_feature)
    add(
        "scaler_double", "Scaler", {"x": x.astype(np.float64)}, per_feature, reference=ort_reference
    )
    add(
        "scaler_int64",
        "Scaler",
        {"x": rng.integers(-5, 5, (3, 4))},
        {"offset": [0.5], "scale": [1.5]},
        reference=ort_reference,
    )

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
    add(
        "one_hot_encoder_float",
        "OneHotEncoder",
        {"x": floats},
        {"cats_int64s": [1, 3, 5, 7, -1]},
        reference=ort_reference,
    )
    add(
        "one_hot_encoder_repeated",
        "OneHotEncoder",
        {"x": codes},
        {"cats_int64s": [5, -1, 5, 3]},
        reference=ort_reference,
    )

    wide = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
    narrow = rng.uniform(-1, 1, (2, 1)).astype(np.float32)
    add(
        "feature_vectorizer_pad_cut",
        "FeatureVectorizer",
        {"a": wide, "b": narrow, "c": wide},
        {"inputdimensions": [2, 3, 4]},
    )
    # 1-D inputs are one row (onnxruntime); the reference makes them a column
    vectors = {"a": np.array([4, -2, 9], np.int64), "b": np.array([[1, 2]], np.int64)}
    add(
        "feature_vectorizer_1d_int64",
        "FeatureVectorizer",
        vectors,
        {"inputdimensions": [2, 3]},
        reference=ort_reference,
    )


# -- tree ensembles -----------------------------------------------------------------

# splits and inputs share these values, so ties (LEQ against LT, EQ hits) happen
TREE_GRID = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
BRANCH_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
NODE_FIELDS = (
    "treeids",
    "nodeids",
    "featureids",
    "modes",
    "values",
    "truenodeids",
    "falsenodeids",
    "missing_value_tracks_true",
)
# set members: integers in [1, 30] (onnxruntime truncates inputs for other sets and takes
# no fractions; onnx.reference ends a set at a 0, as if it were the NaN delimiter)
MEMBERS = np.array([1.0, 2.0, 3.0])
BRANCH_MEMBER = 6  # TreeEnsemble-5's nodes_modes code


def _tree_inputs(rng, rows: int, features: int, dtype=np.float32) -> np.ndarray:
    """Rows on the split grid and between its points, a tenth of the values NaN."""
    x = rng.choice(TREE_GRID, (rows, features)) + rng.choice([0.0, 0.25], (rows, features))
    x[rng.random((rows, features)) < 0.1] = np.nan
    return x.astype(dtype)


def _random_trees(rng, trees: int, depth: int, features: int, modes=BRANCH_MODES) -> dict:
    """TreeEnsembleRegressor/Classifier nodes_* lists of random trees up to `depth` tests
    deep (node ids per tree in pre-order); every root is a test."""
    nodes: dict[str, list] = {f"nodes_{field}": [] for field in NODE_FIELDS}

    def grow(tree: int, level: int, ids: list[int]) -> int:
        node, row = ids[0], len(nodes["nodes_treeids"])
        ids[0] += 1
        leaf = level == depth or (level > 0 and rng.random() < 0.2)
        values = (
            tree,
            node,
            int(rng.integers(features)),
            "LEAF" if leaf else str(rng.choice(modes)),
            float(rng.choice(TREE_GRID)),
            0,
            0,
            int(rng.random() < 0.5),
        )
        for field, value in zip(NODE_FIELDS, values):
            nodes[f"nodes_{field}"].append(value)
        if not leaf:
            nodes["nodes_truenodeids"][row] = grow(tree, level + 1, ids)
            nodes["nodes_falsenodeids"][row] = grow(tree, level + 1, ids)
        return node

    for tree in range(trees):
        grow(tree, 0, [0])
    return nodes


def _leaves(nodes: dict) -> list[tuple[int, int]]:
    """The (tree id, node id) of every leaf."""
    rows = zip(nodes["nodes_treeids"], nodes["nodes_nodeids"], nodes["nodes_modes"])
    return [(tree, node) for tree, node, mode in rows if mode == "LEAF"]


def _weights(prefix: str, entries: list[tuple[int, int, int, float]]) -> dict:
    """target_* / class_* lists from (tree, node, target, weight) entries."""
    columns = list(zip(*entries)) if entries else [[], [], [], []]
    names = (f"{prefix}_treeids", f"{prefix}_nodeids", f"{prefix}_ids", f"{prefix}_weights")
    return {name: list(column) for name, column in zip(names, columns)}


def _as_tree_ensemble(rng, nodes: dict, entries, dtype=np.float32, members=0.0) -> dict:
    """The same trees as TreeEnsemble-5 attributes (one target per leaf); a `members`
    share of the EQ tests become BRANCH_MEMBER tests of 1 to 3 MEMBERS."""
    inner = {}  # (tree, node) -> interior index
    for tree, node, mode in zip(
        nodes["nodes_treeids"], nodes["nodes_nodeids"], nodes["nodes_modes"]
    ):
        if mode != "LEAF":
            inner[tree, node] = len(inner)
    leaf_of = {(tree, node): j for j, (tree, node, _, _) in enumerate(entries)}
    attrs: dict[str, list] = {
        name: []
        for name in (
            "nodes_featureids",
            "nodes_modes",
            "nodes_splits",
            "nodes_truenodeids",
            "nodes_trueleafs",
            "nodes_falsenodeids",
            "nodes_falseleafs",
            "nodes_missing_value_tracks_true",
            "membership_values",
        )
    }
    for i, mode in enumerate(nodes["nodes_modes"]):
        if mode == "LEAF":
            continue
        tree = nodes["nodes_treeids"][i]
        code = BRANCH_MODES.index(mode)
        if mode == "BRANCH_EQ" and rng.random() < members:
            code = BRANCH_MEMBER
            size = rng.integers(1, 4)
            attrs["membership_values"] += [*rng.choice(MEMBERS, size, replace=False), np.nan]
        attrs["nodes_modes"].append(code)
        attrs["nodes_featureids"].append(nodes["nodes_featureids"][i])
        attrs["nodes_splits"].append(nodes["nodes_values"][i])
        attrs["nodes_missing_value_tracks_true"].append(nodes["nodes_missing_value_tracks_true"][i])
        for side in ("true", "false"):
            child = (tree, nodes[f"nodes_{side}nodeids"][i])
            attrs[f"nodes_{side}leafs"].append(int(child in leaf_of))
            target = leaf_of[child] if child in leaf_of else inner[child]
            attrs[f"nodes_{side}nodeids"].append(target)
    tensors = {"nodes_modes": np.uint8, "nodes_splits": dtype, "membership_values": dtype}
    for name, of in tensors.items():
        attrs[name] = numpy_helper.from_array(np.asarray(attrs[name], of))
    if not attrs["membership_values"].dims[0]:
        del attrs["membership_values"]
    attrs["tree_roots"] = [inner[tree, 0] for tree in sorted(set(nodes["nodes_treeids"]))]
    attrs["leaf_targetids"] = [target for _, _, target, _ in entries]
    weights = np.asarray([weight for _, _, _, weight in entries], dtype)
    attrs["leaf_weights"] = numpy_helper.from_array(weights)
    return attrs


def _ort_with_spec_post_transform(case: OnnxCase) -> list[np.ndarray]:
    """onnxruntime's outputs with TreeEnsemble's post_transform 1 and 2 swapped back:
    it reads 1 as LOGISTIC and 2 as SOFTMAX, the spec the other way round."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    for attr in model.graph.node[0].attribute:
        if attr.name == "post_transform" and attr.i in (1, 2):
            attr.i = 3 - attr.i
    return onnxruntime_outputs(model, case.inputs)


def _ort_first_column(case: OnnxCase) -> list[np.ndarray]:
    """onnxruntime's outputs for a two-class PROBIT classifier with one score: it leaves
    the second probability column unwritten, which aotc writes as 0."""
    label, scores = ort_reference(case)
    scores = scores.copy()
    scores[:, 1] = 0
    return [label, scores]


def _trees(cases: CaseList) -> None:
    rng = np.random.default_rng(2024)
    features, rows = 30, 64
    x = _tree_inputs(rng, rows, features)
    nodes = _random_trees(rng, 20, 8, features)
    leaves = _leaves(nodes)
    # onnx.reference's older tree ops send NaN by nodes_missing_value_tracks_true alone;
    # onnxruntime (and TreeEnsemble-5's reference) compares, so NaN != split holds: these
    # trees have no NEQ test, for the cases onnx.reference checks
    plain = _random_trees(rng, 20, 8, features, BRANCH_MODES[:5])
    plain_leaves = _leaves(plain)
    tol = {"rtol": 1e-5, "atol": 1e-5}

    def regressor(name, entries, attrs, trees=nodes, opset=3, data=x, without=(), **extra):
        attrs = trees | _weights("target", entries) | attrs
        attrs = {k: v for k, v in attrs.items() if k not in without}
        cases.add(
            ml_case(
                f"tree_regressor_{name}",
                "TreeEnsembleRegressor",
                {"x": data},
                attrs,
                opset,
                **(tol | extra),
            )
        )

    def classifier(name, entries, attrs, trees=nodes, data=x, **extra):
        attrs = trees | _weights("class", entries) | attrs
        cases.add(
            ml_case(
                f"tree_classifier_{name}",
                "TreeEnsembleClassifier",
                {"x": data},
                attrs,
                3,
                outputs=("label", "probabilities"),
                **(tol | extra),
            )
        )

    # one target, every leaf feeding it: onnx.reference and onnxruntime agree
    one = [(t, n, 0, float(rng.uniform(-1, 1))) for t, n in plain_leaves]
    for function in ("SUM", "AVERAGE", "MIN", "MAX"):
        attrs = {"n_targets": 1, "aggregate_function": function, "base_values": [0.5]}
        regressor(f"1_{function.lower()}", one, attrs, plain)
    regressor("1_opset1", one, {"n_targets": 1}, plain, opset=1)
    # the rest (all modes) against onnxruntime
    one = [(t, n, 0, float(rng.uniform(-1, 1))) for t, n in leaves]
    regressor(
        "1_probit", one, {"n_targets": 1, "post_transform": "PROBIT"}, reference=ort_reference
    )
    doubles = {
        "nodes_values_as_tensor": numpy_helper.from_array(np.asarray(nodes["nodes_values"])),
        "target_weights_as_tensor": numpy_helper.from_array(np.asarray([w for *_, w in one])),
    }
    regressor(
        "1_doubles",
        one,
        {"n_targets": 1} | doubles,
        data=x.astype(np.float64),
        without=("nodes_values", "target_weights"),
        reference=ort_reference,
    )
    # three targets, each leaf feeding some of them (none, several); a target no reached
    # leaf feeds is 0 in onnxruntime (onnx.reference: the base, or MIN/MAX's start)
    some = [
        (t, n, k, float(rng.uniform(-1, 1)))
        for t, n in leaves
        for k in range(3)
        if rng.random() < 0.6
    ]
    for function in ("SUM", "AVERAGE", "MIN", "MAX"):
        attrs = {"n_targets": 3, "aggregate_function": function, "base_values": [0.1, 0, -2]}
        regressor(f"3_{function.lower()}", some, attrs, reference=ort_reference)
    single = [(t, n, int(rng.integers(3)), float(rng.uniform(-1, 1))) for t, n in leaves]
    regressor("3_one_target_a_leaf", single, {"n_targets": 3}, reference=ort_reference)
    regressor(
        "3_logistic", some, {"n_targets": 3, "post_transform": "LOGISTIC"}, reference=ort_reference
    )

    # four classes, random-forest style (every leaf votes for every class, probabilities)
    labels = {"classlabels_int64s": [3, 7, 11, 5]}
    forest = [
        (t, n, k, float(w))
        for t, n in plain_leaves
        for k, w in enumerate(rng.dirichlet(np.ones(4)) / 20)
    ]
    for name in POST_TRANSFORMS:
        classifier(f"4_{name.lower()}", forest, labels | {"post_transform": name}, plain)
    # integers are compared as floats (onnxruntime has no integer tree regressor)
    ints = rng.integers(-1, 3, (rows, features)).astype(np.int64)
    classifier("4_int64", forest, labels, plain, data=ints)
    # boosting style: a tree per class, mixed weights, base values
    boosted = [(t, n, t % 4, float(rng.uniform(-1, 1))) for t, n in leaves]
    classifier(
        "4_boosted",
        boosted,
        labels | {"base_values": [0.1, -0.2, 0.3, 0.0], "post_transform": "SOFTMAX"},
        reference=ort_reference,
    )
    # some classes unfed on some rows: the label is the best fed class (onnxruntime)
    sparse = [e for e in some if e[2] < 3] + [(t, n, 3, -0.5) for t, n in leaves[::7]]
    classifier("4_unfed", sparse, labels, reference=ort_reference)

    # two classes, by onnxruntime's rules (see ml_tree_ops._two_classes)
    two = {"classlabels_int64s": [4, 9]}
    forest_one = [(t, n, 0, float(rng.uniform(0.01, 0.99)) / 20) for t, n in leaves]
    boosted_one = [(t, n, 0, float(rng.uniform(-1, 1))) for t, n in leaves]
    for name in POST_TRANSFORMS:
        # PROBIT: onnxruntime's erfinv takes pi as 3.14159f, 3e-5 off near probit(0.5)
        extra = {"reference": _ort_first_column, "atol": 1e-4} if name == "PROBIT" else {}
        extra = {"reference": ort_reference} | extra
        classifier(f"2_forest_{name.lower()}", forest_one, two | {"post_transform": name}, **extra)
        classifier(
            f"2_boosted_{name.lower()}",
            boosted_one,
            two | {"post_transform": name, "base_values": [0.25]},
            **extra,
        )
    both = [(t, n, k, float(rng.uniform(0.01, 0.99)) / 20) for t, n in leaves for k in (0, 1)]
    classifier(
        "2_both_two_bases",
        both,
        two | {"base_values": [0.1, 0.2], "post_transform": "LOGISTIC"},
        reference=ort_reference,
    )
    unfed_one = [(t, n, 1, w) for t, n, _, w in forest_one[::2]]
    classifier("2_class1_unfed", unfed_one, two, reference=ort_reference)
    classifier(
        "2_class1_unfed_softmax",
        unfed_one,
        two | {"post_transform": "SOFTMAX"},
        reference=ort_reference,
    )

    # TreeEnsemble-5: the same trees, two targets (tree t feeds target t % 2), half the
    # EQ tests as set membership
    entries = [(t, n, t % 2, float(rng.uniform(-1, 1))) for t, n in leaves]
    v5 = _as_tree_ensemble(rng, nodes, entries, members=0.5) | {"n_targets": 2}
    for function in range(4):
        cases.add(
            ml_case(
                f"tree_ensemble_5_aggregate{function}",
                "TreeEnsemble",
                {"x": x},
                v5 | {"aggregate_function": function},
                5,
                **tol,
            )
        )
    for transform in range(1, 5):  # onnx.reference ignores post_transform
        cases.add(
            ml_case(
                f"tree_ensemble_5_post_transform{transform}",
                "TreeEnsemble",
                {"x": x},
                v5 | {"post_transform": transform},
                5,
                reference=_ort_with_spec_post_transform,
                **tol,
            )
        )
    v5_doubles = _as_tree_ensemble(rng, nodes, entries, np.float64, members=0.5)
    cases.add(
        ml_case(
            "tree_ensemble_5_double",
            "TreeEnsemble",
            {"x": x.astype(np.float64)},
            v5_doubles | {"n_targets": 2},
            5,
            **tol,
        )
    )


# the kernels with their kernel_params (gamma, coef0, degree)
SVM_KERNELS = {
    "LINEAR": [0.0, 0.0, 0.0],
    "POLY": [0.4, 0.5, 3.0],
    "RBF": [0.3, 0.0, 0.0],
    "SIGMOID": [0.2, 0.1, 0.0],
}


def _svm_regressors(cases: CaseList, x: np.ndarray) -> None:
    vectors = f32(5, x.shape[1])
    model = {
        "support_vectors": vectors.ravel().tolist(),
        "n_supports": 5,
        "coefficients": f32(5).tolist(),
        "rho": [0.25],
    }
    for kernel, params in SVM_KERNELS.items():
        attrs = model | {"kernel_type": kernel, "kernel_params": params}
        cases.add(ml_case(f"svm_regressor_{kernel.lower()}", "SVMRegressor", {"x": x}, attrs, 1))
    rbf = model | {"kernel_type": "RBF", "kernel_params": SVM_KERNELS["RBF"]}
    cases.add(
        ml_case(
            "svm_regressor_one_class",
            "SVMRegressor",
            {"x": x},
            rbf | {"one_class": 1, "rho": [-0.45]},
            1,
        )
    )
    # no support vectors: the coefficients are a linear model's weights
    linear = {"coefficients": f32(x.shape[1]).tolist(), "rho": [0.5], "n_supports": 0}
    cases.add(ml_case("svm_regressor_no_support_vectors", "SVMRegressor", {"x": x}, linear, 1))
    # onnxruntime leaves the value alone (onnx.reference refuses it)
    cases.add(
        ml_case(
            "svm_regressor_post_transform_ignored",
            "SVMRegressor",
            {"x": x},
            rbf | {"post_transform": "LOGISTIC"},
            1,
            reference=ort_reference,
        )
    )
    # features far from 0 relative to their spread: |x - s|^2 must not cancel in float32
    offset = 50 + f32(*x.shape, low=-1, high=1)
    far = rbf | {
        "support_vectors": (50 + vectors / 2).ravel().tolist(),
        "kernel_params": [0.5, 0.0, 0.0],
    }
    cases.add(
        ml_case(
            "svm_regressor_rbf_offset_features", "SVMRegressor", {"x": offset}, far, 1, atol=1e-5
        )
    )


def _svm_classifier(name: str, x: np.ndarray, attrs: dict, **extra) -> OnnxCase:
    """An SVMClassifier case (label and scores) checked against onnxruntime, which this
    follows where onnx.reference differs (binary scores and labels, pairwise coupling)."""
    return ml_case(
        name,
        "SVMClassifier",
        {"x": x},
        attrs,
        1,
        outputs=("label", "scores"),
        reference=ort_reference,
        **extra,
    )


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
    return {
        "prob_a": f32(pairs, low=-3, high=-0.5).tolist(),
        "prob_b": f32(pairs, low=-0.3, high=0.3).tolist(),
    }


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
    cases.add(
        _svm_classifier("svm_classifier_3class_probabilities", x, three | _platt(3), atol=1e-5)
    )
    cases.add(
        _svm_classifier(
            "svm_classifier_2class_probabilities_logistic",
            x,
            two | _platt(1) | {"post_transform": "LOGISTIC"},
            atol=1e-5,
        )
    )
    # rows at and next to support vectors around 30: the kernel's largest
    # values, where |x|^2 - 2 x.s + |s|^2 cancels most (ml_svm.py centres it)
    # (its own generator: the shared one's draws stay those of the cases after it)
    nudges = np.random.default_rng(7).uniform(-1e-3, 1e-3, (6, features)).astype(np.float32)
    vectors = np.asarray(three["support_vectors"], np.float32).reshape(-1, features) * 4 + 30
    near = three | {
        "support_vectors": vectors.ravel().tolist(),
        "kernel_params": [0.8, 0.0, 0.0],
        "prob_a": [-1.5, -2.0, -0.8],
        "prob_b": [0.1, -0.2, 0.05],
    }
    rows = np.concatenate([vectors, vectors + nudges])
    cases.add(_svm_classifier("svm_classifier_rbf_at_support_vectors", rows, near, atol=1e-5))
    cases.add(
        _svm_classifier(
            "svm_classifier_int64_input",
            ints(4, features, low=-2, high=3),
            _one_vs_one([1, 2, 2], features, "POLY"),
        )
    )
    cases.add(_svm_classifier("svm_classifier_vector_input", x[0], three))
    # no support vectors: one linear model per class; two classes choose their label
    # their own way, which depends on whether every coefficient is >= 0
    for name, weights in (("mixed", f32(2 * features)), ("positive", f32(2 * features, low=0))):
        attrs = {
            "classlabels_ints": [2, 7],
            "coefficients": weights.tolist(),
            "rho": [-0.2],
            "kernel_params": [0.0, 0.0, 0.0],
        }
        cases.add(_svm_classifier(f"svm_classifier_linear_2class_{name}", x, attrs))
    linear = {
        "classlabels_ints": [1, 5, 6],
        "coefficients": f32(3 * features).tolist(),
        "rho": [0.3],
        "kernel_params": [0.0, 0.0, 0.0],
        "post_transform": "SOFTMAX",
    }
    cases.add(_svm_classifier("svm_classifier_linear_3class_softmax", x, linear))
    # one class: onnxruntime applies only PROBIT to its single column
    probit = {
        "classlabels_ints": [4],
        "coefficients": f32(features, low=-0.2, high=0.2).tolist(),
        "rho": [0.5],
        "kernel_params": [0.0, 0.0, 0.0],
        "post_transform": "PROBIT",
    }
    cases.add(_svm_classifier("svm_classifier_linear_1class_probit", x, probit))


def _svms(cases: CaseList) -> None:
    x = f32(6, 4)
    _svm_regressors(cases, x)
    _svm_classifiers(cases, x)


ML_FAMILIES = (_encoders_trees, _linear_preprocess, _trees, _svms)
