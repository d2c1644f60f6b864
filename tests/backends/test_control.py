"""while, conditional and call compiled: HLO text in XLA's syntax, run through the pass
pipeline (-O0 and -O2), compiled, called; compared with the evaluator on the module as
written and with expectations written in numpy / plain python."""

from __future__ import annotations

import numpy as np
import pytest
from aotc_testing import hlo_reducer

from aotc.ir import Op
from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module
from aotc.passes.pipeline import make_pipeline


@pytest.fixture(params=[0, 2], ids=["O0", "O2"])
def run_hlo(request, compile_module):
    """run_hlo(text, *inputs, rtol, atol) -> compiled outputs, checked against the evaluator.

    `.compiled` holds the last compiled module (to run it on more inputs).
    """

    def run(text: str, *inputs, rtol: float = 1e-6, atol: float = 1e-6) -> list[np.ndarray]:
        module = parse_module(text)
        make_pipeline(request.param, verify=True).run(module)
        compiled = compile_module(module)
        run.compiled = compiled
        return check_run(compiled, text, inputs, rtol, atol)

    return run


def check_run(compiled, text: str, inputs, rtol: float = 1e-6, atol: float = 1e-6):
    """Run `compiled` on `inputs` and compare with the evaluator on `text` as written."""
    got = compiled.run(*inputs)
    want = evaluate(parse_module(text), list(inputs))
    want = list(want) if isinstance(want, tuple) else [want]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {k}"
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
    return got


FORI_LOOP = """HloModule jit_fori
%body (state: (s32[], f32[8], f32[8])) -> (s32[], f32[8], f32[8]) {
  %state = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %acc = f32[8]{0} get-tuple-element(%state), index=1
  %x = f32[8]{0} get-tuple-element(%state), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %fi = f32[] convert(%i)
  %bi = f32[8]{0} broadcast(%fi), dimensions={}
  %scaled = f32[8]{0} multiply(%x, %bi)
  %sum = f32[8]{0} add(%acc, %scaled)
  ROOT %out = (s32[], f32[8]{0}, f32[8]{0}) tuple(%next, %sum, %x)
}
%cond (state: (s32[], f32[8], f32[8])) -> pred[] {
  %state = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %ten = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %ten), direction=LT
}
ENTRY %main (x: f32[8], acc: f32[8]) -> (f32[8], s32[]) {
  %x = f32[8]{0} parameter(0)
  %acc = f32[8]{0} parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}, f32[8]{0}) tuple(%zero, %acc, %x)
  %loop = (s32[], f32[8]{0}, f32[8]{0}) while(%init), condition=%cond, body=%body
  %result = f32[8]{0} get-tuple-element(%loop), index=1
  %count = s32[] get-tuple-element(%loop), index=0
  ROOT %r = (f32[8]{0}, s32[]) tuple(%result, %count)
}
"""


def test_fori_loop_accumulates_a_vector(run_hlo, rng):
    x = rng.standard_normal(8).astype(np.float32)
    acc = rng.standard_normal(8).astype(np.float32)
    result, count = run_hlo(FORI_LOOP, x, acc)
    np.testing.assert_allclose(result, acc + x * sum(range(10)), rtol=1e-5)
    assert count == 10
    # the loop runs as a loop: one while kernel, no unrolled copies of the body
    plan = run_hlo.compiled.plan
    assert [i.op for i in plan.schedule].count(Op.WHILE) == 1
    assert run_hlo.compiled.run(x, acc, scratch="null")[1] == 10  # the static arena


# the loop condition of the Collatz tests: state (n, steps) -> n != 1
NOT_ONE = """%not_one (s: (s32[], s32[])) -> pred[] {
  %s = (s32[], s32[]) parameter(0)
  %n = s32[] get-tuple-element(%s), index=0
  %one = s32[] constant(1)
  ROOT %ne = pred[] compare(%n, %one), direction=NE
}
"""

