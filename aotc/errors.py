"""User-facing errors.  A leaf module: every layer (the IR too) may import it.

The CLI prints any `AotcError` as one line (`one_line`) and exits with code 2.
"""

from __future__ import annotations

import copy


class AotcError(Exception):
    """A failure the user can act on: bad model, bad option, missing tool."""

    def with_context(self, where: str) -> AotcError:
        """The same error (same class and fields) with `where: ` put before its message."""
        error = copy.copy(self)
        error.args = (f"{where}: {self}",)
        return error


class ShapeError(AotcError):
    """Operands whose shapes or attributes do not fit the operation."""


class UnsupportedError(AotcError):
    """Something valid that aotc cannot compile (yet)."""


class ModelError(AotcError):
    """A model file that is missing, corrupt or inconsistent."""


class ToolError(AotcError):
    """A required external tool (C compiler, archiver, ptxas) failed or is missing."""


class InputValuesRequired(UnsupportedError):
    """Shapes depend on the values of these model inputs; specialise on them.

    `aotc.backend` catches it and recompiles with those inputs' values fixed
    (as XLA's JIT specialises on shape-determining arguments); the CLI user
    fixes them with --const.
    """

    def __init__(self, message: str, inputs: tuple[str, ...] | list[str] = ()):
        super().__init__(message)
        self.inputs = list(inputs)


def one_line(message: str) -> str:
    """A message on one line: each run of whitespace (newlines too) becomes one space."""
    return " ".join(message.split())
