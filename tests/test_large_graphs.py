"""Graphs far deeper or wider than real models compile without recursing over the graph.

A pass or emitter that recursed per instruction ended in RecursionError (an internal
error) on a 20,000-op chain; the low recursion limit below catches any walk that
recurses as deep as the model again.  The graphs are bench/compile_scaling.py's.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from aotc_testing import bench_module
from onnx import TensorProto, helper

import aotc
from aotc.ir import Op
from aotc.runner import LoadedModel

SCALING = bench_module("compile_scaling")
LOW_LIMIT = 400


def _compile_under_low_limit(tmp_path, model: onnx.ModelProto):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(LOW_LIMIT)
    try:
        return aotc.compile(path)
    finally:
        sys.setrecursionlimit(limit)


def _input() -> np.ndarray:
    shape = (SCALING.ROWS, SCALING.WIDTH)
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_chain_compiles_under_a_low_recursion_limit(tmp_path):
    """A 5,000-node chain needs no more stack than a small model, though its kernels
    each compute a chain longer than the limit."""
    length = 5_000
    compiled = _compile_under_low_limit(tmp_path, SCALING.chain_model(length))
    fused = [i for i in compiled.module.entry.instructions if i.op is Op.FUSION]
    assert max(len(f.called[0].instructions) for f in fused) > LOW_LIMIT
    x = _input()
    got = LoadedModel(compiled).run([x])[0]
    np.testing.assert_allclose(got, SCALING.chain_expected(x, length), rtol=1e-4, atol=1e-3)


def test_transformer_blocks_compile_under_a_low_recursion_limit(tmp_path):
    """30 blocks of MatMul, layer normalization and softmax, 510 nodes each reading the
    one before: as deep as the limit, and right to float32's precision (float64 numpy)."""
    nodes = 30 * SCALING.BLOCK_NODES
    compiled = _compile_under_low_limit(tmp_path, SCALING.transformer_model(nodes))
    x = _input()
    got = LoadedModel(compiled).run([x])[0]
    want = SCALING.transformer_expected(x, nodes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


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
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    compiled = _compile_under_low_limit(tmp_path, model)
    x_value = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = LoadedModel(compiled).run([x_value])[0]
    parts = [-x_value if n % 2 else np.abs(x_value) for n in range(count)]
    if op == "Sum":
        np.testing.assert_allclose(got, np.sum(parts, axis=0), rtol=1e-4, atol=1e-2)
    else:
        np.testing.assert_array_equal(got, np.concatenate(parts, axis=1))
