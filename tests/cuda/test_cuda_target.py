"""CUDA targets and tools: `--target cuda:...` parsing, finding ptxas and libdevice, and the
one-line errors when something is missing (no GPU needed, no ptxas needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aotc.backends.cuda import tools
from aotc.backends.cuda.target import (
    CudaTargetError,
    arch_number,
    is_cuda_target,
    parse_cuda_target,
)
from aotc.errors import ToolError

REPO = Path(__file__).resolve().parent.parent.parent
MNIST = REPO / "examples" / "mnist" / "mnist.onnx"


def test_parse_one_and_several_architectures():
    assert parse_cuda_target("cuda:sm_90").archs == ("sm_90",)
    target = parse_cuda_target("cuda:sm_90,sm_80,sm_90")
    assert target.archs == ("sm_80", "sm_90")  # oldest first, once each
    assert target.newest == "sm_90"
    assert "sm_80, sm_90" in target.describe()
    assert not target.tf32


def test_tf32_is_asked_for():
    target = parse_cuda_target("cuda:sm_80,sm_90+tf32")
    assert target.archs == ("sm_80", "sm_90") and target.tf32
    assert "TF32" in target.describe()


def test_newest_portable_architecture_gives_the_ptx():
    """sm_90a code runs on sm_90 only, so the fallback PTX is the newest plain arch's."""
    assert parse_cuda_target("cuda:sm_80,sm_90a").newest == "sm_80"
    assert parse_cuda_target("cuda:sm_90a").newest == "sm_90a"
    assert arch_number("sm_90a") == 90 and arch_number("sm_120") == 120


@pytest.mark.parametrize(
    "spec, words",
    [
        ("cuda:", "name architectures"),
        ("cuda:sm_70", "older than sm_80"),
        ("cuda:volta", "not a GPU architecture"),
        ("cuda:sm_999", "cannot generate code for sm_999"),
        ("cuda:sm_90+fast", r"unknown option '\+fast'"),
        ("cuda:sm_90+tf32+fast", r"unknown option '\+fast' \(known: \+tf32"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, words):
    with pytest.raises(CudaTargetError, match=words) as error:
        parse_cuda_target(spec)
    assert "\n" not in str(error.value)


def test_cuda_specs_are_recognized():
    assert is_cuda_target("cuda:sm_90") and is_cuda_target(" cuda:sm_80")
    assert not is_cuda_target("host") and not is_cuda_target("x86_64:cuda")


def test_ptxas_from_the_environment_variable(monkeypatch, tmp_path):
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("AOTC_PTXAS", str(fake))
    assert tools.find_ptxas() == fake
    assert tools.ptxas_version(fake) == "release 12.4, V12.4.131"
    monkeypatch.setenv("AOTC_PTXAS", str(tmp_path / "missing"))
    with pytest.raises(ToolError, match=r"from \$AOTC_PTXAS"):
        tools.find_ptxas()


def _no_cuda_anywhere(monkeypatch, tmp_path):
    monkeypatch.delenv("AOTC_PTXAS", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tools, "_DEFAULT_CUDA", tmp_path / "no-cuda")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])


def test_missing_ptxas_and_libdevice_say_how_to_get_them(monkeypatch, tmp_path):
    _no_cuda_anywhere(monkeypatch, tmp_path)
    for find in (tools.find_ptxas, tools.find_libdevice):
        with pytest.raises(ToolError) as error:
            find()
        assert "pip install 'aotc[cuda]'" in str(error.value)
        assert "\n" not in str(error.value)


def test_tools_of_the_wheel_layout_are_found(monkeypatch, tmp_path):
    """pip's nvidia-cuda-nvcc-cu12 puts them in site-packages/nvidia/cuda_nvcc."""
    _no_cuda_anywhere(monkeypatch, tmp_path)
    wheel = tmp_path / "site" / "nvidia" / "cuda_nvcc"
    (wheel / "bin").mkdir(parents=True)
    (wheel / "nvvm" / "libdevice").mkdir(parents=True)
    ptxas = wheel / "bin" / "ptxas"
    ptxas.write_text("#!/bin/sh\n")
    ptxas.chmod(0o755)
    (wheel / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    assert tools.find_ptxas() == ptxas
    assert tools.find_libdevice() == wheel / "nvvm" / "libdevice" / "libdevice.10.bc"


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "aotc", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


def test_cli_refuses_an_old_architecture_in_one_line(tmp_path):
    result = _cli("compile", MNIST, "--target", "cuda:sm_75", "-o", tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "older than sm_80" in result.stderr
    assert not (tmp_path / "out").exists()


def test_cli_without_ptxas_is_one_line(tmp_path):
    import os

    env = dict(os.environ, AOTC_PTXAS=str(tmp_path / "no-ptxas"))
    result = _cli("compile", MNIST, "--target", "cuda:sm_90", "-o", tmp_path / "out", env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "ptxas" in result.stderr
    assert not (tmp_path / "out").exists()


def test_targets_command_lists_the_gpu_architectures(tmp_path):
    import os

    result = _cli("targets", env=dict(os.environ, AOTC_PTXAS=str(tmp_path / "no-ptxas")))
    assert result.returncode == 0, result.stderr
    gpu, ptxas = result.stdout.splitlines()[-2:]
    assert gpu.startswith("NVIDIA GPUs: --target cuda:sm_80,sm_90") and "sm_90a" in gpu
    assert ptxas.startswith("ptxas: ptxas '") and "not found" in ptxas
