"""conv_bands: a dilated convolution split into output bands with constant live taps.

The bands of a dim are checked by hand for DeepLab's geometries; the pass alone
against the evaluator of the module before it (f32, rtol 1e-5) over 1-D, 2-D,
asymmetric and grouped cases, with the convolutions it leaves; whole compiles against
onnxruntime (f32, rtol 1e-4, atol 1e-4).  Cases where the split saves too little, or
only with tiny bands, must leave the convolution alone.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aotc
from aotc.frontends.onnx import import_onnx
from aotc.ir import Op, Window
from aotc.ir.evaluate import evaluate
from aotc.passes.conv_bands import Band, ConvBands, dim_bands
from aotc.passes.conv_layout import ConvLayoutAssignment
from aotc.passes.padding_taps import PaddingTaps


def _window(size, dilation, pad_low, pad_high) -> Window:
    return Window.make([size], None, [pad_low], [pad_high], None, [dilation])


# (taps, dilation, pad low, pad high, extent, bands as (start, stop, first, last))
BANDS = [
    # DeepLab's rate 24 over 32: outer taps in the outer 8 outputs only
    (3, 24, 24, 24, 32, [(0, 8, 1, 2), (8, 24, 1, 1), (24, 32, 0, 1)]),
    # rate 12: all three taps in the middle 8
    (3, 12, 12, 12, 32, [(0, 12, 1, 2), (12, 20, 0, 2), (20, 32, 0, 1)]),
    # asymmetric padding: the high side's tap never misses
    (3, 6, 12, 0, 20, [(0, 6, 2, 2), (6, 12, 1, 2), (12, 20, 0, 2)]),
    # 5 taps of rate 2: bands of 2 merge into their neighbours (padded again)
    (5, 2, 4, 4, 32, [(0, 4, 1, 4), (4, 32, 0, 4)]),
]


@pytest.mark.parametrize(("taps", "dilation", "low", "high", "extent", "bands"), BANDS)
def test_bands_of_a_dim(taps, dilation, low, high, extent, bands):
    window = _window(taps, dilation, low, high)
    outputs = extent + low + high - (taps - 1) * dilation
    split = dim_bands(window, 0, extent, outputs)
    assert split is not None
    assert split.bands == tuple(Band(*band) for band in bands)


def test_a_merged_band_pads_what_its_taps_miss():
    split = dim_bands(_window(5, 2, 4, 4), 0, 32, 32)
    assert split is not None
    first = split.reads(split.bands[0])
    assert (first.low, first.high, first.pad_low, first.pad_high) == (0, 8, 2, 0)


def test_no_band_where_an_output_reads_only_padding():
    assert dim_bands(_window(1, 1, 3, 0), 0, 4, 7) is None


def _conv_model(cin, cout, hw, kernel, dilation, pads, groups=1, strides=None, seed=0):
    """Conv (+ bias) + Relu, ONNX pads [begin..., end...]."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((cout, cin // groups, *kernel)) / np.sqrt(cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    attrs = {"dilations": dilation, "pads": pads, "group": groups}
    if strides:
        attrs["strides"] = strides
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, *hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _windows(module) -> list[tuple[int, ...]]:
    return sorted(
        i.window.size for c in module.computations for i in c.instructions if i.op is Op.CONVOLUTION
    )


# a 3x3 rate-24 kernel over 32x32: the windows of its 3 x 3 boxes of bands
RATE_24 = (64, 16, (32, 32), (3, 3), (24, 24), (24, 24, 24, 24))
RATE_24_BOXES = [(2, 2), (2, 1), (2, 2), (1, 2), (1, 1), (1, 2), (2, 2), (2, 1), (2, 2)]

# (cin, cout, image, kernel, dilation, ONNX pads, groups, windows left after the pass)
SPLIT = {
    "rate 24 (DeepLab)": (*RATE_24, 1, RATE_24_BOXES),
    "rate 12, odd image": (
        64,
        16,
        (33, 33),
        (3, 3),
        (12, 12),
        (12, 12, 12, 12),
        1,
        [(2, 2), (2, 3), (2, 2), (3, 2), (3, 3), (3, 2), (2, 2), (2, 3), (2, 2)],
    ),
    "1-D, 5 taps": (64, 8, (32,), (5,), (8,), (16, 16), 1, [(3,), (4,), (4,), (3,)]),
    "asymmetric pads": (
        64,
        8,
        (20, 30),
        (3, 3),
        (12, 9),
        (10, 9, 14, 3),
        1,
        [(2, 2), (2, 3), (1, 2), (1, 3), (2, 2), (2, 3)],
    ),
    "one dim only": (64, 8, (32, 6), (3, 3), (24, 1), (24, 1, 24, 1), 1, [(2, 3), (1, 3), (2, 3)]),
    "two groups": (*RATE_24, 2, RATE_24_BOXES),
}

# the same, left alone
KEPT = {
    # a depthwise window's 9 multiply-adds per output cost less than copying it
    "depthwise": (32, 32, (32, 32), (3, 3), (24, 24), (24, 24, 24, 24), 32, [(3, 3)]),
    # the backbone's 5x5 rate 2: the outer taps miss 2 outputs of 32 a side
    "rate 2": (64, 8, (32, 32), (5, 5), (2, 2), (4, 4, 4, 4), 1, [(5, 5)]),
    # a fifth of the work saved, in 1-D: under the rule's share
    "1-D rate 12": (64, 8, (40,), (3,), (12,), (12, 12), 1, [(3,)]),
    # every tap reads the image for every output
    "no padding": (64, 8, (32, 32), (3, 3), (8, 8), (0, 0, 0, 0), 1, [(3, 3)]),
}


def _run_pass(case):
    cin, cout, hw, kernel, dilation, pads, groups, _ = case
    model = _conv_model(cin, cout, hw, kernel, dilation, pads, groups)
    x = np.random.default_rng(1).standard_normal((1, cin, *hw)).astype(np.float32)
    module = import_onnx(model)
    (want,) = evaluate(module, [x])
    ConvLayoutAssignment().run(module)
    PaddingTaps().run(module)
    changed = ConvBands().run(module)
    (got,) = evaluate(module, [x])
    return module, changed, got, want


@pytest.mark.parametrize("name", list(SPLIT))
def test_split_keeps_the_result(name):
    module, changed, got, want = _run_pass(SPLIT[name])
    assert changed
    assert _windows(module) == sorted(SPLIT[name][-1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(KEPT))
def test_split_not_worth_it_leaves_the_convolution(name):
    module, changed, got, want = _run_pass(KEPT[name])
    assert not changed
    assert _windows(module) == KEPT[name][-1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_strided_convolution_is_left_alone():
    model = _conv_model(64, 8, (32, 32), (3, 3), (12, 12), (12, 12, 12, 12), strides=(2, 2))
    module = import_onnx(model)
    ConvLayoutAssignment().run(module)
    assert not ConvBands().run(module)


COMPILED = ["rate 24 (DeepLab)", "rate 12, odd image", "1-D, 5 taps", "asymmetric pads"]


@pytest.mark.parametrize("name", [*COMPILED, "two groups"])
def test_compiled_split_matches_onnxruntime(name):
    cin, cout, hw, kernel, dilation, pads, groups, windows = SPLIT[name]
    model = _conv_model(cin, cout, hw, kernel, dilation, pads, groups)
    x = np.random.default_rng(2).uniform(-2, 2, (1, cin, *hw)).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options)
    (want,) = session.run(None, {"x": x})
    compiled = aotc.compile(model)
    assert _windows(compiled.module) == sorted(windows)
    (got,) = compiled.load()(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
