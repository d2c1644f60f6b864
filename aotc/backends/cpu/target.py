"""Target selection: `--target` strings -> `CpuTarget` -> an LLVM target machine.

A spec is "host" (this machine's triple, CPU and features), a bare architecture
("x86_64", "aarch64"), a triple, each optionally followed by ":CPU" (e.g.
"x86_64:x86-64-v3", "aarch64-linux-gnu:cortex-a72").  Objects are ELF
relocatables, so only 64-bit little-endian ELF targets are accepted.  A target's vector
width and FMA support, which size the kernels' vectors, are asked of LLVM's code
generator, so they hold for every CPU LLVM knows.  NOTABLE_TARGETS is what `aotc
targets` lists.
"""

from __future__ import annotations

import ctypes
import functools
import re
import sys
from dataclasses import dataclass

import llvmlite.binding as llvm

from ..llvm.machine import TargetError, create_machine, initialize, known_cpus

# bare architecture names -> the triple they stand for
ARCH_TRIPLES = {
    "x86_64": "x86_64-unknown-linux-gnu",
    "amd64": "x86_64-unknown-linux-gnu",
    "aarch64": "aarch64-unknown-linux-gnu",
    "arm64": "aarch64-unknown-linux-gnu",
}

# CPU used when a spec names none (baseline ISA of the architecture)
DEFAULT_CPUS = {"x86_64": "x86-64", "aarch64": "generic"}

# the architectures whose ELF64 little-endian objects we can patch and have tested
SUPPORTED_ARCHS = frozenset(DEFAULT_CPUS)

# (architecture, vector bits) -> the vector instruction set kernels get
VECTOR_ISAS = {
    ("x86_64", 128): "SSE",
    ("x86_64", 256): "AVX",
    ("x86_64", 512): "AVX-512",
    ("aarch64", 128): "NEON",
}

# what `aotc targets` lists: spec and what it is for (tests check that each parses)
NOTABLE_TARGETS = (
    ("host", "this machine, with every feature its CPU has"),
    ("x86_64", "any x86-64 CPU (SSE2)"),
    ("x86_64:x86-64-v2", "x86-64 level 2: SSE4.2, POPCNT (Nehalem, Bulldozer and later)"),
    ("x86_64:x86-64-v3", "x86-64 level 3: AVX2, FMA (Haswell, Zen and later)"),
    ("x86_64:x86-64-v4", "x86-64 level 4: AVX-512 (Skylake-SP, Zen 4 and later)"),
    ("aarch64-linux-gnu", "any ARMv8-A CPU (NEON)"),
    ("aarch64-linux-gnu:cortex-a53", "Raspberry Pi 3, little cores of phones"),
    ("aarch64-linux-gnu:cortex-a72", "Raspberry Pi 4, AWS Graviton 1"),
    ("aarch64-linux-gnu:cortex-a76", "Raspberry Pi 5"),
    ("aarch64-linux-gnu:neoverse-n1", "AWS Graviton 2, Ampere Altra"),
    ("aarch64-linux-gnu:neoverse-v1", "AWS Graviton 3 (SVE unused: NEON kernels)"),
    ("aarch64-linux-gnu:neoverse-v2", "AWS Graviton 4, NVIDIA Grace (SVE unused)"),
)


