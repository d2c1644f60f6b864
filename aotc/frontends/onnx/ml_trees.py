"""Tree ensembles as tables, and the one way aotc evaluates them.

The ai.onnx.ml tree ops (TreeEnsemble-5, TreeEnsembleRegressor and
TreeEnsembleClassifier) turn their attributes into a `TreeSpec`.  `build_forest`
renumbers every tree's reachable nodes into flat tables, leaves first, so that
the node a walk ends on is also its row in the leaf tables.  `reached_leaves`
walks all trees for all rows at once: a state (rows, trees) of node indices goes
through `depth` steps of gather (the node's feature, split, children), compare
and select; a leaf's children are itself, so rows that arrive early stay put.
`aggregate` then gathers the reached leaves' weights and combines them per
target.  Everything is linear in the number of nodes (and leaves x targets for
leaves that feed several targets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ModelError
from ...ir import ComputationBuilder, Direction, DType, GatherDims, Instruction, Op, Shape
from .helpers import REDUCE_INIT, full, reduce

# a node's mode: an index into COMPARES (x[feature] <op> split), or one of these
COMPARES = (Direction.LE, Direction.LT, Direction.GE, Direction.GT, Direction.EQ, Direction.NE)
MEMBER = len(COMPARES)  # x[feature] is one of the node's set members
LEAF = -1
MODE_LT, MODE_EQ = COMPARES.index(Direction.LT), COMPARES.index(Direction.EQ)

# aggregate_function -> how a target's weights combine
AGGREGATES = {"AVERAGE": Op.ADD, "SUM": Op.ADD, "MIN": Op.MINIMUM, "MAX": Op.MAXIMUM}
NUMPY_COMBINE = {
    Op.ADD: (np.add, 0.0),
    Op.MINIMUM: (np.minimum, np.inf),
    Op.MAXIMUM: (np.maximum, -np.inf),
}


@dataclass
class TreeSpec:
    """Trees as an op states them, in one node numbering of its own.

    Per node: its mode (above), feature, split, whether a NaN takes the true branch,
    and its children (node numbers; ignored for leaves).  `entries` are the leaves'
    (node, target, weight) contributions; several may name one leaf.
    """

    modes: np.ndarray
    features: np.ndarray
    splits: np.ndarray  # float64
    missing_true: np.ndarray
    true_ids: np.ndarray
    false_ids: np.ndarray
    roots: np.ndarray
    members: dict[int, np.ndarray]  # a MEMBER node's set
    entry_nodes: np.ndarray
    entry_targets: np.ndarray
    entry_weights: np.ndarray  # float64
    targets: int

    def check(self, features: int) -> None:
        """Refuse what no walk could follow: unknown modes, features out of range,
        children or roots that are no node, weights for targets that do not exist (the
        ops check that their node attributes agree in length)."""
        nodes = len(self.modes)
        if self.targets < 1:
            raise ModelError(f"the number of targets must be positive, got {self.targets}")
        unknown = set(self.modes.tolist()) - set(range(len(COMPARES))) - {MEMBER, LEAF}
        if unknown:
            raise ModelError(f"unknown nodes_modes {sorted(unknown)}")
        branch = self.modes != LEAF
        tested = self.features[branch]
        if tested.size and not (tested.min() >= 0 and tested.max() < features):
            raise ModelError(f"a node tests a feature outside [0, {features})")
        for name, ids in (("true", self.true_ids), ("false", self.false_ids)):
            bad = branch & ((ids < 0) | (ids >= nodes))
            if bad.any():
                node = int(np.flatnonzero(bad)[0])
                raise ModelError(f"node {node}'s {name} branch {int(ids[node])} is no node")
        if not self.roots.size:
            raise ModelError("the ensemble has no trees")
        if not (self.roots.min() >= 0 and self.roots.max() < nodes):
            raise ModelError("a tree root is out of range")
        targets = self.entry_targets
        if targets.size and not (targets.min() >= 0 and targets.max() < self.targets):
            raise ModelError(f"a leaf weight names a target outside [0, {self.targets})")


@dataclass(frozen=True)
class LeafTable:
    """Per leaf, its combined weight per target and whether it has one: (leaves,)
    with each leaf's one target in `targets` when no leaf feeds two targets, else
    (leaves, targets)."""

    weights: np.ndarray
    present: np.ndarray
    targets: np.ndarray | None  # per leaf, for the (leaves,) form


@dataclass(frozen=True)
class Forest:
    """Every tree's reachable nodes in one flat numbering, leaves first: [0, leaves)."""

    features: np.ndarray
    splits: np.ndarray
    modes: np.ndarray  # COMPARES indices (MEMBER nodes became searches; leaves any)
    missing_true: np.ndarray
    true_next: np.ndarray  # a leaf's children are itself
    false_next: np.ndarray
    roots: np.ndarray  # per tree
    leaf_trees: np.ndarray  # per leaf, its tree
    depth: int  # the most tests on a root-to-leaf path
    # the leaves' contributions: (leaf, target) pairs, each with its weights combined
    entry_leaves: np.ndarray
    entry_targets: np.ndarray
    entry_weights: np.ndarray
    targets: int

    @property
    def trees(self) -> int:
        return len(self.roots)

    @property
    def leaves(self) -> int:
        return len(self.leaf_trees)

    def leaf_table(self, combine: Op, dtype: DType) -> LeafTable:
        """The weights per (leaf, target), absent ones at `combine`'s identity."""
        init = REDUCE_INIT[combine](dtype)
        leaves, targets = self.entry_leaves, self.entry_targets
        if np.bincount(leaves, minlength=1).max() <= 1:
            weights = np.full(self.leaves, init, np.float64)
            weights[leaves] = self.entry_weights
            present = np.zeros(self.leaves, bool)
            present[leaves] = True
            which = np.zeros(self.leaves, np.int32)
            which[leaves] = targets
            return LeafTable(weights, present, which)
        weights = np.full((self.leaves, self.targets), init, np.float64)
        weights[leaves, targets] = self.entry_weights
        present = np.zeros((self.leaves, self.targets), bool)
        present[leaves, targets] = True
        return LeafTable(weights, present, None)

    def fed_always(self) -> np.ndarray:
        """Per target: some tree feeds it from every leaf, so every row has a weight."""
        trees, targets = self.trees, self.targets
        leaves_per_tree = np.bincount(self.leaf_trees, minlength=trees)
        key = self.leaf_trees[self.entry_leaves] * targets + self.entry_targets
        fed = np.bincount(key, minlength=trees * targets).reshape(trees, targets)
        return (fed == leaves_per_tree[:, None]).any(axis=0)

    def fed_never(self) -> np.ndarray:
        """Per target: no leaf feeds it."""
        return np.bincount(self.entry_targets, minlength=self.targets) == 0


