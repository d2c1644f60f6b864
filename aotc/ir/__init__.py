"""The HLO-style IR: types, opcodes, data structures, builder, text, evaluator.

Imports nothing else from aotc except the leaf `aotc.errors`.
"""

from .attrs import (
    ConvDims,
    DotDims,
    FusionKind,
    GatherDims,
    PaddingConfig,
    ScatterDims,
    SliceSpec,
    Window,
)
from .builder import ComputationBuilder, comparator, replacer, scalar_reducer
from .module import Computation, Instruction, Module
from .ops import OP_DEFS, Direction, Op, Trait
from .types import DType, Shape, TupleShape

__all__ = [
    "OP_DEFS",
    "Computation",
    "ComputationBuilder",
    "ConvDims",
    "DType",
    "Direction",
    "DotDims",
    "FusionKind",
    "GatherDims",
    "Instruction",
    "Module",
    "Op",
    "PaddingConfig",
    "ScatterDims",
    "Shape",
    "SliceSpec",
    "Trait",
    "TupleShape",
    "Window",
    "comparator",
    "replacer",
    "scalar_reducer",
]
