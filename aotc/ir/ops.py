"""The closed set of IR opcodes and their definitions, declared once.

`OP_DEFS[op]` holds an op's text name, arity, shape rule (a function of
`shapes.py`), traits and the attributes it requires (with their text spellings:
`missing_attributes` gives the parser's and the verifier's messages).  Passes
and backends ask it for traits; they keep no op lists of their own.  How an op
computes is not part of its definition: the evaluator's `EVAL_RULES` and each
backend's lowerings hold that, one entry per opcode.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import shapes

if TYPE_CHECKING:
    from .module import Instruction
    from .types import AnyShape

VARIADIC = -1


class Trait(enum.Flag):
    NONE = 0
    ELEMENTWISE = enum.auto()
    COMMUTATIVE = enum.auto()
    ASSOCIATIVE = enum.auto()
    IDEMPOTENT = enum.auto()
    SIDE_EFFECT = enum.auto()
    # result is a view of operand 0's bytes (no data movement)
    VIEW = enum.auto()
    # runs its called computations as programs (while, conditional, call), not
    # as scalar functions applied per element (reducers, comparators, fusions)
    CONTROL_FLOW = enum.auto()


@dataclass(frozen=True)
class OpDef:
    text: str
    arity: int
    # the result shape from operands and attributes (`shapes.py`); raises ShapeError
    shape_rule: Callable[[Instruction], AnyShape]
    traits: Trait = Trait.NONE
    # the Instruction fields it must set, each with how text spells it (for errors)
    required: tuple[tuple[str, str], ...] = ()


class Op(enum.Enum):
    # leaves
    PARAMETER = "parameter"
    CONSTANT = "constant"
    IOTA = "iota"
    # this instruction's random-number counter (u64[2]: low, high), then advanced by delta=
    RNG_GET_AND_UPDATE_STATE = "rng-get-and-update-state"
    # unary elementwise
    ABS = "abs"
    NEGATE = "negate"
    EXP = "exponential"
    EXPM1 = "exponential-minus-one"
    LOG = "log"
    LOG1P = "log-plus-one"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    CBRT = "cbrt"
    TANH = "tanh"
    LOGISTIC = "logistic"
    SIN = "sine"
    COS = "cosine"
    TAN = "tan"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND_NEAREST_EVEN = "round-nearest-even"
    ROUND_NEAREST_AFZ = "round-nearest-afz"
    SIGN = "sign"
    NOT = "not"
    IS_FINITE = "is-finite"
    POPCNT = "popcnt"
    CLZ = "count-leading-zeros"
    # binary elementwise
    ADD = "add"
    SUBTRACT = "subtract"
    MULTIPLY = "multiply"
    DIVIDE = "divide"
    REMAINDER = "remainder"
    POWER = "power"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    ATAN2 = "atan2"
    AND = "and"
    OR = "or"
    XOR = "xor"
    SHIFT_LEFT = "shift-left"
    SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"
    COMPARE = "compare"
    # other elementwise
    SELECT = "select"
    CLAMP = "clamp"
    CONVERT = "convert"
    BITCAST_CONVERT = "bitcast-convert"
    # data movement
    BROADCAST = "broadcast"
    RESHAPE = "reshape"
    BITCAST = "bitcast"
    TRANSPOSE = "transpose"
    SLICE = "slice"
    CONCATENATE = "concatenate"
    PAD = "pad"
    REVERSE = "reverse"
    GATHER = "gather"
    SCATTER = "scatter"
    DYNAMIC_SLICE = "dynamic-slice"
    # bounded dims (Shape.dynamic): the run-time extent of dim `dimensions={d}` as s32,
    # and an array whose dim d has the extent of operand 1 (passes/bounded_dims.py
    # replaces both before any backend sees them)
    GET_DIMENSION_SIZE = "get-dimension-size"
    SET_DIMENSION_SIZE = "set-dimension-size"
    DYNAMIC_UPDATE_SLICE = "dynamic-update-slice"
    SORT = "sort"
    # reductions and contractions
    REDUCE = "reduce"
    REDUCE_WINDOW = "reduce-window"
    DOT = "dot"
    CONVOLUTION = "convolution"
    # structure
    TUPLE = "tuple"
    GET_TUPLE_ELEMENT = "get-tuple-element"
    FUSION = "fusion"
    # control flow
    WHILE = "while"
    CONDITIONAL = "conditional"
    CALL = "call"

    @property
    def text(self) -> str:
        return self.value

    @property
    def traits(self) -> Trait:
        return OP_DEFS[self].traits

    @property
    def shape_rule(self) -> Callable[[Instruction], AnyShape]:
        return OP_DEFS[self].shape_rule

    @property
    def is_elementwise(self) -> bool:
        return Trait.ELEMENTWISE in OP_DEFS[self].traits

    @property
    def is_control_flow(self) -> bool:
        return Trait.CONTROL_FLOW in OP_DEFS[self].traits

    @staticmethod
    def from_text(text: str) -> Op:
        try:
            return Op(text)
        except ValueError:
            raise ValueError(f"unknown opcode '{text}'") from None


_EW = Trait.ELEMENTWISE
_CA = Trait.ELEMENTWISE | Trait.COMMUTATIVE | Trait.ASSOCIATIVE

UNARY_ELEMENTWISE = (
    Op.ABS,
    Op.NEGATE,
    Op.EXP,
    Op.EXPM1,
    Op.LOG,
    Op.LOG1P,
    Op.SQRT,
    Op.RSQRT,
    Op.CBRT,
    Op.TANH,
    Op.LOGISTIC,
    Op.SIN,
    Op.COS,
    Op.TAN,
    Op.ERF,
    Op.FLOOR,
    Op.CEIL,
    Op.ROUND_NEAREST_EVEN,
    Op.ROUND_NEAREST_AFZ,
    Op.SIGN,
    Op.NOT,
    Op.POPCNT,
    Op.CLZ,
)

BINARY_ELEMENTWISE = (
    Op.ADD,
    Op.SUBTRACT,
    Op.MULTIPLY,
    Op.DIVIDE,
    Op.REMAINDER,
    Op.POWER,
    Op.MAXIMUM,
    Op.MINIMUM,
    Op.ATAN2,
    Op.AND,
    Op.OR,
    Op.XOR,
    Op.SHIFT_LEFT,
    Op.SHIFT_RIGHT_ARITHMETIC,
    Op.SHIFT_RIGHT_LOGICAL,
)

_TRAITS = {
    Op.ADD: _CA,
    Op.MULTIPLY: _CA,
    Op.MAXIMUM: _CA | Trait.IDEMPOTENT,
    Op.MINIMUM: _CA | Trait.IDEMPOTENT,
    Op.AND: _CA | Trait.IDEMPOTENT,
    Op.OR: _CA | Trait.IDEMPOTENT,
    Op.XOR: _CA,
}

# how text spells each Instruction field an op may require (`_needs` overrides per op)
_SPELLING = {
    "index": "index=",
    "literal": "a literal",
    "dimensions": "dimensions=",
    "direction": "direction=",
    "slice": "slice=",
    "dynamic_slice_sizes": "dynamic_slice_sizes=",
    "padding": "padding=",
    "gather": "offset_dims=, collapsed_slice_dims=, start_index_map=, index_vector_dim= "
    "and slice_sizes=",
    "scatter": "update_window_dims=, inserted_window_dims=, scatter_dims_to_operand_dims= "
    "and index_vector_dim=",
    "called": "to_apply=",
    "window": "window=",
    "dot": "lhs_contracting_dims= and rhs_contracting_dims=",
    "conv": "dim_labels=",
    "fusion_kind": "kind=",
}


def _needs(*fields: str, **spelled: str) -> tuple[tuple[str, str], ...]:
    """`fields` paired with their text spelling: this op's own (`spelled`), else the usual."""
    return tuple((field, spelled.get(field, _SPELLING[field])) for field in fields)


