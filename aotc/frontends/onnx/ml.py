"""Numeric ops of the ai.onnx.ml domain: Binarizer, ArrayFeatureExtractor,
LabelEncoder (numeric keys and values) and TreeEnsemble.

aotc has no string type, so string inputs, keys and values are refused.  A tree
ensemble's structure is static, so it lowers to a fixed computation: every
node's test at once, then matrix products that decide which root-to-leaf route
each row takes and sum (or min/max) the leaves' weights per target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import (
    ComputationBuilder,
    Direction,
    DotDims,
    DType,
    GatherDims,
    Instruction,
    Op,
    scalar_reducer,
)
from .dtypes import tensor_to_array
from .helpers import Formula, full, full_like
from .registry import NodeContext, onnx_op

ML = "ai.onnx.ml"


@onnx_op("Binarizer", domain=ML, since=1)
def binarizer(ctx: NodeContext, x: Instruction) -> Instruction:
    f = Formula(ctx.b, x)
    threshold = ctx.attr("threshold")
    if not x.shape.dtype.is_float:
        threshold = math.floor(threshold)  # for integers, x > t exactly when x > floor(t)
    return f.where(x, Direction.GT, threshold, 1, 0)


def take_last(b: ComputationBuilder, x: Instruction, indices: Instruction) -> Instruction:
    """x[..., indices] for a (K,) integer index vector: shape x.dims[:-1] + (K,)."""
    rank = x.shape.rank
    dims = GatherDims(
        offset_dims=tuple(range(rank - 1)),
        collapsed_slice_dims=(rank - 1,),
        start_index_map=(rank - 1,),
        index_vector_dim=1,
        slice_sizes=(*x.shape.dims[:-1], 1),
    )
    return b.gather(x, b.reshape(indices, [indices.shape.size, 1]), dims)


@onnx_op("ArrayFeatureExtractor", domain=ML, since=1)
def array_feature_extractor(ctx: NodeContext, x: Instruction, indices: Instruction):
    """x[..., indices] with the indices flattened; a vector is taken as one row."""
    b = ctx.b
    if indices.shape.dtype.is_float:
        raise ModelError("indices must be integers")
    if x.shape.rank == 1:
        x = b.reshape(x, [1, x.shape.dims[0]])
    flat = b.convert(b.reshape(indices, [indices.shape.size]), DType.S64)
    # negative indices count from the end, as numpy's
    size = full_like(b, x.shape.dims[-1], flat)
    negative = b.compare(flat, full_like(b, 0, flat), Direction.LT)
    flat = b.select(negative, b.binary(Op.ADD, flat, size), flat)
    return take_last(b, x, flat)


# -- LabelEncoder -----------------------------------------------------------------

# the list attributes that may hold a LabelEncoder's keys or values, and their types
LABEL_LISTS: dict[str, dict[str, DType]] = {
    "keys": {"keys_int64s": DType.S64, "keys_floats": DType.F32},
    "values": {"values_int64s": DType.S64, "values_floats": DType.F32},
}


def _label_list(ctx: NodeContext, role: str) -> tuple[np.ndarray, DType]:
    """The keys or values of a LabelEncoder, from the list or tensor attribute."""
    if ctx.attr(f"{role}_strings"):
        raise UnsupportedError(f"string {role} are not supported (aotc has no string type)")
    tensor = ctx.attr(f"{role}_tensor")
    if tensor is not None:
        return tensor_to_array(tensor, f"attribute '{role}_tensor'")
    for name, dtype in LABEL_LISTS[role].items():
        if ctx.attr(name):
            return np.asarray(ctx.attr(name), dtype=dtype.numpy), dtype
    raise ModelError(f"LabelEncoder has no {role}")


@onnx_op("LabelEncoder", domain=ML, since=2)
def label_encoder(ctx: NodeContext, x: Instruction) -> Instruction:
    """values[i] where x == keys[i] (the first such i), else the default."""
    b = ctx.b
    keys, key_dtype = _label_list(ctx, "keys")
    values, value_dtype = _label_list(ctx, "values")
    if keys.size != values.size:
        raise ModelError(f"{keys.size} keys but {values.size} values")
    if x.shape.dtype is not key_dtype:
        raise ModelError(f"input type {x.shape.dtype.text} differs from the keys' {key_dtype.text}")
    if ctx.attr("default_tensor") is not None:
        default, _ = tensor_to_array(ctx.attr("default_tensor"), "attribute 'default_tensor'")
        default = default.reshape(-1)[0]
    else:
        default = ctx.attr("default_float" if value_dtype.is_float else "default_int64")
    out = full(b, default, value_dtype, x.shape.dims)
    # the last select wins, so go backwards for the first matching key to win
    for key, value in reversed(list(zip(keys.reshape(-1), values.reshape(-1)))):
        if key_dtype.is_float and np.isnan(key):
            hit = b.compare(x, x, Direction.NE)  # a NaN key maps NaN inputs
        else:
            hit = b.compare(x, full_like(b, key, x), Direction.EQ)
        out = b.select(hit, full(b, value, value_dtype, x.shape.dims), out)
    return out


# -- TreeEnsemble -----------------------------------------------------------------

# nodes_modes values -> the comparison x[feature] <op> split (6 is set membership)
BRANCH_MODES = {
    0: Direction.LE,
    1: Direction.LT,
    2: Direction.GE,
    3: Direction.GT,
    4: Direction.EQ,
    5: Direction.NE,
}
BRANCH_MEMBER = 6
AGGREGATES = {0: "average", 1: "sum", 2: "min", 3: "max"}


@dataclass(frozen=True)
class Route:
    """One root-to-leaf path: the leaf, and each node's required outcome on the way."""

    leaf: int
    tests: tuple[tuple[int, bool], ...]


