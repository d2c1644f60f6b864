"""An ONNX model file read in protobuf's wire format, so that its weights are never copied
into the parsed message.

protobuf parses a message from one bytes object: `onnx.load` holds the whole file and then
the message's copy of every tensor, two copies of every weight.  `slim_model` walks the
file's fields instead (varints, tags and length-delimited fields, read at their offsets
through a small window; a payload is seeked past, never read) and gives the model's
message with every tensor's raw_data of more than PAYLOAD_THRESHOLD bytes left out, each
enclosing length prefix fixed, and where in the file each left-out payload lies.  The
tensor keeps an external_data entry naming its payload (`SlimModel.payload`), under a key
made for this read alone, so that no file can name a payload; its data location stays
DEFAULT, apart from the model's external data.  The payloads are read into arrays
afterwards (external_data.py).

The walk descends only into the messages on the way to tensors the importer reads
(DESCENT: the graph, its nodes and initializers, node attributes' tensors and graphs, to
protobuf's nesting limit); everything else is copied as it is, and protobuf's parse of
the result judges it.  A tensor's payload is left out only where protobuf's reading
cannot make it another's: the last raw_data field (protobuf keeps the last), of a tensor
that does not end EXTERNAL, and not in a singular field that occurs twice (protobuf
merges those occurrences into one tensor).
"""

from __future__ import annotations

import io
import os
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import onnx

# raw_data of more bytes than this is left out of the parsed message
PAYLOAD_THRESHOLD = 4096
# protobuf's default nesting limit: deeper messages are copied as they are
MAX_DEPTH = 100
# bytes read at a time where the walk reads tags and lengths
WINDOW = 1 << 16
# the largest field number protobuf allows
MAX_FIELD = 2**29 - 1

VARINT, FIXED64, LENGTH, GROUP_START, GROUP_END, FIXED32 = range(6)
FIXED_SIZES = {FIXED64: 8, FIXED32: 4}


def _descended(message, *names: str) -> dict[int, tuple[str, bool]]:
    """Field number -> (the name of its message type, whether it is repeated)."""
    found = message.DESCRIPTOR.fields_by_name
    return {
        found[name].number: (found[name].message_type.name, found[name].is_repeated)
        for name in names
    }


# message -> the fields the walk descends into (the messages that may hold tensors)
DESCENT: dict[str, dict[int, tuple[str, bool]]] = {
    "ModelProto": _descended(onnx.ModelProto, "graph"),
    "GraphProto": _descended(onnx.GraphProto, "node", "initializer"),
    "NodeProto": _descended(onnx.NodeProto, "attribute"),
    "AttributeProto": _descended(onnx.AttributeProto, "t", "tensors", "g", "graphs"),
}
TENSOR = onnx.TensorProto.DESCRIPTOR.name
_TENSOR_FIELDS = onnx.TensorProto.DESCRIPTOR.fields_by_name
RAW_DATA = _TENSOR_FIELDS["raw_data"].number
DATA_LOCATION = _TENSOR_FIELDS["data_location"].number
EXTERNAL_DATA = _TENSOR_FIELDS["external_data"].number
# the data locations protobuf takes (another value is kept aside, the field unchanged)
LOCATIONS = frozenset(onnx.TensorProto.DataLocation.values())
_ENTRY_FIELDS = onnx.StringStringEntryProto.DESCRIPTOR.fields_by_name
ENTRY_KEY, ENTRY_VALUE = _ENTRY_FIELDS["key"].number, _ENTRY_FIELDS["value"].number


class WireError(Exception):
    """The file is not protobuf's wire format; the message says where and why."""


@dataclass(frozen=True)
class Payload:
    """A tensor's raw_data left out of the message: where its bytes are in the file."""

    offset: int
    length: int


@dataclass(frozen=True)
class SlimModel:
    """The payloads left out of a model's message, and how its tensors name them."""

    payloads: list[Payload]
    key: str  # the external_data key that names a tensor's payload, made for this read

    def payload(self, tensor: onnx.TensorProto) -> Payload | None:
        """The payload left out of `tensor`, or None where it keeps its data."""
        if tensor.data_location != onnx.TensorProto.DEFAULT:
            return None
        named = [entry.value for entry in tensor.external_data if entry.key == self.key]
        return self.payloads[int(named[-1])] if named else None


