"""conv_phases: base-dilated convolutions (ConvTranspose, JAX's conv_transpose) as
stride-phase convolutions of the undilated input, with no zero multiplied.

The pass alone is checked against the evaluator of the module before it (f64, to
1e-12) over many geometries; whole compiles of ONNX ConvTranspose models against
onnxruntime (f32, rtol 1e-4, atol 1e-5).  Every case also checks that no convolution
with base dilation is left.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from aotc_testing import convolution_case
from onnx import TensorProto, helper, numpy_helper
from pass_testing import check_pass

import aotc
from aotc.frontends.hlo import import_hlo
from aotc.ir import ComputationBuilder, ConvDims, DType, Instruction, Module, Op, Shape, Window
from aotc.ir.evaluate import evaluate
from aotc.ir.shapes import windowed_output_dims
from aotc.ir.verify import verify
from aotc.passes.conv_phases import ConvPhases

K2S2_1D = """HloModule m
ENTRY %main (x: f32[1,2,3], w: f32[3,2,2]) -> f32[1,3,6] {
  %x = f32[1,2,3]{2,1,0} parameter(0)
  %w = f32[3,2,2]{2,1,0} parameter(1)
  ROOT %c = f32[1,3,6]{2,1,0} convolution(f32[1,2,3]{2,1,0} %x, f32[3,2,2]{2,1,0} %w), window={size=2 pad=1_1 lhs_dilate=2}, dim_labels=bf0_oi0->bf0
}"""

# phase 0 reads tap 1, phase 1 tap 0, both at the input sample itself: one 1x1
# convolution of the stacked taps, interleaved by a transpose
K2S2_1D_PHASES = """HloModule m
ENTRY %main (x: f32[1,2,3], w: f32[3,2,2]) -> f32[1,3,6] {
  %x = f32[1,2,3]{2,1,0} parameter(0)
  %w = f32[3,2,2]{2,1,0} parameter(1)
  %slice = f32[3,2,1]{2,1,0} slice(f32[3,2,2]{2,1,0} %w), slice={[0:3], [0:2], [1:2]}
  %slice.1 = f32[3,2,1]{2,1,0} slice(f32[3,2,2]{2,1,0} %w), slice={[0:3], [0:2], [0:1]}
  %reshape = f32[1,1,3,2,1]{4,3,2,1,0} reshape(f32[3,2,1]{2,1,0} %slice)
  %reshape.2 = f32[1,1,3,2,1]{4,3,2,1,0} reshape(f32[3,2,1]{2,1,0} %slice.1)
  %concatenate = f32[1,2,3,2,1]{4,3,2,1,0} concatenate(f32[1,1,3,2,1]{4,3,2,1,0} %reshape, f32[1,1,3,2,1]{4,3,2,1,0} %reshape.2), dimensions={1}
  %reshape.3 = f32[6,2,1]{2,1,0} reshape(f32[1,2,3,2,1]{4,3,2,1,0} %concatenate)
  %convolution = f32[1,6,3]{2,1,0} convolution(f32[1,2,3]{2,1,0} %x, f32[6,2,1]{2,1,0} %reshape.3), window={size=1}, dim_labels=bf0_oi0->bf0
  %reshape.4 = f32[1,1,2,3,3]{4,3,2,1,0} reshape(f32[1,6,3]{2,1,0} %convolution)
  %transpose = f32[1,1,3,3,2]{4,3,2,1,0} transpose(f32[1,1,2,3,3]{4,3,2,1,0} %reshape.4), dimensions={0,1,3,4,2}
  ROOT %reshape.5 = f32[1,3,6]{2,1,0} reshape(f32[1,1,3,3,2]{4,3,2,1,0} %transpose)
}"""


def test_k2s2_is_one_pointwise_convolution_and_a_transpose():
    check_pass(ConvPhases(), K2S2_1D, K2S2_1D_PHASES, rtol=1e-6)


def test_convolutions_without_base_dilation_or_with_batch_groups_are_left_alone():
    plain = K2S2_1D.replace(" lhs_dilate=2", "").replace("f32[1,3,6]", "f32[1,3,4]")
    check_pass(ConvPhases(), plain, None)
    # batch groups (a weight gradient's form) are not split
    batch_groups = """HloModule m
ENTRY %main (x: f32[2,3,3], w: f32[4,3,2]) -> f32[1,4,6] {
  %x = f32[2,3,3]{2,1,0} parameter(0)
  %w = f32[4,3,2]{2,1,0} parameter(1)
  ROOT %c = f32[1,4,6]{2,1,0} convolution(f32[2,3,3]{2,1,0} %x, f32[4,3,2]{2,1,0} %w), window={size=2 pad=1_1 lhs_dilate=2}, dim_labels=bf0_oi0->bf0, batch_group_count=2
}"""
    check_pass(ConvPhases(), batch_groups, None)


def _base_dilated(module: Module) -> list[Instruction]:
    return [
        i
        for c in module.computations
        for i in c.instructions
        if i.op is Op.CONVOLUTION and any(d > 1 for d in i.window.lhs_dilation)
    ]


def _check_phases(in_spatial, window: Window, cin=2, cout=3, groups=1, batch=1, dims=None):
    """The pass on one convolution (NCHW unless `dims`): no base dilation left, the
    evaluator's values unchanged."""
    module, args = convolution_case(in_spatial, window, cin, cout, groups, batch, dims)
    want = evaluate(module, args)
    assert ConvPhases().run(module)
    verify(module)
    assert _base_dilated(module) == []
    np.testing.assert_allclose(evaluate(module, args), want, rtol=1e-12, atol=1e-12)


