"""XLA's dump dialect of HLO text: the IR's canonical parser, extended to what XLA,
JAX and TensorFlow print beyond it.

`DumpParser` skips what aotc has no use for (sharding, backend_config,
frontend_attributes, metadata other than op_name, module and computation
attributes, the source-location tables of dumps), reads any layout (refusing
one other than row-major only where it matters: at the C API and under a
bitcast), and rewrites the XLA opcodes and fusion kinds the IR lacks as it
reads them (`expansions.py`).  Error messages are the canonical parser's.
"""

from __future__ import annotations

from typing import ClassVar

from ...errors import ShapeError, UnsupportedError
from ...ir import Computation, FusionKind, Instruction, Module, Op
from ...ir.literals import boolean, computation_names
from ...ir.parser import ATTRIBUTE_READERS, Parser, Reader
from ...ir.tokens import Token, TokenStream
from ...ir.types import AnyShape
from .expansions import EXPANSIONS, ParseSite


def parse_hlo(text: str) -> Module:
    """Read HLO text as XLA, JAX, TensorFlow or aotc print it into a Module.

    Raises ModelError for text it cannot read (with the line number and the
    line), ShapeError where a written shape differs from the inferred one, and
    UnsupportedError for what aotc cannot compile.
    """
    return DumpParser(text).module_()


_OPENERS = {"{": "}", "(": ")", "[": "]"}
_STRUCTURAL = {",", "{", "}", "(", ")", "[", "]"}
# tables of source locations that XLA's dumps print after the HloModule line
_DEBUG_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def skip_unit(ts: TokenStream) -> None:
    """One token, or a balanced (...), [...] or {...} group."""
    token = ts.advance()
    if token.kind == "eof" or (token.kind == "punct" and token.text in (",", "}", ")", "]")):
        raise ts.error(f"expected a value, found {ts.describe(token)}", token)
    if token.kind != "punct" or token.text not in _OPENERS:
        return
    stack = [_OPENERS[token.text]]
    while stack:
        token = ts.advance()
        if token.kind == "eof":
            raise ts.error(f"unbalanced '{stack[-1]}' missing", token)
        if token.kind != "punct":
            continue
        if token.text in _OPENERS:
            stack.append(_OPENERS[token.text])
        elif token.text == stack[-1]:
            stack.pop()
        elif token.text in _OPENERS.values():
            raise ts.error(f"expected '{stack[-1]}', found '{token.text}'", token)


def skip_value(ts: TokenStream) -> None:
    """An attribute value aotc ignores: balanced groups glued by punctuation (a->b, x<=y)."""
    skip_unit(ts)
    while ts.peek().kind == "punct" and ts.peek().text not in _STRUCTURAL:
        while ts.peek().kind == "punct" and ts.peek().text not in _STRUCTURAL:
            ts.advance()
        skip_unit(ts)


def metadata(ts: TokenStream) -> str | None:
    """`{op_type="..." op_name="..." source_line=3}`: keeps op_name as the origin."""
    origin = None
    ts.expect("{")
    while not ts.accept("}"):
        key = ts.name()
        ts.expect("=")
        if key == "op_name" and ts.peek().kind == "string":
            origin = ts.string()
        else:
            skip_value(ts)
    return origin


def fusion_kind(ts: TokenStream) -> FusionKind | str:
    """A kind aotc does not make stays text: its expansion inlines such fusions."""
    token = ts.advance()
    try:
        return FusionKind(token.text)
    except ValueError:
        return token.text


def word(ts: TokenStream) -> str:
    return ts.advance().text


_DUMP_READERS: dict[str, Reader] = {
    "metadata": metadata,
    "kind": fusion_kind,
    # read for the expansions
    "select": computation_names,
    "scatter": computation_names,
    "type": word,
    "k": TokenStream.integer,
    "largest": boolean,
    "exponent_bits": TokenStream.integer,
    "mantissa_bits": TokenStream.integer,
    "custom_call_target": TokenStream.string,
    "algorithm": word,
    "distribution": word,
}


