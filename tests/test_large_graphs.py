"""Graphs far deeper or wider than real models compile without recursing over the graph.

A pass or emitter that recursed per instruction ended in RecursionError (an internal
error) on a 20,000-op chain; the low recursion limit below catches any walk that
recurses as deep as the model again.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aotc
from aotc.runner import LoadedModel

STEP = np.float32(0.001)


def _save(tmp_path, nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return path


def _chain(tmp_path, length: int):
    """x -> Add(step) -> Relu -> Add(step) -> ... `length` nodes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    step = numpy_helper.from_array(np.full([1], STEP, np.float32), "step")
    nodes, previous = [], "x"
    for n in range(length):
        out = "y" if n == length - 1 else f"t{n}"
        if n % 2 == 0:
            nodes.append(helper.make_node("Add", [previous, "step"], [out]))
        else:
            nodes.append(helper.make_node("Relu", [previous], [out]))
        previous = out
    return _save(tmp_path, nodes, [x], [y], [step])


def _chain_expected(x: np.ndarray, length: int) -> np.ndarray:
    value = x.astype(np.float32)
    for n in range(length):
        value = value + STEP if n % 2 == 0 else np.maximum(value, 0)
    return value


def _check_chain(tmp_path, length: int) -> None:
    compiled = aotc.compile(_chain(tmp_path, length))
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    got = LoadedModel(compiled).run([x])[0]
    np.testing.assert_allclose(got, _chain_expected(x, length), rtol=1e-4, atol=1e-3)


def test_chain_compiles_under_a_low_recursion_limit(tmp_path):
    """A 5,000-node chain needs no more stack than a small model."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        _check_chain(tmp_path, 5_000)
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("op", ["Sum", "Concat"])
def test_node_with_thousands_of_inputs(tmp_path, op):
    """One node reading 2,000 values, under the low recursion limit too."""
    count = 2_000
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Neg" if n % 2 else "Abs", ["x"], [f"a{n}"]) for n in range(count)]
    names = [f"a{n}" for n in range(count)]
    if op == "Sum":
        nodes.append(helper.make_node("Sum", names, ["y"]))
        shape = [2, 3]
    else:
        nodes.append(helper.make_node("Concat", names, ["y"], axis=1))
        shape = [2, 3 * count]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        compiled = aotc.compile(_save(tmp_path, nodes, [x], [y], []))
    finally:
        sys.setrecursionlimit(limit)
    x_value = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = LoadedModel(compiled).run([x_value])[0]
    parts = [-x_value if n % 2 else np.abs(x_value) for n in range(count)]
    if op == "Sum":
        np.testing.assert_allclose(got, np.sum(parts, axis=0), rtol=1e-4, atol=1e-2)
    else:
        np.testing.assert_array_equal(got, np.concatenate(parts, axis=1))
