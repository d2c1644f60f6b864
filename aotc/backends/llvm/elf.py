"""Patching one section of an ELF64 little-endian relocatable object.

The weights are not passed through LLVM: the object is emitted with a
zero-filled placeholder section of the right size, whose bytes are then
overwritten here (and whose SHF_WRITE flag is cleared, since the placeholder
had to be a non-constant global for LLVM not to fold loads from it).
"""

from __future__ import annotations

import struct

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
SHT_PROGBITS = 1
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
    headers = [_SECTION.unpack_from(obj, shoff + i * entsize) for i in range(count)]
    names_at = headers[strndx][4]
    result = {}
    for i, header in enumerate(headers):
        start = names_at + header[0]
        name = obj[start : obj.index(b"\0", start)].decode()
        result[name] = (shoff + i * entsize, header)
    return result


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


def _check_ident(obj: bytes) -> None:
    if obj[:4] != ELF_MAGIC or obj[4] != ELFCLASS64 or obj[5] != ELFDATA2LSB:
        raise ElfFormatError("not a little-endian ELF64 object")