class DumpParser(Parser):
    """The canonical parser with XLA's extras: skipped attributes, any layout, expansions."""

    READERS: ClassVar[dict[str, Reader]] = {**ATTRIBUTE_READERS, **_DUMP_READERS}

    def __init__(self, text: str):
        super().__init__(text)
        self.made_computations: list[Computation] = []  # by expansions, named at the end
        self.other_layouts: set[int] = set()  # lines with layouts other than row-major

    def header(self) -> None:
        super().header()
        # dumps' source locations for metadata, `StackFrames` then `1 {...}` rows (a
        # computation of that name would go on with its signature or body)
        while self.peek().text in _DEBUG_TABLES and self.peek(1).text not in ("(", "{"):
            self.advance()
            while self.peek().kind == "word":
                self.advance()
                skip_value(self)

    def module_attribute(self, key: str) -> None:
        skip_value(self)

    def computation_attributes(self) -> None:
        while self.accept(","):  # e.g. execution_thread="main"
            self.name()
            self.expect("=")
            skip_value(self)

    def unknown_attribute(self, key: str, line: int) -> None:
        skip_value(self)

    def layout(self, rank: int, token: Token) -> None:
        """`{1,0}`, `{}` or `{1,0:T(8,128)}`: noted where not row-major (`check_layouts`)."""
        start = self.pos
        skip_unit(self)
        minor_to_major = []
        for t in self.tokens[start + 1 : self.pos - 1]:
            if t.text == ":":
                break
            if t.kind == "word":
                minor_to_major.append(t.text)
        if minor_to_major and minor_to_major != [str(d) for d in range(rank)][::-1]:
            self.other_layouts.add(self.line(token))

    def operation(
        self,
        comp: Computation,
        scope: dict[str, Instruction],
        name: str | None,
        shape: AnyShape,
        line: int,
    ) -> Instruction:
        """An opcode with an expansion is rewritten as it is read; any other is the IR's."""
        token = self.peek()
        expansion = EXPANSIONS.get(token.text) if token.kind == "name" else None
        if expansion is None:
            return super().operation(comp, scope, name, shape, line)
        self.advance()
        operands = self.operands(comp, scope, line)
        attributes = self.attributes(name, line)
        site = ParseSite(self.module, comp, name, lambda m, k: self.error(m, line, k))
        result = expansion(site, shape, operands, attributes)
        if result is None:  # the IR's op of that name
            op = Op.from_text(token.text)
            return self.append(comp, op, shape, operands, name, line, attributes, {})
        return self.adopt(site, result, shape, line)

    def adopt(self, site: ParseSite, result: Instruction, shape: AnyShape, line: int):
        """Take what an expansion built; `result` takes the written name."""
        for instr, base in site.made:
            self.line_of[id(instr)] = line
            if instr is result and site.name is not None:
                instr.name = site.name
            else:
                self.anonymous.append((instr, base))
        self.made_computations += site.made_computations
        if result.shape != shape:
            message = f"shape {shape} is written, but the operation gives {result.shape}"
            raise self.error(message, line, ShapeError)
        return result

    def name_instructions(self) -> None:
        super().name_instructions()
        for comp in self.made_computations:
            comp.name = self.module.unique_name(comp.name)
            self.module.add_computation(comp)

    def finish(self) -> None:
        super().finish()
        self.check_layouts()

    def check_layouts(self) -> None:
        """aotc keeps every array row-major, which is safe where layouts only place values
        in memory: not at the C API, nor under a bitcast (a reinterpretation of memory)."""
        if not self.other_layouts:
            return
        for param in self.module.entry.parameters:
            line = self.line_of[id(param)]
            if line in self.other_layouts:
                raise self.error(
                    "an entry parameter with a layout other than row-major: aotc's "
                    "C API takes row-major arrays",
                    line,
                    UnsupportedError,
                )
        for comp in self.module.computations:
            for instr in comp.instructions:
                if instr.op is Op.BITCAST:
                    raise self.error(
                        "bitcast in a module with non-row-major layouts (line "
                        f"{min(self.other_layouts)}): compile the module as it was "
                        "before XLA's optimizations",
                        self.line_of[id(instr)],
                        UnsupportedError,
                    )
