"""HLO text frontend: a saved XLA module (or aotc's own dump) -> ir.Module.

v1 reads the text form that `aotc.ir.text` prints and parses (XLA's syntax);
the full JAX/TensorFlow op set is the saved-graphs issue's work.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AotcError, ModelError
from ..ir import Module
from ..ir.text import parse_module


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
        return parse_module(text)
    except AotcError as error:
        raise error.with_context(str(path)) from None