@dataclass(frozen=True)
class CpuTarget:
    """What code is generated for: LLVM triple, CPU name and feature string."""

    triple: str
    cpu: str
    features: str = ""
    # Winograd convolutions allowed (fewer multiply-adds; their sums round apart from the
    # direct ones, some 1e-6 of the outputs' magnitude): what -O2 and up compile
    winograd: bool = True

    @property
    def arch(self) -> str:
        return self.triple.split("-", 1)[0]

    @property
    def vector_bits(self) -> int:
        """Width of the widest float vector registers kernels should use: 128, 256 or 512.

        What LLVM itself uses for a 512-bit vector operation on this CPU and features,
        so it is right for every CPU LLVM knows (AVX without AVX2 still has 256-bit
        float registers; aarch64 is NEON's 128 bits, SVE CPUs included, since kernels
        use fixed-width vectors).
        """
        return _probe(self.triple, self.cpu, self.features).vector_bits

    @property
    def has_fma(self) -> bool:
        """Whether a vector fused multiply-add is one instruction (not a libm call)."""
        return _probe(self.triple, self.cpu, self.features).has_fma

    @property
    def has_vector_ldexp(self) -> bool:
        """Whether a vector `llvm.ldexp` (x * 2^n, rounded once) is one instruction, as
        AVX-512's vscalefps, rather than a libm call per lane."""
        return _probe(self.triple, self.cpu, self.features).has_vector_ldexp

    @property
    def has_pmaddwd(self) -> bool:
        """Whether x86's pmaddwd (16-bit pairs multiplied and summed into 32-bit lanes)
        is one instruction at the full `vector_bits` (AVX-512 needs BW, 256 bits AVX2)."""
        return _probe(self.triple, self.cpu, self.features).has_pmaddwd

    @property
    def byte_dot_signs(self) -> str | None:
        """What the instructions that sum four byte products into each 32-bit lane at
        the full `vector_bits` take: "mixed" (a u8 and an s8 operand), "same" (two s8 or
        two u8 operands) or None (no such instruction).

        "mixed" on x86 where vpdpbusd is there at the vector width (AVX-512 VNNI at 512
        bits, AVX-VNNI at 256), read from the target's features (the host's are all
        listed; a CPU named without them gets none, as a code generator without the
        instruction would fail), and on AArch64 where the CPU has usdot (i8mm); "same"
        on AArch64 CPUs with only sdot and udot (dotprod: Cortex-A55/A76, Neoverse N1,
        Apple M1).  The AArch64 instructions are asked of LLVM's code generator for the
        CPU, as FMA is."""
        if self.arch == "aarch64":
            unit = _probe(self.triple, self.cpu, self.features)
            if unit.has_mixed_byte_dots:
                return "mixed"
            return "same" if unit.has_same_byte_dots else None
        flags = set(self.features.split(","))
        wanted = {512: "+avx512vnni", 256: "+avxvnni"}.get(self.vector_bits)
        return "mixed" if self.arch == "x86_64" and wanted in flags else None

    @property
    def has_byte_dots(self) -> bool:
        """Whether some instruction sums four byte products into each 32-bit lane at the
        full `vector_bits` (`byte_dot_signs` says of which operand types)."""
        return self.byte_dot_signs is not None

    @property
    def has_amx_int8(self) -> bool:
        """Whether x86's AMX tiles and their 8-bit products are there (amx.py): read from
        the features, as `has_byte_dots`; the host lists them only where its kernel
        grants a process the tile state (`_without_refused_tiles`)."""
        flags = set(self.features.split(","))
        return self.arch == "x86_64" and {"+amx-tile", "+amx-int8"} <= flags

    @property
    def vector_isa(self) -> str:
        """The vector instruction set the kernels get, e.g. 'AVX-512', 'SSE', 'NEON'."""
        return VECTOR_ISAS[self.arch, self.vector_bits]

    def describe(self) -> str:
        """One line for headers and logs, e.g. 'x86_64-unknown-linux-gnu (x86-64-v2)'."""
        return f"{self.triple} ({self.cpu or 'generic'})"

    __str__ = describe


def parse_target(spec: str = "host") -> CpuTarget:
    """Parse a `--target` spec; raises TargetError (one line) for unknown ones."""
    initialize()
    spec = (spec or "host").strip()
    if spec == "host":
        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # LLVM cannot read them on some hosts: the CPU name implies them
            features = ""
        features = _without_refused_tiles(features)
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


# Linux's arch_prctl (asm/prctl.h, asm/fpu/xstate.h): the request for AMX's tile data
SYS_ARCH_PRCTL = 158
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
AMX_FEATURES = ("amx-tile", "amx-int8", "amx-bf16", "amx-fp16", "amx-complex")


def _without_refused_tiles(features: str) -> str:
    """The host's features, AMX's marked off (-) where the CPU has them but this
    machine's kernel does not grant the tile state (Linux before 5.16, other systems):
    a tile instruction would fault there."""
    if "+amx-tile" not in features.split(",") or _tiles_granted():
        return features
    off = {f"+{name}" for name in AMX_FEATURES}
    return ",".join(f"-{f[1:]}" if f in off else f for f in features.split(","))