def slim_model(file: io.BufferedIOBase) -> tuple[bytearray, SlimModel]:
    """The model in `file` (binary protobuf) without the raw_data of its big tensors:
    the message to parse, and where each payload left out is.  Raises WireError where the
    file's framing is broken (a truncated field, a bad varint, a length past the end)."""
    size = os.fstat(file.fileno()).st_size
    walk = _Walk(file, size, f"aotc.payload.{secrets.token_hex(8)}")
    parts = walk.message("ModelProto", 0, size, 0)
    data = bytearray(parts.length)
    view, at = memoryview(data), 0
    for part in parts.items:
        if isinstance(part, bytes):
            view[at : at + len(part)] = part
            at += len(part)
        else:
            start, end = part
            if not read_at(file, start, view[at : at + end - start]):
                raise WireError("the file shrank while it was read")
            at += end - start
    return data, SlimModel(walk.payloads, walk.key)


def read_at(file: io.BufferedIOBase, offset: int, view: memoryview) -> bool:
    """Fill `view` with the file's bytes from `offset`; False if the file ends first."""
    file.seek(offset)
    done = 0
    while done < len(view):
        count = file.readinto(view[done:])
        if not count:
            return False
        done += count
    return True


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_field(number: int, value: bytes) -> bytes:
    return encode_varint(number << 3 | LENGTH) + encode_varint(len(value)) + value


def payload_entry(key: str, index: int) -> bytes:
    """A TensorProto field: the external_data entry `key` = the payload's index."""
    entry = _length_field(ENTRY_KEY, key.encode()) + _length_field(ENTRY_VALUE, b"%d" % index)
    return _length_field(EXTERNAL_DATA, entry)


@dataclass
class _Parts:
    """A message as written: new bytes, and spans of the file copied as they are."""

    items: list[bytes | tuple[int, int]] = field(default_factory=list)
    length: int = 0

    def copy(self, start: int, end: int) -> None:
        if start == end:
            return
        last = self.items[-1] if self.items else None
        if isinstance(last, tuple) and last[1] == start:
            self.items[-1] = (last[0], end)
        else:
            self.items.append((start, end))
        self.length += end - start

    def add(self, data: bytes) -> None:
        self.items.append(data)
        self.length += len(data)

    def extend(self, other: _Parts) -> None:
        for item in other.items:
            if isinstance(item, bytes):
                self.add(item)
            else:
                self.copy(*item)


class _Field(NamedTuple):
    number: int
    wire: int
    start: int  # the tag's first byte
    tag_end: int
    value_start: int  # a length-delimited field's first byte after its length
    end: int


