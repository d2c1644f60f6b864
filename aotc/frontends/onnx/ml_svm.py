"""The support vector machines of the ai.onnx.ml domain: SVMRegressor and SVMClassifier.

Both take the kernel between every row and every support vector as one matrix product plus
elementwise ops, then weigh the kernel values with the coefficients in a second product.
The classifier is LibSVM's one-vs-one: a decision value and a vote per pair of classes, and
with prob_a/prob_b Platt's sigmoid per pair then LibSVM's pairwise coupling, an iterative
solve unrolled to its iteration limit (`ml_coupling.py`).

onnx.reference and onnxruntime differ on several details; this follows onnxruntime (what
models are deployed with), as noted where it matters.  Like onnxruntime it computes in
float32 whatever the input type, and its scores are float32.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DotDims, DType, Instruction, Op, Shape
from .helpers import Formula, lowest, reduce
from .ml import ML, float_rows, take_last
from .ml_coupling import pairwise_coupling
from .ml_scores import post_transform, post_transform_name, probit
from .reduce import arg_reducer
from .registry import NodeContext, onnx_op

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
# Platt's pairwise probabilities are kept this far from 0 and 1 (LibSVM's bound)
MIN_PAIR_PROBABILITY = 1e-7


@dataclass(frozen=True)
class Kernel:
    """kernel_type and its kernel_params (all zero where not given, as in onnxruntime)."""

    name: str
    gamma: float = 0.0
    coef0: float = 0.0
    degree: float = 0.0


def _kernel(ctx: NodeContext) -> Kernel:
    name = ctx.choice("kernel_type", KERNELS)
    params = ctx.attr("kernel_params") or []
    if params and len(params) != 3:
        raise ModelError(f"kernel_params holds {len(params)} values, not 3 (gamma, coef0, degree)")
    return Kernel(name, *(float(p) for p in params))


def _floats(ctx: NodeContext, name: str) -> np.ndarray:
    return np.asarray(ctx.attr(name) or [], np.float32)


def _support_vectors(ctx: NodeContext, count: int, features: int) -> np.ndarray:
    """support_vectors as (count, features), checked against the input's width."""
    values = _floats(ctx, "support_vectors")
    if values.size % count:
        raise ModelError(
            f"support_vectors holds {values.size} values, not a multiple of its {count} vectors"
        )
    if values.size != count * features:
        raise ShapeError(
            f"the input has {features} features but the support vectors have {values.size // count}"
        )
    return values.reshape(count, features)


def _matmul(b: ComputationBuilder, x: Instruction, matrix: np.ndarray) -> Instruction:
    """x (N, K) @ a constant (K, M), in float32."""
    dims = DotDims((), (), (1,), (0,))
    return b.dot(x, b.constant(np.asarray(matrix, np.float32), DType.F32), dims)


def _per_column(b: ComputationBuilder, values: np.ndarray, dims: Sequence[int]) -> Instruction:
    """A constant row of values (one per column), repeated down `dims`' rows."""
    return b.broadcast(b.constant(np.asarray(values, np.float32), DType.F32), [1], dims)


# -- kernels ----------------------------------------------------------------------


def kernel_matrix(
    b: ComputationBuilder, x: Instruction, vectors: np.ndarray, kernel: Kernel
) -> Instruction:
    """(N, V): the kernel between each row of x (N, F, float32) and each support vector."""
    if kernel.name == "RBF":
        return _rbf(b, x, vectors, kernel.gamma)
    dots = _matmul(b, x, vectors.T)
    if kernel.name == "LINEAR":
        return dots
    f = Formula(b, dots)
    affine = f.add(f.mul(dots, kernel.gamma), kernel.coef0)
    if kernel.name == "SIGMOID":
        return f.f(Op.TANH, affine)
    return _power(f, affine, kernel.degree)


def _power(f: Formula, x: Instruction, degree: float) -> Instruction:
    """x ** degree: a whole degree by multiplications (as onnxruntime squares and cubes;
    exact signs for negative x), another by pow."""
    if degree != int(degree) or not 0 <= degree <= 64:
        return f.b.binary(Op.POWER, x, f.k(degree))
    result, square, n = None, x, int(degree)
    while n:
        if n & 1:
            result = square if result is None else f.mul(result, square)
        n >>= 1
        if n:
            square = f.mul(square, square)
    return f.k(1) if result is None else result


