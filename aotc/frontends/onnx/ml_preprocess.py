"""The feature preprocessing ops of the ai.onnx.ml domain: Normalizer, Scaler, Imputer,
OneHotEncoder and FeatureVectorizer.

Their outputs are float32 as the spec says (Imputer keeps the input's type), which is what
onnxruntime computes; onnx.reference keeps the input's type.  Where the two disagree these
follow onnxruntime, as the comments say.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DType, Instruction, Op
from .helpers import Formula, full_like, reduce
from .ml import ML
from .registry import NodeContext, onnx_op


def per_feature(b: ComputationBuilder, values, what: str, like: Instruction) -> Instruction:
    """`values` (one, or one per feature) broadcast to `like`.  Features are the last dim, the
    spec's [*, F]; onnxruntime's Scaler and Imputer index dim 1, the same up to rank 2."""
    values = np.asarray(values).reshape(-1)
    features = like.array_shape.dims[-1] if like.array_shape.rank else 1
    if values.size == 1:
        return full_like(b, values[0], like)
    if values.size != features:
        raise ModelError(
            f"{what} holds {values.size} values for {features} features "
            "(give one, or one per feature)"
        )
    constant = b.constant(values, like.array_shape.dtype)
    return b.broadcast(constant, [like.array_shape.rank - 1], like.array_shape.dims)


# -- Normalizer -------------------------------------------------------------------

# norm -> each row's divisor (keeping the reduced dim), from float32 rows
NORMS: dict[str, Callable[[Formula, Instruction], Instruction]] = {
    # the spec's max(X) and onnxruntime's, signed; the reference divides by max(|X|)
    "MAX": lambda f, x: reduce(f.b, x, Op.MAXIMUM, [x.array_shape.rank - 1], keepdims=True),
    "L1": lambda f, x: reduce(f.b, f.f(Op.ABS, x), Op.ADD, [x.array_shape.rank - 1], keepdims=True),
    "L2": lambda f, x: f.b.unary(
        Op.SQRT, reduce(f.b, f.mul(x, x), Op.ADD, [x.array_shape.rank - 1], keepdims=True)
    ),
}


@onnx_op("Normalizer", domain=ML, since=1)
def normalizer(ctx: NodeContext, x: Instruction) -> Instruction:
    """Each row (the last dim) divided by its norm; a row whose norm is 0 is kept."""
    if x.array_shape.rank not in (1, 2):
        raise ShapeError(f"input must be N x features or one row, got {list(x.array_shape.dims)}")
    norm = ctx.choice("norm", tuple(NORMS))
    x = ctx.b.convert(x, DType.F32)
    f = Formula(ctx.b, x)
    divisor = ctx.b.broadcast_to(NORMS[norm](f, x), x.array_shape.dims)
    return f.div(x, f.where(divisor, Direction.EQ, 0, 1, divisor))


# -- Scaler -----------------------------------------------------------------------


@onnx_op("Scaler", domain=ML, since=1)
def scaler(ctx: NodeContext, x: Instruction) -> Instruction:
    """(x - offset) * scale, per feature (the last dim), as float32."""
    b = ctx.b
    if x.array_shape.rank == 0:
        raise ShapeError("input must have at least one dimension")
    # onnxruntime computes a double input in double, the others in float
    x = b.convert(x, DType.F64 if x.array_shape.dtype is DType.F64 else DType.F32)
    offset = per_feature(b, ctx.attr("offset") or [0.0], "offset", x)
    scale = per_feature(b, ctx.attr("scale") or [1.0], "scale", x)
    shifted = b.binary(Op.SUBTRACT, x, offset)
    return b.convert(b.binary(Op.MULTIPLY, shifted, scale), DType.F32)


# -- Imputer ----------------------------------------------------------------------


@onnx_op("Imputer", domain=ML, since=1)
def imputer(ctx: NodeContext, x: Instruction) -> Instruction:
    """Elements equal to the replaced value (NaN matches NaN) become the imputed value of
    their feature (the last dim); the output keeps the input's type."""
    b = ctx.b
    if x.array_shape.rank == 0:
        raise ShapeError("input must have at least one dimension")
    kind = "float" if x.array_shape.dtype.is_float else "int64"
    imputed = ctx.attr(f"imputed_value_{kind}s")
    if not imputed:
        # the reference takes whichever list is given; onnxruntime needs the input's kind
        raise ModelError(f"an {x.array_shape.dtype.text} input needs imputed_value_{kind}s")
    # the schema's default replaced value is 0 (0.0), in both runtimes
    replaced = ctx.attr(f"replaced_value_{kind}")
    fill = per_feature(b, imputed, f"imputed_value_{kind}s", x)
    if kind == "float" and math.isnan(replaced):
        hit = b.compare(x, x, Direction.NE)
    elif kind == "int64" and not _fits(replaced, x.array_shape.dtype):
        return x  # no element can equal it
    else:
        hit = b.compare(x, full_like(b, replaced, x), Direction.EQ)
    return b.select(hit, fill, x)


