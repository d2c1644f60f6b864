"""Algebraic simplification: local identities as a rule list (see rewrite.py).

Every rule is exact for all inputs (NaN, infinities and signed zeros
included) unless its comment says otherwise; none assumes fast math.
"""

from __future__ import annotations

from dataclasses import astuple

import numpy as np

from ..ir import Instruction, Op, Shape, Window
from ..ir.ops import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE
from ..ir.types import cast_array
from .rewrite import InsertingBuilder, rewrite, rule


def splat_value(instr: Instruction):
    """The single value of a constant, or of a broadcast of one, else None."""
    while instr.op is Op.BROADCAST:
        instr = instr.operands[0]
    if instr.op is not Op.CONSTANT or instr.literal.size == 0:
        return None
    flat = instr.literal.reshape(-1)
    first = flat[0]
    if np.all(flat == first):
        return first.item()
    return None


@rule(Op.ADD)
def add_zero(b: InsertingBuilder, instr: Instruction):
    # x + 0 -> x for integers; for floats only x + (-0) is exact (-0 + +0 = +0)
    x, y = instr.operands
    for keep, other in ((x, y), (y, x)):
        value = splat_value(other)
        if value is None or value != 0:
            continue
        dtype = instr.array_shape.dtype
        if not dtype.is_float or np.signbit(value):
            return keep
    return None


@rule(Op.SUBTRACT)
def subtract_zero(b: InsertingBuilder, instr: Instruction):
    # x - (+0) -> x (exact: -0 - +0 = -0)
    x, y = instr.operands
    value = splat_value(y)
    if value is not None and value == 0 and not np.signbit(value):
        return x
    return None


@rule(Op.MULTIPLY)
def multiply_one(b: InsertingBuilder, instr: Instruction):
    # x * 1 -> x
    x, y = instr.operands
    for keep, other in ((x, y), (y, x)):
        value = splat_value(other)
        if value is not None and value == 1 and instr.array_shape.dtype.bits > 1:
            return keep
    return None


@rule(Op.DIVIDE)
def divide_by_constant(b: InsertingBuilder, instr: Instruction):
    # x / 1 -> x;  x / 2^k -> x * 2^-k (exact in binary floating point)
    x, y = instr.operands
    value = splat_value(y)
    dtype = instr.array_shape.dtype
    if value is None or not dtype.is_float:
        return None
    if value == 1:
        return x
    mantissa, _ = np.frexp(value)
    if value != 0 and np.isfinite(value) and abs(mantissa) == 0.5:
        reciprocal = 1.0 / value
        # exactly representable (not so for f4e2m1fn's 1/4, say) -> the product is exact
        if cast_array(np.float64(reciprocal), dtype) == reciprocal:
            factor = b.broadcast_to(b.scalar(reciprocal, dtype), x.array_shape.dims)
            return b.binary(Op.MULTIPLY, x, factor)
    return None


@rule(Op.RESHAPE, Op.BITCAST)
def reshape_chain(b: InsertingBuilder, instr: Instruction):
    # reshape(x) to x's own shape -> x;  reshape(reshape(x)) -> reshape(x)
    x = instr.operands[0]
    if x.shape == instr.shape:
        return x
    if x.op in (Op.RESHAPE, Op.BITCAST):  # the reshapes, not get-tuple-element (a view too)
        return b.reshape(x.operands[0], instr.array_shape.dims)
    return None


@rule(Op.TRANSPOSE)
def transpose_chain(b: InsertingBuilder, instr: Instruction):
    # transpose by the identity -> x;  transpose(transpose(x, p), q) -> transpose(x, p o q)
    x = instr.operands[0]
    perm = instr.dimensions
    if list(perm) == list(range(len(perm))):
        return x
    if x.op is Op.TRANSPOSE:
        inner = x.dimensions
        return b.transpose(x.operands[0], [inner[p] for p in perm])
    if x.op is Op.BROADCAST:
        return _transposed_broadcast(b, x, perm)
    return None


def _transposed_broadcast(b: InsertingBuilder, x: Instruction, perm) -> Instruction:
    # transpose(broadcast(y, dims), perm) -> broadcast of y (its own dims reordered when
    # the transpose swaps them: broadcast dims increase)
    y, dims = x.operands[0], x.dimensions
    places = [perm.index(d) for d in dims]
    order = sorted(range(len(places)), key=places.__getitem__)
    out_dims = [x.array_shape.dims[p] for p in perm]
    return b.broadcast(b.transpose(y, order), sorted(places), out_dims)


# ops a transpose moves through: elementwise ones (their attributes: a compare's
# direction) and reduce-window (its window permuted)
TRANSPOSABLE = frozenset(
    {
        *UNARY_ELEMENTWISE,
        *BINARY_ELEMENTWISE,
        Op.SELECT,
        Op.CLAMP,
        Op.COMPARE,
        Op.CONVERT,
        Op.REDUCE_WINDOW,
    }
)


@rule(Op.TRANSPOSE)
def transpose_toward_operands(b: InsertingBuilder, instr: Instruction):
    # transpose(f(g(transpose(x)), broadcast(y))) -> f(g(x), y'): the transpose moves to
    # the operands, through elementwise ops and pooling used there alone (nothing is
    # computed twice), down to a transpose it cancels or merges with (a channels-last
    # model's layout changes around its NCHW convolutions, conv_layout.py)
    x = instr.operands[0]
    if not _takes_transpose(b.computation, x, instr.array_shape.rank):
        return None
    perm = instr.dimensions
    operands = [b.transpose(o, perm) if o.array_shape.rank else o for o in x.operands]
    return _permuted(b, x, operands, perm)


