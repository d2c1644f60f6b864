"""Planned memory against peers on torchvision models: aotc, onnxruntime, ExecuTorch.

    python bench/peer_plans.py --executorch-python PATH [--models a,b] [--out FILE]

For each model (random weights, eval mode, batch 1 at 224x224): the ONNX export that
`aotc.compile_torch` makes (torch's dynamo exporter, opset 18), compiled with aotc
(NAME_SCRATCH_BYTES: intermediates and kernel temporaries), onnxruntime's peak
running it at one thread (bench/ort_heap_peak.py, with its default arena and with the
arena off), and ExecuTorch's planned size for the same module (`torch.export`, then
`to_edge(...).to_executorch()` with its default memory planning, portable kernels:
the sum of the program's non-constant buffers).  ExecuTorch and this project's torch
rarely agree on versions, so it runs in a Python of its own (PATH, e.g. a venv made
with `pip install executorch torch==<its torch> torchvision`); this script calls it
with --executorch-plan NAME.  Writes bench/peer_plans_results.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

# name -> torchvision.models constructor name
MODELS = {
    "resnet50": "resnet50",
    "squeezenet1_1": "squeezenet1_1",
    "shufflenet_v2_x1_0": "shufflenet_v2_x1_0",
    "mobilenet_v2": "mobilenet_v2",
    "densenet121": "densenet121",
    "googlenet": "googlenet",
    "vgg19": "vgg19",
    "alexnet": "alexnet",
}


def torch_model(name: str):
    import torch
    import torchvision

    torch.manual_seed(0)
    constructor = getattr(torchvision.models, MODELS[name])
    extra = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    return constructor(**extra).eval(), (torch.randn(1, 3, 224, 224),)


def executorch_plan(name: str) -> int:
    """ExecuTorch's planned bytes for the model (run in ExecuTorch's Python)."""
    import torch
    from executorch.exir import to_edge

    module, args = torch_model(name)
    program = to_edge(torch.export.export(module, args)).to_executorch()
    return sum(program.executorch_program.execution_plan[0].non_const_buffer_sizes)


def measure(name: str, executorch_python: str) -> dict:
    import torch
    from memory import ort_heap_peak

    import aotc
    from aotc.frameworks import _export_torch

    module, args = torch_model(name)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        with torch.no_grad():
            _export_torch(torch, module, args, True, path)
        scratch = aotc.compile(path, name="m").plan.scratch_bytes
        arena, arena_off = (ort_heap_peak(path, arena=a) for a in (True, False))
    planned = subprocess.run(
        [executorch_python, __file__, "--executorch-plan", name],
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        "model": name,
        "aotc": scratch,
        "ort_arena": arena,
        "ort": arena_off,
        "executorch": int(planned.stdout.split()[-1]),
    }


def table(rows: list[dict]) -> str:
    lines = [
        (
            "| model | aotc scratch B | ORT arena peak B | ORT peak, arena off B | ExecuTorch "
            "planned B | aotc / ORT arena | aotc / ORT arena off | aotc / ExecuTorch |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['aotc']:,} | {r['ort_arena']:,} | {r['ort']:,} "
            f"| {r['executorch']:,} | {r['aotc'] / r['ort_arena']:.2f} "
            f"| {r['aotc'] / r['ort']:.2f} | {r['aotc'] / r['executorch']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executorch-python", help="a Python with executorch installed")
    parser.add_argument("--executorch-plan", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", type=Path, default=HERE / "peer_plans_results.md")
    options = parser.parse_args()
    if options.executorch_plan:
        print(executorch_plan(options.executorch_plan))
        return
    if not options.executorch_python:
        parser.error("--executorch-python is required")
    rows = []
    for name in options.models.split(","):
        rows.append(measure(name, options.executorch_python))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    options.out.write_text(
        "# Planned memory against peers\n\nMade by `python bench/peer_plans.py "
        "--executorch-python PATH` (one thread; see its docstring).\n\n" + text
    )


if __name__ == "__main__":
    main()
