"""A plain (non-editable) `pip install .` finds templates/ and runtime_c/.

Builds the wheel, installs it into a private folder without dependencies
(they come from this environment) and compiles the example from another
working directory with only that copy of aotc importable.
"""

from __future__ import annotations

import os
import subprocess
import sys

from aotc_testing import EXAMPLES, REPO

import aotc


def test_wheel_install_finds_resources_and_compiles(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("aotc-*.whl")
    # the version is written once (aotc/_version.py); the wheel's metadata reads it there
    assert wheel.name.startswith(f"aotc-{aotc.__version__}-"), wheel.name
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import aotc, aotc.resources as r; print(aotc.__file__); "
                "print(r.resource_dir('templates')); print(r.resource_dir('runtime_c'))"
            ),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    package, templates, runtime = probe.stdout.split()
    assert package.startswith(str(site))
    assert templates.startswith(str(site)) and runtime.startswith(str(site))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "aotc.cli",
            "compile",
            str(EXAMPLES / "mnist" / "mnist.onnx"),
            "-o",
            "out",
            "-q",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "libmnist.a").stat().st_size > 0
