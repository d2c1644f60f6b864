"""CUDA models run without a GPU: the kernels emitted for an emulated thread grid
(cuda_testing.EmulatedDevice: same emitters, barriers and warp shuffles by POSIX threads)
behind the real launcher and runtime and a stand-in libcuda.  Outputs are compared with
onnxruntime and with JAX's (the HLO fixtures).  This checks the kernels' index arithmetic,
tiling, reductions and launch configurations; the GPU's own behaviour (real NVPTX code,
timing, memory model) is left to test_cuda_gpu.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cuda_testing import (
    CONFORMANCE,
    REPO,
    c_compiler,
    conformance_cases,
    require_ptxas,
    run_conformance_case,
    run_emulated,
)
from onnx import TensorProto, helper, numpy_helper

import aotc.backend as aotc_backend
from aotc.backends.cuda import contraction, elementwise, reduction
from aotc.driver import CompileOptions, compile_model
from aotc.ir import DType
from aotc.ir.types import from_storage

ort = pytest.importorskip("onnxruntime")

E2E = {
    "mnist": REPO / "examples" / "mnist" / "mnist.onnx",
    "cnn": REPO / "examples" / "cnn" / "cnn.onnx",
}
HLO = REPO / "tests" / "fixtures" / "hlo"
CONTROL_FLOW = {"cond", "fori_loop", "random_normal"}  # refused (test_cuda_codegen.py)
FIXTURES = sorted(p.stem for p in HLO.glob("*.hlo") if p.stem not in CONTROL_FLOW)
# (rtol, atol) per element type, as tests/test_hlo_fixtures.py
TOLERANCES = {DType.F32: (1e-4, 1e-5), DType.F16: (1e-3, 1e-3), DType.BF16: (1e-2, 1e-2)}
LOOSER = {("bf16_mlp", 1): (1e-2, 1e-2)}


@pytest.fixture(autouse=True)
def _tools():
    require_ptxas()
    c_compiler()


@pytest.fixture
def small_gemms(monkeypatch):
    """Tiled kernels for every contraction, however small (emulating big ones is slow)."""
    monkeypatch.setattr(contraction, "MIN_WORK", 1)
    monkeypatch.setattr(contraction, "MIN_SIDE", 1)
    monkeypatch.setattr(contraction, "MIN_DEPTH", 1)


def _reference(model: onnx.ModelProto, inputs):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})


def _check(model, name, inputs, tmp_path, rtol=1e-4, atol=1e-5, kinds=None, exact=None):
    """Compile for CUDA, run emulated, compare with onnxruntime (or with `exact`: output
    number -> the exactly rounded result, where onnxruntime accumulates in f16)."""
    compiled = compile_model(model, CompileOptions(target="cuda:sm_90", name=name))
    if kinds is not None:
        assert sorted(k.kind for k in compiled.program.launches) == sorted(kinds)
    expected = _reference(model if isinstance(model, onnx.ModelProto) else onnx.load(model), inputs)
    for k, value in (exact or {}).items():
        expected[k] = value
    got = run_emulated(compiled, inputs, expected, tmp_path)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
    return compiled


@pytest.mark.parametrize("name", sorted(E2E))
def test_end_to_end_models(name, tmp_path):
    model = onnx.load(str(E2E[name]))
    rng = np.random.default_rng(0)
    inputs = [
        rng.random([d.dim_value for d in i.type.tensor_type.shape.dim], dtype=np.float32)
        for i in model.graph.input
    ]
    _check(model, name, inputs, tmp_path)


@pytest.mark.parametrize("name", FIXTURES)
def test_hlo_fixtures(name, tmp_path, small_gemms):
    data = np.load(HLO / f"{name.removesuffix('_opt')}.npz")
    inputs = [data[f"in{i}"] for i in range(len(data["in_dtypes"]))]
    outputs = [(DType.from_text(str(d)), data[f"out{i}"]) for i, d in enumerate(data["out_dtypes"])]
    compiled = compile_model(HLO / f"{name}.hlo", CompileOptions(target="cuda:sm_90", name=name))
    got = run_emulated(compiled, inputs, [raw for _, raw in outputs], tmp_path)
    for k, (raw, (dtype, expected)) in enumerate(zip(got, outputs)):
        rtol, atol = LOOSER.get((name, k), TOLERANCES.get(dtype, (0, 0)))
        np.testing.assert_allclose(
            from_storage(raw, dtype),
            from_storage(expected, dtype),
            rtol=rtol,
            atol=atol,
            err_msg=f"output {k}",
        )


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _value(name, dims, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, dims)


# a warp per row, a block per row; 64 and 512 have a whole number of elements per thread,
# so their rows are held in registers (one basic block, no loop)
@pytest.mark.parametrize("columns", [40, 64, 300, 512])
def test_row_fusions(columns, tmp_path):
    rng = np.random.default_rng(1)
    gamma = numpy_helper.from_array(rng.uniform(0.5, 1.5, columns).astype(np.float32), "gamma")
    beta = numpy_helper.from_array(rng.uniform(-1, 1, columns).astype(np.float32), "beta")
    nodes = [
        helper.make_node("Softmax", ["x"], ["probs"], axis=-1),
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["norm"], axis=-1),
    ]
    dims = [3, 5, columns]
    model = _model(
        nodes, [_value("x", dims)], [_value("probs", dims), _value("norm", dims)], [gamma, beta]
    )
    inputs = [rng.normal(0, 3, dims).astype(np.float32)]
    compiled = _check(model, f"rows{columns}", inputs, tmp_path, kinds=["row", "row"])
    size = 32 if columns <= reduction.WARP_ROW else reduction.BLOCK
    assert all(k.block == size and k.grid == 15 for k in compiled.program.launches)
    assert ("bra" not in compiled.program.ptx) == (columns % size == 0)


def test_large_elementwise_fusions_take_several_elements_per_thread(tmp_path):
    """Outputs of 1M elements and more: PER_THREAD elements per thread, the last block's
    past-the-end threads clamped (1025 x 1031 is no multiple of 256 x PER_THREAD)."""
    rng = np.random.default_rng(4)
    dims = [1025, 1031]
    bias = numpy_helper.from_array(rng.normal(size=dims[1:]).astype(np.float32), "bias")
    nodes = [helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Add", ["e", "bias"], ["y"])]
    model = _model(nodes, [_value("x", dims)], [_value("y", dims)], [bias])
    inputs = [rng.normal(size=dims).astype(np.float32)]
    compiled = _check(model, "large", inputs, tmp_path, kinds=["elementwise"])
    per_block = elementwise.BLOCK * elementwise.PER_THREAD
    assert compiled.program.launches[0].grid == -(-dims[0] * dims[1] // per_block)


def test_reductions(tmp_path, monkeypatch):
    """A warp per output, a block per output, and an arg-max (variadic reduce)."""
    monkeypatch.setattr(reduction, "BLOCK_REDUCTION", 1000)
    rng = np.random.default_rng(2)
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0),
        helper.make_node("ReduceMax", ["x"], ["max"], axes=[1, 2], keepdims=0),
        helper.make_node("ArgMax", ["x"], ["arg"], axis=2, keepdims=0),
    ]
    outputs = [_value("sum", [9, 5]), _value("max", [9]), _value("arg", [9, 5], TensorProto.INT64)]
    model = _model(nodes, [_value("x", [9, 5, 301])], outputs, [axes])
    inputs = [rng.normal(size=(9, 5, 301)).astype(np.float32)]
    compiled = _check(model, "reductions", inputs, tmp_path)
    launches = {(k.kind, k.grid) for k in compiled.program.launches}
    assert ("reduction", 9) in launches  # 1505 elements per output: a block each
    assert ("reduction", -(-45 // 8)) in launches  # 301: a warp each


def test_half_precision_reduction_and_softmax(tmp_path):
    rng = np.random.default_rng(3)
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0),
        helper.make_node("Softmax", ["x"], ["probs"], axis=-1),
    ]
    f16 = TensorProto.FLOAT16
    model = _model(
        nodes,
        [_value("x", [6, 200], f16)],
        [_value("sum", [6], f16), _value("probs", [6, 200], f16)],
        [axes],
    )
    inputs = [rng.normal(size=(6, 200)).astype(np.float16)]
    _check(model, "half", inputs, tmp_path, rtol=1e-2, atol=1e-3, kinds=["reduction", "row"])


@pytest.mark.parametrize("large", [False, True])
def test_gemms_with_partial_tiles(large, tmp_path, small_gemms, monkeypatch):
    """Gemm with transposed operands and bias, batched MatMul, f16 MatMul: both tilings,
    sizes that are not multiples of the tiles."""
    if large:
        monkeypatch.setattr(contraction, "LARGE_BLOCKS", 1)
    rng = np.random.default_rng(4)
    a = numpy_helper.from_array(rng.normal(size=(37, 130)).astype(np.float32), "a")
    bias = numpy_helper.from_array(rng.normal(size=(37,)).astype(np.float32), "bias")
    w = numpy_helper.from_array(rng.normal(size=(3, 19, 70)).astype(np.float32), "w")
    h = numpy_helper.from_array(rng.normal(size=(19, 21)).astype(np.float16), "h")
    nodes = [
        helper.make_node("Gemm", ["x", "a", "bias"], ["gemm"], transA=1, transB=1, alpha=0.5),
        helper.make_node("MatMul", ["w", "x3"], ["batched"]),
        helper.make_node("Cast", ["x3"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["x16", "h"], ["half"]),
    ]
    outputs = [
        _value("gemm", [133, 37]),
        _value("batched", [3, 19, 19]),
        _value("half", [3, 70, 21], TensorProto.FLOAT16),
    ]
    model = _model(
        nodes, [_value("x", [130, 133]), _value("x3", [3, 70, 19])], outputs, [a, bias, w, h]
    )
    inputs = [
        rng.normal(size=(130, 133)).astype(np.float32),
        rng.normal(size=(3, 70, 19)).astype(np.float32),
    ]
    half = inputs[1].astype(np.float16).astype(np.float64) @ numpy_helper.to_array(h).astype(
        np.float64
    )
    compiled = _check(
        model, "gemms", inputs, tmp_path, rtol=1e-3, atol=1e-3, exact={2: half.astype(np.float16)}
    )
    assert [k.kind for k in compiled.program.launches].count("gemm") == 3


def test_deep_gemms_split_their_depth(tmp_path, small_gemms):
    """GEMMs of few tiles and a deep k split it (split-K): a MatMul with a bias and ReLU
    (k = 1000: 63 steps of 16, the last partial, in slices of 5 and a last one of 3) and
    a batched MatMul; each takes the tiled kernel and a kernel adding up the slices, the
    partial sums in a temporary of the plan."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "bias"], ["biased"]),
        helper.make_node("Relu", ["biased"], ["y"]),
        helper.make_node("MatMul", ["p", "q"], ["batched"]),
    ]
    inputs = [
        _value("x", [20, 1000]),
        _value("w", [1000, 64]),
        _value("bias", [64]),
        _value("p", [3, 24, 512]),
        _value("q", [3, 512, 40]),
    ]
    model = _model(nodes, inputs, [_value("y", [20, 64]), _value("batched", [3, 24, 40])])
    feeds = [
        rng.normal(size=[d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32)
        for v in inputs
    ]
    kinds = ["gemm", "elementwise"] * 2
    compiled = _check(model, "split", feeds, tmp_path, rtol=1e-4, atol=1e-4, kinds=kinds)
    sizes = {k.name: k.grid for k in compiled.program.launches if k.kind == "gemm"}
    assert sorted(sizes.values()) == [13, 3 * 8]  # 63 steps: slices of 5; 32: of 4
    # the partial sums are temporaries of the plan, in the arena while their GEMM runs
    plan = compiled.plan
    assert plan.workspace_bytes == 0
    assert len([b for b in plan.buffers if b.name.endswith(".temporary")]) == 2


def test_convolutions(tmp_path, small_gemms):
    """Groups, padding, stride and dilation, a 1x1 convolution, bias and ReLU fused."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.normal(size=(8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(size=(8,)).astype(np.float32), "b")
    w1 = numpy_helper.from_array(rng.normal(size=(5, 6, 1, 1)).astype(np.float32), "w1")
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"],
            ["c"],
            group=2,
            pads=[2, 1, 0, 2],
            strides=[2, 1],
            dilations=[2, 1],
        ),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("Conv", ["x", "w1"], ["z"]),
    ]
    outputs = [_value("y", [2, 8, 6, 12]), _value("z", [2, 5, 13, 11])]
    model = _model(nodes, [_value("x", [2, 6, 13, 11])], outputs, [w, b, w1])
    inputs = [rng.normal(size=(2, 6, 13, 11)).astype(np.float32)]
    compiled = _check(model, "convs", inputs, tmp_path, kinds=["gemm", "gemm"])
    assert compiled.program.launches[0].grid >= 2  # the feature groups are batches


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFORMANCE)
def test_conformance_subset(name, tmp_path):
    """The cases test_cuda_gpu.py runs on a GPU, here emulated (about a minute)."""
    (case,) = [c for c in conformance_cases() if c.name == name]
    run_conformance_case(case, run_emulated, tmp_path)


def test_outputs_made_by_copies(tmp_path):
    """An input returned as is, a value returned twice, a constant: the launcher's copies."""
    table = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "table")
    nodes = [
        helper.make_node("Identity", ["x"], ["same"]),
        helper.make_node("Relu", ["x"], ["relu"]),
        helper.make_node("Identity", ["relu"], ["again"]),
        helper.make_node("Identity", ["table"], ["constant"]),
    ]
    outputs = [
        _value("same", [2, 3]),
        _value("relu", [2, 3]),
        _value("again", [2, 3]),
        _value("constant", [2, 3]),
    ]
    model = _model(nodes, [_value("x", [2, 3])], outputs, [table])
    compiled = _check(
        model, "copies", [np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)], tmp_path
    )
    assert len(compiled.program.output_copies) >= 2


