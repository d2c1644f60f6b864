"""Build examples/mnist/mnist.onnx: an MLP 784-128-64-10 with fixed random weights.

    python examples/mnist/make_mnist.py [OUT.onnx]

The weights are random (He-initialised, seed 0), not trained: the model exists to be
compiled and compared with onnxruntime, and its bytes are the same on every run.
Layers 1 and 3 are Gemm, layer 2 MatMul + Add, so both spellings of a dense layer are
exercised.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZES = (784, 128, 64, 10)


def make_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, initializers = [], []
    x = "input"
    layers = list(itertools.pairwise(SIZES))
    for i, (fan_in, fan_out) in enumerate(layers, start=1):
        w = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        b = (rng.standard_normal(fan_out) * 0.05).astype(np.float32)
        y, w_name, b_name = f"fc{i}", f"fc{i}.weight", f"fc{i}.bias"
        initializers += [numpy_helper.from_array(w, w_name), numpy_helper.from_array(b, b_name)]
        if i == 2:
            mm = f"fc{i}.mm"
            nodes.append(helper.make_node("MatMul", [x, w_name], [mm], name=f"{y}.matmul"))
            nodes.append(helper.make_node("Add", [mm, b_name], [y], name=f"{y}.add"))
        else:
            nodes.append(helper.make_node("Gemm", [x, w_name, b_name], [y], name=y))
        x = y
        if i < len(layers):
            nodes.append(helper.make_node("Relu", [y], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    nodes.append(helper.make_node("Softmax", [x], ["probs"], name="softmax", axis=-1))
    graph = helper.make_graph(
        nodes,
        "mnist_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, SIZES[0]])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, SIZES[-1]])],
        initializers,
    )
    model = helper.make_model(
        graph, producer_name="aotc-examples", opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else Path(__file__).with_name("mnist.onnx")
    out.write_bytes(make_model().SerializeToString())
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
