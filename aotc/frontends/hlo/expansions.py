"""XLA operations the IR has no opcode for, rewritten into IR ops as `DumpParser` reads them.

XLA's text has a few operations that are other ops in disguise, as XLA's own
decomposer passes know: `topk` is a sort, `select-and-scatter` a variadic
reduce-window (which element each window selects) and a scatter,
`reduce-precision` integer arithmetic on the bits, `compare` with
`type=TOTALORDER` an integer compare of the bits, `copy` and `opt-barrier` the
value itself (aotc has one row-major layout and no scheduler to fence), and a
fusion of a kind aotc does not make (XLA CPU's `kCustom`) its body.  A
`custom-call` is refused: its target is a library routine aotc cannot see.
`bitcast-convert` between widths is shifts and ors; `rng-bit-generator` is
Philox or ThreeFry arithmetic, and the stateful `rng` Philox on a counter that
each run advances (`ir.random_bits`).

`EXPANSIONS[opcode](site, shape, operands, attributes)` returns the instruction
that the written name stands for, or None to parse the instruction as the IR op
of that name.  Expansions build with `site.builder()`; the parser names what
they build and checks its shape against the text.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from typing import Protocol

from ...errors import ModelError, UnsupportedError
from ...ir import (
    Computation,
    ComputationBuilder,
    Direction,
    DType,
    FusionKind,
    Instruction,
    Module,
    Op,
    ScatterDims,
    Shape,
    TupleShape,
)
from ...ir.random_bits import BitOps, normal, philox, random_bits, threefry, uniform
from ...ir.shapes import infer_shape
from ...ir.types import AnyShape


class Site(Protocol):
    """What an expansion sees of the parser: where it builds, and how it fails."""

    name: str | None  # the instruction's written name (None: an operand written in place)

    def builder(self, computation: Computation | None = None) -> ComputationBuilder:
        """A builder appending to `computation` (default: the one being parsed)."""

    def new_computation(self, name: str) -> Computation:
        """An empty computation the module will hold (named uniquely at the end)."""

    def computation(self, name: str) -> Computation:
        """A computation parsed before this instruction."""

    def fail(self, message: str, kind: type = UnsupportedError) -> Exception:
        """An error quoting the instruction's line."""


Expansion = Callable[[Site, AnyShape, list[Instruction], dict], Instruction | None]


class ParseSite:
    """The parser's Site: what expansions build is unnamed, and listed in `made` with
    the name to make for it, for the parser to name and check."""

    def __init__(
        self,
        module: Module,
        computation: Computation,
        name: str | None,
        fail: Callable[[str, type], Exception],
    ):
        self.module = module
        self.current = computation
        self.name = name
        self._fail = fail
        self.made: list[tuple[Instruction, str]] = []
        self.made_computations: list[Computation] = []

    def builder(self, computation: Computation | None = None) -> ComputationBuilder:
        return _RecordingBuilder(self, computation or self.current)

    def new_computation(self, name: str) -> Computation:
        comp = Computation(name)
        self.made_computations.append(comp)
        return comp

    def computation(self, name: str) -> Computation:
        for comp in self.module.computations:
            if comp.name == name:
                return comp
        raise self.fail(f"no computation %{name} before this instruction", ModelError)

    def fail(self, message: str, kind: type = UnsupportedError) -> Exception:
        return self._fail(message, kind)


class _RecordingBuilder(ComputationBuilder):
    """Appends shape-checked, unnamed instructions to a computation; records them."""

    def __init__(self, site: ParseSite, computation: Computation):
        self.module = site.module
        self.computation = computation
        self.origin = None
        self.site = site

    def add(self, op: Op, operands, shape=None, name=None, **attrs) -> Instruction:
        instr = Instruction(op, shape, list(operands), **attrs)
        instr.shape = infer_shape(instr)
        self.computation.instructions.append(instr)
        self.site.made.append((instr, name or op.text))
        return instr


_SAME_WIDTH_INT = {16: DType.S16, 32: DType.S32, 64: DType.S64}
_UINT_OF_WIDTH = {8: DType.U8, 16: DType.U16, 32: DType.U32, 64: DType.U64}
# custom-call targets that only annotate their operand (sharding of one device)
_ANNOTATIONS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})


