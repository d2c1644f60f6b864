"""Extents for the arrays that passes after bounded_dims.py made: what the kernels may
clip their loops to.

passes/bounded_dims.py puts on each array over bounded dims its run-time extents
(`Instruction.extents`, ir/extents.py): beyond them the values are padding that no
reader uses, so a kernel may leave them uncomputed.  An instruction that takes
another's place takes its extents (`Computation.replace_all_uses`); the ones that the
simplifier builds anew (a scale moved across a reshape, a dot with a transpose folded
into it) and the constants' readers folding made have none, and would be computed
whole.  This pass gives them the extents their readers need: along a dim, the extent
of the reader's dim that it reads position by position (READS: elementwise ops,
broadcasts, transposes, reshapes keeping the dim, the free and batch dims of a dot, the
kept dims of a reduce); none where a reader sums along the dim, gathers from it, has no
extent there (a mask setting the padding to a reduction's identity reads all of it),
or is an output.  Readers come before operands in the backward walk, so one walk
settles every dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir import Instruction, Module, Op
from ..ir.extents import Extent
from ..ir.shapes import reshape_groups
from ..ir.types import Shape

Extents = tuple[Extent | None, ...]
UNSET = Extent("unset")  # no reader seen yet


@dataclass
class ClipExtents:
    name: str = "clip-extents"

    def run(self, module: Module) -> bool:
        entry = module.entry
        if entry is None or not any(i.extents for i in entry.instructions):
            return False
        outputs = _outputs(entry.root)
        changed = False
        for instr in reversed(entry.instructions):  # readers first
            if instr.extents is not None or instr.op in (Op.PARAMETER, Op.CONSTANT):
                continue
            if not isinstance(instr.shape, Shape) or id(instr) in outputs:
                continue
            found = _demanded(instr, instr.users)
            if any(e is not None for e in found):
                instr.extents = found
                changed = True
        return changed


def _outputs(root: Instruction | None) -> set[int]:
    if root is None:
        return set()
    return {id(o) for o in root.operands} if root.op is Op.TUPLE else {id(root)}


def _demanded(instr: Instruction, readers: list[Instruction]) -> Extents:
    """Per dim, how far `instr`'s readers read it (None: all of it)."""
    rank = instr.array_shape.rank
    found: list[Extent | None] = [UNSET] * rank if readers else [None] * rank
    for reader in readers:
        rule = READS.get(reader.op)
        for k, operand in enumerate(reader.operands):
            if operand is not instr:
                continue
            for d in range(rank):
                mapped = rule(reader, k, d) if rule is not None else None
                extent = None
                if mapped is not None and reader.extents is not None:
                    extent = reader.extents[mapped]
                found[d] = _farther(found[d], extent)
    return tuple(found)


def _farther(a: Extent | None, b: Extent | None) -> Extent | None:
    """The extent covering both (None: the whole dim)."""
    if a is UNSET or a == b:
        return b
    if a is None or b is None:
        return None
    return Extent("maximum", 0, (a, b))


def _dot_sources(instr: Instruction) -> list[tuple[int, int]]:
    """(operand, dim) of each result dim of a dot: batch, then lhs free, then rhs free."""
    d = instr.dot
    assert d is not None
    lhs, rhs = (o.array_shape.rank for o in instr.operands)
    sources = [(0, a) for a in d.lhs_batch]
    sources += [(0, i) for i in range(lhs) if i not in d.lhs_batch + d.lhs_contracting]
    sources += [(1, i) for i in range(rhs) if i not in d.rhs_batch + d.rhs_contracting]
    return sources


def _reduce_kept(instr: Instruction) -> list[int]:
    assert instr.dimensions is not None
    rank = instr.operands[0].array_shape.rank
    return [d for d in range(rank) if d not in instr.dimensions]


def reshape_kept(in_dims, out_dims) -> dict[int, int]:
    """{operand dim: result dim} for the dims a reshape keeps whole (alone in their run,
    beside unit dims only), whose index is then the same on both sides."""
    kept = {}
    for ins, outs in reshape_groups(in_dims, out_dims):
        big_in = [i for i in ins if in_dims[i] != 1]
        big_out = [j for j in outs if out_dims[j] != 1]
        if len(big_in) == 1 and len(big_out) == 1:
            kept[big_in[0]] = big_out[0]
    return kept


# -- backward: which of its dims a reader reads an operand's dim into ------------------------


def _reads_same(reader: Instruction, k: int, dim: int) -> int | None:
    x = reader.operands[k]
    return dim if x.array_shape.dims == reader.array_shape.dims else None


def _reads_broadcast(reader: Instruction, k: int, dim: int) -> int | None:
    assert reader.dimensions is not None
    target = reader.dimensions[dim]
    same = reader.operands[0].array_shape.dims[dim] == reader.array_shape.dims[target]
    return target if same else None


def _reads_transpose(reader: Instruction, k: int, dim: int) -> int | None:
    assert reader.dimensions is not None
    return reader.dimensions.index(dim)


def _reads_reshape(reader: Instruction, k: int, dim: int) -> int | None:
    dims = reader.operands[0].array_shape.dims
    return reshape_kept(dims, reader.array_shape.dims).get(dim)


def _reads_dot(reader: Instruction, k: int, dim: int) -> int | None:
    if reader.operands[0] is reader.operands[1]:  # the dim may be contracted on one side
        return None
    d = reader.dot
    assert d is not None
    for r, (side, i) in enumerate(_dot_sources(reader)):
        if side == k and i == dim:
            return r
    if k == 1 and dim in d.rhs_batch:
        return d.rhs_batch.index(dim)
    return None  # contracted: the dot sums along it


def _reads_reduce(reader: Instruction, k: int, dim: int) -> int | None:
    if len(reader.operands) != 2 or k != 0:
        return None
    kept = _reduce_kept(reader)
    return kept.index(dim) if dim in kept else None


READS: dict[Op, Callable[[Instruction, int, int], int | None]] = {
    **{op: _reads_same for op in Op if op.is_elementwise},
    Op.SELECT: _reads_same,
    Op.CLAMP: _reads_same,
    Op.CONVERT: _reads_same,
    Op.COMPARE: _reads_same,
    Op.BROADCAST: _reads_broadcast,
    Op.TRANSPOSE: _reads_transpose,
    Op.RESHAPE: _reads_reshape,
    Op.BITCAST: _reads_reshape,
    Op.DOT: _reads_dot,
    Op.REDUCE: _reads_reduce,
}
