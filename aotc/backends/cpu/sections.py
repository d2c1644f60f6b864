"""Where NAME.o keeps its two big blobs, the static arena and the weights.

The code is compiled for the small code model: a program's code reaches its data with
32-bit PC-relative offsets (x86-64: +-2 GiB; AArch64's ADRP: +-4 GiB).  The kernels reach
both blobs through the GOT (64-bit addresses), but a blob of gigabytes in .bss or
.rodata pushes whatever data the linker puts after it (the C runtime's .bss, the
program's) out of reach: "relocation truncated to fit".  So a blob of LARGE_BLOB_BYTES or
more is placed where the linker puts it after all other data, by the row of PLACEMENTS of
the target's architecture; smaller ones stay in .bss and .rodata, as they always were
(a model under the threshold compiles to the same object bytes):

- x86-64 has large data sections for this (SHF_X86_64_LARGE, LLVM's `code_model "large"`
  on a global): the arena goes in .lbss and the weights in .lrodata.NAME_weights, which
  GNU ld places after .bss (lld away from the small sections too).
- AArch64 has none: the arena is a COMMON symbol, which ld places at the end of .bss,
  after every object's own .bss; the weights stay in .rodata, between the code and the
  GOT, so only weights that leave the GOT within ADRP's reach are accepted.

A big weights blob is emitted by LLVM as an empty (NOBITS) placeholder section, which
elf.py's `fill_section` turns into the read-only section holding the bytes: LLVM never
writes gigabytes of zeros (llvmlite cannot even return an object over 2 GiB).  Sizes
past the architecture's virtual address space are refused before any code is built.
External weights (`--weights external`) take no section at all (program.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...errors import UnsupportedError
from ...memory_limits import format_size
from ..llvm.lltypes import I8

# the blob size from which a blob is placed after all other data; far below the 2 GiB
# that small-model code reaches, so that two blobs under it leave room for the program
LARGE_BLOB_BYTES = 2**28


@dataclass(frozen=True)
class Placement:
    """How one architecture's objects hold a big arena and big weights."""

    arena_linkage: str  # LLVM linkage of a big static arena ("" = a definition)
    arena_words: str  # where a big static arena ends up, as the header says it
    large_globals: bool  # big blobs get LLVM's code_model "large" (large data sections)
    weights_section: str  # the section big weights end up in ({name}: the model's)
    weights_limit: int  # most weight bytes the code still reaches past them
    address_bits: int  # user virtual address space (Linux's default)


LARGE_DATA = "a large data section, linked after .bss"
PLACEMENTS = {
    "x86_64": Placement("", f".lbss ({LARGE_DATA})", True, ".lrodata.{name}_weights", 2**47, 47),
    # ADRP's 4 GiB, less 1 GiB for the program's code and other data before the GOT
    "aarch64": Placement(
        "common",
        "a COMMON symbol (linked at the end of .bss)",
        False,
        ".rodata.{name}_weights",
        3 * 2**30,
        48,
    ),
}

# the placeholder of big weights: a .bss name makes LLVM emit it empty (NOBITS)
WEIGHTS_PLACEHOLDER = ".bss.{name}_weights"
SMALL_WEIGHTS_SECTION = ".rodata.{name}_weights"


class LargeGlobalVariable(ir.GlobalVariable):
    """A global that LLVM places in a large data section (`code_model "large"`, which
    llvmlite cannot write), reached by 64-bit addresses."""

    def descr(self, buf):
        super().descr(buf)
        assert buf[-1] == "\n" and not self.metadata
        buf[-1] = ', code_model "large"\n'


def is_large(size: int) -> bool:
    return size >= LARGE_BLOB_BYTES


def placement(arch: str) -> Placement:
    return PLACEMENTS[arch]


def blob_global(llmod: ir.Module, arch: str, name: str, size: int) -> ir.GlobalVariable:
    """A zero-initialized byte array; a large one as the architecture's row says."""
    large = is_large(size) and placement(arch).large_globals
    kind = LargeGlobalVariable if large else ir.GlobalVariable
    return kind(llmod, ir.ArrayType(I8, size), name)


def arena_linkage(arch: str, size: int) -> str:
    """The LLVM linkage of a static arena of `size` bytes ("" = a plain definition)."""
    return placement(arch).arena_linkage if is_large(size) else ""


def weights_sections(arch: str, name: str, size: int) -> tuple[str, str]:
    """(the section LLVM emits the weights placeholder in, the section they end in)."""
    if not is_large(size):
        small = SMALL_WEIGHTS_SECTION.format(name=name)
        return small, small
    final = placement(arch).weights_section.format(name=name)
    return WEIGHTS_PLACEHOLDER.format(name=name), final


def big_sections(arch: str, name: str, scratch_bytes: int, weight_bytes: int) -> tuple[str, str]:
    """Where a big static arena and big weights are, in words for the header; "" for a
    blob where small ones are (.bss, .rodata)."""
    row = placement(arch)
    arena = row.arena_words if is_large(scratch_bytes) else ""
    weights = ""
    if is_large(weight_bytes) and row.large_globals:
        weights = f"{row.weights_section.format(name=name)} ({LARGE_DATA})"
    return arena, weights


def check_blobs(arch: str, scratch_bytes: int, weight_bytes: int) -> None:
    """Refuse, in one line, blobs the target's programs cannot hold."""
    row = placement(arch)
    space = 2**row.address_bits
    if scratch_bytes + weight_bytes > space:
        raise UnsupportedError(
            f"the model needs {scratch_bytes} bytes of scratch and {weight_bytes} bytes of "
            f"weights ({format_size(scratch_bytes + weight_bytes)}), past the "
            f"{format_size(space)} address space of {arch} programs"
        )
    if weight_bytes > row.weights_limit:
        raise UnsupportedError(
            f"the model has {weight_bytes} bytes of weights ({format_size(weight_bytes)}); "
            f"{arch} code reaches at most {format_size(row.weights_limit)} of weights in "
            "its object (the small code model's reach)"
        )
