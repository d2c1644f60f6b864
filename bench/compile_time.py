"""Compile time and peak memory of whole-model compiles.

    python bench/compile_time.py [resnet50 ...]

Each model compiles in a fresh subprocess so its peak RSS is its own; prints
seconds, peak RSS and weight bytes, and checks the output against onnxruntime.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, onnx
from models import light_model, light_input
import aotc
model = light_model(sys.argv[2])
path = sys.argv[3] + "/model.onnx"
onnx.save(model, path)
started = time.perf_counter()
compiled = aotc.compile(path, name=sys.argv[2])
compiled.write(sys.argv[3] + "/build")
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
feeds = light_input(model)
got = compiled.load()(*feeds.values())[0]
import onnxruntime as ort
want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
err = float(np.max(np.abs(got - want)))
print(json.dumps({"seconds": seconds, "peak_bytes": peak,
                  "weights": compiled.stats.weight_bytes, "max_abs_err": err}))
"""


def measure(name: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(Path(__file__).parent), name, tmp],
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(names: list[str]) -> None:
    print(
        f"{'model':<14} {'compile s':>10} {'peak RSS MB':>12} {'weights MB':>11} {'max |err|':>10}"
    )
    for name in names:
        r = measure(name)
        print(
            f"{name:<14} {r['seconds']:>10.1f} {r['peak_bytes'] / 2**20:>12.0f} "
            f"{r['weights'] / 2**20:>11.1f} {r['max_abs_err']:>10.2e}"
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["resnet50"])
