"""Artifacts: the C header (templates/model.h.j2), NAME.o, libNAME.a and the runtime objects.

The only jinja2 user.  Owns the C-facing names of tensors, the external tools that build
archives and shared objects, building the runtime for the model's target (cross compilers
included), and all-or-nothing writing of an output directory.

Environment (read in `find_compiler`, `runtime_compiler` and `find_archiver` only):
`$CC_<arch>` (`CC_aarch64`, `CC_x86_64`) is the C compiler that builds the runtime for
that architecture; without it, `$CC` (else cc, gcc, clang) serves this machine's
architecture and `<arch>-linux-gnu-gcc` on PATH any other.  `$AR` (else ar, llvm-ar) is
the archiver.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import jinja2

from .._version import __version__
from ..errors import AotcError, ToolError
from ..ir import DType, Shape
from ..names import check_c_identifier
from ..resources import resource_dir

# fixed, so that the same sources give byte-identical objects
RUNTIME_CFLAGS = ("-O2", "-fPIC", "-std=c99", "-Wall", "-pthread")
LINK_LIBS = ("-lm", "-lpthread")

_COMPILERS = ("cc", "gcc", "clang")
_ARCHIVERS = ("ar", "llvm-ar")

# machine names (uname -m) -> the architecture names of triples
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}

# Names a tensor's C spelling must avoid: keywords of C (up to C23) and C++, lower-case
# macros and typedefs of common headers (a parameter named `errno` or `linux` would be
# macro-expanded), and the other parameters of NAME_run / NAME_run_generic.  `scratch` also
# keeps NAME_SCRATCH_BYTES from meaning two things.
_RESERVED_WORDS = """
    auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while alignas alignof bool constexpr false nullptr
    static_assert thread_local true typeof typeof_unqual and and_eq asm bitand bitor catch
    char8_t char16_t char32_t class compl concept const_cast co_await co_return co_yield
    consteval constinit decltype delete dynamic_cast explicit export friend mutable
    namespace new noexcept not not_eq operator or or_eq private protected public
    reinterpret_cast requires static_cast template this throw try typeid typename using
    virtual wchar_t xor xor_eq errno stdin stdout stderr linux unix i386 assert offsetof
    size_t ssize_t ptrdiff_t max_align_t int8_t int16_t int32_t int64_t uint8_t uint16_t
    uint32_t uint64_t intptr_t uintptr_t intmax_t uintmax_t scratch inputs outputs
"""
RESERVED_NAMES = frozenset(_RESERVED_WORDS.split())

@dataclass(frozen=True)
class TensorSpec:
    """One input or output of the C API: the model's name, its C spelling and its type."""

    name: str
    c_name: str  # a C identifier; unique among a model's tensors after `unique_specs`
    dtype: DType
    dims: tuple[int, ...]

    @classmethod
    def make(cls, name: str, dtype: DType, dims: Sequence[int]) -> TensorSpec:
        return cls(name, c_identifier(name), dtype, tuple(int(d) for d in dims))

    @property
    def shape(self) -> Shape:
        return Shape(self.dtype, self.dims)

    @property
    def rank(self) -> int:
        return self.shape.rank

    @property
    def size(self) -> int:
        return self.shape.size

    @property
    def nbytes(self) -> int:
        return self.shape.nbytes

    @property
    def c_type(self) -> str:
        return self.dtype.c_type

    @property
    def type_text(self) -> str:
        return f"{self.dtype.text}[{','.join(map(str, self.dims))}]"


