"""Attention chains: grouped into one kChain fusion above the score threshold only
(passes/attention_chains.py), compiled block by block (backends/cpu/attention.py); results
equal float64 numpy attention at f32 tolerance, bitwise the same at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.backends.cpu import attention
from aotc.driver import CompileOptions, compile_model
from aotc.frontends.onnx import import_onnx
from aotc.ir import FusionKind, Op
from aotc.ir.evaluate import evaluate
from aotc.ir.parser import parse_module
from aotc.ir.text import print_module
from aotc.passes import attention_chains
from aotc.passes.pipeline import make_pipeline

# f32 scores and sums of up to a few hundred products: errors of a few ulp of the output
TOLERANCE = {"rtol": 2e-5, "atol": 2e-6}


def _model(batch, heads, q, k, d, dv, mask=None, bias=False) -> onnx.ModelProto:
    """softmax(Q K^T / sqrt(d) + mask) V (+ a bias on the output's last dim)."""
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
        for name, dims in (("Q", [batch, heads, q, d]), ("K", [batch, heads, k, d]))
    ]
    inputs.append(helper.make_tensor_value_info("V", TensorProto.FLOAT, [batch, heads, k, dv]))
    nodes = [
        helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["Q", "Kt"], ["S"]),
        helper.make_node("Mul", ["S", "scale"], ["Ss"]),
    ]
    inits = [helper.make_tensor("scale", TensorProto.FLOAT, [], [d**-0.5])]
    last = "Ss"
    if mask is not None:
        inputs.append(helper.make_tensor_value_info("M", TensorProto.FLOAT, list(mask)))
        nodes.append(helper.make_node("Add", ["Ss", "M"], ["Sm"]))
        last = "Sm"
    nodes.append(helper.make_node("Softmax", [last], ["P"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["P", "V"], ["PV"] if bias else ["O"]))
    if bias:
        values = np.linspace(-1, 1, dv).astype(np.float32)
        inits.append(helper.make_tensor("bias", TensorProto.FLOAT, [dv], values))
        nodes.append(helper.make_node("Add", ["PV", "bias"], ["O"]))
    out = helper.make_tensor_value_info("O", TensorProto.FLOAT, [batch, heads, q, dv])
    graph = helper.make_graph(nodes, "attention", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _inputs(model: onnx.ModelProto, causal: bool, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(dims).astype(np.float32)
    if causal:  # -inf above the diagonal: each query sees the keys up to its own
        q, k = feeds["M"].shape[-2:]
        feeds["M"] = np.where(np.triu(np.ones((q, k)), 1) > 0, -np.inf, 0).astype(np.float32)
        feeds["M"] = feeds["M"].reshape(1, 1, q, k)
    return feeds


def _reference(feeds: dict[str, np.ndarray], bias: bool) -> np.ndarray:
    q, k, v = (feeds[n].astype(np.float64) for n in "QKV")
    s = q @ np.swapaxes(k, -1, -2) * q.shape[-1] ** -0.5
    if "M" in feeds:
        s = s + feeds["M"]
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    out = (p / p.sum(axis=-1, keepdims=True)) @ v
    return out + np.linspace(-1, 1, v.shape[-1]) if bias else out


def _run_at_1_and_2_threads(model, feeds) -> np.ndarray:
    results = []
    for threads in (1, 2):  # the compiled default thread count
        compiled = compile_model(model, CompileOptions(threads=threads))
        assert set(compiled.kernel_forms().values()) == {"attention"}
        (out,) = compiled.load()(**feeds)
        results.append(out)
    np.testing.assert_array_equal(*results)  # a fixed partition of the blocks
    return results[0]


@pytest.fixture
def small_blocks(monkeypatch):
    """Chains of any size, in blocks of a few rows: short last blocks, many units."""
    monkeypatch.setattr(attention_chains, "MIN_SCORE_BYTES", 0)
    monkeypatch.setattr(attention, "SCORE_BLOCK_BYTES", 2048)


# (batch, heads, queries, keys, head dim, value dim, mask dims or None, causal, bias)
CASES = [
    (1, 1, 37, 53, 16, 16, None, False, False),
    (2, 3, 50, 41, 8, 12, (1, 1, 1, 41), False, False),
    (1, 2, 45, 45, 16, 8, (1, 1, 45, 45), True, False),
    (2, 2, 29, 67, 12, 20, (2, 1, 1, 67), False, True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])))
def test_small_blocks_equal_numpy(small_blocks, case):
    *dims, mask, causal, bias = case
    model = _model(*dims, mask=mask, bias=bias)
    feeds = _inputs(model, causal)
    out = _run_at_1_and_2_threads(model, feeds)
    np.testing.assert_allclose(out, _reference(feeds, bias), **TOLERANCE)


def test_long_sequence_with_mask_equals_numpy():
    """Real thresholds and blocks: 2 heads over 1,100 positions (9.7 MB of scores)."""
    model = _model(1, 2, 1100, 1100, 64, 64, mask=(1, 1, 1, 1100))
    feeds = _inputs(model, causal=False)
    out = _run_at_1_and_2_threads(model, feeds)
    np.testing.assert_allclose(out, _reference(feeds, False), **TOLERANCE)


def _chains(model, chains: bool) -> int:
    module = import_onnx(model)
    make_pipeline(2, chains=chains, verify=True).run(module)
    return sum(i.fusion_kind is FusionKind.CHAIN for i in module.entry.instructions)


@pytest.mark.parametrize(
    ("dims", "expected"),
    [((1, 6, 1500, 1500, 64, 64), 1), ((1, 12, 128, 128, 64, 64), 0)],
    ids=["whisper_54MB", "bert_786KB"],
)
def test_grouped_above_the_threshold_only(dims, expected):
    model = _model(*dims)
    assert _chains(model, chains=True) == expected
    assert _chains(model, chains=False) == 0  # backends without kChain kernels (CUDA)


def test_chain_body_holds_the_three_kernels():
    module = import_onnx(_model(1, 6, 1500, 1500, 64, 64, mask=(1, 1, 1, 1500), bias=True))
    make_pipeline(2, chains=True).run(module)
    (chain,) = [i for i in module.entry.instructions if i.fusion_kind is FusionKind.CHAIN]
    parts = [i.fusion_kind for i in chain.called[0].instructions if i.op is Op.FUSION]
    assert parts == [FusionKind.OUTPUT, FusionKind.LOOP, FusionKind.OUTPUT]


def test_chain_prints_parses_and_evaluates_as_the_three_kernels(monkeypatch):
    """A kChain fusion round-trips through the text form, and the evaluator computes it
    as the three kernels it holds."""
    monkeypatch.setattr(attention_chains, "MIN_SCORE_BYTES", 0)
    model = _model(2, 2, 9, 11, 4, 5, mask=(1, 1, 1, 11), bias=True)
    chained, plain = import_onnx(model), import_onnx(model)
    make_pipeline(2, chains=True, verify=True).run(chained)
    make_pipeline(2).run(plain)
    text = print_module(chained)
    assert "kind=kChain" in text
    assert print_module(parse_module(text)) == text
    feeds = list(_inputs(model, causal=False).values())
    (got,), (expected,) = evaluate(chained, feeds), evaluate(plain, feeds)
    np.testing.assert_array_equal(got, expected)
