"""Gather: embedding lookups, index vectors, clamping, batching dims."""

from __future__ import annotations

import re

import numpy as np

from aotc.backends.cpu import emit_llvm_ir, parse_target
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


def _two_lookups(module_name, right_values):
    """leaf[select(p, left[root], right[root])]: node numbers looked up in tables of node
    numbers (a tree step), then a value per node."""
    module = Module(module_name)
    b = ComputationBuilder(module, "main")
    p = b.parameter(0, Shape(DType.PRED, (6, 5)))
    roots = b.broadcast(b.constant(np.array([0, 1, 2, 0, 3], np.int32), DType.S32), [1], (6, 5))
    left = b.constant(np.array([1, 3, 5, 7, 6, 4, 2, 0], np.int32), DType.S32)
    right = b.constant(np.array(right_values, np.int32), DType.S32)
    leaf = b.constant(np.arange(8, dtype=np.float32) * 10, DType.F32)

    def lookup(table, index):
        return b.gather(table, index, GatherDims((), (0,), (0,), 2, (1,)))

    node = b.select(p, lookup(left, roots), lookup(right, roots))
    b.build(b.tuple([lookup(leaf, node)]), entry=True)
    return module


def _pred(rng):
    return rng.integers(0, 2, (6, 5)).astype(bool)


def test_indices_known_in_range_are_not_clamped(check, rng):
    """Node numbers from tables of node numbers lie inside the tables: no clamps."""
    module = _two_lookups("inrange", [2, 4, 6, 1, 0, 7, 3, 5])
    pv = _pred(rng)
    check(module, [pv])
    text = emit_llvm_ir(module, assign_buffers(module), "inrange", parse_target("host"))
    assert "llvm.smax" not in text and "llvm.smin" not in text and "llvm.umin" not in text


def test_indices_outside_the_table_stay_clamped(check, rng):
    """A table holding -1 and 9 for 8 nodes: its lookups still clamp (as the evaluator)."""
    module = _two_lookups("outside", [2, -1, 9, 1, 0, 7, 3, 5])
    pv = np.ones((6, 5), bool)
    pv[:, 1:3] = False  # roots 1 and 2 take right[1] = -1 and right[2] = 9
    (got,) = check(module, [pv]).run(pv)
    assert got[0, 1] == 0 and got[0, 2] == 70  # clamped to nodes 0 and 7
    text = emit_llvm_ir(module, assign_buffers(module), "outside", parse_target("host"))
    assert "llvm.smax" in text
