"""The external tools that build artifacts: the C compiler (for this machine or for a
target's architecture, with the flags that select its CPU), the archiver, and running
either with a one-line error.

Environment (read in `find_compiler`, `runtime_compiler` and `find_archiver` only):
`$CC_<arch>` (`CC_aarch64`, `CC_x86_64`) is the C compiler that builds the runtime for
that architecture; without it, `$CC` (else cc, gcc, clang) serves this machine's
architecture and `<arch>-linux-gnu-gcc` on PATH any other.  `$AR` (else ar, llvm-ar) is
the archiver.
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..errors import ToolError
from .specs import Target

_COMPILERS = ("cc", "gcc", "clang")
_ARCHIVERS = ("ar", "llvm-ar")

# machine names (uname -m) -> the architecture names of triples
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def find_compiler(cc: str | Sequence[str] | None = None) -> list[str]:
    """The C compiler as an argv prefix: `cc` if given, else $CC, else cc, gcc or clang."""
    if cc is None:
        cc = os.environ.get("CC") or None
        origin = "$CC"
    else:
        origin = "the cc argument"
    if cc is None:
        for candidate in _COMPILERS:
            found = shutil.which(candidate)
            if found:
                return [found]
        raise ToolError(
            "no C compiler found (looked for $CC, cc, gcc, clang): install one, "
            "e.g. apt-get install gcc"
        )
    return _named_compiler(cc, origin)


def host_arch() -> str:
    """This machine's architecture as triples spell it (x86_64, aarch64...)."""
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


def target_arch(target: Target | str) -> str:
    """The architecture of a target; a bare description string stands for the host."""
    return host_arch() if isinstance(target, str) else target.triple.split("-", 1)[0]


def cross_compiler_name(arch: str) -> str:
    """The Debian/Ubuntu name of the GNU C compiler for `arch` (gcc-<arch>-linux-gnu)."""
    return f"{arch}-linux-gnu-gcc"


def link_command(library: Path, target: Target | str, libs: Sequence[str]) -> str:
    """The one line that links app.c with `library` for `target`: cc for this machine's
    architecture, its cross compiler for another."""
    arch = target_arch(target)
    compiler = "cc" if arch == host_arch() else cross_compiler_name(arch)
    directory = library.parent
    return shlex.join([compiler, "app.c", f"-I{directory}", str(library), *libs])


def runtime_compiler(
    target: Target | str, cc: str | Sequence[str] | None = None
) -> list[str] | None:
    """The C compiler for the runtime of `target` as an argv prefix, target flags included.

    `cc` if given; else `$CC_<arch>`; else, for this machine's architecture, `$CC`, cc,
    gcc or clang, and for another one `<arch>-linux-gnu-gcc` on PATH.  Returns None when
    no compiler for another architecture is found; a named compiler that is missing or
    no compiler at all for this machine is a ToolError.
    """
    arch = target_arch(target)
    override = os.environ.get(f"CC_{arch}")
    if cc is not None:
        compiler = find_compiler(cc)
    elif override:
        compiler = _named_compiler(override, f"$CC_{arch}")
    elif arch == host_arch():
        compiler = find_compiler()
    else:
        found = shutil.which(cross_compiler_name(arch))
        if found is None:
            return None
        compiler = [found]
    flags = tuple(cpu_flags(target))
    return [*compiler, *(flags if _accepts(tuple(compiler), flags) else ())]


def cpu_flags(target: Target | str) -> list[str]:
    """The C compiler flags that select the target's CPU (-march for x86, -mcpu for arm)."""
    if isinstance(target, str):
        return []
    arch = target_arch(target)
    if arch == "x86_64" and target.cpu:
        return [f"-march={target.cpu}"]
    if arch == "aarch64" and target.cpu not in ("", "generic"):
        return [f"-mcpu={target.cpu}"]
    return []


@functools.cache
def _accepts(compiler: tuple[str, ...], flags: tuple[str, ...]) -> bool:
    """Whether the compiler takes these CPU flags.  LLVM knows more CPUs than GCC
    (neoverse-v2 is new in GCC 13); without the flags the runtime is a baseline build for
    the architecture, which is fine: it holds no kernels, only the thread pool."""
    if not flags:
        return True
    argv = [*compiler, *flags, "-x", "c", "-c", "-o", os.devnull, "-"]
    try:
        result = subprocess.run(
            argv,
            input="int aotc_probe;\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def _named_compiler(cc: str | Sequence[str], origin: str) -> list[str]:
    argv = shlex.split(cc) if isinstance(cc, str) else list(cc)
    found = shutil.which(argv[0]) if argv else None
    if not found:
        raise ToolError(f"C compiler '{cc}' (from {origin}) not found: fix or unset it")
    return [found, *argv[1:]]


def find_archiver() -> list[str]:
    """The archiver as an argv prefix: $AR, else ar or llvm-ar."""
    ar = os.environ.get("AR")
    if ar:
        argv = shlex.split(ar)
        found = shutil.which(argv[0]) if argv else None
        if not found:
            raise ToolError(f"archiver '{ar}' (from $AR) not found: fix or unset it")
        return [found, *argv[1:]]
    for candidate in _ARCHIVERS:
        found = shutil.which(candidate)
        if found:
            return [found]
    raise ToolError(
        "no archiver found (looked for $AR, ar, llvm-ar): install one, "
        "e.g. apt-get install binutils"
    )


def run_tool(argv: Sequence[str], what: str, cwd: Path | None = None) -> None:
    try:
        result = subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(f"{what}: could not run {argv[0]}: {e}") from None
    if result.returncode != 0:
        detail = " | ".join((result.stderr or result.stdout).strip().splitlines()[:4])
        raise ToolError(f"{what} failed ({Path(argv[0]).name} exit {result.returncode}): {detail}")
