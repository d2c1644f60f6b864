"""Kernel temporaries (GEMM packing panels, im2col planes...) planned into the arena
with the live range of their kernel: a compiled model's scratch is its arena, the lower
bound counts them, and the memory-plan drawing shows them."""

from __future__ import annotations

import numpy as np
from aotc_testing import EXAMPLES

from aotc import artifacts
from aotc.buffers import assign_buffers
from aotc.driver import CompileOptions, compile_model
from aotc.ir.evaluate import evaluate

CNN = EXAMPLES / "cnn" / "cnn.onnx"


def test_the_temporaries_share_the_arena():
    compiled = compile_model(CNN, CompileOptions())
    plan = compiled.plan
    temporaries = [b for b in plan.buffers if b.name.endswith(".temporary")]
    assert temporaries, "the CNN's convolutions and GEMM need packing space"
    assert plan.workspace_bytes == 0  # none beyond them
    assert plan.scratch_bytes == -(-plan.arena_bytes // plan.alignment) * plan.alignment
    assert plan.lower_bound <= plan.arena_bytes <= plan.naive_total
    # the old layout, the temporaries after the arena, is what this saves on
    separate = assign_buffers(compiled.module)
    largest = max(b.slice.size for b in temporaries)
    assert plan.scratch_bytes < separate.arena_bytes + largest
    svg = artifacts.render_memory_plan_svg(compiled.name, plan)
    assert all(b.name in svg for b in temporaries)


def test_kernels_run_in_their_temporaries():
    """The CNN run with NaN bytes in the whole scratch first: the outputs equal the
    numpy evaluator's (rtol 1e-5, atol 1e-6), so no kernel reads a temporary it did
    not write, nor one another value holds."""
    compiled = compile_model(CNN, CompileOptions())
    loaded = compiled.load()
    loaded._scratch[:] = 0xFF
    x = np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32)
    (got,) = loaded.run([x])
    (want,) = evaluate(compiled.module, [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