def _identity(site: Site, shape: AnyShape, operands: list[Instruction], attributes: dict):
    """copy, opt-barrier: the operand's value (layouts and scheduling are not aotc's IR)."""
    if len(operands) != 1:
        raise site.fail("takes one operand")
    return operands[0]


def _custom_call(site: Site, shape: AnyShape, operands: list[Instruction], attributes: dict):
    target = attributes.get("custom_call_target", "?")
    if target in _ANNOTATIONS and len(operands) == 1:
        return operands[0]
    where = f"%{site.name}" if site.name else "an operand"
    raise site.fail(
        f"custom-call target '{target}' ({where}) is a library call aotc "
        "cannot compile; express it with HLO ops"
    )


def total_order_key(b: ComputationBuilder, x: Instruction) -> Instruction:
    """Signed integers ordered as XLA's TOTALORDER orders the floats `x`: -NaN < -inf <
    ... < -0 < +0 < ... < +inf < +NaN (negatives get all but the sign bit flipped)."""
    dtype = x.array_shape.dtype
    if dtype.bits not in _SAME_WIDTH_INT:  # 8- and 4-bit floats: order their f32 values
        x = b.convert(x, DType.F32)
        dtype = DType.F32
    int_dtype = _SAME_WIDTH_INT[dtype.bits]
    dims = x.array_shape.dims
    bits = b.bitcast_convert(x, int_dtype)
    shift = b.broadcast(b.scalar(dtype.bits - 1, int_dtype), [], dims)
    magnitude = b.broadcast(b.scalar(2 ** (dtype.bits - 1) - 1, int_dtype), [], dims)
    sign = b.binary(Op.SHIFT_RIGHT_ARITHMETIC, bits, shift)
    return b.binary(Op.XOR, bits, b.binary(Op.AND, sign, magnitude))


def _compare(site: Site, shape: AnyShape, operands: list[Instruction], attributes: dict):
    """`type=TOTALORDER` on floats; other types (FLOAT, SIGNED, ...) are the IR's compare."""
    if attributes.get("type") != "TOTALORDER" or not operands[0].array_shape.dtype.is_float:
        return None
    b = site.builder()
    keys = [total_order_key(b, x) for x in operands]
    return b.compare(*keys, attributes["direction"])


def _topk(site: Site, shape: AnyShape, operands: list[Instruction], attributes: dict):
    """Sort (values, iota) along the last dim, greatest first, and keep the first k."""
    (x,) = operands
    if not isinstance(shape, TupleShape) or len(shape.elements) != 2:
        raise site.fail("topk returns (values, indices)")
    values, indices = shape.elements
    k, dims = values.dims[-1], x.array_shape.dims
    direction = Direction.GT if attributes.get("largest", True) else Direction.LT
    order = site.new_computation("topk_comparator")
    c = site.builder(order)
    params = [
        c.parameter(i, Shape(dt, ()), f"p{i}")
        for i, dt in enumerate([x.array_shape.dtype] * 2 + [indices.dtype] * 2)
    ]
    lhs, rhs = params[:2]
    if x.array_shape.dtype.is_float:
        lhs, rhs = total_order_key(c, lhs), total_order_key(c, rhs)
    order.root = c.compare(lhs, rhs, direction)
    b = site.builder()
    iota = b.iota(Shape(indices.dtype, dims), len(dims) - 1)
    ordered = b.sort([x, iota], len(dims) - 1, order, is_stable=True)
    limits = [*dims[:-1], k]
    parts = [b.slice(b.get_tuple_element(ordered, i), [0] * len(dims), limits) for i in (0, 1)]
    return b.tuple(parts)