def _fits(value: int, dtype: DType) -> bool:
    info = np.iinfo(dtype.numpy)
    return info.min <= value <= info.max


# -- OneHotEncoder ----------------------------------------------------------------


@onnx_op("OneHotEncoder", domain=ML, since=1)
def one_hot_encoder(ctx: NodeContext, x: Instruction) -> Instruction:
    """x's dims + (categories,) float32: 1 at each element's category.

    An unknown category is an all-zero row.  With zeros=0 onnxruntime fails the run instead;
    compiled code cannot fail at run time, so zeros=0 compiles as zeros=1 (inputs whose
    categories are all known give onnxruntime's output).
    """
    b = ctx.b
    if ctx.attr("cats_strings"):
        raise UnsupportedError("cats_strings are not supported (aotc has no string type)")
    categories = ctx.attr("cats_int64s")
    if not categories:
        raise ModelError("OneHotEncoder has no cats_int64s")
    # floats are cast to integers (truncated) as the spec and onnxruntime say; the reference
    # compares the float values with the categories
    codes = b.convert(x, DType.S64)
    rank = x.array_shape.rank
    dims = (*x.array_shape.dims, len(categories))
    known = b.broadcast(b.constant(np.asarray(categories, np.int64)), [rank], dims)
    hit = b.compare(b.broadcast(codes, list(range(rank)), dims), known, Direction.EQ)
    # a repeated category counts at its last position, as in onnxruntime's category map
    last = [c not in categories[i + 1 :] for i, c in enumerate(categories)]
    if not all(last):
        hit = b.binary(Op.AND, hit, b.broadcast(b.constant(np.asarray(last)), [rank], dims))
    return b.convert(hit, DType.F32)


# -- FeatureVectorizer ------------------------------------------------------------


@onnx_op("FeatureVectorizer", domain=ML, since=1)
def feature_vectorizer(ctx: NodeContext, *xs: Instruction) -> Instruction:
    """The inputs as float32 rows, each cut or zero-padded to its inputdimensions entry,
    side by side."""
    b = ctx.b
    widths = ctx.required_attr("inputdimensions")
    if len(widths) != len(xs):
        raise ModelError(f"inputdimensions has {len(widths)} entries for {len(xs)} inputs")
    if min(widths) < 1:
        raise ModelError(f"inputdimensions {list(widths)} must be positive")
    rows = [_as_rows(b, x) for x in xs]
    batches = {r.array_shape.dims[0] for r in rows}
    if len(batches) > 1:
        raise ShapeError(f"the inputs have different numbers of rows: {sorted(batches)}")
    return b.concatenate([_fit_columns(b, r, w) for r, w in zip(rows, widths)], 1)


def _as_rows(b: ComputationBuilder, x: Instruction) -> Instruction:
    """x as float32 (N, columns): a 1-D input is one row (the spec and onnxruntime; the
    reference makes it a column), higher ranks keep their first dim (onnxruntime)."""
    if x.array_shape.rank == 0:
        raise ShapeError("inputs must have at least one dimension")
    dims = x.array_shape.dims
    shape = [1, dims[0]] if x.array_shape.rank == 1 else [dims[0], int(np.prod(dims[1:]))]
    return b.convert(b.reshape(x, shape), DType.F32)


def _fit_columns(b: ComputationBuilder, x: Instruction, width: int) -> Instruction:
    n, columns = x.array_shape.dims
    if columns > width:
        return b.slice(x, [0, 0], [n, width])
    if columns < width:
        return b.pad(x, b.scalar(0, DType.F32), [0, 0], [0, width - columns])
    return x
