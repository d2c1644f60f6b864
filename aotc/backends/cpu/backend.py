"""The CPU backend behind the `Backend` protocol: every `--target` spec no other backend
claims ("host", "x86_64:x86-64-v3", "aarch64-linux-gnu:cortex-a72"...), ELF objects
linked with the C runtime, and the forms of its dot and convolution kernels.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ... import artifacts
from ...artifacts import ArtifactPaths, MemoryStats, TensorSpec
from ...artifacts.weights import WeightsFile
from ...buffers import Blob, BufferPlan
from ...errors import AotcError, one_line
from ...ir import Module
from ...ir.ops import NO_CODE_OPS
from ..base import Backend, CompiledCode
from ..llvm.extents import clips
from .attention import attention_kind
from .codegen import emit_code
from .contraction import contraction_kind, image_overwrites
from .peak import peak_gflops
from .prepack import prepack
from .program import WORKSPACE_SIZERS, kernel_instructions
from .sections import big_sections
from .target import NOTABLE_TARGETS, CpuTarget, parse_target
from .workspace import kernel_workspaces

_TABLE_HEADINGS = ("TARGET", "TRIPLE", "CPU", "VECTORS", "FMA", "RUNTIME C COMPILER", "FOR")


class CpuBackend(Backend[CpuTarget]):
    prefix = ""
    label = "CPU"
    loadable = True  # the object links into a shared library (aotc.runner)
    computes_chains = True  # attention block by block (attention.py)
    weights_modes = ("embedded", "external")  # external: NAME.weights (program.py)

    def parse_target(self, spec: str, opt_level: int = 2) -> CpuTarget:
        # below -O2, convolutions sum directly (closest to a reference's rounding)
        return replace(parse_target(spec), winograd=opt_level >= 2)

    def byte_dot_signs(self, target: CpuTarget) -> str:
        # AArch64 with dotprod but not i8mm: sdot and udot; elsewhere u8 x s8 (vpdpbusd,
        # usdot), which the 16-bit pairs of targets without byte dots take as well
        return "same" if target.byte_dot_signs == "same" else "mixed"

    def overwrites(self, target: CpuTarget, plan: BufferPlan) -> dict[int, int]:
        return image_overwrites(target, plan)

    def temporaries(self, target: CpuTarget, plan: BufferPlan) -> dict[int, int]:
        # what the kernels need with the weights laid out as the object will have them
        # (pre-packed constant operands need no packing panel)
        return kernel_workspaces(target, prepack(target, plan), WORKSPACE_SIZERS)

    def compile(
        self,
        module: Module,
        plan: BufferPlan,
        name: str,
        target: CpuTarget,
        threads: int = 1,
        profile: bool = False,
        weights: str = "embedded",
    ) -> CompiledCode:
        external = weights == "external"
        obj, weights_file = emit_code(module, plan, name, target, threads, profile, external)
        kernels = sum(1 for instr in plan.schedule if instr.op not in NO_CODE_OPS)
        # external weights take no section of the object, big or small
        object_weights = 0 if external else plan.weight_bytes
        arena, section = big_sections(target.arch, name, plan.scratch_bytes, object_weights)
        code = CompiledCode(
            obj,
            kernels,
            arena_section=arena,
            weights_section=section,
            weights_file=weights_file,
        )
        if not profile:
            return code
        # the header documents the counters of a profiled build: its program is their names
        names = tuple(instr.name for instr in kernel_instructions(plan))
        return replace(code, program=names, profile_kernels=names)

    def peak_gflops(self, target: CpuTarget) -> float:
        return peak_gflops(target)

    def write_artifacts(
        self,
        out_dir: Path,
        name: str,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        obj: Blob,
        stats: MemoryStats,
        target: CpuTarget,
        source: str,
        program: tuple[str, ...] | None = None,
        weights_file: WeightsFile | None = None,
    ) -> ArtifactPaths:
        """NAME.h, NAME.o and libNAME.a (and NAME.weights for external weights); without
        a C compiler for the target, the runtime sources instead of the library (see
        artifacts.write_artifacts).  `program` is a profiled build's kernel names (None
        otherwise)."""
        return artifacts.write_artifacts(
            out_dir,
            name,
            inputs,
            outputs,
            obj,
            stats,
            target,
            source,
            profile_kernels=program,
            weights_file=weights_file,
        )

    def kernel_forms(self, target: CpuTarget, plan: BufferPlan) -> dict[str, str]:
        """How each dot or convolution kernel is emitted ("gemm", "winograd", "depthwise"...),
        and ", to extents" for those clipped to a call's bounded extents."""
        kinds = {
            i.name: contraction_kind(target, plan, i) or attention_kind(target, plan, i)
            for i in plan.schedule
        }
        for i in plan.schedule:
            if plan.needs_code(i) and clips(i):
                kinds[i.name] = ", ".join(filter(None, (kinds[i.name], "to extents")))
        return {name: kind for name, kind in kinds.items() if kind}

    def describe_targets(self) -> str:
        """A table of the notable targets, then how to name any other."""
        rows = [_TABLE_HEADINGS, *(_target_row(spec, purpose) for spec, purpose in NOTABLE_TARGETS)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        lines = []
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths)]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
        arch = artifacts.host_arch()
        lines.append(
            f"\nAny CPU LLVM knows: --target ARCH:CPU (e.g. x86_64:znver3, aarch64:neoverse-n2)."
            f"\nThe runtime is built by $CC_<arch> if set, else $CC or cc for this machine's "
            f"architecture ({arch}), else <arch>-linux-gnu-gcc from PATH."
        )
        return "\n".join(lines)


def _target_row(spec: str, purpose: str) -> tuple[str, ...]:
    """One row of the table: what the target implies and the C compiler of its runtime."""
    target = parse_target(spec)
    try:
        compiler = artifacts.runtime_compiler(target)
    except AotcError as error:  # a named compiler that is missing: say so in the table
        compiler = [f"({one_line(str(error))})"]
    found = shlex.join([Path(compiler[0]).name, *compiler[1:]]) if compiler else "none found"
    vectors = f"{target.vector_bits}-bit {target.vector_isa}"
    fma = "yes" if target.has_fma else "no"
    return (spec, target.triple, target.cpu, vectors, fma, found, purpose)
