"""while, conditional and call in the IR: XLA text round trip, builder, verifier errors,
the call inliner (evaluated before and after on random inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.errors import ShapeError
from aotc.frontends.hlo import parse_hlo
from aotc.ir import ComputationBuilder, Direction, DType, Module, Op, Shape, TupleShape
from aotc.ir.evaluate import evaluate
from aotc.ir.inline import inline_calls
from aotc.ir.text import parse_module, print_module
from aotc.ir.verify import VerifyError, verify

S32, F32, PRED = DType.S32, DType.F32, DType.PRED

# as jax.jit(...).lower(...).as_hlo_text() writes them: no sigils or operand shapes
JAX_STYLE = """HloModule jit_f, entry_computation_layout={(f32[3]{0}, s32[])->(f32[3]{0})}

region_0.1 {
  arg_tuple.2 = (s32[], f32[3]{0}) parameter(0)
  get-tuple-element.3 = s32[] get-tuple-element(arg_tuple.2), index=0
  constant.5 = s32[] constant(1)
  add.6 = s32[] add(get-tuple-element.3, constant.5)
  get-tuple-element.4 = f32[3]{0} get-tuple-element(arg_tuple.2), index=1
  sine.7 = f32[3]{0} sine(get-tuple-element.4)
  ROOT tuple.8 = (s32[], f32[3]{0}) tuple(add.6, sine.7)
}

region_1.9 {
  arg_tuple.10 = (s32[], f32[3]{0}) parameter(0)
  get-tuple-element.11 = s32[] get-tuple-element(arg_tuple.10), index=0
  constant.13 = s32[] constant(3)
  ROOT compare.14 = pred[] compare(get-tuple-element.11, constant.13), direction=LT
}

branch_a {
  p.1 = f32[3]{0} parameter(0)
  ROOT n.1 = f32[3]{0} negate(p.1)
}

branch_b {
  p.2 = f32[3]{0} parameter(0)
  ROOT e.1 = f32[3]{0} exponential(p.2)
}

branch_c {
  ROOT p.3 = f32[3]{0} parameter(0)
}

helper {
  h.1 = f32[3]{0} parameter(0)
  ROOT h.2 = f32[3]{0} add(h.1, h.1)
}

