"""The C-facing description of a model: its tensors (`TensorSpec`), the figures of its
memory plan (`MemoryStats`), what the writers need to know of a code target (`Target`)
and what a write produced (`ArtifactPaths`).

A tensor's C spelling is a lower-case identifier clear of `RESERVED_NAMES`
(`c_identifier`), made distinct among a model's tensors by `unique_specs`; a model's
name must pass `check_model_name`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from ..buffers.heap import align_up
from ..errors import AotcError
from ..ir import DType, Shape
from ..names import check_c_identifier

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
    dims: tuple[int, ...]  # its extents; a bounded dim's bound
    # per dim, whether it is bounded (any extent up to dims[d] at run time, with
    # NAME_run_bounded); () for a static tensor
    bounded: tuple[bool, ...] = ()
    # per dim, a bounded dim's least extent (its range's low end); () for all 0
    lows: tuple[int, ...] = ()
    # what each entry of the last dim stands for (a ZipMap output's classes, a map
    # input's keys); () for none
    labels: tuple[int | str, ...] = ()

    @classmethod
    def make(cls, name: str, dtype: DType, dims: Sequence[int], bounded=()) -> TensorSpec:
        flags = tuple(bool(b) for b in bounded)
        return cls(
            name,
            c_identifier(name),
            dtype,
            tuple(int(d) for d in dims),
            flags if any(flags) else (),
        )

    @property
    def low(self) -> tuple[int, ...]:
        """The least extent of each dim at run time: a bounded one's range's low end."""
        flags = self.bounded or (False,) * self.rank
        lows = self.lows or (0,) * self.rank
        return tuple(low if b else d for d, b, low in zip(self.dims, flags, lows))

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
        return Shape(self.dtype, self.dims, self.bounded).text(layout=False)

    def label_macros(self, word: str) -> list[tuple[str, int]]:
        """(macro suffix, column) per label: <word>_<label as an upper-case identifier>,
        `_2`, `_3`... where two labels spell the same."""
        taken: set[str] = set()
        found = []
        for column, label in enumerate(self.labels):
            text = f"NEG{-label}" if isinstance(label, int) and label < 0 else str(label)
            base = f"{word}_" + (re.sub(r"[^A-Z0-9]+", "_", text.upper()).strip("_") or "X")
            suffix, n = base, 2
            while suffix in taken:
                suffix, n = f"{base}_{n}", n + 1
            taken.add(suffix)
            found.append((suffix, column))
        return found


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
    # where NAME.o holds a big static arena and big weights, placed after all other data
    # ("" = in .bss and .rodata, as small ones)
    arena_section: str = ""
    weights_section: str = ""

    @property
    def scratch_bytes(self) -> int:
        """What NAME_SCRATCH_BYTES says: the arena rounded up to the alignment, then the
        workspace, all rounded up to the alignment (a size C11's aligned_alloc accepts)."""
        arena = align_up(self.arena_bytes, self.alignment)
        return align_up(arena + self.workspace_bytes, self.alignment)


class Target(Protocol):
    """What artifacts need to know of a code target (each backend's target class is one;
    read-only, so that frozen dataclasses and properties both qualify)."""

    @property
    def triple(self) -> str: ...

    @property
    def cpu(self) -> str: ...

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
    link: str = ""  # the command that links an application app.c with the library
    weights: Path | None = None  # NAME.weights, for external weights


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
