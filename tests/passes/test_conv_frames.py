"""conv_frames: convolutions with unit window dims as convolutions of fewer spatial
dims, the trivial dims merged (trailing) or moved into the batch (the others).

The rewrites on HLO text (which convolutions change, which stay), and the values of
rewritten convolutions against the evaluator of the module before the pass (f64, to
1e-12) over 3-D and 4-D windows, padding, strides, dilations, batches, groups and a
channels-last layout.
"""

from __future__ import annotations

import numpy as np
import pytest
from aotc_testing import convolution_case
from pass_testing import check_pass

from aotc.ir import ComputationBuilder, ConvDims, DType, Module, Op, Shape, Window
from aotc.ir.evaluate import evaluate
from aotc.ir.text import print_module
from aotc.ir.verify import verify
from aotc.passes.conv_frames import ConvFrames

# R(2+1)D's spatial convolution: T into the batch, a 2-D convolution of 4 frames
SPATIAL_133 = """HloModule m
ENTRY %main (x: f32[1,2,4,6,6], w: f32[3,2,1,3,3]) -> f32[1,3,4,3,3] {
  %x = f32[1,2,4,6,6]{4,3,2,1,0} parameter(0)
  %w = f32[3,2,1,3,3]{4,3,2,1,0} parameter(1)
  ROOT %c = f32[1,3,4,3,3]{4,3,2,1,0} convolution(%x, %w), window={size=1x3x3 stride=1x2x2 pad=0_0x1_1x1_1}, dim_labels=bf012_oi012->bf012, metadata={op_name="conv"}
}"""

SPATIAL_133_FRAMES = """HloModule m
ENTRY %main (x: f32[1,2,4,6,6], w: f32[3,2,1,3,3]) -> f32[1,3,4,3,3] {
  %x = f32[1,2,4,6,6]{4,3,2,1,0} parameter(0)
  %w = f32[3,2,1,3,3]{4,3,2,1,0} parameter(1)
  %t = f32[1,4,2,6,6]{4,3,2,1,0} transpose(%x), dimensions={0,2,1,3,4}, metadata={op_name="conv"}
  %r = f32[4,2,6,6]{3,2,1,0} reshape(%t), metadata={op_name="conv"}
  %tw = f32[3,1,2,3,3]{4,3,2,1,0} transpose(%w), dimensions={0,2,1,3,4}, metadata={op_name="conv"}
  %rw = f32[3,2,3,3]{3,2,1,0} reshape(%tw), metadata={op_name="conv"}
  %c = f32[4,3,3,3]{3,2,1,0} convolution(%r, %rw), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, metadata={op_name="conv"}
  %ro = f32[1,4,3,3,3]{4,3,2,1,0} reshape(%c), metadata={op_name="conv"}
  ROOT %to = f32[1,3,4,3,3]{4,3,2,1,0} transpose(%ro), dimensions={0,2,1,3,4}, metadata={op_name="conv"}
}"""

# R(2+1)D's temporal convolution: H and W merge, reshapes only
TEMPORAL_311 = """HloModule m
ENTRY %main (x: f32[1,2,4,3,5], w: f32[3,2,3,1,1]) -> f32[1,3,4,3,5] {
  %x = f32[1,2,4,3,5]{4,3,2,1,0} parameter(0)
  %w = f32[3,2,3,1,1]{4,3,2,1,0} parameter(1)
  ROOT %c = f32[1,3,4,3,5]{4,3,2,1,0} convolution(%x, %w), window={size=3x1x1 pad=1_1x0_0x0_0}, dim_labels=bf012_oi012->bf012
}"""

TEMPORAL_311_MERGED = """HloModule m
ENTRY %main (x: f32[1,2,4,3,5], w: f32[3,2,3,1,1]) -> f32[1,3,4,3,5] {
  %x = f32[1,2,4,3,5]{4,3,2,1,0} parameter(0)
  %w = f32[3,2,3,1,1]{4,3,2,1,0} parameter(1)
  %r = f32[1,2,4,15]{3,2,1,0} reshape(%x)
  %rw = f32[3,2,3,1]{3,2,1,0} reshape(%w)
  %c = f32[1,3,4,15]{3,2,1,0} convolution(%r, %rw), window={size=3x1 pad=1_1x0_0}, dim_labels=bf01_oi01->bf01
  ROOT %ro = f32[1,3,4,3,5]{4,3,2,1,0} reshape(%c)
}"""


def test_spatial_window_convolves_frames():
    check_pass(ConvFrames(), SPATIAL_133, SPATIAL_133_FRAMES, rtol=1e-5)


def test_temporal_window_merges_its_trailing_unit_dims():
    check_pass(ConvFrames(), TEMPORAL_311, TEMPORAL_311_MERGED, rtol=1e-5)


