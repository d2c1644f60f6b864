"""conv_layout: convolutions in other layouts become NCHW ones between transposes."""

from pass_testing import check_pass

from aotc.ir.text import parse_module
from aotc.passes.conv_layout import ConvLayoutAssignment

NHWC = """HloModule m
ENTRY %main (x: f32[2,7,6,3], w: f32[2,2,3,5]) -> f32[2,6,5,5] {
  %x = f32[2,7,6,3]{3,2,1,0} parameter(0)
  %w = f32[2,2,3,5]{3,2,1,0} parameter(1)
  ROOT %c = f32[2,6,5,5]{3,2,1,0} convolution(f32[2,7,6,3]{3,2,1,0} %x, f32[2,2,3,5]{3,2,1,0} %w), window={size=2x2}, dim_labels=b01f_01io->b01f
}"""

NHWC_AS_NCHW = """HloModule m
ENTRY %main (x: f32[2,7,6,3], w: f32[2,2,3,5]) -> f32[2,6,5,5] {
  %x = f32[2,7,6,3]{3,2,1,0} parameter(0)
  %w = f32[2,2,3,5]{3,2,1,0} parameter(1)
  %t = f32[2,3,7,6]{3,2,1,0} transpose(f32[2,7,6,3]{3,2,1,0} %x), dimensions={0,3,1,2}
  %t.1 = f32[5,3,2,2]{3,2,1,0} transpose(f32[2,2,3,5]{3,2,1,0} %w), dimensions={3,2,0,1}
  %c = f32[2,5,6,5]{3,2,1,0} convolution(f32[2,3,7,6]{3,2,1,0} %t, f32[5,3,2,2]{3,2,1,0} %t.1), window={size=2x2}, dim_labels=bf01_oi01->bf01
  ROOT %t.2 = f32[2,6,5,5]{3,2,1,0} transpose(f32[2,5,6,5]{3,2,1,0} %c), dimensions={0,2,3,1}
}"""


def test_channels_last_becomes_nchw():
    check_pass(ConvLayoutAssignment(), NHWC, NHWC_AS_NCHW, rtol=1e-5)


def test_nchw_is_left_alone():
    text = NHWC.replace("dim_labels=b01f_01io->b01f", "dim_labels=bf01_oi01->bf01")
    text = text.replace("f32[2,7,6,3]", "f32[2,3,7,6]").replace("f32[2,2,3,5]", "f32[5,3,2,2]")
    text = text.replace("f32[2,6,5,5]", "f32[2,5,6,5]")
    check_pass(ConvLayoutAssignment(), text, None)


def _layouts(text: str) -> list[str]:
    module = parse_module(text)
    ConvLayoutAssignment().run(module)
    return [i.conv for i in module.entry.instructions if i.conv is not None]


# odd orders, grouped (depthwise), batch groups, 1-D and 3-D, a mixed output type
ODD = [
    # feature-first output, kernel o/i swapped around the window dims
    """HloModule m
ENTRY %main (x: f32[3,2,9,8], w: f32[4,3,3,3]) -> f32[4,2,7,6] {
  %x = f32[3,2,9,8]{3,2,1,0} parameter(0)
  %w = f32[4,3,3,3]{3,2,1,0} parameter(1)
  ROOT %c = f32[4,2,7,6]{3,2,1,0} convolution(%x, %w), window={size=3x3}, dim_labels=fb01_o01i->fb01
}""",
    # depthwise NHWC: 4 groups, multiplier 2
    """HloModule m
ENTRY %main (x: f32[1,8,8,4], w: f32[3,3,1,8]) -> f32[1,4,4,8] {
  %x = f32[1,8,8,4]{3,2,1,0} parameter(0)
  %w = f32[3,3,1,8]{3,2,1,0} parameter(1)
  ROOT %c = f32[1,4,4,8]{3,2,1,0} convolution(%x, %w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4
}""",
    # 1-D NWC with batch groups (a weight gradient's form)
    """HloModule m
ENTRY %main (x: f32[4,10,3], w: f32[3,3,6]) -> f32[2,8,6] {
  %x = f32[4,10,3]{2,1,0} parameter(0)
  %w = f32[3,3,6]{2,1,0} parameter(1)
  ROOT %c = f32[2,8,6]{2,1,0} convolution(%x, %w), window={size=3}, dim_labels=b0f_0io->b0f, batch_group_count=2
}""",
    # 3-D NDHWC
    """HloModule m
ENTRY %main (x: f32[1,5,6,7,2], w: f32[2,2,2,2,3]) -> f32[1,4,5,6,3] {
  %x = f32[1,5,6,7,2]{4,3,2,1,0} parameter(0)
  %w = f32[2,2,2,2,3]{4,3,2,1,0} parameter(1)
  ROOT %c = f32[1,4,5,6,3]{4,3,2,1,0} convolution(%x, %w), window={size=2x2x2}, dim_labels=b012f_012io->b012f
}""",
]


