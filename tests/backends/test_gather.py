"""Gather: embedding lookups, index vectors, clamping, batching dims."""

from __future__ import annotations

import re

import numpy as np

from aotc.backends.cpu import parse_target
from aotc.backends.cpu.codegen import optimized_module
from aotc.buffers import assign_buffers
from aotc.ir import ComputationBuilder, DType, GatherDims, Module, Op, Shape
from aotc.passes.fusion import Fusion


def fused(module: Module) -> Module:
    Fusion().run(module)
    return module


def test_embedding_lookup_clamps_out_of_range(check, rng):
    module = Module("emb")
    b = ComputationBuilder(module, "main")
    table = b.parameter(0, Shape(DType.F32, (10, 4)))
    ids = b.parameter(1, Shape(DType.S32, (5,)))
    dims = GatherDims((1,), (0,), (0,), 1, (1, 4))
    b.build(b.tuple([b.gather(table, ids, dims)]), entry=True)
    tv = rng.standard_normal((10, 4)).astype(np.float32)
    iv = np.array([3, -3, 12, 9, 0], np.int32)
    (got,) = check(module, [tv, iv]).run(tv, iv)
    np.testing.assert_array_equal(got, tv[np.clip(iv, 0, 9)])


def test_gather_index_vectors(check, rng):
    module = Module("gv")
    b = ComputationBuilder(module, "main")
    operand = b.parameter(0, Shape(DType.S16, (4, 5, 6)))
    outputs = []
    for dtype in (DType.U8, DType.S64):
        starts = b.parameter(len(outputs) + 1, Shape(dtype, (3, 2)))
        dims = GatherDims((1, 2), (0,), (0, 2), 1, (1, 3, 2))
        outputs.append(b.gather(operand, starts, dims))
    b.build(b.tuple(outputs), entry=True)
    ov = rng.integers(-100, 100, (4, 5, 6)).astype(np.int16)
    sv = np.array([[0, 0], [3, 5], [2, 1]])
    compiled = check(module, [ov, sv.astype(np.uint8), sv.astype(np.int64)])
    got = compiled.run(ov, sv.astype(np.uint8), sv.astype(np.int64))[0]
    for k, (i, j) in enumerate(sv):
        j = min(j, 6 - 2)
        np.testing.assert_array_equal(got[k], ov[i, 0:3, j : j + 2])


def test_gather_batching_dims(check, rng):
    module = Module("gb")
    b = ComputationBuilder(module, "main")
    operand = b.parameter(0, Shape(DType.F32, (2, 5, 3)))
    idx = b.parameter(1, Shape(DType.S32, (2, 4)))
    dims = GatherDims((2,), (1,), (1,), 2, (1, 1, 3), (0,), (0,))
    b.build(b.tuple([b.gather(operand, idx, dims)]), entry=True)
    ov = rng.standard_normal((2, 5, 3)).astype(np.float32)
    iv = rng.integers(0, 5, (2, 4)).astype(np.int32)
    (got,) = check(module, [ov, iv]).run(ov, iv)
    expected = np.stack([ov[k][iv[k]] for k in range(2)])
    np.testing.assert_array_equal(got, expected)


def test_rows_gathered_by_a_constant_table_vectorize(check, rng):
    """The index table is weights: its loads are invariant, so LLVM hoists each row's index
    out of the row's loop and vectorizes the loop (resizing's row blends: 2.4-2.9x)."""
    module = Module("rows")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (16, 256)))
    index = rng.integers(0, 16, 40)
    dims = GatherDims((1,), (0,), (0,), 1, (1, 256))
    rows = b.gather(x, b.constant(index.astype(np.int64)), dims)
    weight = rng.standard_normal(40).astype(np.float32)
    scaled = b.binary(Op.MULTIPLY, rows, b.broadcast(b.constant(weight), [0], (40, 256)))
    b.build(b.tuple([scaled]), entry=True)
    module = fused(module)
    xv = rng.standard_normal((16, 256)).astype(np.float32)
    (got,) = check(module, [xv]).run(xv)
    np.testing.assert_allclose(got, xv[index] * weight[:, None], rtol=1e-6)
    plan = assign_buffers(module)
    text = str(optimized_module(module, plan, "rows", parse_target("x86_64:x86-64-v3"))[0])
    assert "!invariant.load" in text
    assert re.search(r"store <8 x float>", text), "the row loop is not vectorized"
