"""Padding taps: window taps that only ever read padding leave the convolution."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.frontends.onnx import import_onnx
from aotc.ir import Op
from aotc.ir.evaluate import evaluate
from aotc.passes.conv_layout import ConvLayoutAssignment
from aotc.passes.padding_taps import PaddingTaps


def _conv_model(cin, cout, hw, kernel, dilation, pads, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((cout, cin, *kernel)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], dilations=dilation, pads=pads)
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, *hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


# (cin, cout, image, kernel, dilation, pads, window left after the pass)
CASES = [
    (8, 4, (32, 32), (3, 3), (36, 36), (36, 36, 36, 36), (1, 1)),  # DeepLab's rate 36
    (8, 4, (32, 32), (3, 3), (24, 24), (24, 24, 24, 24), (3, 3)),  # every tap reads some
    (3, 2, (6, 9), (3, 3), (7, 2), (7, 2, 7, 2), (1, 3)),  # one dim only
    (3, 2, (5, 5), (5, 5), (4, 4), (8, 8, 8, 8), (3, 3)),  # the outer taps of 5
    (2, 3, (10,), (3,), (12,), (12, 12), (1,)),  # 1-D
    (2, 3, (10,), (3,), (6,), (12, 0), (2,)),  # one side
]


@pytest.mark.parametrize(("cin", "cout", "hw", "kernel", "dilation", "pads", "left"), CASES)
def test_dropping_padding_taps_keeps_the_result(cin, cout, hw, kernel, dilation, pads, left):
    model = _conv_model(cin, cout, hw, kernel, dilation, pads)
    x = np.random.default_rng(1).standard_normal((1, cin, *hw)).astype(np.float32)
    module = import_onnx(model)
    (expected,) = evaluate(module, [x])
    ConvLayoutAssignment().run(module)
    PaddingTaps().run(module)
    (conv,) = [i for i in module.entry.instructions if i.op is Op.CONVOLUTION]
    assert conv.window.size == left
    (got,) = evaluate(module, [x])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
