"""Tensor data outside the parsed message: external data, the tensors an ONNX model keeps
in files beside it, checked and read by aotc itself, so that no release of onnx decides
which paths are followed; and the payloads the wire reader left out of the model file
itself (wire.py).

The model is parsed without its external data.  Every tensor marked EXTERNAL anywhere in
it (initializers, sparse initializers, tensor attributes, in every subgraph, function and
training graph) is then placed: its location is a relative path without '..', its real
path (symlinks resolved) lies in the model's folder, is a regular file with a single
link, and its offset and length lie inside the file and give the tensor's byte size.
Only when every tensor is placed are the bytes read, each file opened at its checked real
path and confirmed to be the file checked, and each tensor's bytes, as each payload's,
go straight into an array of its dtype and shape (tensor_arrays.py), held once.
"""

from __future__ import annotations

import io
import math
import os
import re
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import onnx
from onnx import TensorProto

from ...errors import ModelError
from .tensor_arrays import TensorArrays, byte_view, empty_array
from .wire import Payload, SlimModel, read_at

# bits per element of the fixed-width element types, by name: an onnx release without
# one of them has no tensors of it; strings have no fixed size
ELEMENT_BITS_BY_NAME = {
    "FLOAT": 32,
    "UINT8": 8,
    "INT8": 8,
    "UINT16": 16,
    "INT16": 16,
    "INT32": 32,
    "INT64": 64,
    "BOOL": 8,
    "FLOAT16": 16,
    "DOUBLE": 64,
    "UINT32": 32,
    "UINT64": 64,
    "COMPLEX64": 64,
    "COMPLEX128": 128,
    "BFLOAT16": 16,
    "FLOAT8E4M3FN": 8,
    "FLOAT8E4M3FNUZ": 8,
    "FLOAT8E5M2": 8,
    "FLOAT8E5M2FNUZ": 8,
    "FLOAT8E8M0": 8,
    "UINT4": 4,
    "INT4": 4,
    "FLOAT4E2M1": 4,
    "UINT2": 2,
    "INT2": 2,
}
ELEMENT_BITS = {
    getattr(TensorProto, name): bits
    for name, bits in ELEMENT_BITS_BY_NAME.items()
    if hasattr(TensorProto, name)
}

# offset and length are plain decimal digits (int() would also take '+1', ' 1' and '1_0')
DECIMAL = re.compile(r"[0-9]+")

# refusals of the location's text, before any file is looked at: (rule, reason)
LOCATION_RULES: tuple[tuple[Callable[[str], bool], str], ...] = (
    (lambda location: not location, "is empty"),
    (lambda location: "\0" in location, "holds a NUL character"),
    (os.path.isabs, "is absolute; it must name a file in the model's folder"),
    (
        lambda location: ".." in re.split(r"[/\\]", location),
        "steps out with '..'; it must name a file in the model's folder",
    ),
)

# what a file that is not a regular one is, for the error
FILE_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a fifo"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)

# refusals of the file the location resolves to: (rule, reason).  A hard link is the
# same file under another name, which may be outside the model's folder: the folder
# cannot show it, so a file with more than one link is refused
FILE_RULES: tuple[tuple[Callable[[os.stat_result], bool], str], ...] = (
    (lambda status: not stat.S_ISREG(status.st_mode), "is {kind}, not a regular file"),
    (
        lambda status: status.st_nlink > 1,
        (
            "has {links} hard links (another may be outside the model's folder); aotc "
            "reads only files with one: copy it"
        ),
    ),
)


@dataclass(frozen=True)
class Span:
    """Where a checked tensor's bytes are: the file (real path and identity) and the span."""

    location: str
    path: str
    identity: tuple[int, int]  # (st_dev, st_ino) of the file checked
    offset: int
    length: int


# refusals of a span in its file: (rule, reason), given the span, the file's size and the
# tensor's byte size (None where its element type has no fixed size)
SPAN_RULES: tuple[tuple[Callable[[Span, int, int | None], bool], str], ...] = (
    (
        lambda span, size, expected: span.offset + span.length > size,
        "at offset {offset}, length {length} runs past the end of '{location}' ({size} bytes)",
    ),
    (
        lambda span, size, expected: expected is not None and span.length != expected,
        "at offset {offset} of '{location}' has length {length}, not the tensor's {expected} bytes",
    ),
)


@dataclass(frozen=True)
class Scope:
    """A graph or a function: where tensors sit, and how errors name it."""

    where: str
    initializers: Iterable[TensorProto]
    sparse_initializers: Iterable[onnx.SparseTensorProto]
    nodes: Iterable[onnx.NodeProto]


