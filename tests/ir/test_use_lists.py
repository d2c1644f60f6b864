"""Use-lists: every instruction's `users` stays right as operands change and rewrites run,
and the verifier catches a use-list that no longer agrees with the operands."""

from __future__ import annotations

import pytest

from aotc.ir import ComputationBuilder, DType, Module, Op, Shape
from aotc.ir.extents import Extent
from aotc.ir.verify import VerifyError, verify

F32 = DType.F32
VECTOR = Shape(F32, (4,))


def _diamond():
    """x -> a = -x, b = |x| -> c = a + b -> root = c * a."""
    m = Module("m")
    b = ComputationBuilder(m, "main")
    x = b.parameter(0, VECTOR, "x")
    a = b.unary(Op.NEGATE, x)
    absolute = b.unary(Op.ABS, x)
    c = b.binary(Op.ADD, a, absolute)
    root = b.binary(Op.MULTIPLY, c, a)
    comp = b.build(root, entry=True)
    return m, b, comp, {"x": x, "a": a, "abs": absolute, "c": c, "root": root}


def test_users_once_per_operand_read():
    m, b, _, n = _diamond()
    assert n["x"].users == [n["a"], n["abs"]]
    assert n["a"].users == [n["c"], n["root"]]
    square = b.binary(Op.MULTIPLY, n["c"], n["c"])
    assert n["c"].users == [n["root"], square, square]
    verify(m)


def test_assigning_operands_moves_the_reads():
    m, _, _, n = _diamond()
    n["c"].operands = [n["abs"], n["abs"]]
    assert n["a"].users == [n["root"]]
    assert n["abs"].users == [n["c"], n["c"]]
    verify(m)


def test_replace_all_uses_rewrites_the_readers_and_the_root():
    m, b, comp, n = _diamond()
    y = b.unary(Op.EXP, n["a"])  # a replacement reading the replaced value
    comp.replace_all_uses(n["a"], y)
    assert n["c"].operands == [y, n["abs"]]
    assert n["root"].operands == [n["c"], y]
    assert n["a"].users == [y]  # the replacement keeps its own read
    assert y.users == [n["c"], n["root"]]
    comp.replace_all_uses(n["root"], n["c"])
    assert comp.root is n["c"]
    comp.sort_topologically()
    verify(m)


def test_replace_uses_in_one_batch():
    m, b, comp, n = _diamond()
    zero = b.broadcast(b.scalar(0.0, F32), [], (4,))
    comp.replace_uses({n["a"]: zero, n["abs"]: zero})
    assert n["c"].operands == [zero, zero]
    assert zero.users == [n["c"], n["c"], n["root"]]
    assert n["a"].users == [] and n["abs"].users == []
    comp.sort_topologically()
    verify(m)


def test_only_a_replacement_read_nowhere_takes_the_extents():
    _, b, comp, n = _diamond()
    n["a"].extents = n["abs"].extents = (Extent("constant", 2),)
    fresh = b.unary(Op.NEGATE, n["x"])
    comp.replace_all_uses(n["a"], fresh)
    assert fresh.extents == n["a"].extents
    read = b.unary(Op.ABS, n["x"])
    b.unary(Op.EXP, read)
    comp.replace_all_uses(n["abs"], read)  # what its reader reads of it is not known
    assert read.extents is None


def test_dropped_instructions_leave_the_use_lists():
    m, _, comp, n = _diamond()
    comp.root = n["abs"]
    assert comp.remove_dead()
    assert n["x"].users == [n["abs"]]
    assert n["a"].operands == []
    verify(m)


def test_changing_operands_in_place_is_refused():
    _, _, _, n = _diamond()
    with pytest.raises(TypeError, match="assign instr.operands"):
        n["c"].operands[0] = n["x"]
    with pytest.raises(TypeError, match="assign instr.operands"):
        n["c"].operands.append(n["x"])
    assert n["c"].operands == [n["a"], n["abs"]]


def test_verifier_checks_use_lists_agree_with_operands():
    m, _, _, n = _diamond()
    n["x"]._users.pop(n["abs"])  # as a pass that bypassed the operands' assignment would
    with pytest.raises(VerifyError, match="whose use-list misses it"):
        verify(m)
    m, _, _, n = _diamond()
    n["x"]._users[n["root"]] = 1
    with pytest.raises(VerifyError, match="which does not read it"):
        verify(m)
