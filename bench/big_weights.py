"""Peak memory of compiling a model of big weights, embedded and external.

    python bench/big_weights.py [--gigabytes 1.5] [--width 4096] [--external-data]

The model is a chain of MatMul + Tanh layers on a [1, width] input, as many
[width, width] float32 weights as make the size (saved inside the .onnx, or with
`--external-data` beside it).  Each build compiles and writes its artifacts in a fresh
process whose peak RSS (VmHWM, taken before the model runs) is its own; prints a
markdown table of the mode, seconds, peak RSS, its ratio to the weight bytes, and the
object's size, and checks that both builds give the same output, right to numpy's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_CHILD = r"""
import json, sys, time
import numpy as np
from aotc.driver import CompileOptions, compile_model
path, out, mode = sys.argv[1:4]
started = time.perf_counter()
compiled = compile_model(path, CompileOptions(name="big", weights=mode))
paths = compiled.write(out)
seconds = time.perf_counter() - started
# this process's own high-water mark: ru_maxrss would carry the parent's over exec
peak = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
x = np.load(sys.argv[4])
np.save(sys.argv[5], compiled.load()(x)[0])
print(json.dumps({"seconds": seconds, "peak_bytes": peak,
                  "object_bytes": paths.object.stat().st_size}))
"""


def layer_weights(layers: int, width: int, seed: int = 0):
    """The layers' weights, one at a time (scaled to keep the activations' variance)."""
    rng = np.random.default_rng(seed)
    for _ in range(layers):
        yield (rng.standard_normal((width, width), np.float32) / np.sqrt(width)).astype(np.float32)


def big_model(layers: int, width: int) -> onnx.ModelProto:
    nodes, initializers, value = [], [], "x"
    for k, weight in enumerate(layer_weights(layers, width)):
        initializers.append(numpy_helper.from_array(weight, f"w{k}"))
        nodes += [
            helper.make_node("MatMul", [value, f"w{k}"], [f"m{k}"]),
            helper.make_node("Tanh", [f"m{k}"], [f"t{k}"]),
        ]
        value = f"t{k}"
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(value, TensorProto.FLOAT, [1, width])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def expected(x: np.ndarray, layers: int, width: int) -> np.ndarray:
    value = x.astype(np.float64)
    for weight in layer_weights(layers, width):
        value = np.tanh(value @ weight)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, default=1.5)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--external-data", action="store_true")
    args = parser.parse_args()
    layers = max(round(args.gigabytes * 1e9 / (4 * args.width**2)), 1)
    weight_bytes = layers * 4 * args.width**2
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.onnx"
        onnx.save(big_model(layers, args.width), path, save_as_external_data=args.external_data)
        x = np.random.default_rng(1).standard_normal((1, args.width)).astype(np.float32)
        np.save(Path(tmp) / "x.npy", x)
        print(f"{layers} layers of [{args.width}, {args.width}]: {weight_bytes:,} weight bytes")
        print("| weights | seconds | peak RSS | peak / weights | object bytes |")
        print("|---|---:|---:|---:|---:|")
        outputs = {}
        for mode in ("embedded", "external"):
            build, got = Path(tmp) / mode, Path(tmp) / f"{mode}.npy"
            command = [sys.executable, "-c", _CHILD, str(path), str(build), mode]
            done = subprocess.run(
                [*command, str(Path(tmp) / "x.npy"), str(got)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            peak = row["peak_bytes"]
            print(
                f"| {mode} | {row['seconds']:.1f} | {peak:,} | {peak / weight_bytes:.2f} "
                f"| {row['object_bytes']:,} |",
                flush=True,
            )
            outputs[mode] = np.load(got)
        np.testing.assert_array_equal(outputs["external"], outputs["embedded"])
        want = expected(x, layers, args.width)
        np.testing.assert_allclose(outputs["embedded"], want, rtol=1e-4, atol=1e-4)
        print("outputs: the same in both builds, within 1e-4 of numpy's (float64)")


if __name__ == "__main__":
    main()
