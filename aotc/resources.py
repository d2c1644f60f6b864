"""Where the non-Python files (templates/, runtime_c/) are found.

A wheel carries them in `aotc/_data/`; an editable install or a source
checkout has them at the repository root, beside the package.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """The directory `templates` or `runtime_c`, wherever this install keeps it."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"aotc installation is missing its '{name}' directory")