@dataclass(frozen=True)
class MemoryStats:
    """The numbers of the memory plan that the header reports."""

    arena_bytes: int
    alignment: int
    lower_bound: int
    naive_total: int
    weight_bytes: int
    kernel_count: int
    workspace_bytes: int = 0  # kernel scratch after the arena (GEMM packing)

    @property
    def scratch_bytes(self) -> int:
        """What NAME_SCRATCH_BYTES says: the arena rounded up to the alignment, then the
        workspace."""
        return -(-self.arena_bytes // self.alignment) * self.alignment + self.workspace_bytes


class Target(Protocol):
    """What artifacts need to know of a code target (backends.cpu.CpuTarget is one)."""

    triple: str
    cpu: str

    def describe(self) -> str: ...


@dataclass(frozen=True)
class ArtifactPaths:
    """What `write_artifacts` wrote.  Without a C compiler for the target, `library` is
    None, the runtime sources lie beside the object, and `finish` is the shell command
    that builds the library from them (`missing` says which compiler was missing)."""

    header: Path
    object: Path
    library: Path | None
    runtime_sources: tuple[Path, ...] = ()
    finish: str = ""
    missing: str = ""


def c_identifier(name: str) -> str:
    """A lower-case C identifier for a tensor name, clear of `RESERVED_NAMES`.

    Lower case keeps parameter names apart from every macro (ours are upper case) and
    makes names that differ only in case collide here, where `unique_specs` resolves
    them, rather than in the upper-case macros.  No `__` anywhere (reserved in C++).
    """
    ident = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "t"
    if ident[0].isdigit() or ident in RESERVED_NAMES:
        ident = f"t_{ident}"
    return ident


def unique_specs(
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The specs with distinct c_names: a repeated c_name gets `_2`, `_3`... (in order)."""
    taken: set[str] = set()
    renamed = []
    for spec in [*inputs, *outputs]:
        c_name = spec.c_name
        suffix = 2
        while c_name in taken:
            c_name = f"{spec.c_name}_{suffix}"
            suffix += 1
        taken.add(c_name)
        renamed.append(spec if c_name == spec.c_name else replace(spec, c_name=c_name))
    return renamed[: len(inputs)], renamed[len(inputs) :]


def check_model_name(name: str) -> None:
    """Raise unless `name` can prefix the model's C symbols and file names."""
    check_c_identifier(name, "model name")
    if name.lower().startswith("aotc_"):
        raise AotcError(f"model name '{name}': the prefix 'aotc_' belongs to the runtime")


# ---------------------------------------------------------------------------- header


def c_string(text: str) -> str:
    """A C string literal for any text: UTF-8 bytes, non-printables and `?` escaped.

    `?` is escaped because `??/` and friends are trigraphs in strict C99; octal escapes
    because a hex escape would swallow the hex digits that follow it.
    """
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\?':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def c_comment(text: str) -> str:
    """Text safe inside a block comment: printable ASCII, no comment delimiters."""
    text = "".join(c if " " <= c < "\x7f" else "?" for c in text)
    text = text.replace("*/", "* /").replace("/*", "/ *")
    while "??" in text:  # trigraphs (`??/` could splice lines)
        text = text.replace("??", "? ?")
    return text


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["c_string"] = c_string
    env.filters["c_comment"] = c_comment
    return env


def render_template(template: str, **values) -> str:
    """Render templates/`template` (for cuda_artifacts.py; c_string and c_comment filters)."""
    return _environment().get_template(template).render(version=__version__, **values)


def render_header(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    stats: MemoryStats,
    target: Target | str,
    source: str,
) -> str:
    """The text of NAME.h.  `source` is shown as given: pass a relative path or a file
    name if the header should not depend on where the model was compiled.  `target` is
    a Target (recorded as NAME_TARGET_TRIPLE / NAME_TARGET_CPU) or just a description."""
    check_model_name(name)
    inputs, outputs = unique_specs(inputs, outputs)
    tensors = [*inputs, *outputs]
    params = [f"const {t.c_type} *{t.c_name}" for t in inputs]
    params += [f"{t.c_type} *{t.c_name}" for t in outputs]
    template = _environment().get_template("model.h.j2")
    return template.render(
            name=name,
            upper=name.upper(),
            version=__version__,
            source=source,
            target=target if isinstance(target, str) else target.describe(),
            triple=None if isinstance(target, str) else target.triple,
            cpu=None if isinstance(target, str) else target.cpu,
            cross_cc=cross_compiler_name(target_arch(target)),
            inputs=inputs,
            outputs=outputs,
            stats=stats,
            scratch_bytes=stats.scratch_bytes,
            params=_wrap_params(f"int {name}_run(", [*params, "void *scratch"]),
            call_args=", ".join([*(t.c_name for t in tensors), "scratch"]),
            width=max((len(t.c_name) for t in tensors), default=0),
            type_width=max((len(t.type_text) for t in tensors), default=0),
            has_16bit_floats=any(t.dtype in (DType.F16, DType.BF16) for t in tensors),
    )


def _wrap_params(opening: str, params: Sequence[str], width: int = 92) -> str:
    """Parameters on one line if the prototype fits in `width`, else one per line."""
    one_line = ", ".join(params)
    if len(opening) + len(one_line) + 2 <= width:
        return one_line
    return "\n    " + ",\n    ".join(params)


def cffi_cdef(name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str:
    """Declarations of NAME_run and NAME_run_generic that cffi can parse."""
    check_model_name(name)
    inputs, outputs = unique_specs(inputs, outputs)
    params = [f"const {t.c_type} *{t.c_name}" for t in inputs]
    params += [f"{t.c_type} *{t.c_name}" for t in outputs]
    return (
        f"int {name}_run({', '.join([*params, 'void *scratch'])});\n"
        f"int {name}_run_generic(void *const *inputs, void *const *outputs, void *scratch);\n"
    )


# the runtime's controls, for one cdef per FFI (declaring them twice is an error in cffi)
RUNTIME_CDEF = "void aotc_set_num_threads(int n);\nint aotc_get_num_threads(void);\n"


# ---------------------------------------------------------------------------- tools


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
            argv, input="int aotc_probe;\n", capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
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


def _run_tool(argv: Sequence[str], what: str, cwd: Path | None = None) -> None:
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


# runtime_c/aotc_cuda.{c,h}: the CUDA models' runtime (cuda_artifacts.py), not the CPU's
CUDA_RUNTIME = "aotc_cuda"


def _runtime_sources() -> list[Path]:
    paths = resource_dir("runtime_c").glob("*.c")
    return sorted(p for p in paths if p.stem != CUDA_RUNTIME)


def _runtime_files() -> list[Path]:
    """The sources and the headers they include: what a user needs to build the runtime."""
    headers = [p for p in resource_dir("runtime_c").glob("*.h") if p.stem != CUDA_RUNTIME]
    return [*_runtime_sources(), *sorted(headers)]


def _missing_compiler_message(arch: str) -> str:
    name = cross_compiler_name(arch)
    return (
        f"no C compiler for {arch} found (looked for $CC_{arch} and {name} on PATH; "
        f"Debian: apt-get install gcc-{arch}-linux-gnu)"
    )


@functools.lru_cache(maxsize=8)
def _runtime_objects(compiler: tuple[str, ...], fingerprint: str) -> tuple[tuple[str, bytes], ...]:
    """(file name, object bytes) of runtime_c/*.c, compiled once per process and compiler.

    Compiled from the source directory with relative names: the object's file symbol
    is then `aotc_runtime.c`, never a temporary path.
    """
    del fingerprint  # part of the cache key only: edited sources are recompiled
    src = resource_dir("runtime_c")
    objects = []
    with tempfile.TemporaryDirectory(prefix="aotc-runtime-") as tmp:
        for source in _runtime_sources():
            obj = Path(tmp) / f"{source.stem}.o"
            argv = [*compiler, *RUNTIME_CFLAGS, "-c", source.name, "-o", str(obj)]
            _run_tool(argv, f"compiling runtime_c/{source.name}", cwd=src)
            objects.append((obj.name, obj.read_bytes()))
    return tuple(objects)


def compile_runtime(
    out_dir: Path, cc: str | Sequence[str] | None = None, target: Target | str = "host"
) -> list[Path]:
    """Compile runtime_c/*.c for `target` (default: this machine) into `out_dir` (created
    if missing); the object paths, sorted."""
    compiler = runtime_compiler(target, cc)
    if compiler is None:
        raise ToolError(_missing_compiler_message(target_arch(target)))
    compiler = tuple(compiler)
    digest = hashlib.sha256()
    for source in _runtime_files():
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for file_name, data in _runtime_objects(compiler, digest.hexdigest()):
        path = out_dir / file_name
        path.write_bytes(data)
        paths.append(path)
    return paths


def link_shared(object_path: Path, out_path: Path, cc: str | Sequence[str] | None = None) -> Path:
    """Link a model object and the runtime into a shared library (for cffi); `out_path`."""
    compiler = find_compiler(cc)
    with tempfile.TemporaryDirectory(prefix="aotc-link-") as tmp:
        runtime = compile_runtime(Path(tmp), compiler)
        argv = [*compiler, "-shared", "-o", out_path, object_path, *runtime, *LINK_LIBS]
        _run_tool(argv, f"linking {Path(out_path).name}")
    return Path(out_path)


# ---------------------------------------------------------------------------- writing


def write_artifacts(
    out_dir: Path,
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    object_bytes: bytes,
    stats: MemoryStats,
    target: Target | str,
    source: str,
    cc: str | Sequence[str] | None = None,
    cuda=None,
) -> ArtifactPaths:
    """Write NAME.h, NAME.o and libNAME.a (NAME.o + the runtime built for `target`).

    For a model compiled for CUDA (`cuda`: its backends.cuda.CudaProgram, whose host
    object is `object_bytes`), cuda_artifacts.write_cuda_artifacts writes them instead.

    `target` is a Target, or a description for the header of code for this machine.
    Without a C compiler for the target's architecture (a cross compiler, see
    `runtime_compiler`) it writes NAME.h, NAME.o and the runtime sources instead of the
    library and removes a stale libNAME.a; the result says how to finish.  All or
    nothing: everything is built in a temporary directory beside `out_dir` and moved in
    at the end; on failure `out_dir` is as it was (or absent again).  The same arguments
    give byte-identical files.
    """
    if cuda is not None:
        from ..cuda_artifacts import write_cuda_artifacts  # it builds on this module

        return write_cuda_artifacts(out_dir, name, inputs, outputs, cuda, stats, source, cc)
    header = render_header(name, inputs, outputs, stats, target, source)
    compiler = runtime_compiler(target, cc)
    archiver = find_archiver() if compiler is not None else None
    out_dir = Path(out_dir)
    library = f"lib{name}.a"
    files = [f"{name}.h", f"{name}.o"]
    if compiler is not None:
        files.append(library)
    else:
        files += [p.name for p in _runtime_files()]
    with staged_write(out_dir) as stage:
        (stage / files[0]).write_text(header, encoding="utf-8")
        (stage / files[1]).write_bytes(object_bytes)
        if compiler is not None:
            runtime = compile_runtime(stage / "runtime", compiler)
            _check_same_machine(object_bytes, runtime, compiler, target)
            members = [files[1], *(str(p.relative_to(stage)) for p in runtime)]
            # D: zero timestamps, uids and modes, so that archives are reproducible
            _run_tool([*archiver, "rcsD", library, *members], f"archiving {library}", stage)
            _install(stage, out_dir, files)
        else:
            for path in _runtime_files():
                shutil.copyfile(path, stage / path.name)
            _install(stage, out_dir, files, remove=[library])
    if compiler is not None:
        return ArtifactPaths(out_dir / files[0], out_dir / files[1], out_dir / library)
    arch = target_arch(target)
    return ArtifactPaths(
        out_dir / files[0], out_dir / files[1], None,
        runtime_sources=tuple(out_dir / f for f in files[2:]),
        finish=finish_command(out_dir, name, target),
        missing=_missing_compiler_message(arch),
    )  # fmt: skip


def finish_command(out_dir: Path, name: str, target: Target | str) -> str:
    """The shell command that builds libNAME.a in `out_dir` from NAME.o and the runtime
    sources there (written when no C compiler for the target was found)."""
    compiler = [cross_compiler_name(target_arch(target)), *RUNTIME_CFLAGS, *cpu_flags(target)]
    steps = [f"cd {shlex.quote(str(out_dir))}"]
    objects = []
    for source in _runtime_sources():
        obj = f"{source.stem}.o"
        steps.append(shlex.join([*compiler, "-c", source.name, "-o", obj]))
        objects.append(obj)
    steps.append(shlex.join(["ar", "rcs", f"lib{name}.a", f"{name}.o", *objects]))
    return " && ".join(steps)


# ELF e_machine values of the architectures aotc targets
_ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


def _elf_machine(data: bytes) -> str:
    code = int.from_bytes(data[18:20], "little") if data[:4] == b"\x7fELF" else -1
    return _ELF_MACHINES.get(code, f"machine {code}")


def _check_same_machine(object_bytes: bytes, runtime: list[Path], compiler, target):
    """Refuse a library whose runtime was built for another architecture than the model."""
    model_arch = _elf_machine(object_bytes)
    for path in runtime:
        runtime_arch = _elf_machine(path.read_bytes()[:20])
        if runtime_arch != model_arch:
            description = target if isinstance(target, str) else target.describe()
            raise ToolError(
                f"the C compiler '{shlex.join(compiler)}' builds for {runtime_arch} but the model "
                f"is compiled for {model_arch} ({description}): set CC_{model_arch} to a C "
                f"compiler for {model_arch}, e.g. CC_{model_arch}={cross_compiler_name(model_arch)}"
            )


def _make_dirs(path: Path) -> Path | None:
    """mkdir -p; the topmost directory it created (to remove on failure), or None."""
    missing = None
    probe = path
    while not probe.exists():
        missing = probe
        if probe.parent == probe:
            break
        probe = probe.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AotcError(f"cannot create {path}: {e.strerror or e}") from None
    return missing


@contextlib.contextmanager
def staged_write(out_dir: Path) -> Iterator[Path]:
    """All or nothing: yields a staging directory beside `out_dir` (created if missing)
    whose files the caller installs at the end (`_install`); on any failure `out_dir` is
    as it was, or absent again, and an OSError becomes one line."""
    created = _make_dirs(out_dir)
    done = False
    try:
        with _staging_dir(out_dir) as stage:
            yield stage
        done = True
    except OSError as e:
        raise AotcError(f"cannot write artifacts to {out_dir}: {e.strerror or e}") from None
    finally:
        if not done and created is not None:
            shutil.rmtree(created, ignore_errors=True)


def _staging_dir(out_dir: Path) -> tempfile.TemporaryDirectory:
    """A temporary directory beside `out_dir` (same file system: moves are renames)."""
    prefix = f".{out_dir.resolve().name or 'out'}.aotc-"
    try:
        return _PathTempDir(prefix=prefix, dir=out_dir.resolve().parent)
    except OSError:  # parent not writable: stage inside out_dir itself
        return _PathTempDir(prefix=".aotc-", dir=out_dir)


class _PathTempDir(tempfile.TemporaryDirectory):
    def __enter__(self) -> Path:
        return Path(self.name)


def _install(stage: Path, out_dir: Path, files: Sequence[str], remove: Sequence[str] = ()) -> None:
    """Move staged files into out_dir and take the `remove` ones out of it; on failure put
    back what was there before."""
    backup = stage / "previous"
    backup.mkdir()
    moved: list[tuple[Path, Path | None]] = []
    try:
        for file_name in [*remove, *files]:
            target = out_dir / file_name
            previous = None
            if target.exists() or target.is_symlink():
                previous = backup / file_name
                os.replace(target, previous)
            moved.append((target, previous))
            if file_name in files:
                os.replace(stage / file_name, target)
    except OSError:
        for target, previous in reversed(moved):
            if previous is not None:
                os.replace(previous, target)
            else:
                target.unlink(missing_ok=True)
        raise


def render_memory_plan_svg(title: str, plan, width: int = 1000, height: int = 600) -> str:
    """The plan as SVG: time across, arena offset down, one labelled rectangle per buffer."""
    steps = max(len(plan.schedule), 1)
    arena = max(plan.arena_bytes, 1)
    rects = []
    for n, b in enumerate(plan.buffers):
        label = b.name + ("" if not b.shape_index else str(list(b.shape_index)))
        rects.append({
            "x": width * b.start / steps, "w": width * (b.end + 1 - b.start) / steps,
            "y": height * b.slice.offset / arena, "h": max(height * b.slice.size / arena, 0.5),
            "label": label, "hue": (n * 47) % 360, "start": b.start, "end": b.end,
            "begin": b.slice.offset, "stop": b.slice.offset + b.slice.size,
        })  # fmt: skip
    return _environment().get_template("memory_plan.svg.j2").render(
        title=title, rects=rects, width=width, height=height, margin=20, steps=steps,
        arena=plan.arena_bytes, lower=plan.lower_bound, naive=plan.naive_total,
    )  # fmt: skip
