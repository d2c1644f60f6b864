"""All-or-nothing writing of an output directory: files are built in a staging directory
beside it (`staged_write`) and moved in at the end (`install`); on any failure the
directory is as it was, or absent again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import AotcError


def _make_dirs(path: Path) -> Path | None:
    """mkdir -p; the topmost directory it created (to remove on failure), or None."""
    missing = None
    probe = path
    while not probe.exists():
        missing = probe
        if probe.parent == probe:
            break
        probe = probe.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AotcError(f"cannot create {path}: {e.strerror or e}") from None
    return missing


@contextlib.contextmanager
def staged_write(out_dir: Path) -> Iterator[Path]:
    """All or nothing: yields a staging directory beside `out_dir` (created if missing)
    whose files the caller installs at the end (`install`); on any failure `out_dir` is
    as it was, or absent again, and an OSError becomes one line."""
    created = _make_dirs(out_dir)
    done = False
    try:
        with _staging_dir(out_dir) as stage:
            yield stage
        done = True
    except OSError as e:
        raise AotcError(f"cannot write artifacts to {out_dir}: {e.strerror or e}") from None
    finally:
        if not done and created is not None:
            shutil.rmtree(created, ignore_errors=True)


def _staging_dir(out_dir: Path) -> tempfile.TemporaryDirectory:
    """A temporary directory beside `out_dir` (same file system: moves are renames)."""
    prefix = f".{out_dir.resolve().name or 'out'}.aotc-"
    try:
        return _PathTempDir(prefix=prefix, dir=out_dir.resolve().parent)
    except OSError:  # parent not writable: stage inside out_dir itself
        return _PathTempDir(prefix=".aotc-", dir=out_dir)


class _PathTempDir(tempfile.TemporaryDirectory):
    def __enter__(self) -> Path:
        return Path(self.name)


def install(stage: Path, out_dir: Path, files: Sequence[str], remove: Sequence[str] = ()) -> None:
    """Move staged files into out_dir and take the `remove` ones out of it; on failure put
    back what was there before."""
    backup = stage / "previous"
    backup.mkdir()
    moved: list[tuple[Path, Path | None]] = []
    try:
        for file_name in [*remove, *files]:
            target = out_dir / file_name
            previous = None
            if target.exists() or target.is_symlink():
                previous = backup / file_name
                os.replace(target, previous)
            moved.append((target, previous))
            if file_name in files:
                os.replace(stage / file_name, target)
    except OSError:
        for target, previous in reversed(moved):
            if previous is not None:
                os.replace(previous, target)
            else:
                target.unlink(missing_ok=True)
        raise