def read_tensor_data(
    model: onnx.ModelProto,
    folder: str,
    model_file: io.BufferedIOBase | None = None,
    slim: SlimModel | None = None,
) -> TensorArrays:
    """Check every external tensor of `model` against `folder`, then read each, and each
    payload left out of the model (`slim`, read from `model_file`), into an array (raw_data
    where the bytes are not an array's, tensor_arrays.py): afterwards no tensor of the
    model names a file or a payload."""
    base = os.path.realpath(folder)
    spans, payloads = [], []
    for tensor, what in all_tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL:
            spans.append((tensor, what, place(tensor, base, what)))
        elif slim is not None:
            payload = slim.payload(tensor)
            if payload is not None:
                payloads.append((tensor, what, payload))
    assert slim is None or len(payloads) == len(slim.payloads), "a payload fits no tensor"
    arrays = TensorArrays()
    for tensor, what, payload in payloads:
        assert model_file is not None
        _read_payload(tensor, what, model_file, payload, arrays)
    for tensor, what, span in spans:
        array = empty_array(tensor, span.length)
        if array is None:
            _keep_bytes(tensor, read_span(span, what))
            continue
        with open_span(span, what) as file:
            if not read_at(file, span.offset, byte_view(array)):
                raise _shrank(span, what)
        arrays.add(tensor, array)
    return arrays


def with_external_data(model: onnx.ModelProto, folder: str) -> tuple[onnx.ModelProto, TensorArrays]:
    """`model` itself when no tensor is external, else a copy with them read (the
    caller's model is left as it is); and the arrays read."""
    if next(external_tensors(model), None) is None:
        return model, TensorArrays()
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy, read_tensor_data(copy, folder)


def _read_payload(
    tensor: TensorProto, what: str, file: io.BufferedIOBase, payload: Payload, arrays: TensorArrays
) -> None:
    """Read a payload left out of the model's message from the model's file."""
    array = empty_array(tensor, payload.length)
    if array is None:
        file.seek(payload.offset)
        data = file.read(payload.length)
        complete = len(data) == payload.length
    else:
        complete = read_at(file, payload.offset, byte_view(array))
    if not complete:
        raise ModelError(f"{what}: the model file shrank while it was read")
    if array is None:
        _keep_bytes(tensor, data)
    else:
        arrays.add(tensor, array)


def _keep_bytes(tensor: TensorProto, data: bytes) -> None:
    """Make `data` the tensor's own raw_data (a layout numpy_helper reads)."""
    tensor.raw_data = data
    tensor.data_location = TensorProto.DEFAULT
    del tensor.external_data[:]


def external_tensors(model: onnx.ModelProto) -> Iterator[tuple[TensorProto, str]]:
    """Every tensor of the model marked EXTERNAL, with how errors name it."""
    for tensor, what in all_tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL:
            yield tensor, what


def all_tensors(model: onnx.ModelProto) -> Iterator[tuple[TensorProto, str]]:
    """Every tensor of the model, subgraphs at any depth included (a worklist, not
    recursion), each with how errors name it."""
    scopes = deque([_graph_scope(model.graph)])
    scopes += [Scope(f"function '{f.name}'", (), (), f.node) for f in model.functions]
    for training in model.training_info:
        scopes += [_graph_scope(training.initialization), _graph_scope(training.algorithm)]
    while scopes:
        scope = scopes.popleft()
        for tensor in scope.initializers:
            yield tensor, _tensor_label(tensor, f"initializer of {scope.where}")
        for sparse in scope.sparse_initializers:
            yield from _sparse_parts(sparse, f"sparse initializer of {scope.where}")
        for index, node in enumerate(scope.nodes):
            for attr in node.attribute:
                role = (
                    f"attribute '{attr.name}' of node '{_node_name(node, index)}' in {scope.where}"
                )
                yield from _attribute_tensors(attr, role)
                scopes += [_graph_scope(g) for g in _attribute_graphs(attr)]


def _graph_scope(graph: onnx.GraphProto) -> Scope:
    return Scope(f"graph '{graph.name}'", graph.initializer, graph.sparse_initializer, graph.node)


def _node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _tensor_label(tensor: TensorProto, role: str) -> str:
    return f"tensor '{tensor.name}' ({role})" if tensor.name else f"unnamed tensor ({role})"


def _sparse_parts(sparse: onnx.SparseTensorProto, role: str) -> Iterator[tuple[TensorProto, str]]:
    """A sparse tensor's two dense tensors, its values and its indices."""
    name = sparse.values.name or sparse.indices.name
    for part, tensor in (("values", sparse.values), ("indices", sparse.indices)):
        label = f"tensor '{name}'" if name else "unnamed tensor"
        yield tensor, f"{label} ({role}, its {part})"