def _rbf(b: ComputationBuilder, x: Instruction, vectors: np.ndarray, gamma: float):
    """exp(-gamma |x - s|^2), with |x - s|^2 = |x'|^2 - 2 x'.s' + |s'|^2 for x' = x - c and
    s' = s - c, c the support vectors' mean.

    Centred, the three terms are as large as the data's spread rather than its offset, so
    their float32 cancellation (worst where x is near s: the largest kernel values) costs
    about gamma * spread^2 * 1e-7 in the kernel, not gamma * |x|^2 * 1e-7: features around
    50 with a spread of 1 keep ~1e-6 instead of ~1e-3.  A (N, V, F) difference would be
    exact but too large for real models.
    """
    n, v = x.array_shape.dims[0], len(vectors)
    center = vectors.astype(np.float64).mean(axis=0).astype(np.float32)
    shifted = (vectors - center).astype(np.float32)  # x - c rounds the same way
    f = Formula(b, x)
    x = f.sub(x, _per_column(b, center, x.array_shape.dims))
    x_norms = reduce(b, f.mul(x, x), Op.ADD, [1], keepdims=True)
    s_norms = (shifted.astype(np.float64) ** 2).sum(axis=1)
    cross = _matmul(b, x, shifted.T)
    g = Formula(b, cross)
    squared = g.add(
        g.sub(b.broadcast_to(x_norms, (n, v)), g.mul(cross, 2)), _per_column(b, s_norms, (n, v))
    )
    return g.f(Op.EXP, g.mul(g.max(squared, 0), -gamma))


# -- SVMRegressor -----------------------------------------------------------------


@onnx_op("SVMRegressor", domain=ML, since=1)
def svm_regressor(ctx: NodeContext, x: Instruction) -> Instruction:
    """(N, 1): the kernel values weighed by the coefficients plus rho[0]; one_class: the
    sign of that as +-1."""
    b = ctx.b
    x = float_rows(b, x)
    features = x.array_shape.dims[1]
    # onnx.reference refuses a post_transform other than NONE and onnxruntime ignores it;
    # as onnxruntime, it is checked but leaves the value alone
    post_transform_name(ctx)
    coefficients, rho = _floats(ctx, "coefficients"), _floats(ctx, "rho")
    if not rho.size:
        raise ModelError("rho is empty")
    count = ctx.attr("n_supports", 0)
    if count > 0:
        if coefficients.size < count:
            raise ModelError(f"{coefficients.size} coefficients for {count} support vectors")
        vectors = _support_vectors(ctx, count, features)
        kernels = kernel_matrix(b, x, vectors, _kernel(ctx))
        y = _matmul(b, kernels, coefficients[:count].reshape(count, 1))
    else:
        # no support vectors: a linear model whose weights are the coefficients
        if coefficients.size != features:
            raise ShapeError(
                f"the input has {features} features but there are {coefficients.size} coefficients"
            )
        y = _matmul(b, x, coefficients.reshape(features, 1))
    f = Formula(b, y)
    y = f.add(y, float(rho[0]))
    if ctx.attr("one_class", 0):
        y = f.where(y, Direction.GT, 0, 1, -1)
    return y


# -- SVMClassifier ----------------------------------------------------------------


@dataclass(frozen=True)
class OneVsOne:
    """LibSVM's class pairs (i < j, in order) and each class's run of support vectors."""

    classes: int
    counts: tuple[int, ...]  # support vectors per class
    pairs: tuple[tuple[int, int], ...]

    @staticmethod
    def of(counts: list[int]) -> OneVsOne:
        pairs = tuple(itertools.combinations(range(len(counts)), 2))
        return OneVsOne(len(counts), tuple(counts), pairs)

    def vectors_of(self, c: int) -> slice:
        start = sum(self.counts[:c])
        return slice(start, start + self.counts[c])

    def pair_weights(self, coefficients: np.ndarray) -> np.ndarray:
        """(V, pairs): the dual coefficients of each pair's decision function.

        coefficients is (classes - 1, V): pair (i, j) weighs class i's vectors by row j - 1
        and class j's by row i (LibSVM's layout, which drops each class's own row).
        """
        weights = np.zeros((sum(self.counts), len(self.pairs)), np.float32)
        for k, (i, j) in enumerate(self.pairs):
            weights[self.vectors_of(i), k] = coefficients[j - 1, self.vectors_of(i)]
            weights[self.vectors_of(j), k] = coefficients[i, self.vectors_of(j)]
        return weights

    def vote_table(self) -> np.ndarray:
        """(2 pairs, classes): row k credits pair k's first class, row pairs + k its second."""
        table = np.zeros((2 * len(self.pairs), self.classes), np.float32)
        for k, (i, j) in enumerate(self.pairs):
            table[k, i] = 1
            table[len(self.pairs) + k, j] = 1
        return table


