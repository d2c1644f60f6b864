"""The ONNX importer: load a model, refuse what cannot be compiled, and lower
its graph node by node into the entry computation of an `ir.Module`.

The entry's parameters are the graph inputs that are not initializers, in
graph order; its root is a tuple of the graph outputs, in order.  Sequences
are static (sequence.py): a sequence input or output of k tensors is k
parameters or results named "NAME.0" ... "NAME.{k-1}", and an optional that
holds nothing is none; `input_structure` gives each sequence input's length
and marks optional inputs given no value.  Subgraphs (If branches, Loop and
Scan bodies) are lowered inline by a nested `GraphLowering` that sees the
enclosing graphs' values, as ONNX scoping says.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ...errors import AotcError, ModelError, UnsupportedError
from ...ir import ComputationBuilder, Instruction, Module
from ...ir.bounds import DimRange
from ...names import to_c_identifier
from . import (
    activation,
    attention,
    casts,
    constants,
    contrib_activation,
    contrib_attention,
    contrib_fused,
    contrib_gqa,
    contrib_nbits,
    contrib_norm,
    contrib_qlinear,
    contrib_quant,
    contrib_tensor,
    control,
    detection,
    elementwise,
    indexing,
    linalg,
    loss,
    ml,
    ml_linear,
    ml_maps,
    ml_preprocess,
    ml_svm,
    ml_tree_ops,
    nn,
    norm,
    quantize,
    random,
    recurrent,
    reduce,
    resize,
    sampling,
    selection,
    sequence,
    shape_ops,
    signal,
    text_features,
)
from .boundary import ModelBoundary
from .bounded import check_bounded
from .dtypes import tensor_constant
from .external_data import read_tensor_data, with_external_data
from .registry import (
    DEFAULT_DOMAINS,
    Lowering,
    NodeContext,
    find_lowering,
    node_attributes,
    node_label,
    node_name,
    schema,
)
from .sequence import NO_VALUE, SequenceValue, Value
from .tensor_arrays import TensorArrays
from .wire import SlimModel, WireError, slim_model

# the lowering families; importing them fills LOWERINGS (listed here, in one place)
FAMILIES = (
    activation,
    attention,
    casts,
    constants,
    contrib_activation,
    contrib_attention,
    contrib_fused,
    contrib_gqa,
    contrib_nbits,
    contrib_norm,
    contrib_qlinear,
    contrib_quant,
    contrib_tensor,
    control,
    detection,
    elementwise,
    indexing,
    linalg,
    loss,
    ml,
    ml_linear,
    ml_maps,
    ml_preprocess,
    ml_svm,
    ml_tree_ops,
    nn,
    norm,
    quantize,
    random,
    recurrent,
    reduce,
    resize,
    sampling,
    selection,
    sequence,
    shape_ops,
    signal,
    text_features,
)

InputShapes = Mapping[str, Sequence[int | DimRange]]
# sequence input -> its length; optional input given no value -> None
InputStructure = Mapping[str, int | None]
# what a target's byte dot products take (import_onnx's `byte_dot_signs`)
BYTE_DOT_SIGNS = ("mixed", "same")


def import_onnx(
    model: onnx.ModelProto | str | Path,
    input_shapes: InputShapes | None = None,
    name: str | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
    input_structure: InputStructure | None = None,
    byte_dot_signs: str = "mixed",
    dim_extents: Mapping[str, int | DimRange] | None = None,
    count_caps: Mapping[str, int] | None = None,
) -> Module:
    """Lower an ONNX model (or a path to one) to an IR module.

    Inputs named in `input_values` become constants with those values (the
    model is specialised on them, e.g. a Reshape's shape fed as an input).
    Shapes and values of a sequence's tensors are keyed "NAME.0", "NAME.1"...
    A dim of `input_shapes` may be a DimRange, and `dim_extents` gives the model's
    symbolic dims (dim_param names) their extents or ranges: a range makes the dim
    bounded (Shape.dynamic), any extent in it taken at run time.
    `byte_dot_signs` is what the target's byte dot products take, "mixed" (one u8 and
    one s8 operand) or "same" (two s8 or two u8): quantized products get those types.
    `count_caps` caps the counts the data gives (NonZero's, NonMaxSuppression's...) of
    the nodes with those outputs: at most that many results (`NodeContext.count_bound`).
    """
    if byte_dot_signs not in BYTE_DOT_SIGNS:
        raise ValueError(f"byte_dot_signs {byte_dot_signs!r} is not one of {BYTE_DOT_SIGNS}")
    model, arrays = load_model(model)
    opsets = model_opsets(model)
    check_supported(model.graph, opsets)
    module = Module(to_c_identifier(name or model.graph.name or "model"))
    b = ComputationBuilder(module, "main")
    top = GraphLowering(b, model.graph, opsets, _used_names(model.graph), arrays=arrays)
    top.byte_dot_signs = byte_dot_signs
    top.count_caps = dict(count_caps or {})
    boundary = ModelBoundary(top, input_shapes, input_values, input_structure, dim_extents)
    module.input_names = boundary.bind_inputs()
    top.lower_nodes()
    _check_count_caps(model.graph, top.count_caps)
    b.origin = None
    outputs, module.output_names = boundary.flat_outputs()
    b.build(b.tuple(outputs), entry=True)
    return module


def _node_cap(node: onnx.NodeProto, caps: Mapping[str, int]) -> int | None:
    """The smallest --count given for an output of `node`, or None."""
    found = [caps[name] for name in node.output if name in caps]
    return min(found) if found else None


def _check_count_caps(graph: onnx.GraphProto, caps: Mapping[str, int]) -> None:
    """Refuse a --count naming no node output of the model (its subgraphs' included)."""
    named: set[str] = set()
    pending = [graph]
    while pending:
        g = pending.pop()
        for node in g.node:
            named.update(node.output)
            pending += [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
            pending += [sub for a in node.attribute for sub in a.graphs]
    unknown = sorted(set(caps) - named)
    if unknown:
        raise UnsupportedError(f"--count names no node output of the model: {', '.join(unknown)}")


def load_model(source: onnx.ModelProto | str | Path) -> tuple[onnx.ModelProto, TensorArrays]:
    """The model, read and checked to hold a graph whose names are named, UTF-8 text, and
    the arrays of its tensors read from files: its external data, checked and read by
    aotc (external_data.py), from the model's folder, or for a model in memory from the
    working folder (into a copy); for a model file, every big tensor's raw data too, read
    once straight from the file (wire.py)."""
    if isinstance(source, onnx.ModelProto):
        _check_names(source, "the model")
        return with_external_data(source, ".")
    path = Path(source)
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        with open(path, "rb") as file:
            model, slim = _parse(path, file)
            _check_model(model, path)
            return model, read_tensor_data(model, str(path.parent), file, slim)
    except OSError as e:
        raise ModelError(f"{path}: not a readable ONNX model ({_first_line(e)})") from e


def _parse(path: Path, file: io.BufferedIOBase) -> tuple[onnx.ModelProto, SlimModel | None]:
    """The model in the file, parsed without its big payloads (None: a text format, which
    onnx reads whole, as the file's extension says)."""
    try:
        if _text_format(path):
            return onnx.load(str(path), load_external_data=False), None
        data, slim = slim_model(file)
        model = onnx.ModelProto()
        if model.ParseFromString(data) != len(data):
            raise DecodeError("protobuf decoding consumed too few bytes")
    except (WireError, DecodeError, ValueError, onnx.checker.ValidationError) as e:
        raise ModelError(f"{path}: not a readable ONNX model ({_first_line(e)})") from e
    return model, slim


def _text_format(path: Path) -> bool:
    """Whether onnx reads the file as text (.textproto, .json...), not binary protobuf."""
    found = onnx.serialization.registry.get_format_from_file_extension(path.suffix)
    return found not in (None, "protobuf")


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _check_model(model: onnx.ModelProto, path: Path) -> None:
    if not model.HasField("graph"):
        raise ModelError(f"{path}: not a readable ONNX model (it has no graph)")
    _check_names(model, str(path))


def _check_names(model: onnx.ModelProto, where: str) -> None:
    """Refuse text left as bytes (not UTF-8) and unnamed graph values: a graph input,
    output or initializer needs a name (a node's empty input or output name is an
    omitted optional one, checked per node)."""
    field = _undecoded_text(model)
    if field is not None:
        raise ModelError(f"{where}: not a readable ONNX model ({field} is not UTF-8 text)")
    graphs = [model.graph, *(g for _, node in _all_nodes(model.graph) for g in _subgraphs(node))]
    for graph in graphs:
        for what, values in (("input", graph.input), ("output", graph.output)):
            for i, value in enumerate(values):
                if not value.name:
                    raise ModelError(f"graph '{graph.name}': {what} {i} has an empty name")
        for i, tensor in enumerate(graph.initializer):
            if not tensor.name:
                raise ModelError(f"graph '{graph.name}': initializer {i} has an empty name")


def _undecoded_text(message) -> str | None:
    """The first text field (a name, an op type...) that protobuf left as bytes because
    it is not valid UTF-8, as `message.field`; None when all decode.  Only message and
    text fields are walked, never a tensor's numbers."""
    for descriptor, value in message.ListFields():
        values = value if descriptor.is_repeated else [value]
        if descriptor.type == descriptor.TYPE_STRING:
            if any(not isinstance(v, str) for v in values):
                return f"{message.DESCRIPTOR.name}.{descriptor.name}"
        elif descriptor.type == descriptor.TYPE_MESSAGE:
            for v in values:
                found = _undecoded_text(v)
                if found is not None:
                    return found
    return None


# opset versions onnx's schema lookup takes (a C int); others are refused, not a TypeError
OPSET_RANGE = range(1, 2**31)


def model_opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Opset version per domain; ONNX's own domain under ""."""
    opsets = {}
    for entry in model.opset_import:
        domain = "" if entry.domain in DEFAULT_DOMAINS else entry.domain
        if entry.version not in OPSET_RANGE:
            shown = entry.domain or "ai.onnx"
            raise UnsupportedError(
                f"opset version {entry.version} of domain {shown} is not supported"
            )
        opsets[domain] = entry.version
    return opsets


def node_opset(node: onnx.NodeProto, opsets: Mapping[str, int]) -> int:
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    return opsets.get(domain, 1)


def _all_nodes(graph: onnx.GraphProto) -> Iterator[tuple[int, onnx.NodeProto]]:
    """Every node with its index in its graph, nested graphs (If, Loop...) included."""
    for index, node in enumerate(graph.node):
        yield index, node
        for sub in _subgraphs(node):
            yield from _all_nodes(sub)


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        yield from [attr.g] if attr.HasField("g") else attr.graphs


def check_supported(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> None:
    """Refuse the model at once, listing every node aotc cannot lower."""
    refused = []
    for index, node in _all_nodes(graph):
        opset = node_opset(node, opsets)
        if find_lowering(node.op_type, node.domain, opset) is None:
            refused.append(node_label(node, index, opset))
    if refused:
        raise UnsupportedError(f"unsupported ONNX ops: {', '.join(refused)}")


def uses_onnxruntime_extras(model: onnx.ModelProto) -> bool:
    """Whether the model has ops onnxruntime registers in ONNX's domain where onnx has no
    schema (LayerNormalization before opset 17...), which onnx's checker refuses."""
    opsets = model_opsets(model)
    for _, node in _all_nodes(model.graph):
        lowering = find_lowering(node.op_type, node.domain, node_opset(node, opsets))
        if lowering is not None and not lowering.domain and lowering.arity is not None:
            return True
    return False


def _used_names(graph: onnx.GraphProto) -> set[str]:
    """Names some node or graph output reads, nested graphs included."""
    used = {output.name for output in graph.output}
    for _, node in _all_nodes(graph):
        used.update(node.input)
        for sub in _subgraphs(node):
            used.update(output.name for output in sub.output)
    used.discard("")  # an omitted optional input names no value
    return used


class GraphLowering:
    """Lowers the nodes of one graph into the builder's computation; a nested graph's
    lowering looks names up in its own values first, then in the enclosing graphs'."""

    def __init__(
        self,
        b: ComputationBuilder,
        graph: onnx.GraphProto,
        opsets,
        used: set[str],
        input_names: dict[int, str] | None = None,
        parent: GraphLowering | None = None,
        arrays: TensorArrays | None = None,
    ):
        if len(graph.sparse_initializer):
            raise UnsupportedError("sparse initializers are not supported")
        self.b = b
        self.graph = graph
        self.opsets = opsets
        self.used = used
        self.parent = parent
        # the arrays of the model's tensors read from files (load_model), shared by nesting
        self.arrays: TensorArrays | None = arrays if parent is None else parent.arrays
        self.initializers = {t.name: t for t in graph.initializer}
        self.values: dict[str, Value] = {}
        # id(parameter) -> its model input name (for InputValuesRequired), shared by nesting
        self.input_names = {} if input_names is None else input_names
        # the operand types quantized products get (import_onnx), as the enclosing graph's
        self.byte_dot_signs: str = "mixed" if parent is None else parent.byte_dot_signs
        # output name -> the most results its node's data-given count keeps (import_onnx)
        self.count_caps: dict[str, int] = {} if parent is None else parent.count_caps

    def lower_nodes(self) -> None:
        for index, node in enumerate(self.graph.node):
            self._lower(index, node)

    def lower_graph(self, graph: onnx.GraphProto, inputs: Sequence[Value]) -> list[Value]:
        """Lower a subgraph inline with its inputs bound to `inputs`; its output values."""
        if len(inputs) != len(graph.input):
            raise ModelError(
                f"graph '{graph.name}' has {len(graph.input)} inputs, {len(inputs)} are given"
            )
        child = GraphLowering(self.b, graph, self.opsets, self.used, self.input_names, self)
        child.values.update((info.name, value) for info, value in zip(graph.input, inputs))
        origin = self.b.origin
        child.lower_nodes()
        self.b.origin = origin
        return [child.lookup(output.name) for output in graph.output]

    def lookup(self, name: str) -> Value:
        if name in self.values:
            return self.values[name]
        if name in self.initializers:
            tensor, what = self.initializers[name], f"initializer '{name}'"
            origin, self.b.origin = self.b.origin, None
            self.values[name] = tensor_constant(self.b, tensor, what, self.arrays, name)
            self.b.origin = origin
            return self.values[name]
        if self.parent is None:
            raise ModelError(f"value '{name}' is used before it is defined")
        return self.parent.lookup(name)

    def _lower(self, index: int, node: onnx.NodeProto) -> None:
        opset = node_opset(node, self.opsets)
        label = node_label(node, index, opset)
        lowering = find_lowering(node.op_type, node.domain, opset)
        assert lowering is not None, label  # check_supported ran first
        self.b.origin = node_name(node, index)
        try:
            _check_arity(node, opset, lowering)
            inputs = [self.lookup(name) if name else None for name in node.input]
            _check_kinds(node, opset, inputs, lowering)
            check_bounded(node.domain, node.op_type, inputs)
            ctx = NodeContext(
                self.b,
                node,
                opset,
                inputs,
                node_attributes(node, opset),
                [name in self.used for name in node.output],
                self.input_names,
                self.lower_graph,
                self.byte_dot_signs,
                _node_cap(node, self.count_caps),
                arrays=self.arrays,
            )
            result = lowering.fn(ctx, *inputs)
            if ctx.count_cap is not None and not ctx.count_cap_taken:
                raise UnsupportedError(
                    "--count applies to the outputs of nodes whose counts the data gives "
                    "(NonZero, NonMaxSuppression, Compress, TopK by a k that is data)"
                )
        except AotcError as e:
            raise e.with_context(label) from e
        except (ValueError, TypeError, IndexError, KeyError) as e:
            # a malformed attribute or input that slipped past the checks above
            raise ModelError(f"{label}: cannot lower this node ({type(e).__name__}: {e})") from e
        single = isinstance(result, (Instruction, SequenceValue)) or result is NO_VALUE
        outputs = [result] if single else list(result)
        for i, name in enumerate(node.output):
            produced = outputs[i] if i < len(outputs) else None
            if name and produced is not None:
                self.values[name] = produced
            elif name in self.used:
                raise UnsupportedError(f"{label}: output {i} ('{name}') is not supported")


def _check_kinds(
    node: onnx.NodeProto, opset: int, inputs: Sequence[Value | None], lowering: Lowering
) -> None:
    """Refuse a sequence or an empty optional where the schema takes only tensors (contrib
    ops take only tensors)."""
    spec = schema(node.op_type, opset, node.domain) if lowering.arity is None else None
    allowed = {c.type_param_str: c.allowed_type_strs for c in spec.type_constraints} if spec else {}
    for i, value in enumerate(inputs):
        if isinstance(value, SequenceValue):
            kinds, what = ("seq(", "optional(seq("), "a sequence"
        elif value is NO_VALUE:
            kinds, what = ("optional(",), "an optional holding no value"
        else:
            continue
        types = []
        if spec is not None:
            formal = spec.inputs[min(i, len(spec.inputs) - 1)]
            types = allowed.get(formal.type_str, [formal.type_str])
        if not any(t.startswith(kinds) for t in types):
            raise ModelError(f"input {i} ('{node.input[i]}') is {what}; this op takes a tensor")


def _check_arity(node: onnx.NodeProto, opset: int, lowering: Lowering) -> None:
    if lowering.arity is not None:
        (in_low, in_high), (out_low, out_high) = lowering.arity
    else:
        spec = schema(node.op_type, opset, node.domain)
        in_low, in_high = spec.min_input, spec.max_input
        out_low, out_high = spec.min_output, spec.max_output
    for what, count, low, high in (
        ("inputs", len(node.input), in_low, in_high),
        ("outputs", len(node.output), out_low, out_high),
    ):
        if not low <= count <= high:
            raise ModelError(f"has {count} {what}, expected {low} to {high}")
    # an empty name omits an optional input: refuse it where the schema says required (a
    # single input, or one of a variadic list, which the last formal parameter takes)
    formal = [] if lowering.arity is not None or spec is None else spec.inputs
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    for i, name in enumerate(node.input):
        if not name and formal and formal[min(i, len(formal) - 1)].option != optional:
            raise ModelError(f"input {i} has an empty name, but the op requires it")