# ops on the bits of integer and pred operands: their shape rules refuse floats
_BITWISE = frozenset(
    {
        Op.NOT,
        Op.POPCNT,
        Op.CLZ,
        Op.AND,
        Op.OR,
        Op.XOR,
        Op.SHIFT_LEFT,
        Op.SHIFT_RIGHT_ARITHMETIC,
        Op.SHIFT_RIGHT_LOGICAL,
    }
)
_CONDITIONAL_BRANCHES = "true_computation= and false_computation= (or branch_computations=)"

OP_DEFS: dict[Op, OpDef] = {
    Op.PARAMETER: OpDef(
        "parameter", 0, shapes.given, required=_needs("index", index="a parameter number")
    ),
    Op.CONSTANT: OpDef("constant", 0, shapes.constant, required=_needs("literal")),
    Op.IOTA: OpDef(
        "iota", 0, shapes.iota, required=_needs("dimensions", dimensions="iota_dimension=")
    ),
    Op.RNG_GET_AND_UPDATE_STATE: OpDef(
        "rng-get-and-update-state",
        0,
        shapes.rng_state,
        Trait.SIDE_EFFECT,
        required=_needs("index", index="delta="),
    ),
    **{
        op: OpDef(op.value, 1, shapes.bitwise_unary if op in _BITWISE else shapes.unary, _EW)
        for op in UNARY_ELEMENTWISE
    },
    Op.IS_FINITE: OpDef("is-finite", 1, shapes.is_finite, _EW),
    **{
        op: OpDef(
            op.value,
            2,
            shapes.bitwise_binary if op in _BITWISE else shapes.binary,
            _TRAITS.get(op, _EW),
        )
        for op in BINARY_ELEMENTWISE
    },
    Op.COMPARE: OpDef("compare", 2, shapes.compare, _EW, required=_needs("direction")),
    Op.SELECT: OpDef("select", 3, shapes.select, _EW),
    Op.CLAMP: OpDef("clamp", 3, shapes.clamp, _EW),
    Op.CONVERT: OpDef("convert", 1, shapes.convert, _EW),
    Op.BITCAST_CONVERT: OpDef("bitcast-convert", 1, shapes.bitcast_convert, _EW),
    Op.BROADCAST: OpDef("broadcast", 1, shapes.broadcast, required=_needs("dimensions")),
    Op.RESHAPE: OpDef("reshape", 1, shapes.reshape, Trait.VIEW),
    Op.BITCAST: OpDef("bitcast", 1, shapes.reshape, Trait.VIEW),
    Op.TRANSPOSE: OpDef("transpose", 1, shapes.transpose, required=_needs("dimensions")),
    Op.SLICE: OpDef("slice", 1, shapes.slice_, required=_needs("slice")),
    Op.CONCATENATE: OpDef(
        "concatenate", VARIADIC, shapes.concatenate, required=_needs("dimensions")
    ),
    Op.PAD: OpDef("pad", 2, shapes.pad, required=_needs("padding")),
    Op.REVERSE: OpDef("reverse", 1, shapes.reverse, required=_needs("dimensions")),
    Op.GATHER: OpDef("gather", 2, shapes.gather, required=_needs("gather")),
    # operand, indices, updates: one operand only
    Op.SCATTER: OpDef("scatter", 3, shapes.scatter, required=_needs("scatter", "called")),
    # operand, a scalar start per dim
    Op.DYNAMIC_SLICE: OpDef(
        "dynamic-slice", VARIADIC, shapes.dynamic_slice, required=_needs("dynamic_slice_sizes")
    ),
    # operand, update, a scalar start per dim
    Op.DYNAMIC_UPDATE_SLICE: OpDef("dynamic-update-slice", VARIADIC, shapes.dynamic_update_slice),
    Op.SORT: OpDef("sort", VARIADIC, shapes.sort, required=_needs("dimensions", "called")),
    Op.GET_DIMENSION_SIZE: OpDef(
        "get-dimension-size", 1, shapes.get_dimension_size, required=_needs("dimensions")
    ),
    Op.SET_DIMENSION_SIZE: OpDef(
        "set-dimension-size", 2, shapes.set_dimension_size, required=_needs("dimensions")
    ),
    Op.REDUCE: OpDef("reduce", VARIADIC, shapes.reduce, required=_needs("dimensions", "called")),
    Op.REDUCE_WINDOW: OpDef(
        "reduce-window", VARIADIC, shapes.reduce_window, required=_needs("window", "called")
    ),
    Op.DOT: OpDef("dot", 2, shapes.dot, required=_needs("dot")),
    Op.CONVOLUTION: OpDef("convolution", 2, shapes.convolution, required=_needs("window", "conv")),
    Op.TUPLE: OpDef("tuple", VARIADIC, shapes.tuple_),
    Op.GET_TUPLE_ELEMENT: OpDef(
        "get-tuple-element", 1, shapes.get_tuple_element, Trait.VIEW, required=_needs("index")
    ),
    Op.FUSION: OpDef(
        "fusion", VARIADIC, shapes.fusion, required=_needs("called", "fusion_kind", called="calls=")
    ),
    Op.WHILE: OpDef(
        "while",
        1,
        shapes.while_,
        Trait.CONTROL_FLOW,
        required=_needs("called", called="condition= and body="),
    ),
    # (pred or s32 index, one operand per branch)
    Op.CONDITIONAL: OpDef(
        "conditional",
        VARIADIC,
        shapes.conditional,
        Trait.CONTROL_FLOW,
        required=_needs("called", called=_CONDITIONAL_BRANCHES),
    ),
    Op.CALL: OpDef("call", VARIADIC, shapes.call, Trait.CONTROL_FLOW, required=_needs("called")),
}

