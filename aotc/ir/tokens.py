"""HLO text as tokens: the tokenizer and `TokenStream`, the cursor over them that
every reader of HLO text moves, whose errors quote the offending line.

Tokens are names (with their `%`, if written), words (numbers, `3x3`,
`1_1x0_0`), C-escaped strings and punctuation; space and comments (`//`,
`/* */`) between them are skipped.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from typing import NamedTuple

from ..errors import ModelError

INT_RE = re.compile(r"[-+]?[0-9]+")
_QUOTED_LINE_CHARS = 300  # error messages quote at most this much of the line


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
    """The tokens of `text`, then an "eof" one; ModelError where no token matches."""
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


_UNESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    '"': '"',
    "'": "'",
    "\\": "\\",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "?": "?",
}


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


class TokenCursor:
    """Looking ahead in `tokens` from `pos` and consuming them, the last token (eof)
    never passed; `at` matches punctuation and the kinds in WORDS by their text.
    Subclasses give `tokens`, `pos`, `describe` and `error`."""

    WORDS: tuple[str, ...] = ("name",)
    tokens: list
    pos: int

    def peek(self, ahead: int = 0):
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def advance(self):
        token = self.peek()
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return token

    def at(self, text: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.text == text and (token.kind == "punct" or token.kind in self.WORDS)

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def expect(self, text: str):
        if not self.at(text):
            raise self.error(f"expected '{text}', found {self.describe(self.peek())}")
        return self.advance()

    def describe(self, token) -> str:
        raise NotImplementedError

    def error(self, message: str, token=None, kind: type = ModelError) -> Exception:
        raise NotImplementedError


class TokenStream(TokenCursor):
    """A cursor over the tokens of one text: look ahead, consume, fail quoting a line."""

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.newlines = [m.start() for m in re.finditer("\n", text)]
        self.tokens = tokenize(text)
        self.pos = 0

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

    def describe(self, token: Token) -> str:
        return "end of text" if token.kind == "eof" else f"'{token.text}'"

    def name(self) -> str:
        token = self.advance()
        if token.kind != "name":
            raise self.error(f"expected a name, found {self.describe(token)}", token)
        return token.text.removeprefix("%")

    def integer(self) -> int:
        token = self.advance()
        if token.kind != "word" or not INT_RE.fullmatch(token.text):
            raise self.error(f"expected an integer, found {self.describe(token)}", token)
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

    def string(self) -> str:
        token = self.advance()
        if token.kind != "string":
            raise self.error(f"expected a string, found {self.describe(token)}", token)
        return _unquote(token.text)
