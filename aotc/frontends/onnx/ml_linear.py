"""The linear models of the ai.onnx.ml domain: LinearClassifier and LinearRegressor.

Both score rows as x @ coefficients^T + intercepts in float32 (the input converted first,
as onnxruntime does; the spec's scores are float), then apply `post_transform`.  Where
onnx.reference and onnxruntime disagree these follow onnxruntime:

- a lone score column (one target, or one coefficient row without two class labels) is
  transformed by PROBIT only; the reference transforms it by any post_transform;
- a binary classifier (one coefficient row, two class labels) scores [1 - p, p], p the raw
  score or its logistic under LOGISTIC; the reference transforms [-s, s];
- a classifier's label is the argmax of the raw scores, not of the transformed ones (they
  differ under SOFTMAX_ZERO, which leaves zero scores at zero);
- a 1-D input is one row.
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DotDims, DType, Instruction, Op
from .helpers import Formula, full, full_like
from .ml import ML, float_rows, take_last
from .ml_scores import post_transform, post_transform_name
from .reduce import arg_index
from .registry import NodeContext, onnx_op


def linear_scores(ctx: NodeContext, x: Instruction, rows: int | None) -> Instruction:
    """(N, rows) float32 scores: each coefficient row (`rows` of them, or as many as the
    intercepts, or as the coefficients hold) dotted with each input row, plus its intercept."""
    b = ctx.b
    x = float_rows(b, x)
    features = x.array_shape.dims[1]
    coefficients = np.asarray(ctx.required_attr("coefficients"), np.float32)
    intercepts = np.asarray(ctx.attr("intercepts") or [], np.float32)
    if rows is None:
        rows = len(intercepts) or len(coefficients) // max(features, 1)
    if rows < 1 or coefficients.size != rows * features:
        raise ModelError(
            f"coefficients hold {coefficients.size} values, not {rows} rows of "
            f"{features} (the input's features)"
        )
    if intercepts.size not in (0, rows):
        raise ModelError(f"{intercepts.size} intercepts for {rows} coefficient rows")
    weights = b.constant(coefficients.reshape(rows, features).T)
    scores = b.dot(x, weights, DotDims((), (), (1,), (0,)))
    if intercepts.size:
        per_row = b.broadcast(b.constant(intercepts), [1], scores.array_shape.dims)
        scores = b.binary(Op.ADD, scores, per_row)
    return scores


def lone_column_transform(b: ComputationBuilder, scores: Instruction, name: str) -> Instruction:
    """`post_transform` as onnxruntime applies it: a single column only by PROBIT."""
    if scores.array_shape.dims[1] == 1 and name != "PROBIT":
        return scores
    return post_transform(b, scores, name)


@onnx_op("LinearRegressor", domain=ML, since=1)
def linear_regressor(ctx: NodeContext, x: Instruction) -> Instruction:
    targets = ctx.attr("targets", 1)
    if targets < 1:
        raise ModelError(f"targets={targets} must be at least 1")
    # the reference implements NONE only; onnxruntime all of them
    return lone_column_transform(ctx.b, linear_scores(ctx, x, targets), post_transform_name(ctx))


@onnx_op("LinearClassifier", domain=ML, since=1)
def linear_classifier(ctx: NodeContext, x: Instruction) -> list[Instruction]:
    """Outputs the labels (N,) int64 and the scores (N, classes) float32."""
    if ctx.attr("classlabels_strings"):
        raise UnsupportedError("classlabels_strings are not supported (aotc has no string type)")
    labels = ctx.attr("classlabels_ints") or None
    name = post_transform_name(ctx)
    raw = linear_scores(ctx, x, None)
    classes = raw.array_shape.dims[1]
    if classes == 1 and labels is not None and len(labels) == 2:
        return _binary(ctx.b, raw, labels, name)
    if classes == 1:
        return _lone_column(ctx.b, raw, labels, name)
    if labels is not None and len(labels) < classes:
        raise ModelError(f"{len(labels)} classlabels_ints for {classes} coefficient rows")
    label_of = np.asarray(labels if labels is not None else range(classes), np.int64)
    best = arg_index(ctx.b, raw, 1, Direction.GT)  # ties to the first class, as both runtimes
    return [take_last(ctx.b, ctx.b.constant(label_of), best), post_transform(ctx.b, raw, name)]


def _binary(b: ComputationBuilder, raw: Instruction, labels: list[int], name: str):
    """One coefficient row for two classes: the second class where the raw score is > 0."""
    if name == "PROBIT":
        raise UnsupportedError(
            "post_transform PROBIT on a binary LinearClassifier is not "
            "supported (onnxruntime leaves its second score unset, "
            "onnx.reference makes one of the two NaN)"
        )
    f = Formula(b, raw)
    p = b.unary(Op.LOGISTIC, raw) if name == "LOGISTIC" else raw
    scores = b.concatenate([f.sub(1, p), p], 1)
    return [_threshold(b, raw, Direction.GT, 0, labels[1], labels[0]), scores]


def _lone_column(b: ComputationBuilder, raw: Instruction, labels: list[int] | None, name: str):
    """One coefficient row without two class labels."""
    if labels is None:
        # onnxruntime: class 1 where the raw score is > 0
        return [_threshold(b, raw, Direction.GT, 0, 1, 0), lone_column_transform(b, raw, name)]
    # onnxruntime refuses this; the reference gives the first label where the transformed
    # score reaches 0 (NONE) or 0.5, else 0
    scores = post_transform(b, raw, name)
    threshold = 0 if name == "NONE" else 0.5
    return [_threshold(b, scores, Direction.GE, threshold, labels[0], 0), scores]


def _threshold(
    b: ComputationBuilder,
    scores: Instruction,
    direction: Direction,
    threshold: float,
    hit: int,
    miss: int,
) -> Instruction:
    """(N,) int64: `hit` where the single score column compares `direction` to `threshold`."""
    n = scores.array_shape.dims[0]
    column = b.reshape(scores, [n])
    test = b.compare(column, full_like(b, threshold, column), direction)
    return b.select(test, full(b, hit, DType.S64, [n]), full(b, miss, DType.S64, [n]))
