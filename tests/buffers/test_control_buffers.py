"""Buffer plans of while and conditional: nested plans share one block of the arena live
at the instruction, body results go into the state in place where safe, moved state
arrays are staged.  Plans are checked by running them: a byte-level simulator executes
the schedule on the plan's slices (with the evaluator computing each instruction, and a
garbage-filled arena) and must give the evaluator's results."""

from __future__ import annotations

import random

import numpy as np
import pytest

from aotc.buffers import BufferKind, BufferPlan, Slice, assign_buffers
from aotc.buffers.liveness import array_indices
from aotc.errors import UnsupportedError
from aotc.ir import (
    ComputationBuilder,
    Direction,
    DType,
    Module,
    Op,
    Shape,
    TupleShape,
    scalar_reducer,
)
from aotc.ir.evaluate import EVAL_RULES, branch_index, evaluate
from aotc.ir.text import parse_module
from aotc.ir.types import cast_array, from_storage, to_storage
from aotc.passes.pipeline import make_pipeline

F32, S32 = DType.F32, DType.S32


# -- a simulator of compiled code, on the plan's bytes ----------------------------------


class Memory:
    def __init__(self, plan: BufferPlan, module: Module, inputs):
        self.buffers = {
            (BufferKind.ARENA, 0): np.full(max(plan.arena_bytes, 1), 0xAB, np.uint8),
            (BufferKind.CONSTANT, 0): np.frombuffer(bytes(plan.weights), np.uint8).copy(),
        }
        for k, (param, x) in enumerate(zip(module.entry.parameters, inputs)):
            raw = to_storage(np.asarray(x).reshape(-1), param.shape.dtype).view(np.uint8)
            self.buffers[(BufferKind.PARAMETER, k)] = raw.copy()
        root = module.entry.root
        for k, out in enumerate(root.operands if root.op is Op.TUPLE else [root]):
            self.buffers[(BufferKind.OUTPUT, k)] = np.full(out.shape.nbytes, 0xCD, np.uint8)

    def bytes(self, where) -> np.ndarray:
        buffer = self.buffers[(where.kind, where.index)]
        assert where.offset + where.size <= buffer.size, where
        return buffer[where.offset : where.offset + where.size]

    def read(self, where, shape: Shape) -> np.ndarray:
        raw = self.bytes(where).copy().view(shape.dtype.storage)
        return from_storage(raw, shape.dtype).reshape(shape.dims)

    def write(self, where, shape: Shape, value) -> None:
        raw = to_storage(cast_array(np.asarray(value), shape.dtype), shape.dtype)
        self.bytes(where)[:] = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)

    def copy(self, copies) -> None:
        for source, destination in copies:
            self.bytes(destination)[:] = self.bytes(source).copy()


def _value(memory: Memory, plan: BufferPlan, instr):
    """An instruction's (possibly tuple) value, read from its slices."""
    leaves = {
        index: memory.read(plan.slice_of(instr, index), shape)
        for index, shape in array_indices(instr.shape)
    }

    def build(shape, prefix):
        if isinstance(shape, TupleShape):
            return tuple(build(e, prefix + (k,)) for k, e in enumerate(shape.elements))
        return leaves[prefix]

    return build(instr.shape, ())


def run_frame(memory: Memory, plan: BufferPlan) -> None:
    """Run a computation's schedule as the backend does, kernel by kernel."""
    for instr in plan.schedule:
        if not plan.needs_code(instr):  # leaves, tuples, views, concatenates done in place
            continue
        if instr.op is Op.WHILE:
            nested = plan.nested[instr.name]
            test, body = nested.plans
            root = instr.called[0].root
            memory.copy(nested.init_copies)
            while True:
                run_frame(memory, test)
                if not memory.read(test.slice_of(root), root.shape):
                    break
                run_frame(memory, body)
                memory.copy(body.output_copies)
        elif instr.op is Op.CONDITIONAL:
            nested = plan.nested[instr.name]
            k = branch_index(_value(memory, plan, instr.operands[0]), len(instr.called))
            run_frame(memory, nested.plans[k])
            memory.copy(nested.plans[k].output_copies)
        else:
            operands = [_value(memory, plan, o) for o in instr.operands]
            result = EVAL_RULES[instr.op](instr, operands)
            results = result if isinstance(instr.shape, TupleShape) else (result,)
            for (index, shape), value in zip(array_indices(instr.shape), results):
                memory.write(plan.slice_of(instr, index), shape, value)


