"""User-facing errors.  A leaf module: every layer (the IR too) may import it.

The CLI prints any `AotcError` as one line and exits with code 2.
"""


class AotcError(Exception):
    """A failure the user can act on: bad model, bad option, missing tool."""


class ShapeError(AotcError):
    """Operands whose shapes or attributes do not fit the operation."""


class UnsupportedError(AotcError):
    """Something valid that aotc cannot compile (yet)."""


class ModelError(AotcError):
    """A model file that is missing, corrupt or inconsistent."""


class ToolError(AotcError):
    """A required external tool (C compiler, archiver, ptxas) failed or is missing."""
