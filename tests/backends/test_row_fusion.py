"""Row fusion end to end: the fusion pass groups reductions with their consumers,
the CPU backend computes each reduction once per row; results equal the evaluator's
on the unfused module."""

from __future__ import annotations

import re

import numpy as np
import pytest
from aotc_testing import hlo_reducer

from aotc.backends.cpu import parse_target
from aotc.backends.cpu.codegen import optimized_module
from aotc.buffers import assign_buffers
from aotc.ir import Op
from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module
from aotc.passes.dce import DeadCodeElimination
from aotc.passes.fusion import Fusion

REDUCERS = hlo_reducer("add", "add") + hlo_reducer("max", "maximum")

SOFTMAX_LAST = (
    """HloModule sm
"""
    + REDUCERS
    + """
ENTRY %main (x: f32[3,5,7]) -> f32[3,5,7] {
  %x = f32[3,5,7]{2,1,0} parameter(0)
  %ninf = f32[] constant(-inf)
  %mx = f32[3,5]{1,0} reduce(f32[3,5,7]{2,1,0} %x, f32[] %ninf), dimensions={2}, to_apply=%max
  %mxb = f32[3,5,7]{2,1,0} broadcast(f32[3,5]{1,0} %mx), dimensions={0,1}
  %sub = f32[3,5,7]{2,1,0} subtract(f32[3,5,7]{2,1,0} %x, f32[3,5,7]{2,1,0} %mxb)
  %e = f32[3,5,7]{2,1,0} exponential(f32[3,5,7]{2,1,0} %sub)
  %zero = f32[] constant(0)
  %sum = f32[3,5]{1,0} reduce(f32[3,5,7]{2,1,0} %e, f32[] %zero), dimensions={2}, to_apply=%add
  %sumb = f32[3,5,7]{2,1,0} broadcast(f32[3,5]{1,0} %sum), dimensions={0,1}
  ROOT %y = f32[3,5,7]{2,1,0} divide(f32[3,5,7]{2,1,0} %e, f32[3,5,7]{2,1,0} %sumb)
}"""
)

# layer normalization as ONNX lowers it: keepdims reductions reshaped to [4,1]
LAYER_NORM = (
    """HloModule ln
"""
    + REDUCERS
    + """
ENTRY %main (x: f32[4,16], g: f32[16]) -> f32[4,16] {
  %x = f32[4,16]{1,0} parameter(0)
  %g = f32[16]{0} parameter(1)
  %zero = f32[] constant(0)
  %s = f32[4]{0} reduce(f32[4,16]{1,0} %x, f32[] %zero), dimensions={1}, to_apply=%add
  %s1 = f32[4,1]{1,0} reshape(f32[4]{0} %s)
  %inv = f32[4,1]{1,0} constant({ {0.0625}, {0.0625}, {0.0625}, {0.0625} })
  %mean = f32[4,1]{1,0} multiply(f32[4,1]{1,0} %s1, f32[4,1]{1,0} %inv)
  %mean0 = f32[4]{0} reshape(f32[4,1]{1,0} %mean)
  %meanb = f32[4,16]{1,0} broadcast(f32[4]{0} %mean0), dimensions={0}
  %d = f32[4,16]{1,0} subtract(f32[4,16]{1,0} %x, f32[4,16]{1,0} %meanb)
  %sq = f32[4,16]{1,0} multiply(f32[4,16]{1,0} %d, f32[4,16]{1,0} %d)
  %v = f32[4]{0} reduce(f32[4,16]{1,0} %sq, f32[] %zero), dimensions={1}, to_apply=%add
  %v1 = f32[4,1]{1,0} reshape(f32[4]{0} %v)
  %var = f32[4,1]{1,0} multiply(f32[4,1]{1,0} %v1, f32[4,1]{1,0} %inv)
  %eps = f32[4,1]{1,0} constant({ {1e-5}, {1e-5}, {1e-5}, {1e-5} })
  %ve = f32[4,1]{1,0} add(f32[4,1]{1,0} %var, f32[4,1]{1,0} %eps)
  %r = f32[4,1]{1,0} rsqrt(f32[4,1]{1,0} %ve)
  %r0 = f32[4]{0} reshape(f32[4,1]{1,0} %r)
  %rb = f32[4,16]{1,0} broadcast(f32[4]{0} %r0), dimensions={0}
  %n = f32[4,16]{1,0} multiply(f32[4,16]{1,0} %d, f32[4,16]{1,0} %rb)
  %gb = f32[4,16]{1,0} broadcast(f32[16]{0} %g), dimensions={1}
  ROOT %y = f32[4,16]{1,0} multiply(f32[4,16]{1,0} %n, f32[4,16]{1,0} %gb)
}"""
)

