"""The code rules CI enforces, run by the one test command (README, .ci/run).

ruff (lint and format), import-linter (the layering contracts in pyproject.toml,
[tool.importlinter]) and mypy against its baseline (tools/typecheck.py).  Each runs the
tool over the whole repository as a contributor would (CONTRIBUTING.md) and fails with
its output.  The tools come with the `test` extra, pinned; a missing one is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from aotc_testing import REPO


def _run(command: list[str]) -> None:
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    if result.returncode != 0:
        pytest.fail(
            f"`{' '.join(command[1:] if command[0] == sys.executable else command)}` "
            f"failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}",
            pytrace=False,
        )


def _script(name: str) -> str:
    """A console script installed beside this interpreter (or on PATH)."""
    path = shutil.which(
        name,
        path=os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", os.defpath)]),
    )
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'", pytrace=False)
    return path


def test_ruff_check():
    _run([sys.executable, "-m", "ruff", "check", "--no-cache", "."])


def test_ruff_format():
    # the files only: `ruff format` rewrites them, `ruff format --diff` shows how
    _run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            "--no-cache",
            "--output-format",
            "concise",
            ".",
        ]
    )


def test_import_layers():
    _run([_script("lint-imports"), "--no-logo", "--no-cache"])


def test_mypy_baseline():
    _run([sys.executable, str(REPO / "tools" / "typecheck.py")])