ENTRY main.20 {
  Arg_0.1 = f32[3]{0} parameter(0)
  Arg_1.2 = s32[] parameter(1)
  constant.3 = s32[] constant(0)
  tuple.4 = (s32[], f32[3]{0}) tuple(constant.3, Arg_0.1)
  while.15 = (s32[], f32[3]{0}) while(tuple.4), condition=region_1.9, body=region_0.1, backend_config={"known_trip_count":{"n":"3"}}
  get-tuple-element.16 = f32[3]{0} get-tuple-element(while.15), index=1
  gt.1 = pred[] compare(Arg_1.2, constant.3), direction=GT
  cond.1 = f32[3]{0} conditional(gt.1, get-tuple-element.16, Arg_0.1), true_computation=branch_a, false_computation=branch_b
  cond.2 = f32[3]{0} conditional(Arg_1.2, cond.1, Arg_0.1, cond.1), branch_computations={branch_a, branch_b, branch_c}
  call.1 = f32[3]{0} call(cond.2), to_apply=helper
  ROOT tuple.21 = (f32[3]{0}) tuple(call.1)
}
"""


def test_xla_text_parses_prints_in_xla_syntax_and_round_trips():
    module = parse_hlo(JAX_STYLE)
    verify(module)
    text = print_module(module)
    assert print_module(parse_module(text)) == text
    lines = {line.split(" = ")[0].strip(): line for line in text.splitlines() if " = " in line}
    assert lines["%while.15"].endswith("condition=%region_1.9, body=%region_0.1")
    assert lines["%cond.1"].endswith("true_computation=%branch_a, false_computation=%branch_b")
    assert lines["%cond.2"].endswith("branch_computations={%branch_a, %branch_b, %branch_c}")
    assert lines["%call.1"].endswith("to_apply=%helper")
    # callees before callers, as XLA prints them
    order = [c.name for c in module.computations_in_call_order()]
    assert order.index("region_1.9") < order.index("main.20")


def test_evaluates_as_xla_defines():
    module = parse_hlo(JAX_STYLE)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    looped = np.sin(np.sin(np.sin(x)))
    for k in (-3, 0, 1, 2, 7):
        (got,) = evaluate(module, [x, np.int32(k)])
        first = -looped if k > 0 else np.exp(x)
        chosen = {0: -first, 1: np.exp(x)}.get(k, first)  # out of range: the last branch
        np.testing.assert_allclose(got, chosen + chosen, rtol=1e-6)


def test_program_computations_follow_control_flow_only():
    module = parse_hlo(JAX_STYLE)
    names = [c.name for c in module.program_computations()]
    assert names[-1] == "main.20"
    assert set(names) == {
        "main.20",
        "region_0.1",
        "region_1.9",
        "branch_a",
        "branch_b",
        "branch_c",
        "helper",
    }
    reduce_module = parse_module("""HloModule r
    add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
    ENTRY e { x = f32[4] parameter(0)  z = f32[] constant(0)
              ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add }""")
    assert [c.name for c in reduce_module.program_computations()] == ["e"]


def counter_module(limit: int = 5) -> Module:
    """A builder-made loop: (i, v) -> (i + 1, v * 2) while i < limit."""
    module = Module("loop")
    state = TupleShape((Shape(S32, ()), Shape(F32, (2,))))
    cb = ComputationBuilder(module, "cond")
    cp = cb.parameter(0, state, "s")
    cond = cb.build(cb.compare(cb.get_tuple_element(cp, 0), cb.scalar(limit, S32), Direction.LT))
    bb = ComputationBuilder(module, "body")
    bp = bb.parameter(0, state, "s")
    i, v = bb.get_tuple_element(bp, 0), bb.get_tuple_element(bp, 1)
    body = bb.build(bb.tuple([bb.binary(Op.ADD, i, bb.scalar(1, S32)), bb.binary(Op.ADD, v, v)]))
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (2,)), "x")
    loop = b.while_loop(cond, body, b.tuple([b.scalar(0, S32), x]))
    b.build(b.tuple([b.get_tuple_element(loop, 1)]), entry=True)
    return module


def test_builder_while_and_round_trip():
    module = counter_module()
    verify(module)
    (got,) = evaluate(module, [np.array([1.0, -0.5], np.float32)])
    np.testing.assert_array_equal(got, np.array([32.0, -16.0], np.float32))
    text = print_module(module)
    assert print_module(parse_module(text)) == text


def test_builder_checks_signatures():
    module = Module("bad")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (2,)), "x")
    cb = ComputationBuilder(module, "cond")
    cond = cb.build(
        cb.compare(
            cb.parameter(0, Shape(F32, (2,))), cb.parameter(1, Shape(F32, (2,))), Direction.LT
        )
    )
    nb = ComputationBuilder(module, "neg")
    neg = nb.build(nb.unary(Op.NEGATE, nb.parameter(0, Shape(F32, (2,)))))
    with pytest.raises(ShapeError, match="condition %cond must be"):
        b.while_loop(cond, neg, x)
    with pytest.raises(ShapeError, match="selector must be a pred"):
        b.conditional(x, [neg, neg], [x, x])
    flag = b.compare(b.scalar(1, S32), b.scalar(2, S32), Direction.LT)
    with pytest.raises(ShapeError, match="true_computation= and false_computation="):
        b.conditional(flag, [neg, neg, neg], [x, x, x])
    with pytest.raises(ShapeError, match="one operand per branch"):
        b.conditional(flag, [neg, neg], [x])
    with pytest.raises(ShapeError, match="callee %neg must be"):
        b.call(neg, [x, x])


def _verify_fails(text: str, match: str) -> None:
    module = parse_hlo(text)
    verify(module)  # valid before `_BREAKS[match]` breaks it
    broken = _BREAKS[match](module)
    with pytest.raises(VerifyError, match=match) as info:
        verify(broken)
    assert info.value.instruction is not None


def _break_body_result(module: Module) -> Module:
    body = module.computation("region_0.1")
    root = body.root
    body.root = root.operands[1]  # f32[3] instead of the (s32[], f32[3]) state
    return module


def _break_condition_result(module: Module) -> Module:
    cond = module.computation("region_1.9")
    cond.root = cond.root.operands[0]  # s32[] instead of pred[]
    return module


def _break_branch_operand(module: Module) -> Module:
    entry = module.entry
    c2 = next(i for i in entry.instructions if i.name == "cond.2")
    tuple4 = next(i for i in entry.instructions if i.name == "tuple.4")
    c2.operands = [*c2.operands[:2], tuple4, *c2.operands[3:]]
    return module


def _break_call_arity(module: Module) -> Module:
    call = next(i for i in module.entry.instructions if i.op is Op.CALL)
    call.operands = [*call.operands, call.operands[0]]
    return module


def _break_missing_body(module: Module) -> Module:
    loop = next(i for i in module.entry.instructions if i.op is Op.WHILE)
    loop.called = loop.called[:1]
    return module


_BREAKS = {
    "body %region_0.1 must be": _break_body_result,
    "condition %region_1.9 must be": _break_condition_result,
    "branch 1 %branch_b must be": _break_branch_operand,
    "callee %helper must be": _break_call_arity,
    "needs condition= and body=": _break_missing_body,
}


@pytest.mark.parametrize("match", list(_BREAKS))
def test_verifier_rejects_mismatched_signatures(match):
    _verify_fails(JAX_STYLE, match)


@pytest.mark.parametrize(
    "line, match",
    [
        ("w = f32[3]{0} while(x), condition=c", "needs condition= and body="),
        ("w = f32[3]{0} while(x), body=b", "needs condition= and body="),
        ("w = f32[3]{0} while(x)", "while needs condition= and body="),
        ("w = f32[3]{0} conditional(k, x, x)", "true_computation= and false_computation="),
        ("w = f32[3]{0} call(x)", "call needs to_apply="),
        ("w = f32[3]{0} while(x), condition=c, body=nowhere", "no computation %nowhere"),
    ],
)
def test_parser_errors_name_the_line(line, match):
    text = f"""HloModule m
