"""Run-time extents of bounded dims as expressions over the entry's `input_dims`.

passes/bounded_dims.py computes each bounded dim's extent as an s32 scalar of the
program; where that scalar reads only `input_dims` and constants, the same value as an
`Extent` goes on the instruction (`Instruction.extents`, one per dim, None for a dim
computed whole), so that a backend can clip the kernel's loops to what the call needs:
beyond its extents an array's values are padding that no reader uses.  An extent that
the data gives (NonZero's count) has no expression: its dim is computed whole.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .module import Instruction
from .ops import Op

INPUT, CONSTANT = "input", "constant"


def _divide(x: int, y: int) -> int:
    """s32 division as the program computes it (truncating toward zero)."""
    quotient = abs(x) // abs(y) if y else 0
    return quotient if (x < 0) == (y < 0) else -quotient


# op name -> its value on two ints; the s32 scalar ops an extent may be made of
BINARY: dict[str, Callable[[int, int], int]] = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "divide": _divide,
    "minimum": min,
    "maximum": max,
}
BINARY_OPS = {Op.ADD: "add", Op.SUBTRACT: "subtract", Op.MULTIPLY: "multiply"}
BINARY_OPS |= {Op.DIVIDE: "divide", Op.MINIMUM: "minimum", Op.MAXIMUM: "maximum"}


@dataclass(frozen=True)
class Extent:
    """`input_dims[value]` (INPUT), the constant `value` (CONSTANT), or a BINARY op of
    `args`."""

    op: str
    value: int = 0
    args: tuple[Extent, ...] = ()

    def evaluate(self, dims: Sequence[int]) -> int:
        """The extent for the call whose `input_dims` are `dims`."""
        values: dict[int, int] = {}
        for node in self.post_order():
            if node.op == INPUT:
                values[id(node)] = int(dims[node.value])
            elif node.op == CONSTANT:
                values[id(node)] = node.value
            else:
                x, y = (values[id(a)] for a in node.args)
                values[id(node)] = BINARY[node.op](x, y)
        return values[id(self)]

    def post_order(self) -> list[Extent]:
        """The nodes, each after its arguments (no recursion: sums of many pieces)."""
        order: list[Extent] = []
        seen: set[int] = set()
        pending: list[tuple[Extent, bool]] = [(self, False)]
        while pending:
            node, expanded = pending.pop()
            if expanded:
                order.append(node)
            elif id(node) not in seen:
                seen.add(id(node))
                pending.append((node, True))
                pending.extend((a, False) for a in reversed(node.args))
        return order

    def __str__(self) -> str:
        text: dict[int, str] = {}
        for node in self.post_order():
            if node.op == INPUT:
                text[id(node)] = f"input_dims[{node.value}]"
            elif node.op == CONSTANT:
                text[id(node)] = str(node.value)
            else:
                text[id(node)] = f"{node.op}({', '.join(text[id(a)] for a in node.args)})"
        return text[id(self)]


def extent_of(scalar: Instruction, input_dims: Instruction | None) -> Extent | None:
    """The expression the s32 scalar `scalar` computes from `input_dims` (the entry's
    parameter) and constants, or None when it reads anything else."""
    found: dict[int, Extent | None] = {}
    pending: list[tuple[Instruction, bool]] = [(scalar, False)]
    while pending:
        instr, expanded = pending.pop()
        if id(instr) in found:
            continue
        element = _input_element(instr, input_dims)
        if element is not None:
            found[id(instr)] = Extent(INPUT, element)
        elif instr.op is Op.CONSTANT and instr.literal is not None and instr.literal.size == 1:
            found[id(instr)] = Extent(CONSTANT, int(instr.literal.reshape(-1)[0]))
        elif instr.op not in BINARY_OPS or instr.array_shape.rank:
            found[id(instr)] = None
        elif not expanded:
            pending.append((instr, True))
            pending.extend((o, False) for o in instr.operands)
        else:
            args = [found[id(o)] for o in instr.operands]
            found[id(instr)] = (
                None
                if any(a is None for a in args)
                else Extent(BINARY_OPS[instr.op], 0, tuple(a for a in args if a is not None))
            )
    return found[id(scalar)]


def _input_element(instr: Instruction, input_dims: Instruction | None) -> int | None:
    """k where `instr` is input_dims[k] as the pass reads it: reshape(slice [k, k+1])."""
    if input_dims is None or instr.op is not Op.RESHAPE or instr.array_shape.rank:
        return None
    piece = instr.operands[0]
    if piece.op is not Op.SLICE or piece.operands[0] is not input_dims or piece.slice is None:
        return None
    return piece.slice.starts[0]
