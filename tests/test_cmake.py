"""aotc's CMake package (aotc/cmake/) and examples/cmake, built as a user builds it.

The example is configured, built and run with the host compiler in tmp_path, its output
compared with onnxruntime's; a touched model must recompile (the object's timestamp
changes) and a build with nothing changed must not.  Where the aarch64 toolchain and
qemu are installed, the example is cross-built with its toolchain file and run under
qemu.  Every aotc here is the checkout's: `sys.executable -m aotc`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from aotc_testing import EXAMPLES, REPO

import aotc

ort = pytest.importorskip("onnxruntime")

CMAKE = shutil.which("cmake")
needs_cmake = pytest.mark.skipif(
    CMAKE is None, reason="needs cmake on PATH (apt-get install cmake)"
)
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's libc6-dev-arm64-cross
needs_aarch64 = pytest.mark.skipif(
    not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64"))
    or not (SYSROOT / "lib").is_dir(),
    reason="needs aarch64-linux-gnu-gcc, qemu-aarch64 and /usr/aarch64-linux-gnu "
    "(apt-get install gcc-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross)",
)

EXAMPLE = EXAMPLES / "cmake"
MNIST = EXAMPLES / "mnist" / "mnist.onnx"
COMPILING = "aotc: compiling"  # aotc_add_model's COMMENT, printed when the model compiles


def cmake_dir() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "aotc", "--cmake-dir"], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; on failure the assertion shows everything it printed."""
    result = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=300, check=False, **kwargs
    )
    assert result.returncode == 0, f"{cmd}\n{result.stdout}\n{result.stderr}"
    return result


def configure(build: Path, *definitions: str, source: Path = EXAMPLE) -> None:
    run([CMAKE, "-S", source, "-B", build, f"-Daotc_DIR={cmake_dir()}", *definitions])


def cmake_build(build: Path) -> str:
    return run([CMAKE, "--build", build]).stdout


def mnist_input(tmp_path: Path) -> tuple[Path, np.ndarray]:
    x = np.random.default_rng(7).uniform(0, 1, (1, 784)).astype(np.float32)
    path = tmp_path / "x.f32"
    path.write_bytes(x.tobytes())
    return path, x


def check_output(stdout: str, model: Path, x: np.ndarray) -> None:
    """main.c's output: one probability per line, then `argmax: N`; as onnxruntime's."""
    (expected,) = ort.InferenceSession(str(model)).run(None, {"input": x})
    lines = stdout.splitlines()
    probs = np.array([float(v) for v in lines[:-1]])
    np.testing.assert_allclose(probs, expected.ravel(), rtol=1e-5, atol=1e-7)
    assert lines[-1] == f"argmax: {int(np.argmax(expected))}"


def test_cmake_dir_flag_needs_no_subcommand():
    where = Path(cmake_dir())
    assert where == REPO / "aotc" / "cmake"
    for name in ("aotcConfig.cmake", "aotcConfigVersion.cmake"):
        assert (where / name).is_file(), name


@needs_cmake
def test_example_builds_runs_and_rebuilds_when_the_model_changes(tmp_path):
    model = tmp_path / "mnist.onnx"
    shutil.copyfile(MNIST, model)
    build = tmp_path / "build"
    configure(build, f"-DMODEL={model}", f"-DAOTC_PYTHON={sys.executable}")
    assert COMPILING in cmake_build(build)
    app = build / "mnist_app"
    input_path, x = mnist_input(tmp_path)
    check_output(run([app, input_path]).stdout, model, x)
    pattern = (np.arange(784, dtype=np.uint32) * 37 % 256).astype(np.float32) / 255
    check_output(run([app]).stdout, model, pattern.reshape(1, 784))

    obj = build / "aotc" / "mnist" / "mnist.o"
    built = obj.stat().st_mtime_ns
    assert COMPILING not in cmake_build(build)  # nothing changed: aotc does not run
    assert obj.stat().st_mtime_ns == built

    os.utime(model)  # now: later than the object written by the first build
    assert COMPILING in cmake_build(build)
    assert obj.stat().st_mtime_ns != built
    check_output(run([app, input_path]).stdout, model, x)


