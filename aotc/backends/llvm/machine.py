"""LLVM target machines, shared by every backend: one per (triple, CPU, features).

`known_cpus` lists the CPU names LLVM accepts for a triple; `host_machine` is
this process's machine (for objects that hold data only, e.g. the CUDA
backend's embedded kernels).
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import llvmlite.binding as llvm

from ...errors import AotcError


class TargetError(AotcError):
    """A `--target` that LLVM or aotc cannot generate code for."""


@functools.cache
def initialize() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def create_machine(triple: str, cpu: str, features: str) -> llvm.TargetMachine:
    initialize()
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default"
    )


def host_machine() -> llvm.TargetMachine:
    """This process's triple and CPU, no extra features."""
    initialize()
    return create_machine(llvm.get_process_triple(), llvm.get_host_cpu_name(), "")


@functools.cache
def known_cpus(triple: str) -> frozenset[str]:
    """The CPU names LLVM accepts for `triple`.

    LLVM has no API for this list and reacts to an unknown CPU by a warning or
    a fatal error that ends the process, so a child process compiles with
    cpu="help", which makes LLVM print the list.
    """
    result = subprocess.run(
        [sys.executable, "-c", _CPU_HELP_PROBE, triple],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    names = re.findall(r"^  (\S+)\s+- Select the", result.stderr + result.stdout, re.MULTILINE)
    if not names:
        raise TargetError(
            f"could not list the CPUs LLVM knows for {triple}: {result.stderr[-200:]}"
        )
    return frozenset(names)


_CPU_HELP_PROBE = """
import sys
import llvmlite.binding as llvm
import llvmlite.ir as ir
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
module = ir.Module("probe")
module.triple = sys.argv[1]
probe = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "probe")
ir.IRBuilder(probe.append_basic_block()).ret_void()
machine = llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu="help")
machine.emit_assembly(llvm.parse_assembly(str(module)))
"""
