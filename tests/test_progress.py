"""The progress line of long compiles (aotc/progress.py) and the link line after one."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys

from aotc_testing import EXAMPLES, REPO

from aotc import progress
from aotc.driver import CompileOptions, compile_model

MODEL = EXAMPLES / "cnn" / "cnn.onnx"


def test_a_compile_reports_its_stages_and_erases_the_line(tmp_path):
    """With no delay, every stage shows: import, each pass, the memory plan, kernels i/N,
    LLVM, the archive; the line is blanked at the end."""
    stream = io.StringIO()
    with progress.reporting(stream, delay=0):
        compiled = compile_model(MODEL, CompileOptions())
        compiled.write(tmp_path / "build")
    shown = [part.strip() for part in stream.getvalue().split("\r") if part.strip()]
    kernels = compiled.stats.kernel_count
    for stage in ("import", "memory plan", f"kernels {kernels}/{kernels}", "runtime and archive"):
        assert f"aotc: {stage}" in shown, shown
    assert any(s.startswith("aotc: pass 1/") for s in shown)
    assert any(s.startswith("aotc: LLVM") for s in shown)
    assert all(len(s) < 80 for s in shown)
    assert stream.getvalue().endswith("\r") and not stream.getvalue().split("\r")[-2].strip()


def test_nothing_shows_before_the_delay():
    stream = io.StringIO()
    with progress.reporting(stream, delay=3600):
        progress.stage("import")
        progress.step("kernels", 1, 2)
    assert stream.getvalue() == ""
    progress.stage("outside any compile")  # no Progress open: nothing happens


def _compile_on_a_terminal(tmp_path, *flags) -> tuple[int, str, str]:
    """The CLI with stderr on a pseudo-terminal: (exit code, stdout, what the terminal got)."""
    leader, follower = pty.openpty()
    argv = [sys.executable, "-m", "aotc", "compile", str(MODEL), "-o", str(tmp_path / "b"), *flags]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower, cwd=REPO)
    os.close(follower)
    terminal = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        terminal += chunk
    stdout = process.stdout.read().decode()
    os.close(leader)
    return process.wait(), stdout, terminal.decode()


def test_on_a_terminal_the_line_is_erased_and_the_link_line_printed(tmp_path):
    """What the terminal gets (nothing for a compile under DELAY; on a loaded machine
    maybe a stage or two) is progress lines only, blanked at the end; -q prints nothing;
    stdout ends with the line that links the library."""
    code, stdout, terminal = _compile_on_a_terminal(tmp_path)
    assert code == 0
    parts = terminal.split("\r")
    assert all(not p.strip() or p.startswith("aotc: ") for p in parts), terminal
    assert not parts[-1].strip() and (len(parts) == 1 or not parts[-2].strip())
    build = tmp_path / "b"
    assert (
        stdout.splitlines()[-1]
        == f"  link with     cc app.c -I{build} {build}/libcnn.a -lm -lpthread"
    )
    code, stdout, terminal = _compile_on_a_terminal(tmp_path, "-q")
    assert code == 0 and stdout == "" and terminal == ""


def test_not_on_a_terminal_no_progress_shows(tmp_path):
    argv = [sys.executable, "-m", "aotc", "compile", str(MODEL), "-o", str(tmp_path / "b")]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    assert result.returncode == 0 and result.stderr == ""