assert set(OP_DEFS) == set(Op), set(Op) - set(OP_DEFS)


def missing_attributes(instr: Instruction) -> list[str]:
    """How the attributes that `instr.op` requires but `instr` lacks are spelled in text."""
    missing = []
    for field, spelling in OP_DEFS[instr.op].required:
        value = getattr(instr, field)
        if value is None or (field == "called" and not value):
            missing.append(spelling)
    return missing


class Direction(enum.Enum):
    """Comparison direction of `compare`."""

    EQ = "EQ"
    NE = "NE"
    LT = "LT"
    LE = "LE"
    GT = "GT"
    GE = "GE"


# Instructions that emit no code of their own: leaves, tuples and views (a place in
# memory, not a computation; what `aotc inspect` and NAME_NUM_KERNELS leave out).  The
# buffer plan may still give a view a copy where it placed it apart from its operand
# (`BufferPlan.needs_code`).
# ops the bounded-dims pass (passes/bounded_dims.py) replaces: no backend sees them
PADDED_OPS = frozenset({Op.GET_DIMENSION_SIZE, Op.SET_DIMENSION_SIZE})

NO_CODE_OPS = frozenset({Op.PARAMETER, Op.CONSTANT, Op.TUPLE}) | frozenset(
    op for op, op_def in OP_DEFS.items() if Trait.VIEW in op_def.traits
)
