"""MLIR attribute values and tensor types, read from a `Cursor`.

Values come back as plain Python: ints, floats, bools, strings, words (enum
cases such as DEFAULT), lists, dicts, `Dense` (a `dense<...>` literal, made an
array once its type is known), `DialectAttr` (`#stablehlo.gather<...>`,
`#stablehlo<comparison_direction GT>`: read further where used), and the
`[1] x [0]` pairs and `[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]` triples of the
pretty forms as tuples.  Types are `Shape`s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ...errors import UnsupportedError
from ...ir import DType, Shape, TupleShape
from ...ir.types import AnyShape
from .tokens import Cursor, Token

ELEMENT_TYPES = {
    "i1": DType.PRED,
    "i2": DType.S2,
    "i4": DType.S4,
    "i8": DType.S8,
    "i16": DType.S16,
    "i32": DType.S32,
    "i64": DType.S64,
    "si8": DType.S8,
    "si16": DType.S16,
    "si32": DType.S32,
    "si64": DType.S64,
    "ui2": DType.U2,
    "ui4": DType.U4,
    "ui8": DType.U8,
    "ui16": DType.U16,
    "ui32": DType.U32,
    "ui64": DType.U64,
    "f16": DType.F16,
    "bf16": DType.BF16,
    "f32": DType.F32,
    "f64": DType.F64,
    "f8E4M3FN": DType.F8E4M3FN,
    "f8E4M3FNUZ": DType.F8E4M3FNUZ,
    "f8E5M2": DType.F8E5M2,
    "f8E5M2FNUZ": DType.F8E5M2FNUZ,
    "f8E8M0FNU": DType.F8E8M0FNU,
    "f4E2M1FN": DType.F4E2M1FN,
}
_BOUNDS = re.compile(r",\s*#stablehlo\.bounds<([^>]*)>\s*$")


@dataclass(frozen=True)
class Dense:
    """`dense<...>`: its text, made an array by `dense_array` with the type."""

    body: str
    token: Token


@dataclass(frozen=True)
class DialectAttr:
    """`#dialect.name<body>` or `#dialect<name body>`."""

    name: str
    body: str
    token: Token

    @property
    def word(self) -> str:
        """The case of an enum attribute: `#stablehlo<comparison_direction GT>` -> GT."""
        return self.body.split()[-1] if self.body.split() else ""


def angle_parts(token: Token) -> tuple[str, str]:
    """`dense<[1]>` -> ("dense", "[1]")."""
    head, _, rest = token.text.partition("<")
    return head, rest[:-1]


def tensor_type(cur: Cursor, token: Token) -> AnyShape:
    """`tensor<2x3xf32>`, `tensor<f32>`, `tuple<...>`; `?` dims only with bounds."""
    head, body = angle_parts(token)
    if head == "tuple":
        inner = Cursor(body)
        elements = []
        while inner.peek().kind != "eof":
            elements.append(tensor_type(cur, inner.expect_kind("angle", "a type")))
            inner.accept(",")
        return TupleShape(tuple(elements))
    if head != "tensor":
        raise cur.error(f"type {token.text} is not supported", token, UnsupportedError)
    bounds: list[str] = []
    match = _BOUNDS.search(body)
    if match:
        bounds = [b.strip() for b in match[1].split(",")]
        body = body[: match.start()]
    elif "," in body:
        raise cur.error(
            f"tensor encoding in {token.text} is not supported", token, UnsupportedError
        )
    *dims_text, element = body.split("x") if body else [""]
    dtype = ELEMENT_TYPES.get(element.strip())
    if dtype is None:
        raise cur.error(f"element type '{element}' is not supported", token, UnsupportedError)
    dims, dynamic = [], []
    for i, d in enumerate(dims_text):
        if d.strip().isdigit():
            dims.append(int(d))
            dynamic.append(False)
        elif d.strip() == "?" and i < len(bounds) and bounds[i].isdigit():
            dims.append(int(bounds[i]))
            dynamic.append(True)
        elif d.strip() == "?":
            raise cur.error(
                f"dynamic dim '?' in {token.text}: aotc compiles static shapes "
                "(export with concrete shapes, or bound the dim with #stablehlo.bounds)",
                token,
                UnsupportedError,
            )
        else:
            raise cur.error(f"cannot read the type {token.text}", token)
    return Shape(dtype, tuple(dims), tuple(dynamic))


def value(cur: Cursor):
    """One attribute value (see the module docstring)."""
    token = cur.advance()
    if token.kind == "punct" and token.text == "[":
        result = _list(cur)
        if cur.at("x") and cur.at("[", 1):  # [1] x [0], [b, 0]x[0, i]->[b, 0]
            cur.advance()
            cur.advance()
            pair = (result, _list(cur))
            if cur.accept("->"):
                cur.expect("[")
                return (*pair, _list(cur))
            return pair
        return result
    if token.kind == "punct" and token.text == "{":
        return dictionary(cur, "}")
    if token.kind == "angle":
        return _angle(cur, token)
    if token.kind == "number":
        return _number(token.text)
    if token.kind == "string":
        return token.text[1:-1]
    if token.kind == "symbol":
        return token.text[1:].strip('"')
    if token.kind == "word":
        return {"true": True, "false": False}.get(token.text, token.text)
    raise cur.error(f"expected a value, found '{token.text}'", token)


def _is_type(token: Token) -> bool:
    return token.kind == "angle" or (token.kind == "word" and token.text in ELEMENT_TYPES)


def _list(cur: Cursor) -> list:
    """After `[`: values up to `]`; `0:8` and `0:8:2` items (slices) as tuples."""
    items: list = []
    while not cur.accept("]"):
        item = value(cur)
        while cur.accept(":"):  # a slice bound
            item = (*(item if isinstance(item, tuple) else (item,)), value(cur))
        items.append(item)
        if not cur.accept(","):
            cur.expect("]")
            break
    return items


def dictionary(cur: Cursor, close: str) -> dict:
    """After `{` (or `<{`): `key = value` pairs up to `close`; a bare key is True."""
    result: dict = {}
    while not (cur.accept(close) or (not close and cur.peek().kind == "eof")):
        key = cur.advance()
        if key.kind not in ("word", "string"):
            raise cur.error(f"expected an attribute name, found '{key.text}'", key)
        name = key.text.strip('"')
        result[name] = value(cur) if cur.accept("=") else True
        if cur.at(":") and _is_type(cur.peek(1)):  # 1 : i64, dense<0> : tensor<4x2xi64>
            cur.advance()
            type_token = cur.advance()
            if isinstance(result[name], Dense):
                result[name] = dense_array(cur, result[name], tensor_type(cur, type_token))
        if not cur.accept(","):
            if close:
                cur.expect(close)
            break
    return result


def _angle(cur: Cursor, token: Token):
    head, body = angle_parts(token)
    if head == "dense":
        return Dense(body, token)
    if head == "array":  # array<i64: 1, 2>
        _, _, items = body.partition(":")
        return [_number(t) if t not in ("true", "false") else t == "true" for t in _split(items)]
    if head.startswith("#"):
        name = head[1:]
        if "." not in name:  # #stablehlo<comparison_direction GT>
            kind, _, rest = body.partition(" ")
            return DialectAttr(f"{name}.{kind}", rest, token)
        return DialectAttr(name, body, token)
    return token.text  # a type written as an attribute


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


class HexBits(int):
    """An integer written in hex: in a float literal, the element's bit pattern."""


