"""A GEMM reading A's rows where they are (panels.py's `RowsInPlace`), which dot.py's
plan_gemm takes where the room at its step would not hold A's packed block: a lone
MatMul's plan has none (its input and output are the peak).  Results against numpy in
float64 (rtol 1e-4, atol 1e-4 of the largest magnitude) on the host and AVX2, serial and
shared out to threads, with edge columns, rows past the last whole register tile, K
past one slice, batches and a fused epilogue."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_gemm import _close

from aotc.backends.cpu import parse_target
from aotc.backends.cpu.contraction import contraction_plans
from aotc.driver import CompileOptions, compile_model

# (A's shape, B's shape, epilogue): few rows, N with edge columns, K over several slices,
# a batch of A's, big enough to share out, an epilogue
CASES = [
    ((5, 17), (17, 3), None),
    ((37, 300), (300, 100), None),
    ((3, 41, 700), (700, 52), "Relu"),
    ((128, 1024), (1024, 256), "Relu"),
    ((300, 64), (64, 1000), "Sigmoid"),
]


def _matmul(a, b, epilogue, rng):
    weights = (rng.standard_normal(b) / np.sqrt(b[0])).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y" if epilogue else "z"])]
    if epilogue:
        nodes.append(helper.make_node(epilogue, ["y"], ["z"]))
    graph = helper.make_graph(
        nodes,
        "rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, a)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model, weights


def _reference(x, w, epilogue):
    y = x.astype(np.float64) @ w.astype(np.float64)
    return {None: y, "Relu": np.maximum(y, 0), "Sigmoid": 1 / (1 + np.exp(-y))}[epilogue]


@pytest.mark.parametrize("target", ["host", "x86_64:x86-64-v3"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0] + c[1])))
def test_a_read_in_place_at_the_peak(case, threads, target):
    a, b, epilogue = case
    rng = np.random.default_rng(31)
    model, weights = _matmul(a, b, epilogue, rng)
    options = CompileOptions(target=target, threads=threads, plan_for="memory")
    compiled = compile_model(model, options)
    cpu = parse_target(target)
    plans = [
        plan
        for i in compiled.plan.schedule
        if (found := contraction_plans(cpu, compiled.plan, i)) is not None
        for plan in found[1]
    ]
    assert [getattr(p, "a_in_place", False) for p in plans] == [True]
    assert not [x for x in compiled.plan.buffers if x.name.endswith(".temporary")]
    x = rng.standard_normal(a).astype(np.float32)
    got = compiled.load()(x=x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    _close(got, _reference(x, weights, epilogue), f"{case} {threads} {target}")