def _select_and_scatter(site: Site, shape: AnyShape, operands: list[Instruction], attributes):
    """Each window selects one operand element (the first valid one, replaced by each later
    one that `select(kept, later)` rejects: a variadic reduce-window over (value, flat
    index)); `scatter` then combines the window's source value into that element."""
    operand, source, init = operands
    if "select" not in attributes or "scatter" not in attributes or "window" not in attributes:
        raise site.fail("select-and-scatter needs window=, select= and scatter=")
    select = site.computation(attributes["select"][0])
    scatter = site.computation(attributes["scatter"][0])
    dtype, dims = operand.array_shape.dtype, operand.array_shape.dims
    count = operand.array_shape.size
    combine = site.new_computation("select_and_scatter_choice")
    c = site.builder(combine)
    kept, kept_at, later, later_at = (
        c.parameter(i, Shape(dt, ()), name)
        for i, (dt, name) in enumerate(
            [(dtype, "kept"), (DType.S32, "kept_at"), (dtype, "later"), (DType.S32, "later_at")]
        )
    )
    zero = c.scalar(0, DType.S32)
    # padding taps carry index -1: never chosen; the first valid tap always is
    keep = c.binary(
        Op.AND,
        c.compare(kept_at, zero, Direction.GE),
        c.binary(Op.OR, c.compare(later_at, zero, Direction.LT), inline(c, select, [kept, later])),
    )
    combine.root = c.tuple([c.select(keep, kept, later), c.select(keep, kept_at, later_at)])
    b = site.builder()
    flat_index = b.reshape(b.iota(Shape(DType.S32, (count,)), 0), dims)
    chosen = b.add(
        Op.REDUCE_WINDOW,
        [operand, flat_index, b.scalar(0, dtype), b.scalar(-1, DType.S32)],
        window=attributes["window"],
        called=(combine,),
    )
    where = b.get_tuple_element(chosen, 1)
    rank = where.array_shape.rank
    dims_numbers = ScatterDims((), (0,), (0,), rank)
    flat = b.broadcast(init, [], [count])
    return b.reshape(b.scatter(flat, where, source, dims_numbers, scatter), dims)


def _reduce_precision(site: Site, shape: AnyShape, operands: list[Instruction], attributes):
    """XLA's rounding to `exponent_bits`/`mantissa_bits` within the type: mantissa rounded
    to nearest even, exponents past the range to +-inf, below it to +-0 (denormals of
    the narrow format flush), NaN kept."""
    (x,) = operands
    dtype = x.array_shape.dtype
    exponent_bits, mantissa_bits = attributes.get("exponent_bits"), attributes.get("mantissa_bits")
    if exponent_bits is None or mantissa_bits is None:
        raise site.fail("reduce-precision needs exponent_bits= and mantissa_bits=")
    src_mantissa = {DType.F16: 10, DType.BF16: 7, DType.F32: 23, DType.F64: 52}.get(dtype)
    if src_mantissa is None or exponent_bits < 1 or mantissa_bits < 0:
        raise site.fail(f"reduce-precision of {dtype.text} to e{exponent_bits}m{mantissa_bits}")
    width = dtype.bits
    src_exponent = width - 1 - src_mantissa
    b = site.builder()
    udt = _UINT_OF_WIDTH[width]
    dims = x.array_shape.dims

    def const(value: int) -> Instruction:
        return full(b, value, udt, dims)

    bits = b.bitcast_convert(x, udt)
    rounded = bits
    if mantissa_bits < src_mantissa:
        dropped = src_mantissa - mantissa_bits
        last_kept = b.binary(
            Op.SHIFT_RIGHT_LOGICAL, b.binary(Op.AND, bits, const(1 << dropped)), const(dropped)
        )
        bias = b.binary(Op.ADD, last_kept, const((1 << (dropped - 1)) - 1))
        rounded = b.binary(Op.AND, b.binary(Op.ADD, bits, bias), const(-(1 << dropped)))
    if exponent_bits < src_exponent:
        sign_mask = 1 << (width - 1)
        exponent_mask = ((1 << src_exponent) - 1) << src_mantissa
        bias, narrow_bias = (1 << (src_exponent - 1)) - 1, (1 << (exponent_bits - 1)) - 1
        exponent = b.binary(Op.AND, rounded, const(exponent_mask))
        overflows = b.compare(exponent, const((bias + narrow_bias) << src_mantissa), Direction.GT)
        underflows = b.compare(exponent, const((bias - narrow_bias) << src_mantissa), Direction.LE)
        signed_zero = b.binary(Op.AND, rounded, const(sign_mask))
        signed_inf = b.binary(Op.OR, signed_zero, const(exponent_mask))
        rounded = b.select(overflows, signed_inf, rounded)
        rounded = b.select(underflows, signed_zero, rounded)
    result = b.bitcast_convert(rounded, dtype)
    is_nan = b.compare(x, x, Direction.NE)
    return b.select(is_nan, x, result)


