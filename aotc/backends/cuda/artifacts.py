"""Artifacts of a model compiled for CUDA: NAME.h, NAME.o, libNAME.a and aotc_cuda.h.

What the CUDA backend writes for a model, built from the target-neutral parts in
aotc.artifacts (its templates rendered through artifacts.render_template).

- NAME.h: templates/cuda_model.h.j2, including aotc_cuda.h (copied beside it);
- NAME.o: the host launcher (templates/cuda_model.c.j2, compiled by the C compiler)
  partially linked (`cc -r`) with the backend's host object (cubins, PTX, weights);
- libNAME.a: NAME.o and runtime_c/aotc_cuda.o, so that
  `cc app.c libNAME.a -lm -lpthread -ldl` links with no CUDA SDK.

The host side is built for this machine; the same arguments give identical files.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ... import artifacts
from ...artifacts import ArtifactPaths, MemoryStats, TensorSpec
from ...artifacts.render import bounded_api
from ...buffers import BufferKind, Slice
from ...ir import DType
from ...resources import resource_dir

RUNTIME_SOURCE = "aotc_cuda.c"
RUNTIME_HEADER = "aotc_cuda.h"
# the bounded runs' layout (aotc_cuda.h includes it): compiled into the library too
BOUNDED_SOURCE, BOUNDED_HEADER = "aotc_bounded.c", "aotc_bounded.h"
LINK_LIBS = ("-lm", "-lpthread", "-ldl")


@dataclass(frozen=True)
class _Copy:
    text: str
    dst: int
    dst_offset: int
    src: int
    src_offset: int
    size: int


def _template_values(name: str, inputs, outputs, program, stats: MemoryStats, source: str):
    """What both templates are rendered with."""
    artifacts.check_model_name(name)
    inputs, outputs = artifacts.unique_specs(inputs, outputs)
    tensors = [*inputs, *outputs]
    params = [f"{name}_cuda_ctx *ctx"]
    params += [f"aotc_cuda_ptr {t.c_name}" for t in tensors]
    params.append("aotc_cuda_stream stream")
    return {
        "name": name,
        "upper": name.upper(),
        "source": source,
        "target": program.target.describe(),
        "inputs": inputs,
        "outputs": outputs,
        "stats": stats,
        "kernels": len(program.launches),
        "archs": list(program.cubins),
        "ptx_arch_name": program.target.newest,
        "params": artifacts.wrap_params(f"int {name}_cuda_run(", params),
        "call_args": ", ".join(["&ctx", *(t.c_name for t in tensors), "NULL"]),
        "input_args": ", ".join(t.c_name for t in inputs) or "0",  # C has no empty {}
        "output_args": ", ".join(t.c_name for t in outputs),
        "width": max((len(t.c_name) for t in tensors), default=0),
        "type_width": max((len(t.type_text) for t in tensors), default=0),
        "has_16bit_floats": any(t.dtype in (DType.F16, DType.BF16) for t in tensors),
        # NAME_cuda_run_bounded's padded buffers: the scratch the caller allocates
        "bounded": bounded_api(inputs, outputs, 0),
    }


def render_cuda_header(name, inputs, outputs, program, stats: MemoryStats, source: str) -> str:
    """The text of NAME.h for a CUDA model."""
    values = _template_values(name, inputs, outputs, program, stats, source)
    return artifacts.render_template("cuda_model.h.j2", **values)


def render_cuda_launcher(name, inputs, outputs, program, stats: MemoryStats) -> str:
    """The C source of the host launcher (compiled into NAME.o)."""
    values = _template_values(name, inputs, outputs, program, stats, "")
    copies = [_copy(program.inputs, src, dst) for src, dst in program.output_copies]
    return artifacts.render_template(
        "cuda_model.c.j2",
        **values,
        images=program.images(),
        launches=program.launches,
        copies=copies,
        ptx_arch=program.ptx_arch,
        ptx_size=len(program.ptx.encode()) + 1,
        weights_size=max(program.weight_bytes, 1),
        weight_bytes=program.weight_bytes,
        arena_bytes=program.arena_bytes,
    )


def _copy(inputs: int, source: Slice, destination: Slice) -> _Copy:
    def param(where: Slice) -> int:
        if where.kind is BufferKind.ARENA:
            return 0
        if where.kind is BufferKind.CONSTANT:
            return 1
        return 2 + where.index + (inputs if where.kind is BufferKind.OUTPUT else 0)

    text = f"{source.text()} -> {destination.text()}"
    return _Copy(
        text, param(destination), destination.offset, param(source), source.offset, source.size
    )


def write_cuda_artifacts(
    out_dir: Path,
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    program,
    stats: MemoryStats,
    source: str,
    cc: str | Sequence[str] | None = None,
) -> ArtifactPaths:
    """Write NAME.h, aotc_cuda.h (with the aotc_bounded.h it includes), NAME.o and
    libNAME.a for `program` (a CudaProgram); all or nothing, as
    artifacts.write_artifacts."""
    header = render_cuda_header(name, inputs, outputs, program, stats, source)
    launcher = render_cuda_launcher(name, inputs, outputs, program, stats)
    compiler = artifacts.find_compiler(cc)
    archiver = artifacts.find_archiver()
    runtime = resource_dir("runtime_c")
    out_dir = Path(out_dir)
    library = f"lib{name}.a"
    files = [f"{name}.h", RUNTIME_HEADER, f"{name}.o", library, BOUNDED_HEADER]
    cflags = [*artifacts.RUNTIME_CFLAGS, f"-I{runtime}"]
    with artifacts.staged_write(out_dir) as stage:
        (stage / files[0]).write_text(header, encoding="utf-8")
        shutil.copyfile(runtime / RUNTIME_HEADER, stage / RUNTIME_HEADER)
        shutil.copyfile(runtime / BOUNDED_HEADER, stage / BOUNDED_HEADER)
        (stage / f"{name}_cuda.c").write_text(launcher, encoding="utf-8")
        (stage / f"{name}_blobs.o").write_bytes(program.host_object)
        steps = [
            (
                [*compiler, *cflags, "-c", f"{name}_cuda.c", "-o", f"{name}_launcher.o"],
                f"compiling the launcher of {name}",
            ),
            (
                [
                    *compiler,
                    "-nostdlib",
                    "-r",
                    "-o",
                    files[2],
                    f"{name}_launcher.o",
                    f"{name}_blobs.o",
                ],
                f"linking {files[2]}",
            ),
            (
                [*compiler, *cflags, "-c", str(runtime / RUNTIME_SOURCE), "-o", "aotc_cuda.o"],
                f"compiling runtime_c/{RUNTIME_SOURCE}",
            ),
            (
                [*compiler, *cflags, "-c", str(runtime / BOUNDED_SOURCE), "-o", "aotc_bounded.o"],
                f"compiling runtime_c/{BOUNDED_SOURCE}",
            ),
            (
                [*archiver, "rcsD", library, files[2], "aotc_cuda.o", "aotc_bounded.o"],
                f"archiving {library}",
            ),
        ]
        for argv, what in steps:
            artifacts.run_tool(argv, what, stage)
        artifacts.install(stage, out_dir, files)
    link = artifacts.link_command(out_dir / library, "host", LINK_LIBS)
    return ArtifactPaths(out_dir / files[0], out_dir / files[2], out_dir / library, link=link)
