"""The kit the ONNX test cases are built with: `OnnxCase`, one-node and graph
model builders (output types taken from onnx.reference), seeded inputs, and
numpy references for the cases where onnx.reference is wrong."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

IR_VERSION = 10
DEFAULT_OPSET = 17


@dataclass
class OnnxCase:
    name: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    rtol: float = 1e-5
    atol: float = 1e-6
    # numpy outputs for the few cases where onnx.reference is wrong (see expected_outputs)
    reference: Callable[[OnnxCase], list[np.ndarray]] | None = None


def expected_outputs(case: OnnxCase) -> list[np.ndarray]:
    """The outputs to compare with: onnx.reference's, or the case's own numpy reference
    where onnx.reference is wrong (Softmax < 13 is run as Softmax-13, BatchNormalization-9
    applies the default momentum as if training, LRN windows over the batch dim)."""
    if case.reference is not None:
        return case.reference(case)
    return reference_outputs(case.model, case.inputs)


def assert_integers_match(got: np.ndarray, expected: np.ndarray, atol: float) -> None:
    """Equal, or within `atol` where a case allows that (quantized ops that onnxruntime
    computes through tables or fixed point may differ by one quantum)."""
    if atol >= 1:
        difference = np.abs(got.astype(np.int64) - expected.astype(np.int64))
        assert difference.max(initial=0) <= atol, f"integers differ by {difference.max()}"
    else:
        np.testing.assert_array_equal(got, expected)


def reference_outputs(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, inputs)]


def onnxruntime_outputs(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return [np.asarray(v) for v in session.run(None, inputs)]


def ort_reference(case: OnnxCase) -> list[np.ndarray]:
    """onnxruntime's outputs, for cases onnx.reference does not implement (an OnnxCase's
    `reference`; graph_case then takes the output types from onnxruntime too)."""
    return onnxruntime_outputs(case.model, case.inputs)


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@dataclass
class In:
    """A runtime graph input."""

    value: np.ndarray


@dataclass
class Const:
    """A constant operand, stored as an initializer."""

    value: np.ndarray


rng = np.random.default_rng(1234)


def f32(*shape, low=-2.0, high=2.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


def pos(*shape) -> np.ndarray:
    """Positive values, for Log, Sqrt, divisors and Pow bases."""
    return f32(*shape, low=0.2, high=3.0)


def ints(*shape, low=-10, high=10, dtype=np.int64) -> np.ndarray:
    return rng.integers(low, high, shape).astype(dtype)


def bools(*shape) -> np.ndarray:
    return rng.random(shape) < 0.5


def i64(*values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def graph_model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    consts: dict[str, np.ndarray],
    outputs: list[str],
    opset: int = DEFAULT_OPSET,
    domains: dict[str, int] | None = None,
    reference: Callable[[onnx.ModelProto, dict], list] | None = None,
    checked: bool = True,
) -> onnx.ModelProto:
    """A checked model importing `opset` and the `domains` (name -> version); output types
    are taken from the results of `reference` (onnx.reference's evaluator by default).
    `checked=False` skips onnx's checker, for the ops onnxruntime adds to ONNX's domain."""
    graph_inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape
        )
        for name, value in inputs.items()
    ]
    initializers = [numpy_helper.from_array(value, name) for name, value in consts.items()]
    untyped = [onnx.ValueInfoProto(name=name) for name in outputs]
    graph = helper.make_graph(nodes, "case", graph_inputs, untyped, initializers)
    imports = [helper.make_opsetid("", opset)]
    imports += [helper.make_opsetid(domain, v) for domain, v in (domains or {}).items()]
    model = helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION)
    results = (reference or reference_outputs)(model, inputs)
    del model.graph.output[:]
    for name, value in zip(outputs, results):
        value = np.asarray(value)
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        model.graph.output.append(helper.make_tensor_value_info(name, elem, value.shape))
    if checked:
        onnx.checker.check_model(model)
    return model


def graph_case(
    name,
    nodes,
    inputs,
    consts=None,
    outputs=("y",),
    opset=DEFAULT_OPSET,
    domains=None,
    checked=True,
    **extra,
):
    typing_run = onnxruntime_outputs if extra.get("reference") is ort_reference else None
    try:
        model = graph_model(
            nodes, inputs, consts or {}, list(outputs), opset, domains, typing_run, checked
        )
    except (ValueError, TypeError, onnx.checker.ValidationError) as e:
        e.add_note(f"while building ONNX case {name!r}")
        raise
    return OnnxCase(name, model, inputs, **extra)


def op_case(
    name: str,
    op_type: str,
    args: list[In | Const | None],
    attrs: dict | None = None,
    opset: int = DEFAULT_OPSET,
    outputs: int = 1,
    **extra,
) -> OnnxCase:
    """One node; `args` in the op's input order (None: an omitted optional input)."""
    inputs, consts, names = {}, {}, []
    for i, arg in enumerate(args):
        if arg is None:
            names.append("")
        elif isinstance(arg, In):
            names.append(f"x{i}")
            inputs[f"x{i}"] = arg.value
        else:
            names.append(f"c{i}")
            consts[f"c{i}"] = arg.value
    out_names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(
        op_type, names, out_names, name=f"{op_type.lower()}_node", **(attrs or {})
    )
    return graph_case(name, [node], inputs, consts, out_names, opset, **extra)


@dataclass
class CaseList:
    cases: list[OnnxCase] = field(default_factory=list)

    def add(self, case: OnnxCase) -> None:
        assert case.name not in {c.name for c in self.cases}, case.name
        self.cases.append(case)


def numpy_batchnorm(case: OnnxCase) -> list[np.ndarray]:
    scale, bias, mean, var = (initializers(case.model)[f"c{i}"] for i in range(1, 5))
    x = case.inputs["x0"]
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-5)
    return [(y * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype)]


def numpy_lrn(size: int, alpha: float, beta: float = 0.75, bias: float = 1.0):
    def reference(case: OnnxCase) -> list[np.ndarray]:
        x = case.inputs["x0"].astype(np.float64)
        square_sum = np.zeros_like(x)
        for c in range(x.shape[1]):
            begin, end = max(0, c - (size - 1) // 2), c + size - (size - 1) // 2
            square_sum[:, c] = (x[:, begin:end] ** 2).sum(axis=1)
        y = x / (bias + alpha / size * square_sum) ** beta
        return [y.astype(np.float32)]

    return reference


def numpy_coerced_softmax(axis: int, log: bool) -> Callable[[OnnxCase], list[np.ndarray]]:
    def reference(case: OnnxCase) -> list[np.ndarray]:
        x = case.inputs["x0"]
        flat = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
        shifted = flat - flat.max(axis=1, keepdims=True)
        total = np.exp(shifted).sum(axis=1, keepdims=True)
        y = shifted - np.log(total) if log else np.exp(shifted) / total
        return [y.reshape(x.shape).astype(x.dtype)]

    return reference
