"""The memory a compiled model may need, checked before anything is laid out or built.

A model declares its tensors' dims, and a corrupt or hostile one declares 2^40 elements
as easily as 4.  The compiler never allocates a tensor's bytes, so nothing fails while
compiling, but the program it built could never run (and sizes past 2^63 bytes wrap in
its index arithmetic).  So every tensor the module holds (inputs, outputs,
intermediates, weights) and then the memory plan (arena, workspace, weights) must fit
the limit: by default this machine's physical memory; `--max-memory` (or
`CompileOptions.max_memory`) sets another, e.g. for a larger target machine.
"""

from __future__ import annotations

import math
import os
import re

from .errors import AotcError, ShapeError
from .ir import Module, Shape
from .ir.types import AnyShape

# what any limit stays below: byte offsets are i64 in the generated code
HARD_LIMIT = 2**62
# the largest extent or element count: the header's int64_t dims, the code's i64 indices
LARGEST_COUNT = 2**63 - 1
# the limit where the machine's memory cannot be read (not Linux, macOS or the BSDs)
FALLBACK_LIMIT = 2**40
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)


class MemoryLimitError(AotcError):
    """A model whose tensors or memory plan exceed the memory limit."""


def machine_memory() -> int:
    """This machine's physical memory in bytes."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return FALLBACK_LIMIT


def parse_size(text: str) -> int:
    """`24G`, `512M`, `1.5T`, `1000000` (bytes; K/M/G/T are powers of 1024)."""
    match = SIZE.fullmatch(text.strip())
    if match is None:
        raise AotcError(f"--max-memory '{text}': expected a size such as 64G, 512M or 1000000")
    size = int(float(match.group(1)) * UNITS[match.group(2).upper()])
    if not 0 < size <= HARD_LIMIT:
        raise AotcError(
            f"--max-memory '{text}': must be above 0 and at most {format_size(HARD_LIMIT)}"
        )
    return size


def format_size(size: int) -> str:
    """Bytes as a short human-readable size: 23.4 GiB."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = UNITS[unit[0]]
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def check_tensors(module: Module, limit: int) -> None:
    """Refuse a module any of whose tensors (in any computation) needs more than `limit`
    bytes, naming the first and the node it came from."""
    for computation in module.computations:
        for instr in computation.instructions:
            origin = f" (from node '{instr.origin}')" if instr.origin else ""
            check_size(f"tensor '{instr.name}'{origin}", instr.shape, limit)


def check_size(what: str, shape: AnyShape, limit: int = HARD_LIMIT) -> None:
    """Refuse `what`, of type `shape`, where an array of it needs more than `limit` bytes
    (by default what no limit allows), or where an extent or element count is past an
    int64 (an empty array's other dims too)."""
    size = _largest_array(shape)
    if size > limit:
        hint = "--max-memory sets another" if limit < HARD_LIMIT else "past any memory limit"
        raise MemoryLimitError(
            f"{what} of type {shape.text(layout=False)} takes {format_size(size)}, more than "
            f"the memory limit of {format_size(limit)} ({hint})"
        )
    _check_counts(what, shape)


def check_plan(arena_bytes: int, workspace_bytes: int, weight_bytes: int, limit: int) -> None:
    """Refuse a memory plan whose scratch and weights together exceed `limit`."""
    total = arena_bytes + workspace_bytes + weight_bytes
    if total > limit:
        raise MemoryLimitError(
            f"the model needs {format_size(total)} (arena {format_size(arena_bytes)}, "
            f"workspace {format_size(workspace_bytes)}, weights {format_size(weight_bytes)}), "
            f"more than the memory limit of {format_size(limit)} (--max-memory sets another)"
        )


def _check_counts(what: str, shape: AnyShape) -> None:
    for array in _arrays(shape):
        counts = {f"dim {i}": d for i, d in enumerate(array.dims)}
        counts["the element count"] = math.prod(array.dims)
        # an empty array's other dims still make its strides (and numpy's arrays of it)
        counts["the bytes its nonzero dims span"] = (
            math.prod(d for d in array.dims if d) * array.dtype.itemsize
        )
        for name, count in counts.items():
            if count > LARGEST_COUNT:
                raise ShapeError(
                    f"{what} of type {shape.text(layout=False)}: {name} is {count}, past the "
                    f"{LARGEST_COUNT} that an int64 holds"
                )


def _arrays(shape: AnyShape) -> list[Shape]:
    if isinstance(shape, Shape):
        return [shape]
    return [array for element in shape.elements for array in _arrays(element)]


def _largest_array(shape: AnyShape) -> int:
    if isinstance(shape, Shape):
        return shape.nbytes
    return max((_largest_array(element) for element in shape.elements), default=0)
