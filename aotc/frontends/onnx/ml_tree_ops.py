"""The ai.onnx.ml tree-ensemble ops: TreeEnsemble-5, and TreeEnsembleRegressor and
TreeEnsembleClassifier (opsets 1 and 3; 3 adds the `*_as_tensor` attributes).

Each converts its attributes into a `ml_trees.TreeSpec`, evaluates it with
`ml_trees` and finishes the scores as onnxruntime does where onnx.reference
differs (it implements no post_transform for regressors and TreeEnsemble):

- NaN is compared like any value (so it passes a NEQ test), and also takes the
  true branch where nodes_missing_value_tracks_true says so (onnx.reference's
  older ops send it by that flag alone; its TreeEnsemble-5 agrees with this);
- a target that no reached leaf feeds scores 0 (onnx.reference: the MIN/MAX
  start value, and the base value), except that with one target the base is
  added anyway;
- the classifier's label is the first best class among those some reached leaf
  fed, before post_transform; its rules for two classes are in `_two_classes`.

Two onnxruntime bugs are not followed: it ignores post_transform other than
PROBIT when there is one target, and TreeEnsemble-5 swaps post_transform 1 and 2
(SOFTMAX and LOGISTIC); aotc applies the transform the spec names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DType, Instruction, Op, Shape
from .dtypes import tensor_to_array
from .helpers import Formula, full
from .ml import ML
from .ml_scores import post_transform, post_transform_name, probit
from .ml_trees import (
    AGGREGATES,
    COMPARES,
    LEAF,
    MEMBER,
    TargetScores,
    TreeSpec,
    aggregate,
    build_forest,
    lookup,
    reached_leaves,
)
from .reduce import arg_reducer
from .registry import NodeContext, onnx_op

# TreeEnsemble-5 spells aggregate_function as an index into this tuple
AGGREGATE_NAMES = ("AVERAGE", "SUM", "MIN", "MAX")

# the older ops' nodes_modes names -> mode
MODE_NAMES = {
    "BRANCH_LEQ": COMPARES.index(Direction.LE),
    "BRANCH_LT": COMPARES.index(Direction.LT),
    "BRANCH_GTE": COMPARES.index(Direction.GE),
    "BRANCH_GT": COMPARES.index(Direction.GT),
    "BRANCH_EQ": COMPARES.index(Direction.EQ),
    "BRANCH_NEQ": COMPARES.index(Direction.NE),
    "LEAF": LEAF,
}


def _ints(ctx: NodeContext, name: str) -> np.ndarray:
    return np.asarray(ctx.attr(name) or [], dtype=np.int64)


def _tensor(ctx: NodeContext, name: str) -> np.ndarray:
    array, _ = tensor_to_array(ctx.required_attr(name), f"attribute '{name}'", ctx.arrays)
    return array.reshape(-1)


def _floats(ctx: NodeContext, name: str) -> tuple[np.ndarray, DType]:
    """A float list attribute or its `_as_tensor` twin (opset 3: doubles), as float64."""
    tensor = ctx.attr(f"{name}_as_tensor")
    listed = ctx.attr(name) or []
    if tensor is None:
        return np.asarray(listed, np.float64), DType.F32
    if listed:
        raise ModelError(f"both '{name}' and '{name}_as_tensor' are given")
    array, dtype = tensor_to_array(tensor, f"attribute '{name}_as_tensor'", ctx.arrays)
    return array.reshape(-1).astype(np.float64), dtype


def _precision(*dtypes: DType) -> DType:
    """The type splits are compared and weights summed in: double if the input or a
    table is, else float (as onnxruntime: an integer input is compared as float)."""
    return DType.F64 if DType.F64 in dtypes else DType.F32


def _rows(b: ComputationBuilder, x: Instruction) -> Instruction:
    """The input as (rows, features); a vector is one row."""
    if x.array_shape.rank == 1:
        return b.reshape(x, [1, x.array_shape.dims[0]])
    if x.array_shape.rank != 2:
        raise ShapeError(f"input must be N x features, got {list(x.array_shape.dims)}")
    return x


def _only_fed(b: ComputationBuilder, scores: TargetScores, values: Instruction) -> Instruction:
    """`values` where a reached leaf fed the target, else 0 (what onnxruntime writes)."""
    if scores.fed_always.all():
        return values
    return b.select(
        scores.fed, values, full(b, 0, values.array_shape.dtype, values.array_shape.dims)
    )


def _plus(b: ComputationBuilder, x: Instruction, base: np.ndarray) -> Instruction:
    """x (rows, targets) + base (per target)."""
    if not base.size:
        return x
    return b.binary(
        Op.ADD, x, b.broadcast(b.constant(base, x.array_shape.dtype), [1], x.array_shape.dims)
    )


# -- TreeEnsemble-5 -----------------------------------------------------------------


def _member_sets(ctx: NodeContext, modes: np.ndarray) -> dict[int, np.ndarray]:
    """Each BRANCH_MEMBER node's set: membership_values split at NaNs, in node order."""
    member_nodes = np.flatnonzero(modes == MEMBER)
    if not member_nodes.size:
        return {}
    values = _tensor(ctx, "membership_values").astype(np.float64)
    ends = np.flatnonzero(np.isnan(values))
    groups = np.split(values, ends)
    groups = [groups[0], *(g[1:] for g in groups[1:])]  # drop each delimiter
    if not groups[-1].size and len(ends):
        groups.pop()  # the values end with a delimiter
    if len(groups) != len(member_nodes):
        raise ModelError(
            f"membership_values holds {len(groups)} sets for "
            f"{len(member_nodes)} BRANCH_MEMBER nodes"
        )
    return dict(zip(member_nodes.tolist(), groups))