# -- building ---------------------------------------------------------------------


def build_forest(spec: TreeSpec, combine: Op) -> Forest:
    """The spec's trees renumbered into flat tables (see Forest); several weights of
    one leaf for one target are combined with `combine` (the aggregate's op)."""
    spec = _expand_members(spec)
    pairs, depth = _reachable(spec)
    nodes = len(spec.modes)
    raw = pairs % nodes
    is_leaf = spec.modes[raw] == LEAF
    # leaves first, each group in (tree, node) order
    order = np.concatenate([np.flatnonzero(is_leaf), np.flatnonzero(~is_leaf)])
    pairs, raw, is_leaf = pairs[order], raw[order], is_leaf[order]
    sorted_at = np.argsort(pairs)

    def renumber(tree_pairs: np.ndarray) -> np.ndarray:
        return sorted_at[np.searchsorted(pairs[sorted_at], tree_pairs)].astype(np.int32)

    tree = pairs // nodes
    own = np.arange(len(pairs), dtype=np.int32)
    true_next = np.where(is_leaf, own, renumber(tree * nodes + spec.true_ids[raw]))
    false_next = np.where(is_leaf, own, renumber(tree * nodes + spec.false_ids[raw]))
    modes = np.where(is_leaf, _leaf_mode(spec.modes), spec.modes[raw])
    roots = renumber(np.arange(len(spec.roots)) * nodes + spec.roots)
    leaves = int(is_leaf.sum())
    entry_leaves, entry_targets, entry_weights = _leaf_entries(spec, raw[:leaves], combine)
    return Forest(
        np.where(is_leaf, 0, spec.features[raw]).astype(np.int32),
        np.where(is_leaf, 0.0, spec.splits[raw]),
        modes.astype(np.int32),
        spec.missing_true[raw] & ~is_leaf,
        true_next.astype(np.int32),
        false_next.astype(np.int32),
        roots,
        tree[:leaves].astype(np.int32),
        depth,
        entry_leaves,
        entry_targets,
        entry_weights,
        spec.targets,
    )


