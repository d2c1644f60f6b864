"""Small ONNX models with symbolic dims for the bounded-dims tests (tests/bounded,
tests/cuda)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(nodes, inputs, outputs, initializers) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


def mlp(seed: int = 0) -> onnx.ModelProto:
    """x [batch, 32] -> softmax(relu(x W1 + b1) W2) [batch, 10], and the column sums of
    the probabilities over the batch [10] (a reduction along the bounded dim)."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((64, 10)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["p"], axis=-1),
        helper.make_node("ReduceSum", ["p", "axis0"], ["s"], keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])]
    outputs = [
        helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 10]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [10]),
    ]
    return _model(nodes, inputs, outputs, inits)


def encoder_layer(hidden: int = 64, heads: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A BERT-style encoder layer on x [batch, seq, hidden]: self-attention (softmax over
    the bounded seq), a residual and a layer norm, a GELU feed-forward and another."""
    rng = np.random.default_rng(seed)
    head = hidden // heads

    def weight(name, *shape):
        scale = 1 / np.sqrt(shape[0]) if len(shape) == 2 else 1.0
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    inits = [weight(n, hidden, hidden) for n in ("wq", "wk", "wv", "wo")]
    inits += [weight("w1", hidden, 2 * hidden), weight("w2", 2 * hidden, hidden)]
    inits += [
        weight("g1", hidden),
        weight("g2", hidden),
        weight("be1", hidden),
        weight("be2", hidden),
    ]
    inits += [
        numpy_helper.from_array(np.array([0, 0, heads, head], np.int64), "split_heads"),
        numpy_helper.from_array(np.array([0, 0, hidden], np.int64), "join_heads"),
        numpy_helper.from_array(np.array(1 / np.sqrt(head), np.float32), "scale"),
    ]
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [
            helper.make_node("MatMul", ["x", f"w{name}"], [f"{name}0"]),
            helper.make_node("Reshape", [f"{name}0", "split_heads"], [f"{name}1"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["q1"], ["q2"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k1"], ["k2"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v1"], ["v2"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q2", "k2"], ["scores0"]),
        helper.make_node("Mul", ["scores0", "scale"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v2"], ["ctx0"]),
        helper.make_node("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx1", "join_heads"], ["ctx"]),
        helper.make_node("MatMul", ["ctx", "wo"], ["proj"]),
        helper.make_node("Add", ["proj", "x"], ["res1"]),
        helper.make_node("LayerNormalization", ["res1", "g1", "be1"], ["n1"], axis=-1),
        helper.make_node("MatMul", ["n1", "w1"], ["f0"]),
        helper.make_node("Erf", ["f0"], ["f1"]),
        helper.make_node("Add", ["f1", "n1_one"], ["f2"]),
        helper.make_node("Mul", ["f0", "f2"], ["f3"]),
        helper.make_node("MatMul", ["f3", "w2"], ["f4"]),
        helper.make_node("Add", ["f4", "n1"], ["res2"]),
        helper.make_node("LayerNormalization", ["res2", "g2", "be2"], ["y"], axis=-1),
    ]
    inits.append(numpy_helper.from_array(np.array(1, np.float32), "n1_one"))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])]
    return _model(nodes, inputs, outputs, inits)


def shape_driven(hidden: int = 16) -> onnx.ModelProto:
    """x [batch, seq, hidden] through the shape arithmetic exporters write: Shape ->
    Gather -> Unsqueeze -> Concat -> Reshape (merging batch and seq, then splitting them
    back), position ids from Range over Shape's seq, a mask from ConstantOfShape and
    Expand, a table sliced to [:seq] and a Flatten of two bounded dims.  Outputs:
    y [batch, seq, hidden] and the mask sums [batch]."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal((64, hidden)).astype(np.float32)
    w = rng.standard_normal((hidden, hidden)).astype(np.float32)
    const = {
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "i0": np.array([0], np.int64),
        "i1": np.array([1], np.int64),
        "minus1": np.array([-1], np.int64),
        "hidden": np.array([hidden], np.int64),
        "axis1": np.array([1], np.int64),
    }
    inits = [numpy_helper.from_array(v, k) for k, v in const.items()]
    inits += [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")]
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "zero"], ["batch"], axis=0),
        n("Gather", ["shape", "one"], ["seq"], axis=0),
        n("Unsqueeze", ["batch", "i0"], ["batch1"]),
        n("Unsqueeze", ["seq", "i0"], ["seq1"]),
        # rows = batch * seq: merge, a dot, and the split back by the computed shape
        n("Mul", ["batch1", "seq1"], ["rows"]),
        n("Concat", ["rows", "hidden"], ["flat_shape"], axis=0),
        n("Reshape", ["x", "flat_shape"], ["flat"]),
        n("MatMul", ["flat", "w"], ["flat_y"]),
        n("Concat", ["batch1", "seq1", "minus1"], ["back_shape"], axis=0),
        n("Reshape", ["flat_y", "back_shape"], ["y0"]),
        # position embeddings: Range(0, seq) gathers rows of the table
        n("Range", ["zero", "seq", "one"], ["positions"]),
        n("Gather", ["table", "positions"], ["pos"], axis=0),
        n("Add", ["y0", "pos"], ["y1"]),
        # the table sliced to [:seq] as well
        n("Slice", ["table", "i0", "seq1", "i0"], ["rows_of_table"]),
        n("Add", ["y1", "rows_of_table"], ["y"]),
        # a mask of ones [batch, seq] expanded to [batch, 1, seq], flattened, summed
        n("Concat", ["batch1", "seq1"], ["mask_shape"], axis=0),
        n(
            "ConstantOfShape",
            ["mask_shape"],
            ["ones"],
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
        ),
        n("Concat", ["batch1", "i1", "seq1"], ["wide_shape"], axis=0),
        n("Unsqueeze", ["ones", "i1"], ["ones3"]),
        n("Expand", ["ones3", "wide_shape"], ["wide"]),
        n("Flatten", ["wide"], ["flat_mask"], axis=1),
        n("ReduceSum", ["flat_mask", "axis1"], ["counts"], keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden]),
        helper.make_tensor_value_info("counts", TensorProto.FLOAT, ["batch"]),
    ]
    return _model(nodes, inputs, outputs, inits)