def _v5_spec(ctx: NodeContext) -> TreeSpec:
    """TreeEnsemble-5's trees: interior nodes 0..n-1, then its leaves as nodes n + j."""
    features = _ints(ctx, "nodes_featureids")
    modes = _tensor(ctx, "nodes_modes").astype(np.int64)
    splits = _tensor(ctx, "nodes_splits").astype(np.float64)
    true_ids, false_ids = _ints(ctx, "nodes_truenodeids"), _ints(ctx, "nodes_falsenodeids")
    true_leaf = _ints(ctx, "nodes_trueleafs") != 0
    false_leaf = _ints(ctx, "nodes_falseleafs") != 0
    inner = len(features)
    missing = _ints(ctx, "nodes_missing_value_tracks_true")
    if not missing.size:
        missing = np.zeros(inner, np.int64)
    columns = (modes, splits, true_ids, false_ids, true_leaf, false_leaf, missing)
    if any(len(c) != inner for c in columns):
        raise ModelError("the nodes_* attributes differ in length")
    leaf_targets, weights = _ints(ctx, "leaf_targetids"), _tensor(ctx, "leaf_weights")
    leaves = len(leaf_targets)
    if len(weights) != leaves:
        raise ModelError("leaf_targetids and leaf_weights differ in length")
    for name, ids, is_leaf in (("true", true_ids, true_leaf), ("false", false_ids, false_leaf)):
        bad = (ids < 0) | (ids >= np.where(is_leaf, leaves, inner))
        if bad.any():
            node = int(np.flatnonzero(bad)[0])
            kind = "leaf" if is_leaf[node] else "node"
            raise ModelError(f"node {node}'s {name} branch names {kind} {ids[node]}, out of range")
    roots = _ints(ctx, "tree_roots")
    if roots.size and not (roots.min() >= 0 and roots.max() < inner):
        raise ModelError("a tree root is out of range")
    # a root whose branches both name one leaf is a tree that is one leaf; onnx.reference
    # and onnxruntime both take leaf number `root` there (not the leaf the branches name)
    alone = true_leaf[roots] & false_leaf[roots] & (true_ids[roots] == false_ids[roots])
    if (roots[alone] >= leaves).any():
        raise ModelError("a one-leaf tree's root has no leaf of its number")
    zeros = np.zeros(leaves, np.int64)
    return TreeSpec(
        modes=np.concatenate([modes, np.full(leaves, LEAF)]),
        features=np.concatenate([features, zeros]),
        splits=np.concatenate([splits, zeros]),
        missing_true=np.concatenate([missing != 0, zeros != 0]),
        true_ids=np.concatenate([np.where(true_leaf, inner + true_ids, true_ids), zeros]),
        false_ids=np.concatenate([np.where(false_leaf, inner + false_ids, false_ids), zeros]),
        roots=np.where(alone, inner + roots, roots),
        members=_member_sets(ctx, modes),
        entry_nodes=inner + np.arange(leaves),
        entry_targets=leaf_targets,
        entry_weights=weights.astype(np.float64),
        targets=int(ctx.required_attr("n_targets")),
    )