COLLATZ = (
    """HloModule collatz
%step (s: (s32[], s32[])) -> (s32[], s32[]) {
  %s = (s32[], s32[]) parameter(0)
  %n = s32[] get-tuple-element(%s), index=0
  %steps = s32[] get-tuple-element(%s), index=1
  %two = s32[] constant(2)
  %rem = s32[] remainder(%n, %two)
  %one = s32[] constant(1)
  %odd = pred[] compare(%rem, %one), direction=EQ
  %three = s32[] constant(3)
  %n3 = s32[] multiply(%n, %three)
  %up = s32[] add(%n3, %one)
  %down = s32[] divide(%n, %two)
  %n2 = s32[] select(%odd, %up, %down)
  %steps2 = s32[] add(%steps, %one)
  ROOT %t = (s32[], s32[]) tuple(%n2, %steps2)
}
"""
    + NOT_ONE
    + """ENTRY %main (n: s32[]) -> (s32[]) {
  %n = s32[] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], s32[]) tuple(%n, %zero)
  %w = (s32[], s32[]) while(%init), condition=%not_one, body=%step
  %steps = s32[] get-tuple-element(%w), index=1
  ROOT %r = (s32[]) tuple(%steps)
}
"""
)


def collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n, steps = (3 * n + 1 if n % 2 else n // 2), steps + 1
    return steps


def test_collatz_steps_data_dependent_condition(run_hlo):
    (steps,) = run_hlo(COLLATZ, np.int32(27))
    assert steps == collatz_steps(27) == 111
    for n in (1, 2, 7, 97, 871):
        (steps,) = check_run(run_hlo.compiled, COLLATZ, [np.int32(n)])
        assert steps == collatz_steps(n)


HALVING = (
    """HloModule halving
"""
    + hlo_reducer("max", "maximum")
    + """
%big (x: f32[5]) -> pred[] {
  %x = f32[5]{0} parameter(0)
  %lowest = f32[] constant(-inf)
  %top = f32[] reduce(%x, %lowest), dimensions={0}, to_apply=%max
  %one = f32[] constant(1)
  ROOT %ge = pred[] compare(%top, %one), direction=GE
}
%halve (x: f32[5]) -> f32[5] {
  %x = f32[5]{0} parameter(0)
  %half = f32[] constant(0.5)
  %h = f32[5]{0} broadcast(%half), dimensions={}
  ROOT %y = f32[5]{0} multiply(%x, %h)
}
ENTRY %main (x: f32[5]) -> (f32[5]) {
  %x = f32[5]{0} parameter(0)
  %w = f32[5]{0} while(%x), condition=%big, body=%halve
  ROOT %r = (f32[5]{0}) tuple(%w)
}
"""
)


def test_halving_until_below_one_array_state(run_hlo):
    x = np.array([3.0, 100.0, -7.0, 0.25, 12.5], np.float32)
    (got,) = run_hlo(HALVING, x)
    want = x.copy()
    while want.max() >= 1:
        want = want * np.float32(0.5)
    np.testing.assert_array_equal(got, want)
    small = np.full(5, 0.5, np.float32)  # the condition is false at once: zero trips
    np.testing.assert_array_equal(check_run(run_hlo.compiled, HALVING, [small])[0], small)


MIXED_STATE = """HloModule mixed
%body (s: (s32[], f32[3], pred[], s32[])) -> (s32[], f32[3], pred[], s32[]) {
  %s = (s32[], f32[3]{0}, pred[], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %v = f32[3]{0} get-tuple-element(%s), index=1
  %flip = pred[] get-tuple-element(%s), index=2
  %limit = s32[] get-tuple-element(%s), index=3
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %two = f32[] constant(2)
  %b2 = f32[3]{0} broadcast(%two), dimensions={}
  %doubled = f32[3]{0} multiply(%v, %b2)
  %onef = f32[] constant(1)
  %b1 = f32[3]{0} broadcast(%onef), dimensions={}
  %plus = f32[3]{0} add(%v, %b1)
  %bf = pred[3]{0} broadcast(%flip), dimensions={}
  %v2 = f32[3]{0} select(%bf, %doubled, %plus)
  %flip2 = pred[] not(%flip)
  ROOT %t = (s32[], f32[3]{0}, pred[], s32[]) tuple(%i2, %v2, %flip2, %limit)
}
%cond (s: (s32[], f32[3], pred[], s32[])) -> pred[] {
  %s = (s32[], f32[3]{0}, pred[], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %limit = s32[] get-tuple-element(%s), index=3
  ROOT %lt = pred[] compare(%i, %limit), direction=LT
}
ENTRY %main (v: f32[3], flip: pred[], limit: s32[]) -> (s32[], f32[3], pred[]) {
  %v = f32[3]{0} parameter(0)
  %flip = pred[] parameter(1)
  %limit = s32[] parameter(2)
  %zero = s32[] constant(0)
  %init = (s32[], f32[3]{0}, pred[], s32[]) tuple(%zero, %v, %flip, %limit)
  %w = (s32[], f32[3]{0}, pred[], s32[]) while(%init), condition=%cond, body=%body
  %i = s32[] get-tuple-element(%w), index=0
  %v2 = f32[3]{0} get-tuple-element(%w), index=1
  %f2 = pred[] get-tuple-element(%w), index=2
  ROOT %r = (s32[], f32[3]{0}, pred[]) tuple(%i, %v2, %f2)
}
"""


def test_tuple_state_with_mixed_dtypes(run_hlo):
    v = np.array([1.0, -2.0, 0.5], np.float32)
    for flip, limit in ((True, 5), (False, 4), (True, 0)):
        if limit == 5:
            got = run_hlo(MIXED_STATE, v, np.bool_(flip), np.int32(limit))
        else:
            got = check_run(run_hlo.compiled, MIXED_STATE, [v, np.bool_(flip), np.int32(limit)])
        want_v, want_flip = v.copy(), flip
        for _ in range(limit):
            want_v = want_v * 2 if want_flip else want_v + 1
            want_flip = not want_flip
        assert got[0] == limit and bool(got[2]) == want_flip
        np.testing.assert_array_equal(got[1], want_v)


NESTED = """HloModule nested
%inner_body (s: (s32[], f32[4], f32[4], s32[])) -> (s32[], f32[4], f32[4], s32[]) {
  %s = (s32[], f32[4]{0}, f32[4]{0}, s32[]) parameter(0)
  %j = s32[] get-tuple-element(%s), index=0
  %acc = f32[4]{0} get-tuple-element(%s), index=1
  %x = f32[4]{0} get-tuple-element(%s), index=2
  %i = s32[] get-tuple-element(%s), index=3
  %fj = f32[] convert(%j)
  %bj = f32[4]{0} broadcast(%fj), dimensions={}
  %xj = f32[4]{0} multiply(%x, %bj)
  %acc2 = f32[4]{0} add(%acc, %xj)
  %one = s32[] constant(1)
  %j2 = s32[] add(%j, %one)
  ROOT %t = (s32[], f32[4]{0}, f32[4]{0}, s32[]) tuple(%j2, %acc2, %x, %i)
}
%inner_cond (s: (s32[], f32[4], f32[4], s32[])) -> pred[] {
  %s = (s32[], f32[4]{0}, f32[4]{0}, s32[]) parameter(0)
  %j = s32[] get-tuple-element(%s), index=0
  %i = s32[] get-tuple-element(%s), index=3
  ROOT %le = pred[] compare(%j, %i), direction=LE
}
%outer_body (s: (s32[], f32[4], f32[4])) -> (s32[], f32[4], f32[4]) {
  %s = (s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %acc = f32[4]{0} get-tuple-element(%s), index=1
  %x = f32[4]{0} get-tuple-element(%s), index=2
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}, f32[4]{0}, s32[]) tuple(%zero, %acc, %x, %i)
  %inner = (s32[], f32[4]{0}, f32[4]{0}, s32[]) while(%init), condition=%inner_cond, body=%inner_body
  %acc2 = f32[4]{0} get-tuple-element(%inner), index=1
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[4]{0}, f32[4]{0}) tuple(%i2, %acc2, %x)
}
%outer_cond (s: (s32[], f32[4], f32[4])) -> pred[] {
  %s = (s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %four = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %four), direction=LT
}
ENTRY %main (x: f32[4]) -> (f32[4]) {
  %x = f32[4]{0} parameter(0)
  %zero = s32[] constant(0)
  %zeros = f32[4]{0} broadcast(f32[] constant(0)), dimensions={}
  %init = (s32[], f32[4]{0}, f32[4]{0}) tuple(%zero, %zeros, %x)
  %outer = (s32[], f32[4]{0}, f32[4]{0}) while(%init), condition=%outer_cond, body=%outer_body
  %acc = f32[4]{0} get-tuple-element(%outer), index=1
  ROOT %r = (f32[4]{0}) tuple(%acc)
}
"""


def test_while_nested_in_while(run_hlo):
    x = np.array([1.0, 0.5, -2.0, 3.0], np.float32)
    (acc,) = run_hlo(NESTED, x)
    total = sum(j for i in range(4) for j in range(i + 1))  # 0 + 1 + 3 + 6
    np.testing.assert_allclose(acc, x * total, rtol=1e-6)


BRANCHES = """HloModule branches
%on_true (t: (f32[3,5], f32[5])) -> f32[3,5] {
  %t = (f32[3,5]{1,0}, f32[5]{0}) parameter(0)
  %x = f32[3,5]{1,0} get-tuple-element(%t), index=0
  %b = f32[5]{0} get-tuple-element(%t), index=1
  %bb = f32[3,5]{1,0} broadcast(%b), dimensions={1}
  %c = f32[3,5]{1,0} cosine(%x)
  ROOT %r = f32[3,5]{1,0} add(%c, %bb)
}
%on_false (y: f32[3,5]) -> f32[3,5] {
  %y = f32[3,5]{1,0} parameter(0)
  %s = f32[3,5]{1,0} sine(%y)
  %two = f32[] constant(2)
  %b2 = f32[3,5]{1,0} broadcast(%two), dimensions={}
  ROOT %r = f32[3,5]{1,0} multiply(%s, %b2)
}
%plus_one (x: f32[3,5]) -> f32[3,5] {
  %x = f32[3,5]{1,0} parameter(0)
  %one = f32[] constant(1)
  %b = f32[3,5]{1,0} broadcast(%one), dimensions={}
  ROOT %r = f32[3,5]{1,0} add(%x, %b)
}
%square (x: f32[3,5]) -> f32[3,5] {
  %x = f32[3,5]{1,0} parameter(0)
  ROOT %r = f32[3,5]{1,0} multiply(%x, %x)
}
%same (x: f32[3,5]) -> f32[3,5] {
  ROOT %x = f32[3,5]{1,0} parameter(0)
}
ENTRY %main (p: f32[], x: f32[3,5], b: f32[5], which: s32[]) -> (f32[3,5], f32[3,5]) {
  %p = f32[] parameter(0)
  %x = f32[3,5]{1,0} parameter(1)
  %b = f32[5]{0} parameter(2)
  %which = s32[] parameter(3)
  %zero = f32[] constant(0)
  %gt = pred[] compare(%p, %zero), direction=GT
  %pair = (f32[3,5]{1,0}, f32[5]{0}) tuple(%x, %b)
  %neg = f32[3,5]{1,0} negate(%x)
  %c2 = f32[3,5]{1,0} conditional(%gt, %pair, %neg), true_computation=%on_true, false_computation=%on_false
  %c3 = f32[3,5]{1,0} conditional(%which, %x, %neg, %c2), branch_computations={%plus_one, %square, %same}
  ROOT %r = (f32[3,5]{1,0}, f32[3,5]{1,0}) tuple(%c2, %c3)
}
"""


def test_conditional_on_pred_and_on_index(run_hlo, rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    first = True
    for p in (1.5, -1.0):
        two = np.cos(x) + b if p > 0 else np.sin(-x) * 2
        # an index out of range (negative or too big) takes the last branch
        for which, three in ((0, x + 1), (1, x * x), (2, two), (-1, two), (3, two), (99, two)):
            inputs = [np.float32(p), x, b, np.int32(which)]
            if first:
                got, first = run_hlo(BRANCHES, *inputs, rtol=1e-5, atol=1e-6), False
            else:
                got = check_run(run_hlo.compiled, BRANCHES, inputs, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[0], two, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[1], three, rtol=1e-5, atol=1e-6)


CALLS = """HloModule calls
%scale (v: f32[4], k: f32[]) -> f32[4] {
  %v = f32[4]{0} parameter(0)
  %k = f32[] parameter(1)
  %bk = f32[4]{0} broadcast(%k), dimensions={}
  ROOT %r = f32[4]{0} multiply(%v, %bk)
}
%affine (v: f32[4], k: f32[], c: f32[4]) -> (f32[4], f32[4]) {
  %v = f32[4]{0} parameter(0)
  %k = f32[] parameter(1)
  %c = f32[4]{0} parameter(2)
  %s = f32[4]{0} call(%v, %k), to_apply=%scale
  %r = f32[4]{0} add(%s, %c)
  ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(%r, %c)
}
ENTRY %main (x: f32[4], y: f32[4]) -> (f32[4], f32[4]) {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %three = f32[] constant(3)
  %a = (f32[4]{0}, f32[4]{0}) call(%x, %three, %y), to_apply=%affine
  %a0 = f32[4]{0} get-tuple-element(%a), index=0
  %half = f32[] constant(0.5)
  %b = (f32[4]{0}, f32[4]{0}) call(%a0, %half, %x), to_apply=%affine
  %b0 = f32[4]{0} get-tuple-element(%b), index=0
  %b1 = f32[4]{0} get-tuple-element(%b), index=1
  ROOT %r = (f32[4]{0}, f32[4]{0}) tuple(%b0, %b1)
}
"""


def test_call_is_inlined_and_runs(run_hlo, rng):
    x, y = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    first, second = run_hlo(CALLS, x, y)
    np.testing.assert_allclose(first, (x * 3 + y) * np.float32(0.5) + x, rtol=1e-6)
    np.testing.assert_array_equal(second, x)
    module = run_hlo.compiled.module
    assert all(i.op is not Op.CALL for c in module.computations for i in c.instructions)
    assert {c.name for c in module.computations}.isdisjoint({"scale", "affine"})


RNN = (
    """HloModule rnn
"""
    + hlo_reducer("add", "add")
    + """
%body (s: (s32[], f32[4,8], f32[8,8], f32[])) -> (s32[], f32[4,8], f32[8,8], f32[]) {
  %s = (s32[], f32[4,8]{1,0}, f32[8,8]{1,0}, f32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %h = f32[4,8]{1,0} get-tuple-element(%s), index=1
  %w = f32[8,8]{1,0} get-tuple-element(%s), index=2
  %total = f32[] get-tuple-element(%s), index=3
  %hw = f32[4,8]{1,0} dot(%h, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %fi = f32[] convert(%i)
  %tenth = f32[] constant(0.1)
  %shift = f32[] multiply(%fi, %tenth)
  %bs = f32[4,8]{1,0} broadcast(%shift), dimensions={}
  %pre = f32[4,8]{1,0} add(%hw, %bs)
  %h2 = f32[4,8]{1,0} tanh(%pre)
  %zero = f32[] constant(0)
  %rs = f32[] reduce(%h2, %zero), dimensions={0,1}, to_apply=%add
  %total2 = f32[] add(%total, %rs)
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[4,8]{1,0}, f32[8,8]{1,0}, f32[]) tuple(%i2, %h2, %w, %total2)
}
%cond (s: (s32[], f32[4,8], f32[8,8], f32[])) -> pred[] {
  %s = (s32[], f32[4,8]{1,0}, f32[8,8]{1,0}, f32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %five = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %five), direction=LT
}
ENTRY %main (h: f32[4,8], w: f32[8,8]) -> (f32[4,8], f32[]) {
  %h = f32[4,8]{1,0} parameter(0)
  %w = f32[8,8]{1,0} parameter(1)
  %zero = s32[] constant(0)
  %zf = f32[] constant(0)
  %init = (s32[], f32[4,8]{1,0}, f32[8,8]{1,0}, f32[]) tuple(%zero, %h, %w, %zf)
  %loop = (s32[], f32[4,8]{1,0}, f32[8,8]{1,0}, f32[]) while(%init), condition=%cond, body=%body
  %h5 = f32[4,8]{1,0} get-tuple-element(%loop), index=1
  %t5 = f32[] get-tuple-element(%loop), index=3
  ROOT %r = (f32[4,8]{1,0}, f32[]) tuple(%h5, %t5)
}
"""
)


def test_while_body_with_dot_and_reduce(run_hlo, rng):
    h = rng.standard_normal((4, 8)).astype(np.float32)
    w = (rng.standard_normal((8, 8)) / 3).astype(np.float32)
    got_h, got_total = run_hlo(RNN, h, w, rtol=1e-5, atol=1e-5)
    want_h, want_total = h.astype(np.float64), 0.0
    for i in range(5):
        want_h = np.tanh(want_h @ w + np.float32(0.1) * i)
        want_total += want_h.sum()
    np.testing.assert_allclose(got_h, want_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_total, want_total, rtol=1e-4, atol=1e-4)


SWAPS = """HloModule swaps
%fib (s: (f32[3], f32[3], s32[])) -> (f32[3], f32[3], s32[]) {
  %s = (f32[3]{0}, f32[3]{0}, s32[]) parameter(0)
  %a = f32[3]{0} get-tuple-element(%s), index=0
  %b = f32[3]{0} get-tuple-element(%s), index=1
  %i = s32[] get-tuple-element(%s), index=2
  %ab = f32[3]{0} add(%a, %b)
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  ROOT %t = (f32[3]{0}, f32[3]{0}, s32[]) tuple(%b, %ab, %i2)
}
%swap (s: (f32[3], f32[3], s32[])) -> (f32[3], f32[3], s32[]) {
  %s = (f32[3]{0}, f32[3]{0}, s32[]) parameter(0)
  %a = f32[3]{0} get-tuple-element(%s), index=0
  %b = f32[3]{0} get-tuple-element(%s), index=1
  %i = s32[] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  ROOT %t = (f32[3]{0}, f32[3]{0}, s32[]) tuple(%b, %a, %i2)
}
%below (s: (f32[3], f32[3], s32[])) -> pred[] {
  %s = (f32[3]{0}, f32[3]{0}, s32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=2
  %n = s32[] constant(7)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
ENTRY %main (a: f32[3], b: f32[3]) -> (f32[3], f32[3], f32[3], f32[3], f32[3]) {
  %a = f32[3]{0} parameter(0)
  %b = f32[3]{0} parameter(1)
  %zero = s32[] constant(0)
  %ea = f32[3]{0} exponential(%a)
  %init = (f32[3]{0}, f32[3]{0}, s32[]) tuple(%ea, %b, %zero)
  %f = (f32[3]{0}, f32[3]{0}, s32[]) while(%init), condition=%below, body=%fib
  %init2 = (f32[3]{0}, f32[3]{0}, s32[]) tuple(%a, %ea, %zero)
  %g = (f32[3]{0}, f32[3]{0}, s32[]) while(%init2), condition=%below, body=%swap
  %f0 = f32[3]{0} get-tuple-element(%f), index=0
  %f1 = f32[3]{0} get-tuple-element(%f), index=1
  %g0 = f32[3]{0} get-tuple-element(%g), index=0
  %g1 = f32[3]{0} get-tuple-element(%g), index=1
  ROOT %r = (f32[3]{0}, f32[3]{0}, f32[3]{0}, f32[3]{0}, f32[3]{0}) tuple(%f0, %f1, %g0, %g1, %f1)
}
"""


def test_state_arrays_that_move_or_swap(run_hlo, rng):
    """Results that are other state arrays (fibonacci's a' = b, a swap): staged copies;
    one condition computation shared by two loops; an init value used after its loop."""
    a, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    f0, f1, g0, g1, f1_again = run_hlo(SWAPS, a, b, rtol=1e-5)
    x, y = np.exp(a).astype(np.float64), b.astype(np.float64)
    for _ in range(7):
        x, y = y, x + y
    np.testing.assert_allclose(f0, x, rtol=1e-5)
    np.testing.assert_allclose(f1, y, rtol=1e-5)
    np.testing.assert_array_equal(f1_again, f1)
    np.testing.assert_allclose(g0, np.exp(a), rtol=1e-6)  # 7 swaps: odd, so swapped
    np.testing.assert_array_equal(g1, a)


COND_IN_LOOP = (
    """HloModule collatz_cond
%half (n: s32[]) -> s32[] {
  %n = s32[] parameter(0)
  %two = s32[] constant(2)
  ROOT %d = s32[] divide(%n, %two)
}
%triple (n: s32[]) -> s32[] {
  %n = s32[] parameter(0)
  %three = s32[] constant(3)
  %m = s32[] multiply(%n, %three)
  %one = s32[] constant(1)
  ROOT %r = s32[] add(%m, %one)
}
%step (s: (s32[], s32[])) -> (s32[], s32[]) {
  %s = (s32[], s32[]) parameter(0)
  %n = s32[] get-tuple-element(%s), index=0
  %steps = s32[] get-tuple-element(%s), index=1
  %two = s32[] constant(2)
  %parity = s32[] remainder(%n, %two)
  %n2 = s32[] conditional(%parity, %n, %n), branch_computations={%half, %triple}
  %one = s32[] constant(1)
  %steps2 = s32[] add(%steps, %one)
  ROOT %t = (s32[], s32[]) tuple(%n2, %steps2)
}
"""
    + NOT_ONE
    + """ENTRY %main (n: s32[]) -> (s32[], s32[]) {
  %n = s32[] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], s32[]) tuple(%n, %zero)
  %w = (s32[], s32[]) while(%init), condition=%not_one, body=%step
  %last = s32[] get-tuple-element(%w), index=0
  %steps = s32[] get-tuple-element(%w), index=1
  ROOT %r = (s32[], s32[]) tuple(%last, %steps)
}
"""
)


def test_conditional_inside_a_loop(run_hlo):
    last, steps = run_hlo(COND_IN_LOOP, np.int32(27))
    assert (last, steps) == (1, collatz_steps(27))
    for n in (1, 6, 31):
        last, steps = check_run(run_hlo.compiled, COND_IN_LOOP, [np.int32(n)])
        assert (last, steps) == (1, collatz_steps(n))


def test_driver_compiles_and_runs_an_hlo_file_with_loops(tmp_path, rng):
    """The whole path a user takes: HLO text file -> aotc.compile -> load -> call."""
    import aotc

    path = tmp_path / "rnn.hlo"
    path.write_text(RNN)
    compiled = aotc.compile(path, name="rnn")
    h = rng.standard_normal((4, 8)).astype(np.float32)
    w = (rng.standard_normal((8, 8)) / 3).astype(np.float32)
    got = compiled.load()(h, w)
    want = evaluate(parse_module(RNN), [h, w])
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    assert compiled.plan.arena_bytes >= max(n.block.size for n in compiled.plan.nested.values())
