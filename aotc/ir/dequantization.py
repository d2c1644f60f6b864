"""Block-wise dequantized weights: w[n, k] = (q[n, k] - zero[n, b]) * scale[n, b] for the
block b = k // block of k, q integers of at most 8 bits.

This is how the ONNX frontend writes a weight-only quantized matrix (MatMulNBits: 2, 4
or 8-bit values in blocks of 16 to 256 along K), keeping its parts rather than a float
copy 4-16x the size: q a constant of its own narrow type, the zero points and scales
(N, K / block) arrays broadcast over each block,

    multiply(subtract(convert(q), per_block(zero)), per_block(scale))
    per_block(x) = reshape(broadcast(x, [N, blocks, block], dims={0,1}), [N, K']),
                   sliced to [N, K] where K' = blocks * block is longer,

the zero's per_block possibly of a convert of integers, or absent.  The fusion pass lets
such a value join the contraction that reads it (it is one read of each narrow value
per use, where storing the float weight writes and reads 4 bytes per element), and the
CPU backend computes a dot of it from the values as they are stored
(backends/cpu/nbits.py).  Any other backend computes it elementwise, as written.
"""

from __future__ import annotations

from dataclasses import dataclass

from .module import Instruction
from .ops import Op
from .types import Shape

MAX_VALUE_BITS = 8  # q: integers of at most this many bits


@dataclass(frozen=True)
class BlockDequantization:
    """The parts of a block-wise dequantized (N, K) array `root`."""

    root: Instruction
    values: Instruction  # q: (N, K) integers of at most 8 bits
    scale: Instruction  # (N, blocks) floats
    zero: Instruction | None  # (N, blocks) integers or floats at the root's type; None: 0
    block: int
    members: tuple[Instruction, ...]  # the instructions from `root` down to the parts

    @property
    def blocks(self) -> int:
        return self.scale.array_shape.dims[1]


def block_dequantization(instr: Instruction) -> BlockDequantization | None:
    """`instr`'s parts if it is a block-wise dequantized 2-D float array, else None."""
    if instr.op is not Op.MULTIPLY or not _float_matrix(instr):
        return None
    for centered, scaled in (instr.operands, reversed(instr.operands)):
        scale = _per_block(scaled, instr)
        if scale is None:
            continue
        x, block, scale_members = scale
        found = _centered(centered, instr, block)
        if found is not None:
            values, zero, members = found
            everything = (instr, *members, *scale_members)
            return BlockDequantization(instr, values, x, zero, block, everything)
    return None


def _float_matrix(instr: Instruction) -> bool:
    return isinstance(instr.shape, Shape) and instr.shape.rank == 2 and instr.shape.dtype.is_float


def _narrow_integers(instr: Instruction) -> bool:
    dtype = instr.array_shape.dtype
    return dtype.is_int and dtype.bits <= MAX_VALUE_BITS


def _centered(instr: Instruction, root: Instruction, block: int):
    """(q, zero, members) of convert(q) - per_block(zero), or of convert(q) (zero None)."""
    dtype = root.array_shape.dtype
    if instr.op is Op.CONVERT and _narrow_integers(instr.operands[0]):
        q = instr.operands[0]
        return (q, None, (instr,)) if instr.array_shape == root.array_shape else None
    if instr.op is not Op.SUBTRACT or instr.array_shape != root.array_shape:
        return None
    converted, shifted = instr.operands
    if converted.op is not Op.CONVERT or not _narrow_integers(converted.operands[0]):
        return None
    zero = _per_block(shifted, root)
    if zero is None or zero[1] != block:
        return None
    x, _, zero_members = zero
    members = (instr, converted, *zero_members)
    if x.op is Op.CONVERT and _narrow_integers(x.operands[0]):  # integer zero points
        members, x = (*members, x), x.operands[0]
    elif x.array_shape.dtype is not dtype:
        return None
    return converted.operands[0], x, members


def _per_block(instr: Instruction, root: Instruction):
    """(x, block, members) when `instr` is x (N, blocks) broadcast over blocks of `block`
    along the last dim of `root`'s shape, else None."""
    n, k = root.array_shape.dims
    members = []
    if instr.op is Op.SLICE:
        spec = instr.slice
        if spec is None or spec.starts != (0, 0) or spec.strides != (1, 1) or spec.limits != (n, k):
            return None
        members.append(instr)
        instr = instr.operands[0]
    if instr.op is not Op.RESHAPE:
        return None
    full = instr.operands[0]
    if full.op is not Op.BROADCAST or full.dimensions != (0, 1) or full.array_shape.rank != 3:
        return None
    rows, blocks, block = full.array_shape.dims
    x = full.operands[0]
    if rows != n or instr.array_shape.dims != (n, blocks * block) or blocks * block < k:
        return None
    if (blocks - 1) * block >= k or x.array_shape.dims != (n, blocks):
        return None
    return x, block, (*members, instr, full)