@needs_cmake
def test_package_finds_its_python_and_checks_versions(tmp_path):
    """Without AOTC_PYTHON the config finds an interpreter that imports this aotc;
    find_package's version requests follow aotc/_version.py (0.x: same minor)."""
    major, minor = (int(p) for p in aotc.__version__.split(".")[:2])
    requests = {f"{major}.{minor}": True, f"{major}.{minor + 1}": False, f"{major + 1}": False}
    project = tmp_path / "project"
    project.mkdir()
    lines = ["cmake_minimum_required(VERSION 3.16)", "project(probe C)"]
    for version in requests:
        lines.append(f"find_package(aotc {version} QUIET)")
        lines.append(f'message(STATUS "aotc {version}: ${{aotc_FOUND}}")')
    (project / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    build = tmp_path / "build"
    # a PATH with this interpreter at the end: one candidate at least, however it is laid out
    env = dict(
        os.environ,
        PATH=os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)]),
    )
    result = run([CMAKE, "-S", project, "-B", build, f"-Daotc_DIR={cmake_dir()}"], env=env)
    for version, found in requests.items():
        assert f"aotc {version}: {1 if found else 0}" in result.stdout, result.stdout

    cache = (build / "CMakeCache.txt").read_text()
    (python,) = [
        line.split("=", 1)[1] for line in cache.splitlines() if line.startswith("AOTC_PYTHON:")
    ]
    where = run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('aotc').origin)"],
        cwd=tmp_path,
    )
    assert Path(where.stdout.strip()).resolve() == (REPO / "aotc" / "__init__.py").resolve()

    # an interpreter that does not import this aotc is refused at configure time
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    refused = subprocess.run(
        [
            CMAKE,
            "-S",
            project,
            "-B",
            tmp_path / "refused",
            f"-Daotc_DIR={cmake_dir()}",
            f"-DAOTC_PYTHON={fake}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0
    assert "does not import the aotc" in refused.stderr


@needs_cmake
@needs_aarch64
def test_example_cross_builds_for_aarch64_and_runs_under_qemu(tmp_path):
    build = tmp_path / "build"
    toolchain = EXAMPLE / "toolchains" / "aarch64-linux-gnu.cmake"
    configure(build, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}", f"-DAOTC_PYTHON={sys.executable}")
    cmake_build(build)
    header = (build / "aotc" / "mnist" / "mnist.h").read_text()
    assert '#define MNIST_TARGET_CPU "cortex-a72"' in header
    app = build / "mnist_app"
    input_path, x = mnist_input(tmp_path)
    # qemu-aarch64 refuses an x86-64 program: running proves what it was built for
    stdout = run(["qemu-aarch64", "-L", SYSROOT, app, input_path]).stdout
    check_output(stdout, MNIST, x)
    # ctest runs it through the toolchain's CMAKE_CROSSCOMPILING_EMULATOR
    run([Path(CMAKE).with_name("ctest"), "--output-on-failure"], cwd=build)


@needs_cmake
def test_wheel_ships_the_package_and_its_config_builds_the_example(tmp_path):
    """A plain `pip install` of the wheel carries aotc/cmake/ (hatchling packs every file
    under aotc/), and that copy's config compiles with that copy's aotc."""
    wheels = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, REPO])
    (wheel,) = wheels.glob("aotc-*.whl")
    site = tmp_path / "site"
    run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, wheel])
    # the installed copy's interpreter: this one with the install first on sys.path
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    build = tmp_path / "build"
    installed = site / "aotc" / "cmake"
    run([CMAKE, "-S", EXAMPLE, "-B", build, f"-Daotc_DIR={installed}", f"-DAOTC_PYTHON={python}"])
    cmake_build(build)
    command = (build / "aotc" / "mnist" / "aotc-command.txt").read_text()
    assert command.startswith(f"{python} -m aotc compile ")
    input_path, x = mnist_input(tmp_path)
    check_output(run([build / "mnist_app", input_path]).stdout, MNIST, x)
