"""Random bits as integer IR: Philox4x32-10 and ThreeFry2x32, bit for bit as XLA's.

Both generators are counter based, so with the key fixed at compile time and
the counter a value (a constant, an operand, or the draw's own
`rng-get-and-update-state`), the bits are plain arithmetic on iotas: adds,
xors, rotations and 32x32->64-bit multiplies (xla/hlo/builder/lib/prng.cc
spells out the same steps).  `uniform` and `normal` turn Philox bits into
floats.  Both frontends build on it: the ONNX random ops, and XLA's `rng` and
`rng-bit-generator`, which the HLO frontend expands into these ops.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedError
from .builder import ComputationBuilder
from .module import Instruction
from .ops import Direction, Op
from .types import DType, Shape

U32, U64 = DType.U32, DType.U64
_THREEFRY_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # key increments per round
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # round multipliers


class BitOps:
    """Integer arithmetic with constants broadcast to the other operand's dims."""

    def __init__(self, b: ComputationBuilder):
        self.b = b

    def const(self, value: int, dtype: DType, dims=()) -> Instruction:
        scalar = self.b.scalar(value % (1 << dtype.bits), dtype)
        return self.b.broadcast(scalar, [], dims) if dims else scalar

    def like(self, x: Instruction, y: Instruction | int) -> Instruction:
        """`y` as an operand for `x`: a constant of x's type, or y broadcast to x's dims."""
        if isinstance(y, int):
            return self.const(y, x.array_shape.dtype, x.array_shape.dims)
        if y.array_shape.dims != x.array_shape.dims:
            return self.b.broadcast(y, [], x.array_shape.dims)  # scalars only
        return y

    def op(self, op: Op, x: Instruction, y: Instruction | int) -> Instruction:
        if isinstance(y, Instruction) and x.array_shape.dims == () and y.array_shape.dims != ():
            x = self.b.broadcast(x, [], y.array_shape.dims)
        return self.b.binary(op, x, self.like(x, y))

    def add(self, x, y):
        return self.op(Op.ADD, x, y)

    def xor(self, x, y):
        return self.op(Op.XOR, x, y)

    def or_(self, x, y):
        return self.op(Op.OR, x, y)

    def shr(self, x, y):
        return self.op(Op.SHIFT_RIGHT_LOGICAL, x, y)

    def shl(self, x, y):
        return self.op(Op.SHIFT_LEFT, x, y)

    def mul(self, x, y):
        return self.op(Op.MULTIPLY, x, y)

    def u32(self, x: Instruction) -> Instruction:
        return self.b.convert(x, U32)  # u64 -> u32 keeps the low half

    def u64(self, x: Instruction) -> Instruction:
        return self.b.convert(x, U64)

    def halves(self, x: Instruction) -> list[Instruction]:
        """u64 -> [low u32, high u32]."""
        return [self.u32(x), self.u32(self.shr(x, 32))]

    def join(self, low: Instruction, high: Instruction) -> Instruction:
        """[low u32, high u32] -> u64."""
        return self.or_(self.u64(low), self.shl(self.u64(high), 32))

    def element(self, x: Instruction, i: int) -> Instruction:
        return self.b.reshape(self.b.slice(x, [i], [i + 1]), [])

    def interleave(self, parts: list[Instruction], count: int, dims) -> Instruction:
        """parts[0][0], parts[1][0], ..., parts[0][1], ...: the first `count`, as `dims`."""
        n = parts[0].array_shape.dims[0]
        columns = [self.b.reshape(p, [n, 1]) for p in parts]
        flat = self.b.reshape(self.b.concatenate(columns, 1), [n * len(parts)])
        return self.b.reshape(self.b.slice(flat, [0], [count]), dims)


# significant bits of each float type: a uniform draw is k * 2^-bits, exact in the type
SIGNIFICANT_BITS = {DType.F16: 11, DType.BF16: 8, DType.F32: 24, DType.F64: 53}


def random_bits(b: ComputationBuilder, key: int, out: Shape) -> Instruction:
    """Philox bits of `out` under `key`, fresh each run: the counter is the draw's own
    rng-get-and-update-state (0 on the first run after loading)."""
    return philox_bits(b, key, b.rng_state(philox_blocks(out)), out)


