"""MLIR's textual syntax as tokens, and the cursor over them whose errors name the line.

Tokens are SSA values (`%x`, `%0#1`), symbols (`@main`), block labels (`^bb0`),
types and attributes written with angle brackets kept whole (`tensor<2x3xf32>`,
`dense<[1, 2]>`, `array<i64: 1>`, `#stablehlo.conv<[b, 0, 1, f]x...>`: their
insides are read by `values.py`), strings, numbers, bare words and punctuation.
Space and `//` comments between them are skipped.
"""

from __future__ import annotations

import bisect
import re
from typing import NamedTuple

from ...errors import ModelError
from ...ir.tokens import TokenCursor

_QUOTED_LINE_CHARS = 200


class Token(NamedTuple):
    # "value", "symbol", "block", "angle", "string", "number", "word", "punct", "eof"
    kind: str
    text: str
    pos: int


# `<...>` nested three deep; `->` inside (conv dimension numbers) is not a closing `>`
_INNER = r"(?:->|[^<>])*"
_ANGLE = rf"<(?:->|[^<>]|<(?:->|[^<>]|<{_INNER}>)*>)*>"
_TOKEN_RE = re.compile(
    r"(?:\s|//[^\n]*)*"
    + rf"""(?:
    (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<angle>(?:\#[A-Za-z_][\w.$]*|!?[A-Za-z_][\w.$]*){_ANGLE})
  | (?P<value>%[\w.$-]+(?:\#[0-9]+)?)
  | (?P<symbol>@(?:[\w.$-]+|"[^"]*"))
  | (?P<block>\^[\w.$-]+)
  | (?P<number>[-+]?(?:0x[0-9A-Fa-f]+|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?))
  | (?P<word>!?[A-Za-z_][\w.$]*)
  | (?P<punct>->|[^\s\w"])
    )""",
    re.VERBOSE | re.DOTALL,
)
_TRAILING_SPACE = re.compile(r"(?:\s|//[^\n]*)*", re.DOTALL)


def tokenize(text: str) -> list[Token]:
    """The tokens of `text`, then an "eof"; ModelError where none matches."""
    tokens: list[Token] = []
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        if m.start() != pos:
            break
        kind = m.lastgroup or "punct"
        tokens.append(Token(kind, m.group(kind), m.start(kind)))
        pos = m.end()
    pos = _TRAILING_SPACE.match(text, pos).end()  # type: ignore[union-attr]
    if pos != len(text):
        line = text.count("\n", 0, pos) + 1
        raise ModelError(f"StableHLO line {line}: cannot read {text[pos : pos + 20]!r}")
    tokens.append(Token("eof", "", len(text)))
    return tokens


class Cursor(TokenCursor):
    """A position in the tokens of one text; errors quote the line of a token."""

    WORDS = ("word",)

    def __init__(self, text: str, tokens: list[Token] | None = None, line_offset: int = 0):
        self.text = text
        self.tokens = tokens if tokens is not None else tokenize(text)
        self.pos = 0
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.line_offset = line_offset  # for texts cut out of a bigger one

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.peek().kind != kind:
            raise self.error(f"expected {what}, found {describe(self.peek())}")
        return self.advance()

    def line(self, token: Token | None = None) -> int:
        token = token or self.peek()
        return bisect.bisect_right(self._line_starts, token.pos) + self.line_offset

    def describe(self, token: Token) -> str:
        return describe(token)

    def error(self, message: str, token: Token | None = None, kind: type = ModelError):
        token = token or self.peek()
        index = bisect.bisect_right(self._line_starts, token.pos) - 1
        start = self._line_starts[index]
        quoted = self.text[start:].split("\n", 1)[0].strip()[:_QUOTED_LINE_CHARS]
        where = f"StableHLO line {self.line(token)}"
        return kind(f"{where}: {message}: {quoted}" if quoted else f"{where}: {message}")


def describe(token: Token) -> str:
    return "the end of the text" if token.kind == "eof" else f"'{token.text}'"
