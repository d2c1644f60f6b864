"""The structure of an MLIR module: `module { func.func @f(...) { ops } }` as plain data.

Ops are read in both of MLIR's forms into one `Operation`: the generic
`"stablehlo.reduce"(%a, %b) <{props}> ({regions}) {attrs} : (types) -> types`, and
the pretty forms the StableHLO and CHLO dialects print, read loosely as what they
are made of: operands (in order), `key = value` attributes, bare words
(`GT`, `FLOAT`, `applies`, `stablehlo.add`), `%iterArg = %x` bindings, a symbol
(`@callee`), regions (`cond {...} do {...}`, `reducer(...) {...}`), then the type
signature.  What each op makes of them is `lowering.py`'s business.  Locations
(`loc(...)`) and `#loc` aliases are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.types import AnyShape
from .tokens import Cursor, Token, describe
from .values import Dense, dictionary, tensor_type, value


@dataclass
class Block:
    arguments: list[tuple[str, AnyShape]]
    operations: list[Operation]


@dataclass
class Operation:
    name: str
    token: Token  # where it is written (errors quote its line)
    results: list[str]  # value names, `%0#k` for the k-th of `%0:n`
    operands: list[str] = field(default_factory=list)
    attributes: dict = field(default_factory=dict)
    words: list[str] = field(default_factory=list)
    positional: list = field(default_factory=list)  # values written bare (dense<1>, [0:2])
    bindings: list[str] = field(default_factory=list)  # %iterArg of `%iterArg = %x`
    symbol: str | None = None
    regions: list[Block] = field(default_factory=list)
    operand_types: list[AnyShape] = field(default_factory=list)
    result_types: list[AnyShape] = field(default_factory=list)


@dataclass
class Function:
    name: str
    public: bool
    arguments: list[tuple[str, AnyShape]]
    result_types: list[AnyShape]
    result_names: list[str | None]  # jax.result_info
    body: Block
    token: Token


_TERMINATORS = ("return", "func.return", "stablehlo.return")
# words after a pretty op's signature that start one of its regions
_REGION_WORDS = ("cond", "do", "reducer", "branch")


class ModuleReader(Cursor):
    """Reads the functions of one module (`functions()`)."""

    def functions(self) -> list[Function]:
        self._skip_aliases()
        wrapped = self.accept("module")
        if wrapped:
            if self.peek().kind == "symbol":
                self.advance()
            if self.accept("attributes"):
                self.expect("{")
                dictionary(self, "}")
            self.expect("{")
        functions = []
        while self.at("func.func"):
            functions.append(self.function())
        if wrapped:
            self.expect("}")
            self._skip_location()
        self._skip_aliases()
        if self.peek().kind != "eof":
            raise self.error(f"expected func.func, found {describe(self.peek())}")
        return functions

    def _skip_aliases(self) -> None:
        """`#loc1 = loc(...)` lines of location-printing dumps."""
        while self.at("#") and self.peek(1).kind == "word":
            self.advance()
            self.advance()
            self.expect("=")
            if self.at("loc"):
                self._skip_location()
            else:
                value(self)

    def function(self) -> Function:
        token = self.expect("func.func")
        visibility = "public"
        if self.peek().kind == "word":
            visibility = self.advance().text
        name = self.expect_kind("symbol", "a function name").text[1:].strip('"')
        self.expect("(")
        arguments = []
        while not self.accept(")"):
            arg = self.expect_kind("value", "an argument").text
            self.expect(":")
            arguments.append((arg, self.type_()))
            if self.accept("{"):
                dictionary(self, "}")
            self._skip_location()
            if not self.accept(","):
                self.expect(")")
                break
        result_types, result_names = self._function_results()
        if self.accept("attributes"):
            self.expect("{")
            dictionary(self, "}")
        self.expect("{")
        body = self.block("}")
        body.arguments = arguments  # a function's body block takes its arguments
        self._skip_location()
        return Function(
            name, visibility == "public", arguments, result_types, result_names, body, token
        )

    def _function_results(self) -> tuple[list[AnyShape], list[str | None]]:
        types: list[AnyShape] = []
        names: list[str | None] = []
        if not self.accept("->"):
            return types, names
        parenthesized = self.accept("(")
        while not (parenthesized and self.accept(")")):
            types.append(self.type_())
            info = dictionary(self, "}") if parenthesized and self.accept("{") else {}
            names.append(info.get("jax.result_info"))
            if not parenthesized or not self.accept(","):
                if parenthesized:
                    self.expect(")")
                break
        return types, names

    def type_(self) -> AnyShape:
        token = self.advance()
        if token.kind != "angle":
            raise self.error(f"expected a type, found {describe(token)}", token)
        return tensor_type(self, token)

    def _skip_location(self) -> None:
        if self.at("loc") and self.at("(", 1):
            self.advance()
            self._skip_group()

    def _skip_group(self) -> None:
        """A balanced (...) group, the cursor at its `(`."""
        depth = 0
        while True:
            token = self.advance()
            if token.kind == "eof":
                raise self.error("unbalanced '(' in a location", token)
            if token.kind == "punct" and token.text == "(":
                depth += 1
            elif token.kind == "punct" and token.text == ")":
                depth -= 1
                if depth == 0:
                    return

    # -- blocks and operations -------------------------------------------------------

    def block(self, close: str) -> Block:
        """Operations up to `close` (a region's `}`), after an optional `^bb0(...):`."""
        arguments: list[tuple[str, AnyShape]] = []
        if self.peek().kind == "block":
            self.advance()
            if self.accept("("):
                arguments = self._typed_values(")")
            self.expect(":")
        operations = []
        while not self.accept(close):
            if self.peek().kind == "eof":
                raise self.error(f"'{close}' missing at the end of the text")
            if self.peek().kind == "block":
                raise self.error("a region of several blocks is not supported")
            operations.append(self.operation())
        return Block(arguments, operations)

    def _typed_values(self, close: str) -> list[tuple[str, AnyShape]]:
        values = []
        while not self.accept(close):
            name = self.expect_kind("value", "a block argument").text
            self.expect(":")
            values.append((name, self.type_()))
            self._skip_location()
            if not self.accept(","):
                self.expect(close)
                break
        return values

    def operation(self) -> Operation:
        results = self._results()
        token = self.advance()
        if token.kind == "string":
            op = Operation(token.text[1:-1], token, results)
            self._generic(op)
        elif token.kind == "word":
            op = Operation(token.text, token, results)
            self._pretty(op)
        else:
            raise self.error(f"expected an operation, found {describe(token)}", token)
        self._skip_location()
        return op

    def _results(self) -> list[str]:
        if self.peek().kind != "value":
            return []
        names = []
        while True:
            name = self.expect_kind("value", "a result name").text
            if self.accept(":"):  # %0:3
                count = int(self.expect_kind("number", "a result count").text)
                names += [f"{name}#{k}" for k in range(count)]
            else:
                names.append(name)
            if not self.accept(","):
                break
        self.expect("=")
        return names

    def _generic(self, op: Operation) -> None:
        self.expect("(")
        while not self.accept(")"):
            op.operands.append(self.expect_kind("value", "an operand").text)
            if not self.accept(","):
                self.expect(")")
                break
        if self.at("<") and self.at("{", 1):
            self.advance()
            self.advance()
            op.attributes.update(dictionary(self, "}"))
            self.expect(">")
        if self.at("(") and self.at("{", 1):
            self.advance()
            while self.accept("{"):
                op.regions.append(self.block("}"))
                self.accept(",")
            self.expect(")")
        if self.accept("{"):
            op.attributes.update(dictionary(self, "}"))
        self.expect(":")
        self._signature(op)

    def _pretty(self, op: Operation) -> None:
        if op.name in _TERMINATORS and self.peek().kind != "value":
            return  # `return` of nothing
        self._pieces(op, depth=0)
        if self.accept(":"):
            self._signature(op)
        self._skip_location()
        while self.peek().kind == "word" and self.peek().text in _REGION_WORDS:
            self._named_region(op)

    def _pieces(self, op: Operation, depth: int) -> None:
        """What a pretty op writes before its `:` signature (see the module docstring)."""
        while True:
            token = self.peek()
            if token.kind == "eof" or (token.kind == "punct" and token.text in (":", "}")):
                if depth and token.text == ":":  # `%x init: %c`
                    self.advance()
                    continue
                return
            if token.kind == "punct" and token.text == ")":
                if depth:
                    return
                raise self.error("unbalanced ')'", token)
            if token.kind == "value":
                self.advance()
                if self.at("=") and depth:  # %iterArg = %x
                    self.advance()
                    op.bindings.append(token.text)
                    continue
                op.operands.append(token.text)
            elif token.kind == "symbol":
                self.advance()
                op.symbol = token.text[1:].strip('"')
            elif token.kind == "word" and self.at("=", 1):
                self.advance()
                self.advance()
                op.attributes[token.text] = value(self)
            elif token.kind == "word" and token.text == "loc" and self.at("(", 1):
                self._skip_location()
            elif token.kind == "word":
                self.advance()
                op.words.append(token.text)
            elif token.kind == "punct" and token.text == "(":
                self.advance()
                self._pieces(op, depth + 1)
                self.expect(")")
            elif token.kind == "punct" and token.text == "{":
                self.advance()
                op.attributes.update(dictionary(self, "}"))
            elif token.kind == "punct" and token.text == ",":
                self.advance()
            elif token.kind in ("angle", "number", "string") or token.text == "[":
                op.positional.append(value(self))
            else:
                raise self.error(f"unexpected {describe(token)}", token)

    def _signature(self, op: Operation) -> None:
        """`(types) -> types`, `type -> type`, `type -> (types)` or `type, type, ...`."""
        types = self._type_list()
        if self.accept("->"):
            op.operand_types = types
            op.result_types = self._type_list()
        else:
            op.result_types = types[-len(op.results) :] if op.results else []
            op.operand_types = types
        for item in op.positional:
            if isinstance(item, Dense) and len(op.result_types) == 1:
                op.attributes.setdefault("value", item)

    def _type_list(self) -> list[AnyShape]:
        if self.accept("("):
            types = []
            while not self.accept(")"):
                types.append(self.type_())
                if not self.accept(","):
                    self.expect(")")
                    break
            return types
        types = [self.type_()]
        while self.at(",") and self.peek(1).kind == "angle":
            self.advance()
            types.append(self.type_())
        return types

    def _named_region(self, op: Operation) -> None:
        """`cond {...}`, `do {...}`, `reducer(%a: t, %b: t) (%c: t, %d: t) {...}`."""
        word = self.advance().text
        pairs = []
        while self.accept("("):
            pairs.append(self._typed_values(")"))
        self.expect("{")
        region = self.block("}")
        if pairs:  # each pair is (lhs_k, rhs_k); the block takes every lhs, then every rhs
            region.arguments = [p[0] for p in pairs] + [p[1] for p in pairs if len(p) > 1]
        op.regions.append(region)
        op.words.append(word)
