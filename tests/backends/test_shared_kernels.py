"""Kernels of the same code shared (backends/cpu/shared_kernels.py): a repeated block's
kernels are one function called with a frame each, right to numpy's; kernels whose text
differs in anything but their names and metadata numbers stay apart."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from aotc_testing import bench_module
from llvmlite import ir
from onnx import TensorProto, helper, numpy_helper

import aotc
from aotc.backends.cpu.program import KERNEL_ARGS, build_module, kernel_instructions
from aotc.backends.cpu.shared_kernels import SharedKernels
from aotc.backends.llvm.lltypes import PTR
from aotc.runner import LoadedModel

SCALING = bench_module("compile_scaling")
WIDTH = 32


def _compiled(tmp_path, model: onnx.ModelProto):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return aotc.compile(path)


def _kernel_functions(compiled) -> tuple[int, int]:
    """(kernel functions defined, kernel calls) of the compiled model's LLVM module."""
    llmod = build_module(compiled.module, compiled.plan, compiled.name)
    defined = [
        f for f in llmod.functions if f.blocks and tuple(a.name for a in f.args) == KERNEL_ARGS
    ]
    return len(defined), len(kernel_instructions(compiled.plan))


def test_repeated_blocks_share_their_kernels(tmp_path):
    """Ten transformer-style blocks: the first reads the input, the last writes the
    output, the eight between are the same code at other offsets."""
    nodes = 10 * SCALING.BLOCK_NODES
    compiled = _compiled(tmp_path, SCALING.transformer_model(nodes))
    defined, calls = _kernel_functions(compiled)
    assert calls >= 30 and defined <= calls // 3, (defined, calls)
    x = np.random.default_rng(0).standard_normal((SCALING.ROWS, SCALING.WIDTH))
    x = x.astype(np.float32)
    got = LoadedModel(compiled).run([x])[0]
    np.testing.assert_allclose(got, SCALING.transformer_expected(x, nodes), rtol=1e-4, atol=1e-4)


def _shifted_blocks(shifts: list[float]) -> onnx.ModelProto:
    """x -> MatMul(w_k) -> Add(shift_k) -> Relu per block: the one-element shift is an
    immediate of the block's GEMM epilogue, so distinct shifts are distinct code."""
    rng = np.random.default_rng(1)
    nodes, initializers, value = [], [], "x"
    for k, shift in enumerate(shifts):
        weight = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        initializers += [
            numpy_helper.from_array(weight, f"w{k}"),
            numpy_helper.from_array(np.array([shift], np.float32), f"s{k}"),
        ]
        nodes += [
            helper.make_node("MatMul", [value, f"w{k}"], [f"p{k}"]),
            helper.make_node("Add", [f"p{k}", f"s{k}"], [f"q{k}"]),
            helper.make_node("Relu", [f"q{k}"], [f"r{k}"]),
        ]
        value = f"r{k}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, WIDTH])],
        [helper.make_tensor_value_info(value, TensorProto.FLOAT, [8, WIDTH])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_blocks_of_other_weights_share_code_and_read_their_own(tmp_path):
    """Each block's weights and shift (the shift a broadcast from the weights) differ:
    data, not code, so the middle blocks share one kernel, each call reading its own
    weights through its frame."""
    blocks = 6
    shifts = [0.25 * k - 0.6 for k in range(blocks)]
    model = _shifted_blocks(shifts)
    compiled = _compiled(tmp_path, model)
    defined, calls = _kernel_functions(compiled)
    # the first block reads the input and the last writes the output: the others share
    assert (defined, calls) == (3, blocks)
    x = np.random.default_rng(2).standard_normal((8, WIDTH)).astype(np.float32)
    want = x.astype(np.float64)
    for k, init in enumerate(model.graph.initializer[::2]):
        want = np.maximum(want @ numpy_helper.to_array(init) + shifts[k], 0)
    got = LoadedModel(compiled).run([x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _kernel(module: ir.Module, name: str, immediate: float, mark: str) -> ir.Function:
    """A kernel storing `immediate` into its frame's first slot, the store tagged with
    metadata naming the kernel and carrying `mark`."""
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * 4), name)
    b = ir.IRBuilder(function.append_basic_block("entry"))
    store = b.store(ir.Constant(ir.FloatType(), immediate), function.args[3])
    tag = [ir.MetaDataString(module, f"aotc.{name}"), ir.MetaDataString(module, mark)]
    store.set_metadata("aotc.tag", module.add_metadata([module.add_metadata(tag)]))
    b.ret_void()
    return function


@pytest.mark.parametrize(
    ("immediate", "mark", "shared"),
    [(1.0, "a", True), (2.0, "a", False), (1.0, "b", False)],
    ids=["same-code", "other-immediate", "other-metadata"],
)
def test_a_kernel_is_shared_only_with_the_same_text(immediate, mark, shared):
    """Names and metadata numbers aside (a node added between the two kernels shifts
    the second's numbers), the text must be the same to share."""
    module = ir.Module()
    kernels = SharedKernels(module)
    start = kernels.mark()
    first = kernels.share(_kernel(module, "m.k1", 1.0, "a"), start)
    module.add_metadata([ir.MetaDataString(module, "in between")])
    start = kernels.mark()
    second = _kernel(module, "m.k2", immediate, mark)
    assert (kernels.share(second, start) is first) == shared
    assert ("m.k2" in module.globals) != shared  # a shared kernel's copy is gone


def test_a_kernel_with_a_variable_of_its_own_is_never_shared():
    """Its variable is state of that kernel (a random stream's counter): two kernels of
    the same text each keep theirs."""
    module = ir.Module()
    kernels = SharedKernels(module)
    shared = []
    for name in ("m.k1", "m.k2"):
        start = kernels.mark()
        function = _kernel(module, name, 1.0, "a")
        counter = ir.GlobalVariable(module, ir.IntType(64), f"{name}.counter")
        counter.initializer = ir.Constant(ir.IntType(64), 0)
        shared.append(kernels.share(function, start))
    assert shared[0] is not shared[1] and "m.k2.counter" in module.globals
