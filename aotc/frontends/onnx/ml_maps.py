"""ZipMap, the map that scikit-learn's default export wraps its probabilities in, and
DictVectorizer and CastMap, which read map inputs (map_inputs.py makes them tensors).

`skl2onnx.to_onnx(classifier)` ends in ZipMap: a sequence of {class: probability} maps,
one per row, which a C API cannot return.  The map is its input tensor [N, classes]
with a label per column, so aotc returns that tensor and records the labels
(`Module.labels`): the header lists them (NAME_<OUTPUT>_LABELS, a macro per class
giving its column) and the compile says so in one line (`Module.notes`).
"""

from __future__ import annotations

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import DType, Instruction
from .ml import ML
from .registry import NodeContext, onnx_op


@onnx_op("ZipMap", domain=ML, since=1)
def zip_map(ctx: NodeContext, x: Instruction) -> Instruction:
    """The probabilities [N, classes] themselves, their columns' labels on the module."""
    ints, strings = ctx.attr("classlabels_int64s"), ctx.attr("classlabels_strings")
    if (ints is None) == (strings is None):
        raise ModelError("exactly one of classlabels_int64s and classlabels_strings is needed")
    labels = tuple(int(v) for v in ints) if ints is not None else tuple(strings)
    dims = x.array_shape.dims
    if x.array_shape.rank != 2 or dims[1] != len(labels):
        raise ShapeError(
            f"input must be N x {len(labels)} (one column per label), got {list(dims)}"
        )
    output = ctx.node.output[0]
    module = ctx.b.module
    module.labels[output] = labels
    module.notes.append(
        f"ZipMap '{output}' returns the probabilities it wraps, "
        f"{x.array_shape.text(layout=False)}; the header lists the classes of its columns"
    )
    return x


@onnx_op("DictVectorizer", domain=ML, since=1)
def dict_vectorizer(ctx: NodeContext, x: Instruction) -> Instruction:
    """A map input's values in vocabulary order (map_inputs.py) as one row [1, V]."""
    return ctx.b.reshape(_map_values(ctx, x), (1, x.array_shape.size))


# CastMap's cast_to -> the element type of its result
CAST_TO = {"TO_FLOAT": DType.F32, "TO_INT64": DType.S64}


@onnx_op("CastMap", domain=ML, since=1)
def cast_map(ctx: NodeContext, x: Instruction) -> Instruction:
    """A map input's values at keys 0 .. max_map - 1 (map_form=SPARSE, map_inputs.py), as
    one row [1, max_map] of cast_to's type (strings: refused, aotc has none)."""
    target = ctx.attr("cast_to", "TO_FLOAT")
    if target not in CAST_TO:
        raise UnsupportedError(f"cast_to={target} is not supported (aotc has no string type)")
    values = ctx.b.convert(_map_values(ctx, x), CAST_TO[target])
    return ctx.b.reshape(values, (1, x.array_shape.size))


def _map_values(ctx: NodeContext, x: Instruction) -> Instruction:
    """The vector a map input became (only a map input is one: see map_inputs.py)."""
    if x.array_shape.rank != 1 or ctx.node.input[0] not in ctx.b.module.labels:
        raise UnsupportedError("reads a map that is not a model input of fixed keys")
    return x
