"""Arrays without elements compile at every -O level: an empty result, a sum over
nothing (zeros) and a reduction over nothing (its initial value), against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.driver import CompileOptions, compile_model


def _model(nodes, inputs, initializers=()):
    names = ("y", "s", "z", "c")
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("opt_level", [0, 2])
def test_empty_arrays(opt_level):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    inputs = [
        helper.make_tensor_value_info("batch", TensorProto.FLOAT, [0, 4]),  # no rows
        helper.make_tensor_value_info("wide", TensorProto.FLOAT, [2, 0]),  # rows of nothing
        helper.make_tensor_value_info("tall", TensorProto.FLOAT, [0, 3]),
        helper.make_tensor_value_info("images", TensorProto.FLOAT, [0, 3, 8, 8]),
    ]
    nodes = [
        helper.make_node("MatMul", ["batch", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
        helper.make_node("ReduceSum", ["wide", "axis"], ["s"], keepdims=0),
        helper.make_node("MatMul", ["wide", "tall"], ["z"]),
        helper.make_node("Conv", ["images", "k"], ["f"], pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["f"], ["flat"]),
        helper.make_node("Gemm", ["flat", "g"], ["c"]),
    ]
    k = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = rng.standard_normal((256, 2)).astype(np.float32)
    axis = numpy_helper.from_array(np.array([1], np.int64), "axis")
    weights = [numpy_helper.from_array(v, n) for v, n in ((w, "w"), (k, "k"), (g, "g"))]
    model = _model(nodes, inputs, [*weights, axis])
    compiled = compile_model(model, CompileOptions(opt_level=opt_level))
    feeds = {
        "batch": np.zeros((0, 4), np.float32),
        "wide": np.zeros((2, 0), np.float32),
        "tall": np.zeros((0, 3), np.float32),
        "images": np.zeros((0, 3, 8, 8), np.float32),
    }
    y, s, z, c = compiled.load()(**feeds)
    assert y.shape == (0, 3) and c.shape == (0, 2)
    np.testing.assert_array_equal(s, np.zeros(2, np.float32))
    np.testing.assert_array_equal(z, np.zeros((2, 3), np.float32))