def simulate(module: Module, plan: BufferPlan, inputs) -> list[np.ndarray]:
    """The entry's outputs computed on the plan's bytes."""
    memory = Memory(plan, module, inputs)
    run_frame(memory, plan)
    memory.copy(plan.output_copies)
    root = module.entry.root
    outs = root.operands if root.op is Op.TUPLE else [root]
    return [
        memory.read(Slice(BufferKind.OUTPUT, k, 0, o.shape.nbytes), o.shape)
        for k, o in enumerate(outs)
    ]


# -- plan invariants --------------------------------------------------------------------


def check_disjoint(plan: BufferPlan) -> None:
    """Buffers alive at once never share bytes, in every frame; a nested plan's arena
    buffers lie inside its block and apart from every parent buffer alive with it."""
    for i, a in enumerate(plan.buffers):
        assert a.slice.offset % plan.alignment == 0
        for b in plan.buffers[i + 1 :]:
            if a.start <= b.end and b.start <= a.end:
                assert not a.slice.overlaps(b.slice), (a, b)
    times = {instr.name: t for t, instr in enumerate(plan.schedule)}
    for name, nested in plan.nested.items():
        t = times[name]
        alive = [b for b in plan.buffers if b.start <= t <= b.end and b.slice != nested.block]
        for child in nested.plans:
            for buffer in child.buffers:
                s = buffer.slice
                assert s.kind is BufferKind.ARENA
                block = nested.block
                assert block.offset <= s.offset and s.offset + s.size <= block.offset + block.size
                assert not any(s.overlaps(p.slice) for p in alive), (name, buffer)
            check_disjoint(child)
    assert plan.lower_bound <= plan.arena_bytes


# -- random loops -----------------------------------------------------------------------


def random_loop_module(seed: int) -> Module:
    """A while over (i, a, b, c): its body computes random elementwise and other values
    (reverse, a reduction, a conditional) and returns a random pick of them (state arrays
    moved, swapped, duplicated, unchanged); the entry may reuse an init value after the
    loop and return one value twice."""
    rng = random.Random(seed)
    module = Module(f"loop{seed}")
    vec = Shape(F32, (8,))
    state = TupleShape((Shape(S32, ()), vec, vec, vec))

    cb = ComputationBuilder(module, "cond")
    count = cb.get_tuple_element(cb.parameter(0, state, "s"), 0)
    trips = cb.scalar(rng.randint(0, 4), S32)
    cond = cb.build(cb.compare(count, trips, Direction.LT))

    bb = ComputationBuilder(module, "body")
    param = bb.parameter(0, state, "s")
    i = bb.get_tuple_element(param, 0)
    values = [bb.get_tuple_element(param, k) for k in (1, 2, 3)]
    for _ in range(rng.randint(0, 6)):
        kind = rng.choice(["unary", "binary", "binary", "reverse", "sum", "branch"])
        x, y = rng.choice(values), rng.choice(values)
        if kind == "unary":
            values.append(bb.unary(rng.choice([Op.TANH, Op.NEGATE, Op.SIN]), x))
        elif kind == "binary":
            op = rng.choice([Op.ADD, Op.MULTIPLY, Op.MAXIMUM, Op.SUBTRACT])
            values.append(bb.binary(op, x, y))
        elif kind == "reverse":  # reads other elements than it writes: never in place
            values.append(bb.reverse(x, [0]))
        elif kind == "sum":
            add = scalar_reducer(module, Op.ADD, F32)
            total = bb.unary(Op.TANH, bb.reduce(x, bb.scalar(0.0, F32), [0], add))
            values.append(bb.broadcast(total, [], [8]))
        else:
            nb = ComputationBuilder(module, "negate_branch")
            negate = nb.build(nb.unary(Op.NEGATE, nb.parameter(0, vec, "v")))
            db = ComputationBuilder(module, "sum_branch")
            pair = db.parameter(0, TupleShape((vec, vec)), "pair")
            summed = db.build(
                db.binary(Op.ADD, db.get_tuple_element(pair, 0), db.get_tuple_element(pair, 1))
            )
            parity = bb.binary(Op.REMAINDER, i, bb.scalar(2, S32))
            odd = bb.compare(parity, bb.scalar(1, S32), Direction.EQ)
            values.append(bb.conditional(odd, [negate, summed], [x, bb.tuple([x, y])]))
    picks = [rng.choice(values) for _ in range(3)]
    body = bb.build(bb.tuple([bb.binary(Op.ADD, i, bb.scalar(1, S32)), *picks]))

    b = ComputationBuilder(module, "main")
    x, y = b.parameter(0, vec, "x"), b.parameter(1, vec, "y")
    t = b.unary(Op.TANH, x)  # an arena value: the state takes it over unless used later
    loop = b.while_loop(cond, body, b.tuple([b.scalar(0, S32), t, y, rng.choice([x, t, y])]))
    outs = [b.get_tuple_element(loop, k) for k in (1, 2, 3)]
    if rng.random() < 0.5:
        outs.append(b.binary(Op.ADD, t, x))
    if rng.random() < 0.5:
        outs.append(outs[0])
    b.build(b.tuple(outs), entry=True)
    return module


