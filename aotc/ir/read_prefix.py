"""How far along one dim a value's users read it: the prefix a TopK's sort must order.

ONNX TopK (and XLA's topk, frontends/hlo/expansions.py) is a stable sort followed by
slices of the first k positions along the sorted dim.  A sort kernel whose readers all
stop at k needs only those k positions, in order (backends/llvm/sort.py selects them
in one pass over the row instead of sorting it).  The answer is conservative: a reader
that is not a slice (looked at through get-tuple-element and into fusions) reads
everything, and so does a value without users (its computation's root).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .module import Instruction
from .ops import Op
from .types import Shape, TupleShape

Users = dict[int, list[Instruction]]


def read_prefix(value: Instruction, dim: int, instructions: Sequence[Instruction]) -> int:
    """The number of leading positions along `dim` of `value` (of each array, for a
    tuple of equally shaped arrays such as a sort's) that its users among
    `instructions` read: its computation's instructions that the root reaches (a
    schedule), so that the one without users is the root."""
    return _prefix(value, dim, _users(instructions))


def _users(instructions: Sequence[Instruction]) -> Users:
    users: Users = {}
    for instr in instructions:
        for operand in instr.operands:
            users.setdefault(id(operand), []).append(instr)
    return users


def _extent(value: Instruction, dim: int) -> int:
    return _shape_extent(value.shape, dim)


def _shape_extent(shape: Shape | TupleShape, dim: int) -> int:
    if isinstance(shape, Shape):
        return shape.dims[dim]
    return max(_shape_extent(e, dim) for e in shape.elements)


def _prefix(value: Instruction, dim: int, users: Users) -> int:
    readers = users.get(id(value), [])
    if not readers:
        return _extent(value, dim)
    return max(_read_by(reader, value, dim, users) for reader in readers)


def _read_by(reader: Instruction, value: Instruction, dim: int, users: Users) -> int:
    how = READS.get(reader.op)
    return _extent(value, dim) if how is None else how(reader, value, dim, users)


def _slice(reader: Instruction, value: Instruction, dim: int, users: Users) -> int:
    assert reader.slice is not None  # the verifier requires it
    return reader.slice.limits[dim]


def _element(reader: Instruction, value: Instruction, dim: int, users: Users) -> int:
    return _prefix(reader, dim, users)


def _fusion(reader: Instruction, value: Instruction, dim: int, users: Users) -> int:
    """What the fused computation reads of the parameters that `value` binds."""
    fused = reader.called[0]
    inner = _users(fused.post_order())
    parameters = fused.parameters
    bound = [parameters[k] for k, o in enumerate(reader.operands) if o is value]
    return max(_prefix(p, dim, inner) for p in bound)


# readers that may read less than everything; any other op reads the whole value
READS: dict[Op, Callable[[Instruction, Instruction, int, Users], int]] = {
    Op.SLICE: _slice,  # up to its limit (whatever its start and stride)
    Op.GET_TUPLE_ELEMENT: _element,  # as far as the element's own readers
    Op.FUSION: _fusion,  # as far as the fused readers of its parameter
}
