"""In-place reuse: an elementwise kernel may write over a dying operand.

A kernel computes output element i from operand elements at index i only
(elementwise ops, and loop fusions whose path from that operand to the root
is elementwise at the output's shape), so its output can take the bytes of
an operand that nobody reads afterwards.  The buffers merge: one set of
logical buffers sharing one slice, alive from the first member's definition
to the last member's last use.
"""

from __future__ import annotations

from ..ir import Instruction, Op, Shape, Trait
from ..ir.index_maps import read_elementwise_only


def reads_at_output_index(instr: Instruction, k: int) -> bool:
    """Does `instr` read operand k only at the index it writes (so it may overwrite it)?"""
    operand = instr.operands[k]
    if not isinstance(instr.shape, Shape) or not isinstance(operand.shape, Shape):
        return False
    if operand.shape.dims != instr.shape.dims or operand.shape.nbytes != instr.shape.nbytes:
        return False
    if Trait.ELEMENTWISE in instr.op.traits:
        return True
    if instr.op is Op.FUSION:
        body = instr.called[0]
        return read_elementwise_only(body.parameters[k], instr.shape.dims)
    return False


class BufferSets:
    """Union-find over logical buffer keys (id(instr), shape_index)."""

    def __init__(self):
        self.parent: dict = {}

    def find(self, key):
        root = key
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        self.parent[key] = root
        return root

    def union(self, keep, other) -> None:
        self.parent[self.find(other)] = self.find(keep)