def uniform(b: ComputationBuilder, key: int, dtype: DType, dims) -> Instruction:
    """Draws from [0, 1) of float `dtype`: multiples of 2^-bits, computed where exact."""
    bits = SIGNIFICANT_BITS.get(dtype)
    if bits is None:
        raise UnsupportedError(f"random values of type {dtype.text} (only float types)")
    o = BitOps(b)
    word = U64 if bits > 32 else U32
    work = DType.F64 if bits > 32 else DType.F32
    raw = random_bits(b, key, Shape(word, tuple(dims)))
    top = b.convert(o.shr(raw, word.bits - bits), work)
    unit = b.binary(Op.MULTIPLY, top, _float_like(b, top, 2.0**-bits))
    return unit if work is dtype else b.convert(unit, dtype)


def normal(b: ComputationBuilder, key: int, dtype: DType, dims) -> Instruction:
    """Standard normal draws by Box-Muller: sqrt(-2 ln(1 - u1)) cos(2 pi u2)."""
    work = DType.F64 if dtype is DType.F64 else DType.F32
    pairs = uniform(b, key, work, (2, *dims))
    rank = len(dims)
    u1, u2 = (
        b.reshape(b.slice(pairs, [i] + [0] * rank, [i + 1, *dims]), list(dims)) for i in (0, 1)
    )
    log = b.unary(Op.LOG, b.binary(Op.SUBTRACT, _float_like(b, u1, 1), u1))  # never log 0
    radius = b.unary(Op.SQRT, b.binary(Op.MULTIPLY, log, _float_like(b, u1, -2)))
    angle = b.binary(Op.MULTIPLY, u2, _float_like(b, u2, 2 * math.pi))
    z = b.binary(Op.MULTIPLY, radius, b.unary(Op.COS, angle))
    return z if work is dtype else b.convert(z, dtype)


def _float_like(b: ComputationBuilder, x: Instruction, value: float) -> Instruction:
    return b.broadcast(b.scalar(value, x.array_shape.dtype), [], x.array_shape.dims)


def philox_blocks(out: Shape) -> int:
    """How far the bits of `out` advance a Philox counter (one step per 4 words)."""
    return math.ceil(out.size * (2 if out.dtype.bits == 64 else 1) / 4)


def philox_bits(b: ComputationBuilder, key: int, counter: Instruction, out: Shape) -> Instruction:
    """Philox4x32-10 bits of `out` (u32 or u64) under `key` from `counter` (u64[2]: low,
    high): the bits XLA's rng-bit-generator gives for the state (key, low, high)."""
    o = BitOps(b)
    key_instr = o.b.constant(np.array([key % (1 << 64)], np.uint64), U64)
    state = o.b.concatenate([key_instr, counter], 0)
    bits, _ = philox(o, o.element(key_instr, 0), state, out)
    return bits


# -- Philox4x32 ------------------------------------------------------------------------


def philox(o: BitOps, key: Instruction, state: Instruction, out: Shape):
    """Bits of `out`'s width (u32 below 32) and the state after them (without the key)."""
    if state.array_shape.dims[0] >= 3:
        counter = o.b.slice(state, [1], [3])
    else:  # XLA reads a 2-word state reversed: counter = (state[1], key)
        counter = o.b.reverse(state, [0])
    count = out.size
    if out.dtype.bits == 64:
        words, counter = _philox_words(o, key, counter, 2 * count)
        parts = [o.join(words[0], words[1]), o.join(words[2], words[3])]
    else:
        parts, counter = _philox_words(o, key, counter, count)
    if state.array_shape.dims[0] < 3:
        counter = o.b.slice(counter, [0], [1])
    return o.interleave(parts, count, out.dims), counter


