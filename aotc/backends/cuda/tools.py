"""The NVIDIA tools the CUDA backend needs: ptxas (PTX -> cubin) and libdevice.

Both are looked up here only, in this order (the environment is read here only):

- ptxas: `$AOTC_PTXAS`, `ptxas` on PATH, `$CUDA_HOME/bin` (or `$CUDA_PATH/bin`), the
  `nvidia-cuda-nvcc` wheel (`pip install 'aotc[cuda]'`: nvidia/cuda_nvcc/bin), then
  /usr/local/cuda/bin;
- libdevice (libdevice.10.bc, only for kernels that call its math functions): beside the
  ptxas found (../nvvm/libdevice), `$CUDA_HOME/nvvm/libdevice`, the wheel's
  nvidia/cuda_nvcc/nvvm/libdevice, /usr/local/cuda/nvvm/libdevice.

A missing tool is one line (ToolError) saying how to get it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ...errors import ToolError

LIBDEVICE = "libdevice.10.bc"
_WHEEL_DIR = Path("nvidia") / "cuda_nvcc"
_DEFAULT_CUDA = Path("/usr/local/cuda")
_HOW_TO_GET = "pip install 'aotc[cuda]' (the nvidia-cuda-nvcc wheel) or install a CUDA toolkit"


def _cuda_homes() -> list[Path]:
    return [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]


def _wheel_dirs() -> list[Path]:
    """nvidia/cuda_nvcc folders on sys.path (the wheel installs no importable module)."""
    return [Path(p) / _WHEEL_DIR for p in sys.path if p and (Path(p) / _WHEEL_DIR).is_dir()]


def find_ptxas() -> Path:
    """The ptxas to run, by the search order above; ToolError if there is none."""
    override = os.environ.get("AOTC_PTXAS")
    if override:
        found = shutil.which(override)
        if found is None:
            raise ToolError(f"ptxas '{override}' (from $AOTC_PTXAS) not found: fix or unset it")
        return Path(found)
    on_path = shutil.which("ptxas")
    if on_path:
        return Path(on_path)
    candidates = [h / "bin" / "ptxas" for h in _cuda_homes()]
    candidates += [d / "bin" / "ptxas" for d in _wheel_dirs()]
    candidates.append(_DEFAULT_CUDA / "bin" / "ptxas")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ToolError(
        "ptxas not found (looked for $AOTC_PTXAS, PATH, $CUDA_HOME/bin, the nvidia-cuda-nvcc "
        f"wheel, /usr/local/cuda/bin): {_HOW_TO_GET}"
    )


def find_libdevice() -> Path:
    """libdevice.10.bc, by the search order above; ToolError if there is none."""
    roots = []
    try:
        roots.append(find_ptxas().resolve().parent.parent)
    except ToolError:
        pass
    roots += _cuda_homes() + _wheel_dirs() + [_DEFAULT_CUDA]
    for root in roots:
        candidate = root / "nvvm" / "libdevice" / LIBDEVICE
        if candidate.is_file():
            return candidate
    raise ToolError(
        f"{LIBDEVICE} not found (looked beside ptxas, in $CUDA_HOME/nvvm/libdevice, the "
        f"nvidia-cuda-nvcc wheel and /usr/local/cuda): {_HOW_TO_GET}"
    )


@functools.cache
def libdevice_bitcode() -> bytes:
    return find_libdevice().read_bytes()


def ptxas_version(ptxas: Path) -> str:
    """The release line of `ptxas --version` (e.g. 'release 12.4, V12.4.131')."""
    result = subprocess.run(
        [str(ptxas), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    lines = [line for line in result.stdout.splitlines() if "release" in line]
    return lines[-1].split(",", 1)[-1].strip() if lines else "unknown version"


def assemble(ptx: str, arch: str, what: str) -> bytes:
    """Run ptxas on `ptx` for `arch` (-O3); the cubin.  ToolError with ptxas's first
    lines when it rejects the PTX (`what` names the model in the message)."""
    ptxas = find_ptxas()
    with tempfile.TemporaryDirectory(prefix="aotc-ptxas-") as tmp:
        source, cubin = Path(tmp) / "kernels.ptx", Path(tmp) / "kernels.cubin"
        source.write_text(ptx)
        argv = [str(ptxas), f"-arch={arch}", "-O3", str(source), "-o", str(cubin)]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ToolError(f"{what}: could not run {ptxas}: {e}") from None
        if result.returncode != 0:
            detail = " | ".join((result.stderr or result.stdout).strip().splitlines()[:4])
            raise ToolError(
                f"{what}: ptxas ({ptxas_version(ptxas)}) rejected the PTX for {arch}: {detail}"
            )
        return cubin.read_bytes()
