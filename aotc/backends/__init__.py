"""The backends: code generators behind one protocol, picked by target prefix.

- base.py: the `Backend` protocol and `CompiledCode`, what a backend's compile returns;
- cpu/: LLVM -> ELF objects for x86-64 and AArch64, linked with the C runtime;
- cuda/: NVPTX kernels -> cubins in a host object, run by a generated C launcher;
- llvm/: the target-neutral LLVM layer that both build on.

`BACKENDS` maps a target prefix to its backend (cpu/backend.py, cuda/backend.py);
`backend_for(spec)` picks the one whose prefix is the longest that a `--target` spec
starts with.  The driver asks this table and names no backend.
"""

from __future__ import annotations

from typing import Any

from .base import Backend, CompiledCode
from .cpu.backend import CpuBackend
from .cuda.backend import CudaBackend

BACKENDS: dict[str, Backend[Any]] = {b.prefix: b for b in (CpuBackend(), CudaBackend())}


def backend_for(spec: str | None) -> Backend[Any]:
    """The backend of a `--target` spec (the CPU's, prefix "", takes what no other does)."""
    spec = (spec or "").strip()
    return BACKENDS[max((p for p in BACKENDS if spec.startswith(p)), key=len)]


__all__ = ["BACKENDS", "Backend", "CompiledCode", "backend_for"]
