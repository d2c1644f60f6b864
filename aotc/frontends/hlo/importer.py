"""HLO text frontend: an XLA HLO module (JAX, TensorFlow, aotc's own dumps) -> ir.Module.

`dialect.parse_hlo` reads XLA's text in both spellings (with `%` sigils and
operand shapes, as TensorFlow and XLA dumps print it, and without, as current
JAX prints it) and rewrites the few XLA opcodes the IR lacks (see
`expansions.py`).  The entry's parameters are the inputs in order; a tuple
ROOT gives one output per element.  This module only reads the file and says
whether a file is HLO text at all.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import AotcError, ModelError
from ...ir import Module, Op
from ...ir.verify import verify
from .dialect import parse_hlo

# blank space and comments (`// ...`, `/* ... */`) before the module header
_PREAMBLE = re.compile(rb"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.DOTALL)


def is_hlo_text(head: bytes) -> bool:
    """Whether a file starting with `head` is HLO text: `HloModule` after space and
    comments.  (An ONNX file is a protobuf, which never starts so.)"""
    return head[_PREAMBLE.match(head).end() :].startswith(b"HloModule")


def import_hlo(path: str | Path, input_shapes: dict | None = None) -> Module:
    """Parse an HLO text file; shapes are static in HLO, so `input_shapes` must be empty."""
    path = Path(path)
    if input_shapes:
        raise AotcError(f"{path}: --input does not apply to HLO text (its shapes are static)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ModelError(f"{path}: cannot read HLO text: {error}") from None
    try:
        module = parse_hlo(text)
        # what the text's own checks leave: parameter numbering, call and operand arity
        verify(module)
    except AotcError as error:
        raise error.with_context(str(path)) from None
    # the C API's names are the written ones, whatever the passes rename
    entry = module.entry
    module.input_names = [p.name for p in entry.parameters]
    root = entry.root
    module.output_names = [o.name for o in (root.operands if root.op is Op.TUPLE else [root])]
    return module
