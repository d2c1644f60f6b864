"""Concatenates whose operands are computed in their part of the result (buffers/concat.py).

Random graphs of kernels and concatenates run on their plans' bytes (the
simulator of test_control_buffers: garbage-filled arena, every kernel at its
time, concatenates that need no code skipped) must give the evaluator's
outputs; and the plans of the typical shapes place what they should.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_control_buffers import simulate

from aotc.buffers import assign_buffers
from aotc.ir import ComputationBuilder, DType, Module, Op, Shape
from aotc.ir.evaluate import evaluate

F32 = DType.F32


def random_concat_module(seed: int) -> Module:
    """Kernels on [1, c, 3] values and concatenates of them along dims 0, 1 (in place
    possible) and 2 (not contiguous); values reused after a concatenate or twice in one."""
    rng = random.Random(seed)
    module = Module(f"concat{seed}")
    b = ComputationBuilder(module, "main")
    values = [b.parameter(0, Shape(F32, (1, 2, 3)), "x")]
    for _ in range(rng.randint(4, 25)):
        x = rng.choice(values)
        kind = rng.choice(["unary", "unary", "binary", "concat", "concat", "concat"])
        if kind == "unary":
            values.append(b.unary(rng.choice([Op.EXP, Op.NEGATE, Op.TANH]), x))
        elif kind == "binary":
            same = [v for v in values if v.shape == x.shape]
            values.append(b.binary(Op.ADD, x, rng.choice(same)))
        else:
            parts = [x] + [
                v
                for v in rng.sample(values, k=min(2, len(values)))
                if v.shape.dims[::2] == x.shape.dims[::2]
            ]
            joined = b.concatenate(parts, 1)
            if rng.random() < 0.2 and all(p.shape.dims == x.shape.dims for p in parts):
                joined = b.concatenate(parts, rng.choice([0, 2]))
                if joined.shape.dims[0] != 1:  # keep values [1, c, 3]-shaped
                    values.append(b.unary(Op.NEGATE, joined))
                    continue
            values.append(joined)
    outputs = rng.sample(values[1:] or values, k=min(3, len(values) - 1 or 1))
    b.build(b.tuple(outputs), entry=True)
    return module


@pytest.mark.parametrize("seed", range(60))
def test_random_concatenates_run_correctly_on_their_plans(seed):
    module = random_concat_module(seed)
    inputs = [np.random.default_rng(seed).uniform(-1, 1, (1, 2, 3)).astype(np.float32)]
    want = evaluate(module, inputs)
    plan = assign_buffers(module)
    assert plan.lower_bound <= plan.arena_bytes
    for got, w in zip(simulate(module, plan, inputs), want, strict=True):
        np.testing.assert_array_equal(got, w)


def _dense_block(layers: int) -> tuple[Module, list]:
    """x -> [concat(features so far) -> tanh -> new features] * layers, then negate."""
    module = Module("dense")
    b = ComputationBuilder(module, "main")
    x = b.unary(Op.EXP, b.parameter(0, Shape(F32, (1, 4, 5, 5)), "x"))
    features, concats = x, []
    for _ in range(layers):
        new = b.unary(Op.TANH, b.slice(features, (0, 0, 0, 0), (1, 2, 5, 5)))
        features = b.concatenate([features, new], 1)
        concats.append(features)
    b.build(b.tuple([b.unary(Op.NEGATE, features)]), entry=True)
    return module, concats


def test_dense_block_builds_its_features_in_one_buffer():
    module, concats = _dense_block(4)
    plan = assign_buffers(module)
    assert not any(plan.needs_code(c) for c in concats)
    last = plan.slice_of(concats[-1])
    for c in concats:  # every concatenate is the leading part of the last one
        assert plan.slice_of(c).offset == last.offset
    inputs = [np.random.default_rng(0).uniform(-1, 1, (1, 4, 5, 5)).astype(np.float32)]
    for got, w in zip(simulate(module, plan, inputs), evaluate(module, inputs), strict=True):
        np.testing.assert_array_equal(got, w)


def test_operands_read_after_the_concatenate_stay_apart():
    module = Module("later")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (1, 4, 3)), "x")
    first, second = b.unary(Op.EXP, x), b.unary(Op.TANH, x)
    joined = b.concatenate([first, second], 1)
    later = b.binary(Op.ADD, b.unary(Op.NEGATE, joined), b.concatenate([second, second], 1))
    b.build(b.tuple([later]), entry=True)
    plan = assign_buffers(module)
    part = plan.slice_of(joined)
    assert plan.slice_of(first).offset == part.offset  # dies at the concatenate: in place
    assert not plan.slice_of(second).overlaps(part)  # read again later: its own buffer
    assert plan.needs_code(joined)


def test_concatenate_along_an_inner_dim_copies():
    module = Module("inner")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (2, 4)), "x")
    first, second = b.unary(Op.EXP, x), b.unary(Op.TANH, x)
    joined = b.concatenate([first, second], 1)  # rows interleave: no contiguous parts
    b.build(b.tuple([b.unary(Op.NEGATE, joined)]), entry=True)
    plan = assign_buffers(module)
    assert plan.needs_code(joined)
    assert not plan.slice_of(first).overlaps(plan.slice_of(joined))