def _class_labels(ctx: NodeContext) -> np.ndarray:
    if ctx.attr("classlabels_strings"):
        raise UnsupportedError("string class labels are not supported (aotc has no string type)")
    labels = np.asarray(ctx.attr("classlabels_ints") or [], np.int64)
    if not labels.size:
        raise ModelError("SVMClassifier has no classlabels_ints")
    return labels


def _first_max(b: ComputationBuilder, x: Instruction) -> Instruction:
    """(N,) s64: the column of each row's largest value, the first where several tie."""
    reducer = arg_reducer(b.module, DType.F32, Direction.GT, last=False)
    columns = b.iota(Shape(DType.S64, x.array_shape.dims), 1)
    inits = [b.scalar(lowest(DType.F32), DType.F32), b.scalar(0, DType.S64)]
    both = b.add(Op.REDUCE, [x, columns, *inits], dimensions=(1,), called=(reducer,))
    return b.get_tuple_element(both, 1)


def _label(b: ComputationBuilder, labels: np.ndarray, index: Instruction) -> Instruction:
    return take_last(b, b.constant(labels, DType.S64), index)


def _decisions(ctx: NodeContext, x: Instruction, ovo: OneVsOne) -> Instruction:
    """(N, pairs): each pair's decision value, positive for its first class."""
    b = ctx.b
    vectors = _support_vectors(ctx, sum(ovo.counts), x.array_shape.dims[1])
    coefficients, rho = _floats(ctx, "coefficients"), _floats(ctx, "rho")
    size, pairs = (ovo.classes - 1) * sum(ovo.counts), len(ovo.pairs)
    if coefficients.size < size:
        raise ModelError(f"{coefficients.size} coefficients, not (classes - 1) x vectors = {size}")
    if rho.size < pairs:
        raise ModelError(f"rho holds {rho.size} values for {pairs} pairs of classes")
    kernels = kernel_matrix(b, x, vectors, _kernel(ctx))
    weights = ovo.pair_weights(coefficients[:size].reshape(ovo.classes - 1, -1))
    decisions = _matmul(b, kernels, weights)
    return Formula(b, decisions).add(
        decisions, _per_column(b, rho[:pairs], decisions.array_shape.dims)
    )


def _votes(b: ComputationBuilder, decisions: Instruction, ovo: OneVsOne) -> Instruction:
    """(N, classes) float32: the pairs each class wins (a tie goes to the second class)."""
    f = Formula(b, decisions)
    wins = b.convert(b.compare(decisions, f.k(0), Direction.GT), DType.F32)
    losses = Formula(b, wins).sub(1, wins)
    return _matmul(b, b.concatenate([wins, losses], 1), ovo.vote_table())


def _pair_probabilities(ctx: NodeContext, decisions: Instruction, pairs: int) -> Instruction:
    """(N, pairs): Platt's sigmoid of each decision, as LibSVM keeps it inside (0, 1)."""
    b = ctx.b
    prob_a, prob_b = _floats(ctx, "prob_a"), _floats(ctx, "prob_b")
    if prob_a.size < pairs:
        raise ModelError(f"prob_a holds {prob_a.size} values for {pairs} pairs of classes")
    dims = decisions.array_shape.dims
    f = Formula(b, decisions)
    scaled = f.add(
        f.mul(decisions, _per_column(b, prob_a[:pairs], dims)), _per_column(b, prob_b[:pairs], dims)
    )
    p = f.sub(1, f.f(Op.LOGISTIC, scaled))
    return f.min(f.max(p, MIN_PAIR_PROBABILITY), 1 - MIN_PAIR_PROBABILITY)