c {{ p = f32[3] parameter(0)  ROOT t = pred[] constant(true) }}
b {{ p = f32[3] parameter(0)  ROOT n = f32[3] negate(p) }}
ENTRY e {{
  x = f32[3]{{0}} parameter(0)
  k = s32[] parameter(1)
  ROOT {line}
}}"""
    with pytest.raises(Exception, match=match) as info:
        parse_module(text)
    assert "line 7" in str(info.value)


# -- the call inliner ------------------------------------------------------------------

NESTED_CALLS = """HloModule calls
%square (v: f32[3]) -> f32[3] {
  %v = f32[3]{0} parameter(0)
  ROOT %m = f32[3]{0} multiply(%v, %v)
}
%pair (a: f32[3], b: f32[3]) -> (f32[3], f32[3]) {
  %a = f32[3]{0} parameter(0)
  %b = f32[3]{0} parameter(1)
  %sq = f32[3]{0} call(%a), to_apply=%square
  %dead = f32[3]{0} negate(%b)
  %s = f32[3]{0} subtract(%sq, %b)
  ROOT %t = (f32[3]{0}, f32[3]{0}) tuple(%s, %b)
}
%first (a: f32[3], b: f32[3]) -> f32[3] {
  %b = f32[3]{0} parameter(1)
  ROOT %a = f32[3]{0} parameter(0)
}
%body (v: f32[3]) -> f32[3] {
  %v = f32[3]{0} parameter(0)
  ROOT %sq = f32[3]{0} call(%v), to_apply=%square
}
%never (v: f32[3]) -> pred[] {
  %v = f32[3]{0} parameter(0)
  ROOT %f = pred[] constant(false)
}
ENTRY %main (x: f32[3], y: f32[3]) -> (f32[3], f32[3], f32[3], f32[3]) {
  %x = f32[3]{0} parameter(0)
  %y = f32[3]{0} parameter(1)
  %c1 = (f32[3]{0}, f32[3]{0}) call(%x, %y), to_apply=%pair
  %c2 = (f32[3]{0}, f32[3]{0}) call(%y, %x), to_apply=%pair
  %f = f32[3]{0} call(%y, %x), to_apply=%first
  %g0 = f32[3]{0} get-tuple-element(%c1), index=0
  %g1 = f32[3]{0} get-tuple-element(%c2), index=0
  %w = f32[3]{0} while(%g0), condition=%never, body=%body
  %s = f32[3]{0} call(%x), to_apply=%square
  ROOT %r = (f32[3]{0}, f32[3]{0}, f32[3]{0}, f32[3]{0}) tuple(%g1, %f, %w, %s)
}
"""


def test_inliner_replaces_every_call():
    module = parse_module(NESTED_CALLS)
    reference = parse_module(NESTED_CALLS)
    assert inline_calls(module)
    verify(module)
    ops = [i.op for c in module.computations for i in c.instructions]
    assert Op.CALL not in ops
    # callees without callers are gone; the while's computations stay
    names = {c.name for c in module.computations}
    assert names == {"main", "body", "never"}
    assert not inline_calls(module)  # nothing left: no change
    # a callee whose root is a parameter forwards the call's operand
    root = module.entry.root
    assert root.operands[1].name == "y"
    # dead callee instructions are not copied; names stay unique module-wide
    assert not any(i.op is Op.NEGATE for i in module.entry.instructions)
    rng = np.random.default_rng(0)
    for _ in range(3):
        args = [rng.standard_normal(3).astype(np.float32) for _ in range(2)]
        for want, got in zip(evaluate(reference, args), evaluate(module, args)):
            np.testing.assert_array_equal(got, want)
    text = print_module(module)
    assert print_module(parse_module(text)) == text
