"""The host side of CUDA models: artifacts, a C program linking them with no CUDA SDK, and
what it does without a driver, on a GPU too old for its cubins, and so on (needs ptxas
and a C compiler; the driver is absent or the stand-in fake_cuda.c)."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import numpy as np
import pytest
from aotc_testing import build_c
from cuda_testing import (
    REPO,
    build_driver,
    build_emulation,
    c_compiler,
    fake_driver,
    fake_environment,
    require_ptxas,
    run_driver,
)

from aotc.driver import CompileOptions, compile_model

MNIST = REPO / "examples" / "mnist" / "mnist.onnx"


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    """mnist compiled for sm_80 and sm_90 by the CLI, and its driver program."""
    require_ptxas()
    c_compiler()
    build = tmp_path_factory.mktemp("build")
    argv = [
        sys.executable,
        "-m",
        "aotc",
        "compile",
        str(MNIST),
        "--target",
        "cuda:sm_80,sm_90",
        "-o",
        str(build),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    assert "CUDA sm_80, sm_90" in result.stdout
    compiled = compile_model(MNIST, CompileOptions(target="cuda:sm_80,sm_90"))
    program = build_driver(compiled, build, build / "driver")
    return compiled, build, program


def _symbols(path) -> dict[str, str]:
    result = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True)
    table = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            table[parts[-1]] = parts[-2]
    return table


def test_artifacts(mnist):
    compiled, build, _ = mnist
    assert sorted(p.name for p in build.iterdir() if not p.name.startswith("driver")) == [
        "aotc_bounded.h",
        "aotc_cuda.h",
        "libmnist.a",
        "mnist.h",
        "mnist.o",
    ]
    members = subprocess.run(
        ["ar", "t", str(build / "libmnist.a")], capture_output=True, text=True, check=True
    ).stdout.split()
    assert members == ["mnist.o", "aotc_cuda.o", "aotc_bounded.o"]
    symbols = _symbols(build / "mnist.o")
    for name in (
        "mnist_cuda_init",
        "mnist_cuda_run",
        "mnist_cuda_run_generic",
        "mnist_cuda_run_kernel",
        "mnist_cuda_destroy",
        "mnist_cuda_last_error",
    ):
        assert symbols.get(name) == "T", name
    for name in ("mnist_cubin_sm_80", "mnist_cubin_sm_90", "mnist_ptx", "mnist_weights"):
        assert symbols.get(name) == "R", name
    assert symbols.get("aotc_cuda_load") == "U"  # from aotc_cuda.o
    header = (build / "mnist.h").read_text()
    prototype = (
        "int mnist_cuda_run( mnist_cuda_ctx *ctx, aotc_cuda_ptr input, aotc_cuda_ptr "
        "probs, aotc_cuda_stream stream);"
    )
    assert prototype in " ".join(header.split())
    assert "#define MNIST_INPUT_BYTES 3136u" in header
    assert f"#define MNIST_NUM_KERNELS {len(compiled.program.launches)}" in header


def test_the_same_compile_gives_the_same_files(mnist, tmp_path):
    compiled, build, _ = mnist
    compiled.write(tmp_path)
    for name in ("mnist.h", "mnist.o", "libmnist.a", "aotc_cuda.h", "aotc_bounded.h"):
        assert (tmp_path / name).read_bytes() == (build / name).read_bytes(), name


def test_header_compiles_as_c_and_cpp(mnist, tmp_path):
    _, build, _ = mnist
    source = tmp_path / "both.c"
    source.write_text(
        '#include "mnist.h"\nint main(void) { mnist_cuda_ctx c; '
        "return (int)sizeof c > 0 ? 0 : 1; }\n"
    )
    subprocess.run(
        [
            c_compiler(),
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            f"-I{build}",
            "-c",
            str(source),
            "-o",
            str(tmp_path / "c.o"),
        ],
        check=True,
    )
    cxx = os.environ.get("CXX") or "g++"
    if subprocess.run(["which", cxx], capture_output=True, check=False).returncode == 0:
        subprocess.run(
            [
                cxx,
                "-x",
                "c++",
                "-Wall",
                "-Werror",
                f"-I{build}",
                "-c",
                str(source),
                "-o",
                str(tmp_path / "cpp.o"),
            ],
            check=True,
        )


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="a CUDA driver is here")
def test_without_a_driver_init_fails_with_a_message(mnist, tmp_path):
    program = mnist[2]
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    result, _ = run_driver(
        program, [np.zeros((1, 784), np.float32)], [np.zeros((1, 10), np.float32)], tmp_path, env
    )
    assert result.returncode == 2
    assert result.stderr.startswith("-1 mnist: cannot open the CUDA driver: libcuda.so.1")


def _fake_run(mnist, tmp_path, **settings):
    compiled, _, program = mnist
    library, _ = build_emulation(compiled, tmp_path / "emulation")
    log = tmp_path / "log.txt"
    env = fake_environment(fake_driver(tmp_path / "fake"), library, log=log, **settings)
    inputs = [np.random.default_rng(0).random((1, 784), dtype=np.float32)]
    result, outputs = run_driver(program, inputs, [np.zeros((1, 10), np.float32)], tmp_path, env)
    lines = log.read_text().splitlines() if log.exists() else []
    return result, outputs, lines


@pytest.mark.parametrize(
    "arch, image, loaded",
    [(80, "sm_80 cubin", "load cubin sm_80"), (86, "sm_80 cubin", "load cubin sm_80"),
     (90, "sm_90 cubin", "load cubin sm_90"), (120, "PTX for sm_90 (JIT)", "load ptx sm_90")],
)  # fmt: skip
def test_init_picks_the_image_for_the_device(mnist, tmp_path, arch, image, loaded):
    result, outputs, log = _fake_run(mnist, tmp_path, arch=arch)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == image
    assert log[0] == loaded
    compiled = mnist[0]
    launches = [line.split() for line in log[1:]]
    assert launches == [
        ["launch", k.name, str(k.grid), str(k.block)] for k in compiled.program.launches
    ]
    assert np.isclose(outputs[0].sum(), 1, rtol=1e-5)  # softmax probabilities


def test_a_gpu_older_than_every_image_is_an_error(mnist, tmp_path):
    result, _, log = _fake_run(mnist, tmp_path, arch=75)
    assert result.returncode == 2
    assert result.stderr.startswith("-2 mnist: the GPU is sm_75: no kernel image")
    assert log == []


def test_driver_errors_carry_the_drivers_message(mnist, tmp_path):
    result, _, _ = _fake_run(mnist, tmp_path, init=100)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "100 mnist: cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"
    )


def test_run_before_init_is_an_error(mnist, tmp_path):
    _, build, _ = mnist
    source = tmp_path / "early.c"
    source.write_text(
        '#include <stdio.h>\n#include "mnist.h"\nint main(void) {\n'
        "    mnist_cuda_ctx ctx = {0};\n"
        "    int status = mnist_cuda_run(&ctx, 0, 0, NULL);\n"
        '    printf("%d %s", status, mnist_cuda_last_error(&ctx));\n'
        "    mnist_cuda_destroy(&ctx);\n    return 0;\n}\n"
    )
    program = tmp_path / "early"
    build_c([source], program, [build], [build / "libmnist.a"], system=("-ldl",))
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=60, check=False)
    assert result.stdout.startswith("-3 run: invalid model context")