def _leaf_mode(modes: np.ndarray) -> int:
    """The mode leaves take: one the branches use, so a single-mode forest stays one."""
    branch = modes[modes != LEAF]
    return int(branch[0]) if branch.size else 0


def _reachable(spec: TreeSpec) -> tuple[np.ndarray, int]:
    """The (tree * nodes + node) pairs the trees reach, and the longest root-to-leaf
    path, found level by level (a node shared by two paths is at both their levels)."""
    nodes = len(spec.modes)
    level = np.unique(np.arange(len(spec.roots)) * nodes + spec.roots)
    found = [level]
    depth = 0
    while True:
        raw = level % nodes
        branch = spec.modes[raw] != LEAF
        if not branch.any():
            return np.unique(np.concatenate(found)), depth
        depth += 1
        if depth > nodes:
            raise ModelError("the trees have a cycle")
        base = level[branch] - raw[branch]
        level = np.unique(
            np.concatenate([base + spec.true_ids[raw[branch]], base + spec.false_ids[raw[branch]]])
        )
        found.append(level)


def _leaf_entries(spec: TreeSpec, leaf_nodes: np.ndarray, combine: Op):
    """The contributions as (leaf, target, weight) arrays, one per (leaf, target), the
    weights combined by `combine`; a node several trees reach is a leaf of each."""
    nodes = len(spec.modes)
    # the entries sorted by node: node n's are by_node[starts[n]:starts[n + 1]]
    by_node = np.argsort(spec.entry_nodes, kind="stable")
    counts = np.bincount(spec.entry_nodes, minlength=nodes)
    starts = np.concatenate([[0], np.cumsum(counts)])
    per_leaf = counts[leaf_nodes]
    leaf = np.repeat(np.arange(len(leaf_nodes)), per_leaf)
    within = np.arange(per_leaf.sum()) - np.repeat(np.cumsum(per_leaf) - per_leaf, per_leaf)
    entry = by_node[starts[leaf_nodes][leaf] + within]
    pairs, which = np.unique(leaf * spec.targets + spec.entry_targets[entry], return_inverse=True)
    ufunc, identity = NUMPY_COMBINE[combine]
    weights = np.full(len(pairs), identity)
    ufunc.at(weights, which, spec.entry_weights[entry])
    leaves = (pairs // spec.targets).astype(np.int32)
    return leaves, (pairs % spec.targets).astype(np.int32), weights


def _expand_members(spec: TreeSpec) -> TreeSpec:
    """BRANCH_MEMBER nodes as binary searches over their sorted sets: LT splits down to
    one EQ test per member, so a set costs log2(size) + 1 steps.  NaN fails every LT,
    so it reaches the last EQ test, which carries the node's missing-value rule."""
    if not spec.members:
        return spec
    columns = [
        list(spec.modes),
        list(spec.features),
        list(spec.splits),
        list(spec.missing_true),
        list(spec.true_ids),
        list(spec.false_ids),
    ]
    modes, features, splits, missing, true_ids, false_ids = columns

    def place(at: int, members: np.ndarray, feature: int, tracks: bool, yes: int, no: int):
        if len(members) <= 1:  # an empty set matches nothing, as a NaN split
            split = members[0] if len(members) else np.nan
            row = (MODE_EQ, feature, split, tracks, yes, no)
        else:
            low, high = len(modes), len(modes) + 1
            for column in columns:
                column.extend([0, 0])
            half = len(members) // 2
            place(low, members[:half], feature, tracks, yes, no)
            place(high, members[half:], feature, tracks, yes, no)
            row = (MODE_LT, feature, members[half], False, low, high)
        for column, value in zip(columns, row):
            column[at] = value

    for node, members in spec.members.items():
        if spec.modes[node] == MEMBER:
            place(
                node,
                np.unique(members),
                int(features[node]),
                bool(missing[node]),
                int(true_ids[node]),
                int(false_ids[node]),
            )
    return TreeSpec(
        np.asarray(modes),
        np.asarray(features),
        np.asarray(splits, np.float64),
        np.asarray(missing, bool),
        np.asarray(true_ids),
        np.asarray(false_ids),
        spec.roots,
        {},
        spec.entry_nodes,
        spec.entry_targets,
        spec.entry_weights,
        spec.targets,
    )


# -- evaluation -------------------------------------------------------------------


def lookup(b: ComputationBuilder, table: Instruction, index: Instruction) -> Instruction:
    """table[index] for a table of rows (one value or a vector each): index's dims plus
    the row's."""
    rank = index.array_shape.rank
    row = table.array_shape.dims[1:]
    dims = GatherDims(
        offset_dims=tuple(range(rank, rank + len(row))),
        collapsed_slice_dims=(0,),
        start_index_map=(0,),
        index_vector_dim=rank,
        slice_sizes=(1, *row),
    )
    return b.gather(table, index, dims)


def _row_values(b: ComputationBuilder, x: Instruction, feature: Instruction) -> Instruction:
    """x[row, feature[row, tree]]: each row's value of the feature its trees test."""
    dims = GatherDims(
        offset_dims=(),
        collapsed_slice_dims=(1,),
        start_index_map=(1,),
        index_vector_dim=2,
        slice_sizes=(1, 1),
        operand_batching_dims=(0,),
        start_indices_batching_dims=(0,),
    )
    return b.gather(x, feature, dims)


def reached_leaves(b: ComputationBuilder, x: Instruction, forest: Forest, dtype: DType):
    """s32 (rows, trees): the leaf each row reaches in each tree; x (rows, features) is
    compared with the splits in `dtype`."""
    rows = x.array_shape.dims[0]
    state = b.broadcast(b.constant(forest.roots, DType.S32), [1], (rows, forest.trees))
    if forest.depth == 0:
        return state
    # NaN takes the true branch where a node says so (integers are never NaN); a lookup
    # only when the branches differ (the leaves' answers do not matter)
    branches = forest.missing_true[forest.leaves :]
    tracks = x.array_shape.dtype.is_float and branches.any()
    missing = b.constant(forest.missing_true, DType.PRED) if not branches.all() else None
    x = b.convert(x, dtype)
    features = b.constant(forest.features, DType.S32)
    splits = b.constant(forest.splits, dtype)
    true_next = b.constant(forest.true_next, DType.S32)
    false_next = b.constant(forest.false_next, DType.S32)
    modes = sorted(set(forest.modes.tolist()))
    mode_table = b.constant(forest.modes, DType.S32) if len(modes) > 1 else None
    for _ in range(forest.depth):
        value = _row_values(b, x, lookup(b, features, state))
        split = lookup(b, splits, state)
        outcome = b.compare(value, split, COMPARES[modes[0]])
        if mode_table is not None:
            mode = lookup(b, mode_table, state)
            for m in modes[1:]:
                is_m = b.compare(mode, full(b, m, DType.S32, mode.array_shape.dims), Direction.EQ)
                outcome = b.select(is_m, b.compare(value, split, COMPARES[m]), outcome)
        if tracks:
            nan = b.compare(value, value, Direction.NE)
            if missing is not None:
                nan = b.binary(Op.AND, nan, lookup(b, missing, state))
            outcome = b.binary(Op.OR, outcome, nan)
        state = b.select(outcome, lookup(b, true_next, state), lookup(b, false_next, state))
    return state


@dataclass(frozen=True)
class TargetScores:
    """Per row and target, the reached leaves' weights combined (AVERAGE: divided by
    the number of trees).  Where no reached leaf feeds a target, `values` holds 0 for
    sums and the combining op's identity for MIN/MAX; `fed` says where that is."""

    values: Instruction  # (rows, targets)
    fed: Instruction  # pred (rows, targets)
    fed_always: np.ndarray  # per target, known at compile time
    fed_never: np.ndarray

    def fed_at(self, b: ComputationBuilder, target: int) -> bool | Instruction:
        """Whether target `target` was fed: a constant, else a pred (rows, 1)."""
        if self.fed_always[target] or self.fed_never[target]:
            return bool(self.fed_always[target])
        rows = self.fed.array_shape.dims[0]
        return b.slice(self.fed, [0, target], [rows, target + 1])


def aggregate(
    b: ComputationBuilder, leaves: Instruction, forest: Forest, function: str, dtype: DType
) -> TargetScores:
    """The reached `leaves` (rows, trees) weights combined per target by
    `function` (an aggregate_function name), computed in `dtype`."""
    combine = AGGREGATES[function]
    table = forest.leaf_table(combine, dtype)
    values = _combine_leaves(b, leaves, table.weights, table.targets, forest, combine, dtype)
    if function == "AVERAGE":
        values = b.binary(Op.DIVIDE, values, full(b, forest.trees, dtype, values.array_shape.dims))
    always, never = forest.fed_always(), forest.fed_never()
    dims = values.array_shape.dims
    if (always | never).all():
        fed = b.broadcast(b.constant(always, DType.PRED), [1], dims)
    else:
        present = table.present.astype(np.float64)
        count = _combine_leaves(b, leaves, present, table.targets, forest, Op.MAXIMUM, dtype)
        fed = b.compare(count, full(b, 0, dtype, dims), Direction.GT)
    return TargetScores(values, fed, always, never)


def _combine_leaves(
    b: ComputationBuilder,
    leaves: Instruction,
    table: np.ndarray,
    targets: np.ndarray | None,
    forest: Forest,
    combine: Op,
    dtype: DType,
) -> Instruction:
    """(rows, targets): table's entries for the reached leaves combined over the trees;
    a (leaves,) table puts each leaf's value at its one target (`targets`)."""
    rows, trees = leaves.array_shape.dims
    init = REDUCE_INIT[combine](dtype)
    per_leaf = lookup(b, b.constant(table, dtype), leaves)  # (rows, trees[, targets])
    if table.ndim == 1 and forest.targets == 1:
        per_leaf = b.reshape(per_leaf, [rows, trees, 1])
    elif table.ndim == 1:
        dims = (rows, trees, forest.targets)
        target = b.broadcast(lookup(b, b.constant(targets, DType.S32), leaves), [0, 1], dims)
        hit = b.compare(target, b.iota(Shape(DType.S32, dims), 2), Direction.EQ)
        per_leaf = b.select(hit, b.broadcast(per_leaf, [0, 1], dims), full(b, init, dtype, dims))
    return reduce(b, per_leaf, combine, [1], keepdims=False)
