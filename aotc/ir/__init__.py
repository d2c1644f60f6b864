"""The HLO-style IR: types, opcodes, data structures, builder, text, evaluator.

Imports nothing else from aotc except the leaf `aotc.errors`.
"""

from .attrs import ConvDims, DotDims, FusionKind, GatherDims, PaddingConfig, SliceSpec, Window
from .builder import ComputationBuilder, scalar_reducer
from .module import Computation, Instruction, Module
from .ops import OP_DEFS, Direction, Op, Trait
from .types import DType, Shape, TupleShape

__all__ = [
    "ComputationBuilder", "Computation", "ConvDims", "Direction", "DotDims", "DType",
    "FusionKind", "GatherDims", "Instruction", "Module", "Op", "OP_DEFS", "PaddingConfig",
    "Shape", "SliceSpec", "Trait", "TupleShape", "Window", "scalar_reducer",
]  # fmt: skip