# a reduction over the leading dim is not a row of the consumer's loop: separate kernels
SOFTMAX_FIRST = (
    """HloModule sm0
"""
    + REDUCERS
    + """
ENTRY %main (x: f32[6,5]) -> f32[6,5] {
  %x = f32[6,5]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %e = f32[6,5]{1,0} exponential(f32[6,5]{1,0} %x)
  %sum = f32[5]{0} reduce(f32[6,5]{1,0} %e, f32[] %zero), dimensions={0}, to_apply=%add
  %sumb = f32[6,5]{1,0} broadcast(f32[5]{0} %sum), dimensions={1}
  ROOT %y = f32[6,5]{1,0} divide(f32[6,5]{1,0} %e, f32[6,5]{1,0} %sumb)
}"""
)

# x / sum(x): the whole array is one row (row rank 0)
GLOBAL_NORMALIZE = (
    """HloModule gn
"""
    + REDUCERS
    + """
ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %a = f32[4,8]{1,0} abs(f32[4,8]{1,0} %x)
  %sum = f32[] reduce(f32[4,8]{1,0} %a, f32[] %zero), dimensions={0,1}, to_apply=%add
  %sumb = f32[4,8]{1,0} broadcast(f32[] %sum), dimensions={}
  ROOT %y = f32[4,8]{1,0} divide(f32[4,8]{1,0} %x, f32[4,8]{1,0} %sumb)
}"""
)

# the root is itself a reduction (variance over the last dim of a 3-d array)
VARIANCE = (
    """HloModule var
"""
    + REDUCERS
    + """
ENTRY %main (x: f32[2,5,9]) -> f32[2,5] {
  %x = f32[2,5,9]{2,1,0} parameter(0)
  %zero = f32[] constant(0)
  %s = f32[2,5]{1,0} reduce(f32[2,5,9]{2,1,0} %x, f32[] %zero), dimensions={2}, to_apply=%add
  %sb = f32[2,5,9]{2,1,0} broadcast(f32[2,5]{1,0} %s), dimensions={0,1}
  %d = f32[2,5,9]{2,1,0} subtract(f32[2,5,9]{2,1,0} %x, f32[2,5,9]{2,1,0} %sb)
  %a = f32[2,5,9]{2,1,0} abs(f32[2,5,9]{2,1,0} %d)
  ROOT %v = f32[2,5]{1,0} reduce(f32[2,5,9]{2,1,0} %a, f32[] %zero), dimensions={2}, to_apply=%add
}"""
)

# reductions of two row ranks read by one consumer: only one rank joins the kernel
TWO_RANKS = (
    """HloModule tr
"""
    + REDUCERS
    + """
ENTRY %main (x: f32[2,3,4]) -> f32[2,3,4] {
  %x = f32[2,3,4]{2,1,0} parameter(0)
  %zero = f32[] constant(0)
  %rows = f32[2,3]{1,0} reduce(f32[2,3,4]{2,1,0} %x, f32[] %zero), dimensions={2}, to_apply=%add
  %planes = f32[2]{0} reduce(f32[2,3,4]{2,1,0} %x, f32[] %zero), dimensions={1,2}, to_apply=%add
  %rb = f32[2,3,4]{2,1,0} broadcast(f32[2,3]{1,0} %rows), dimensions={0,1}
  %pb = f32[2,3,4]{2,1,0} broadcast(f32[2]{0} %planes), dimensions={0}
  %t = f32[2,3,4]{2,1,0} subtract(f32[2,3,4]{2,1,0} %x, f32[2,3,4]{2,1,0} %rb)
  ROOT %y = f32[2,3,4]{2,1,0} multiply(f32[2,3,4]{2,1,0} %t, f32[2,3,4]{2,1,0} %pb)
}"""
)

