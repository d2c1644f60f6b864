"""LLVM module -> optimized module -> ELF object with the weights patched in.

The weights are written into the object's placeholder section (sections.py says which),
or, external (`emit_code(..., external_weights=True)`), left out of it for NAME.weights
(artifacts/weights.py); they are the plan's with the GEMMs' constant operands
pre-packed (prepack.py); the caller's plan gets the figures of what was emitted.
"""

from __future__ import annotations

import llvmlite.binding as llvm

from ... import progress
from ...artifacts.weights import WeightsFile
from ...buffers import Blob, BufferPlan
from ...ir import Module
from ..llvm.elf import fill_section, patch_section
from .prepack import prepack
from .program import build_module
from .sections import weights_sections
from .target import CpuTarget, target_machine


def optimized_module(
    module: Module,
    plan: BufferPlan,
    name: str,
    target: CpuTarget,
    threads: int = 1,
    profile: bool = False,
    weights_file: WeightsFile | None = None,
):
    """Build, verify and -O3 optimize the LLVM module; returns (module, target machine)."""
    machine = target_machine(target)
    llmod = build_module(module, plan, name, target, threads, profile, weights_file)
    llmod.triple = target.triple
    llmod.data_layout = str(machine.target_data)
    progress.stage("LLVM: parse and optimize")
    parsed = llvm.parse_assembly(str(llmod))
    parsed.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(parsed, builder)
    return parsed, machine


def emit_object(
    module: Module,
    plan: BufferPlan,
    name: str,
    target: CpuTarget,
    threads: int = 1,
    profile: bool = False,
) -> bytes:
    """An ELF relocatable object defining NAME_run, NAME_run_generic, NAME_weights, ...
    (and with `profile`, the kernel counters of profile_counters.py)."""
    return bytes(emit_code(module, plan, name, target, threads, profile)[0])


def emit_code(
    module: Module,
    plan: BufferPlan,
    name: str,
    target: CpuTarget,
    threads: int = 1,
    profile: bool = False,
    external_weights: bool = False,
) -> tuple[Blob, WeightsFile | None]:
    """The object of `emit_object`, and None; with `external_weights`, an object
    without the weights (NAME_set_weights instead of NAME_weights) and NAME.weights."""
    final = prepack(target, plan)
    weights = final.weights or Blob.of(b"\0")  # never empty: a placeholder, a file to map
    weights_file = WeightsFile.of(weights) if external_weights else None
    parsed, machine = optimized_module(module, final, name, target, threads, profile, weights_file)
    plan.workspace_bytes, plan.object_weight_bytes = final.workspace_bytes, len(final.weights)
    progress.stage("LLVM: machine code")
    obj = machine.emit_object(parsed)
    if weights_file is not None:
        return Blob.of(obj), weights_file
    return _with_weights(obj, weights, target.arch, name), None


def _with_weights(obj: bytes, weights: Blob, arch: str, name: str) -> Blob:
    """`obj` with the weights in its placeholder section (sections.py): patched into
    it where small, else after the object's bytes, which the weights' pieces follow."""
    placeholder, section = weights_sections(arch, name, len(weights))
    if placeholder == section:
        return Blob.of(patch_section(obj, section, bytes(weights)))
    head = fill_section(obj, placeholder, len(weights), section)
    return Blob([(0, head), *weights.shifted(len(head))], len(head) + len(weights))


def emit_llvm_ir(module: Module, plan: BufferPlan, name: str, target: CpuTarget) -> str:
    """The optimized LLVM IR as text (for debugging; the weights are zeros there)."""
    parsed, _ = optimized_module(module, prepack(target, plan), name, target)
    return str(parsed)
