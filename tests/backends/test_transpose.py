"""Transposes that move the last dim: tiles transposed in registers (transpose.py)."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.backends.cpu import parse_target
from aotc.backends.cpu.transpose import tile_width
from aotc.ir import ComputationBuilder, DType, Module, Shape

TARGETS = ["host", "x86_64:x86-64-v2", "x86_64:x86-64-v3"]

# (operand dims, permutation): channels-last <-> NCHW, a matrix with edges on both
# dims, a batch of them, an arbitrary 4-D order, and one that keeps the last dim
CASES = [
    ((2, 20, 18, 48), (0, 3, 1, 2)),
    ((1, 40, 21, 35), (0, 2, 3, 1)),
    ((37, 45), (1, 0)),
    ((3, 33, 70), (0, 2, 1)),
    ((2, 5, 33, 17), (3, 1, 0, 2)),
    ((4, 6, 32, 40), (0, 2, 1, 3)),
]


def _module(dtype: DType) -> Module:
    module = Module("tr")
    b = ComputationBuilder(module, "main")
    outputs = []
    for i, (dims, perm) in enumerate(CASES):
        outputs.append(b.transpose(b.parameter(i, Shape(dtype, dims)), perm))
    b.build(b.tuple(outputs), entry=True)
    return module


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.BF16, DType.S32], ids=str)
def test_transposes_are_exact(compile_module, rand, target, dtype):
    module = _module(dtype)
    args = [rand(p.shape) for p in module.entry.parameters]
    got = compile_module(module, target=target).run(*args)
    for (dims, perm), x, y in zip(CASES, args, got, strict=True):
        np.testing.assert_array_equal(y, np.transpose(x, perm), err_msg=f"{dims} {perm}")


def test_which_transposes_go_in_tiles():
    host = parse_target("x86_64:x86-64-v3")  # 256-bit vectors: 8 floats, 4 doubles
    widths = [tile_width(t, host) for t in _module(DType.F32).entry.root.operands]
    assert widths == [8, 8, 8, 8, 8, None]  # the last keeps its last dim
    assert [tile_width(t, host) for t in _module(DType.F64).entry.root.operands][:2] == [4, 4]
    sse = parse_target("x86_64:x86-64-v2")  # 2 doubles to a vector: not worth it
    assert tile_width(_module(DType.F64).entry.root.operands[0], sse) is None


def test_tiled_transpose_is_the_same_across_threads(compile_module, rng, same_across_threads):
    module = Module("big")
    b = ComputationBuilder(module, "main")
    b.build(
        b.transpose(b.parameter(0, Shape(DType.F32, (1, 56, 56, 64))), (0, 3, 1, 2)), entry=True
    )
    x = rng.standard_normal((1, 56, 56, 64)).astype(np.float32)
    (got,) = same_across_threads(compile_module(module), [x])
    np.testing.assert_array_equal(got, x.transpose(0, 3, 1, 2))
