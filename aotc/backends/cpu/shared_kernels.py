"""Kernels shared by the instructions that compile to the same code.

A transformer's blocks repeat: their kernels differ only in where their buffers lie, and
compiling each copy is most of a long graph's compile time (LLVM's -O3 and code
generation, kernel by kernel).  So a kernel reaches its arena and weights slices through
its frame: a table of byte offsets, one per slice, that the caller passes (the kernel
argument `frame`, a constant global per call).  Two kernels whose functions come out as
the same text, their own names and the numbering of their metadata aside, are the same
code; the later one is dropped and its call made to the earlier with its own frame.

The text decides, not a key computed beforehand: anything the plan or the instruction
makes different in the code (an alignment, an operand read in place, a workspace's size,
a constant's value) is in the text, and keeps the two apart.  A kernel with a variable
of its own (the counter of a random stream) is never shared: its state is per kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice

from llvmlite import ir

from ...buffers import BufferKind, Slice
from ..llvm.lltypes import I64, PTR

# the slices a frame holds: those at an offset into a blob every call shares
FRAMED = (BufferKind.ARENA, BufferKind.CONSTANT)
_METADATA_REFERENCE = re.compile(r"!(\d+)\b")


@dataclass(frozen=True)
class Kernel:
    """One scheduled instruction's kernel call: the function and the frame it is
    called with, and the instruction's name (what profiles and listings show)."""

    function: ir.Function
    frame: ir.Value
    name: str

    def call(self, b: ir.IRBuilder, pointers) -> None:
        """Call it from a function whose first arguments are (inputs, outputs, arena)."""
        b.call(self.function, [*pointers[:3], self.frame])


class Frame:
    """The slots of the kernel being emitted, in the order its code asks for them."""

    def __init__(self) -> None:
        self.slots: dict[tuple[BufferKind, int, int], int] = {}

    def slot(self, where: Slice) -> int:
        return self.slots.setdefault((where.kind, where.index, where.offset), len(self.slots))

    def table(self, module: ir.Module, name: str) -> ir.Value:
        """The constant table of the offsets (NULL for a kernel with none)."""
        if not self.slots:
            return ir.Constant(PTR, None)
        offsets = [ir.Constant(I64, offset) for _, _, offset in self.slots]
        table = ir.GlobalVariable(module, ir.ArrayType(I64, len(offsets)), f"{name}.frame")
        table.linkage, table.global_constant = "private", True
        table.initializer = ir.Constant(table.value_type, offsets)
        return table


class SharedKernels:
    """The kernels of a module by their text, to find a new kernel's twin."""

    def __init__(self, module: ir.Module) -> None:
        self.module = module
        self.by_text: dict[str, ir.Function] = {}

    def mark(self) -> int:
        """Where the globals a kernel is about to define start."""
        return len(self.module.globals)

    def share(self, function: ir.Function, mark: int) -> ir.Function:
        """`function` (defined with what it calls of its own since `mark`), or the
        earlier kernel of the same text, `function`'s own definitions then removed."""
        own = _own_globals(self.module, function.name, mark)
        if any(isinstance(v, ir.GlobalVariable) and not v.global_constant for v in own):
            return function  # state of its own (a random stream's counter): never shared
        text = _normalized_text(self.module, function.name, own)
        twin = self.by_text.setdefault(text, function)
        if twin is not function:
            for value in own:
                del self.module.globals[value.name]
        return twin


def _own_globals(module: ir.Module, name: str, mark: int) -> list[ir.GlobalValue]:
    """The globals defined since `mark` under the kernel's name (its outlined bodies);
    helpers that other kernels share (GEMM micro-kernels) are named otherwise."""
    # from the end: the kernel's own are the newest (a walk from `mark` would start at
    # the first global, and the module holds thousands)
    newest = islice(reversed(module.globals.values()), len(module.globals) - mark)
    return [v for v in reversed(list(newest)) if v.name == name or v.name.startswith(f"{name}.")]


def _normalized_text(module: ir.Module, name: str, own: list[ir.GlobalValue]) -> str:
    """The text of `own` with the kernel's name replaced and its metadata references
    renumbered in order of first use, the nodes' own text appended."""
    own_name = re.compile(re.escape(name) + r'(?=[".])')
    text = own_name.sub("@kernel", "\n".join(str(v) for v in own))
    numbers: dict[str, str] = {}
    nodes: list[str] = []

    def renumber(match: re.Match) -> str:
        number = match.group(1)
        if number not in numbers:
            numbers[number] = f"!m{len(numbers)}"
            node = str(module.metadata[int(number)]).split("=", 1)[1]
            nodes.append(own_name.sub("@kernel", node))
        return numbers[number]

    body = _METADATA_REFERENCE.sub(renumber, text)
    done = 0
    while done < len(nodes):  # the nodes' references, in turn renumbered
        nodes[done] = _METADATA_REFERENCE.sub(renumber, nodes[done])
        done += 1
    return "\n".join([body, *nodes])
