"""Benchmark models with fixed seeds.

`light_model(name)` loads one of the real architectures shipped in the onnx
wheel (onnx/backend/test/data/light/light_*.onnx), whose weights are
ConstantOfShape nodes filled with one value, and replaces each such node with
a random initializer of the same shape (He-scaled conv/fc weights, batch-norm
statistics in realistic ranges), so outputs are non-trivial; every initializer
is a constant (none is also a graph input).  `BENCH_MODELS` is the set that
bench/run.py times.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = (
    "resnet50",
    "squeezenet",
    "shufflenet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "vgg19",
    "bvlc_alexnet",
    "zfnet512",
)


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
    # IR 3 lists every initializer as an input too, which makes it overridable: onnxruntime
    # then cannot fold it (batch-norm statistics, reshape shapes).  Weights are constants.
    constants = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in used_shapes | constants]
    del graph.input[:]
    graph.input.extend(inputs)
    model.ir_version = max(model.ir_version, 4)
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


def _model(nodes, inputs, outputs, initializers, name: str) -> onnx.ModelProto:
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def mlp(sizes: tuple[int, ...] = (784, 512, 512, 10), batch: int = 1, seed: int = 0):
    """Gemm + Relu layers (no activation after the last), fixed seed."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    current = "x"
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        w = rng.normal(0, np.sqrt(2 / n_in), (n_in, n_out)).astype(np.float32)
        b = rng.uniform(-0.1, 0.1, n_out).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        last = i == len(sizes) - 2
        pre = "y" if last else f"h{i}_pre"
        nodes.append(helper.make_node("Gemm", [current, f"w{i}", f"b{i}"], [pre]))
        if not last:
            nodes.append(helper.make_node("Relu", [pre], [f"h{i}"]))
            current = f"h{i}"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])
    return _model(nodes, [x], [y], inits, "mlp")


def conv_transpose(
    c_in: int, c_out: int, size: int, kernel: int, stride: int, pad: int = 0, seed: int = 0
):
    """One ConvTranspose with a bias, as in segmentation and GAN upsampling heads."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    w = rng.normal(0, np.sqrt(2 / (c_in * kernel * kernel)), (c_in, c_out, kernel, kernel))
    b = rng.uniform(-0.1, 0.1, c_out)
    inits = [
        numpy_helper.from_array(w.astype(np.float32), "w"),
        numpy_helper.from_array(b.astype(np.float32), "b"),
    ]
    attrs = {"strides": [stride, stride], "pads": [pad] * 4}
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    out = (size - 1) * stride + kernel - 2 * pad
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, out, out])
    return _model([node], [x], [y], inits, "conv_transpose")


def spatial_pyramid_pool(channels: int, size: int, chained: bool):
    """YOLO's pyramid pooling of [1, C, S, S]: SPPF (`chained`: three 5x5 max pools, each
    of the one before) or SPP (5x5, 9x9 and 13x13 pools of the input), stride 1, same
    padding, concatenated with the input."""
    from onnx import TensorProto, helper

    nodes, source = [], "x"
    for i, kernel in enumerate((5, 5, 5) if chained else (5, 9, 13)):
        pads = [kernel // 2] * 4
        node = helper.make_node(
            "MaxPool", [source], [f"p{i}"], kernel_shape=[kernel, kernel], pads=pads
        )
        nodes.append(node)
        source = f"p{i}" if chained else "x"
    nodes.append(helper.make_node("Concat", ["x", "p0", "p1", "p2"], ["y"], axis=1))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 * channels, size, size])
    return _model(nodes, [x], [y], [], "sppf" if chained else "spp")


def softmax(shape: tuple[int, ...]):
    """One Softmax over the last axis (attention scores: [batch, heads, queries, keys])."""
    from onnx import TensorProto, helper

    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    return _model([node], [x], [y], [], "softmax")


def transformer_layer(hidden: int = 256, seq: int = 128, heads: int = 4, seed: int = 0):
    """One post-norm encoder layer: attention, residual, LayerNorm, Erf-GELU FFN, residual,
    LayerNorm; input x [1, seq, hidden]."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    head = hidden // heads
    inits = []

    def weight(name, shape, scale):
        inits.append(numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name))
        return name

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    s = 1 / np.sqrt(hidden)
    n = helper.make_node
    nodes = []
    for p in "qkv":
        nodes += [
            n("MatMul", ["x", weight(f"w{p}", (hidden, hidden), s)], [f"{p}0"]),
            n("Add", [f"{p}0", weight(f"b{p}", (hidden,), 0.02)], [f"{p}1"]),
            n(
                "Reshape",
                [f"{p}1", const(f"shape_{p}", np.array([1, seq, heads, head]))],
                [f"{p}2"],
            ),
            n("Transpose", [f"{p}2"], [f"{p}h"], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]),
        ]
    nodes += [
        n("MatMul", ["qh", "kh"], ["scores0"]),
        n("Mul", ["scores0", const("scale", np.array(1 / np.sqrt(head), np.float32))], ["scores"]),
        n("Softmax", ["scores"], ["probs"], axis=-1),
        n("MatMul", ["probs", "vh"], ["ctx0"]),
        n("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx1", const("shape_out", np.array([1, seq, hidden]))], ["ctx"]),
        n("MatMul", ["ctx", weight("wo", (hidden, hidden), s)], ["attn0"]),
        n("Add", ["attn0", weight("bo", (hidden,), 0.02)], ["attn"]),
        n("Add", ["attn", "x"], ["res1"]),
        n(
            "LayerNormalization",
            [
                "res1",
                const("g1", np.ones(hidden, np.float32)),
                const("beta1", np.zeros(hidden, np.float32)),
            ],
            ["ln1"],
            axis=-1,
        ),
        n("MatMul", ["ln1", weight("w1", (hidden, 4 * hidden), s)], ["f0"]),
        n("Add", ["f0", weight("b1", (4 * hidden,), 0.02)], ["f1"]),
        # GELU, Erf form: 0.5 * x * (1 + erf(x / sqrt(2)))
        n("Div", ["f1", const("sqrt2", np.array(np.sqrt(2), np.float32))], ["g0"]),
        n("Erf", ["g0"], ["erf0"]),
        n("Add", ["erf0", const("one", np.array(1, np.float32))], ["g2"]),
        n("Mul", ["f1", "g2"], ["g3"]),
        n("Mul", ["g3", const("half", np.array(0.5, np.float32))], ["gelu"]),
        n("MatMul", ["gelu", weight("w2", (4 * hidden, hidden), 1 / np.sqrt(4 * hidden))], ["f2"]),
        n("Add", ["f2", weight("b2", (hidden,), 0.02)], ["f3"]),
        n("Add", ["f3", "ln1"], ["res2"]),
        n(
            "LayerNormalization",
            [
                "res2",
                const("g2w", np.ones(hidden, np.float32)),
                const("beta2", np.zeros(hidden, np.float32)),
            ],
            ["y"],
            axis=-1,
        ),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])
    return _model(nodes, [x], [y], inits, f"transformer{hidden}")


