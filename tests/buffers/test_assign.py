"""Buffer assignment: no two buffers alive at once share bytes; stats are consistent."""

import random

import numpy as np
import pytest

from aotc.buffers import BufferKind, assign_buffers
from aotc.buffers.heap import Interval, pack, peak_live_bytes
from aotc.ir import ComputationBuilder, DType, Module, Op, Shape


def random_module(seed: int) -> Module:
    """A random DAG of unary/binary/reshape ops over f32 vectors of varying length."""
    rng = random.Random(seed)
    module = Module(f"random{seed}")
    b = ComputationBuilder(module, "main")
    values = [b.parameter(0, Shape(DType.F32, (64,)), "x")]
    for _ in range(rng.randint(5, 40)):
        kind = rng.choice(["unary", "binary", "concat", "reshape", "const"])
        x = rng.choice(values)
        if kind == "unary":
            values.append(b.unary(rng.choice([Op.EXP, Op.NEGATE, Op.TANH]), x))
        elif kind == "binary":
            same = [v for v in values if v.shape == x.shape]
            values.append(b.binary(Op.ADD, x, rng.choice(same)))
        elif kind == "concat":
            values.append(b.concatenate([x, x], 0))
        elif kind == "reshape" and x.shape.dims[0] % 2 == 0:
            values.append(b.reshape(b.reshape(x, (2, x.shape.dims[0] // 2)), x.shape.dims))
        else:
            values.append(b.constant(np.arange(x.shape.dims[0], dtype=np.float32)))
    outputs = rng.sample(values, k=min(3, len(values)))
    b.build(b.tuple(outputs), entry=True)
    return module


@pytest.mark.parametrize("seed", range(40))
def test_live_buffers_never_share_bytes(seed):
    module = random_module(seed)
    plan = assign_buffers(module)
    for i, a in enumerate(plan.buffers):
        assert a.slice.offset % plan.alignment == 0
        assert a.slice.offset + a.slice.size <= plan.arena_bytes
        for b in plan.buffers[i + 1 :]:
            if a.start <= b.end and b.start <= a.end:
                assert not a.slice.overlaps(b.slice), (a, b)
    assert plan.lower_bound <= plan.arena_bytes <= plan.naive_total


@pytest.mark.parametrize("seed", range(20))
def test_temporaries_live_while_their_kernel_runs(seed):
    """A kernel's temporary is a buffer of the plan at its own step only: it never
    shares bytes with what is live then, and the lower bound counts it."""
    module = random_module(seed)
    scheduled = assign_buffers(module).schedule  # the instructions that run
    kernels = [i for i in scheduled if i.op not in (Op.PARAMETER, Op.CONSTANT, Op.TUPLE)]
    sizes = {id(i): 100 + 64 * k for k, i in enumerate(kernels) if k % 2 == 0}
    plan = assign_buffers(module, sizes)
    steps = {id(i): t for t, i in enumerate(plan.schedule)}
    found = [b for b in plan.buffers if b.name.endswith(".temporary")]
    assert len(found) == len(sizes)
    for instr in kernels:
        planned = plan.temporary(instr)
        if id(instr) not in sizes:
            assert planned is None
            continue
        assert planned.kind is BufferKind.ARENA and planned.size == sizes[id(instr)]
        (buffer,) = [b for b in found if b.slice == planned]
        assert buffer.start == buffer.end == steps[id(instr)]
    for i, a in enumerate(plan.buffers):  # temporaries included
        for b in plan.buffers[i + 1 :]:
            if a.start <= b.end and b.start <= a.end:
                assert not a.slice.overlaps(b.slice), (a, b)
    assert max(sizes.values(), default=0) <= plan.lower_bound <= plan.arena_bytes
    assert plan.arena_bytes <= plan.naive_total


def test_disjoint_lifetimes_share_space():
    module = Module("chain")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (1024,)), "x")
    for _ in range(10):
        x = b.unary(Op.EXP, x)
    b.build(b.tuple([x]), entry=True)
    plan = assign_buffers(module)
    # every exp overwrites its dying operand: the chain runs in the output buffer
    assert plan.arena_bytes == 0
    assert plan.naive_total == 9 * 4096
    assert {plan.slice_of(i).kind for i in module.entry.instructions[1:-1]} == {BufferKind.OUTPUT}


def test_values_still_read_later_are_not_overwritten():
    module = Module("diamond")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (1024,)), "x")
    e1 = b.unary(Op.EXP, x)
    e2 = b.unary(Op.EXP, e1)  # e1 is read again below: e2 cannot take its bytes
    t = b.unary(Op.TANH, e2)  # e2 dies here: in place
    out = b.binary(Op.ADD, t, e1)  # t and e1 die here: in place over one of them
    b.build(b.tuple([out]), entry=True)
    plan = assign_buffers(module)
    assert plan.slice_of(e2) != plan.slice_of(e1)
    assert plan.slice_of(t) == plan.slice_of(e2)
    assert plan.slice_of(out).kind is BufferKind.OUTPUT
    assert plan.arena_bytes == 4096


def test_outputs_parameters_constants_and_views():
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (2, 3)), "x")
    c = b.constant(np.ones((2, 3), np.float32))
    y = b.binary(Op.ADD, x, c)
    r = b.reshape(y, (6,))
    b.build(b.tuple([r, x, r]), entry=True)
    plan = assign_buffers(module)
    assert plan.slice_of(y).kind is BufferKind.OUTPUT
    assert plan.slice_of(r) == plan.slice_of(y)
    assert plan.slice_of(c).kind is BufferKind.CONSTANT
    assert plan.weights[plan.slice_of(c).offset : plan.slice_of(c).offset + 24] == (
        np.ones(6, np.float32).tobytes()
    )
    copies = {(s.kind, d.index) for s, d in plan.output_copies}
    assert copies == {(BufferKind.PARAMETER, 1), (BufferKind.OUTPUT, 2)}
    assert plan.arena_bytes == 0


def test_heap_best_fit_reuses_gap():
    items = [Interval("a", 0, 1, 256), Interval("b", 0, 5, 64), Interval("c", 2, 5, 128)]
    size = pack(items, 64)
    # c reuses a's bytes once a is dead
    assert size == 320
    assert peak_live_bytes(items, 64) == 320
