"""CUDA models on a real GPU, compared with the CPU backend: the end-to-end models, every
benchmark model, a conformance subset, image selection and driver errors.  Skipped
without an NVIDIA GPU and its driver (nvidia-smi lists none); needs ptxas and cc."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from aotc_testing import bench_module
from cuda_testing import (
    CONFORMANCE,
    REPO,
    build_driver,
    c_compiler,
    conformance_cases,
    has_gpu,
    link_program,
    require_ptxas,
    run_conformance_case,
    run_driver,
    run_on_gpu,
)

from aotc.driver import CompileOptions, compile_model
from aotc.ir.types import from_storage, to_storage

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason="no NVIDIA GPU with a driver here"),
]

E2E = {
    "mnist": REPO / "examples" / "mnist" / "mnist.onnx",
    "cnn": REPO / "examples" / "cnn" / "cnn.onnx",
}
# float32 kernels sum in other orders than the CPU's (tiles, trees of partials, fma)
RTOL, ATOL = 1e-3, 1e-4


BENCH = bench_module("models")


@pytest.fixture(autouse=True)
def _tools():
    require_ptxas()
    c_compiler()


def _gpu_arch() -> str:
    import subprocess

    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    )
    major, minor = result.stdout.split()[0].split(".")
    return f"sm_{major}{minor}"


def _compare_with_cpu(model, name, inputs, tmp_path, atol_scale=0.0):
    cpu = compile_model(model, CompileOptions(name=name)).load()
    expected = cpu.run(inputs)
    gpu = compile_model(model, CompileOptions(target=f"cuda:sm_80,{_gpu_arch()}", name=name))
    raw = [to_storage(x, spec.dtype) for x, spec in zip(inputs, gpu.inputs)]
    like = [np.zeros(spec.dims, spec.dtype.storage) for spec in gpu.outputs]
    got = run_on_gpu(gpu, raw, like, tmp_path)
    for g, e, spec in zip(got, expected, gpu.outputs):
        atol = max(ATOL, atol_scale * float(np.max(np.abs(e), initial=0)))
        np.testing.assert_allclose(
            from_storage(g, spec.dtype), e, rtol=RTOL, atol=atol, err_msg=spec.name
        )


@pytest.mark.parametrize("name", sorted(E2E))
def test_end_to_end_models(name, tmp_path):
    model = onnx.load(str(E2E[name]))
    rng = np.random.default_rng(0)
    inputs = [
        rng.random([d.dim_value for d in i.type.tensor_type.shape.dim], dtype=np.float32)
        for i in model.graph.input
    ]
    _compare_with_cpu(model, name, inputs, tmp_path)


@pytest.mark.parametrize("name", list(BENCH.BENCH_MODELS))
def test_benchmark_models(name, tmp_path):
    model = BENCH.BENCH_MODELS[name]()
    inputs = list(BENCH.model_inputs(model).values())
    # int8 models: a float on a rounding tie of a requantization goes a step either way
    atol_scale = BENCH.QUANTIZED_ATOL_SCALE if name in BENCH.QUANTIZED else 0.0
    _compare_with_cpu(model, name, inputs, tmp_path, atol_scale)


@pytest.mark.parametrize("name", CONFORMANCE)
def test_conformance_subset(name, tmp_path):
    (case,) = [c for c in conformance_cases() if c.name == name]
    run_conformance_case(case, run_on_gpu, tmp_path)


def test_init_loads_the_cubin_of_this_gpu(tmp_path):
    arch = _gpu_arch()
    compiled = compile_model(E2E["mnist"], CompileOptions(target=f"cuda:{arch}", name="mnist"))
    compiled.write(tmp_path / "build")
    program = build_driver(compiled, tmp_path / "build", tmp_path / "driver")
    inputs = [np.zeros((1, 784), np.float32)]
    result, outputs = run_driver(program, inputs, [np.zeros((1, 10), np.float32)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{arch} cubin"
    np.testing.assert_allclose(outputs[0].sum(), 1, rtol=1e-5)


def test_a_missing_device_is_an_error_with_the_drivers_message(tmp_path):
    compiled = compile_model(E2E["mnist"], CompileOptions(target="cuda:sm_80", name="mnist"))
    compiled.write(tmp_path / "build")
    source = tmp_path / "bad.c"
    source.write_text(
        '#include <stdio.h>\n#include "mnist.h"\nint main(void) {\n'
        "    mnist_cuda_ctx ctx;\n    int status = mnist_cuda_init(&ctx, 999);\n"
        '    printf("%d %s", status, mnist_cuda_last_error(&ctx));\n'
        "    mnist_cuda_destroy(&ctx);\n    return 0;\n}\n"
    )
    import subprocess

    program = link_program(source, tmp_path / "build", "mnist", tmp_path / "bad")
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=60, check=False)
    assert result.stdout.startswith("101 mnist: cuDeviceGet: CUDA_ERROR_INVALID_DEVICE")
