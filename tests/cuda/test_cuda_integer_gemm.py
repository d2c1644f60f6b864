"""Integer contractions on the SIMT tiled GEMM (simt_gemm.py): the ONNX frontend's
quantized products (MatMulInteger, ConvInteger, QLinearMatMul: 8-bit operands widened
to s16 by their converts, s32 results), summed exactly in i32, by dp4a where both
operands' values are bytes, else by i32 multiply-adds.  Emulated (emulator.c computes
dp4a as PTX defines it) and on a GPU where there is one; every result is compared
exactly with onnx.reference, and each test checks the kernel form its contractions get:
a "gemm" launch, dp4a instructions in its PTX or none."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from cuda_testing import RUNNERS, tiled_tools
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aotc.backends.cuda import contraction
from aotc.driver import CompileOptions, compile_model

U8, S8, S32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
NUMPY = {U8: np.uint8, S8: np.int8}
DP4A = re.compile(r"dp4a\.([us])32\.([us])32")


@pytest.fixture(autouse=True)
def _tools(monkeypatch):
    tiled_tools(monkeypatch)


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _value(name, dims, dtype):
    return helper.make_tensor_value_info(name, dtype, dims)


def _bytes(rng, dtype, dims) -> np.ndarray:
    """Random values over the whole range of u8 or s8."""
    info = np.iinfo(NUMPY[dtype])
    return rng.integers(info.min, info.max + 1, size=dims).astype(NUMPY[dtype])


def _run_exact(runner, model, feeds: dict, name, tmp_path):
    """Compile for CUDA, run, and compare every output exactly with onnx.reference."""
    compiled = compile_model(model, CompileOptions(target="cuda:sm_90", name=name))
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = runner(compiled, list(feeds.values()), expected, tmp_path)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    return compiled


def _gemm_kernels(compiled) -> dict[str, set]:
    """The tiled GEMM kernels by name: the dp4a (A's, B's sign) forms in their PTX."""
    ptx = compiled.program.ptx
    bodies = dict(re.findall(r"\.entry (\w+)\((.*?)\n}", ptx, re.DOTALL))
    gemms = [k.name for k in compiled.program.launches if k.kind == "gemm"]
    return {name: set(DP4A.findall(bodies[name])) for name in gemms}


@pytest.mark.parametrize(
    "weights, zero_points, large",
    [("constant", True, False), ("constant", False, True), ("runtime", True, True)]
    + [("runtime", False, False)],
)
@pytest.mark.parametrize("runner", RUNNERS)
def test_matmul_integer_by_dp4a(runner, weights, zero_points, large, tmp_path, monkeypatch):
    """u8 x s8 MatMulInteger, weights constant or an input, with zero points (a scalar for
    A, a vector of columns for B) or none; M, N, K no multiples of the tiles, K (83) none
    of 4; both tilings (a step 32 or 64 k deep).  One tiled kernel of u8 by s8 dp4a."""
    if large:
        monkeypatch.setattr(contraction, "LARGE_BLOCKS", 1)
    rng = np.random.default_rng(21)
    x, w = _bytes(rng, U8, (2, 37, 83)), _bytes(rng, S8, (83, 70))
    names = ["x", "w"]
    initializers = [numpy_helper.from_array(w, "w")] if weights == "constant" else []
    if zero_points:
        names += ["x_zero", "w_zero"]
        initializers += [
            numpy_helper.from_array(np.array(131, np.uint8), "x_zero"),
            numpy_helper.from_array(_bytes(rng, S8, (70,)), "w_zero"),
        ]
    inputs = [_value("x", x.shape, U8)]
    feeds = {"x": x}
    if weights == "runtime":
        inputs.append(_value("w", w.shape, S8))
        feeds["w"] = w
    node = helper.make_node("MatMulInteger", names, ["y"])
    model = _model([node], inputs, [_value("y", [2, 37, 70], S32)], initializers)
    compiled = _run_exact(runner, model, feeds, f"mmi_{weights}", tmp_path)
    assert list(_gemm_kernels(compiled).values()) == [{("u", "s")}]


@pytest.mark.parametrize("dtype", [S8, U8], ids=["s8", "u8"])
@pytest.mark.parametrize("runner", RUNNERS)
def test_same_signed_bytes_multiply_with_one_side_flipped(runner, dtype, tmp_path):
    """s8 x s8 and u8 x u8 MatMulInteger with zero points: the frontend flips one side's
    sign bit (quantize.sign_flipped), so the products are u8 by s8 dp4a all the same."""
    rng = np.random.default_rng(22)
    a, b = _bytes(rng, dtype, (45, 130)), _bytes(rng, dtype, (130, 33))
    zeros = [numpy_helper.from_array(_bytes(rng, dtype, ()), n) for n in ("a_zero", "b_zero")]
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zero", "b_zero"], ["y"])
    inputs = [_value("a", a.shape, dtype), _value("b", b.shape, dtype)]
    model = _model([node], inputs, [_value("y", [45, 33], S32)], zeros)
    compiled = _run_exact(runner, model, {"a": a, "b": b}, "flipped", tmp_path)
    assert list(_gemm_kernels(compiled).values()) == [{("u", "s")}]


@pytest.mark.parametrize("runner", RUNNERS)
def test_conv_integer(runner, tmp_path):
    """ConvInteger u8 x s8 with padding, stride and an input zero point (weights without
    one: convolved as bytes, by dp4a, the zero point applied after), and one whose
    weights have a zero point (centered operands, 9-bit values in s16: i32 sums); depths
    5 * 3 * 3 = 45 and 4 * 2 * 2 = 16 of the image's channels and taps."""
    rng = np.random.default_rng(23)
    x, w = _bytes(rng, U8, (2, 5, 11, 13)), _bytes(rng, S8, (7, 5, 3, 3))
    x2, w2 = _bytes(rng, U8, (1, 4, 9, 10)), _bytes(rng, S8, (6, 4, 2, 2))
    initializers = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(117, np.uint8), "x_zero"),
        numpy_helper.from_array(w2, "w2"),
        numpy_helper.from_array(np.array(140, np.uint8), "x2_zero"),
        numpy_helper.from_array(np.array(-3, np.int8), "w2_zero"),
    ]
    nodes = [
        helper.make_node(
            "ConvInteger", ["x", "w", "x_zero"], ["y"], pads=[1, 2, 1, 0], strides=[2, 1]
        ),
        helper.make_node("ConvInteger", ["x2", "w2", "x2_zero", "w2_zero"], ["y2"]),
    ]
    inputs = [_value("x", x.shape, U8), _value("x2", x2.shape, U8)]
    outputs = [_value("y", [2, 7, 6, 11], S32), _value("y2", [1, 6, 8, 9], S32)]
    model = _model(nodes, inputs, outputs, initializers)
    compiled = _run_exact(runner, model, {"x": x, "x2": x2}, "convint", tmp_path)
    forms = sorted(_gemm_kernels(compiled).values(), key=len)
    assert forms == [set(), {("s", "u")}]  # A: the s8 kernel; the centered one in i32


