"""Batch-norm and affine scale/shift folding into convolution and dot weights.

Inference batch norm lowers to `(conv(x, W) + b) * s + t` with per-channel
constant vectors.  These rules move the scale into the weights and merge the
shifts, leaving `conv(x, W * s) + (b * s + t)`; constant folding then computes
`W * s` and `b * s + t` once, at compile time.  Unlike algsimp's rules these
reassociate floating-point arithmetic (as every inference compiler does for
batch norm): results agree to rounding, not bit for bit.
"""

from __future__ import annotations

from ..ir import Instruction, Op
from .rewrite import InsertingBuilder, rewrite, rule


def _channel_vector(instr: Instruction) -> tuple[Instruction, int] | None:
    """(vector constant, output dim) if `instr` broadcasts a constant along one dim."""
    if instr.op is not Op.BROADCAST or len(instr.dimensions) != 1:
        return None
    vector = instr.operands[0]
    return (vector, instr.dimensions[0]) if _is_constant_expression(vector) else None


def _is_constant_expression(instr: Instruction) -> bool:
    """Computed from constants only (constant folding will make it one constant)."""
    work, seen = [instr], set()
    while work:
        current = work.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.op is Op.PARAMETER or current.called:
            return False
        work.extend(current.operands)
    return True


def _split(instr: Instruction, wanted: Op, b: InsertingBuilder):
    """(the `wanted` operand, the channel-vector broadcast operand) of a binary op,
    where the `wanted` operand has no other user (rewriting it must not duplicate it)."""
    x, y = instr.operands
    for main, other in ((x, y), (y, x)):
        if main.op is wanted and _channel_vector(other) is not None and _used_once(b, main):
            return main, other
    return None


def _used_once(b: InsertingBuilder, instr: Instruction) -> bool:
    uses = sum(o is instr for user in b.computation.instructions for o in user.operands)
    return uses == 1 and b.computation.root is not instr


def _weight_dim(producer: Instruction, out_dim: int) -> int | None:
    """The weight (operand 1) dim that output dim `out_dim` of a conv/dot comes from."""
    weights = producer.operands[1]
    if not _is_constant_expression(weights):
        return None
    if producer.op is Op.CONVOLUTION:
        c = producer.conv
        return c.kernel_output_feature if out_dim == c.output_feature else None
    d = producer.dot
    lhs_rank = producer.operands[0].array_shape.rank
    lhs_free = lhs_rank - len(d.lhs_batch) - len(d.lhs_contracting)
    first_rhs = len(d.lhs_batch) + lhs_free
    if out_dim < first_rhs:
        return None
    rhs_free = [
        i for i in range(weights.array_shape.rank) if i not in d.rhs_batch + d.rhs_contracting
    ]
    return rhs_free[out_dim - first_rhs]


@rule(Op.MULTIPLY)
def scale_into_weights(b: InsertingBuilder, instr: Instruction):
    # conv(x, W) * bcast(s) -> conv(x, W * bcast(s));  likewise dot along an rhs free dim
    for wanted in (Op.CONVOLUTION, Op.DOT):
        found = _split(instr, wanted, b)
        if found is None:
            continue
        producer, scale = found
        vector, out_dim = _channel_vector(scale)
        weight_dim = _weight_dim(producer, out_dim)
        if weight_dim is None:
            continue
        weights = producer.operands[1]
        scaled = b.binary(
            Op.MULTIPLY, weights, b.broadcast(vector, [weight_dim], weights.shape.dims)
        )
        return b.add(
            producer.op,
            [producer.operands[0], scaled],
            producer.shape,
            window=producer.window,
            conv=producer.conv,
            dot=producer.dot,
            feature_group_count=producer.feature_group_count,
            batch_group_count=producer.batch_group_count,
        )
    return None


@rule(Op.MULTIPLY)
def distribute_scale_over_shift(b: InsertingBuilder, instr: Instruction):
    # (y + bcast(c)) * bcast(s) -> y * bcast(s) + bcast(c * s), when y is a conv or dot
    found = _split(instr, Op.ADD, b)
    if found is None:
        return None
    shifted, scale = found
    inner = _split(shifted, Op.CONVOLUTION, b) or _split(shifted, Op.DOT, b)
    if inner is None:
        return None
    y, shift = inner
    (c, c_dim), (s, s_dim) = _channel_vector(shift), _channel_vector(scale)
    if c_dim != s_dim or c.shape != s.shape:
        return None
    scaled = b.binary(Op.MULTIPLY, y, scale)
    merged = b.broadcast(b.binary(Op.MULTIPLY, c, s), [c_dim], instr.array_shape.dims)
    return b.binary(Op.ADD, scaled, merged)


@rule(Op.ADD)
def merge_shifts(b: InsertingBuilder, instr: Instruction):
    # (y + bcast(c1)) + bcast(c2) -> y + bcast(c1 + c2)
    found = _split(instr, Op.ADD, b)
    if found is None:
        return None
    inner, outer = found
    pair = None
    x0, x1 = inner.operands
    for y, shift in ((x0, x1), (x1, x0)):
        if _channel_vector(shift) is not None:
            pair = (y, shift)
            break
    if pair is None:
        return None
    y, shift = pair
    (c1, d1), (c2, d2) = _channel_vector(shift), _channel_vector(outer)
    if d1 != d2 or c1.shape != c2.shape:
        return None
    merged = b.broadcast(b.binary(Op.ADD, c1, c2), [d1], instr.array_shape.dims)
    return b.binary(Op.ADD, y, merged)


SCALEFOLD_RULES = [scale_into_weights, distribute_scale_over_shift, merge_shifts]


class ScaleFolding:
    name = "scalefold"

    def run(self, module) -> bool:
        return rewrite(module, SCALEFOLD_RULES)