def _windows_1d():
    """1-D windows: every kernel size, base dilation, stride and kernel dilation up to
    3 (some phases without taps), pads negative to past the kernel's extent."""
    for size, s, stride, dilation in itertools.product((1, 2, 3, 4), (2, 3), (1, 2, 3), (1, 2)):
        for low, high in ((0, 0), (size - 1, size - 1), (-2, 1), (3, -1), (1, 4)):
            window = Window.make([size], [stride], [low], [high], [s], [dilation])
            if windowed_output_dims([4], window)[0] > 0:
                yield window


def _window_id(w: Window) -> str:
    (k,), (s,), (stride,), (d,) = w.size, w.lhs_dilation, w.stride, w.rhs_dilation
    return f"k{k}_lhs{s}_s{stride}_d{d}_p{w.pad_low[0]}_{w.pad_high[0]}"


@pytest.mark.parametrize("window", list(_windows_1d()), ids=_window_id)
def test_every_1d_geometry_keeps_its_values(window):
    _check_phases([4], window)


@pytest.mark.parametrize(
    "in_spatial, window, features",
    [
        # ConvTranspose k4 s2 p1, 2 images
        ((4, 5), Window.make((4, 4), None, (2, 2), (2, 2), (2, 2)), {"batch": 2}),
        # k5 s3, asymmetric pads, kernel dilation 2 along one dim
        ((3, 4), Window.make((5, 3), None, (2, 4), (3, 1), (3, 2), (1, 2)), {}),
        # base dilation in one dim only, with a window stride in the other
        ((4, 5), Window.make((3, 3), (1, 2), (1, 1), (2, 1), (2, 1)), {}),
        # stride with base dilation: 4 and 2 give 2 phases of stride 1, 3 and 2 3 of stride 2
        ((5, 6), Window.make((3, 4), (2, 2), (1, 2), (1, 0), (4, 3)), {}),
        # grouped: 2 groups of 2 input features, 3 output features each
        (
            (3, 4),
            Window.make((3, 3), None, (1, 1), (2, 2), (2, 2)),
            {"cin": 4, "cout": 6, "groups": 2},
        ),
        # depthwise, channel multiplier 2
        (
            (3, 4),
            Window.make((4, 4), None, (2, 2), (2, 2), (2, 2)),
            {"cin": 3, "cout": 6, "groups": 3},
        ),
        # 3-D
        ((2, 3, 2), Window.make((2, 3, 2), None, (1, 1, 0), (1, 2, 1), (2, 2, 3)), {}),
        # k64 s32 (FCN-32s' upsampling) in 1-D: 32 phases in 2 runs, 2 convolutions
        ((3,), Window.make((64,), None, (47,), (47,), (32,)), {}),
    ],
)
def test_nd_geometries_keep_their_values(in_spatial, window, features):
    _check_phases(in_spatial, window, **features)


def test_channels_last_and_other_layouts_keep_their_values():
    # JAX's conv_transpose: NHWC image, HWIO kernel
    _check_phases((3, 4), Window.make((3, 3), None, (1, 1), (2, 2), (2, 2)), dims=ConvDims.nhwc(2))
    # feature-first output, kernel o/i around the window dims
    odd = ConvDims(1, 0, (2, 3), 3, 0, (1, 2), 1, 0, (2, 3))
    _check_phases((3, 4), Window.make((2, 3), None, (1, 2), (1, 2), (2, 3)), dims=odd)


def test_phases_sharing_their_taps_share_one_convolution():
    """k2 s2: one 1x1 convolution of 4 phases; k4 s2 p1: four 2x2 ones; k64 s32 p16: four
    of 256 phases each."""
    for size, s, pad, convs, window, features in (
        (2, 2, 0, 1, (1, 1), 4 * 3),
        (4, 2, 1, 4, (2, 2), 3),
        (64, 32, 16, 4, (2, 2), 256 * 3),
    ):
        module = Module("m")
        b = ComputationBuilder(module, "main")
        x = b.parameter(0, Shape(DType.F32, (1, 2, 5, 5)))
        w = b.parameter(1, Shape(DType.F32, (3, 2, size, size)))
        low = size - 1 - pad
        phases = Window.make((size, size), None, (low, low), (low, low), (s, s))
        b.build(b.convolution(x, w, phases, ConvDims.nchw(2)), entry=True)
        ConvPhases().run(module)
        found = [i for i in module.entry.instructions if i.op is Op.CONVOLUTION]
        assert len(found) == convs
        assert {i.window.size for i in found} == {window}
        assert {i.array_shape.dims[1] for i in found} == {features}