def _attribute_tensors(attr: onnx.AttributeProto, role: str) -> Iterator[tuple[TensorProto, str]]:
    """The tensors an attribute holds, whatever its declared type (a field set under the
    wrong type is still bytes in the model)."""
    dense = [attr.t] if attr.HasField("t") else []
    for tensor in (*dense, *attr.tensors):
        yield tensor, _tensor_label(tensor, role)
    sparse = [attr.sparse_tensor] if attr.HasField("sparse_tensor") else []
    for tensor in (*sparse, *attr.sparse_tensors):
        yield from _sparse_parts(tensor, role)


def _attribute_graphs(attr: onnx.AttributeProto) -> list[onnx.GraphProto]:
    return [attr.g, *attr.graphs] if attr.HasField("g") else list(attr.graphs)


def place(tensor: TensorProto, base: str, what: str) -> Span:
    """Where the tensor's bytes are, refused (one line naming the tensor and its location)
    unless inside a regular file of the folder `base` (a real path)."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    location = entries.get("location", "")
    for rule, reason in LOCATION_RULES:
        if rule(location):
            raise ModelError(f"{what}: external data location '{location}' {reason}")
    path = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, path]) != base:
        raise ModelError(
            f"{what}: external data location '{location}' is outside the model's folder "
            f"(it leads to '{path}')"
        )
    try:
        status = os.stat(path)
    except OSError as e:
        missing = isinstance(e, FileNotFoundError)
        reason = f"no external data file '{location}'" if missing else f"{e.strerror}: '{location}'"
        raise ModelError(f"{what}: cannot read its data ({reason})") from None
    _check_file(status, location, what)
    offset = _decimal(entries, "offset", 0, location, what)
    length = _decimal(entries, "length", max(status.st_size - offset, 0), location, what)
    span = Span(location, path, (status.st_dev, status.st_ino), offset, length)
    _check_span(span, status.st_size, _byte_size(tensor), what)
    return span


def _check_file(status: os.stat_result, location: str, what: str) -> None:
    for rule, reason in FILE_RULES:
        if rule(status):
            shown = reason.format(kind=_file_kind(status.st_mode), links=status.st_nlink)
            raise ModelError(f"{what}: external data location '{location}' {shown}")


def _file_kind(mode: int) -> str:
    return next((kind for is_kind, kind in FILE_KINDS if is_kind(mode)), "a special file")


def _decimal(entries: dict[str, str], key: str, default: int, location: str, what: str) -> int:
    """The entry `key` (offset or length) as a non-negative integer; `default` if absent."""
    if key not in entries:
        return default
    if not DECIMAL.fullmatch(entries[key]):
        raise ModelError(
            f"{what}: external data {key} '{entries[key]}' of '{location}' is not a "
            "non-negative integer"
        )
    return int(entries[key])


def _check_span(span: Span, size: int, expected: int | None, what: str) -> None:
    for rule, reason in SPAN_RULES:
        if rule(span, size, expected):
            fields = {"size": size, "expected": expected, **vars(span)}
            raise ModelError(f"{what}: external data {reason.format(**fields)}")


def _byte_size(tensor: TensorProto) -> int | None:
    """The bytes the tensor's values take (sub-byte types packed, as onnx stores them);
    None where the element type has no fixed size or a dim is negative."""
    bits = ELEMENT_BITS.get(tensor.data_type)
    if bits is None or any(dim < 0 for dim in tensor.dims):
        return None
    return (math.prod(tensor.dims) * bits + 7) // 8


def read_span(span: Span, what: str) -> bytes:
    """The span's bytes (`open_span`)."""
    with open_span(span, what) as file:
        file.seek(span.offset)
        data = file.read(span.length)
    if len(data) != span.length:
        raise _shrank(span, what)
    return data


@contextmanager
def open_span(span: Span, what: str) -> Iterator[io.BufferedIOBase]:
    """The span's file, opened at its checked real path (no symlink followed there, no
    wait on a fifo put in its place) and confirmed to be that file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(span.path, flags)
    except OSError as e:
        raise ModelError(
            f"{what}: cannot read its data ({e.strerror}: '{span.location}')"
        ) from None
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(fd)
        if (status.st_dev, status.st_ino) != span.identity:
            raise ModelError(
                f"{what}: external data file '{span.location}' was replaced after it was checked"
            )
        _check_file(status, span.location, what)
        yield file


def _shrank(span: Span, what: str) -> ModelError:
    return ModelError(f"{what}: external data file '{span.location}' shrank while it was read")
