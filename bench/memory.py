"""Optimizer and memory-plan figures per model, planned for memory (the default).

    python bench/memory.py [MODEL ...]      (default: all; writes bench/memory_results.md)

For each benchmark model: kernels after fusion (default -O2) and at -O0, the scratch
a caller provides (NAME_SCRATCH_BYTES: the arena, which holds the kernels'
temporaries too, and any workspace after it), the largest kernel temporary, the lower
bound of the schedule used (intermediates and temporaries live at once) and of the
plain topological order (with the same temporaries and convolutions over their dying
images, and of its intermediates alone: only elementwise outputs over a dying operand),
the naive total, scratch / lower bound, onnxruntime's peak
at one thread (bench/ort_heap_peak.py: every allocation counted by bench/heap_peak.c,
its memory pattern on, outputs excluded) with its default arena (what the arena
reserves to run the model) and with the arena off (its plan's block and each kernel's
buffers, the tighter figure), and the largest difference from onnxruntime's output.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))
from models import LIGHT_MODELS, light_model, mlp, model_inputs, transformer_layer

import aotc
from aotc.buffers.assign import _Context, _plan
from aotc.buffers.schedule import topological
from aotc.driver import CompileOptions, compile_model

MODELS = {
    **{name: (lambda name=name: light_model(name)) for name in LIGHT_MODELS},
    "mlp_784_512_512_10": lambda: mlp(),
    "transformer_256x128": lambda: transformer_layer(256, 128),
}


HERE = Path(__file__).parent


@functools.cache
def heap_counter() -> Path:
    """bench/heap_peak.c built as a library to preload."""
    out = Path(tempfile.mkdtemp(prefix="aotc-heap-")) / "libheap_peak.so"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", str(HERE / "heap_peak.c"), "-o", str(out)], check=True
    )
    return out


def ort_heap_peak(path: Path, arena: bool) -> int:
    """onnxruntime's heap peak while it runs the model at `path` (ort_heap_peak.py), with
    its CPU arena or without."""
    env = {**os.environ, "LD_PRELOAD": str(heap_counter())}
    result = subprocess.run(
        [sys.executable, str(HERE / "ort_heap_peak.py"), str(path)] + ["--arena"] * arena,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(result.stdout.split()[-1])


def measure(name: str) -> dict:
    import onnxruntime as ort

    model = MODELS[name]()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save(model, str(path))
        started = time.perf_counter()
        compiled = compile_model(path, CompileOptions(name="m", plan_for="memory"))
        seconds = time.perf_counter() - started
        unfused = aotc.compile(path, name="m", opt_level=0).stats.kernel_count
        feeds = model_inputs(model)
        got = compiled.load()(*feeds.values())
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
        ort_peak = ort_heap_peak(path, arena=False)
        ort_arena = ort_heap_peak(path, arena=True)
    plan = compiled.plan
    temporaries = {
        id(i): plan.temporary(i).size for i in plan.schedule if plan.temporary(i) is not None
    }
    module = compiled.module
    # the plain order with the same temporaries and outputs over dying images; its
    # values alone with only elementwise outputs over their operands (no planning)
    overwrites = compiled.backend.overwrites(compiled.target, plan)
    same = replace(_Context.of(module, temporaries), overwrites=overwrites)
    topo = _plan(module, topological(module.entry), same)
    intermediates = _plan(module, topological(module.entry), _Context.of(module))
    scale = max(float(np.max(np.abs(w))) for w in want)
    error = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
    return {
        "model": name,
        "kernels": compiled.stats.kernel_count,
        "kernels_O0": unfused,
        "scratch": plan.scratch_bytes,
        "temporary": max(temporaries.values(), default=0),
        "lower": plan.lower_bound,
        "topo_lower": topo.lower_bound,
        "topo_intermediates": intermediates.lower_bound,
        "naive": plan.naive_total,
        "ratio": plan.scratch_bytes / max(plan.lower_bound, 1),
        "ort": ort_peak,
        "ort_arena": ort_arena,
        "rel_err": error / max(scale, 1e-30),
        "seconds": seconds,
    }


def table(rows: list[dict]) -> str:
    lines = [
        (
            "| model | kernels -O0 | kernels -O2 | scratch B | largest temporary B "
            "| lower bound B | topo-order lower B | topo-order intermediates B "
            "| scratch/topo intermediates | naive B | scratch/lower "
            "| ORT arena peak B | scratch/ORT arena | ORT peak, arena off B "
            "| scratch/ORT arena off | max rel err vs ORT | compile s |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['kernels_O0']} | {r['kernels']} | {r['scratch']:,} "
            f"| {r['temporary']:,} | {r['lower']:,} "
            f"| {r['topo_lower']:,} | {r['topo_intermediates']:,} "
            f"| {r['scratch'] / max(r['topo_intermediates'], 1):.3f} "
            f"| {r['naive']:,} | {r['ratio']:.3f} "
            f"| {r['ort_arena']:,} | {r['scratch'] / max(r['ort_arena'], 1):.2f} "
            f"| {r['ort']:,} | {r['scratch'] / max(r['ort'], 1):.2f} | {r['rel_err']:.1e} "
            f"| {r['seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(names: list[str]) -> None:
    rows = []
    for name in names or list(MODELS):
        rows.append(measure(name))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if not names:
        (Path(__file__).parent / "memory_results.md").write_text(
            "# Memory plan and fusion per model\n\nMade by `python bench/memory.py`.\n\n" + text
        )


if __name__ == "__main__":
    main(sys.argv[1:])