@pytest.mark.parametrize("runner", RUNNERS)
def test_qlinear_matmul_requantizes_in_the_gemm_epilogue(runner, tmp_path):
    """QLinearMatMul of u8 activations by symmetric s8 weights (per-column scales, as
    onnxruntime's quantize_static writes them): the input zero point's term, the scaling,
    rounding and saturation to u8 are the epilogue of the one dp4a kernel."""
    rng = np.random.default_rng(24)
    a, w = _bytes(rng, U8, (50, 77)), _bytes(rng, S8, (77, 40))
    initializers = [
        numpy_helper.from_array(np.array(0.02, np.float32), "a_scale"),
        numpy_helper.from_array(np.array(121, np.uint8), "a_zero"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(rng.uniform(0.001, 0.01, 40).astype(np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(40, np.int8), "w_zero"),
        numpy_helper.from_array(np.array(0.9, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(118, np.uint8), "y_zero"),
    ]
    names = ["a", "a_scale", "a_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"]
    node = helper.make_node("QLinearMatMul", names, ["y"])
    model = _model([node], [_value("a", a.shape, U8)], [_value("y", [50, 40], U8)], initializers)
    compiled = _run_exact(runner, model, {"a": a}, "qlinear", tmp_path)
    assert [k.kind for k in compiled.program.launches] == ["gemm"]
    assert list(_gemm_kernels(compiled).values()) == [{("u", "s")}]


@pytest.mark.parametrize("runner", RUNNERS)
def test_deep_integer_gemm_splits_its_depth(runner, tmp_path):
    """A MatMulInteger of few tiles and a deep k (1000: 16 steps of 64) splits it: i32
    partial sums in the workspace, added up by a second kernel."""
    rng = np.random.default_rng(25)
    x, w = _bytes(rng, U8, (20, 1000)), _bytes(rng, S8, (1000, 64))
    node = helper.make_node("MatMulInteger", ["x", "w"], ["y"])
    model = _model(
        [node],
        [_value("x", x.shape, U8)],
        [_value("y", [20, 64], S32)],
        [numpy_helper.from_array(w, "w")],
    )
    compiled = _run_exact(runner, model, {"x": x}, "splitint", tmp_path)
    assert [k.kind for k in compiled.program.launches] == ["gemm", "elementwise"]
    assert compiled.program.launches[0].grid == 4  # one tile, four slices of 4 steps
    assert list(_gemm_kernels(compiled).values()) == [{("u", "s")}]