def _inputs(seed: int, size: int = 8):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size).astype(np.float32) for _ in range(2)]


@pytest.mark.parametrize("seed", range(40))
def test_random_loops_run_correctly_on_their_plans(seed):
    module = random_loop_module(seed)
    inputs = _inputs(seed)
    want = evaluate(module, inputs)
    plan = assign_buffers(module)
    check_disjoint(plan)
    for got, w in zip(simulate(module, plan, inputs), want, strict=True):
        np.testing.assert_array_equal(got, w)
    make_pipeline(2, verify=True).run(module)  # fused bodies
    plan = assign_buffers(module)
    check_disjoint(plan)
    for got, w in zip(simulate(module, plan, inputs), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-7)


# -- what the plans look like -----------------------------------------------------------

COUNTER = """HloModule counter
%cond (s: (s32[], f32[64], f32[64])) -> pred[] {
  %s = (s32[], f32[64]{0}, f32[64]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (s: (s32[], f32[64], f32[64])) -> (s32[], f32[64], f32[64]) {
  %s = (s32[], f32[64]{0}, f32[64]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %a = f32[64]{0} get-tuple-element(%s), index=1
  %b = f32[64]{0} get-tuple-element(%s), index=2
  %r = f32[64]{0} reverse(%a), dimensions={0}
  %a2 = f32[64]{0} add(%r, %b)
  ROOT %t = (s32[], f32[64]{0}, f32[64]{0}) tuple(%i2, %b, %a2)
}
ENTRY %main (x: f32[64], y: f32[64]) -> (f32[64], f32[64]) {
  %x = f32[64]{0} parameter(0)
  %y = f32[64]{0} parameter(1)
  %zero = s32[] constant(0)
  %e = f32[64]{0} exponential(%x)
  %init = (s32[], f32[64]{0}, f32[64]{0}) tuple(%zero, %e, %y)
  %w = (s32[], f32[64]{0}, f32[64]{0}) while(%init), condition=%cond, body=%body
  %a = f32[64]{0} get-tuple-element(%w), index=1
  %b = f32[64]{0} get-tuple-element(%w), index=2
  ROOT %out = (f32[64]{0}, f32[64]{0}) tuple(%a, %b)
}
"""


