"""HLO text parser: tokenizer and recursive descent, the inverse of `text`'s printer.

Reads aotc's canonical text and what XLA, JAX and TensorFlow dump: without
sigils, operand shapes or layouts; with comments, operands written as nested
instructions, and attributes aotc has no use for (sharding, backend_config,
...), which it skips.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..errors import ModelError, ShapeError, UnsupportedError
from .attrs import (
    ConvDims,
    DotDims,
    FusionKind,
    GatherDims,
    PaddingConfig,
    ScatterDims,
    SliceSpec,
    Window,
)  # fmt: skip
from .module import Computation, Instruction, Module
from .ops import Direction, Op, missing_attributes
from .shapes import infer_shape
from .types import AnyShape, DType, Shape, TupleShape, cast_array
from .xla_ops import EXPANSIONS, ParseSite

# -- tokens -------------------------------------------------------------------------


class Token(NamedTuple):
    # "name" (with its '%' if any), "word" (numbers, 3x3, 1_1x0_0), "string", "punct", "eof"
    kind: str
    text: str
    pos: int  # offset in the text; lines are counted only where needed (errors)


# One master pattern: skipped space and comments, then one token (a tokenizer, not
# a parser).  A '-' belongs to a name or word unless it starts '->'.
_SKIP = r"(?:\s|/\*.*?\*/|//[^\n]*)*"  # one space per repeat: no backtracking blowup
_TOKEN_RE = re.compile(
    _SKIP
    + r"""(?:
    (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<arrow>->)
  | (?P<word>(?:[-+]?[0-9.]|[-+](?=[A-Za-z]))[0-9A-Za-z_.+]*(?:-(?!>)[0-9A-Za-z_.+]*)*)
  | (?P<name>(?:%[A-Za-z0-9_.]|[A-Za-z_])[A-Za-z0-9_.]*(?:-(?!>)[A-Za-z0-9_.]*)*)
  | (?P<punct>[^\sA-Za-z0-9_"])
    )""",
    re.VERBOSE | re.DOTALL,
)
_SKIP_RE = re.compile(_SKIP, re.DOTALL)


def tokenize(text: str) -> list[Token]:
    tokens = []
    append = tokens.append
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        if m.start() != pos:
            break  # finditer skipped something no token matches
        kind = m.lastgroup
        append(Token("punct" if kind == "arrow" else kind, m.group(kind), m.start(kind)))
        pos = m.end()
    pos = _SKIP_RE.match(text, pos).end()
    if pos != len(text):
        line = text.count("\n", 0, pos) + 1
        snippet = text[pos : pos + 20].split("\n")[0]
        raise ModelError(f"HLO text line {line}: cannot read {snippet!r}")
    append(Token("eof", "", len(text)))
    return tokens


_UNESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "a": "\a",
              "b": "\b", "f": "\f", "v": "\v", "?": "?"}  # fmt: skip


def _unquote(token: str) -> str:
    """A C-escaped string token's value; octal and hex escapes are bytes of UTF-8 (absl)."""
    body = token[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        i += 1
        if ch != "\\":
            out += ch.encode()
            continue
        esc = body[i]
        if esc in "01234567":
            end = i
            while end < min(i + 3, len(body)) and body[end] in "01234567":
                end += 1
            out.append(int(body[i:end], 8) & 0xFF)
            i = end
        elif esc == "x":
            end = i + 1
            while end < min(i + 3, len(body)) and body[end] in "0123456789abcdefABCDEF":
                end += 1
            out.append(int(body[i + 1 : end] or "0", 16))
            i = end
        else:
            out += _UNESCAPES.get(esc, esc).encode()
            i += 1
    return out.decode("utf-8", errors="replace")


# -- parsing ------------------------------------------------------------------------


def parse_module(text: str) -> Module:
    """Read HLO text (aotc's canonical form or XLA's dumps) into a Module.

    Raises ModelError for text it cannot read (with the line number and the
    line) and ShapeError where a written shape differs from the inferred one.
    """
    return _Parser(text).module_()


_Scope = dict[str, Instruction]  # a computation's instructions by name, as parsed so far
_QUOTED_LINE_CHARS = 300  # error messages quote at most this much of the line
_INT_RE = re.compile(r"[-+]?[0-9]+")
_FLOAT_RE = re.compile(r"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|inf|nan)")
_PRED = {"true": True, "false": False, "1": True, "0": False}
_OPENERS = {"{": "}", "(": ")", "[": "]"}
_STRUCTURAL = {",", "{", "}", "(", ")", "[", "]"}

# text attribute -> Instruction field it sets as read
_DIRECT_FIELDS = {
    "dimensions": "dimensions", "index": "index", "slice": "slice", "padding": "padding",
    "window": "window", "dim_labels": "conv", "feature_group_count": "feature_group_count",
    "batch_group_count": "batch_group_count", "direction": "direction", "kind": "fusion_kind",
    "metadata": "origin", "is_stable": "is_stable",
    "dynamic_slice_sizes": "dynamic_slice_sizes",
}  # fmt: skip
# attributes that together make one DotDims / GatherDims, in constructor order
_DOT_ATTRIBUTES = (
    "lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims",
)  # fmt: skip
_GATHER_ATTRIBUTES = (
    "offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "slice_sizes",
    "operand_batching_dims", "start_indices_batching_dims",
)  # fmt: skip
_GATHER_REQUIRED = _GATHER_ATTRIBUTES[:5]
_SCATTER_ATTRIBUTES = (
    "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
    "index_vector_dim", "input_batching_dims", "scatter_indices_batching_dims",
)  # fmt: skip
_SCATTER_REQUIRED = _SCATTER_ATTRIBUTES[:4]


class _Parser:
    """Recursive descent over the token list; one method per grammar rule."""

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.newlines = [m.start() for m in re.finditer("\n", text)]
        self.tokens = tokenize(text)
        self.pos = 0
        self.module = Module("module")
        self.entry: Computation | None = None
        self.line_of: dict[int, int] = {}  # id(instruction) -> line it was written on
        self.calls: list[tuple[Instruction, tuple[str, ...]]] = []  # resolved at the end
        self.anonymous: list[Instruction] = []  # nested operand instructions, named at the end
        self.base_names: dict[int, str] = {}  # names anonymous ones are made from, if not opcodes
        self.made_computations: list[Computation] = []  # by expansions (xla_ops), named at the end
        self.other_layouts: set[int] = set()  # lines with layouts other than row-major

    # -- token plumbing -------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.peek()
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return token

    def at(self, text: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.text == text and token.kind in ("punct", "name")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.error(f"expected '{text}', found {self._describe(self.peek())}")
        return self.advance()

    def line(self, token: Token) -> int:
        return bisect.bisect_left(self.newlines, token.pos) + 1

    def error(self, message: str, at: Token | int | None = None, kind=ModelError) -> Exception:
        """`kind` saying `message` about the line of `at` (a token, a line, or the next token)."""
        at = self.peek() if at is None else at
        line = self.line(at) if isinstance(at, Token) else at
        source = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        if len(source) > _QUOTED_LINE_CHARS:  # a line of a big constant
            source = source[:_QUOTED_LINE_CHARS] + " ..."
        return kind(f"HLO text line {line}: {message}" + (f": {source}" if source else ""))

    @staticmethod
    def _describe(token: Token) -> str:
        return "end of text" if token.kind == "eof" else f"'{token.text}'"

    def name(self) -> str:
        token = self.advance()
        if token.kind != "name":
            raise self.error(f"expected a name, found {self._describe(token)}", token)
        return token.text.removeprefix("%")

    def integer(self) -> int:
        token = self.advance()
        if token.kind != "word" or not _INT_RE.fullmatch(token.text):
            raise self.error(f"expected an integer, found {self._describe(token)}", token)
        return int(token.text)

    def int_list(self) -> tuple[int, ...]:
        return tuple(self.sequence("{", "}", self.integer))

    def sequence(self, open_: str, close: str, item: Callable[[], object]) -> list:
        """`open item, item, ... close`, possibly empty."""
        self.expect(open_)
        items: list = []
        if self.accept(close):
            return items
        while True:
            items.append(item())
            if self.accept(close):
                return items
            self.expect(",")

    def skip_unit(self) -> None:
        token = self.advance()
        if token.kind == "eof" or (token.kind == "punct" and token.text in (",", "}", ")", "]")):
            raise self.error(f"expected a value, found {self._describe(token)}", token)
        if token.kind != "punct" or token.text not in _OPENERS:
            return
        stack = [_OPENERS[token.text]]
        while stack:
            token = self.advance()
            if token.kind == "eof":
                raise self.error(f"unbalanced '{stack[-1]}' missing", token)
            if token.kind != "punct":
                continue
            if token.text in _OPENERS:
                stack.append(_OPENERS[token.text])
            elif token.text == stack[-1]:
                stack.pop()
            elif token.text in _OPENERS.values():
                raise self.error(f"expected '{stack[-1]}', found '{token.text}'", token)

    def skip_value(self) -> None:
        """An attribute value aotc ignores: balanced groups glued by punctuation (a->b, x<=y)."""
        self.skip_unit()
        while self.peek().kind == "punct" and self.peek().text not in _STRUCTURAL:
            while self.peek().kind == "punct" and self.peek().text not in _STRUCTURAL:
                self.advance()
            self.skip_unit()

    # -- module and computations ----------------------------------------------------

    def module_(self) -> Module:
        if self.accept("HloModule"):
            self.module.name = self.name()
            while self.accept(","):
                self.name()
                self.expect("=")
                self.skip_value()
        # dumps' source locations for metadata, `StackFrames` then `1 {...}` rows (a
        # computation of that name would go on with its signature or body)
        while self.peek().text in _DEBUG_TABLES and self.peek(1).text not in ("(", "{"):
            self.advance()
            while self.peek().kind == "word":
                self.advance()
                self.skip_value()
        while self.peek().kind != "eof":
            self.computation()
        if not self.module.computations:
            raise self.error("no computations")
        self.finish()
        return self.module

    def computation(self) -> None:
        line = self.line(self.peek())
        is_entry = self.accept("ENTRY")
        comp = Computation(self.name())
        if any(c.name == comp.name for c in self.module.computations):
            raise self.error(f"computation %{comp.name} defined twice", line)
        signature = self.signature() if self.at("(") else None
        self.expect("{")
        scope: _Scope = {}
        while not self.accept("}"):
            self.instruction(comp, scope)
        while self.accept(","):  # e.g. execution_thread="main"
            self.name()
            self.expect("=")
            self.skip_value()
        if not comp.instructions:
            raise self.error(f"computation %{comp.name} has no instructions", line)
        comp.root = comp.root or comp.instructions[-1]
        if signature is not None:
            self.check_signature(comp, signature, line)
        self.module.add_computation(comp)
        if is_entry:
            if self.entry is not None:
                raise self.error("a second ENTRY computation", line)
            self.entry = comp

    def signature(self) -> tuple[list[AnyShape], AnyShape]:
        """`(x: f32[], y: f32[]) -> f32[]`: redundant with the body, read to check it."""

        def param() -> AnyShape:
            self.name()
            self.expect(":")
            return self.shape()

        params = self.sequence("(", ")", param)
        self.expect("->")
        return params, self.shape()

    def check_signature(self, comp: Computation, signature, line: int) -> None:
        params, result = signature
        written = [p.shape for p in comp.parameters]
        if written != params:
            shown = ", ".join(str(s) for s in params)
            raise self.error(f"signature ({shown}) does not match the parameters", line)
        if result != comp.root.shape:
            raise self.error(f"signature result {result} != root shape {comp.root.shape}", line)

    def instruction(self, comp: Computation, scope: _Scope) -> None:
        line = self.line(self.peek())
        is_root = self.accept("ROOT")
        name = self.name()
        if name in scope:
            raise self.error(f"%{name} defined twice in %{comp.name}", line)
        self.expect("=")
        instr = self.operation(comp, scope, name, self.shape(), line)
        scope[name] = instr
        if is_root:
            if comp.root is not None:
                raise self.error(f"a second ROOT in %{comp.name}", line)
            comp.root = instr

    def operation(
        self, comp: Computation, scope: _Scope, name: str | None, shape: AnyShape, line: int
    ) -> Instruction:
        """`opcode(args), attributes` after the result shape; appends the instruction."""
        token = self.advance()
        try:
            op = Op.from_text(token.text) if token.kind == "name" else None
        except ValueError:
            op = None
        expansion = EXPANSIONS.get(token.text) if token.kind == "name" else None
        if op is None and expansion is None:
            where = f" (%{name})" if name else ""
            raise self.error(f"unknown opcode {self._describe(token)}{where}", token)
        fields: dict = {}
        operands: list[Instruction] = []
        if op is Op.CONSTANT:
            self.expect("(")
            fields["literal"] = self.literal(shape, line)
            self.expect(")")
        elif op is Op.PARAMETER:
            self.expect("(")
            fields["index"] = self.integer()
            self.expect(")")
        else:
            operands = self.sequence("(", ")", lambda: self.operand(comp, scope, line))
        attributes: dict[str, object] = {}
        # a nested instruction has no attributes: its ',' separates its user's operands
        while name is not None and self.accept(","):
            key = self.name()
            self.expect("=")
            reader = _ATTRIBUTE_READERS.get(key)
            if reader is None:
                self.skip_value()
            elif key in attributes:
                raise self.error(f"attribute {key}= given twice", line)
            else:
                attributes[key] = reader(self)
        if expansion is not None:
            site = ParseSite(self.module, comp, name, lambda m, k: self.error(m, line, k))
            expanded = expansion(site, shape, operands, attributes)
            if expanded is not None:
                return self.expanded(site, expanded, shape, line)
        fields.update(self.fields(attributes))
        instr = Instruction(op, shape, operands, name=name or "", **fields)
        called = _called_names(attributes)
        if called:
            self.calls.append((instr, called))
        if name is None:
            self.anonymous.append(instr)
        self.line_of[id(instr)] = line
        comp.instructions.append(instr)
        return instr

    def expanded(self, site: ParseSite, result: Instruction, shape: AnyShape, line: int):
        """Adopt what an expansion built; `result` takes the written name."""
        for instr, base in site.made:
            self.line_of[id(instr)] = line
            if instr is result and site.name is not None:
                instr.name = site.name
            else:
                self.anonymous.append(instr)
                self.base_names[id(instr)] = base
        self.made_computations += site.made_computations
        if result.shape != shape:
            message = f"shape {shape} is written, but the operation gives {result.shape}"
            raise self.error(message, line, ShapeError)
        return result

    def operand(self, comp: Computation, scope: _Scope, line: int) -> Instruction:
        """`[shape] name`, or a whole instruction written in place (`f32[] constant(0)`)."""
        written = None
        if self.at("(") or (self.peek().kind == "name" and self.at("[", 1)):
            written = self.shape()
            if self.peek().kind == "name" and self.at("(", 1):
                return self.operation(comp, scope, None, written, line)
        token = self.peek()
        name = self.name()
        if name not in scope:
            raise self.error(f"operand %{name} is not defined before its use", token)
        target = scope[name]
        if written is not None and written != target.shape:
            message = f"operand %{name} is written as {written} but is {target.shape}"
            raise self.error(message, token, ShapeError)
        return target

    @staticmethod
    def fields(attributes: dict) -> dict:
        """Instruction keyword arguments from the attributes read."""
        fields = {f: attributes[a] for a, f in _DIRECT_FIELDS.items() if a in attributes}
        if fields.get("origin", "") is None:  # metadata without op_name
            del fields["origin"]
        if "delta" in attributes:
            fields["index"] = attributes["delta"]
        if "iota_dimension" in attributes:
            fields["dimensions"] = (attributes["iota_dimension"],)
        if any(a in attributes for a in _DOT_ATTRIBUTES):
            fields["dot"] = DotDims(*(attributes.get(a, ()) for a in _DOT_ATTRIBUTES))
        if all(a in attributes for a in _GATHER_REQUIRED):
            fields["gather"] = GatherDims(*(attributes.get(a, ()) for a in _GATHER_ATTRIBUTES))
        if all(a in attributes for a in _SCATTER_REQUIRED):
            fields["scatter"] = ScatterDims(*(attributes.get(a, ()) for a in _SCATTER_ATTRIBUTES))
        return fields

    def finish(self) -> None:
        """Resolve calls, name what has no name yet, check every shape, pick the entry."""
        module = self.module
        by_name = {c.name: c for c in module.computations}
        for instr, names in self.calls:
            unknown = [n for n in names if n not in by_name]
            if unknown:
                raise self.error(f"no computation %{unknown[0]}", self.line_of[id(instr)])
            instr.called = tuple(by_name[n] for n in names)
        taken: set[str] = set()
        renamed = []
        for comp in module.computations:
            module.claim_name(comp.name)
            for instr in comp.instructions:
                if not instr.name:
                    continue
                # names are scoped per computation in XLA; aotc's are module-wide
                if instr.name in taken:
                    renamed.append(instr)
                else:
                    taken.add(instr.name)
                    module.claim_name(instr.name)
        for instr in renamed:
            instr.name = module.unique_name(instr.name)
        for instr in self.anonymous:
            instr.name = module.unique_name(self.base_names.get(id(instr), instr.op.text))
        for comp in self.made_computations:
            comp.name = module.unique_name(comp.name)
            module.add_computation(comp)
        for comp in module.computations:
            for instr in comp.instructions:
                self.check(instr)
        module.entry = self.entry or module.computations[-1]
        self.check_layouts()

    def check_layouts(self) -> None:
        """aotc keeps every array row-major, which is safe where layouts only place values
        in memory: not at the C API, nor under a bitcast (a reinterpretation of memory)."""
        if not self.other_layouts:
            return
        for param in self.module.entry.parameters:
            line = self.line_of[id(param)]
            if line in self.other_layouts:
                raise self.error("an entry parameter with a layout other than row-major: aotc's "
                                 "C API takes row-major arrays", line, UnsupportedError)  # fmt: skip
        for comp in self.module.computations:
            for instr in comp.instructions:
                if instr.op is Op.BITCAST:
                    raise self.error("bitcast in a module with non-row-major layouts (line "
                                     f"{min(self.other_layouts)}): compile the module as it was "
                                     "before XLA's optimizations", self.line_of[id(instr)],
                                     UnsupportedError)  # fmt: skip

    def check(self, instr: Instruction) -> None:
        line = self.line_of[id(instr)]
        missing = missing_attributes(instr)
        if missing:
            raise self.error(f"{instr.op.text} needs {', '.join(missing)}", line)
        try:
            inferred = infer_shape(instr)
        except ShapeError as error:
            raise self.error(str(error), line, ShapeError) from None
        except (IndexError, TypeError, ValueError, StopIteration) as error:
            # shape rules index operands by attributes; text may hold any numbers
            message = f"{instr.op.text}: attributes do not fit the operands ({error})"
            raise self.error(message, line, ShapeError) from None
        if inferred != instr.shape:
            message = f"shape {instr.shape} is written, but {instr.op.text} gives {inferred}"
            raise self.error(message, line, ShapeError)

    # -- shapes and literals ----------------------------------------------------------

    def shape(self) -> AnyShape:
        """`f32[2,3]{1,0}` (layout ignored: aotc is row-major) or `(shape, ...)`."""
        if self.at("("):
            return TupleShape(tuple(self.sequence("(", ")", self.shape)))
        token = self.advance()
        try:
            dtype = DType.from_text(token.text) if token.kind == "name" else None
        except ValueError:
            raise self.error(f"unknown element type '{token.text}'", token) from None
        if dtype is None:
            raise self.error(f"expected a shape, found {self._describe(token)}", token)
        dims = self.sequence("[", "]", self.integer)
        if any(d < 0 for d in dims):
            raise self.error(f"negative dimension in {dtype.text}{dims}", token)
        # a layout is `{1,0}`, `{}` or `{1,0:T(8,128)}`; a `{` before a name opens a body
        if self.at("{") and (self.peek(1).kind == "word" or self.at("}", 1)):
            start = self.pos
            self.skip_unit()
            minor_to_major = []
            for t in self.tokens[start + 1 : self.pos - 1]:
                if t.text == ":":
                    break
                if t.kind == "word":
                    minor_to_major.append(t.text)
            if minor_to_major and minor_to_major != [str(d) for d in range(len(dims))][::-1]:
                self.other_layouts.add(self.line(token))
        return Shape(dtype, tuple(dims))

    def literal(self, shape: AnyShape, line: int) -> np.ndarray:
        if not isinstance(shape, Shape):
            raise self.error("tuple-shaped constants are not supported", line, UnsupportedError)
        if self.at("{") and self.peek(1).text == "...":
            raise self.error("elided constant {...} cannot be read; print without eliding")
        texts: list[str] = []
        if shape.rank == 0:
            texts.append(self.scalar_text())
        else:
            self.literal_level(shape.dims, 0, texts)
        return self.literal_array(texts, shape, line)

    def literal_level(self, dims: tuple[int, ...], depth: int, out: list[str]) -> None:
        if depth + 1 == len(dims):
            count = self.literal_row(out)
        else:
            count = len(self.sequence("{", "}", lambda: self.literal_level(dims, depth + 1, out)))
        if count != dims[depth]:
            raise self.error(f"literal has {count} entries in dimension {depth}, not {dims[depth]}")

    def literal_row(self, out: list[str]) -> int:
        """`{v, v, ...}` into `out`; the hot loop of big constants, so on tokens directly."""
        self.expect("{")
        if self.accept("}"):
            return 0
        tokens, i, start = self.tokens, self.pos, len(out)
        while True:
            value, separator = tokens[i], tokens[i + 1]
            if value.kind not in ("word", "name") or value.text == "...":
                self.pos = i
                out.append(self.scalar_text())  # reports the error
            out.append(value.text)
            i += 2
            if separator.text == "}" and separator.kind == "punct":
                self.pos = i
                return len(out) - start
            if separator.text != "," or separator.kind != "punct":
                self.pos = i - 1
                self.expect(",")

    def scalar_text(self) -> str:
        token = self.advance()
        if token.text == "...":
            raise self.error("elided constant {...} cannot be read; print without eliding")
        if token.kind not in ("word", "name"):
            raise self.error(f"expected a number, found {self._describe(token)}", token)
        return token.text

    def literal_array(self, texts: list[str], shape: Shape, line: int) -> np.ndarray:
        dtype = shape.dtype
        if dtype is DType.PRED:
            bad = [t for t in texts if t not in _PRED]
            values = [_PRED.get(t) for t in texts]
        elif dtype.is_float:
            bad = [t for t in texts if not _FLOAT_RE.fullmatch(t)]
            values = [float(t) for t in texts] if not bad else []
        else:
            bad = [t for t in texts if not _INT_RE.fullmatch(t)]
            values = [int(t) for t in texts] if not bad else []
        if bad:
            raise self.error(f"'{bad[0]}' is not a {dtype.text} value", line)
        try:
            array = np.array(values, dtype=np.float64 if dtype.is_float else dtype.numpy)
        except OverflowError:
            raise self.error(f"a value is out of range for {dtype.text}", line) from None
        array = cast_array(array.reshape(shape.dims), dtype)
        array.setflags(write=False)
        return array

    # -- attribute values ---------------------------------------------------------------

    def slice_spec(self) -> SliceSpec:
        def bound() -> tuple[int, int, int]:
            self.expect("[")
            start = self.integer()
            self.expect(":")
            limit = self.integer()
            stride = self.integer() if self.accept(":") else 1
            self.expect("]")
            return start, limit, stride

        bounds = self.sequence("{", "}", bound)
        return SliceSpec(*(tuple(b[k] for b in bounds) for k in range(3)))

    def padding(self) -> PaddingConfig:
        if self.at("{"):
            self.sequence("{", "}", self.integer)
            return PaddingConfig((), (), ())
        token = self.advance()
        dims = [self.split_ints(part, "_", token) for part in token.text.split("x")]
        if any(len(d) not in (2, 3) for d in dims):
            raise self.error(f"padding '{token.text}' is not lo_hi[_interior]x...", token)
        return PaddingConfig(*(tuple(d[k] if k < len(d) else 0 for d in dims) for k in range(3)))

    def split_ints(self, text: str, sep: str, token: Token) -> list[int]:
        parts = text.split(sep)
        if not all(_INT_RE.fullmatch(p) for p in parts):
            raise self.error(f"cannot read '{token.text}'", token)
        return [int(p) for p in parts]

    def window(self) -> Window:
        fields: dict[str, list] = {}
        self.expect("{")
        while not self.accept("}"):
            key = self.name()
            self.expect("=")
            token = self.advance()
            if key == "pad":
                pairs = [self.split_ints(p, "_", token) for p in token.text.split("x")]
                if any(len(p) != 2 for p in pairs):
                    raise self.error(f"window pad '{token.text}' is not lo_hi x ...", token)
                fields["pad_low"] = [p[0] for p in pairs]
                fields["pad_high"] = [p[1] for p in pairs]
            elif key in ("window_reversal", "rhs_reversal"):
                if any(self.split_ints(token.text, "x", token)):
                    raise self.error("reversed windows are not supported", token,
                                     UnsupportedError)  # fmt: skip
            elif key in _WINDOW_FIELDS:
                fields[_WINDOW_FIELDS[key]] = self.split_ints(token.text, "x", token)
            else:
                raise self.error(f"unknown window field '{key}'", token)
        size = fields.get("size", [])
        if any(len(v) != len(size) for v in fields.values()):
            raise self.error("window fields differ in rank")
        return Window.make(**fields) if size else Window((), (), (), (), (), ())

    def dim_labels(self) -> ConvDims:
        first = self.advance()
        self.expect("->")
        out = self.advance().text
        lhs, _, rhs = first.text.partition("_")
        try:
            return ConvDims(
                lhs.index("b"), lhs.index("f"), _spatial(lhs, "bf"),
                rhs.index("i"), rhs.index("o"), _spatial(rhs, "io"),
                out.index("b"), out.index("f"), _spatial(out, "bf"),
            )  # fmt: skip
        except ValueError:
            raise self.error(f"cannot read dim_labels={first.text}->{out}", first) from None

    def direction(self) -> Direction:
        token = self.advance()
        try:
            return Direction(token.text)
        except ValueError:
            raise self.error(f"unknown comparison direction '{token.text}'", token) from None

    def boolean(self) -> bool:
        token = self.advance()
        if token.text not in ("true", "false"):
            raise self.error(f"expected true or false, found {self._describe(token)}", token)
        return token.text == "true"

    def fusion_kind(self) -> FusionKind | str:
        """A kind aotc does not make stays text: xla_ops inlines such fusions."""
        token = self.advance()
        try:
            return FusionKind(token.text)
        except ValueError:
            return token.text

    def string(self) -> str:
        token = self.advance()
        if token.kind != "string":
            raise self.error(f"expected a string, found {self._describe(token)}", token)
        return _unquote(token.text)

    def word(self) -> str:
        return self.advance().text

    def computation_names(self) -> tuple[str, ...]:
        if self.at("{"):
            return tuple(self.sequence("{", "}", self.name))
        return (self.name(),)

    def metadata(self) -> str | None:
        """`{op_type="..." op_name="..." source_line=3}`: keeps op_name as the origin."""
        origin = None
        self.expect("{")
        while not self.accept("}"):
            key = self.name()
            self.expect("=")
            if key == "op_name" and self.peek().kind == "string":
                origin = _unquote(self.advance().text)
            else:
                self.skip_value()
        return origin


# attributes naming called computations, in the order `Instruction.called` holds them
_CALLED_ATTRIBUTES = (
    "to_apply", "calls", "condition", "body", "true_computation", "false_computation",
    "branch_computations",
)  # fmt: skip


def _called_names(attributes: dict) -> tuple[str, ...]:
    return tuple(name for key in _CALLED_ATTRIBUTES for name in attributes.get(key, ()))


def _spatial(labels: str, letters: str) -> tuple[int, ...]:
    """Positions of spatial dims 0, 1, ... in a dim_labels part; ValueError if malformed."""
    n = len(labels) - 2
    if sorted(labels) != sorted(letters + "".join(str(i) for i in range(n))):
        raise ValueError(labels)
    return tuple(labels.index(str(i)) for i in range(n))


_WINDOW_FIELDS = {"size": "size", "stride": "stride", "lhs_dilate": "lhs_dilation",
                  "rhs_dilate": "rhs_dilation"}  # fmt: skip

# how each attribute's value is read; attributes not listed are skipped
_ATTRIBUTE_READERS: dict[str, Callable[[_Parser], object]] = {
    "dimensions": _Parser.int_list,
    "iota_dimension": _Parser.integer,
    "index": _Parser.integer,
    "delta": _Parser.integer,
    "slice": _Parser.slice_spec,
    "dynamic_slice_sizes": _Parser.int_list,
    "padding": _Parser.padding,
    "window": _Parser.window,
    "dim_labels": _Parser.dim_labels,
    "feature_group_count": _Parser.integer,
    "batch_group_count": _Parser.integer,
    **{name: _Parser.int_list for name in _DOT_ATTRIBUTES},
    **{name: _Parser.int_list for name in _GATHER_ATTRIBUTES if name != "index_vector_dim"},
    **{name: _Parser.int_list for name in _SCATTER_ATTRIBUTES if name != "index_vector_dim"},
    "index_vector_dim": _Parser.integer,
    "direction": _Parser.direction,
    "is_stable": _Parser.boolean,
    "kind": _Parser.fusion_kind,
    **{name: _Parser.computation_names for name in _CALLED_ATTRIBUTES},
    "metadata": _Parser.metadata,
    # read for xla_ops' expansions
    "select": _Parser.computation_names,
    "scatter": _Parser.computation_names,
    "type": _Parser.word,
    "k": _Parser.integer,
    "largest": _Parser.boolean,
    "exponent_bits": _Parser.integer,
    "mantissa_bits": _Parser.integer,
    "custom_call_target": _Parser.string,
    "algorithm": _Parser.word,
    "distribution": _Parser.word,
}
# tables of source locations that XLA's dumps print after the HloModule line
_DEBUG_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