def _philox_words(o: BitOps, key: Instruction, counter: Instruction, words: int):
    """Four u32[n] (n = words / 4, rounded up) of Philox4x32 on counter + 0..n-1, and
    counter + n; the 128-bit counter is (low u64, high u64)."""
    n = math.ceil(words / 4)
    low, high = o.element(counter, 0), o.element(counter, 1)
    position = o.b.iota(Shape(U64, (n,)), 0)
    new_low = o.add(low, position)
    carried = o.b.compare(new_low, o.like(new_low, low), Direction.LT)
    new_high = o.b.select(carried, o.like(new_low, o.add(high, 1)), o.like(new_low, high))
    x = [*o.halves(new_low), *o.halves(new_high)]
    k = o.halves(key)
    for _ in range(10):
        product0 = o.mul(o.u64(x[0]), _PHILOX_M[0])
        product1 = o.mul(o.u64(x[2]), _PHILOX_M[1])
        x = [
            o.xor(o.xor(o.u32(o.shr(product1, 32)), x[1]), k[0]),
            o.u32(product1),
            o.xor(o.xor(o.u32(o.shr(product0, 32)), x[3]), k[1]),
            o.u32(product0),
        ]
        k = [o.add(k[0], _PHILOX_W[0]), o.add(k[1], _PHILOX_W[1])]
    after_low = o.add(low, n)
    wrapped = o.b.compare(after_low, low, Direction.LT)
    after_high = o.b.select(wrapped, o.add(high, 1), high)
    return x, o.b.concatenate([o.b.reshape(after_low, [1]), o.b.reshape(after_high, [1])], 0)


# -- ThreeFry2x32 ----------------------------------------------------------------------


def threefry(o: BitOps, key: Instruction, counter: Instruction, out: Shape):
    """Bits of `out`'s width (u32 below 32) and the counter after them (u64[1])."""
    k = o.halves(key)
    if out.dtype.bits == 64:
        inputs, counter = _threefry_inputs(o, counter, out.dims)
        x = _threefry2x32(o, inputs, k)
        return o.join(x[0], x[1]), counter
    # one 2x32 block gives two words: half of the shape each, joined along a split dim
    dims = list(out.dims)
    if not dims:
        half, split = [1], 0
    else:
        even = [i for i, d in enumerate(dims) if d % 2 == 0]
        split = even[0] if even else dims.index(max(dims))
        half = [*dims[:split], (dims[split] + 1) // 2, 1, *dims[split + 1 :]]
    inputs, counter = _threefry_inputs(o, counter, half)
    x = _threefry2x32(o, inputs, k)
    if not dims:
        return o.b.reshape(x[0], []), counter
    joined = o.b.concatenate(x, split + 1 if dims else 0)
    padded = [*dims[:split], half[split] * 2, *dims[split + 1 :]]
    result = o.b.reshape(joined, padded)
    if padded != dims:
        result = o.b.slice(result, [0] * len(dims), dims)
    return result, counter


def _threefry_inputs(o: BitOps, counter: Instruction, dims):
    """(low u32, high u32) of counter + the row-major position of each element (dims of
    extent 1 skipped), and counter + the element count."""
    position = o.b.broadcast(o.b.reshape(counter, []), [], dims)
    stride = 1
    for i in reversed(range(len(dims))):
        if dims[i] < 2:
            continue
        position = o.add(position, o.mul(o.b.iota(Shape(U64, tuple(dims)), i), stride))
        stride *= dims[i]
    return o.halves(position), o.add(counter, math.prod(dims))


def _threefry2x32(o: BitOps, x: list[Instruction], key: list[Instruction]) -> list[Instruction]:
    ks = [key[0], key[1], o.xor(o.xor(o.const(0x1BD11BDA, U32), key[0]), key[1])]
    x = [o.add(x[0], ks[0]), o.add(x[1], ks[1])]
    for block in range(5):
        for rotation in _THREEFRY_ROTATIONS[4 * (block % 2) : 4 * (block % 2) + 4]:
            x0 = o.add(x[0], x[1])
            rotated = o.or_(o.shl(x[1], rotation), o.shr(x[1], 32 - rotation))
            x = [x0, o.xor(x0, rotated)]
        x = [o.add(x[0], ks[(block + 1) % 3]), o.add(o.add(x[1], ks[(block + 2) % 3]), block + 1)]
    return x