@onnx_op("TreeEnsemble", domain=ML, since=5)
def tree_ensemble(ctx: NodeContext, x: Instruction) -> Instruction:
    b = ctx.b
    if x.array_shape.rank != 2:
        raise ShapeError(f"input must be N x features, got {list(x.array_shape.dims)}")
    function = ctx.attr("aggregate_function")
    if function not in range(len(AGGREGATE_NAMES)):
        raise ModelError(f"unknown aggregate_function {function}")
    function = AGGREGATE_NAMES[function]
    spec = _v5_spec(ctx)
    spec.check(x.array_shape.dims[1])
    dtype = x.array_shape.dtype
    precision = _precision(dtype)
    forest = build_forest(spec, AGGREGATES[function])
    scores = aggregate(b, reached_leaves(b, x, forest, precision), forest, function, precision)
    # the spec's numbering (onnxruntime swaps 1 and 2, SOFTMAX and LOGISTIC)
    name = post_transform_name(ctx)
    return b.convert(post_transform(b, _only_fed(b, scores, scores.values), name), dtype)


# -- TreeEnsembleRegressor and TreeEnsembleClassifier ---------------------------------


def _legacy_spec(ctx: NodeContext, prefix: str, targets: int) -> tuple[TreeSpec, DType]:
    """The older ops' trees (nodes named by tree id and node id) and the type of their
    tables; `prefix` names the weights ("target" or "class")."""
    tree_ids, node_ids = _ints(ctx, "nodes_treeids"), _ints(ctx, "nodes_nodeids")
    names = ctx.attr("nodes_modes") or []
    unknown = sorted(set(names) - set(MODE_NAMES))
    if unknown:
        raise ModelError(f"unknown nodes_modes {unknown}")
    modes = np.asarray([MODE_NAMES[n] for n in names], np.int64)
    splits, split_dtype = _floats(ctx, "nodes_values")
    weights, weight_dtype = _floats(ctx, f"{prefix}_weights")
    missing = _ints(ctx, "nodes_missing_value_tracks_true")
    if not missing.size:
        missing = np.zeros(len(modes), np.int64)
    features = _ints(ctx, "nodes_featureids")
    true_ids, false_ids = _ints(ctx, "nodes_truenodeids"), _ints(ctx, "nodes_falsenodeids")
    columns = (tree_ids, node_ids, features, splits, missing, true_ids, false_ids)
    if any(len(c) != len(modes) for c in columns):
        raise ModelError("the nodes_* attributes differ in length")
    entries = [
        _ints(ctx, f"{prefix}_treeids"),
        _ints(ctx, f"{prefix}_nodeids"),
        _ints(ctx, f"{prefix}_ids"),
    ]
    if any(len(c) != len(weights) for c in entries):
        raise ModelError(f"the {prefix}_* attributes differ in length")
    locate = _node_locator(tree_ids, node_ids)
    branch = modes != LEAF

    def children(ids: np.ndarray) -> np.ndarray:  # a leaf's are ignored
        found = np.zeros(len(ids), np.int64)
        found[branch] = locate(tree_ids[branch], ids[branch], "a branch")
        return found

    _, firsts = np.unique(tree_ids, return_index=True)  # a tree's root: its first node
    spec = TreeSpec(
        modes,
        features,
        splits,
        missing != 0,
        children(true_ids),
        children(false_ids),
        np.sort(firsts),
        {},
        locate(entries[0], entries[1], f"a {prefix} weight"),
        entries[2],
        weights,
        targets,
    )
    return spec, _precision(split_dtype, weight_dtype)