@pytest.mark.parametrize(
    "window",
    [
        Window.make((3, 3, 3), None, (1, 1, 1), (1, 1, 1)),  # taps along every dim
        Window.make((1, 3, 3), (2, 1, 1)),  # a strided unit dim is no frame
        Window.make((1, 3, 3), None, (1, 0, 0), (1, 0, 0)),  # nor a padded one
        Window.make((1, 3, 3), None, None, None, (2, 1, 1)),  # nor a base-dilated one
    ],
)
def test_convolutions_without_frames_are_left_alone(window):
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (1, 2, 4, 6, 6)))
    w = b.parameter(1, Shape(DType.F32, (3, 2, *window.size)))
    b.build(b.convolution(x, w, window, ConvDims.nchw(3)), entry=True)
    check_pass(ConvFrames(), print_module(module), None)


def test_2d_and_batch_grouped_convolutions_are_left_alone():
    two_d = """HloModule m
ENTRY %main (x: f32[1,2,6,6], w: f32[3,2,1,3]) -> f32[1,3,6,4] {
  %x = f32[1,2,6,6]{3,2,1,0} parameter(0)
  %w = f32[3,2,1,3]{3,2,1,0} parameter(1)
  ROOT %c = f32[1,3,6,4]{3,2,1,0} convolution(%x, %w), window={size=1x3}, dim_labels=bf01_oi01->bf01
}"""
    check_pass(ConvFrames(), two_d, None)
    batch_groups = """HloModule m
ENTRY %main (x: f32[2,2,4,6,6], w: f32[2,2,1,3,3]) -> f32[1,2,4,4,4] {
  %x = f32[2,2,4,6,6]{4,3,2,1,0} parameter(0)
  %w = f32[2,2,1,3,3]{4,3,2,1,0} parameter(1)
  ROOT %c = f32[1,2,4,4,4]{4,3,2,1,0} convolution(%x, %w), window={size=1x3x3}, dim_labels=bf012_oi012->bf012, batch_group_count=2
}"""
    check_pass(ConvFrames(), batch_groups, None)


def _check_frames(
    in_spatial, window: Window, spatial_left: int, cin=2, cout=3, groups=1, batch=1, dims=None
):
    """The pass on one convolution (NC-spatial unless `dims`): a convolution of
    `spatial_left` spatial dims left, the evaluator's values unchanged."""
    module, args = convolution_case(in_spatial, window, cin, cout, groups, batch, dims)
    want = evaluate(module, args)
    assert ConvFrames().run(module)
    verify(module)
    convs = [i for i in module.entry.instructions if i.op is Op.CONVOLUTION]
    assert [c.window.rank for c in convs] == [spatial_left]
    np.testing.assert_allclose(evaluate(module, args), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "in_spatial, window, spatial_left, extra",
    [
        # (1,3,3), padding and stride 2 on H and W
        ((3, 7, 6), Window.make((1, 3, 3), (1, 2, 2), (0, 1, 1), (0, 1, 0)), 2, {}),
        # (3,1,1) with temporal padding and dilation
        (
            (6, 3, 4),
            Window.make((3, 1, 1), (1, 1, 1), (2, 0, 0), (1, 0, 0), None, (2, 1, 1)),
            2,
            {},
        ),
        # (1,1,1): one pointwise convolution over T*H*W
        ((3, 4, 5), Window.make((1, 1, 1)), 1, {}),
        # (1,3,1): T into the batch, W stays a unit dim
        ((3, 5, 4), Window.make((1, 3, 1), None, (0, 1, 0), (0, 1, 0)), 2, {}),
        # (3,1,3): H into the batch
        ((4, 3, 5), Window.make((3, 1, 3), (2, 1, 1), (1, 0, 0), (1, 0, 2)), 2, {}),
        # 4-D spatial: two leading unit dims into the batch, the trailing two merged
        ((2, 3, 4, 5), Window.make((1, 1, 3, 1), None, (0, 0, 1, 0), (0, 0, 1, 0)), 2, {}),
        # 4-D spatial: unit dims 0 and 2 into the batch
        ((2, 5, 3, 4), Window.make((1, 3, 1, 2)), 2, {}),
        # batch 2
        ((3, 5, 5), Window.make((1, 3, 3), None, (0, 1, 1), (0, 1, 1)), 2, {"batch": 2}),
        # 2 groups of 2 input features, 3 output features each; depthwise
        ((3, 5, 5), Window.make((1, 3, 3)), 2, {"cin": 4, "cout": 6, "groups": 2}),
        ((5, 3, 3), Window.make((3, 1, 1)), 2, {"cin": 3, "cout": 3, "groups": 3}),
        # channels-last (JAX's NDHWC): into NC-spatial between transposes
        ((3, 5, 5), Window.make((1, 3, 3)), 2, {"dims": ConvDims.nhwc(3), "batch": 2}),
        ((4, 3, 5), Window.make((3, 1, 1)), 2, {"dims": ConvDims.nhwc(3)}),
    ],
)
def test_rewritten_convolutions_keep_their_values(in_spatial, window, spatial_left, extra):
    _check_frames(in_spatial, window, spatial_left, **extra)