CASES = {
    "softmax_last": (SOFTMAX_LAST, 1),
    "layer_norm": (LAYER_NORM, 1),
    "softmax_first": (SOFTMAX_FIRST, 3),  # exp is stored once, read by both
    "global_normalize": (GLOBAL_NORMALIZE, 1),
    "variance": (VARIANCE, 1),
    "two_ranks": (TWO_RANKS, 2),
}


def _fused(text: str):
    module = parse_module(text)
    Fusion().run(module)
    DeadCodeElimination().run(module)
    return module


def _kernels(module) -> list:
    leaves = (Op.PARAMETER, Op.CONSTANT, Op.TUPLE)
    return [i for i in module.entry.instructions if i.op not in leaves]


@pytest.mark.parametrize("case", sorted(CASES))
def test_row_fusion_kernel_count_and_numerics(case, compile_module):
    text, kernels = CASES[case]
    module = _fused(text)
    assert len(_kernels(module)) == kernels, [k.name for k in _kernels(module)]
    rng = np.random.default_rng(7)
    args = [rng.uniform(-3, 3, p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    expected = evaluate(parse_module(text), args)
    (got,) = compile_module(module).run(*args)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6)


def test_reduction_with_a_user_outside_stays_separate():
    text = SOFTMAX_LAST.replace("-> f32[3,5,7] {", "-> (f32[3,5,7], f32[3,5]) {").replace(
        "ROOT %y = f32[3,5,7]{2,1,0} divide(f32[3,5,7]{2,1,0} %e, f32[3,5,7]{2,1,0} %sumb)",
        "%y = f32[3,5,7]{2,1,0} divide(f32[3,5,7]{2,1,0} %e, f32[3,5,7]{2,1,0} %sumb)\n"
        "  ROOT %t = (f32[3,5,7]{2,1,0}, f32[3,5]{1,0}) tuple(%y, %sum)",
    )
    module = _fused(text)
    reduces_outside = [
        k
        for k in _kernels(module)
        if k.op is Op.REDUCE or (k.op is Op.FUSION and k.called[0].root.op is Op.REDUCE)
    ]
    assert reduces_outside, "the stored sum must be its own kernel"


@pytest.mark.parametrize("case", ["softmax_last", "global_normalize"])
def test_division_by_a_row_value_divides_once_per_row(case):
    """The output loop multiplies by the row's reciprocal: the only division left is
    1 / the row value, and the quotients stay within 1.5 ulp (the numerics test above)."""
    module = _fused(CASES[case][0])
    plan = assign_buffers(module)
    text = str(optimized_module(module, plan, "m", parse_target("x86_64:x86-64-v3"))[0])
    dividends = re.findall(r"= fdiv \S+ ([^,]+),", text)
    assert dividends and set(dividends) == {"1.000000e+00"}, dividends


def test_short_rows_are_vectorized():
    """A row of a few dozen columns reaches the loop vectorizer whole (llvm/loops.py's
    KEEP_FOR_VECTORIZER): unrolled first, the softmax kernel was scalar code, an
    operation or more per column (56 for 49 columns; vectorized, 30 are left: the exact
    maximum's loop for NaN rows and the remainder loops)."""
    columns = 49
    module = _fused(SOFTMAX_LAST.replace("[3,5,7]", f"[3,5,{columns}]"))
    plan = assign_buffers(module)
    text = str(optimized_module(module, plan, "m", parse_target("x86_64:x86-64-v4"))[0])
    assert re.search(r"fadd[^\n]*<16 x float>", text), "the sum is not vectorized"
    scalar = re.findall(r"= (?:fadd|fmul|fsub|fcmp \w+|call)[^<\n]* float ", text)
    assert len(scalar) < columns, scalar