def _number(text: str) -> int | float:
    if text.lower().startswith(("0x", "-0x", "+0x")):
        return HexBits(int(text, 16))
    try:
        return int(text)
    except ValueError:
        return float(text)


def inner(cur: Cursor, attr: DialectAttr) -> Cursor:
    """A cursor over an attribute's body (errors still name the attribute's line)."""
    return Cursor(attr.body, line_offset=cur.line(attr.token) - 1)


def fields(cur: Cursor, attr: DialectAttr) -> dict:
    """`#stablehlo.gather<offset_dims = [1], index_vector_dim = 1>` -> a dict."""
    return dictionary(inner(cur, attr), "")


def dense_array(cur: Cursor, dense: Dense, shape: AnyShape) -> np.ndarray:
    """The values of `dense<...>` of type `shape`: a splat, nested lists, or hex bytes."""
    if not isinstance(shape, Shape):
        raise cur.error("a dense literal of a tuple type", dense.token)
    dtype = shape.dtype
    storage = _storage(dtype)
    body = dense.body.strip()
    if body.startswith('"0x'):  # raw little-endian bytes, of one element (a splat) or all
        raw = bytes.fromhex(body[3:-1])
        if dtype is DType.PRED:
            values = np.frombuffer(raw, np.uint8).astype(bool)
        else:
            values = np.frombuffer(raw, storage)  # (aotc's hosts are little-endian)
        return _shaped(cur, dense, _as_values(values, dtype), shape)
    parsed = value(Cursor(body, line_offset=cur.line(dense.token) - 1)) if body else []
    return _shaped(cur, dense, _element_values(parsed, dtype, storage), shape)


def _storage(dtype: DType) -> np.dtype:
    """The numpy type of the text's elements (floats' hex patterns are their bits)."""
    if dtype is DType.BF16:
        return np.dtype(ml_dtypes.bfloat16)
    if dtype is DType.PRED:
        return np.dtype(bool)
    return np.dtype(dtype.numpy) if dtype.minifloat is None else np.dtype(np.float32)


def _as_values(values: np.ndarray, dtype: DType) -> np.ndarray:
    return values.astype(np.float32) if dtype is DType.BF16 else values


def _element_values(parsed, dtype: DType, storage: np.dtype) -> np.ndarray:
    """Nested lists of numbers, hex bit patterns (floats) and bools -> an array."""
    flat: list = []

    def walk(item):
        if isinstance(item, list):
            for x in item:
                walk(x)
        else:
            flat.append(item)

    walk(parsed)
    if dtype.is_float and any(isinstance(x, HexBits) for x in flat):
        unsigned = np.dtype(f"u{storage.itemsize}")
        values = [
            np.array(x, unsigned).view(storage) if isinstance(x, HexBits) else storage.type(x)
            for x in flat
        ]
        return _as_values(np.array(values, storage), dtype)
    nested = np.array(parsed, dtype=storage) if dtype.is_int else np.array(parsed)
    return _as_values(nested.astype(storage), dtype)


def _shaped(cur: Cursor, dense: Dense, values: np.ndarray, shape: Shape) -> np.ndarray:
    if values.size == 1:
        return np.full(shape.dims, values.reshape(()), values.dtype)
    if values.size != int(np.prod(shape.dims, dtype=np.int64)):
        raise cur.error(f"dense literal of {values.size} values for {shape}", dense.token)
    return values.reshape(shape.dims)
