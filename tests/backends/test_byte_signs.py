"""Integer products of two s8 or two u8 operands (frontends/onnx/quantize.sign_flipped).

One operand is moved to the other 8-bit type with its sign bit flipped (its zero point
too), so that the product has one u8 and one s8 operand and takes the byte dot products
(quads.py) where the host has them (or AMX tiles, amx.py, which take either sign).  Each case compiles an ONNX model for the host and
compares with onnx.reference: the s32 results must be exact.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import aotc
from aotc.backends.cpu import parse_target
from aotc.backends.cpu.contraction import contraction_plans

HOST = parse_target("host")
TYPES = {np.int8: (TensorProto.INT8, -128, 128), np.uint8: (TensorProto.UINT8, 0, 256)}


def _random(rng, dtype, shape):
    _, low, high = TYPES[dtype]
    return rng.integers(low, high, shape).astype(dtype)


def _check(graph, feeds):
    """Compile, run, compare exactly; returns whether the products ran as byte quads."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    compiled = aotc.compile(model)
    (got,) = compiled.load()(*feeds.values())
    np.testing.assert_array_equal(got, expected)
    plans = [contraction_plans(HOST, compiled.plan, i) for i in compiled.plan.schedule]
    return all(_byte_products(p[1][-1]) for p in plans if p is not None)


def _byte_products(plan) -> bool:
    """Whether a plan multiplies bytes as they are: AMX tiles, or vpdpbusd quads."""
    return plan.kind == "amx" or plan.config.quads


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("zero_points", [False, True])
def test_matmul_of_one_sign(dtype, zero_points):
    rng = np.random.default_rng(5)
    m, k, n = 24, 200, 40
    a, w = _random(rng, dtype, (m, k)), _random(rng, dtype, (k, n))
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["a", "w"]
    if zero_points:  # a per-tensor one for A, per-column ones for B
        inits += [
            numpy_helper.from_array(_random(rng, dtype, ()), "za"),
            numpy_helper.from_array(_random(rng, dtype, (n,)), "zb"),
        ]
        inputs += ["za", "zb"]
    elem = TYPES[dtype][0]
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", inputs, ["y"])],
        "mm",
        [helper.make_tensor_value_info("a", elem, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
        inits,
    )
    quads = _check(graph, {"a": a})
    assert quads or not HOST.has_byte_dots


def test_conv_of_signed_bytes():
    rng = np.random.default_rng(6)
    x = _random(rng, np.int8, (1, 8, 12, 12))
    w = _random(rng, np.int8, (16, 8, 3, 3))
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "zx"], ["y"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 16, 12, 12])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.int8(-3), "zx")],
    )
    quads = _check(graph, {"x": x})
    assert quads or not HOST.has_byte_dots
