import numpy as np
import pytest
from aotc_testing import hlo_reducer
from pass_testing import check_pass, random_args

from aotc.ir import Op
from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module
from aotc.ir.verify import verify
from aotc.passes.algsimp import AlgebraicSimplifier

CASES = {
    "add_negative_zero": (
        """HloModule m
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %z = f32[] constant(-0)
  %b = f32[4]{0} broadcast(f32[] %z), dimensions={}
  ROOT %a = f32[4]{0} add(f32[4]{0} %x, f32[4]{0} %b)
}""",
        """HloModule m
ENTRY %main (x: f32[4]) -> f32[4] {
  ROOT %x = f32[4]{0} parameter(0)
}""",
    ),
    "int_add_zero_and_multiply_one": (
        """HloModule m
ENTRY %main (x: s32[4]) -> s32[4] {
  %x = s32[4]{0} parameter(0)
  %z = s32[4]{0} constant({0, 0, 0, 0})
  %o = s32[4]{0} constant({1, 1, 1, 1})
  %a = s32[4]{0} add(s32[4]{0} %z, s32[4]{0} %x)
  ROOT %m = s32[4]{0} multiply(s32[4]{0} %a, s32[4]{0} %o)
}""",
        """HloModule m
ENTRY %main (x: s32[4]) -> s32[4] {
  ROOT %x = s32[4]{0} parameter(0)
}""",
    ),
    "divide_by_power_of_two": (
        """HloModule m
ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  %c = f32[] constant(4)
  %b = f32[3]{0} broadcast(f32[] %c), dimensions={}
  ROOT %d = f32[3]{0} divide(f32[3]{0} %x, f32[3]{0} %b)
}""",
        """HloModule m
ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  %c = f32[] constant(0.25)
  %b = f32[3]{0} broadcast(f32[] %c), dimensions={}
  ROOT %d = f32[3]{0} multiply(f32[3]{0} %x, f32[3]{0} %b)
}""",
    ),
    "transpose_and_reshape_chains": (
        """HloModule m
ENTRY %main (x: f32[2,3,4]) -> f32[24] {
  %x = f32[2,3,4]{2,1,0} parameter(0)
  %t1 = f32[3,2,4]{2,1,0} transpose(f32[2,3,4]{2,1,0} %x), dimensions={1,0,2}
  %t2 = f32[2,3,4]{2,1,0} transpose(f32[3,2,4]{2,1,0} %t1), dimensions={1,0,2}
  %r1 = f32[6,4]{1,0} reshape(f32[2,3,4]{2,1,0} %t2)
  ROOT %r2 = f32[24]{0} reshape(f32[6,4]{1,0} %r1)
}""",
        """HloModule m
ENTRY %main (x: f32[2,3,4]) -> f32[24] {
  %x = f32[2,3,4]{2,1,0} parameter(0)
  ROOT %r = f32[24]{0} reshape(f32[2,3,4]{2,1,0} %x)
}""",
    ),
    "noop_convert_slice_pad": (
        """HloModule m
ENTRY %main (x: f32[2,3]) -> f32[2,3] {
  %x = f32[2,3]{1,0} parameter(0)
  %c = f32[2,3]{1,0} convert(f32[2,3]{1,0} %x)
  %s = f32[2,3]{1,0} slice(f32[2,3]{1,0} %c), slice={[0:2], [0:3]}
  %z = f32[] constant(0)
  ROOT %p = f32[2,3]{1,0} pad(f32[2,3]{1,0} %s, f32[] %z), padding=0_0x0_0
}""",
        """HloModule m
ENTRY %main (x: f32[2,3]) -> f32[2,3] {
  ROOT %x = f32[2,3]{1,0} parameter(0)
}""",
    ),
}

