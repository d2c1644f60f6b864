"""Fusion kinds: what a fused computation computes, worked out once for pass and backends.

The fusion pass records the kind of each fusion it builds (`kind=` in the text);
both backends choose a fusion's kernel by the kind and the contractions found
here.  They ask `fusion_kind` and `output_contractions` of the body rather than
trusting a recorded kind: a fusion parsed from XLA's text may carry another one
(XLA's CPU calls its reduction fusions kLoop).

- OUTPUT (XLA's kOutput): dots and convolutions whose values the root reads only
  through elementwise ops at their own shape, their epilogue (bias, residual,
  activation); or a dot or convolution at the root, producers of its operands fused
  in.  Backends run the contractions as tiled kernels and apply the epilogue to each
  finished element.
- INPUT (kInput): a reduction at the root, producers of its operands fused in.
- CHAIN (kChain, not XLA's): a body of fusions that a backend runs as one kernel,
  block by block (attention_chain.py: the CPU's attention kernel).
- LOOP (kLoop): anything else, one loop over the output; row fusions (reductions read
  back per row, see index_maps.py) and reduce-windows among them.
"""

from __future__ import annotations

from .attrs import FusionKind
from .index_maps import read_elementwise_only
from .module import Computation, Instruction
from .ops import Op
from .types import DType, Shape

# the 8-bit integer types, which integer GEMMs read as bytes
BYTE_TYPES = (DType.S8, DType.U8)

# the ops computed as tiled kernels, ahead of an epilogue
CONTRACTION_OPS = frozenset({Op.DOT, Op.CONVOLUTION})


def fusion_kind(body: Computation) -> FusionKind:
    """The kind of a fusion calling `body`."""
    if any(i.op is Op.FUSION for i in body.instructions):
        return FusionKind.CHAIN
    if _epilogue_contractions(body):
        return FusionKind.OUTPUT
    if body.root.op is Op.REDUCE:
        return FusionKind.INPUT
    return FusionKind.LOOP


def output_contractions(instr: Instruction) -> list[Instruction]:
    """The contractions a kernel computes ahead of its epilogue, in body order: `instr`
    itself if it is a dot or convolution, an OUTPUT fusion's; else none."""
    if not isinstance(instr.shape, Shape):
        return []
    if instr.op in CONTRACTION_OPS:
        return [instr]
    if instr.op is not Op.FUSION:
        return []
    return _epilogue_contractions(instr.called[0])


def _epilogue_contractions(body: Computation) -> list[Instruction]:
    """The contractions of `body` if its root is an array reading each of them only
    through elementwise ops at its shape (each output element reads only the same
    element of each: the contraction may be computed in place); else none."""
    if not isinstance(body.root.shape, Shape):
        return []
    found = [i for i in body.instructions if i.op in CONTRACTION_OPS]
    if not all(read_elementwise_only(c, c.array_shape.dims) for c in found):
        return []
    return found


def byte_values(instr: Instruction) -> DType | None:
    """The 8-bit integer type of `instr`'s values where they are bytes: its own type, or
    that of the bytes it converts exactly to a wider integer type (to a signed one, or
    from u8), which a byte product may read instead."""
    dtype = instr.array_shape.dtype
    if dtype in BYTE_TYPES:
        return dtype
    if not widens_bytes(instr):
        return None
    source = instr.operands[0].array_shape.dtype
    exact = dtype.bits > 8 and (dtype.is_signed_int or source.is_unsigned_int)
    return source if exact else None


def widens_bytes(instr: Instruction) -> bool:
    """A convert of 8-bit integers to a wider integer type: an integer GEMM reads through
    it (its packers widen the bytes, or keep them as bytes), so the bytes are what is
    worth storing."""
    return (
        instr.op is Op.CONVERT
        and instr.operands[0].array_shape.dtype in BYTE_TYPES
        and instr.array_shape.dtype.is_int
    )
