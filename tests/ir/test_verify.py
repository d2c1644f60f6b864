"""The verifier: a valid module passes, and every rule has a case that trips it."""

from __future__ import annotations

import pytest

from aotc.errors import AotcError
from aotc.ir import (
    Computation,
    ComputationBuilder,
    Direction,
    DotDims,
    DType,
    FusionKind,
    Instruction,
    Module,
    Op,
    ScatterDims,
    Shape,
    SliceSpec,
    scalar_reducer,
)
from aotc.ir.builder import comparator
from aotc.ir.text import parse_module, print_instruction
from aotc.ir.verify import VerifyError, verify

F32, S32 = DType.F32, DType.S32


def valid_module() -> tuple[Module, dict[str, Instruction]]:
    m = Module("valid")
    add = scalar_reducer(m, Op.ADD, F32)
    b = ComputationBuilder(m, "main")
    x = b.parameter(0, Shape(F32, (2, 3)), "a")
    y = b.parameter(1, Shape(F32, (2, 3)), "b")
    s = b.binary(Op.ADD, x, y)
    zero = b.scalar(0.0, F32)
    r = b.reduce(s, zero, [1], add)
    sl = b.slice(s, [0, 0], [1, 3])
    d = b.dot(x, y, DotDims((), (), (1,), (1,)))
    c = b.compare(x, y, Direction.LT)
    root = b.tuple([r, sl, d, c])
    b.build(root, entry=True)
    named = {
        "a": x,
        "b": y,
        "sum": s,
        "zero": zero,
        "reduce": r,
        "slice": sl,
        "dot": d,
        "compare": c,
        "root": root,
    }
    return m, named


def fails(module: Module, instr: Instruction | None, match: str) -> VerifyError:
    """verify raises, saying `match` and quoting the offending instruction's line."""
    with pytest.raises(VerifyError, match=match) as info:
        verify(module)
    if instr is not None:
        assert print_instruction(instr) in str(info.value)
        assert info.value.instruction is instr
    return info.value


def test_valid_module_passes():
    m, _ = valid_module()
    assert verify(m) is None


def test_verify_error_is_an_aotc_error():
    assert issubclass(VerifyError, AotcError)


def test_parsed_module_passes():
    m = parse_module("""
    HloModule m
    max { x = f32[] parameter(0)  y = f32[] parameter(1)  ROOT z = f32[] maximum(x, y) }
    ENTRY e {
      p = f32[4] parameter(0)
      ROOT r = f32[] reduce(p, f32[] constant(-inf)), dimensions={0}, to_apply=max
    }""")
    verify(m)


def test_entry_must_be_set_and_belong():
    m, _ = valid_module()
    m.entry = None
    fails(m, None, "no entry")
    m, _ = valid_module()
    m.entry = Computation("stray")
    fails(m, None, "not one of the module's computations")


def test_root_must_be_set_and_in_the_computation():
    m, _ = valid_module()
    m.entry.root = None
    fails(m, None, "has no root")
    m, _ = valid_module()
    stray = m.computation("add_f32").root
    m.entry.root = stray
    fails(m, stray, "root is not an instruction of the computation")


def test_operands_defined_before_use():
    m, n = valid_module()
    instrs = m.entry.instructions
    i, j = instrs.index(n["sum"]), instrs.index(n["reduce"])
    instrs[i], instrs[j] = instrs[j], instrs[i]
    fails(m, n["reduce"], "operand %add.* is not defined before its use")


def test_operand_from_another_computation():
    m, n = valid_module()
    foreign = m.computation("add_f32").instructions[0]
    n["sum"].operands = [foreign, foreign]
    fails(m, n["sum"], f"operand %{foreign.name} is not defined before its use")


def test_names_unique_module_wide():
    m, n = valid_module()
    n["slice"].name = "x"  # also the reducer's parameter
    fails(m, n["slice"], "name %x is also used in %add_f32")
    m, n = valid_module()
    n["dot"].name = n["slice"].name
    fails(m, n["dot"], "is also used in %main")


def test_arity():
    m, n = valid_module()
    n["sum"].operands = [*n["sum"].operands, n["a"]]
    fails(m, n["sum"], "add takes 2 operands, has 3")


def test_parameters_numbered_without_gaps():
    m, n = valid_module()
    n["b"].index = 2
    fails(m, n["b"], r"parameters must be numbered 0\.\.1")
    m, n = valid_module()
    n["b"].index = 0
    fails(m, n["b"], "parameter number 0 is used twice")


def test_shape_equals_inferred_shape():
    m, n = valid_module()
    n["sum"].shape = Shape(F32, (3, 2))
    fails(m, n["sum"], r"shape is f32\[3,2\].*but add gives f32\[2,3\]")


def test_shape_rule_errors_become_verify_errors():
    m, n = valid_module()
    n["compare"].operands = [n["a"], n["slice"]]
    fails(m, n["compare"], "operands must have equal shapes")
    m, n = valid_module()
    n["dot"].dot = DotDims((), (), (5,), (1,))  # out of range: the rule says which
    fails(m, n["dot"], r"lhs dims \[5\] repeated or not below 2")