NO_CHANGE = {
    # x + (+0) is not x for x = -0 (IEEE: -0 + +0 = +0), so it must stay
    "float_add_positive_zero": """HloModule m
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %z = f32[] constant(0)
  %b = f32[4]{0} broadcast(f32[] %z), dimensions={}
  ROOT %a = f32[4]{0} add(f32[4]{0} %x, f32[4]{0} %b)
}""",
    # x / 3 -> x * (1/3) would round differently
    "divide_by_three": """HloModule m
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %c = f32[] constant(3)
  %b = f32[4]{0} broadcast(f32[] %c), dimensions={}
  ROOT %d = f32[4]{0} divide(f32[4]{0} %x, f32[4]{0} %b)
}""",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rewrites(name):
    check_pass(AlgebraicSimplifier(), *CASES[name])


@pytest.mark.parametrize("name", sorted(NO_CHANGE))
def test_no_change(name):
    check_pass(AlgebraicSimplifier(), NO_CHANGE[name], None)


# a channels-last model's layout changes around an NCHW convolution (conv_layout.py):
# the transpose back to NCHW moves through the bias add and the ReLU and cancels
TRANSPOSES_AROUND_EPILOGUE = """HloModule m
ENTRY %main (c: f32[1,4,3,5], bias: f32[4]) -> f32[1,4,3,5] {
  %c = f32[1,4,3,5]{3,2,1,0} parameter(0)
  %bias = f32[4]{0} parameter(1)
  %t = f32[1,3,5,4]{3,2,1,0} transpose(f32[1,4,3,5]{3,2,1,0} %c), dimensions={0,2,3,1}
  %bb = f32[1,3,5,4]{3,2,1,0} broadcast(f32[4]{0} %bias), dimensions={3}
  %a = f32[1,3,5,4]{3,2,1,0} add(f32[1,3,5,4]{3,2,1,0} %t, f32[1,3,5,4]{3,2,1,0} %bb)
  %z = f32[] constant(0)
  %zb = f32[1,3,5,4]{3,2,1,0} broadcast(f32[] %z), dimensions={}
  %r = f32[1,3,5,4]{3,2,1,0} maximum(f32[1,3,5,4]{3,2,1,0} %a, f32[1,3,5,4]{3,2,1,0} %zb)
  ROOT %back = f32[1,4,3,5]{3,2,1,0} transpose(f32[1,3,5,4]{3,2,1,0} %r), dimensions={0,3,1,2}
}"""

TRANSPOSES_CANCELLED = """HloModule m
ENTRY %main (c: f32[1,4,3,5], bias: f32[4]) -> f32[1,4,3,5] {
  %c = f32[1,4,3,5]{3,2,1,0} parameter(0)
  %bias = f32[4]{0} parameter(1)
  %z = f32[] constant(0)
  %bb = f32[1,4,3,5]{3,2,1,0} broadcast(f32[4]{0} %bias), dimensions={1}
  %a = f32[1,4,3,5]{3,2,1,0} add(f32[1,4,3,5]{3,2,1,0} %c, f32[1,4,3,5]{3,2,1,0} %bb)
  %zb = f32[1,4,3,5]{3,2,1,0} broadcast(f32[] %z), dimensions={}
  ROOT %r = f32[1,4,3,5]{3,2,1,0} maximum(f32[1,4,3,5]{3,2,1,0} %a, f32[1,4,3,5]{3,2,1,0} %zb)
}"""


def test_transposes_cancel_through_an_epilogue():
    check_pass(AlgebraicSimplifier(), TRANSPOSES_AROUND_EPILOGUE, TRANSPOSES_CANCELLED)


def test_epilogue_read_elsewhere_is_computed_once():
    # the ReLU is an output too: the chain runs once, in the input's layout, and one
    # transpose makes the other output (never a copy of the chain per layout)
    text = TRANSPOSES_AROUND_EPILOGUE.replace(
        "-> f32[1,4,3,5] {", "-> (f32[1,4,3,5], f32[1,3,5,4]) {"
    ).replace(
        "  ROOT %back = f32[1,4,3,5]{3,2,1,0} transpose(f32[1,3,5,4]{3,2,1,0} %r), dimensions={0,3,1,2}",
        "  %back = f32[1,4,3,5]{3,2,1,0} transpose(f32[1,3,5,4]{3,2,1,0} %r), dimensions={0,3,1,2}\n"
        "  ROOT %out = (f32[1,4,3,5]{3,2,1,0}, f32[1,3,5,4]{3,2,1,0}) tuple(%back, %r)",
    )
    module = _simplified(text)
    ops = [i.op for i in module.entry.instructions]
    assert (ops.count(Op.TRANSPOSE), ops.count(Op.ADD), ops.count(Op.MAXIMUM)) == (1, 1, 1)


def _simplified(text: str):
    """The module after algsimp, checked to compute exactly what `text` does."""
    module, reference = parse_module(text), parse_module(text)
    assert AlgebraicSimplifier().run(module)
    verify(module)
    args = random_args(reference, 0)
    for want, got in zip(evaluate(reference, args), evaluate(module, args)):
        np.testing.assert_array_equal(got, want)
    return module


def test_transposed_broadcast_reorders_its_operand():
    # transpose(broadcast(m[2,3] to dims {0,2})) swapping those dims: m transposed
    before = """HloModule m
ENTRY %main (m: f32[2,3]) -> f32[3,4,2] {
  %m = f32[2,3]{1,0} parameter(0)
  %b = f32[2,4,3]{2,1,0} broadcast(f32[2,3]{1,0} %m), dimensions={0,2}
  ROOT %t = f32[3,4,2]{2,1,0} transpose(f32[2,4,3]{2,1,0} %b), dimensions={2,1,0}
}"""
    after = """HloModule m
ENTRY %main (m: f32[2,3]) -> f32[3,4,2] {
  %m = f32[2,3]{1,0} parameter(0)
  %t = f32[3,2]{1,0} transpose(f32[2,3]{1,0} %m), dimensions={1,0}
  ROOT %b = f32[3,4,2]{2,1,0} broadcast(f32[3,2]{1,0} %t), dimensions={0,2}
}"""
    check_pass(AlgebraicSimplifier(), before, after)


MAX_REDUCER = """HloModule m
""" + hlo_reducer("max", "maximum")


def test_transpose_moves_through_pooling_with_its_window():
    # a channels-last max pool between layout changes: pooled in NCHW, window permuted
    before = (
        MAX_REDUCER
        + """

ENTRY %main (c: f32[1,2,7,6]) -> f32[1,2,4,3] {
  %c = f32[1,2,7,6]{3,2,1,0} parameter(0)
  %t = f32[1,7,6,2]{3,2,1,0} transpose(f32[1,2,7,6]{3,2,1,0} %c), dimensions={0,2,3,1}
  %ninf = f32[] constant(-inf)
  %p = f32[1,4,3,2]{3,2,1,0} reduce-window(f32[1,7,6,2]{3,2,1,0} %t, f32[] %ninf), window={size=1x3x2x1 stride=1x2x2x1 pad=0_0x1_1x0_0x0_0}, to_apply=%max
  ROOT %back = f32[1,2,4,3]{3,2,1,0} transpose(f32[1,4,3,2]{3,2,1,0} %p), dimensions={0,3,1,2}
}"""
    )
    after = (
        MAX_REDUCER
        + """

ENTRY %main (c: f32[1,2,7,6]) -> f32[1,2,4,3] {
  %c = f32[1,2,7,6]{3,2,1,0} parameter(0)
  %ninf = f32[] constant(-inf)
  ROOT %p = f32[1,2,4,3]{3,2,1,0} reduce-window(f32[1,2,7,6]{3,2,1,0} %c, f32[] %ninf), window={size=1x1x3x2 stride=1x1x2x2 pad=0_0x0_0x1_1x0_0}, to_apply=%max
}"""
    )
    check_pass(AlgebraicSimplifier(), before, after)


def test_transpose_moves_toward_users_of_a_shared_value():
    # a block's output feeds two users (as a residual network's does): its operands'
    # common transpose moves after it, once, and cancels against the user's transpose
    before = """HloModule m
ENTRY %main (x: f32[1,4,3,2], y: f32[1,4,3,2], b: f32[2]) -> (f32[1,2,4,3], f32[1,4,3,2]) {
  %x = f32[1,4,3,2]{3,2,1,0} parameter(0)
  %y = f32[1,4,3,2]{3,2,1,0} parameter(1)
  %b = f32[2]{0} parameter(2)
  %tx = f32[1,2,4,3]{3,2,1,0} transpose(f32[1,4,3,2]{3,2,1,0} %x), dimensions={0,3,1,2}
  %ty = f32[1,2,4,3]{3,2,1,0} transpose(f32[1,4,3,2]{3,2,1,0} %y), dimensions={0,3,1,2}
  %bb = f32[1,2,4,3]{3,2,1,0} broadcast(f32[2]{0} %b), dimensions={1}
  %s = f32[1,2,4,3]{3,2,1,0} add(f32[1,2,4,3]{3,2,1,0} %tx, f32[1,2,4,3]{3,2,1,0} %ty)
  %m = f32[1,2,4,3]{3,2,1,0} maximum(f32[1,2,4,3]{3,2,1,0} %s, f32[1,2,4,3]{3,2,1,0} %bb)
  %back = f32[1,4,3,2]{3,2,1,0} transpose(f32[1,2,4,3]{3,2,1,0} %m), dimensions={0,2,3,1}
  ROOT %r = (f32[1,2,4,3]{3,2,1,0}, f32[1,4,3,2]{3,2,1,0}) tuple(f32[1,2,4,3]{3,2,1,0} %m, f32[1,4,3,2]{3,2,1,0} %back)
}"""
    module = _simplified(before)
    transposes = [i for i in module.entry.instructions if i.op is Op.TRANSPOSE]
    assert len(transposes) == 1 and transposes[0].operands[0].op is Op.MAXIMUM
    back = module.entry.root.operands[1]
    assert back.op is Op.MAXIMUM and back.operands[0].op is Op.ADD
