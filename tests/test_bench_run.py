"""bench/run.py: a --quick run on the tiny MLP writes its row, and the output check can fail."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from aotc_testing import BENCH, bench_module

ort = pytest.importorskip("onnxruntime")


def _row(text: str, section: str, model: str) -> list[str]:
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith(f"| {model} |")]
    assert len(rows) == 1, body
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def test_quick_tiny_mlp(tmp_path):
    out = tmp_path / "results.md"
    argv = [sys.executable, str(BENCH / "run.py"), "--quick", "--models", "mlp_16_32_4"]
    argv += ["--threads", "1,2", "--out", str(out)]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    assert "GFLOP/s, single-core float32 GEMM" in text
    cells = _row(text, "1 thread", "mlp_16_32_4")
    # model, GFLOP, ORT ms, aotc ms, ratio, GFLOP/s, % peak, compile s, samples, err, agree
    assert cells[-1] == "yes"
    ort_ms, aotc_ms, ratio = (float(c) for c in cells[2:5])
    assert ort_ms > 0 and aotc_ms > 0
    assert ratio == pytest.approx(ort_ms / aotc_ms, rel=0.01)
    assert float(cells[1]) == pytest.approx(2 * (16 * 32 + 32 * 4) * 1e-9, rel=0.5)
    assert float(cells[-2]) < 1e-4
    # two-thread row: ORT measured; aotc measured or "n/a" (single-threaded code)
    cells = _row(text, "2 threads", "mlp_16_32_4")
    assert float(cells[2]) > 0
    assert cells[-1] in ("yes", "n/a")


def test_compare_flags_disagreement():
    compare = bench_module("run").compare
    want = [np.array([[1.0, -2.0, 3.0]], np.float32)]
    assert compare([want[0] + 1e-6], want)[0]
    agree, rel = compare([want[0] * np.float32(1.01)], want)
    assert not agree and rel == pytest.approx(0.01, rel=1e-3)
    assert not compare([np.full_like(want[0], np.nan)], want)[0]


def test_referee_weighs_both_runtimes_against_the_reference():
    bench = bench_module("run")
    reference = [np.linspace(-1.0, 1.0, 64, dtype=np.float32)]
    ort = [reference[0] + np.float32(5e-5)]  # within the tolerance of the reference
    near = [reference[0] - np.float32(1.2e-4)]  # disagrees with ort, 2.4x its error
    far = [reference[0] + np.float32(2e-4)]  # 4x
    assert not bench.compare(near, ort)[0]
    assert bench.refereed(near, ort, reference)
    assert not bench.refereed(far, ort, reference)
    # a referee that onnxruntime does not confirm decides nothing
    assert not bench.refereed(near, [reference[0] + np.float32(0.01)], reference)


def test_reference_outputs_follow_the_model_inputs():
    bench_module("run")
    models = sys.modules["models"]  # run.py imports bench/models.py as `models`
    model = models.mlp((8, 4, 3))
    feeds = models.model_inputs(model)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = models.reference_outputs(model, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_unknown_model_is_refused():
    argv = [sys.executable, str(BENCH / "run.py"), "--models", "nope", "--out", "/dev/null"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown model" in done.stderr
