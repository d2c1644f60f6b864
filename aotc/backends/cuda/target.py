"""CUDA targets: `--target cuda:sm_80,sm_90` -> `CudaTarget`.

A spec names one or more GPU architectures; the kernels are compiled for each
(one cubin per architecture) and the PTX of the newest is embedded too, for
GPUs newer than all of them.  The host side (launcher, blobs, weights) is built
for this machine.  `+tf32` lets f32 contractions run on tensor cores in TF32 (10-bit
mantissas in the products; off by default, as in PyTorch and cuBLAS).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import llvmlite.binding as llvm

from ...errors import AotcError
from ..llvm.machine import known_cpus  # asks LLVM in a child process, once per triple

PREFIX = "cuda:"
NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
# oldest architecture we generate for: Ampere (ptxas of CUDA 13 has dropped the ones
# before Turing; the kernels assume sm_80's NaN-propagating max/min and 48 KiB of shared
# memory per block)
MIN_ARCH = 80
_ARCH = re.compile(r"sm_(\d{2,3})a?\Z")
# +option -> what it does
OPTIONS = {"tf32": "f32 contractions on TF32 tensor cores"}


class CudaTargetError(AotcError):
    """A `--target cuda:...` that names no architecture aotc can compile for."""


@dataclass(frozen=True)
class CudaTarget:
    """GPU architectures (`sm_90`...), oldest first."""

    archs: tuple[str, ...]
    tf32: bool = False  # f32 dot/convolution on TF32 tensor cores (`+tf32`)

    @property
    def triple(self) -> str:
        """The host triple: what the launcher and the blob object are built for."""
        return llvm.get_process_triple()

    @property
    def cpu(self) -> str:
        return ""

    @property
    def newest(self) -> str:
        """The architecture whose PTX is embedded as the fallback for newer GPUs: the
        newest one without the `a` suffix (sm_90a PTX runs on sm_90 only), if any."""
        portable = [a for a in self.archs if not a.endswith("a")]
        return (portable or self.archs)[-1]

    @property
    def has_fma(self) -> bool:
        """Every NVIDIA GPU has a fused multiply-add (the elemental math asks)."""
        return True

    @property
    def has_vector_ldexp(self) -> bool:
        """Scaling by 2^n stays integer arithmetic on the exponent bits (NVPTX has no
        ldexp instruction)."""
        return False

    def describe(self) -> str:
        tf32 = ", TF32 tensor cores" if self.tf32 else ""
        return f"CUDA {', '.join(self.archs)} (+PTX {self.newest}){tf32}, host {self.triple}"

    __str__ = describe


def is_cuda_target(spec: str | None) -> bool:
    return bool(spec) and spec.strip().startswith(PREFIX)


def arch_number(arch: str) -> int:
    """`sm_90` -> 90, `sm_90a` -> 90 (the compute capability times ten)."""
    return int(_ARCH.match(arch).group(1))


def parse_cuda_target(spec: str) -> CudaTarget:
    """`cuda:sm_80,sm_90` -> CudaTarget; one-line error otherwise."""
    body = spec.strip()[len(PREFIX) :]
    body, *options = body.split("+")
    for option in options:
        if option not in OPTIONS:
            known = ", ".join(f"+{o} ({what})" for o, what in OPTIONS.items())
            raise CudaTargetError(
                f"unknown target '{spec}': unknown option '+{option}' (known: {known})"
            )
    archs = [a.strip() for a in body.split(",") if a.strip()]
    if not archs:
        raise CudaTargetError(f"unknown target '{spec}': name architectures, e.g. cuda:sm_90")
    for arch in archs:
        match = _ARCH.match(arch)
        if match is None:
            raise CudaTargetError(
                f"unknown target '{spec}': '{arch}' is not a GPU architecture like sm_90"
            )
        if int(match.group(1)) < MIN_ARCH:
            raise CudaTargetError(
                f"unsupported target '{spec}': {arch} is older than sm_{MIN_ARCH} (Ampere)"
            )
    known = known_archs()
    for arch in archs:
        if arch not in known:
            raise CudaTargetError(
                f"unknown target '{spec}': LLVM {llvm.llvm_version_info[0]} cannot generate "
                f"code for {arch} (it knows {', '.join(sorted(known, key=arch_number))})"
            )
    unique = sorted(set(archs), key=lambda a: (arch_number(a), a))
    return CudaTarget(tuple(unique), tf32="tf32" in options)


def known_archs() -> frozenset[str]:
    """The sm_XX names LLVM's NVPTX back end knows (sm_80 and later)."""
    return frozenset(
        c for c in known_cpus(NVPTX_TRIPLE) if _ARCH.match(c) and arch_number(c) >= MIN_ARCH
    )
