"""A Scan whose iterations are independent (states passed through) lowers once for all
rows (frontends/onnx/mapped_scan.py): same results as onnxruntime, no unrolled copies."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aotc


def _distance_scan(rows: int, features: int, reduce_op: str, opset: int, passes: bool = True):
    """skl2onnx's k-nearest-neighbours distances: a Scan over the training rows computing
    each one's squared distance to every input row; `passes`: the state is passed on."""
    body_nodes = [
        helper.make_node("Identity" if passes else "Neg", ["state_in"], ["state_out"]),
        helper.make_node("Sub", ["state_in", "row"], ["diff"]),
        helper.make_node(reduce_op, ["diff"], ["distance"], axes=[1], keepdims=0),
        helper.make_node("Sqrt", ["distance"], ["scan_out"])
        if reduce_op == "ReduceSumSquare"
        else helper.make_node("Abs", ["distance"], ["scan_out"]),
    ]
    f = TensorProto.FLOAT
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("state_in", f, [None, features]),
            helper.make_tensor_value_info("row", f, [features]),
        ],
        [
            helper.make_tensor_value_info("state_out", f, [None, features]),
            helper.make_tensor_value_info("scan_out", f, [None]),
        ],
    )
    train = np.random.default_rng(0).standard_normal((rows, features)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node(
                "Scan", ["x", "train"], ["final", "distances"], num_scan_inputs=1, body=body
            ),
            helper.make_node("Transpose", ["distances"], ["y"], perm=[1, 0]),
        ],
        "knn",
        [helper.make_tensor_value_info("x", f, [8, features])],
        [
            helper.make_tensor_value_info("final", f, None),
            helper.make_tensor_value_info("y", f, None),
        ],
        initializer=[numpy_helper.from_array(train, "train")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize(
    ("reduce_op", "opset", "passes"),
    [("ReduceSumSquare", 13, True), ("ReduceMax", 13, True), ("ReduceSumSquare", 13, False)],
)
def test_a_scan_of_independent_rows_matches_onnxruntime(reduce_op, opset, passes):
    rows = 300
    model = _distance_scan(rows, 5, reduce_op, opset, passes)
    x = np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32)
    compiled = aotc.compile(model)
    got = compiled.load().run([x])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for g, w in zip(got, session.run(None, {"x": x})):
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-5, atol=1e-5)
    # mapped: a few kernels, whatever the row count; a state that changes unrolls instead
    kernels = [i for i in compiled.module.entry.instructions if i.op.text == "fusion"]
    assert (len(kernels) < 10) == passes