@dataclass(frozen=True)
class Ensemble:
    """TreeEnsemble's attributes, checked, with the trees unfolded into routes."""

    features: np.ndarray  # per node
    splits: np.ndarray
    modes: np.ndarray
    members: list[list[float]]  # per node: the set of a BRANCH_MEMBER node, else []
    missing_true: np.ndarray  # per node: a NaN feature takes the true branch
    leaf_targets: np.ndarray
    leaf_weights: np.ndarray
    routes: list[Route]
    trees: int


def _ints(ctx: NodeContext, name: str) -> np.ndarray:
    return np.asarray(ctx.required_attr(name), dtype=np.int64)


def _array(ctx: NodeContext, name: str) -> np.ndarray:
    array, _ = tensor_to_array(ctx.required_attr(name), f"attribute '{name}'")
    return array.reshape(-1)


def _member_sets(ctx: NodeContext, modes: np.ndarray) -> list[list[float]]:
    """Each BRANCH_MEMBER node's set: membership_values split at NaNs, in node order."""
    sets: list[list[float]] = [[] for _ in modes]
    member_nodes = [i for i, m in enumerate(modes) if m == BRANCH_MEMBER]
    if not member_nodes:
        return sets
    values = _array(ctx, "membership_values")
    groups: list[list[float]] = [[]]
    for v in values:
        if np.isnan(v):
            groups.append([])
        else:
            groups[-1].append(float(v))
    if not groups[-1]:
        groups.pop()  # the values end with a NaN delimiter
    if len(groups) != len(member_nodes):
        raise ModelError(f"membership_values holds {len(groups)} sets for "
                         f"{len(member_nodes)} BRANCH_MEMBER nodes")  # fmt: skip
    for node, group in zip(member_nodes, groups):
        sets[node] = group
    return sets


