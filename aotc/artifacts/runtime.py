"""The C runtime of CPU models (runtime_c/*.c: the thread pool) built for a target and
kept per process; a model object linked with it into a shared library (for cffi); and
the command that builds it where no C compiler for the target was found.
"""

from __future__ import annotations

import functools
import hashlib
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import ToolError
from ..resources import resource_dir
from .specs import Target
from .tools import (
    cpu_flags,
    cross_compiler_name,
    find_compiler,
    run_tool,
    runtime_compiler,
    target_arch,
)

# the thread pool's capacity, the caller included (AOTC_MAX_THREADS in aotc_runtime.c, which
# clamps every count to it): a compiled-in default thread count beyond it is refused
MAX_THREADS = 512
# fixed, so that the same sources give byte-identical objects
RUNTIME_CFLAGS = ("-O2", "-fPIC", "-std=c99", "-Wall", "-pthread")
LINK_LIBS = ("-lm", "-lpthread")
# runtime_c/aotc_cuda.{c,h}: the CUDA models' runtime (backends/cuda/artifacts.py), not the CPU's
CUDA_RUNTIME = "aotc_cuda"


def runtime_sources() -> list[Path]:
    """runtime_c/*.c of the C runtime, sorted."""
    paths = resource_dir("runtime_c").glob("*.c")
    return sorted(p for p in paths if p.stem != CUDA_RUNTIME)


def runtime_files() -> list[Path]:
    """The sources and the headers they include: what a user needs to build the runtime."""
    headers = [p for p in resource_dir("runtime_c").glob("*.h") if p.stem != CUDA_RUNTIME]
    return [*runtime_sources(), *sorted(headers)]


def missing_compiler_message(arch: str) -> str:
    """What to say where no C compiler for `arch` was found."""
    name = cross_compiler_name(arch)
    return (
        f"no C compiler for {arch} found (looked for $CC_{arch} and {name} on PATH; "
        f"Debian: apt-get install gcc-{arch}-linux-gnu)"
    )


@functools.lru_cache(maxsize=8)
def runtime_objects(compiler: tuple[str, ...], fingerprint: str) -> tuple[tuple[str, bytes], ...]:
    """(file name, object bytes) of runtime_c/*.c, compiled once per process and compiler.

    Compiled from the source directory with relative names: the object's file symbol
    is then `aotc_runtime.c`, never a temporary path.
    """
    del fingerprint  # part of the cache key only: edited sources are recompiled
    src = resource_dir("runtime_c")
    objects = []
    with tempfile.TemporaryDirectory(prefix="aotc-runtime-") as tmp:
        for source in runtime_sources():
            obj = Path(tmp) / f"{source.stem}.o"
            argv = [*compiler, *RUNTIME_CFLAGS, "-c", source.name, "-o", str(obj)]
            run_tool(argv, f"compiling runtime_c/{source.name}", cwd=src)
            objects.append((obj.name, obj.read_bytes()))
    return tuple(objects)


def compile_runtime(
    out_dir: Path, cc: str | Sequence[str] | None = None, target: Target | str = "host"
) -> list[Path]:
    """Compile runtime_c/*.c for `target` (default: this machine) into `out_dir` (created
    if missing); the object paths, sorted."""
    compiler = runtime_compiler(target, cc)
    if compiler is None:
        raise ToolError(missing_compiler_message(target_arch(target)))
    compiler = tuple(compiler)
    digest = hashlib.sha256()
    for source in runtime_files():
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for file_name, data in runtime_objects(compiler, digest.hexdigest()):
        path = out_dir / file_name
        path.write_bytes(data)
        paths.append(path)
    return paths


def link_shared(object_path: Path, out_path: Path, cc: str | Sequence[str] | None = None) -> Path:
    """Link a model object and the runtime into a shared library (for cffi); `out_path`."""
    compiler = find_compiler(cc)
    with tempfile.TemporaryDirectory(prefix="aotc-link-") as tmp:
        runtime = compile_runtime(Path(tmp), compiler)
        argv = [*compiler, "-shared", "-o", out_path, object_path, *runtime, *LINK_LIBS]
        run_tool(argv, f"linking {Path(out_path).name}")
    return Path(out_path)


def finish_command(out_dir: Path, name: str, target: Target | str) -> str:
    """The shell command that builds libNAME.a in `out_dir` from NAME.o and the runtime
    sources there (written when no C compiler for the target was found)."""
    compiler = [cross_compiler_name(target_arch(target)), *RUNTIME_CFLAGS, *cpu_flags(target)]
    steps = [f"cd {shlex.quote(str(out_dir))}"]
    objects = []
    for source in runtime_sources():
        obj = f"{source.stem}.o"
        steps.append(shlex.join([*compiler, "-c", source.name, "-o", obj]))
        objects.append(obj)
    steps.append(shlex.join(["ar", "rcs", f"lib{name}.a", f"{name}.o", *objects]))
    return " && ".join(steps)
