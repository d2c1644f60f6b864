"""Train examples/digits/digits.onnx on scikit-learn's bundled 8x8 digits, and pick the
images the C demo reads.

    python examples/digits/make_digits.py      (needs scikit-learn: pip install scikit-learn)

load_digits() ships with scikit-learn (1,797 images of 8x8 pixels, 0..16; no download).
An MLP 64-32-10 (Gemm, Relu, Gemm, Softmax) is trained in numpy on 1,500 of them
(full-batch gradient descent on the cross-entropy, seed 0) and tested on the other 297;
its input is the pixels / 16, f32[1,64].  Ten held-out images, one per digit, are
written as images/N_K.pgm (binary PGM, 8x8, maxval 16: N the digit, K its index in the
dataset), which any image viewer shows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits

HERE = Path(__file__).resolve().parent
TRAIN = 1500
HIDDEN = 32
STEPS = 2000
RATE = 0.5


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def train(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """w1, b1, w2, b2 of the MLP, by full-batch gradient descent (float64)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, HIDDEN)) * np.sqrt(2 / 64)
    b1 = np.zeros(HIDDEN)
    w2 = rng.standard_normal((HIDDEN, 10)) * np.sqrt(2 / HIDDEN)
    b2 = np.zeros(10)
    target = np.eye(10)[y]
    for _ in range(STEPS):
        h = np.maximum(x @ w1 + b1, 0)
        p = softmax(h @ w2 + b2)
        dz = (p - target) / len(x)
        dh = (dz @ w2.T) * (h > 0)
        w2 -= RATE * h.T @ dz
        b2 -= RATE * dz.sum(axis=0)
        w1 -= RATE * x.T @ dh
        b1 -= RATE * dh.sum(axis=0)
    return [w1, b1, w2, b2]


def predict(params: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    w1, b1, w2, b2 = params
    return np.argmax(np.maximum(x @ w1 + b1, 0) @ w2 + b2, axis=1)


def make_model(params: list[np.ndarray]) -> onnx.ModelProto:
    names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    initializers = [numpy_helper.from_array(p.astype(np.float32), n) for p, n in zip(params, names)]
    nodes = [
        helper.make_node("Gemm", ["pixels", "fc1.weight", "fc1.bias"], ["fc1"], name="fc1"),
        helper.make_node("Relu", ["fc1"], ["relu1"], name="relu1"),
        helper.make_node("Gemm", ["relu1", "fc2.weight", "fc2.bias"], ["fc2"], name="fc2"),
        helper.make_node("Softmax", ["fc2"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_mlp",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        initializers,
    )
    model = helper.make_model(
        graph, producer_name="aotc-examples", opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def write_pgm(path: Path, pixels: np.ndarray) -> None:
    """An 8x8 binary PGM of pixels 0..16."""
    path.write_bytes(b"P5\n8 8\n16\n" + pixels.astype(np.uint8).tobytes())


def main() -> None:
    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    params = train(x[:TRAIN], y[:TRAIN])
    held_out = predict(params, x[TRAIN:]) == y[TRAIN:]
    print(f"held-out accuracy: {held_out.mean():.3f} ({held_out.sum()} of {len(held_out)})")
    (HERE / "digits.onnx").write_bytes(make_model(params).SerializeToString())
    for old in (HERE / "images").glob("*.pgm"):
        old.unlink()
    for digit in range(10):  # the first held-out image of each digit
        k = TRAIN + int(np.flatnonzero(y[TRAIN:] == digit)[0])
        write_pgm(HERE / "images" / f"{digit}_{k}.pgm", digits.images[k])
    print(f"wrote {HERE / 'digits.onnx'} and 10 images")


if __name__ == "__main__":
    main()