def test_loop_plan_in_place_results_staged_moves_and_one_block():
    module = parse_module(COUNTER)
    plan = assign_buffers(module)
    check_disjoint(plan)
    loop = next(i for i in plan.schedule if i.op is Op.WHILE)
    nested = plan.nested[loop.name]
    test, body = nested.plans
    state = [plan.slice_of(loop, (k,)) for k in range(3)]
    # the state arrays returned by the entry live in its output buffers
    assert [s.kind for s in state[1:]] == [BufferKind.OUTPUT, BufferKind.OUTPUT]
    # init: e dies at the loop, so the state took its buffer over; y is an input: copied
    zero = next(i for i in plan.schedule if i.name == "zero")
    assert nested.init_copies == [
        (plan.slice_of(zero), state[0]),
        (plan.slice_of(module.entry.parameters[1]), state[2]),
    ]
    assert plan.slice_of(next(i for i in plan.schedule if i.name == "e")) == state[1]
    # the counter is computed in the state itself; a2 = reverse(a) + b is not (state b is
    # moved to slot 1, so read after the body), it is copied
    body_root = loop.called[1].root
    counter = body.slice_of(body_root.operands[0])
    assert counter == state[0]
    destinations = [d for _, d in body.output_copies]
    assert state[0] not in destinations
    # slot 1 takes state b, which slot 2's copy overwrites: staged through a temporary
    staged = [b for b in body.buffers if b.name.endswith(".staged")]
    assert len(staged) == 1
    assert body.output_copies[0] == (state[2], staged[0].slice)
    assert body.output_copies[-1] == (staged[0].slice, state[1])
    # condition and body share one block, live only at the loop
    block = next(b for b in plan.buffers if b.name == f"{loop.name}.nested")
    assert block.start == block.end == plan.schedule.index(loop)
    assert block.slice == nested.block
    assert nested.block.size == max(test.arena_bytes, body.arena_bytes)
    text = plan.to_text()
    assert f"{loop.name}: block" in text and "%body:" in text and "%cond:" in text
    x, y = _inputs(3, 64)
    want = evaluate(module, [x, y])
    for got, w in zip(simulate(module, plan, [x, y]), want):
        np.testing.assert_array_equal(got, w)


def test_conditional_branches_share_a_block_and_write_the_result():
    text = """HloModule c
    %big (v: f32[256]) -> f32[256] {
      %v = f32[256]{0} parameter(0)
      %e = f32[256]{0} exponential(%v)
      %r = f32[256]{0} reverse(%e), dimensions={0}
      ROOT %s = f32[256]{0} add(%r, %v)
    }
    %small (v: f32[256]) -> f32[256] {
      %v = f32[256]{0} parameter(0)
      ROOT %n = f32[256]{0} negate(%v)
    }
    %same (v: f32[256]) -> f32[256] {
      ROOT %v = f32[256]{0} parameter(0)
    }
    ENTRY %main (k: s32[], x: f32[256]) -> (f32[256]) {
      %k = s32[] parameter(0)
      %x = f32[256]{0} parameter(1)
      %c = f32[256]{0} conditional(%k, %x, %x, %x), branch_computations={%big, %small, %same}
      %d = f32[256]{0} sine(%c)
      ROOT %out = (f32[256]{0}) tuple(%d)
    }"""
    module = parse_module(text)
    plan = assign_buffers(module)
    check_disjoint(plan)
    cond = next(i for i in plan.schedule if i.op is Op.CONDITIONAL)
    nested = plan.nested[cond.name]
    big, small, same = nested.plans
    assert nested.block.size == big.arena_bytes == 1024  # exp's buffer; the rest in place
    assert small.arena_bytes == same.arena_bytes == 0
    result = plan.slice_of(cond)
    assert small.slice_of(cond.called[1].root) == result and not small.output_copies
    assert same.output_copies == [(plan.slice_of(cond.operands[3]), result)]
    assert plan.lower_bound <= plan.arena_bytes <= plan.naive_total
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    for k in (-1, 0, 1, 2, 5):
        (want,) = evaluate(module, [np.int32(k), x])
        (got,) = simulate(module, plan, [np.int32(k), x])
        np.testing.assert_array_equal(got, want)


def test_calls_must_be_inlined_first():
    module = parse_module("""HloModule m
    f { a = f32[2] parameter(0)  ROOT n = f32[2] negate(a) }
    ENTRY e { x = f32[2] parameter(0)  c = f32[2] call(x), to_apply=f
              ROOT t = (f32[2]) tuple(c) }""")
    with pytest.raises(UnsupportedError, match="inline"):
        assign_buffers(module)
