"""Arrays without elements, settled before any kernel is planned (at every -O level).

A model may hold zero-element tensors (a batch of 0, an empty slice): ONNX and XLA
allow them and onnxruntime runs them.  The kernel forms assume elements (a GEMM's
panels, a convolution's image rows), so no kernel is left to compute one: a value
with no elements is an empty constant, and a value with elements computed from an
empty operand is what it equals then, a sum over nothing (dot, convolution) zero and a
reduction over nothing its initial value.
"""

from __future__ import annotations

import numpy as np

from ..ir import Instruction, Module, Op, Shape, Trait
from .rewrite import InsertingBuilder, rewrite, rule

# ops that stay as they are: the module's inputs and values, and effects
KEPT = frozenset({Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT})


class EmptyArrays:
    name = "empty-arrays"

    def run(self, module: Module) -> bool:
        return rewrite(module, [no_elements, sum_over_nothing, reduce_over_nothing])


def _empty(instr: Instruction) -> bool:
    return isinstance(instr.shape, Shape) and instr.shape.size == 0


@rule(*Op)
def no_elements(b: InsertingBuilder, instr: Instruction):
    if instr.op in KEPT or Trait.SIDE_EFFECT in instr.op.traits or not _empty(instr):
        return None
    return b.constant(np.zeros(instr.array_shape.dims), instr.array_shape.dtype)


@rule(Op.DOT, Op.CONVOLUTION)
def sum_over_nothing(b: InsertingBuilder, instr: Instruction):
    if _empty(instr) or not any(_empty(o) for o in instr.operands):
        return None
    shape = instr.array_shape
    return b.broadcast(b.scalar(0, shape.dtype), [], shape.dims)


@rule(Op.REDUCE)
def reduce_over_nothing(b: InsertingBuilder, instr: Instruction):
    # one input and its initial value: variadic reductions keep their kernel
    if len(instr.operands) != 2 or _empty(instr) or not _empty(instr.operands[0]):
        return None
    return b.broadcast(instr.operands[1], [], instr.array_shape.dims)
