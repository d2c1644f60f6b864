"""Kernel module -> PTX per architecture (llvmlite's NVPTX target) -> cubin (ptxas), and
the host object that carries the cubins, the fallback PTX and the weights.

libdevice is linked into a module only when its kernels call `__nv_` functions; its
definitions are internalized so that the optimizer drops the ones not called.  The host
object defines, for model NAME (read-only data, like the CPU backend's weights patched
into zero-filled placeholder sections after emission, see llvm/elf.py):

    NAME_weights            the constants (sub-byte ones packed, see packing.py),
                            uploaded once by NAME_cuda_init
    NAME_cubin_sm_XX        one cubin per architecture
    NAME_ptx                the PTX of the newest architecture, NUL-terminated
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from ...buffers import BufferPlan, Slice
from ...ir import Module
from ..llvm.elf import patch_section
from ..llvm.machine import host_machine, initialize
from .program import KernelLaunch, build_program
from .target import NVPTX_TRIPLE, CudaTarget, arch_number
from .tools import assemble, libdevice_bitcode

BLOB_ALIGNMENT = 64


@dataclass
class CudaProgram:
    """A model compiled for CUDA: what the artifacts (launcher, header, NAME.o) need."""

    name: str
    target: CudaTarget
    launches: list[KernelLaunch]
    output_copies: list[tuple[Slice, Slice]]
    inputs: int
    outputs: int
    arena_bytes: int
    weights: bytes  # the blob the kernels read (sub-byte constants packed: packing.py)
    cubins: dict[str, bytes]  # architecture -> cubin
    ptx: str  # for target.newest
    host_object: bytes  # NAME_weights, NAME_cubin_sm_XX, NAME_ptx

    @property
    def weight_bytes(self) -> int:
        """The bytes the launcher uploads: the packed blob's, not the plan's."""
        return len(self.weights)

    def images(self) -> list[CubinImage]:
        """The embedded cubins, oldest architecture first."""
        images = []
        for arch, cubin in self.cubins.items():
            symbol = f"{self.name}_cubin_{arch}"
            images.append(CubinImage(arch_number(arch), arch.endswith("a"), symbol, len(cubin)))
        return images

    @property
    def ptx_arch(self) -> int:
        """The compute capability (times ten) the embedded PTX needs at least."""
        return arch_number(self.target.newest)


@dataclass(frozen=True)
class CubinImage:
    """One cubin in the host object: the launcher's row for it."""

    arch: int  # sm_XY -> 10*X + Y
    exact: bool  # sm_XYa: runs on that architecture only
    symbol: str
    size: int


def compile_cuda(module: Module, plan: BufferPlan, name: str, target: CudaTarget) -> CudaProgram:
    """Kernels for every architecture of `target`, and the host object holding them."""
    program = build_program(module, plan, name, target)
    text = str(program.module)
    libdevice = calls_libdevice(program.module)
    cubins, ptx = {}, ""
    for arch in target.archs:
        arch_ptx = emit_ptx(text, arch, libdevice)
        cubins[arch] = assemble(arch_ptx, arch, f"model {name}")
        if arch == target.newest:
            ptx = arch_ptx
    blobs = {f"{name}_cubin_{arch}": cubin for arch, cubin in cubins.items()}
    blobs[f"{name}_ptx"] = ptx.encode() + b"\0"
    blobs[f"{name}_weights"] = program.weights or b"\0"
    plan.object_weight_bytes = len(program.weights)  # what the stats and NAME.h report
    return CudaProgram(
        name,
        target,
        program.launches,
        program.output_copies,
        program.inputs,
        program.outputs,
        plan.scratch_bytes,
        program.weights,
        cubins,
        ptx,
        host_object(blobs),
    )


def calls_libdevice(llmod: ir.Module) -> bool:
    return any(
        isinstance(g, ir.Function) and g.is_declaration and g.name.startswith("__nv_")
        for g in llmod.globals.values()
    )


@functools.cache
def nvptx_machine(arch: str) -> llvm.TargetMachine:
    initialize()
    return llvm.Target.from_triple(NVPTX_TRIPLE).create_target_machine(cpu=arch, opt=3)


def optimized_kernels(text: str, arch: str, libdevice: bool) -> llvm.ModuleRef:
    """The kernel module parsed, libdevice linked in if asked, verified, -O3 for `arch`."""
    machine = nvptx_machine(arch)
    parsed = llvm.parse_assembly(text)
    parsed.data_layout = str(machine.target_data)
    if libdevice:
        library = llvm.parse_bitcode(libdevice_bitcode())
        library.triple = NVPTX_TRIPLE
        library.data_layout = parsed.data_layout
        parsed.link_in(library)
        for function in parsed.functions:
            if function.name.startswith("__nv_") and not function.is_declaration:
                function.linkage = "internal"
    parsed.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(parsed, builder)
    return parsed


def emit_ptx(text: str, arch: str, libdevice: bool) -> str:
    """PTX for `arch` from the kernel module's LLVM IR text."""
    return nvptx_machine(arch).emit_assembly(optimized_kernels(text, arch, libdevice))


def host_object(blobs: dict[str, bytes]) -> bytes:
    """An object for this machine defining each blob as a read-only byte array."""
    machine = host_machine()
    llmod = ir.Module(name="blobs")
    llmod.triple = llvm.get_process_triple()
    for symbol, data in blobs.items():
        variable = ir.GlobalVariable(llmod, ir.ArrayType(ir.IntType(8), len(data)), symbol)
        variable.initializer = ir.Constant(variable.value_type, None)
        variable.align = BLOB_ALIGNMENT
        variable.section = f".rodata.{symbol}"
    obj = machine.emit_object(llvm.parse_assembly(str(llmod)))
    for symbol, data in blobs.items():
        obj = patch_section(obj, f".rodata.{symbol}", data)
    return obj
