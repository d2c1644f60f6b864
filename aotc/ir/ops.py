"""The closed set of IR opcodes and their traits, declared once.

Passes and backends ask `OP_DEFS[op]` for traits; they keep no op lists of
their own.  Shape rules live in `shapes.py`, evaluation rules in
`evaluate.py`, one entry per opcode there too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

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
    traits: Trait = Trait.NONE


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
    Op.ABS, Op.NEGATE, Op.EXP, Op.EXPM1, Op.LOG, Op.LOG1P, Op.SQRT, Op.RSQRT, Op.CBRT,
    Op.TANH, Op.LOGISTIC, Op.SIN, Op.COS, Op.TAN, Op.ERF, Op.FLOOR, Op.CEIL,
    Op.ROUND_NEAREST_EVEN, Op.ROUND_NEAREST_AFZ, Op.SIGN, Op.NOT, Op.POPCNT, Op.CLZ,
)  # fmt: skip

BINARY_ELEMENTWISE = (
    Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.DIVIDE, Op.REMAINDER, Op.POWER, Op.MAXIMUM,
    Op.MINIMUM, Op.ATAN2, Op.AND, Op.OR, Op.XOR, Op.SHIFT_LEFT,
    Op.SHIFT_RIGHT_ARITHMETIC, Op.SHIFT_RIGHT_LOGICAL,
)  # fmt: skip

_TRAITS = {
    Op.ADD: _CA,
    Op.MULTIPLY: _CA,
    Op.MAXIMUM: _CA | Trait.IDEMPOTENT,
    Op.MINIMUM: _CA | Trait.IDEMPOTENT,
    Op.AND: _CA | Trait.IDEMPOTENT,
    Op.OR: _CA | Trait.IDEMPOTENT,
    Op.XOR: _CA,
}

OP_DEFS: dict[Op, OpDef] = {
    Op.PARAMETER: OpDef("parameter", 0),
    Op.CONSTANT: OpDef("constant", 0),
    Op.IOTA: OpDef("iota", 0),
    Op.RNG_GET_AND_UPDATE_STATE: OpDef("rng-get-and-update-state", 0, Trait.SIDE_EFFECT),
    **{op: OpDef(op.value, 1, _EW) for op in UNARY_ELEMENTWISE},
    Op.IS_FINITE: OpDef("is-finite", 1, _EW),
    **{op: OpDef(op.value, 2, _TRAITS.get(op, _EW)) for op in BINARY_ELEMENTWISE},
    Op.COMPARE: OpDef("compare", 2, _EW),
    Op.SELECT: OpDef("select", 3, _EW),
    Op.CLAMP: OpDef("clamp", 3, _EW),
    Op.CONVERT: OpDef("convert", 1, _EW),
    Op.BITCAST_CONVERT: OpDef("bitcast-convert", 1, _EW),
    Op.BROADCAST: OpDef("broadcast", 1),
    Op.RESHAPE: OpDef("reshape", 1, Trait.VIEW),
    Op.BITCAST: OpDef("bitcast", 1, Trait.VIEW),
    Op.TRANSPOSE: OpDef("transpose", 1),
    Op.SLICE: OpDef("slice", 1),
    Op.CONCATENATE: OpDef("concatenate", VARIADIC),
    Op.PAD: OpDef("pad", 2),
    Op.REVERSE: OpDef("reverse", 1),
    Op.GATHER: OpDef("gather", 2),
    Op.SCATTER: OpDef("scatter", 3),  # operand, indices, updates: one operand only
    Op.DYNAMIC_SLICE: OpDef("dynamic-slice", VARIADIC),  # operand, a scalar start per dim
    Op.DYNAMIC_UPDATE_SLICE: OpDef("dynamic-update-slice", VARIADIC),  # operand, update, starts
    Op.SORT: OpDef("sort", VARIADIC),
    Op.REDUCE: OpDef("reduce", VARIADIC),
    Op.REDUCE_WINDOW: OpDef("reduce-window", VARIADIC),
    Op.DOT: OpDef("dot", 2),
    Op.CONVOLUTION: OpDef("convolution", 2),
    Op.TUPLE: OpDef("tuple", VARIADIC),
    Op.GET_TUPLE_ELEMENT: OpDef("get-tuple-element", 1, Trait.VIEW),
    Op.FUSION: OpDef("fusion", VARIADIC),
    Op.WHILE: OpDef("while", 1, Trait.CONTROL_FLOW),  # condition=, body=
    # (pred or s32 index, one operand per branch): true_/false_computation= or
    # branch_computations=
    Op.CONDITIONAL: OpDef("conditional", VARIADIC, Trait.CONTROL_FLOW),
    Op.CALL: OpDef("call", VARIADIC, Trait.CONTROL_FLOW),  # to_apply=
}

assert set(OP_DEFS) == set(Op), set(Op) - set(OP_DEFS)


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
NO_CODE_OPS = frozenset({Op.PARAMETER, Op.CONSTANT, Op.TUPLE}) | frozenset(
    op for op, op_def in OP_DEFS.items() if Trait.VIEW in op_def.traits
)