def _routes(ctx: NodeContext, nodes: int, leaves: int) -> list[Route]:
    """Every root-to-leaf route of every tree (depth-first, true branch first)."""
    true_ids, false_ids = _ints(ctx, "nodes_truenodeids"), _ints(ctx, "nodes_falsenodeids")
    true_leaf, false_leaf = _ints(ctx, "nodes_trueleafs"), _ints(ctx, "nodes_falseleafs")
    routes: list[Route] = []

    def walk(node: int, tests: tuple[tuple[int, bool], ...]) -> None:
        if len(tests) > nodes:
            raise ModelError("the trees have a cycle")
        for outcome, ids, is_leaf in ((True, true_ids, true_leaf), (False, false_ids, false_leaf)):
            target, path = int(ids[node]), (*tests, (node, outcome))
            bound = leaves if is_leaf[node] else nodes
            if not 0 <= target < bound:
                raise ModelError(f"node {node} refers to {'leaf' if is_leaf[node] else 'node'} "
                                 f"{target}, out of range")  # fmt: skip
            if is_leaf[node]:
                routes.append(Route(target, path))
            else:
                walk(target, path)

    for root in _ints(ctx, "tree_roots"):
        if not 0 <= root < nodes:
            raise ModelError(f"tree root {root} is out of range")
        # a tree that is one leaf is a root whose branches both lead to it (onnx.reference
        # takes leaf number `root` there instead, which contradicts nodes_truenodeids)
        walk(int(root), ())
    return routes


def _ensemble(ctx: NodeContext, features: int, targets: int) -> Ensemble:
    feature_ids = _ints(ctx, "nodes_featureids")
    modes = _array(ctx, "nodes_modes").astype(np.int64)
    splits = _array(ctx, "nodes_splits")
    nodes = len(feature_ids)
    if not len(modes) == len(splits) == nodes:
        raise ModelError("the nodes_* attributes differ in length")
    if nodes and not (0 <= feature_ids.min() and feature_ids.max() < features):
        raise ModelError(f"a node tests a feature outside [0, {features})")
    unknown = set(modes.tolist()) - set(BRANCH_MODES) - {BRANCH_MEMBER}
    if unknown:
        raise ModelError(f"unknown nodes_modes {sorted(unknown)}")
    missing = ctx.attr("nodes_missing_value_tracks_true") or [0] * nodes
    leaf_targets, leaf_weights = _ints(ctx, "leaf_targetids"), _array(ctx, "leaf_weights")
    if len(leaf_targets) != len(leaf_weights):
        raise ModelError("leaf_targetids and leaf_weights differ in length")
    if len(leaf_targets) and not (0 <= leaf_targets.min() and leaf_targets.max() < targets):
        raise ModelError(f"a leaf has a target outside [0, {targets})")
    return Ensemble(
        feature_ids, splits, modes, _member_sets(ctx, modes),
        np.asarray(missing, dtype=bool), leaf_targets, leaf_weights,
        _routes(ctx, nodes, len(leaf_targets)), len(ctx.required_attr("tree_roots")),
    )  # fmt: skip


def _node_tests(b: ComputationBuilder, x: Instruction, ens: Ensemble) -> Instruction:
    """pred (N, nodes): the outcome of every node's test on every row."""
    n = x.shape.dims[0]
    nodes = len(ens.features)
    dims = (n, nodes)
    dtype = x.shape.dtype
    value = take_last(b, x, b.constant(ens.features))  # (N, nodes): each node's feature

    def per_node(array: np.ndarray, of: DType) -> Instruction:
        return b.broadcast(b.constant(array, of), [1], dims)

    outcome = full(b, False, DType.PRED, dims)
    for mode, direction in BRANCH_MODES.items():
        if (ens.modes == mode).any():
            test = b.compare(value, per_node(ens.splits, dtype), direction)
            outcome = b.select(per_node(ens.modes == mode, DType.PRED), test, outcome)
    if (ens.modes == BRANCH_MEMBER).any():
        # one column of set members at a time, NaN (never equal) where a set is shorter
        width = max(len(s) for s in ens.members)
        table = np.full((nodes, width), np.nan)
        for i, members in enumerate(ens.members):
            table[i, : len(members)] = members
        member = full(b, False, DType.PRED, dims)
        for k in range(width):
            hit = b.compare(value, per_node(table[:, k], dtype), Direction.EQ)
            member = b.binary(Op.OR, member, hit)
        outcome = b.select(per_node(ens.modes == BRANCH_MEMBER, DType.PRED), member, outcome)
    if ens.missing_true.any():
        missing = b.binary(Op.AND, b.compare(value, value, Direction.NE),
                           per_node(ens.missing_true, DType.PRED))  # fmt: skip
        outcome = b.binary(Op.OR, outcome, missing)
    return outcome