def _permuted(b: InsertingBuilder, x: Instruction, operands, perm) -> Instruction:
    """`x`'s op over `operands`, its shape (and a pool's window) permuted as
    transpose(x, perm) permutes x's dims."""
    if x.op is Op.REDUCE_WINDOW:
        window = Window(*(tuple(field[p] for p in perm) for field in astuple(x.window)))
        return b.reduce_window(*operands, window, x.called[0])
    shape = Shape(x.array_shape.dtype, tuple(x.array_shape.dims[p] for p in perm))
    return b.add(x.op, operands, shape, direction=x.direction)


def _takes_transpose(computation, x: Instruction, rank: int) -> bool:
    """Whether transposing `x`'s operands instead of `x` reaches a transpose (through
    more such ops), its other operands being broadcasts, constants or scalars.  Decided
    operands first on an explicit stack: the ops it passes are as many as the model's."""
    takes: dict[int, bool] = {}
    stack = [(x, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            takes[id(node)] = _reaches_transpose(node, takes)
        elif not _moves_alone(computation, node, rank):
            takes[id(node)] = False
        else:
            stack.append((node, True))
            stack.extend((o, False) for o in node.operands if o.op is not Op.TRANSPOSE)
    return takes[id(x)]


def _moves_alone(computation, x: Instruction, rank: int) -> bool:
    """Whether a transpose may move from `x`'s one user to `x`'s operands: `x` is
    transposable at that rank and read there alone."""
    if x.op not in TRANSPOSABLE or not isinstance(x.shape, Shape) or x.shape.rank != rank:
        return False
    return x is not computation.root and x.user_count <= 1


def _reaches_transpose(x: Instruction, takes: dict[int, bool]) -> bool:
    """With its operands decided (`takes`): whether one is or takes a transpose and the
    others are broadcasts, constants or scalars."""
    reaching = False
    for o in x.operands:
        if o.op is Op.TRANSPOSE or takes.get(id(o), False):
            reaching = True
        elif o.array_shape.rank and o.op not in (Op.BROADCAST, Op.CONSTANT):
            return False
    return reaching


@rule(*TRANSPOSABLE)
def transpose_toward_users(b: InsertingBuilder, instr: Instruction):
    # f(transpose(x, p), transpose(y, p), broadcast(z)) -> transpose(f(x, y, z'), p): one
    # transpose after f instead of one per operand, which then meets the transposes of
    # f's users (a residual network's block outputs feed a channels-last convolution
    # and the next block's sum: conv_layout.py)
    perm = _common_transpose(instr)
    if perm is None:
        return None
    inverse = [perm.index(d) for d in range(len(perm))]
    operands = []
    for o in instr.operands:
        if o.op is Op.TRANSPOSE:
            operands.append(o.operands[0])
        else:
            operands.append(b.transpose(o, inverse) if o.array_shape.rank else o)
    return b.transpose(_permuted(b, instr, operands, inverse), perm)


def _common_transpose(instr: Instruction):
    """The permutation of `instr`'s transposed operands when all its array operands are
    transposes by it or broadcasts (at least one a transpose), else None."""
    if not isinstance(instr.shape, Shape):
        return None
    perm = None
    for o in instr.operands:
        if o.op is Op.TRANSPOSE:
            if perm is not None and list(o.dimensions) != perm:
                return None
            perm = list(o.dimensions)
        elif o.array_shape.rank and o.op is not Op.BROADCAST:
            return None
    return perm


@rule(Op.BROADCAST)
def broadcast_chain(b: InsertingBuilder, instr: Instruction):
    # broadcast to the same shape -> x;  broadcast(broadcast(x)) -> one broadcast
    x = instr.operands[0]
    if x.shape == instr.shape and list(instr.dimensions) == list(range(x.array_shape.rank)):
        return x
    if x.op is Op.BROADCAST:
        dims = [instr.dimensions[d] for d in x.dimensions]
        return b.broadcast(x.operands[0], dims, instr.array_shape.dims)
    return None


@rule(Op.CONVERT)
def convert_noop(b: InsertingBuilder, instr: Instruction):
    # convert to the operand's own type -> x
    x = instr.operands[0]
    return x if x.shape == instr.shape else None


@rule(Op.SLICE)
def slice_full(b: InsertingBuilder, instr: Instruction):
    # a slice that keeps everything -> x
    x, s = instr.operands[0], instr.slice
    full = all(
        start == 0 and limit == d and stride == 1
        for start, limit, stride, d in zip(s.starts, s.limits, s.strides, x.array_shape.dims)
    )
    return x if full else None


@rule(Op.PAD)
def pad_nothing(b: InsertingBuilder, instr: Instruction):
    # padding of zero width everywhere -> x
    p = instr.padding
    nothing = not any(p.low) and not any(p.high) and not any(p.interior)
    return instr.operands[0] if nothing else None


@rule(Op.CONCATENATE)
def concatenate_single(b: InsertingBuilder, instr: Instruction):
    # concatenate of one operand -> that operand
    return instr.operands[0] if len(instr.operands) == 1 else None


@rule(Op.NEGATE)
def double_negation(b: InsertingBuilder, instr: Instruction):
    # -(-x) -> x
    x = instr.operands[0]
    return x.operands[0] if x.op is Op.NEGATE else None


ALGSIMP_RULES = [
    add_zero,
    subtract_zero,
    multiply_one,
    divide_by_constant,
    reshape_chain,
    transpose_chain,
    transpose_toward_operands,
    transpose_toward_users,
    broadcast_chain,
    convert_noop,
    slice_full,
    pad_nothing,
    concatenate_single,
    double_negation,
]


class AlgebraicSimplifier:
    name = "algsimp"

    def run(self, module) -> bool:
        return rewrite(module, ALGSIMP_RULES)
