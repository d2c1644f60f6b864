"""Passes over modules with while, conditional and call: folding leaves control flow alone,
the other passes optimize nested computations too (fusion included: the backend emits
a loop body's kernels as it does the entry's), the pipeline inlines calls at -O0."""

from __future__ import annotations

from pass_testing import check_pass, random_args

from aotc.ir import Op
from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module
from aotc.ir.verify import verify
from aotc.passes.algsimp import AlgebraicSimplifier
from aotc.passes.cse import CommonSubexpressionElimination
from aotc.passes.dce import DeadCodeElimination
from aotc.passes.fold import ConstantFolding
from aotc.passes.fusion import Fusion
from aotc.passes.inline import CallInlining
from aotc.passes.pipeline import make_pipeline

LOOP = """HloModule m
%cond (s: (s32[], f32[4])) -> pred[] {
  %s = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element((s32[], f32[4]{0}) %s), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(s32[] %i, s32[] %n), direction=LT
}
%body (s: (s32[], f32[4])) -> (s32[], f32[4]) {
  %s = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element((s32[], f32[4]{0}) %s), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(s32[] %i, s32[] %one)
  %v = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %s), index=1
  %e = f32[4]{0} exponential(f32[4]{0} %v)
  %v2 = f32[4]{0} multiply(f32[4]{0} %e, f32[4]{0} %v)
  ROOT %t = (s32[], f32[4]{0}) tuple(s32[] %i2, f32[4]{0} %v2)
}
ENTRY %main (x: f32[4]) -> (f32[4]) {
  %x = f32[4]{0} parameter(0)
  %zero = s32[] constant(0)
  %c = f32[4]{0} constant({1, 2, 3, 4})
  %init = (s32[], f32[4]{0}) tuple(s32[] %zero, f32[4]{0} %c)
  %w = (s32[], f32[4]{0}) while((s32[], f32[4]{0}) %init), condition=%cond, body=%body
  %r = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %w), index=1
  %y = f32[4]{0} add(f32[4]{0} %r, f32[4]{0} %x)
  ROOT %out = (f32[4]{0}) tuple(f32[4]{0} %y)
}
"""


def test_fold_leaves_a_loop_over_constants_alone():
    check_pass(ConstantFolding(), LOOP, None)


def test_fold_and_algsimp_work_inside_a_body():
    before = LOOP.replace(
        "%one = s32[] constant(1)",
        "%half1 = s32[] constant(2)\n  %neg1 = s32[] constant(-1)\n"
        "  %one = s32[] add(s32[] %half1, s32[] %neg1)",
    )
    check_pass(ConstantFolding(), before, LOOP)
    times_one = LOOP.replace(
        "ROOT %t = (s32[], f32[4]{0}) tuple(s32[] %i2, f32[4]{0} %v2)",
        "%k = f32[] constant(1)\n  %bk = f32[4]{0} broadcast(f32[] %k), dimensions={}\n"
        "  %v3 = f32[4]{0} multiply(f32[4]{0} %v2, f32[4]{0} %bk)\n"
        "  ROOT %t = (s32[], f32[4]{0}) tuple(s32[] %i2, f32[4]{0} %v3)",
    )
    check_pass(AlgebraicSimplifier(), times_one, LOOP)


def test_dce_keeps_loop_computations_and_unused_parameters():
    check_pass(DeadCodeElimination(), LOOP, None)
    with_dead = LOOP.replace(
        "  %n = s32[] constant(3)", "  %n = s32[] constant(3)\n  %dead = s32[] negate(s32[] %i)"
    )
    check_pass(DeadCodeElimination(), with_dead, LOOP)


def test_cse_merges_identical_loops():
    twice = LOOP.replace(
        "  %r = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %w), index=1",
        "  %w2 = (s32[], f32[4]{0}) while((s32[], f32[4]{0}) %init), condition=%cond, "
        "body=%body\n"
        "  %r = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %w2), index=1\n"
        "  %r0 = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %w), index=1",
    ).replace("add(f32[4]{0} %r, f32[4]{0} %x)", "add(f32[4]{0} %r, f32[4]{0} %r0)")
    merged = LOOP.replace(
        "  %r = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %w), index=1",
        "  %r = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %w), index=1",
    ).replace("add(f32[4]{0} %r, f32[4]{0} %x)", "add(f32[4]{0} %r, f32[4]{0} %r)")
    # the parameter x stays, unused
    check_pass(CommonSubexpressionElimination(), twice, merged)


def test_fusion_fuses_inside_a_body_never_the_loop():
    module = parse_module(LOOP)
    reference = parse_module(LOOP)
    assert Fusion().run(module)
    verify(module)
    body = module.computation("body")
    fusions = [i for i in body.instructions if i.op is Op.FUSION]
    assert len(fusions) == 1  # exp and multiply: one kernel
    assert {i.op for i in fusions[0].called[0].instructions} >= {Op.EXP, Op.MULTIPLY}
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.op is Op.FUSION:
                fused_ops = {i.op for i in instr.called[0].instructions}
                assert not fused_ops & {Op.WHILE, Op.CONDITIONAL, Op.CALL}
    assert any(i.op is Op.WHILE for i in module.entry.instructions)
    for seed in range(3):
        args = random_args(reference, seed)
        (want,), (got,) = evaluate(reference, args), evaluate(module, args)
        assert (want == got).all()


CALL = """HloModule m
%twice (v: f32[4]) -> f32[4] {
  %v = f32[4]{0} parameter(0)
  ROOT %d = f32[4]{0} add(f32[4]{0} %v, f32[4]{0} %v)
}
ENTRY %main (x: f32[4]) -> (f32[4]) {
  %x = f32[4]{0} parameter(0)
  %c = f32[4]{0} call(f32[4]{0} %x), to_apply=%twice
  ROOT %out = (f32[4]{0}) tuple(f32[4]{0} %c)
}
"""

INLINED = """HloModule m
ENTRY %main (x: f32[4]) -> (f32[4]) {
  %x = f32[4]{0} parameter(0)
  %d = f32[4]{0} add(f32[4]{0} %x, f32[4]{0} %x)
  ROOT %out = (f32[4]{0}) tuple(f32[4]{0} %d)
}
"""


def test_inline_pass():
    check_pass(CallInlining(), CALL, INLINED)
    check_pass(CallInlining(), LOOP, None)


def test_every_pipeline_level_inlines_calls_first():
    for level in (0, 1, 2):
        pipeline = make_pipeline(level, verify=True)
        assert pipeline.passes[0].name == "inline"
        module = parse_module(CALL)
        pipeline.run(module)
        assert all(i.op is not Op.CALL for c in module.computations for i in c.instructions)
