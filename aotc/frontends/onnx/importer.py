"""The ONNX importer: load a model, refuse what cannot be compiled, and lower
its graph node by node into the entry computation of an `ir.Module`.

The entry's parameters are the graph inputs that are not initializers, in
graph order; its root is a tuple of the graph outputs, in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ...errors import AotcError, ModelError, UnsupportedError
from ...ir import ComputationBuilder, Instruction, Module, Shape
from . import (
    activation, attention, constants, control, elementwise, indexing, linalg, loss, nn, norm,
    quantize, recurrent, reduce, resize, sampling, sequence, shape_ops, signal,
)  # fmt: skip
from .dtypes import tensor_to_array, to_dtype
from .registry import (
    DEFAULT_DOMAINS,
    NodeContext,
    find_lowering,
    node_attributes,
    node_label,
    node_name,
    schema,
)

# the lowering families; importing them fills LOWERINGS (listed here, in one place)
FAMILIES = (
    activation, attention, constants, control, elementwise, indexing, linalg, loss, nn, norm,
    quantize, recurrent, reduce, resize, sampling, sequence, shape_ops, signal,
)  # fmt: skip

InputShapes = Mapping[str, Sequence[int]]


def import_onnx(
    model: onnx.ModelProto | str | Path,
    input_shapes: InputShapes | None = None,
    name: str | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
) -> Module:
    """Lower an ONNX model (or a path to one) to an IR module.

    Inputs named in `input_values` become constants with those values (the
    model is specialised on them, e.g. a Reshape's shape fed as an input).
    """
    model = load_model(model)
    opsets = model_opsets(model)
    check_supported(model.graph, opsets)
    module = Module(c_identifier(name or model.graph.name or "model"))
    GraphLowering(module, model.graph, opsets, input_shapes, input_values).run()
    return module


def load_model(source: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    if isinstance(source, onnx.ModelProto):
        return source
    path = Path(source)
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        model = onnx.load(str(path))
    except (DecodeError, OSError, ValueError, onnx.checker.ValidationError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelError(f"{path}: not a readable ONNX model ({reason})") from e
    if not model.HasField("graph"):
        raise ModelError(f"{path}: not a readable ONNX model (it has no graph)")
    return model


def c_identifier(name: str) -> str:
    """`name` made a C identifier (it prefixes the generated C API)."""
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned and not cleaned[0].isdigit() else "_" + cleaned


def model_opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Opset version per domain; ONNX's own domain under ""."""
    opsets = {}
    for entry in model.opset_import:
        domain = "" if entry.domain in DEFAULT_DOMAINS else entry.domain
        opsets[domain] = entry.version
    return opsets


def node_opset(node: onnx.NodeProto, opsets: Mapping[str, int]) -> int:
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    return opsets.get(domain, 1)


def _all_nodes(graph: onnx.GraphProto) -> Iterator[tuple[int, onnx.NodeProto]]:
    """Every node with its index in its graph, nested graphs (If, Loop...) included."""
    for index, node in enumerate(graph.node):
        yield index, node
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from _all_nodes(sub)


def check_supported(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> None:
    """Refuse the model at once, listing every node aotc cannot lower."""
    refused = []
    for index, node in _all_nodes(graph):
        opset = node_opset(node, opsets)
        if find_lowering(node.op_type, node.domain, opset) is None:
            refused.append(node_label(node, index, opset))
    if refused:
        raise UnsupportedError(f"unsupported ONNX ops: {', '.join(refused)}")


def _used_names(graph: onnx.GraphProto) -> set[str]:
    used = {output.name for output in graph.output}
    for _, node in _all_nodes(graph):
        used.update(node.input)
    used.discard("")  # an omitted optional input names no value
    return used


class GraphLowering:
    """Lowers one graph into the module's entry computation."""

    def __init__(self, module: Module, graph: onnx.GraphProto, opsets, input_shapes,
                 input_values=None):  # fmt: skip
        self.b = ComputationBuilder(module, "main")
        self.graph = graph
        self.opsets = opsets
        self.input_shapes = dict(input_shapes or {})
        self.input_values = dict(input_values or {})
        self.initializers = {t.name: t for t in graph.initializer}
        self.values: dict[str, Instruction] = {}
        self.input_names: dict[int, str] = {}  # id(parameter) -> ONNX input name
        self.used = _used_names(graph)

    def run(self) -> None:
        if len(self.graph.sparse_initializer):
            raise UnsupportedError("sparse initializers are not supported")
        self._parameters()
        for index, node in enumerate(self.graph.node):
            self._lower(index, node)
        self.b.origin = None
        outputs = [self._value(output.name) for output in self.graph.output]
        self.b.build(self.b.tuple(outputs), entry=True)
        module = self.b.module
        module.input_names = [
            i.name
            for i in self.graph.input
            if i.name not in self.initializers and i.name not in self.input_values
        ]
        module.output_names = [output.name for output in self.graph.output]

    def _parameters(self) -> None:
        inputs = [i for i in self.graph.input if i.name not in self.initializers]
        unknown = (set(self.input_shapes) | set(self.input_values)) - {i.name for i in inputs}
        if unknown:
            names = ", ".join(repr(i.name) for i in inputs)
            raise ModelError(
                f"--input names no graph input: {', '.join(sorted(unknown))} "
                f"(the inputs are {names})"
            )
        for info in [i for i in inputs if i.name in self.input_values]:
            self.values[info.name] = self._input_constant(info)
        inputs = [i for i in inputs if i.name not in self.input_values]
        for number, info in enumerate(inputs):
            shape = input_shape(info, self.input_shapes.get(info.name))
            param = self.b.parameter(number, shape, name=info.name)
            self.input_names[id(param)] = info.name
            self.values[info.name] = param

    def _input_constant(self, info: onnx.ValueInfoProto) -> Instruction:
        """A graph input fixed to a given value (`input_values`, `--const`)."""
        value = np.asarray(self.input_values[info.name])
        dtype = to_dtype(info.type.tensor_type.elem_type, f"input '{info.name}'")
        given = self.input_shapes.get(info.name)
        shape = input_shape(info, given if given is not None else value.shape)
        if shape.size != value.size:
            raise ModelError(
                f"--const {info.name}: {value.size} values given, the input has shape "
                f"{list(shape.dims)}"
            )
        return self.b.constant(value.reshape(shape.dims), dtype, name=info.name)

    def _value(self, name: str) -> Instruction:
        if name not in self.values:
            if name not in self.initializers:
                raise ModelError(f"value '{name}' is used before it is defined")
            array, dtype = tensor_to_array(self.initializers[name], f"initializer '{name}'")
            origin, self.b.origin = self.b.origin, None
            self.values[name] = self.b.constant(array, dtype, name=name)
            self.b.origin = origin
        return self.values[name]

    def _lower(self, index: int, node: onnx.NodeProto) -> None:
        opset = node_opset(node, self.opsets)
        label = node_label(node, index, opset)
        lowering = find_lowering(node.op_type, node.domain, opset)
        assert lowering is not None, label  # check_supported ran first
        self.b.origin = node_name(node, index)
        try:
            _check_arity(node, opset)
            inputs = [self._value(name) if name else None for name in node.input]
            ctx = NodeContext(
                self.b,
                node,
                opset,
                inputs,
                node_attributes(node, opset),
                [name in self.used for name in node.output],
                self.input_names,
            )
            result = lowering.fn(ctx, *inputs)
        except AotcError as e:
            raise e.with_context(label) from e
        except (ValueError, TypeError, IndexError, KeyError) as e:
            # a malformed attribute or input that slipped past the checks above
            raise ModelError(f"{label}: cannot lower this node ({type(e).__name__}: {e})") from e
        outputs = [result] if isinstance(result, Instruction) else list(result)
        for i, name in enumerate(node.output):
            produced = outputs[i] if i < len(outputs) else None
            if name and produced is not None:
                self.values[name] = produced
            elif name in self.used:
                raise UnsupportedError(f"{label}: output {i} ('{name}') is not supported")


def _check_arity(node: onnx.NodeProto, opset: int) -> None:
    spec = schema(node.op_type, opset, node.domain)
    for what, count, low, high in (
        ("inputs", len(node.input), spec.min_input, spec.max_input),
        ("outputs", len(node.output), spec.min_output, spec.max_output),
    ):
        if not low <= count <= high:
            raise ModelError(f"has {count} {what}, expected {low} to {high}")


def input_shape(info: onnx.ValueInfoProto, given: Sequence[int] | None) -> Shape:
    """A graph input's type, its unknown dims taken from `given` (from --input)."""
    name = info.name
    if not info.type.HasField("tensor_type"):
        raise UnsupportedError(f"input '{name}' is not a tensor")
    tensor = info.type.tensor_type
    dtype = to_dtype(tensor.elem_type, f"input '{name}'")
    model_dims = None
    if tensor.HasField("shape"):
        model_dims = [
            d.dim_value if d.HasField("dim_value") else d.dim_param or None
            for d in tensor.shape.dim
        ]
    if given is not None:
        given = [int(d) for d in given]
        if model_dims is not None and len(given) != len(model_dims):
            raise ModelError(
                f"--input {name}: rank {len(given)} given, "
                f"the model's input has rank {len(model_dims)}"
            )
        if min(given, default=0) < 0:
            raise ModelError(f"--input {name}: dims must not be negative, got {given}")
        for i, (g, m) in enumerate(zip(given, model_dims or given)):
            if isinstance(m, int) and m != g:
                raise ModelError(f"--input {name}: dim {i} is {g}, the model says {m}")
        return Shape(dtype, given)
    if model_dims is None:
        raise ModelError(
            f"input '{name}' has no shape in the model; give one with --input {name}=DIMS"
        )
    for i, m in enumerate(model_dims):
        if not isinstance(m, int):
            example = "x".join(str(d) if isinstance(d, int) else "1" for d in model_dims)
            label = f"'{m}'" if m else "unknown"
            raise ModelError(
                f"input '{name}' dim {i} is {label}; give the shape with --input {name}={example}"
            )
    return Shape(dtype, model_dims)
