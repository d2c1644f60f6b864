"""Dots by block-dequantized weights (MatMulNBits), computed from their packed values
(backends/cpu/nbits.py).

Each case builds a MatMulNBits model from random packed bytes, compiles it for the host
and compares with numpy's float64 product by the weight dequantized here, independently
of the frontend (rtol 1e-4, atol 1e-4 of the largest magnitude, as test_gemm.py).  It
also checks that the kernel is the nbits form (a case cannot pass through the generic
GEMM unnoticed) and that the object holds the weight at about its packed size, not as
floats.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_gemm import _close

import aotc

MS = "com.microsoft"


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` values of `bits` bits along the last axis, low bits first."""
    values = [(packed >> shift) & ((1 << bits) - 1) for shift in range(0, 8, bits)]
    return np.stack(values, axis=-1).reshape(*packed.shape[:-1], -1)[..., :count]


def _model(rng, m, k, n, block, bits, zero, g_idx=None):
    """(model, the float64 weight (n, k), packed bytes of the weight's parts)."""
    blocks = -(-k // block)
    q = rng.integers(0, 256, (n, blocks, block * bits // 8), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, (n, blocks)).astype(np.float32)
    inits = [numpy_helper.from_array(q, "q"), numpy_helper.from_array(scales, "s")]
    values = _unpack(q, bits, block).reshape(n, blocks * block)[:, :k].astype(np.float64)
    groups = np.arange(k) // block if g_idx is None else g_idx
    if zero == "uint8":
        zp = rng.integers(0, 256, (n, (blocks * bits + 7) // 8), dtype=np.uint8)
        inits.append(numpy_helper.from_array(zp, "z"))
        zeros = _unpack(zp, bits, blocks).astype(np.float64)
    elif zero == "float":
        zeros = rng.uniform(0, 2**bits - 1, (n, blocks)).astype(np.float32)
        inits.append(numpy_helper.from_array(zeros, "z"))
    else:
        zeros = np.full((n, blocks), 2.0 ** (bits - 1))
    inputs = ["a", "q", "s"] + (["z"] if zero else [])
    if g_idx is not None:
        inputs += [""] if not zero else []
        inits.append(numpy_helper.from_array(g_idx.astype(np.int32), "g"))
        inputs.append("g")
    node = helper.make_node(
        "MatMulNBits", inputs, ["y"], domain=MS, K=k, N=n, bits=bits, block_size=block
    )
    graph = helper.make_graph(
        [node],
        "nbits",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    weight = (values - zeros[:, groups]) * scales.astype(np.float64)[:, groups]
    stored = q.nbytes + scales.nbytes + (zeros.nbytes // 8 if zero else 0)
    return model, weight, stored


# m, k, n, block, bits, zero points: one row (a decode step) and several (a prompt);
# N not a multiple of the panels, K not a multiple of the block, 2 and 8 bits
CASES = [
    (1, 1024, 1024, 32, 4, "uint8"),
    (1, 512, 200, 32, 4, None),
    (1, 1000, 72, 16, 4, "float"),
    (1, 256, 100, 64, 2, "uint8"),
    (1, 256, 100, 32, 8, "uint8"),
    (5, 512, 300, 32, 4, "uint8"),
    (64, 320, 136, 128, 4, None),
    (33, 256, 100, 16, 2, "float"),
    (8, 2816, 64, 32, 4, "uint8"),  # K slices of 564: whole words and single rows
]


@pytest.mark.parametrize("m,k,n,block,bits,zero", CASES)
def test_nbits_dot(m, k, n, block, bits, zero):
    rng = np.random.default_rng(m * k + n)
    model, weight, stored = _model(rng, m, k, n, block, bits, zero)
    compiled = aotc.compile(model)
    forms = list(compiled.kernel_forms().values())
    assert forms == [f"nbits{bits}.{'gemv' if m == 1 else 'gemm'}"], forms
    # the copy rounds N up to whole vectors; zero points as bytes (float ones as floats)
    assert compiled.stats.weight_bytes <= 1.35 * stored + 4096, (compiled.stats, stored)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    (got,) = compiled.load()(a)
    _close(got, a.astype(np.float64) @ weight.T, f"{m}x{k}x{n} b{block} {bits} bits {zero}")


@pytest.mark.parametrize("target", ["x86_64:x86-64-v2", "x86_64:x86-64-v3"])
@pytest.mark.parametrize("m", [1, 16])
def test_generic_x86(target, m):
    """Narrower vectors (4 and 8 lanes), whose copies and kernels are laid out for them."""
    rng = np.random.default_rng(9)
    model, weight, _ = _model(rng, m, 320, 100, 32, 4, "uint8")
    compiled = aotc.compile(model, target=target)
    assert list(compiled.kernel_forms().values()) == [f"nbits4.{'gemv' if m == 1 else 'gemm'}"]
    a = rng.uniform(-1, 1, (m, 320)).astype(np.float32)
    _close(compiled.load()(a)[0], a.astype(np.float64) @ weight.T, target)


def test_act_order():
    """g_idx whose blocks have `block` rows each, in another order: the rows of A are
    permuted to the weight's block order, and the form still takes it."""
    rng = np.random.default_rng(7)
    k, n, block = 256, 96, 32
    groups = np.arange(k) // block
    rng.shuffle(groups)
    model, weight, _ = _model(rng, 1, k, n, block, 4, "float", g_idx=groups)
    compiled = aotc.compile(model)
    assert "nbits4.gemv" in compiled.kernel_forms().values()
    a = rng.uniform(-1, 1, (1, k)).astype(np.float32)
    _close(compiled.load()(a)[0], a.astype(np.float64) @ weight.T, "act order")


def test_threads_agree():
    """A decode step big enough to share out gives the same values at 1 and 2 threads
    (each output panel is computed whole by one thread)."""
    rng = np.random.default_rng(3)
    model, weight, _ = _model(rng, 1, 2048, 640, 32, 4, "uint8")
    compiled = aotc.compile(model)
    assert "nbits4.gemv" in compiled.kernel_forms().values()
    run = compiled.load()
    run._ffi.cdef(f"void {run.name}_set_num_threads(int);")
    a = rng.uniform(-1, 1, (1, 2048)).astype(np.float32)
    runs = []
    for threads in (1, 2, 1):  # back to 1: joins the workers before the library goes
        run.set_num_threads(threads)
        runs.append(run(a)[0])
    one, two, _ = runs
    np.testing.assert_array_equal(one, two)
    _close(one, a.astype(np.float64) @ weight.T, "threads")


def test_two_weights_of_one_depth():
    """Two weights of the same K and block but other N in one model: each kernel reads
    its own copy's layout (kernels shared by name must not mix them up)."""
    rng = np.random.default_rng(11)
    first, w1, _ = _model(rng, 1, 128, 128, 32, 4, "uint8")
    second, w2, _ = _model(rng, 1, 128, 256, 32, 4, "uint8")
    graph = first.graph
    for init in second.graph.initializer:
        init.name += "2"
        graph.initializer.append(init)
    node = second.graph.node[0]
    node.input[1:] = [f"{name}2" for name in node.input[1:]]
    node.output[0] = "y2"
    graph.node.append(node)
    graph.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 256]))
    compiled = aotc.compile(first)
    assert list(compiled.kernel_forms().values()) == ["nbits4.gemv"] * 2
    a = rng.uniform(-1, 1, (1, 128)).astype(np.float32)
    y1, y2 = compiled.load()(a)
    _close(y1, a.astype(np.float64) @ w1.T, "first")
    _close(y2, a.astype(np.float64) @ w2.T, "second")
