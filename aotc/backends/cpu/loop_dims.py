"""The dims a loop kernel's nest runs over: its output's, split where a reshape at its
root splits them.

An interleave (the stride phases of a transposed convolution, passes/conv_phases.py;
depth-to-space) is a reshape merging (w, r) into an output dim x = w * P + r: a loop
over x loads each element from the plane r = x mod P, an address no vector follows.
Looped over (w, r) instead, r innermost, the P planes are read with vector loads and
the output written as one interleaved group, which LLVM vectorizes; the reshape reads
the loop's digits (elemental.decompose_index) instead of dividing.
"""

from __future__ import annotations

from ...ir import Instruction, Op, Shape
from ...ir.shapes import reshape_groups

RESHAPES = (Op.RESHAPE, Op.BITCAST)


def loop_dims(instr: Instruction) -> list[tuple[int, ...]]:
    """Per output dim of `instr` (an array), the extents of the digits its loops run over,
    outermost first: the dim itself, or the dims a root-level reshape splits it into."""
    dims = instr.array_shape.dims
    split: dict[int, tuple[int, ...]] = {}
    for reshape in _root_reshapes(instr):
        in_dims = reshape.operands[0].array_shape.dims
        for ins, outs in reshape_groups(in_dims, dims):
            live_outs = [o for o in outs if dims[o] != 1]
            parts = tuple(in_dims[i] for i in ins if in_dims[i] != 1)
            if len(live_outs) == 1 and len(parts) > 1:
                split.setdefault(live_outs[0], parts)
    return [split.get(d, (extent,)) for d, extent in enumerate(dims)]


def _root_reshapes(instr: Instruction) -> list[Instruction]:
    """The reshapes read at the kernel's own output index: the root, or operands of the
    elementwise ops the root reads that way."""
    root = instr.called[0].root if instr.op is Op.FUSION else instr
    assert root is not None, instr.name
    dims = instr.array_shape.dims
    found: list[Instruction] = []
    work, seen = [root], set()
    while work:
        value = work.pop()
        if id(value) in seen or not isinstance(value.shape, Shape) or value.shape.dims != dims:
            continue
        seen.add(id(value))
        if value.op in RESHAPES:
            found.append(value)
        elif value.op.is_elementwise:
            work += value.operands
    return found