def _binary_scores(b: ComputationBuilder, s: Instruction, name: str) -> Instruction:
    """(N, 2) from the one decision value s (N, 1) of two classes without probabilities,
    as onnxruntime writes them (onnx.reference differs for SOFTMAX and SOFTMAX_ZERO)."""
    f = Formula(b, s)
    if name == "NONE":
        columns = [f.sub(0, s), s]
    elif name == "LOGISTIC":
        columns = [f.f(Op.LOGISTIC, f.sub(0, s)), f.f(Op.LOGISTIC, s)]
    elif name in ("SOFTMAX", "SOFTMAX_ZERO"):
        columns = [f.sub(1, s), s]  # not a softmax: onnxruntime's "1 - p, p" form
    else:
        raise UnsupportedError(
            f"post_transform {name} with two classes and no prob_a/prob_b "
            "(onnxruntime leaves the second score undefined)"
        )
    return b.concatenate(columns, 1)


def _linear_scores(ctx: NodeContext, x: Instruction, classes: int) -> Instruction:
    """(N, classes): no support vectors, one linear model per class and rho[0] for all."""
    features = x.array_shape.dims[1]
    coefficients, rho = _floats(ctx, "coefficients"), _floats(ctx, "rho")
    if coefficients.size != classes * features:
        raise ShapeError(
            f"{coefficients.size} coefficients for {classes} classes of the "
            f"input's {features} features"
        )
    if not rho.size:
        raise ModelError("rho is empty")
    scores = _matmul(ctx.b, x, coefficients.reshape(classes, features).T)
    return Formula(ctx.b, scores).add(scores, float(rho[0]))


def _linear_label(
    ctx: NodeContext, scores: Instruction, labels: np.ndarray, has_proba: bool
) -> Instruction:
    """The class of the linear form: the best score's, but with two classes and no
    probabilities onnxruntime takes the second class when the best score is positive (or
    at least 0.5 where every coefficient is >= 0); onnx.reference does not."""
    b = ctx.b
    best = _label(b, labels, _first_max(b, scores))
    if len(labels) != 2 or has_proba:
        return best
    top = reduce(b, scores, Op.MAXIMUM, [1], keepdims=False)
    if _floats(ctx, "coefficients").min() >= 0:
        second = b.compare(top, Formula(b, top).k(0.5), Direction.GE)
    else:
        second = b.compare(top, Formula(b, top).k(0), Direction.GT)
    return b.select(second, b.broadcast_to(b.constant(labels[1]), best.array_shape.dims), best)


@onnx_op("SVMClassifier", domain=ML, since=1)
def svm_classifier(ctx: NodeContext, x: Instruction) -> list[Instruction | None]:
    """(label (N,), scores): the class the pairs' votes pick, and the decision values (with
    prob_a/prob_b the coupled class probabilities) under post_transform."""
    b = ctx.b
    x = float_rows(b, x)
    labels = _class_labels(ctx)
    name = post_transform_name(ctx)
    prob_a, prob_b = _floats(ctx, "prob_a"), _floats(ctx, "prob_b")
    if prob_a.size != prob_b.size:
        raise ModelError(f"prob_a holds {prob_a.size} values but prob_b {prob_b.size}")
    has_proba = prob_a.size > 0
    counts = [int(c) for c in ctx.attr("vectors_per_class") or []]
    if sum(counts) == 0:
        scores = _linear_scores(ctx, x, len(labels))
        label = _linear_label(ctx, scores, labels, has_proba)
        # one class: onnxruntime applies PROBIT alone to its single column
        if len(labels) > 1:
            scores = post_transform(b, scores, name)
        elif name == "PROBIT":
            scores = probit(b, scores)
        return [label, scores]
    if len(counts) != len(labels) or min(counts) < 0:
        raise ModelError(f"vectors_per_class {counts} does not fit {len(labels)} classes")
    if len(labels) < 2:
        raise ModelError("a classifier with support vectors needs two classes or more")
    ovo = OneVsOne.of(counts)
    decisions = _decisions(ctx, x, ovo)
    # the class is the vote's, with or without probabilities (as in both runtimes)
    label = _label(b, labels, _first_max(b, _votes(b, decisions, ovo)))
    if not ctx.output_used(1):
        return [label, None]
    if has_proba:
        probabilities = pairwise_coupling(
            b, _pair_probabilities(ctx, decisions, len(ovo.pairs)), ovo.pairs, ovo.classes
        )
        return [label, post_transform(b, probabilities, name)]
    if ovo.classes == 2:
        return [label, _binary_scores(b, decisions, name)]
    return [label, post_transform(b, decisions, name)]
