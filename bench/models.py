"""Benchmark models with fixed seeds.

`light_model(name)` loads one of the real architectures shipped in the onnx
wheel (onnx/backend/test/data/light/light_*.onnx), whose weights are
ConstantOfShape nodes filled with one value, and replaces each such node with
a random initializer of the same shape (He-scaled conv/fc weights, batch-norm
statistics in realistic ranges), so outputs are non-trivial.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = (
    "resnet50", "squeezenet", "shufflenet", "densenet121", "inception_v1",
    "inception_v2", "vgg19", "bvlc_alexnet", "zfnet512",
)  # fmt: skip


def _random_weight(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values in a plausible range for what the tensor's name says it is."""
    stem = name.rsplit("/", 1)[-1]
    if stem.endswith(("_riv_0", "_var_0")) or "var" in stem:
        return rng.uniform(0.5, 1.5, shape)
    if stem.endswith(("_s_0", "_scale_0")) or "scale" in stem:
        # below 1 so activations stay O(1) through deep residual stacks
        return rng.uniform(0.2, 0.5, shape)
    if stem.endswith(("_b_0", "_rm_0", "_bias_0", "_mean_0")):
        return rng.uniform(-0.1, 0.1, shape)
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else max(shape[0], 1)
    return rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)


def light_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The light_NAME model with its ConstantOfShape weights made random initializers."""
    model = onnx.load(str(LIGHT_DIR / f"light_{name}.onnx"))
    graph = model.graph
    rng = np.random.default_rng(seed)
    shapes = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    weights, kept_nodes, used_shapes = [], [], set()
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            dims = tuple(int(d) for d in shapes[node.input[0]])
            value = _random_weight(node.output[0], dims, rng).astype(np.float32)
            weights.append(numpy_helper.from_array(value, node.output[0]))
            used_shapes.add(node.input[0])
        else:
            kept_nodes.append(node)
    del graph.node[:]
    graph.node.extend(kept_nodes)
    initializers = [i for i in graph.initializer if i.name not in used_shapes] + weights
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    inputs = [i for i in graph.input if i.name not in used_shapes]
    del graph.input[:]
    graph.input.extend(inputs)
    return model


def light_input(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float inputs in [0, 1) for the model's non-initializer inputs."""
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name not in initializers:
            dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
            feeds[value.name] = rng.random(dims, dtype=np.float32)
    return feeds
