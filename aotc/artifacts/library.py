"""The artifacts of a model whose object runs with the C runtime: NAME.h, NAME.o and
libNAME.a (NAME.o and the runtime built for the model's target), or, without a C
compiler for that target, the runtime's sources and the command that finishes the job;
with external weights, NAME.weights too.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path

from .. import progress
from ..buffers import Blob
from ..errors import ToolError
from .render import render_header
from .runtime import (
    LINK_LIBS,
    compile_runtime,
    finish_command,
    missing_compiler_message,
    runtime_files,
)
from .specs import ArtifactPaths, MemoryStats, Target, TensorSpec
from .staging import install, staged_write
from .tools import (
    cross_compiler_name,
    find_archiver,
    link_command,
    run_tool,
    runtime_compiler,
    target_arch,
)
from .weights import WEIGHTS_SUFFIX, WeightsFile


def write_artifacts(
    out_dir: Path,
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    obj: Blob,
    stats: MemoryStats,
    target: Target | str,
    source: str,
    cc: str | Sequence[str] | None = None,
    profile_kernels: Sequence[str] | None = None,
    weights_file: WeightsFile | None = None,
) -> ArtifactPaths:
    """Write NAME.h, NAME.o and libNAME.a (NAME.o + the runtime built for `target`).

    `target` is a Target, or a description for the header of code for this machine.
    Without a C compiler for the target's architecture (a cross compiler, see
    `runtime_compiler`) it writes NAME.h, NAME.o and the runtime sources instead of the
    library and removes a stale libNAME.a; the result says how to finish.  All or
    nothing: everything is built in a temporary directory beside `out_dir` and moved in
    at the end; on failure `out_dir` is as it was (or absent again).  The same arguments
    give byte-identical files.  `profile_kernels`: the kernels of a profiled build (its
    header declares their counters).  `weights_file`: external weights, written as
    NAME.weights (else a stale NAME.weights is removed).
    """
    header = render_header(
        name, inputs, outputs, stats, target, source, profile_kernels, weights_file
    )
    compiler = runtime_compiler(target, cc)
    archiver = find_archiver() if compiler is not None else None
    out_dir = Path(out_dir)
    library = f"lib{name}.a"
    weights_name = f"{name}{WEIGHTS_SUFFIX}"
    # a NAME.weights of an earlier external build does not belong to an embedded one
    stale = [weights_name] if weights_file is None else []
    files = [f"{name}.h", f"{name}.o"]
    if compiler is not None:
        files.append(library)
    else:
        files += [p.name for p in runtime_files()]
    with staged_write(out_dir) as stage:
        (stage / files[0]).write_text(header, encoding="utf-8")
        obj.write_file(stage / files[1])
        if weights_file is not None:
            weights_file.data.write_file(stage / weights_name)
            files.append(weights_name)
        if compiler is not None:
            progress.stage("runtime and archive")
            runtime = compile_runtime(stage / "runtime", compiler)
            _check_same_machine(obj[:20], runtime, compiler, target)
            members = [files[1], *(str(p.relative_to(stage)) for p in runtime)]
            # D: zero timestamps, uids and modes, so that archives are reproducible
            run_tool([*archiver, "rcsD", library, *members], f"archiving {library}", stage)
            install(stage, out_dir, files, remove=stale)
        else:
            for path in runtime_files():
                shutil.copyfile(path, stage / path.name)
            install(stage, out_dir, files, remove=[library, *stale])
    weights = out_dir / weights_name if weights_file is not None else None
    if compiler is not None:
        link = link_command(out_dir / library, target, LINK_LIBS)
        return ArtifactPaths(
            out_dir / files[0], out_dir / files[1], out_dir / library, link=link, weights=weights
        )
    arch = target_arch(target)
    return ArtifactPaths(
        out_dir / files[0],
        out_dir / files[1],
        None,
        runtime_sources=tuple(out_dir / p.name for p in runtime_files()),
        finish=finish_command(out_dir, name, target),
        missing=missing_compiler_message(arch),
        weights=weights,
    )


# ELF e_machine values of the architectures aotc targets
_ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


def elf_machine(data: bytes) -> str:
    """The architecture of an ELF object from its first 20 bytes ("machine N" if unknown)."""
    code = int.from_bytes(data[18:20], "little") if data[:4] == b"\x7fELF" else -1
    return _ELF_MACHINES.get(code, f"machine {code}")


def _check_same_machine(elf_start: bytes, runtime: list[Path], compiler, target):
    """Refuse a library whose runtime was built for another architecture than the model."""
    model_arch = elf_machine(elf_start)
    for path in runtime:
        runtime_arch = elf_machine(path.read_bytes()[:20])
        if runtime_arch != model_arch:
            description = target if isinstance(target, str) else target.describe()
            raise ToolError(
                f"the C compiler '{shlex.join(compiler)}' builds for {runtime_arch} but the model "
                f"is compiled for {model_arch} ({description}): set CC_{model_arch} to a C "
                f"compiler for {model_arch}, e.g. CC_{model_arch}={cross_compiler_name(model_arch)}"
            )
