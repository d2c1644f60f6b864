"""Target selection: `--target` strings -> `CpuTarget` -> an LLVM target machine.

A spec is "host" (this machine's triple, CPU and features), a bare architecture
("x86_64", "aarch64"), a triple, each optionally followed by ":CPU" (e.g.
"x86_64:x86-64-v3", "aarch64-linux-gnu:cortex-a72").  Objects are ELF
relocatables, so only 64-bit little-endian ELF targets are accepted.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from dataclasses import dataclass

import llvmlite.binding as llvm

from ...errors import AotcError

# bare architecture names -> the triple they stand for
ARCH_TRIPLES = {
    "x86_64": "x86_64-unknown-linux-gnu",
    "amd64": "x86_64-unknown-linux-gnu",
    "aarch64": "aarch64-unknown-linux-gnu",
    "arm64": "aarch64-unknown-linux-gnu",
}

# CPU used when a spec names none (baseline ISA of the architecture)
DEFAULT_CPUS = {"x86_64": "x86-64", "aarch64": "generic"}

# CPUs (without a feature string) known to have 512- or 256-bit vectors; the
# cross-compilation work refines this from LLVM itself
X86_LEVEL_VECTOR_BITS_512 = frozenset(
    {
        "x86-64-v4",
        "skylake-avx512",
        "cascadelake",
        "icelake-server",
        "sapphirerapids",
        "znver4",
        "znver5",
    }
)
X86_LEVEL_VECTOR_BITS_256 = frozenset(
    {"x86-64-v3", "haswell", "broadwell", "skylake", "znver1", "znver2", "znver3", "alderlake"}
)

# the architectures whose ELF64 little-endian objects we can patch and have tested
SUPPORTED_ARCHS = frozenset(DEFAULT_CPUS)


class TargetError(AotcError):
    """A `--target` that LLVM or aotc cannot generate code for."""


@dataclass(frozen=True)
class CpuTarget:
    """What code is generated for: LLVM triple, CPU name and feature string."""

    triple: str
    cpu: str
    features: str = ""

    @property
    def arch(self) -> str:
        return self.triple.split("-", 1)[0]

    @property
    def vector_bits(self) -> int:
        """Width of the widest float vector registers kernels should use."""
        features = set(self.features.split(","))
        if "+avx512f" in features or self.cpu in X86_LEVEL_VECTOR_BITS_512:
            return 512
        if "+avx2" in features or "+avx" in features or self.cpu in X86_LEVEL_VECTOR_BITS_256:
            return 256
        return 128  # SSE2 (x86-64 baseline), NEON (aarch64)

    @property
    def has_fma(self) -> bool:
        features = set(self.features.split(","))
        return self.arch == "aarch64" or "+fma" in features or self.vector_bits >= 256

    def describe(self) -> str:
        """One line for headers and logs, e.g. 'x86_64-unknown-linux-gnu (x86-64-v2)'."""
        return f"{self.triple} ({self.cpu or 'generic'})"


def parse_target(spec: str = "host") -> CpuTarget:
    """Parse a `--target` spec; raises TargetError (one line) for unknown ones."""
    _initialize()
    spec = (spec or "host").strip()
    if spec == "host":
        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # LLVM cannot read them on some hosts: the CPU name implies them
            features = ""
        target = CpuTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(), features)
        _check_triple(target.triple, spec)
        return target
    triple, _, cpu = spec.partition(":")
    triple = ARCH_TRIPLES.get(triple, triple)
    arch = _check_triple(triple, spec)
    target = CpuTarget(triple, cpu or DEFAULT_CPUS[arch])
    if cpu:
        _check_cpu(target, spec)
    return target


def target_machine(target: CpuTarget) -> llvm.TargetMachine:
    """An -O3, position-independent, small-code-model target machine."""
    _initialize()
    return llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu, features=target.features, opt=3, reloc="pic", codemodel="default"
    )


@functools.cache
def _initialize() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def _check_triple(triple: str, spec: str) -> str:
    try:
        llvm.Target.from_triple(triple)
    except RuntimeError:
        raise TargetError(f"unknown target '{spec}': LLVM knows no triple '{triple}'") from None
    arch = triple.split("-", 1)[0]
    if arch not in SUPPORTED_ARCHS or llvm.get_object_format(triple) != "ELF":
        supported = ", ".join(sorted(SUPPORTED_ARCHS))
        raise TargetError(
            f"unsupported target '{spec}': aotc emits ELF objects for {supported} (Linux)"
        )
    return arch


def _check_cpu(target: CpuTarget, spec: str) -> None:
    if target.cpu not in known_cpus(target.triple):
        raise TargetError(
            f"unknown target '{spec}': LLVM knows no {target.arch} CPU '{target.cpu}'"
        )


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