def test_required_attributes():
    cases = [
        ("slice", "slice", None, "slice needs slice="),
        ("dot", "dot", None, "dot needs lhs_contracting_dims="),
        ("compare", "direction", None, "compare needs direction="),
        ("reduce", "called", (), "reduce needs to_apply="),
        ("reduce", "dimensions", None, "reduce needs dimensions="),
        ("a", "index", None, "parameter needs a parameter number"),
    ]
    for key, field, value, match in cases:
        m, n = valid_module()
        setattr(n[key], field, value)
        fails(m, n[key], match)


def test_called_computation_belongs_to_module():
    m, n = valid_module()
    other = Module("other")
    n["reduce"].called = (scalar_reducer(other, Op.ADD, F32),)
    fails(m, n["reduce"], "calls %add_f32, not in the module")


def test_reducer_signature():
    m, n = valid_module()
    n["reduce"].called = (scalar_reducer(m, Op.ADD, S32),)
    fails(m, n["reduce"], r"reducer %add_s32 must be \(f32\[\], f32\[\]\) -> f32\[\]")
    m, n = valid_module()
    b = ComputationBuilder(m, "vector_add")
    p = [b.parameter(k, Shape(F32, (2,))) for k in range(2)]
    n["reduce"].called = (b.build(b.binary(Op.ADD, *p)),)
    fails(m, n["reduce"], r"is \(f32\[2\]\{0\}, f32\[2\]\{0\}\) -> f32\[2\]")
    m, n = valid_module()
    b = ComputationBuilder(m, "three")
    p = [b.parameter(k, Shape(F32, ())) for k in range(3)]
    n["reduce"].called = (b.build(b.binary(Op.ADD, p[0], p[2])),)
    fails(m, n["reduce"], "reducer %three must be")


def test_variadic_reducer_returns_a_tuple():
    m = Module("argmax")
    rb = ComputationBuilder(m, "pick")
    a, ai = rb.parameter(0, Shape(F32, ())), rb.parameter(1, Shape(S32, ()))
    c, ci = rb.parameter(2, Shape(F32, ())), rb.parameter(3, Shape(S32, ()))
    good = rb.build(rb.tuple([rb.binary(Op.MAXIMUM, a, c), rb.binary(Op.MINIMUM, ai, ci)]))
    bb = ComputationBuilder(m, "only_max")
    a2, _, c2, _ = (bb.parameter(k, Shape(F32 if k % 2 == 0 else S32, ())) for k in range(4))
    bad = bb.build(bb.binary(Op.MAXIMUM, a2, c2))
    b = ComputationBuilder(m, "main")
    x, i = b.parameter(0, Shape(F32, (5,))), b.parameter(1, Shape(S32, (5,)))
    inits = [b.scalar(0.0, F32), b.scalar(0, S32)]
    r = b.add(Op.REDUCE, [x, i, *inits], dimensions=(0,), called=(good,))
    b.build(b.tuple([r]), entry=True)
    verify(m)
    r.called = (bad,)
    fails(m, r, r"-> \(f32\[\], s32\[\]\), is .* -> f32\[\]")


def test_comparator_signature():
    m = Module("sorting")
    b = ComputationBuilder(m, "main")
    x, i = b.parameter(0, Shape(F32, (5,))), b.parameter(1, Shape(S32, (5,)))
    s = b.sort([x, i], 0, comparator(m, F32, Direction.LT, [S32]))
    b.build(s, entry=True)
    verify(m)
    s.called = (comparator(m, F32, Direction.LT),)
    fails(
        m,
        s,
        r"comparator %compare_lt_f32 must be \(f32\[\], f32\[\], s32\[\], s32\[\]\) "
        r"-> pred\[\], is \(f32\[\], f32\[\]\) -> pred\[\]",
    )
    s.called = (scalar_reducer(m, Op.ADD, F32),)
    fails(m, s, r"comparator %add_f32 must be .* -> pred\[\]")


def test_combiner_signature():
    m = Module("scattering")
    b = ComputationBuilder(m, "main")
    x, i = b.parameter(0, Shape(F32, (5,))), b.parameter(1, Shape(S32, (2, 1)))
    u = b.parameter(2, Shape(F32, (2,)))
    s = b.scatter(x, i, u, ScatterDims((), (0,), (0,), 1), scalar_reducer(m, Op.ADD, F32))
    b.build(s, entry=True)
    verify(m)
    s.called = (scalar_reducer(m, Op.ADD, S32),)
    fails(
        m,
        s,
        r"combiner %add_s32 must be \(f32\[\], f32\[\]\) -> f32\[\], "
        r"is \(s32\[\], s32\[\]\) -> s32\[\]",
    )


def test_call_cycles():
    m, _ = valid_module()
    reducer = m.computation("add_f32")
    x, y = reducer.instructions[:2]
    loop = Instruction(
        Op.FUSION,
        Shape(F32, ()),
        [x, y],
        name="loop",
        called=(reducer,),
        fusion_kind=FusionKind.LOOP,
    )
    reducer.instructions.insert(2, loop)
    fails(m, loop, "call cycle through %add_f32")


def test_slice_spec_of_wrong_rank():
    m, n = valid_module()
    n["slice"].slice = SliceSpec((0,), (1,), (1,))
    fails(m, n["slice"], "slice= must cover every dim")
