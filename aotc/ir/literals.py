"""Values written in HLO text: constant literals and attribute values (slices,
padding, windows, dim_labels, ...), each read from a `TokenStream` by one function.

`text.py` holds their printers; the two are exact inverses on canonical text.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import UnsupportedError
from .attrs import ConvDims, FusionKind, PaddingConfig, SliceSpec, Window
from .ops import Direction
from .tokens import INT_RE, Token, TokenStream
from .types import AnyShape, DType, Shape, cast_array

_FLOAT_RE = re.compile(r"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|inf|nan)")
_PRED = {"true": True, "false": False, "1": True, "0": False}
_WINDOW_FIELDS = {
    "size": "size",
    "stride": "stride",
    "lhs_dilate": "lhs_dilation",
    "rhs_dilate": "rhs_dilation",
}

# -- literals -----------------------------------------------------------------------


def literal(ts: TokenStream, shape: AnyShape, line: int) -> np.ndarray:
    if not isinstance(shape, Shape):
        raise ts.error("tuple-shaped constants are not supported", line, UnsupportedError)
    if ts.at("{") and ts.peek(1).text == "...":
        raise ts.error("elided constant {...} cannot be read; print without eliding")
    texts: list[str] = []
    if shape.rank == 0:
        texts.append(_scalar_text(ts))
    else:
        _literal_level(ts, shape.dims, 0, texts)
    return _literal_array(ts, texts, shape, line)


def _literal_level(ts: TokenStream, dims: tuple[int, ...], depth: int, out: list[str]) -> None:
    if depth + 1 == len(dims):
        count = _literal_row(ts, out)
    else:
        count = len(ts.sequence("{", "}", lambda: _literal_level(ts, dims, depth + 1, out)))
    if count != dims[depth]:
        raise ts.error(f"literal has {count} entries in dimension {depth}, not {dims[depth]}")


def _literal_row(ts: TokenStream, out: list[str]) -> int:
    """`{v, v, ...}` into `out`; the hot loop of big constants, so on tokens directly."""
    ts.expect("{")
    if ts.accept("}"):
        return 0
    tokens, i, start = ts.tokens, ts.pos, len(out)
    while True:
        value, separator = tokens[i], tokens[i + 1]
        if value.kind not in ("word", "name") or value.text == "...":
            ts.pos = i
            out.append(_scalar_text(ts))  # reports the error
        out.append(value.text)
        i += 2
        if separator.text == "}" and separator.kind == "punct":
            ts.pos = i
            return len(out) - start
        if separator.text != "," or separator.kind != "punct":
            ts.pos = i - 1
            ts.expect(",")


def _scalar_text(ts: TokenStream) -> str:
    token = ts.advance()
    if token.text == "...":
        raise ts.error("elided constant {...} cannot be read; print without eliding")
    if token.kind not in ("word", "name"):
        raise ts.error(f"expected a number, found {ts.describe(token)}", token)
    return token.text


def _literal_array(ts: TokenStream, texts: list[str], shape: Shape, line: int) -> np.ndarray:
    dtype = shape.dtype
    if dtype is DType.PRED:
        bad = [t for t in texts if t not in _PRED]
        values = [_PRED.get(t) for t in texts]
    elif dtype.is_float:
        bad = [t for t in texts if not _FLOAT_RE.fullmatch(t)]
        values = [float(t) for t in texts] if not bad else []
    else:
        bad = [t for t in texts if not INT_RE.fullmatch(t)]
        values = [int(t) for t in texts] if not bad else []
    if bad:
        raise ts.error(f"'{bad[0]}' is not a {dtype.text} value", line)
    try:
        array = np.array(values, dtype=np.float64 if dtype.is_float else dtype.numpy)
    except OverflowError:
        raise ts.error(f"a value is out of range for {dtype.text}", line) from None
    array = cast_array(array.reshape(shape.dims), dtype)
    array.setflags(write=False)
    return array


# -- attribute values ---------------------------------------------------------------


def slice_spec(ts: TokenStream) -> SliceSpec:
    def bound() -> tuple[int, int, int]:
        ts.expect("[")
        start = ts.integer()
        ts.expect(":")
        limit = ts.integer()
        stride = ts.integer() if ts.accept(":") else 1
        ts.expect("]")
        return start, limit, stride

    bounds = ts.sequence("{", "}", bound)
    return SliceSpec(*(tuple(b[k] for b in bounds) for k in range(3)))


def padding(ts: TokenStream) -> PaddingConfig:
    if ts.at("{"):
        ts.sequence("{", "}", ts.integer)
        return PaddingConfig((), (), ())
    token = ts.advance()
    dims = [_split_ints(ts, part, "_", token) for part in token.text.split("x")]
    if any(len(d) not in (2, 3) for d in dims):
        raise ts.error(f"padding '{token.text}' is not lo_hi[_interior]x...", token)
    return PaddingConfig(*(tuple(d[k] if k < len(d) else 0 for d in dims) for k in range(3)))


def _split_ints(ts: TokenStream, text: str, sep: str, token: Token) -> list[int]:
    parts = text.split(sep)
    if not all(INT_RE.fullmatch(p) for p in parts):
        raise ts.error(f"cannot read '{token.text}'", token)
    return [int(p) for p in parts]


def window(ts: TokenStream) -> Window:
    fields: dict[str, list] = {}
    ts.expect("{")
    while not ts.accept("}"):
        key = ts.name()
        ts.expect("=")
        token = ts.advance()
        if key == "pad":
            pairs = [_split_ints(ts, p, "_", token) for p in token.text.split("x")]
            if any(len(p) != 2 for p in pairs):
                raise ts.error(f"window pad '{token.text}' is not lo_hi x ...", token)
            fields["pad_low"] = [p[0] for p in pairs]
            fields["pad_high"] = [p[1] for p in pairs]
        elif key in ("window_reversal", "rhs_reversal"):
            if any(_split_ints(ts, token.text, "x", token)):
                raise ts.error("reversed windows are not supported", token, UnsupportedError)
        elif key in _WINDOW_FIELDS:
            fields[_WINDOW_FIELDS[key]] = _split_ints(ts, token.text, "x", token)
        else:
            raise ts.error(f"unknown window field '{key}'", token)
    size = fields.get("size", [])
    if any(len(v) != len(size) for v in fields.values()):
        raise ts.error("window fields differ in rank")
    return Window.make(**fields) if size else Window((), (), (), (), (), ())


def dim_labels(ts: TokenStream) -> ConvDims:
    first = ts.advance()
    ts.expect("->")
    out = ts.advance().text
    lhs, _, rhs = first.text.partition("_")
    try:
        return ConvDims(
            lhs.index("b"),
            lhs.index("f"),
            _spatial(lhs, "bf"),
            rhs.index("i"),
            rhs.index("o"),
            _spatial(rhs, "io"),
            out.index("b"),
            out.index("f"),
            _spatial(out, "bf"),
        )
    except ValueError:
        raise ts.error(f"cannot read dim_labels={first.text}->{out}", first) from None


def direction(ts: TokenStream) -> Direction:
    token = ts.advance()
    try:
        return Direction(token.text)
    except ValueError:
        raise ts.error(f"unknown comparison direction '{token.text}'", token) from None


def boolean(ts: TokenStream) -> bool:
    token = ts.advance()
    if token.text not in ("true", "false"):
        raise ts.error(f"expected true or false, found {ts.describe(token)}", token)
    return token.text == "true"


def fusion_kind(ts: TokenStream) -> FusionKind:
    token = ts.advance()
    try:
        return FusionKind(token.text)
    except ValueError:
        raise ts.error(f"unknown fusion kind '{token.text}'", token) from None


def computation_names(ts: TokenStream) -> tuple[str, ...]:
    if ts.at("{"):
        return tuple(ts.sequence("{", "}", ts.name))
    return (ts.name(),)


def metadata(ts: TokenStream) -> str:
    """`{op_name="..."}`: where the instruction came from (`Instruction.origin`)."""
    ts.expect("{")
    ts.expect("op_name")
    ts.expect("=")
    origin = ts.string()
    ts.expect("}")
    return origin


def _spatial(labels: str, letters: str) -> tuple[int, ...]:
    """Positions of spatial dims 0, 1, ... in a dim_labels part; ValueError if malformed."""
    n = len(labels) - 2
    if sorted(labels) != sorted(letters + "".join(str(i) for i in range(n))):
        raise ValueError(labels)
    return tuple(labels.index(str(i)) for i in range(n))
