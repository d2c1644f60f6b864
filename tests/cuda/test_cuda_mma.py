"""Tensor-core GEMMs (mma_gemm.py): f16 and bf16 contractions, and f32 ones with `+tf32`,
emulated (emulator.c computes mma.sync from PTX's fragment layout) and on a GPU where
there is one, compared with float64 references of the rounded operands; their PTX holds
the mma instructions and ptxas assembles it for sm_80 and sm_90."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cuda_testing import RUNNERS, tiled_tools
from onnx import TensorProto, helper

from aotc.backends.cuda import contraction
from aotc.driver import CompileOptions, compile_model
from aotc.ir import DType
from aotc.ir.types import from_storage, to_storage

F16, BF16, F32 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT
DTYPES = {F16: DType.F16, BF16: DType.BF16, F32: DType.F32}
MMA_F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
MMA_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
MMA_TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
ARCHS = "cuda:sm_80,sm_90"


@pytest.fixture(autouse=True)
def _tools(monkeypatch):
    tiled_tools(monkeypatch)


def _model(nodes, inputs, outputs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _value(name, dims, dtype=F32):
    return helper.make_tensor_value_info(name, dtype, dims)


def _rounded(values: np.ndarray, dtype: DType) -> np.ndarray:
    return from_storage(to_storage(values, dtype), dtype).astype(np.float64)


def _tf32(values: np.ndarray) -> np.ndarray:
    """To the nearest TF32 (ties away from zero), as cvt.rna.tf32.f32."""
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def _run(runner, model, target, inputs, name, tmp_path):
    compiled = compile_model(model, CompileOptions(target=target, name=name))
    like = [np.zeros(spec.dims, spec.dtype.storage) for spec in compiled.outputs]
    raw = runner(compiled, inputs, like, tmp_path)
    got = [from_storage(r, spec.dtype).astype(np.float64) for r, spec in zip(raw, compiled.outputs)]
    return compiled, got


def _gemm_model(dtype: int):
    """Casts of f32 inputs to `dtype` (producers fused into the GEMMs' staging), then a
    MatMul with a bias and ReLU, a Gemm of transposed operands, a batched MatMul: sizes
    that are not multiples of the tiles (rows, columns, depth)."""
    nodes = [
        helper.make_node("Cast", ["x"], ["xc"], to=dtype),
        helper.make_node("Cast", ["w"], ["wc"], to=dtype),
        helper.make_node("Cast", ["bias"], ["bc"], to=dtype),
        helper.make_node("MatMul", ["xc", "wc"], ["mm"]),
        helper.make_node("Add", ["mm", "bc"], ["biased"]),
        helper.make_node("Relu", ["biased"], ["y"]),
        helper.make_node("Gemm", ["wc", "xc"], ["t"], transA=1, transB=1),
        helper.make_node("Cast", ["p"], ["pc"], to=dtype),
        helper.make_node("Cast", ["q"], ["qc"], to=dtype),
        helper.make_node("MatMul", ["pc", "qc"], ["batched"]),
    ]
    inputs = [
        _value("x", [70, 45]),
        _value("w", [45, 37]),
        _value("bias", [37]),
        _value("p", [3, 40, 24]),
        _value("q", [3, 24, 50]),
    ]
    outputs = [
        _value("y", [70, 37], dtype),
        _value("t", [37, 70], dtype),
        _value("batched", [3, 40, 50], dtype),
    ]
    return _model(nodes, inputs, outputs)


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("runner", RUNNERS)
def test_half_precision_gemms_on_tensor_cores(runner, dtype, large, tmp_path, monkeypatch):
    if large:
        monkeypatch.setattr(contraction, "LARGE_BLOCKS", 1)
    rng = np.random.default_rng(11)
    x, w = rng.normal(size=(70, 45)), rng.normal(size=(45, 37))
    bias, p, q = rng.normal(size=37), rng.normal(size=(3, 40, 24)), rng.normal(size=(3, 24, 50))
    inputs = [a.astype(np.float32) for a in (x, w, bias, p, q)]
    kind = DTYPES[dtype]
    xr, wr, br, pr, qr = (_rounded(a, kind) for a in inputs)
    expected = [np.maximum(_rounded(xr @ wr, kind) + br, 0), wr.T @ xr.T, pr @ qr]
    compiled, got = _run(runner, _gemm_model(dtype), ARCHS, inputs, "halfmma", tmp_path)
    assert [k.kind for k in compiled.program.launches].count("gemm") == 3
    assert (MMA_F16 if dtype == F16 else MMA_BF16) in compiled.program.ptx
    # f32 accumulation, then one rounding to the result type (its ulp: 2^-10, 2^-7)
    rtol = 2e-3 if dtype == F16 else 1.6e-2
    for g, e, name in zip(got, expected, ("matmul+bias+relu", "gemm^T", "batched")):
        np.testing.assert_allclose(g, _rounded(e, kind), rtol=rtol, atol=rtol, err_msg=name)


@pytest.mark.parametrize("runner", RUNNERS)
def test_deep_gemms_split_their_depth_on_tensor_cores(runner, tmp_path):
    """Few tiles and a deep k (split-K): slices of partial sums, added up in one more
    kernel that applies the bias; 1000 = 31 steps of 32 and 8 over, so the last slice is
    short and the last step partial."""
    rng = np.random.default_rng(13)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "bias"], ["y"]),
    ]
    model = _model(
        nodes,
        [_value("x", [20, 1000], F16), _value("w", [1000, 40], F16), _value("bias", [40], F16)],
        [_value("y", [20, 40], F16)],
    )
    x, w, bias = (rng.normal(size=s).astype(np.float16) for s in ((20, 1000), (1000, 40), 40))
    compiled, (got,) = _run(runner, model, ARCHS, [x, w, bias], "splitmma", tmp_path)
    assert [k.kind for k in compiled.program.launches] == ["gemm", "elementwise"]
    assert compiled.program.launches[0].grid > 1
    exact = x.astype(np.float64) @ w.astype(np.float64)
    expected = _rounded(_rounded(exact, DType.F16) + bias, DType.F16)
    np.testing.assert_allclose(got, expected, rtol=4e-3, atol=4e-2)


@pytest.mark.parametrize("runner", RUNNERS)
def test_half_precision_convolution_on_tensor_cores(runner, tmp_path):
    """An implicit GEMM: padding, stride, two feature groups; the image read in place."""
    rng = np.random.default_rng(12)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1], strides=[2, 1]),
    ]
    model = _model(
        nodes,
        [_value("x", [2, 6, 13, 11], F16), _value("w", [8, 3, 3, 3], F16)],
        [_value("y", [2, 8, 7, 11], F16)],
    )
    x = rng.normal(size=(2, 6, 13, 11)).astype(np.float16)
    w = rng.normal(size=(8, 3, 3, 3)).astype(np.float16)
    compiled, (got,) = _run(runner, model, ARCHS, [x, w], "convmma", tmp_path)
    assert MMA_F16 in compiled.program.ptx
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((2, 8, 7, 11))
    for o in range(8):
        group = o // 4
        for dy in range(3):
            for dx in range(3):
                window = padded[:, 3 * group : 3 * group + 3, dy : dy + 13 : 2, dx : dx + 11]
                expected[:, o] += np.einsum("bchw,c->bhw", window, w[o, :, dy, dx])
    np.testing.assert_allclose(got, expected.astype(np.float16), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("runner", RUNNERS)
def test_tf32_only_when_asked(runner, tmp_path):
    """f32 MatMul: exact f32 products by default; with +tf32 the products of operands
    rounded to TF32 (the result matches that and differs from the f32 one)."""
    rng = np.random.default_rng(13)
    a, b = (
        rng.normal(size=(67, 90)).astype(np.float32),
        rng.normal(size=(90, 45)).astype(np.float32),
    )
    model = _model(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        [_value("a", [67, 90]), _value("b", [90, 45])],
        [_value("c", [67, 45])],
    )
    exact = a.astype(np.float64) @ b.astype(np.float64)
    tf32 = _tf32(a) @ _tf32(b)
    plain, (f32_got,) = _run(runner, model, ARCHS, [a, b], "f32mm", tmp_path / "f32")
    assert "mma.sync" not in plain.program.ptx
    np.testing.assert_allclose(f32_got, exact, rtol=1e-5, atol=1e-4)
    fast, (tf32_got,) = _run(runner, model, f"{ARCHS}+tf32", [a, b], "tf32mm", tmp_path / "tf32")
    assert MMA_TF32 in fast.program.ptx and "cvt.rna.tf32.f32" in fast.program.ptx
    np.testing.assert_allclose(tf32_got, tf32, rtol=1e-5, atol=1e-4)
    assert np.abs(tf32_got - exact).max() > 1e-3  # 10-bit mantissas: visibly coarser