# -- ONNX ConvTranspose, compiled, against onnxruntime ---------------------------------

# name: (input shape, weight shape, attributes, bias)
CONV_TRANSPOSES = {
    "k2s2": ((1, 6, 5, 7), (6, 3, 2, 2), {"strides": [2, 2]}, True),
    "k3s2p1_op1": (
        (1, 6, 5, 7),
        (6, 4, 3, 3),
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
        True,
    ),
    "k3s2p1": ((1, 6, 5, 7), (6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, False),
    "k4s2p1": ((1, 6, 5, 7), (6, 4, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    "k5s3_asymmetric": (
        (1, 6, 4, 5),
        (6, 2, 5, 5),
        {"strides": [3, 3], "pads": [2, 0, 1, 3]},
        True,
    ),
    "dilation2": (
        (1, 6, 5, 4),
        (6, 4, 3, 3),
        {"strides": [2, 2], "dilations": [2, 2], "pads": [1, 0, 0, 1]},
        False,
    ),
    "groups2": (
        (1, 6, 5, 4),
        (6, 2, 3, 3),
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2},
        True,
    ),
    "depthwise": (
        (1, 6, 5, 4),
        (6, 1, 4, 4),
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 6},
        True,
    ),
    "output_shape": (
        (1, 6, 5, 7),
        (6, 3, 3, 3),
        {"strides": [2, 2], "output_shape": [10, 14]},
        False,
    ),
    "batch2": ((2, 6, 5, 4), (6, 3, 2, 2), {"strides": [2, 2]}, True),
    "k1s2_zero_phases": ((1, 6, 5, 4), (6, 3, 1, 1), {"strides": [2, 2]}, True),
    "1d_k3s3": ((2, 3, 9), (3, 2, 3), {"strides": [3], "pads": [1, 0]}, True),
    "3d_k2s2": (
        (1, 2, 3, 4, 3),
        (2, 3, 2, 3, 2),
        {"strides": [2, 1, 2], "pads": [0, 1, 0, 0, 0, 1]},
        True,
    ),
}


def _conv_transpose_model(x_shape, w_shape, attrs, bias: bool):
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, w_shape).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        channels = w_shape[1] * attrs.get("group", 1)
        inits.append(numpy_helper.from_array(rng.uniform(-1, 1, channels).astype(np.float32), "b"))
        inputs.append("b")
    node = helper.make_node("ConvTranspose", inputs, ["y"], **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(x_shape))
    graph = helper.make_graph([node], "conv_transpose", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("name", list(CONV_TRANSPOSES))
def test_compiled_conv_transpose_matches_onnxruntime(name):
    x_shape, w_shape, attrs, bias = CONV_TRANSPOSES[name]
    model = _conv_transpose_model(x_shape, w_shape, attrs, bias)
    x = np.random.default_rng(2).uniform(-2, 2, x_shape).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options)
    (want,) = session.run(None, {"x": x})
    compiled = aotc.compile(model)
    assert _base_dilated(compiled.module) == []
    (got,) = compiled.load()(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_k2s2_runs_as_one_gemm():
    """kernel = stride, no padding: one 1x1 convolution of 4 x Cout features, the GEMM of
    the weights by the image in place (`planes` on a 1x1 stride-1 window, or `im2col`'s
    pointwise GEMM), and one interleaving loop."""
    model = _conv_transpose_model((1, 24, 80, 80), (24, 1, 2, 2), {"strides": [2, 2]}, True)
    compiled = aotc.compile(model)
    convs = [
        i for c in compiled.module.computations for i in c.instructions if i.op is Op.CONVOLUTION
    ]
    assert [(i.window.size, i.operands[1].array_shape.dims[:2]) for i in convs] == [
        ((1, 1), (4, 24))
    ]
    forms = compiled.kernel_forms()
    assert forms[convs[0].name] in ("planes", "im2col"), forms
    assert compiled.stats.kernel_count == 2  # the GEMM and the interleave


# jax.lax.conv_transpose(x, w, (2, 2), "SAME") on NHWC / HWIO, the weights an argument:
# the sub-kernels are sliced at run time
JAX_CONV_TRANSPOSE = """HloModule jit_conv_transpose

ENTRY main.3 {
  x = f32[2,5,6,3]{3,2,1,0} parameter(0)
  w = f32[3,3,3,4]{3,2,1,0} parameter(1)
  ROOT conv = f32[2,10,12,4]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f
}
"""


def test_compiled_channels_last_hlo_matches_the_evaluator(tmp_path):
    path = tmp_path / "conv_transpose.hlo"
    path.write_text(JAX_CONV_TRANSPOSE)
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (2, 5, 6, 3)).astype(np.float32)
    w = rng.uniform(-1, 1, (3, 3, 3, 4)).astype(np.float32)
    want = evaluate(import_hlo(path), [x, w])
    compiled = aotc.compile(path)
    assert _base_dilated(compiled.module) == []
    (got,) = compiled.load()(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