def test_every_layout_becomes_nchw_with_the_same_values():
    from aotc.ir import ConvDims

    for text in ODD:
        assert [d == ConvDims.nchw(len(d.input_spatial)) for d in _layouts(text)] == [True], text
        check_pass(ConvLayoutAssignment(), text, _printed_after(text), rtol=1e-5)


def _printed_after(text: str) -> str:
    from aotc.ir.text import print_module

    module = parse_module(text)
    ConvLayoutAssignment().run(module)
    return print_module(module)


# two JAX-style residual layers, channels-last, weights as parameters
NHWC_LAYERS = """HloModule layers
ENTRY %main (x: f32[1,9,10,16], w1: f32[3,3,16,16], b1: f32[16], w2: f32[3,3,16,16], b2: f32[16]) -> f32[1,9,10,16] {
  %x = f32[1,9,10,16]{3,2,1,0} parameter(0)
  %w1 = f32[3,3,16,16]{3,2,1,0} parameter(1)
  %b1 = f32[16]{0} parameter(2)
  %w2 = f32[3,3,16,16]{3,2,1,0} parameter(3)
  %b2 = f32[16]{0} parameter(4)
  %c1 = f32[1,9,10,16]{3,2,1,0} convolution(%x, %w1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %bb1 = f32[1,9,10,16]{3,2,1,0} broadcast(%b1), dimensions={3}
  %a1 = f32[1,9,10,16]{3,2,1,0} add(%c1, %bb1)
  %z = f32[] constant(0)
  %zb = f32[1,9,10,16]{3,2,1,0} broadcast(%z), dimensions={}
  %r1 = f32[1,9,10,16]{3,2,1,0} maximum(%a1, %zb)
  %c2 = f32[1,9,10,16]{3,2,1,0} convolution(%r1, %w2), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %bb2 = f32[1,9,10,16]{3,2,1,0} broadcast(%b2), dimensions={3}
  %a2 = f32[1,9,10,16]{3,2,1,0} add(%c2, %bb2)
  %s = f32[1,9,10,16]{3,2,1,0} add(%a2, %x)
  ROOT %r2 = f32[1,9,10,16]{3,2,1,0} maximum(%s, %zb)
}"""


def test_channels_last_layers_compile_to_gemm_kernels(tmp_path):
    """The whole pipeline: each convolution a GEMM kernel (alone or with an elementwise
    epilogue), the layout changes between the layers cancelled, the numbers those of
    the evaluator on the module as written."""
    import numpy as np

    import aotc
    from aotc.ir import Op
    from aotc.ir.evaluate import evaluate
    from aotc.ir.index_maps import read_elementwise_only
    from aotc.runner import LoadedModel

    path = tmp_path / "layers.hlo"
    path.write_text(NHWC_LAYERS)
    compiled = aotc.compile(path)
    kernels = compiled.module.entry.instructions
    for kernel in kernels:
        if kernel.op is Op.FUSION:
            body = kernel.called[0]
            for conv in (i for i in body.instructions if i.op is Op.CONVOLUTION):
                assert read_elementwise_only(conv, conv.shape.dims), kernel.name
    # layout changes: the image in, the two kernels, the result out; the one back to
    # channels-last after the first layer cancels with the one into the second
    members = [i for k in kernels for i in (k.called[0].instructions if k.called else [k])]
    assert sum(i.op is Op.TRANSPOSE for i in members) == 4, [k.name for k in kernels]
    rng = np.random.default_rng(0)
    args = [
        rng.standard_normal(p.shape.dims).astype(np.float32) * 0.3
        for p in parse_module(NHWC_LAYERS).entry.parameters
    ]
    got = LoadedModel(compiled).run(args)[0]
    expected = evaluate(parse_module(NHWC_LAYERS), args)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_wide_channels_last_stays_channels_last():
    """Output rows of 16 or more: the direct kernel's layout, the kernel's dims put in
    [spatial, in, out] order; narrower rows go NCHW (test_channels_last_becomes_nchw)."""
    from aotc.ir import ConvDims

    wide = NHWC.replace("f32[2,7,6,3]", "f32[2,7,20,3]").replace("f32[2,6,5,5]", "f32[2,6,19,5]")
    assert _layouts(wide) == [ConvDims.nhwc(2)]
    check_pass(ConvLayoutAssignment(), wide, None)
    swapped = wide.replace("dim_labels=b01f_01io->b01f", "dim_labels=b01f_01oi->b01f")
    swapped = swapped.replace("f32[2,2,3,5]", "f32[2,2,5,3]")
    assert _layouts(swapped) == [ConvDims.nhwc(2)]
    check_pass(ConvLayoutAssignment(), swapped, _printed_after(swapped), rtol=1e-5)