# ops through which an integer input keeps its values on the way to a Gather's indices
_INDEX_PASSTHROUGH = frozenset(
    {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"}
)


def index_bound(model: onnx.ModelProto, name: str) -> int | None:
    """The length of the table an integer input indexes (a token id's vocabulary): the
    axis size of the first Gather that takes it, through Cast, Reshape and the like, as
    indices into an initializer; None when it indexes none (an attention mask)."""
    tables = {i.name: list(i.dims) for i in model.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for value in node.input:
            consumers.setdefault(value, []).append(node)
    frontier, seen = [name], {name}
    while frontier:
        value = frontier.pop()
        for node in consumers.get(value, []):
            if node.op_type == "Gather" and node.input[1] == value and node.input[0] in tables:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                return tables[node.input[0]][axis]
            if node.op_type in _INDEX_PASSTHROUGH and node.input[0] == value:
                frontier += [o for o in node.output if o not in seen]
                seen.update(node.output)
    return None


def _random_input(model, value, rng: np.random.Generator) -> np.ndarray:
    """Floats in [0, 1); integers that index a table: uniform over it; other integers
    and booleans (attention masks): ones.  Symbolic dimensions are 1."""
    tensor = value.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
    if np.issubdtype(dtype, np.floating):
        return rng.random(dims, dtype=np.float32).astype(dtype)
    bound = index_bound(model, value.name) if np.issubdtype(dtype, np.integer) else None
    if bound is None:
        return np.ones(dims, dtype)
    return rng.integers(0, bound, dims).astype(dtype)


def model_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for the model's non-initializer inputs, by dtype (_random_input)."""
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in model.graph.initializer}
    return {
        value.name: _random_input(model, value, rng)
        for value in model.graph.input
        if value.name not in initializers
    }


def quantized(model: onnx.ModelProto, static: bool, seed: int = 0) -> onnx.ModelProto:
    """`model` int8-quantized by onnxruntime's tools, as users quantize theirs: `static`,
    QOperator format (QLinearConv, QLinearMatMul..., u8 activations calibrated on 4
    random inputs, s8 weights per tensor); else dynamic (MatMulInteger with
    DynamicQuantizeLinear before it, s8 weights)."""
    import tempfile

    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    class Feeds(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([model_inputs(model, seed + s) for s in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory(prefix="aotc-quantize-") as tmp:
        source, target = Path(tmp, "model.onnx"), Path(tmp, "quantized.onnx")
        onnx.save(model, source)
        if static:
            quantize_static(
                source,
                target,
                Feeds(),
                quant_format=QuantFormat.QOperator,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
        else:
            quantize_dynamic(source, target, weight_type=QuantType.QInt8)
        return onnx.load(target)


# The benchmark set of bench/run.py, in table order: name -> builder (fixed seeds).
BENCH_MODELS = {
    "mlp_16_32_4": lambda: mlp((16, 32, 4)),
    "mlp_784_b1": lambda: mlp(batch=1),
    "mlp_784_b64": lambda: mlp(batch=64),
    **{
        name: (lambda name=name: light_model(name))
        for name in (
            "resnet50",
            "squeezenet",
            "shufflenet",
            "densenet121",
            "inception_v1",
            "vgg19",
            "bvlc_alexnet",
        )
    },
    "transformer_256x128": lambda: transformer_layer(256, 128),
    # BERT-base width: 12 heads of 64
    "transformer_768x128": lambda: transformer_layer(768, 128, heads=12),
    # int8 versions (onnxruntime's quantization tools)
    "transformer_768x128_int8": lambda: quantized(transformer_layer(768, 128, heads=12), False),
    "transformer_768x128_static_int8": lambda: quantized(
        transformer_layer(768, 128, heads=12), True
    ),
    "resnet50_int8": lambda: quantized(light_model("resnet50"), True),
    # upsampling heads: U-Net / DBNet (k2 s2), GAN / FCN (k4 s2 p1)
    "convtranspose_24to1_k2s2_80": lambda: conv_transpose(24, 1, 80, 2, 2),
    "convtranspose_64to32_k2s2_80": lambda: conv_transpose(64, 32, 80, 2, 2),
    "convtranspose_128to64_k4s2p1_40": lambda: conv_transpose(128, 64, 40, 4, 2, 1),
    # YOLO's pyramid pooling blocks
    "sppf_128x10": lambda: spatial_pyramid_pool(128, 10, chained=True),
    "spp_128x10": lambda: spatial_pyramid_pool(128, 10, chained=False),
    # a speech encoder's attention over 1,500 positions
    "softmax_2x1500x1500": lambda: softmax((1, 2, 1500, 1500)),
}
QUANTIZED = frozenset(name for name in BENCH_MODELS if name.endswith("_int8"))
# Their outputs agree with another run's within this share of its max|output|: a float
# that lands on a rounding tie of a (re)quantization goes a whole quantization step one
# way or the other when floats are summed in another order (onnxruntime's; the GPU's
# split-K), and later layers carry the step on.  Their integer arithmetic itself is
# exact (tests/backends/test_integer_gemm.py).
QUANTIZED_ATOL_SCALE = 0.05
# Other models' outputs agree within ATOL_SCALE x max|output| + RTOL x |output|
RTOL = 1e-3
ATOL_SCALE = 1e-4
# Where they do not, both runtimes are judged against aotc's reference interpreter
# (ir/evaluate.py: sums in f64, each op's result rounded to its dtype, so much nearer the
# exact value than either): aotc agrees when onnxruntime is itself within the tolerance
# of it (an independent runtime confirms the referee) and aotc's worst error is at most
# REFEREE_FACTOR x onnxruntime's.  Two correct f32 runtimes differ by the order of their
# sums, and a deep network carries that on (FCN-ResNet50: onnxruntime 8.6e-5 of the
# output's magnitude from the referee); Winograd F(4x4, 3x3) rounds a few times more
# than the direct sum, as it does in every implementation.
REFEREE_FACTOR = 3


def reference_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs by aotc's reference interpreter, on the imported module."""
    from aotc.frontends.onnx import import_onnx
    from aotc.ir.evaluate import evaluate

    module = import_onnx(model)
    names = module.input_names or [p.name for p in module.entry.parameters]
    value = evaluate(module, [feeds[name] for name in names])
    return list(value) if isinstance(value, tuple) else [value]


def refereed(got: list[np.ndarray], want: list[np.ndarray], reference: list[np.ndarray]) -> bool:
    """Whether aotc's outputs `got` are as near the reference as REFEREE_FACTOR allows,
    against onnxruntime's `want` (see REFEREE_FACTOR)."""
    ort_agrees, ort_error = compare(want, reference)
    _, aotc_error = compare(got, reference)
    return ort_agrees and aotc_error <= REFEREE_FACTOR * ort_error


def compare(
    got: list[np.ndarray], want: list[np.ndarray], quantized: bool = False
) -> tuple[bool, float]:
    """(within tolerance, max |got - want| / max |want|) over all outputs."""
    agree, worst = True, 0.0
    atol_scale, rtol = (QUANTIZED_ATOL_SCALE, 0.0) if quantized else (ATOL_SCALE, RTOL)
    for g, w in zip(got, want):
        w = np.asarray(w, np.float64)
        g = np.asarray(g, np.float64).reshape(w.shape)
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        diff = np.abs(g - w)
        agree &= bool(np.all(diff <= atol_scale * scale + rtol * np.abs(w)))
        if diff.size:
            worst = max(worst, float(np.max(diff)) / max(scale, 1e-30))
    return agree, worst
