"""C identifiers: the one rule for the names aotc turns into C symbols and file names.

A model's name prefixes its C symbols (NAME_run...) and its files (NAME.h); the ONNX
frontend, the driver, the artifact writers and the backends all check or make such
names here.  A leaf beside `aotc.errors`: every layer but the IR may import it.
(Tensor parameters have a stricter spelling of their own: `artifacts.c_identifier`.)
"""

from __future__ import annotations

import re

from .errors import AotcError

# C's identifiers, ASCII only: what every C compiler and linker takes
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NOT_IN_IDENTIFIERS = re.compile(r"[^A-Za-z0-9_]")


def is_c_identifier(text: str) -> bool:
    return C_IDENTIFIER.match(text) is not None


def check_c_identifier(text: str, what: str) -> None:
    """Raise unless `text` is a C identifier; `what` names it in the message."""
    if not is_c_identifier(text):
        raise AotcError(f"{what} '{text}' is not a C identifier ([A-Za-z_][A-Za-z0-9_]*)")


def to_c_identifier(text: str, lead: str = "_") -> str:
    """`text` made a C identifier: each other character becomes `_`, and `lead` goes
    before a leading digit (and stands for empty text)."""
    ident = _NOT_IN_IDENTIFIERS.sub("_", text)
    return f"{lead}{ident}" if not ident or ident[0].isdigit() else ident
