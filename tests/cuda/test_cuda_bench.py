"""bench/gpu.py's plumbing (ctypes loading, CUDA events, per-kernel launches, the report)
run against the stand-in driver with emulated kernels; timings there mean nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from aotc_testing import bench_module
from cuda_testing import (
    REPO,
    build_emulation,
    c_compiler,
    fake_driver,
    fake_environment,
    require_ptxas,
)

from aotc.driver import CompileOptions, compile_model

GPU_BENCH = REPO / "bench" / "gpu.py"


def test_compile_only_needs_no_gpu(tmp_path):
    require_ptxas()
    c_compiler()
    result = subprocess.run(
        [sys.executable, str(GPU_BENCH), "mlp_16_32_4", "--compile-only"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("mlp_16_32_4: 2 kernels, cubins sm_80")


def test_a_run_against_the_stand_in_driver(tmp_path):
    require_ptxas()
    c_compiler()
    name = "mlp_16_32_4"
    model = bench_module("models").BENCH_MODELS[name]()
    compiled = compile_model(model, CompileOptions(target="cuda:sm_90", name=name))
    library, _ = build_emulation(compiled, tmp_path / "emulation")
    env = fake_environment(fake_driver(tmp_path / "fake"), library)
    out = tmp_path / "results.md"
    argv = [
        sys.executable,
        str(GPU_BENCH),
        name,
        "--reps",
        "2",
        "--no-torch",
        "--no-gemm",
        "--no-fusions",
        "--copy-mb",
        "1",
        "--out",
        str(out),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    text = out.read_text()
    assert text.startswith("# aotc on GPU sm_90")
    row = next(line for line in text.splitlines() if line.startswith(f"| {name} | 2 |"))
    assert row.split("|")[6].strip() == "True"  # matches the CPU backend
    assert text.count(f"| {name} | ") == 3  # the model's row and its two kernels


def test_without_a_driver_it_says_so(tmp_path):
    # an empty libcuda.so.1 first on the library path: the loader stops at it ("file too
    # short"), so bench/gpu.py finds no driver even on a machine that has one
    (tmp_path / "libcuda.so.1").write_bytes(b"")
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    probe = subprocess.run(
        [sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"],
        capture_output=True,
        env=env,
        check=False,
    )
    if probe.returncode == 0:
        pytest.skip("libcuda.so.1 still loads here (preloaded?): no driver-less run to check")
    result = subprocess.run(
        [sys.executable, str(GPU_BENCH), "mlp_16_32_4"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "bench/gpu.py: no CUDA driver" in result.stderr, result.stderr
    assert "--compile-only" in result.stderr
