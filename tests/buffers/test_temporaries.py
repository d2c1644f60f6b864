"""Kernel temporaries (GEMM packing panels, im2col planes...) planned into the arena
with the live range of their kernel: a compiled model's scratch is its arena, the lower
bound counts them, and the memory-plan drawing shows them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from aotc_testing import EXAMPLES
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aotc import artifacts
from aotc.buffers import assign_buffers
from aotc.buffers.assign import _Context, _plan
from aotc.buffers.schedule import topological
from aotc.driver import CompileOptions, compile_model
from aotc.ir.evaluate import evaluate

CNN = EXAMPLES / "cnn" / "cnn.onnx"


def test_the_temporaries_share_the_arena():
    # planned for speed: for memory, the CNN's kernels take forms without temporaries
    compiled = compile_model(CNN, CompileOptions(plan_for="speed"))
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


def _chain_of_convolutions() -> onnx.ModelProto:
    """1x1 16 -> 64, 1x1 64 -> 16, then a 3x3 16 -> 16 (Winograd) at 32x32: the peak is
    the 1x1s' outputs together, and while the 3x3 runs only its input is live."""
    rng = np.random.default_rng(3)
    weights = [
        numpy_helper.from_array(rng.uniform(-0.3, 0.3, shape).astype(np.float32), name)
        for name, shape in (("w1", (64, 16, 1, 1)), ("w2", (16, 64, 1, 1)), ("w3", (16, 16, 3, 3)))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("Conv", ["a", "w2"], ["b"]),
        helper.make_node("Conv", ["b", "w3"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_a_banded_kernel_takes_what_is_free_while_it_runs():
    """The Winograd convolution's whole-image transforms would not fit in the bytes free
    at its step; in bands they do, so the temporaries leave the peak where it was."""
    from aotc.backends.cpu.contraction import contraction_plans

    model = _chain_of_convolutions()
    compiled = compile_model(model, CompileOptions())
    plan = compiled.plan
    first = assign_buffers(compiled.module)  # the plan the kernels were sized in
    [(instr, wino)] = [
        (i, p)
        for i in plan.schedule
        for p in (contraction_plans(compiled.target, plan, i) or ((), ()))[1]
        if p.kind == "winograd"
    ]
    room = first.headroom(instr)
    assert room > 0 and plan.headroom(instr) == room  # the emitted kernel sees the same
    assert replace(wino, band_rows=0).workspace_bytes > room  # whole, it would raise the peak
    assert plan.temporary(instr).size <= room
    x = np.random.default_rng(4).standard_normal((1, 16, 32, 32)).astype(np.float32)
    (got,) = compiled.load()(x)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))


def test_headroom_is_what_is_not_live_below_the_peak():
    """In the plan without temporaries, below its lower bound; the compiled plan's rooms
    are what is not live below one peak, at least that bound (the least any sizing of
    the temporaries reaches)."""
    compiled = compile_model(_chain_of_convolutions(), CompileOptions(opt_level=0))
    plan = assign_buffers(compiled.module)
    lives = []
    for step, instr in enumerate(plan.schedule):
        live = sum(
            -(-b.slice.size // plan.alignment) * plan.alignment
            for b in plan.buffers
            if b.start <= step <= b.end
        )
        lives.append(live)
        assert plan.live_bytes(instr) == live
        assert plan.headroom(instr) == max(plan.lower_bound - live, 0)
    assert min(plan.headroom(i) for i in plan.schedule) == 0  # at the peak
    peak = max(compiled.plan.headroom(i) + live for i, live in zip(plan.schedule, lives))
    assert peak >= plan.lower_bound
    for instr, live in zip(plan.schedule, lives):
        assert compiled.plan.headroom(instr) == max(peak - live, 0)


def _vgg_block() -> onnx.ModelProto:
    """Two 3x3 convolutions 32 -> 32 at 64x64 (the second's input and output are the
    peak, as VGG's first block's), a pool and a classifier."""
    rng = np.random.default_rng(6)
    weights = [
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, shape).astype(np.float32), name)
        for name, shape in (
            ("w1", (32, 3, 3, 3)),
            ("w2", (32, 32, 3, 3)),
            ("w3", (32 * 32 * 32, 10)),
        )
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("MaxPool", ["d"], ["e"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["e"], ["f"]),
        helper.make_node("MatMul", ["f", "w3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "vgg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("target", ["host", "x86_64:x86-64-v3"])
@pytest.mark.parametrize("which", ["cnn", "chain", "vgg"])
def test_scratch_is_no_more_than_the_plain_orders_values(which, target):
    """The scratch (values and temporaries) is at most the peak of the values alone in
    the plain topological order: kernels at the peak take forms whose temporaries fit
    the gaps there (none, at the peak itself); and the numbers stay the evaluator's."""
    model = {"cnn": lambda: onnx.load(str(CNN)), "chain": _chain_of_convolutions, "vgg": _vgg_block}
    options = CompileOptions(target=target, plan_for="memory")
    compiled = compile_model(model[which](), options)
    module = compiled.module
    plain = _plan(module, topological(module.entry), _Context.of(module))
    assert compiled.plan.scratch_bytes <= plain.lower_bound
    shape = [d.dim_value for d in model[which]().graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    got = compiled.load()(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    (want,) = evaluate(module, [x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want))))