class _Walk:
    """One walk over a file: its reading window, and the payloads left out so far."""

    def __init__(self, file: io.BufferedIOBase, size: int, key: str):
        self.file, self.size, self.key = file, size, key
        self.window, self.window_start = b"", 0
        self.payloads: list[Payload] = []

    def message(self, kind: str, start: int, end: int, depth: int) -> _Parts:
        """The message of type `kind` at [start, end), its big payloads left out."""
        fields = self._fields(start, end)
        if kind == TENSOR:
            return self._tensor(fields, start, end)
        descent = DESCENT[kind]
        counts = Counter(f.number for f in fields)
        parts = _Parts()
        copied = start  # the fields from here to the current one are copied as they are
        for f in fields:
            child, repeated = descent.get(f.number, (None, True))
            if (
                child is None
                or f.wire != LENGTH
                or f.end - f.value_start <= PAYLOAD_THRESHOLD
                or depth >= MAX_DEPTH
                or (child == TENSOR and not repeated and counts[f.number] > 1)  # merged
            ):
                continue
            inner = self.message(child, f.value_start, f.end, depth + 1)
            if inner.length == f.end - f.value_start:
                continue
            parts.copy(copied, f.tag_end)
            parts.add(encode_varint(inner.length))
            parts.extend(inner)
            copied = f.end
        parts.copy(copied, end)
        return parts

    def _tensor(self, fields: list[_Field], start: int, end: int) -> _Parts:
        parts = _Parts()
        raw = [f for f in fields if f.number == RAW_DATA and f.wire == LENGTH]
        locations = [self._varint(f.value_start, f.end)[0] for f in fields if _is_location(f)]
        located = [value for value in locations if value in LOCATIONS]
        external = bool(located) and located[-1] == onnx.TensorProto.EXTERNAL
        if not raw or raw[-1].end - raw[-1].value_start <= PAYLOAD_THRESHOLD or external:
            parts.copy(start, end)
            return parts
        left_out = raw[-1]
        parts.copy(start, left_out.start)
        parts.copy(left_out.end, end)
        parts.add(payload_entry(self.key, len(self.payloads)))
        self.payloads.append(Payload(left_out.value_start, left_out.end - left_out.value_start))
        return parts

    def _fields(self, start: int, end: int) -> list[_Field]:
        fields, at = [], start
        while at < end:
            window, index = self.window, at - self.window_start
            if 0 <= index and index + 3 <= len(window) and at + 2 <= end:
                # the common field, a one-byte tag and length: read here, not by calls
                tag, length = window[index], window[index + 1]
                if tag < 0x80 and tag & 7 == LENGTH and tag > 7 and length < 0x80:
                    value_end = at + 2 + length
                    if value_end > end:
                        self._value(tag >> 3, LENGTH, at, at + 1, end)  # raises
                    fields.append(_Field(tag >> 3, LENGTH, at, at + 1, at + 2, value_end))
                    at = value_end
                    continue
            number, wire, value_at = self._tag(at, end)
            if wire == GROUP_END:
                raise WireError(f"an end-group tag at byte {at} ends no group")
            value_start, value_end = self._value(number, wire, at, value_at, end)
            fields.append(_Field(number, wire, at, value_at, value_start, value_end))
            at = value_end
        return fields

    def _tag(self, at: int, end: int) -> tuple[int, int, int]:
        tag, value_at = self._varint(at, end)
        number, wire = tag >> 3, tag & 7
        if not 1 <= number <= MAX_FIELD:
            raise WireError(f"field number {number} at byte {at} is out of range")
        return number, wire, value_at

    def _value(self, number: int, wire: int, at: int, value_at: int, end: int) -> tuple[int, int]:
        """Where the value of the field whose tag is at `at` lies: [start, end)."""
        if wire == VARINT:
            return value_at, self._varint(value_at, end)[1]
        if wire == GROUP_START:
            return value_at, self._group_end(number, value_at, end)
        if wire == LENGTH:
            length, value_at = self._varint(value_at, end)
        elif wire in FIXED_SIZES:
            length = FIXED_SIZES[wire]
        else:
            raise WireError(f"field {number} at byte {at} has wire type {wire}, which is none")
        if length > end - value_at:
            raise WireError(
                f"field {number} at byte {at} runs past the end of its message "
                f"({length} bytes, {end - value_at} left)"
            )
        return value_at, value_at + length

    def _group_end(self, number: int, at: int, end: int) -> int:
        """The end of a group (a deprecated encoding that unknown fields may use)."""
        open_groups = [number]
        while open_groups:
            inner, wire, value_at = self._tag(at, end)
            if wire == GROUP_END:
                if inner != open_groups.pop():
                    raise WireError(f"the end-group tag at byte {at} ends another group")
                at = value_at
            elif wire == GROUP_START:
                open_groups.append(inner)
                at = value_at
            else:
                at = self._value(inner, wire, at, value_at, end)[1]
        return at

    def _varint(self, at: int, end: int) -> tuple[int, int]:
        """The varint at `at` (inside a message ending at `end`) and where it ends."""
        window, index = self.window, at - self.window_start
        if index < 0 or index + 10 > len(window):
            window, index = self._window(at)
        if at < end and window[index] < 0x80:  # most tags and lengths: one byte
            return window[index], at + 1
        value = 0
        for count in range(10):
            if at + count >= end:
                raise WireError(f"the varint at byte {at} runs past the end of its message")
            byte = window[index + count]
            value |= (byte & 0x7F) << (7 * count)
            if byte < 0x80:
                return value, at + count + 1
        raise WireError(f"the varint at byte {at} is longer than 10 bytes")

    def _window(self, at: int) -> tuple[bytes, int]:
        """The window holding the 10 bytes from `at` (fewer at the file's end)."""
        index = at - self.window_start
        need = min(10, self.size - at)
        if index < 0 or index + need > len(self.window):
            self.file.seek(at)
            self.window, self.window_start, index = self.file.read(WINDOW), at, 0
            if len(self.window) < need:
                raise WireError("the file shrank while it was read")
        return self.window, index


def _is_location(f: _Field) -> bool:
    return f.number == DATA_LOCATION and f.wire == VARINT