def _taken_routes(b: ComputationBuilder, outcome: Instruction, ens: Ensemble) -> Instruction:
    """pred (N, routes): the routes each row follows (one per tree).

    With D[node, route] = +1 (route needs true), -1 (needs false), 0 (off the route),
    outcome @ D reaches the count of +1 entries exactly when every test goes the
    route's way.
    """
    signs = np.zeros((len(ens.features), len(ens.routes)), np.float32)
    for r, route in enumerate(ens.routes):
        for node, wanted in route.tests:
            signs[node, r] = 1 if wanted else -1
    needed = (signs > 0).sum(axis=0).astype(np.float32)
    count = b.dot(b.convert(outcome, DType.F32), b.constant(signs), DotDims((), (), (1,), (0,)))
    target = b.broadcast(b.constant(needed), [1], count.shape.dims)
    return b.compare(count, target, Direction.EQ)


@onnx_op("TreeEnsemble", domain=ML, since=5)
def tree_ensemble(ctx: NodeContext, x: Instruction) -> Instruction:
    b = ctx.b
    if x.shape.rank != 2:
        raise ShapeError(f"input must be N x features, got {list(x.shape.dims)}")
    if ctx.attr("post_transform") != 0:
        raise UnsupportedError(f"post_transform={ctx.attr('post_transform')} is not supported "
                               "(only 0, NONE)")  # fmt: skip
    aggregate = AGGREGATES.get(ctx.attr("aggregate_function"))
    if aggregate is None:
        raise ModelError(f"unknown aggregate_function {ctx.attr('aggregate_function')}")
    n, features = x.shape.dims
    targets = ctx.required_attr("n_targets")
    ens = _ensemble(ctx, features, targets)
    dtype = x.shape.dtype
    if not ens.routes:
        return full(b, 0, dtype, (n, targets))
    taken = _taken_routes(b, _node_tests(b, x, ens), ens)  # (N, routes)
    routes = len(ens.routes)
    # weight[route, target]: the route's leaf weight at its leaf's target
    weights = np.zeros((routes, targets))
    hits = np.zeros((routes, targets), bool)
    for r, route in enumerate(ens.routes):
        weights[r, ens.leaf_targets[route.leaf]] = ens.leaf_weights[route.leaf]
        hits[r, ens.leaf_targets[route.leaf]] = True
    if aggregate in ("sum", "average"):
        out = b.dot(b.convert(taken, dtype), b.constant(weights, dtype),
                    DotDims((), (), (1,), (0,)))  # fmt: skip
        if aggregate == "average":
            out = Formula(b, out).div(out, ens.trees)
        return out
    # min / max over the routes taken, starting (as the reference) from the type's
    # largest / smallest finite value
    dims3 = (n, routes, targets)
    chosen = b.binary(Op.AND, b.broadcast(taken, [0, 1], dims3),
                      b.broadcast(b.constant(hits), [1, 2], dims3))  # fmt: skip
    finfo = np.finfo(dtype.numpy)
    op, init = (Op.MINIMUM, finfo.max) if aggregate == "min" else (Op.MAXIMUM, finfo.min)
    values = b.select(chosen, b.broadcast(b.constant(weights, dtype), [1, 2], dims3),
                      full(b, init, dtype, dims3))  # fmt: skip
    reducer = scalar_reducer(b.module, op, dtype)
    return b.reduce(values, b.scalar(init, dtype), [1], reducer)
