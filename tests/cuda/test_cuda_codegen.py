"""Kernels to PTX to cubin: the end-to-end and benchmark models compile for sm_80 and sm_90
(ptxas checks every PTX), with the kernel forms and launches expected (needs ptxas)."""

from __future__ import annotations

import re
import struct

import numpy as np
import onnx
import pytest
from aotc_testing import bench_module, parsed_dot_fusion
from cuda_testing import REPO, require_ptxas
from onnx import TensorProto, helper, numpy_helper

from aotc.backends.cuda.codegen import calls_libdevice
from aotc.backends.cuda.program import build_program
from aotc.backends.cuda.target import parse_cuda_target
from aotc.driver import CompileOptions, compile_model
from aotc.errors import UnsupportedError

BENCH_MODELS = bench_module("models").BENCH_MODELS

E2E = {
    "mnist": REPO / "examples" / "mnist" / "mnist.onnx",
    "cnn": REPO / "examples" / "cnn" / "cnn.onnx",
}
# light benchmark models checked in every run; the others (ImageNet networks, ~10-60 s
# each here) are marked slow: `pytest -m slow tests/cuda` or bench/gpu.py --compile-only
LIGHT_BENCH = ("mlp_16_32_4", "mlp_784_b1", "mlp_784_b64", "transformer_256x128")
HEAVY_BENCH = tuple(name for name in BENCH_MODELS if name not in LIGHT_BENCH)
ARCHS = ("sm_80", "sm_90")
MAX_STATIC_SHARED = 48 * 1024


@pytest.fixture(autouse=True)
def _ptxas():
    require_ptxas()


def cubin_arch(cubin: bytes) -> int:
    """The SM a cubin is for, from its ELF e_flags (bits 0-7 or, newer, 8-15)."""
    assert cubin[:4] == b"\x7fELF"
    (flags,) = struct.unpack_from("<I", cubin, 0x30)
    return flags & 0xFF if flags & 0xFF >= 20 else (flags >> 8) & 0xFF


def check_compiled(compiled) -> None:
    """Cubins for both architectures, the PTX of the newest, the blobs in the host
    object, and launch configurations every GPU of the architectures can run."""
    program = compiled.program
    assert tuple(program.cubins) == ARCHS
    for arch, cubin in program.cubins.items():
        assert cubin_arch(cubin) == int(arch[3:])
        assert cubin in program.host_object
    assert ".target sm_90" in program.ptx
    assert program.ptx.encode() in program.host_object
    entries = re.findall(r"^\.visible \.entry (\w+)\(", program.ptx, re.MULTILINE)
    assert sorted(entries) == sorted(k.name for k in program.launches)
    assert len({k.name for k in program.launches}) == len(program.launches)
    for k in program.launches:
        assert 1 <= k.block <= 1024 and 1 <= k.grid < 2**31, k
        assert k.shared_bytes <= MAX_STATIC_SHARED, k
        assert k.cooperative or k.shared_bytes == 0, k
        assert k.bytes > 0
    if program.weights:
        assert program.weights in program.host_object


@pytest.mark.parametrize("name", sorted(E2E))
def test_end_to_end_models(name):
    compiled = compile_model(E2E[name], CompileOptions(target="cuda:sm_80,sm_90", name=name))
    check_compiled(compiled)


@pytest.mark.parametrize("name", LIGHT_BENCH)
def test_light_benchmark_models(name):
    compiled = compile_model(
        BENCH_MODELS[name](), CompileOptions(target="cuda:sm_80,sm_90", name=name)
    )
    check_compiled(compiled)


@pytest.mark.slow
@pytest.mark.parametrize("name", HEAVY_BENCH)
def test_heavy_benchmark_models(name):
    compiled = compile_model(
        BENCH_MODELS[name](), CompileOptions(target="cuda:sm_80,sm_90", name=name)
    )
    check_compiled(compiled)


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _f32(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def test_kernel_forms():
    """A GEMM with its epilogue, a row fusion, reductions by warps and by blocks."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(256, 256)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(size=(256,)).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["dense"]),
        helper.make_node("Softmax", ["x"], ["probs"], axis=-1),
        helper.make_node("ReduceSum", ["x", "axis1"], ["rows"], keepdims=0),
        helper.make_node("Flatten", ["x"], ["flat"], axis=0),
        helper.make_node("ReduceMax", ["flat"], ["peak"], keepdims=0, axes=[1]),
    ]
    outputs = [
        _f32("dense", [128, 256]),
        _f32("probs", [128, 256]),
        _f32("rows", [128]),
        _f32("peak", [1]),
    ]
    axis = numpy_helper.from_array(np.array([1], np.int64), "axis1")
    model = _model(nodes, [_f32("x", [128, 256])], outputs, [w, b, axis])
    compiled = compile_model(model, CompileOptions(target="cuda:sm_90", name="forms"))
    kinds = [(k.kind, k.block, k.grid) for k in compiled.program.launches]
    # the GEMM makes 8 tiles of 64 x 64: too few blocks, so its 16 steps of depth split
    # in 4 slices (split-K), which an elementwise kernel adds up (with the epilogue)
    assert sorted(kind for kind, _, _ in kinds) == [
        "elementwise",
        "gemm",
        "reduction",
        "reduction",
        "row",
    ]
    rows = [v for v in kinds if v[0] == "reduction" and v[2] == 128 // 8]
    whole = [v for v in kinds if v[0] == "reduction" and v[2] == 1]
    assert len(rows) == 1 and len(whole) == 1  # a warp per row; a block for 32768 elements
    gemm = next(k for k in compiled.program.launches if k.kind == "gemm")
    assert gemm.grid == 8 * 4
    assert gemm.flops == 2 * 128 * 256 * 256 + 2 * 128 * 256  # the epilogue's too


PARSED_DOT_FUSION = parsed_dot_fusion(1024, 64, 1024)


def test_a_parsed_fusions_recorded_kind_is_not_trusted(tmp_path):
    """The kernel follows the fusion's body (aotc/ir/fusion_kinds.py): a GEMM with its
    epilogue, in one kernel."""
    path = tmp_path / "parsed.hlo"
    path.write_text(PARSED_DOT_FUSION)
    compiled = compile_model(path, CompileOptions(target="cuda:sm_90", name="parsed"))
    assert [k.kind for k in compiled.program.launches] == ["gemm"]


def test_math_functions_link_libdevice():
    nodes = [
        helper.make_node("Sin", ["x"], ["s"]),
        helper.make_node("Pow", ["s", "x"], ["p"]),
        helper.make_node("Mod", ["p", "x"], ["y"], fmod=1),
    ]
    model = _model(nodes, [_f32("x", [64])], [_f32("y", [64])])
    compiled = compile_model(model, CompileOptions(target="cuda:sm_80,sm_90", name="math"))
    program = build_program(compiled.module, compiled.plan, "math", parse_cuda_target("cuda:sm_90"))
    assert calls_libdevice(program.module)
    assert "__nv_" not in compiled.program.ptx  # inlined and internalized away
    check_compiled(compiled)


def test_control_flow_is_refused_in_one_line():
    fixture = REPO / "tests" / "fixtures" / "hlo" / "fori_loop.hlo"
    with pytest.raises(UnsupportedError, match="the CUDA backend does not run while") as error:
        compile_model(fixture, CompileOptions(target="cuda:sm_90"))
    assert "\n" not in str(error.value)