def full(b: ComputationBuilder, value: float, dtype: DType, dims) -> Instruction:
    """An array of `dims` filled with `value` (integers wrap to the type's width)."""
    if dtype.is_int:
        value = int(value) % (1 << dtype.bits)
        if dtype.is_signed_int and value >= 1 << (dtype.bits - 1):
            value -= 1 << dtype.bits
    return b.broadcast(b.scalar(value, dtype), [], dims)


def _unsigned(b: ComputationBuilder, x: Instruction) -> Instruction:
    """x's bits as the unsigned integer type of its width."""
    target = _UINT_OF_WIDTH[x.array_shape.dtype.bits]
    return x if x.array_shape.dtype is target else b.bitcast_convert(x, target)


def _bitcast_convert(site: Site, shape: AnyShape, operands: list[Instruction], attributes):
    """Between types of different widths (the narrow side has an extra last dim of the
    ratio): shifts and ors of the unsigned bits, lane 0 lowest (little-endian memory)."""
    (x,) = operands
    source, target = x.array_shape.dtype, shape.dtype
    if source.bits == target.bits or not isinstance(shape, Shape):
        return None
    if source.bits not in _UINT_OF_WIDTH or target.bits not in _UINT_OF_WIDTH:
        raise site.fail(f"bitcast-convert from {source.text} to {target.text}")
    b = site.builder()
    if source.bits < target.bits:  # [..., ratio] -> [...]
        wide = _UINT_OF_WIDTH[target.bits]
        lanes = x.array_shape.dims[-1]
        bits = _unsigned(b, x)
        result = None
        for k in range(lanes):
            starts, limits = [0] * x.array_shape.rank, [*x.array_shape.dims[:-1], k + 1]
            starts[-1] = k
            lane = b.convert(b.reshape(b.slice(bits, starts, limits), shape.dims), wide)
            lane = b.binary(Op.SHIFT_LEFT, lane, full(b, k * source.bits, wide, shape.dims))
            result = lane if result is None else b.binary(Op.OR, result, lane)
        return result if wide is target else b.bitcast_convert(result, target)
    narrow = _UINT_OF_WIDTH[target.bits]
    bits, dims = _unsigned(b, x), x.array_shape.dims
    lanes = []
    for k in range(source.bits // target.bits):
        lane = b.binary(
            Op.SHIFT_RIGHT_LOGICAL, bits, full(b, k * target.bits, bits.array_shape.dtype, dims)
        )
        lane = b.convert(lane, narrow)
        if narrow is not target:
            lane = b.bitcast_convert(lane, target)
        lanes.append(b.reshape(lane, [*dims, 1]))
    return b.concatenate(lanes, len(dims))


def _fusion(site: Site, shape: AnyShape, operands: list[Instruction], attributes: dict):
    """A fusion kind aotc does not make (XLA CPU's kCustom library fusions): its body."""
    kind = attributes.get("kind")
    if kind is None or isinstance(kind, FusionKind):
        return None
    names = attributes.get("calls", ())
    if len(names) != 1:
        raise site.fail("a fusion calls one computation (calls=)")
    return inline(site.builder(), site.computation(names[0]), operands)


def inline(b: ComputationBuilder, comp: Computation, args: list[Instruction]) -> Instruction:
    """Copies of `comp`'s instructions with its parameters bound to `args`; returns the
    root's copy (called computations stay shared)."""
    copies: dict[int, Instruction] = {}
    for instr in comp.post_order():
        if instr.op is Op.PARAMETER:
            copies[id(instr)] = args[instr.index]
            continue
        operands = [copies[id(o)] for o in instr.operands]
        fields = {f.name: getattr(instr, f.name) for f in dataclasses.fields(instr)}
        for key in ("op", "shape", "operands", "name"):
            del fields[key]
        copies[id(instr)] = b.add(instr.op, operands, instr.shape, **fields)
    return copies[id(comp.root)]


def _rng(site: Site, shape: AnyShape, operands: list[Instruction], attributes):
    """XLA's stateful `rng(a, b), distribution=`: uniform in [a, b) or normal(a, b) (mean,
    deviation), drawn afresh each run; the key is a hash of the instruction's name, so that
    two rng instructions draw different streams."""
    distribution = attributes.get("distribution")
    if not isinstance(shape, Shape) or len(operands) != 2:
        raise site.fail("rng takes two scalar parameters and returns an array")
    b = site.builder()
    key = zlib.crc32((site.name or "rng").encode())
    low, high = (b.broadcast(x, [], shape.dims) for x in operands)
    if distribution == "rng_normal" and shape.dtype.is_float:
        return b.binary(
            Op.ADD, low, b.binary(Op.MULTIPLY, high, normal(b, key, shape.dtype, shape.dims))
        )
    if distribution != "rng_uniform":
        raise site.fail(f"rng distribution {distribution} for {shape.dtype.text}")
    span = b.binary(Op.SUBTRACT, high, low)
    if shape.dtype.is_float:
        return b.binary(
            Op.ADD, low, b.binary(Op.MULTIPLY, span, uniform(b, key, shape.dtype, shape.dims))
        )
    # integers: a + bits mod (b - a), in the unsigned type of the same width
    unsigned = _UINT_OF_WIDTH.get(shape.dtype.bits)
    if unsigned is None or shape.dtype.bits < 32:
        raise site.fail(f"rng of {shape.dtype.text}")
    bits = random_bits(b, key, Shape(unsigned, shape.dims))
    offset = b.binary(Op.REMAINDER, bits, b.bitcast_convert(span, unsigned))
    return b.binary(Op.ADD, low, b.bitcast_convert(offset, shape.dtype))


def _rng_bit_generator(site: Site, shape: AnyShape, operands: list[Instruction], attributes):
    """`rng-bit-generator(state), algorithm=`: (new state, random bits), bit for bit as
    XLA's RngBitGeneratorExpander.  The state is u64[n]: element 0 is the key, the rest
    a counter; Philox4x32 (`rng_default` on CPU) or ThreeFry2x32."""
    (state,) = operands
    algorithm = attributes.get("algorithm", "rng_default")
    if not isinstance(shape, TupleShape) or len(shape.elements) != 2:
        raise site.fail("rng-bit-generator returns (state, bits)")
    out = shape.elements[1]
    u64_vector = state.array_shape.dtype is DType.U64 and state.array_shape.rank == 1
    if not u64_vector or out.dtype.bits not in _UINT_OF_WIDTH:
        raise site.fail(f"rng-bit-generator of {out} from state {state.shape}")
    o = BitOps(site.builder())
    key = o.element(state, 0)
    if algorithm in ("rng_default", "rng_philox"):  # XLA CPU's default is Philox
        bits, new_state = philox(o, key, state, out)
    elif algorithm == "rng_three_fry":
        bits, new_state = threefry(o, key, o.b.slice(state, [1], [2]), out)
    else:
        raise site.fail(f"rng-bit-generator algorithm {algorithm}")
    unsigned = _UINT_OF_WIDTH[out.dtype.bits]
    if bits.shape.dtype is not unsigned:  # narrow types take the low bits of u32s
        bits = o.b.convert(bits, unsigned)
    if unsigned is not out.dtype:
        bits = o.b.bitcast_convert(bits, out.dtype)
    final = o.b.concatenate([o.b.reshape(key, [1]), new_state], 0)
    return o.b.tuple([final, bits])


EXPANSIONS: dict[str, Expansion] = {
    "copy": _identity,
    "opt-barrier": _identity,
    "custom-call": _custom_call,
    "compare": _compare,
    "topk": _topk,
    "select-and-scatter": _select_and_scatter,
    "reduce-precision": _reduce_precision,
    "bitcast-convert": _bitcast_convert,
    "rng-bit-generator": _rng_bit_generator,
    "rng": _rng,
    "fusion": _fusion,
}