def test_a_model_without_inputs(tmp_path):
    value = helper.make_tensor("v", TensorProto.FLOAT, [4], [-2.0, -1.0, 1.0, 2.0])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=value),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    _check(_model(nodes, [], [_value("y", [4])]), "constant", [], tmp_path)


@pytest.mark.parametrize(
    "dims, axis, k, largest, kind",
    [
        ([5, 37], -1, 10, 1, "sort"),  # a block per row, 64 wide (27 padding)
        ([40, 3], 0, 40, 0, "sort"),  # the sorted axis first: rows are columns
        ([2, 3000], 1, 5, 1, "serial"),  # 4096 wide would not fit in shared memory
    ],
)
def test_top_k_sorts(dims, axis, k, largest, kind, tmp_path):
    """TopK (a sort of values and positions): ties (few distinct values) in position
    order, as onnxruntime; the bitonic kernel where rows fit, else the serial one."""
    rng = np.random.default_rng(6)
    kk = numpy_helper.from_array(np.array([k], np.int64), "k")
    node = helper.make_node(
        "TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest, sorted=1
    )
    out = list(dims)
    out[axis] = k
    model = _model(
        [node],
        [_value("x", dims)],
        [_value("values", out), _value("indices", out, TensorProto.INT64)],
        [kk],
    )
    inputs = [rng.integers(-6, 6, size=dims).astype(np.float32)]
    compiled = _check(model, f"topk{kind}", inputs, tmp_path, rtol=0, atol=0)
    assert kind in [launch.kind for launch in compiled.program.launches]