def _node_locator(tree_ids: np.ndarray, node_ids: np.ndarray):
    """(tree ids, node ids) -> the nodes' positions, refusing names of no node."""
    if (node_ids < 0).any():
        raise ModelError("a node id is negative")
    span = int(node_ids.max()) + 1 if node_ids.size else 1
    keys = tree_ids * span + node_ids
    order = np.argsort(keys, kind="stable")
    known = keys[order]
    if (known[1:] == known[:-1]).any():
        raise ModelError("two nodes share a tree id and node id")

    def locate(trees: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
        wanted = trees * span + ids
        at = np.minimum(np.searchsorted(known, wanted), max(len(known) - 1, 0))
        found = np.zeros(len(ids), bool)
        if known.size:
            found = (ids >= 0) & (ids < span) & (known[at] == wanted)
        if not found.all():
            i = int(np.flatnonzero(~found)[0])
            raise ModelError(f"{what} names node {ids[i]} of tree {trees[i]}, which does not exist")
        return order[at]

    return locate


def _legacy_scores(ctx: NodeContext, x: Instruction, prefix: str, targets: int, function: str):
    """The trees of a TreeEnsembleRegressor/Classifier evaluated on x's rows."""
    spec, table_dtype = _legacy_spec(ctx, prefix, targets)
    spec.check(x.array_shape.dims[1])
    precision = _precision(x.array_shape.dtype, table_dtype)
    forest = build_forest(spec, AGGREGATES[function])
    leaves = reached_leaves(ctx.b, x, forest, precision)
    return aggregate(ctx.b, leaves, forest, function, precision)


def _base_values(ctx: NodeContext, allowed: tuple[int, ...]) -> np.ndarray:
    base, _ = _floats(ctx, "base_values")
    if len(base) not in allowed:
        counts = " or ".join(str(n) for n in allowed)
        raise ModelError(f"base_values has {len(base)} values; expected {counts}")
    return base


@onnx_op("TreeEnsembleRegressor", domain=ML, since=1, until=4)
def tree_ensemble_regressor(ctx: NodeContext, x: Instruction) -> Instruction:
    b = ctx.b
    x = _rows(b, x)
    targets = ctx.attr("n_targets")
    if targets is None or targets < 1:
        raise ModelError(f"n_targets must be a positive count, got {targets}")
    function = ctx.choice("aggregate_function", tuple(AGGREGATES))
    base = _base_values(ctx, (0, targets))
    scores = _legacy_scores(ctx, x, "target", targets, function)
    if targets == 1:  # onnxruntime's one-target path adds the base even where unfed
        y = _plus(b, _only_fed(b, scores, scores.values), base)
    else:
        y = _only_fed(b, scores, _plus(b, scores.values, base))
    return b.convert(post_transform(b, y, post_transform_name(ctx)), DType.F32)


def _class_labels(ctx: NodeContext) -> np.ndarray:
    if ctx.attr("classlabels_strings"):
        raise UnsupportedError("string class labels are not supported (aotc has no string type)")
    labels = ctx.attr("classlabels_int64s")
    if not labels:
        raise ModelError("TreeEnsembleClassifier has no classlabels_int64s")
    if len(labels) < 2:
        raise UnsupportedError("a classifier with one class label is not supported")
    return np.asarray(labels, np.int64)


@onnx_op("TreeEnsembleClassifier", domain=ML, since=1, until=4)
def tree_ensemble_classifier(ctx: NodeContext, x: Instruction) -> list[Instruction]:
    b = ctx.b
    x = _rows(b, x)
    labels = _class_labels(ctx)
    classes = len(labels)
    base = _base_values(ctx, (0, 1, 2) if classes == 2 else (0, classes))
    scores = _legacy_scores(ctx, x, "class", classes, "SUM")
    name = post_transform_name(ctx)
    if classes > 2:
        label, probabilities = _many_classes(b, scores, base, labels, name)
    else:
        class_ids = set(_ints(ctx, "class_ids").tolist())
        weights, _ = _floats(ctx, "class_weights")
        rule = BinaryRule(len(class_ids) == 1, bool((weights >= 0).all()), len(base))
        label, probabilities = _two_classes(b, scores, base, labels, name, rule)
    return [label, b.convert(probabilities, DType.F32)]


def _first_best(b: ComputationBuilder, x: Instruction) -> Instruction:
    """s64 (rows,): each row's first largest column."""
    dtype = x.array_shape.dtype
    reducer = arg_reducer(b.module, dtype, Direction.GT, last=False)
    index = b.iota(Shape(DType.S64, x.array_shape.dims), 1)
    inits = [b.scalar(-np.inf, dtype), b.scalar(0, DType.S64)]
    both = b.add(Op.REDUCE, [x, index, *inits], dimensions=(1,), called=(reducer,))
    return b.get_tuple_element(both, 1)


def _many_classes(
    b: ComputationBuilder, scores: TargetScores, base: np.ndarray, labels: np.ndarray, name: str
) -> tuple[Instruction, Instruction]:
    """More than two classes: the label of the first best class some reached leaf fed
    (a base value counts as fed), and the scores transformed."""
    values = _plus(b, scores.values, base)
    if base.size:
        return _label_of_best(b, values, labels), post_transform(b, values, name)
    dims = values.array_shape.dims
    candidates = values
    if not scores.fed_always.all():
        candidates = b.select(scores.fed, values, full(b, -np.inf, values.array_shape.dtype, dims))
    written = _only_fed(b, scores, values)
    return _label_of_best(b, candidates, labels), post_transform(b, written, name)


def _label_of_best(b: ComputationBuilder, values: Instruction, labels: np.ndarray):
    return lookup(b, b.constant(labels, DType.S64), _first_best(b, values))


@dataclass(frozen=True)
class BinaryRule:
    """What onnxruntime's two-class rules depend on: whether one class id carries every
    weight, whether no weight is negative, and how many base values there are."""

    binary: bool
    positive: bool
    bases: int


def _pick(b: ComputationBuilder, flag: bool | Instruction, yes: Instruction, no: Instruction):
    """yes where `flag` (a constant, or a pred column broadcast along the rows) holds."""
    if isinstance(flag, bool):
        return yes if flag else no
    return b.select(b.broadcast_to(flag, yes.array_shape.dims), yes, no)


def _two_classes(
    b: ComputationBuilder,
    scores: TargetScores,
    base: np.ndarray,
    labels: np.ndarray,
    name: str,
    rule: BinaryRule,
) -> tuple[Instruction, Instruction]:
    """Two classes, by onnxruntime's rules (onnx.reference copies column 0 into column 1
    and argmaxes instead).  With s0, s1 the classes' sums and "fed" as above:

    - base values: two -> when class 1 was fed, class 1 scores base[1] + s0 and class 0
      its negation (0 if unfed), else class 0 scores s0 + base[0] (0 if unfed) and
      class 1 nothing; one -> class 0 scores s0 + base[0] (0 if unfed);
    - the label: by p = class 1's score if fed, else class 0's: with one class id,
      classlabels[p > 0.5] if no weight is negative else classlabels[p > 0]; with two,
      1 if p > 0 else 0 (onnxruntime's own positive and negative labels);
    - the scores: post_transform of both where two are written (two base values, or
      class 1 fed); else from class 0's score c: PROBIT -> [probit(c), 0]; with two
      class ids and base values -> [c, 0]; else LOGISTIC -> [logistic(-c), logistic(c)],
      and the other transforms none: [1 - c, c] with one class id and no negative
      weight, else [-c, c].  (Where onnxruntime leaves the second column unwritten,
      aotc writes 0.)
    """
    rows = scores.values.array_shape.dims[0]
    s0 = b.slice(scores.values, [0, 0], [rows, 1])
    s1 = b.slice(scores.values, [0, 1], [rows, 2])
    fed0, fed1 = scores.fed_at(b, 0), scores.fed_at(b, 1)
    f = Formula(b, s0)
    zero = f.k(0)
    if rule.bases == 2:
        shifted = f.add(s0, base[1])
        own = _pick(b, fed0, f.add(s0, base[0]), zero)
        c0 = _pick(b, fed1, _pick(b, fed0, f.sub(0, shifted), zero), own)
        c1 = _pick(b, fed1, shifted, zero)
        two: bool | Instruction = True
    else:
        c0 = _pick(b, fed0, f.add(s0, base[0]), zero) if rule.bases else s0
        c1, two = s1, fed1
    positive = _pick(b, fed1, c1, c0)
    cut = 0.5 if rule.binary and rule.positive else 0.0
    wins = b.compare(positive, f.k(cut), Direction.GT)
    chosen = labels if rule.binary else np.array([0, 1], np.int64)
    label = b.select(
        wins,
        full(b, chosen[1], DType.S64, wins.array_shape.dims),
        full(b, chosen[0], DType.S64, wins.array_shape.dims),
    )
    label = b.reshape(label, [rows])
    both = post_transform(b, b.concatenate([c0, c1], 1), name)
    if two is True:
        return label, both
    alone = _one_score(b, c0, name, rule)
    return label, alone if two is False else _pick(b, two, both, alone)


def _one_score(b: ComputationBuilder, c: Instruction, name: str, rule: BinaryRule):
    """The two columns onnxruntime writes from class 0's score alone (see _two_classes)."""
    f = Formula(b, c)
    if name == "PROBIT":
        columns = [probit(b, c), f.k(0)]
    elif rule.bases and not rule.binary:
        columns = [c, f.k(0)]
    elif name == "LOGISTIC":
        columns = [b.unary(Op.LOGISTIC, f.sub(0, c)), b.unary(Op.LOGISTIC, c)]
    elif rule.binary and rule.positive:
        columns = [f.sub(1, c), c]
    else:
        columns = [f.sub(0, c), c]
    return b.concatenate(columns, 1)
