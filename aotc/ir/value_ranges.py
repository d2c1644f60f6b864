"""Integer value ranges known at compile time: the least and greatest value each
integer array of a module can hold.

A gather clamps its start indices into the operand; indices known to lie inside it need
no clamp (a tree traversal's node numbers are looked up in tables of node numbers: the
clamps were a third of its kernels' instructions).  Ranges follow values through data
movement, selects and lookups (a gathered value is one of the table's), and into fused
computations through their callers' operands; anything else is unknown.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .module import Computation, Instruction, Module
from .ops import Op
from .types import Shape

Range = tuple[int, int]  # least, greatest

# ops whose values are some of their first operand's
_MOVING_OPS = frozenset(
    {
        Op.BROADCAST,
        Op.RESHAPE,
        Op.BITCAST,
        Op.TRANSPOSE,
        Op.SLICE,
        Op.REVERSE,
        Op.GATHER,
        Op.DYNAMIC_SLICE,
    }
)


def integer_ranges(module: Module) -> dict[int, Range]:
    """id(instruction) -> its range, for the integer arrays of the entry computation and
    of the computations its fusions call whose range is known."""
    ranges: dict[int, Range | None] = {}
    if module.entry is not None:
        _walk(module.entry, {}, ranges)
    return {key: value for key, value in ranges.items() if value is not None}


def _walk(computation: Computation, params: dict[int, Range | None], ranges: dict) -> None:
    """Ranges of `computation`'s values given its parameters' (by number; absent:
    unknown), joined into `ranges` with those of its other calls."""
    for instr in computation.instructions:
        if instr.op is Op.PARAMETER:
            value = params.get(instr.index) if instr.index is not None else None
        elif instr.op is Op.FUSION:  # its root's, given its operands'
            fused = instr.called[0]
            _walk(fused, {n: ranges.get(id(o)) for n, o in enumerate(instr.operands)}, ranges)
            value = ranges.get(id(fused.root))
        else:
            value = _range_of(instr, [ranges.get(id(o)) for o in instr.operands])
        if not _is_int(instr):
            value = None
        key = id(instr)
        ranges[key] = _union([ranges[key], value]) if key in ranges else value


def _is_int(instr: Instruction) -> bool:
    return isinstance(instr.shape, Shape) and instr.shape.dtype.is_int


def _constant(instr: Instruction, operands: list[Range | None]) -> Range | None:
    literal = instr.literal
    if literal is None or not literal.size or not np.issubdtype(literal.dtype, np.integer):
        return None
    return int(literal.min()), int(literal.max())


def _first(instr: Instruction, operands: list[Range | None]) -> Range | None:
    return operands[0] if operands else None


def _union(values: list[Range | None]) -> Range | None:
    if not values or any(v is None for v in values):
        return None
    known = [v for v in values if v is not None]
    return min(v[0] for v in known), max(v[1] for v in known)


def _convert(instr: Instruction, operands: list[Range | None]) -> Range | None:
    """Integers to a type that holds the whole range keep it."""
    value = operands[0]
    if value is None or not instr.array_shape.dtype.is_int:
        return None
    info = np.iinfo(instr.array_shape.dtype.numpy)
    return value if info.min <= value[0] and value[1] <= info.max else None


def _iota(instr: Instruction, operands: list[Range | None]) -> Range | None:
    (dim,) = instr.dimensions or (0,)
    return 0, max(instr.array_shape.dims[dim] - 1, 0)


# op -> its range from its operands' (None: unknown)
RULES: dict[Op, Callable[[Instruction, list[Range | None]], Range | None]] = {
    Op.CONSTANT: _constant,
    Op.IOTA: _iota,
    Op.CONVERT: _convert,
    Op.SELECT: lambda instr, operands: _union(operands[1:]),
    Op.CONCATENATE: lambda instr, operands: _union(operands),
    **dict.fromkeys(_MOVING_OPS, _first),
}


def _range_of(instr: Instruction, operands: list[Range | None]) -> Range | None:
    rule = RULES.get(instr.op)
    return rule(instr, operands) if rule is not None else None