def test_matrix_vector_products(tmp_path):
    """Few rows of C and a deep k (gemv.py): x @ W with a bias and ReLU (columns split
    across a block's warps), x @ W^T (a warp per column), W @ v (few columns: run
    transposed), a batched one, a padded convolution to 4 channels (weights as the rows);
    depths and column counts that are not multiples of 32."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.normal(size=(300, 70)).astype(np.float32), "w")
    wt = numpy_helper.from_array(rng.normal(size=(45, 257)).astype(np.float32), "wt")
    bias = numpy_helper.from_array(rng.normal(size=(70,)).astype(np.float32), "bias")
    kernel = numpy_helper.from_array(rng.normal(size=(4, 16, 3, 3)).astype(np.float32), "k")
    nodes = [
        helper.make_node("Conv", ["image", "k"], ["features"], pads=[1, 1, 1, 1]),
        helper.make_node("Gemm", ["x", "w", "bias"], ["xw"]),
        helper.make_node("Relu", ["xw"], ["y"]),
        helper.make_node("Gemm", ["u", "wt"], ["z"], transB=1),
        helper.make_node("MatMul", ["wt", "v"], ["column"]),
        helper.make_node("MatMul", ["p", "q"], ["batched"]),
    ]
    inputs = [
        _value("x", [3, 300]),
        _value("u", [2, 257]),
        _value("v", [257, 2]),
        _value("p", [4, 1, 128]),
        _value("q", [4, 128, 50]),
        _value("image", [1, 16, 9, 9]),
    ]
    outputs = [
        _value("y", [3, 70]),
        _value("z", [2, 45]),
        _value("column", [45, 2]),
        _value("batched", [4, 1, 50]),
        _value("features", [1, 4, 9, 9]),
    ]
    model = _model(nodes, inputs, outputs, [w, wt, bias, kernel])
    feeds = [
        rng.normal(size=[d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in inputs
    ]
    compiled = _check(model, "gemv", feeds, tmp_path)
    assert [k.kind for k in compiled.program.launches].count("gemv") == 5


def test_random_draws_advance_per_run_as_on_the_cpu(tmp_path):
    """The rng counters live in the GPU module's globals: the first and the third run draw
    what the CPU build draws in its first and third run (Philox bits, then Box-Muller)."""
    nodes = [
        helper.make_node("RandomNormal", [], ["z"], shape=[6, 40], seed=2.0),
        helper.make_node("Bernoulli", ["p"], ["hit"], seed=3.0),
    ]
    model = _model(nodes, [_value("p", [300])], [_value("z", [6, 40]), _value("hit", [300])])
    model.opset_import[0].version = 15
    p = np.linspace(0, 1, 300, dtype=np.float32)
    cpu = aotc_backend.prepare(model)
    on_cpu = [cpu.run([p]) for _ in range(3)]
    compiled = compile_model(model, CompileOptions(target="cuda:sm_90", name="rnd"))
    for runs in (1, 3):
        got = run_emulated(compiled, [p], on_cpu[runs - 1], tmp_path / f"runs{runs}", runs=runs)
        for g, want in zip(got, on_cpu[runs - 1]):
            np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(on_cpu[0][0], on_cpu[2][0])
