"""Compile time against graph size: whether it grows linearly in the node count.

    python bench/compile_scaling.py [--nodes 2000 4000 8000 20000] [--graph transformer]

Each graph is a chain of transformer-style blocks on small [8, 64] values (so that code
generation is not what it measures): MatMul + Add, a layer normalization written out in
elementwise ops and mean reductions, a softmax written out likewise, and a residual Add,
17 ONNX nodes a block (`--graph chain`: Add and Relu alternating instead).  Prints a
markdown table of nodes, the seconds `aotc.compile` takes (wall clock, and this process's
CPU time, which other work on a shared machine disturbs less) and how the CPU time grows
per doubling of the nodes from the size before (2.0 is linear).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROWS, WIDTH = 8, 64
EPSILON = np.float32(1e-5)
STEP = np.float32(0.001)
BLOCK_NODES = 17


def _model(nodes, initializers) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, WIDTH])
    y = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [ROWS, WIDTH])
    graph = helper.make_graph(nodes, "g", [x], [y], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _weights(blocks: int, seed: int) -> np.ndarray:
    """One [WIDTH, WIDTH] matrix per block, scaled to keep the products' variance."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((blocks, WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)


def transformer_model(nodes: int, seed: int = 0) -> onnx.ModelProto:
    """About `nodes` ONNX nodes: `nodes // BLOCK_NODES` blocks (at least one)."""
    blocks = max(nodes // BLOCK_NODES, 1)
    initializers = [
        numpy_helper.from_array(w, f"w{k}") for k, w in enumerate(_weights(blocks, seed))
    ]
    constants = {
        "bias": np.linspace(-0.5, 0.5, WIDTH, dtype=np.float32),
        "gamma": np.linspace(0.5, 1.5, WIDTH, dtype=np.float32),
        "beta": np.linspace(-0.1, 0.1, WIDTH, dtype=np.float32),
        "eps": np.array([EPSILON], np.float32),
        "last": np.array([-1], np.int64),
    }
    initializers += [numpy_helper.from_array(v, k) for k, v in constants.items()]
    nodes_out: list[onnx.NodeProto] = []
    value = "x"
    for k in range(blocks):
        value = _block(nodes_out, value, f"w{k}", f"b{k}_")
    return _model(nodes_out, initializers)


def _block(nodes: list, x: str, weight: str, p: str) -> str:
    """x + softmax(layer_norm(x @ weight + bias)) as 17 nodes; returns its output's name."""

    def node(op, inputs, **attrs):
        out = f"{p}{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    h = node("Add", [node("MatMul", [x, weight]), "bias"])
    centered = node("Sub", [h, node("ReduceMean", [h], axes=[-1])])
    variance = node("ReduceMean", [node("Mul", [centered, centered])], axes=[-1])
    deviation = node("Sqrt", [node("Add", [variance, "eps"])])
    normed = node("Add", [node("Mul", [node("Div", [centered, deviation]), "gamma"]), "beta"])
    shifted = node("Sub", [normed, node("ReduceMax", [normed], axes=[-1])])
    exps = node("Exp", [shifted])
    softmax = node("Div", [exps, node("ReduceSum", [exps, "last"])])
    return node("Add", [x, softmax])


def transformer_expected(x: np.ndarray, nodes: int, seed: int = 0) -> np.ndarray:
    """What `transformer_model(nodes, seed)` computes, in float64."""
    bias = np.linspace(-0.5, 0.5, WIDTH, dtype=np.float32).astype(np.float64)
    gamma = np.linspace(0.5, 1.5, WIDTH, dtype=np.float32).astype(np.float64)
    beta = np.linspace(-0.1, 0.1, WIDTH, dtype=np.float32).astype(np.float64)
    value = x.astype(np.float64)
    for weight in _weights(max(nodes // BLOCK_NODES, 1), seed).astype(np.float64):
        h = value @ weight + bias
        centered = h - h.mean(-1, keepdims=True)
        deviation = np.sqrt((centered * centered).mean(-1, keepdims=True) + float(EPSILON))
        normed = centered / deviation * gamma + beta
        exps = np.exp(normed - normed.max(-1, keepdims=True))
        value = value + exps / exps.sum(-1, keepdims=True)
    return value


def chain_model(nodes: int) -> onnx.ModelProto:
    """x -> Add(step) -> Relu -> Add(step) -> ...: `nodes` elementwise nodes."""
    step = numpy_helper.from_array(np.full([1], STEP, np.float32), "step")
    chain, previous = [], "x"
    for n in range(nodes):
        out = f"t{n}"
        inputs = [previous, "step"] if n % 2 == 0 else [previous]
        chain.append(helper.make_node("Add" if n % 2 == 0 else "Relu", inputs, [out]))
        previous = out
    return _model(chain, [step])


def chain_expected(x: np.ndarray, nodes: int) -> np.ndarray:
    value = x.astype(np.float32)
    for n in range(nodes):
        value = value + STEP if n % 2 == 0 else np.maximum(value, 0)
    return value


GRAPHS = {"transformer": transformer_model, "chain": chain_model}


def compile_seconds(model: onnx.ModelProto) -> tuple[float, float]:
    """(wall, CPU) seconds of compiling `model` (LLVM runs in this process's thread)."""
    import aotc

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model, path)
        wall, cpu = time.perf_counter(), time.process_time()
        aotc.compile(path)
        return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2000, 4000, 8000, 20000])
    parser.add_argument("--graph", choices=sorted(GRAPHS), default="transformer")
    args = parser.parse_args()
    build = GRAPHS[args.graph]
    compile_seconds(build(BLOCK_NODES))  # imports and LLVM's start-up off the clock
    print("| nodes | wall s | CPU s | CPU ratio per doubling |")
    print("|---:|---:|---:|---:|")
    previous: tuple[int, float] | None = None
    for requested in args.nodes:
        model = build(requested)
        nodes = len(model.graph.node)
        wall, cpu = compile_seconds(model)
        ratio = "" if previous is None else f"{_per_doubling(previous, (nodes, cpu)):.2f}"
        print(f"| {nodes} | {wall:.1f} | {cpu:.1f} | {ratio} |", flush=True)
        previous = (nodes, cpu)


def _per_doubling(before: tuple[int, float], after: tuple[int, float]) -> float:
    """The growth of compile time per doubling of nodes between two sizes (2.0: linear)."""
    doublings = np.log2(after[0] / before[0])
    return float((after[1] / before[1]) ** (1 / doublings))


if __name__ == "__main__":
    main()