@functools.cache
def _tiles_granted() -> bool:
    """Whether Linux grants this process the tile data state (as the kernels ask it)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


def target_machine(target: CpuTarget) -> llvm.TargetMachine:
    """An -O3, position-independent, small-code-model target machine."""
    features = target.features
    if target.vector_bits == 512:  # LLVM's tuning for these CPUs would vectorize at 256 bits
        features = ",".join(f for f in [features, "-prefer-256-bit"] if f)
    return create_machine(target.triple, target.cpu, features)


@dataclass(frozen=True)
class _VectorUnit:
    vector_bits: int
    has_fma: bool
    has_pmaddwd: bool
    has_vector_ldexp: bool
    has_mixed_byte_dots: bool = False  # AArch64's usdot
    has_same_byte_dots: bool = False  # AArch64's sdot (and udot)


# sums of four byte products per 32-bit lane, in the form LLVM selects as AArch64's
# usdot (zext x sext) where the CPU has i8mm, sdot (sext x sext) where it has dotprod
_BYTE_DOT_PROBE_IR = """
define <4 x i32> @dots(<4 x i32> %acc, <16 x i8> %x, <16 x i8> %y) {{
  %a = {0} <16 x i8> %x to <16 x i32>
  %b = sext <16 x i8> %y to <16 x i32>
  %p = mul <16 x i32> %a, %b
  %r = call <4 x i32> @llvm.vector.partial.reduce.add.v4i32.v16i32(<4 x i32> %acc, <16 x i32> %p)
  ret <4 x i32> %r
}}
declare <4 x i32> @llvm.vector.partial.reduce.add.v4i32.v16i32(<4 x i32>, <16 x i32>)
"""
_USDOT_PROBE_IR = _BYTE_DOT_PROBE_IR.format("zext")
_SDOT_PROBE_IR = _BYTE_DOT_PROBE_IR.format("sext")


# a 512-bit add and a 128-bit fused multiply-add: the registers and instructions LLVM
# picks for them tell the vector width and whether FMA is native on a CPU
_PROBE_IR = """
define void @add(ptr %a, ptr %b) {
  %x = load <16 x float>, ptr %a
  %y = load <16 x float>, ptr %b
  %r = fadd <16 x float> %x, %y
  store <16 x float> %r, ptr %a
  ret void
}
define void @fma(ptr %a, ptr %b, ptr %c) {
  %x = load <4 x float>, ptr %a
  %y = load <4 x float>, ptr %b
  %z = load <4 x float>, ptr %c
  %r = call <4 x float> @llvm.fma.v4f32(<4 x float> %x, <4 x float> %y, <4 x float> %z)
  store <4 x float> %r, ptr %a
  ret void
}
declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)
define <16 x float> @ldexp(<16 x float> %x, <16 x i32> %n) {
  %r = call <16 x float> @llvm.ldexp.v16f32.v16i32(<16 x float> %x, <16 x i32> %n)
  ret <16 x float> %r
}
declare <16 x float> @llvm.ldexp.v16f32.v16i32(<16 x float>, <16 x i32>)
"""


def _pairs_probe(lanes: int) -> str:
    """@pairs: the sums of the products of 16-bit pairs of two <lanes x i32> vectors, in
    the form LLVM selects as pmaddwd where the CPU has it at that width."""
    halves, vector = f"<{2 * lanes} x i16>", f"<{lanes} x i32>"
    lines = [
        f"define {vector} @pairs({vector} %x, {vector} %y) {{",
        f"  %a = bitcast {vector} %x to {halves}",
        f"  %b = bitcast {vector} %y to {halves}",
    ]
    for name in "ab":
        for odd in (0, 1):
            pick = ", ".join(f"i32 {2 * j + odd}" for j in range(lanes))
            shuffle = f"shufflevector {halves} %{name}, {halves} poison, <{lanes} x i32> <{pick}>"
            lines.append(f"  %{name}{odd}s = {shuffle}")
            lines.append(f"  %{name}{odd} = sext <{lanes} x i16> %{name}{odd}s to {vector}")
    lines += [
        f"  %p0 = mul {vector} %a0, %b0",
        f"  %p1 = mul {vector} %a1, %b1",
        f"  %r = add {vector} %p0, %p1",
        f"  ret {vector} %r",
        "}",
    ]
    return "\n".join(lines)


_PAIRS_REGISTERS = {512: "zmm", 256: "ymm", 128: "xmm"}
_FMA_INSTRUCTIONS = re.compile(r"\b(vfmadd\w*|fmla)\b")  # FMA3 and FMA4; NEON


@functools.cache
def _probe(triple: str, cpu: str, features: str) -> _VectorUnit:
    """Ask LLVM's code generator for this CPU (a few milliseconds, once per target)."""
    machine = create_machine(triple, cpu, features)
    module = llvm.parse_assembly(f'target triple = "{triple}"\n{_PROBE_IR}')
    assembly = machine.emit_assembly(module)
    add, _, rest = assembly.partition("fma:")
    fma, _, ldexp = rest.partition("ldexp:")
    bits = 512 if "zmm" in add else 256 if "ymm" in add else 128
    pmaddwd = False
    if triple.startswith("x86_64"):
        module = llvm.parse_assembly(f'target triple = "{triple}"\n{_pairs_probe(bits // 32)}')
        found = re.search(r"pmaddwd\s.*%(\w+)", machine.emit_assembly(module))
        pmaddwd = found is not None and found.group(1).startswith(_PAIRS_REGISTERS[bits])
    usdot = sdot = False
    if triple.startswith("aarch64"):
        usdot = _selects(machine, triple, _USDOT_PROBE_IR, "usdot")
        sdot = _selects(machine, triple, _SDOT_PROBE_IR, "sdot")
    fma_native = bool(_FMA_INSTRUCTIONS.search(fma))
    no_libm = "ldexpf" not in ldexp
    return _VectorUnit(bits, fma_native, pmaddwd, no_libm, usdot, sdot)


def _selects(machine: llvm.TargetMachine, triple: str, ir_text: str, instruction: str) -> bool:
    """Whether LLVM's code generator for the machine makes `instruction` of `ir_text`."""
    module = llvm.parse_assembly(f'target triple = "{triple}"\n{ir_text}')
    return bool(re.search(rf"\b{instruction}\b", machine.emit_assembly(module)))


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
