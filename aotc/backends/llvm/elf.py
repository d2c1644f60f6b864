"""Patching one section of an ELF64 little-endian relocatable object.

The weights are not passed through LLVM: the object is emitted with a
zero-filled placeholder section of the right size, whose bytes are then
overwritten here (and whose SHF_WRITE flag is cleared, since the placeholder
had to be a non-constant global for LLVM not to fold loads from it).  A big blob's
placeholder is empty (NOBITS: LLVM writes no gigabytes of zeros), and `fill_section`
makes it a section holding the bytes, under its final name.
"""

from __future__ import annotations

import struct

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
SHT_PROGBITS = 1
SHT_NOBITS = 8
SHF_WRITE = 0x1
SHN_XINDEX = 0xFFFF

# e_shoff at 0x28; e_shentsize, e_shnum, e_shstrndx at 0x3A
_SHOFF = struct.Struct("<Q")
_SHCOUNTS = struct.Struct("<HHH")
# sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info,
# sh_addralign, sh_entsize
_SECTION = struct.Struct("<IIQQQQIIQQ")
_FLAGS_AT = 8  # byte offset of sh_flags within a section header


class ElfFormatError(ValueError):
    """The bytes are not the kind of object this module can patch."""


def machine(obj: bytes) -> int:
    """e_machine of an ELF object (62 = x86-64, 183 = AArch64)."""
    _check_ident(obj)
    return struct.unpack_from("<H", obj, 0x12)[0]


def section_headers(obj: bytes) -> dict[str, tuple[int, tuple]]:
    """name -> (header offset in the file, unpacked header) for every section."""
    headers, strndx = _headers(obj)
    names_at = headers[strndx][1][4]
    result = {}
    for at, header in headers:
        start = names_at + header[0]
        name = obj[start : obj.index(b"\0", start)].decode()
        result[name] = (at, header)
    return result


def _headers(obj: bytes) -> tuple[list[tuple[int, tuple]], int]:
    """(header offset, unpacked header) of every section, and the section names' index."""
    _check_ident(obj)
    (shoff,) = _SHOFF.unpack_from(obj, 0x28)
    entsize, count, strndx = _SHCOUNTS.unpack_from(obj, 0x3A)
    if entsize != _SECTION.size:
        raise ElfFormatError(f"unexpected section header size {entsize}")
    first = _SECTION.unpack_from(obj, shoff)
    if count == 0:  # more than 0xff00 sections: the count lives in section 0
        count = first[5]
    if strndx == SHN_XINDEX:
        strndx = first[6]
    offsets = [shoff + i * entsize for i in range(count)]
    return [(at, _SECTION.unpack_from(obj, at)) for at in offsets], strndx


def patch_section(obj: bytes, name: str, data: bytes) -> bytes:
    """A copy of `obj` with section `name`'s contents replaced by `data`, made read-only.

    The section must already have exactly `len(data)` bytes of file contents.
    """
    found = section_headers(obj).get(name)
    if found is None:
        raise ElfFormatError(f"object has no section {name}")
    header_at, header = found
    sh_type, flags, offset, size = header[1], header[2], header[4], header[5]
    if sh_type != SHT_PROGBITS or size != len(data):
        raise ElfFormatError(
            f"section {name} is type {sh_type} with {size} bytes; "
            f"expected PROGBITS with {len(data)} bytes"
        )
    patched = bytearray(obj)
    patched[offset : offset + size] = data
    struct.pack_into("<Q", patched, header_at + _FLAGS_AT, flags & ~SHF_WRITE)
    return bytes(patched)


def fill_section(obj: bytes, name: str, size: int, new_name: str) -> bytes:
    """The start of a copy of `obj` whose empty (NOBITS) section `name`, of `size` bytes,
    is the read-only section `new_name` holding the `size` bytes that follow it.

    The section names (the old ones, then `new_name`) and the bytes are appended to the
    file, so that nothing else moves and the data need not be joined to the object.
    """
    found = section_headers(obj).get(name)
    if found is None:
        raise ElfFormatError(f"object has no section {name}")
    header_at, header = found
    if header[1] != SHT_NOBITS or header[5] != size:
        raise ElfFormatError(
            f"section {name} is type {header[1]} with {header[5]} bytes; "
            f"expected NOBITS with {size} bytes"
        )
    headers, strndx = _headers(obj)
    names_header_at, names_header = headers[strndx]
    old_names = obj[names_header[4] : names_header[4] + names_header[5]]
    names = old_names + new_name.encode() + b"\0"
    names_offset = len(obj)
    padding = -(names_offset + len(names)) % max(header[8], 1)
    data_offset = names_offset + len(names) + padding
    patched = bytearray(obj)
    _SECTION.pack_into(patched, names_header_at, *_with(names_header, 4, names_offset, len(names)))
    blob = _with(header, 0, len(old_names), SHT_PROGBITS, header[2] & ~SHF_WRITE)
    _SECTION.pack_into(patched, header_at, *_with(blob, 4, data_offset))
    return b"".join([patched, names, b"\0" * padding])


def _with(header: tuple, first: int, *values) -> tuple:
    """`header` with its fields from index `first` on replaced by `values`."""
    return (*header[:first], *values, *header[first + len(values) :])


def _check_ident(obj: bytes) -> None:
    if obj[:4] != ELF_MAGIC or obj[4] != ELFCLASS64 or obj[5] != ELFDATA2LSB:
        raise ElfFormatError("not a little-endian ELF64 object")
