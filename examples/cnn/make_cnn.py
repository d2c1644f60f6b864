"""Build examples/cnn/cnn.onnx: a small CNN for 1x1x28x28 images, fixed random weights.

    python examples/cnn/make_cnn.py [OUT.onnx]

Conv(8, 3x3, pad 1) -> BatchNormalization -> Relu -> MaxPool 2x2 -> Conv(16, 3x3) -> Relu
-> MaxPool 2x2 -> Flatten -> Gemm(10) -> Softmax.  Weights are random (seed 0), not
trained; the batch-norm statistics are measured on the first convolution's outputs for
random images, so that they have realistic magnitudes (and BN folding has real work).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

C1, C2, CLASSES = 8, 16, 10
FLAT = C2 * 6 * 6  # 28 -> pool 14 -> conv 12 -> pool 6


def he(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def conv1_stats(w: np.ndarray, b: np.ndarray, rng: np.random.Generator):
    """Per-channel mean and variance of conv1 (pad 1) over random images in [0, 1]."""
    images = rng.uniform(0.0, 1.0, (16, 28, 28)).astype(np.float32)
    padded = np.pad(images, ((0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (3, 3), axis=(1, 2))  # [16, 28, 28, 3, 3]
    out = np.einsum("nhwij,cij->nchw", windows, w[:, 0]) + b[None, :, None, None]
    return out.mean(axis=(0, 2, 3)), out.var(axis=(0, 2, 3))


def make_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = he(rng, (C1, 1, 3, 3), 9)
    b1 = (rng.standard_normal(C1) * 0.05).astype(np.float32)
    mean, var = conv1_stats(w1, b1, rng)
    gamma = rng.uniform(0.8, 1.2, C1).astype(np.float32)
    beta = (rng.standard_normal(C1) * 0.1).astype(np.float32)
    w2 = he(rng, (C2, C1, 3, 3), C1 * 9)
    b2 = (rng.standard_normal(C2) * 0.05).astype(np.float32)
    w3 = he(rng, (FLAT, CLASSES), FLAT)
    b3 = (rng.standard_normal(CLASSES) * 0.05).astype(np.float32)
    weights = {
        "conv1.weight": w1,
        "conv1.bias": b1,
        "bn1.scale": gamma,
        "bn1.bias": beta,
        "bn1.mean": mean.astype(np.float32),
        "bn1.var": var.astype(np.float32),
        "conv2.weight": w2,
        "conv2.bias": b2,
        "fc.weight": w3,
        "fc.bias": b3,
    }
    node = helper.make_node
    nodes = [
        node(
            "Conv",
            ["image", "conv1.weight", "conv1.bias"],
            ["conv1"],
            name="conv1",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        node(
            "BatchNormalization",
            ["conv1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"],
            ["bn1"],
            name="bn1",
            epsilon=1e-5,
        ),
        node("Relu", ["bn1"], ["relu1"], name="relu1"),
        node("MaxPool", ["relu1"], ["pool1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        node(
            "Conv",
            ["pool1", "conv2.weight", "conv2.bias"],
            ["conv2"],
            name="conv2",
            kernel_shape=[3, 3],
        ),
        node("Relu", ["conv2"], ["relu2"], name="relu2"),
        node("MaxPool", ["relu2"], ["pool2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        node("Flatten", ["pool2"], ["flat"], name="flatten", axis=1),
        node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc"),
        node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, CLASSES])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(
        graph, producer_name="aotc-examples", opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else Path(__file__).with_name("cnn.onnx")
    out.write_bytes(make_model().SerializeToString())
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
