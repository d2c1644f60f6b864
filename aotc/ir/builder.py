"""The builder: the one way frontends and passes create instructions.

Every method infers the result shape with `shapes.infer_shape` (raising
`ShapeError` on a mismatch), names the instruction uniquely in the module and
appends it to the computation under construction.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .attrs import ConvDims, DotDims, GatherDims, PaddingConfig, ScatterDims, SliceSpec, Window
from .module import Computation, Instruction, Module
from .ops import Direction, Op
from .shapes import infer_shape
from .types import AnyShape, DType, Shape, cast_array


class ComputationBuilder:
    """Builds one computation of `module`; `build(root)` registers it."""

    def __init__(self, module: Module, name: str):
        self.module = module
        self.computation = Computation(module.unique_name(name))
        self.origin: str | None = None  # stamped on new instructions (e.g. ONNX node)

    # -- plumbing ---------------------------------------------------------

    def add(self, op: Op, operands: Sequence[Instruction], shape=None, name=None, **attrs):
        """Create, shape-check and append an instruction."""
        instr = Instruction(op, shape, list(operands), **attrs)
        try:
            instr.shape = infer_shape(instr)
        except Exception:
            instr.operands = []  # never placed: it must not stay in its operands' use-lists
            raise
        instr.name = self.module.unique_name(name or op.text)
        if instr.origin is None:
            instr.origin = self.origin
        self.computation.instructions.append(instr)
        return instr

    def build(self, root: Instruction, entry: bool = False) -> Computation:
        self.computation.root = root
        return self.module.add_computation(self.computation, entry=entry)

    # -- leaves -----------------------------------------------------------

    def parameter(self, number: int, shape: AnyShape, name: str | None = None) -> Instruction:
        return self.add(Op.PARAMETER, [], shape, name=name or f"p{number}", index=number)

    def constant(self, value, dtype: DType | None = None, name=None) -> Instruction:
        array = np.asarray(value)
        dtype = dtype or DType.from_numpy(array.dtype)
        array = cast_array(array, dtype)
        array.setflags(write=False)
        return self.add(Op.CONSTANT, [], Shape(dtype, array.shape), name=name, literal=array)

    def scalar(self, value, dtype: DType) -> Instruction:
        return self.constant(np.asarray(value), dtype)

    def iota(self, shape: Shape, dimension: int) -> Instruction:
        return self.add(Op.IOTA, [], shape, dimensions=(dimension,))

    def rng_state(self, delta: int) -> Instruction:
        """A counter owned by this instruction: each run reads it, then adds `delta`."""
        return self.add(Op.RNG_GET_AND_UPDATE_STATE, [], index=delta)

    # -- elementwise ------------------------------------------------------

    def unary(self, op: Op, x: Instruction) -> Instruction:
        return self.add(op, [x])

    def binary(self, op: Op, x: Instruction, y: Instruction) -> Instruction:
        return self.add(op, [x, y])

    def compare(self, x: Instruction, y: Instruction, direction: Direction) -> Instruction:
        return self.add(Op.COMPARE, [x, y], direction=direction)

    def select(self, pred: Instruction, on_true: Instruction, on_false: Instruction):
        return self.add(Op.SELECT, [pred, on_true, on_false])

    def clamp(self, lo: Instruction, x: Instruction, hi: Instruction) -> Instruction:
        return self.add(Op.CLAMP, [lo, x, hi])

    def convert(self, x: Instruction, dtype: DType) -> Instruction:
        if x.array_shape.dtype is dtype:
            return x
        return self.add(Op.CONVERT, [x], x.array_shape.with_dtype(dtype))

    def bitcast_convert(self, x: Instruction, dtype: DType) -> Instruction:
        return self.add(Op.BITCAST_CONVERT, [x], x.array_shape.with_dtype(dtype))

    # -- data movement ----------------------------------------------------

    def broadcast(self, x: Instruction, dims: Sequence[int], out_dims: Sequence[int]):
        """Place x's dim i at output dim dims[i] of an array with `out_dims`."""
        shape = Shape(x.array_shape.dtype, tuple(out_dims))
        return self.add(Op.BROADCAST, [x], shape, dimensions=tuple(dims))

    def broadcast_to(self, x: Instruction, out_dims: Sequence[int]) -> Instruction:
        """Numpy-style broadcast of x (trailing dims aligned, 1s stretched)."""
        out_dims = tuple(out_dims)
        if x.array_shape.dims == out_dims:
            return x
        offset = len(out_dims) - x.array_shape.rank
        kept = [i for i, d in enumerate(x.array_shape.dims) if d == out_dims[i + offset]]
        if len(kept) != x.array_shape.rank:
            x = self.reshape(x, [x.array_shape.dims[i] for i in kept])
        return self.broadcast(x, [i + offset for i in kept], out_dims)

    def reshape(self, x: Instruction, dims: Sequence[int]) -> Instruction:
        if tuple(dims) == x.array_shape.dims:
            return x
        return self.add(Op.RESHAPE, [x], x.array_shape.with_dims(dims))

    def transpose(self, x: Instruction, perm: Sequence[int]) -> Instruction:
        if list(perm) == list(range(x.array_shape.rank)):
            return x
        return self.add(Op.TRANSPOSE, [x], dimensions=tuple(perm))

    def slice(self, x, starts: Sequence[int], limits: Sequence[int], strides=None):
        strides = strides or [1] * len(starts)
        return self.add(Op.SLICE, [x], slice=SliceSpec(starts, limits, strides))

    def get_dimension_size(self, x: Instruction, dim: int) -> Instruction:
        return self.add(Op.GET_DIMENSION_SIZE, [x], dimensions=(dim,))

    def set_dimension_size(self, x: Instruction, size: Instruction, dim: int) -> Instruction:
        return self.add(Op.SET_DIMENSION_SIZE, [x, size], dimensions=(dim,))

    def dynamic_slice(
        self, x: Instruction, starts: Sequence[Instruction], sizes: Sequence[int]
    ) -> Instruction:
        """The `sizes` block of x at run-time `starts` (scalars), clamped to fit in x."""
        sizes = tuple(int(n) for n in sizes)
        return self.add(Op.DYNAMIC_SLICE, [x, *starts], dynamic_slice_sizes=sizes)

    def dynamic_update_slice(
        self, x: Instruction, update: Instruction, starts: Sequence[Instruction]
    ) -> Instruction:
        """x with `update` written at run-time `starts` (scalars), clamped to fit in x."""
        return self.add(Op.DYNAMIC_UPDATE_SLICE, [x, update, *starts])

    def concatenate(self, xs: Sequence[Instruction], dimension: int) -> Instruction:
        if len(xs) == 1:
            return xs[0]
        return self.add(Op.CONCATENATE, xs, dimensions=(dimension,))

    def pad(self, x: Instruction, value: Instruction, low, high, interior=None):
        interior = interior or [0] * len(low)
        return self.add(Op.PAD, [x, value], padding=PaddingConfig(low, high, interior))

    def reverse(self, x: Instruction, dims: Sequence[int]) -> Instruction:
        return self.add(Op.REVERSE, [x], dimensions=tuple(dims))

    def gather(self, operand: Instruction, indices: Instruction, dims: GatherDims):
        return self.add(Op.GATHER, [operand, indices], gather=dims)

    def scatter(
        self,
        operand: Instruction,
        indices: Instruction,
        updates: Instruction,
        dims: ScatterDims,
        combiner: Computation,
    ) -> Instruction:
        """XLA scatter: `combiner(current, update)` into a copy of `operand`, update windows
        in order; windows not wholly inside the operand are skipped."""
        return self.add(Op.SCATTER, [operand, indices, updates], scatter=dims, called=(combiner,))

    def sort(
        self,
        xs: Sequence[Instruction],
        dimension: int,
        comparator: Computation,
        is_stable: bool = False,
    ) -> Instruction:
        """Sort `xs` together along `dimension` by `comparator` (see `comparator()`);
        one operand gives an array, several a tuple."""
        return self.add(
            Op.SORT, xs, dimensions=(dimension,), called=(comparator,), is_stable=is_stable
        )

    # -- reductions and contractions ----------------------------------------

    def reduce(self, x: Instruction, init: Instruction, dims, reducer: Computation):
        return self.add(Op.REDUCE, [x, init], dimensions=tuple(dims), called=(reducer,))

    def reduce_window(self, x, init, window: Window, reducer: Computation) -> Instruction:
        return self.add(Op.REDUCE_WINDOW, [x, init], window=window, called=(reducer,))

    def dot(self, lhs, rhs, dims: DotDims, dtype: DType | None = None) -> Instruction:
        shape = Shape(dtype, ()) if dtype else None
        return self.add(Op.DOT, [lhs, rhs], shape, dot=dims)

    def convolution(
        self, lhs, rhs, window: Window, dims: ConvDims, groups: int = 1, dtype=None
    ) -> Instruction:
        shape = Shape(dtype, ()) if dtype else None
        return self.add(
            Op.CONVOLUTION, [lhs, rhs], shape, window=window, conv=dims, feature_group_count=groups
        )

    # -- structure --------------------------------------------------------

    def tuple(self, xs: Sequence[Instruction]) -> Instruction:
        return self.add(Op.TUPLE, xs)

    def get_tuple_element(self, x: Instruction, index: int) -> Instruction:
        return self.add(Op.GET_TUPLE_ELEMENT, [x], index=index)

    # -- control flow -------------------------------------------------------

    def while_loop(self, cond: Computation, body: Computation, init: Instruction):
        """`body` applied to the state `init` while `cond` (state -> pred[]) holds."""
        return self.add(Op.WHILE, [init], called=(cond, body))

    def conditional(
        self,
        selector: Instruction,
        branches: Sequence[Computation],
        args: Sequence[Instruction],
    ) -> Instruction:
        """Branch k applied to args[k]; a pred selector picks branches (true, false), an
        s32 index branch k (out of range: the last)."""
        return self.add(Op.CONDITIONAL, [selector, *args], called=tuple(branches))

    def call(self, callee: Computation, args: Sequence[Instruction]) -> Instruction:
        return self.add(Op.CALL, args, called=(callee,))


def comparator(
    module: Module, dtype: DType, direction: Direction, carried: Sequence[DType] = ()
) -> Computation:
    """A sort comparator ordering keys of `dtype` ascending (LT) or descending (GT).

    It takes (key lhs, key rhs) then a (lhs, rhs) pair per `carried` dtype: operands
    sorted along with the keys (e.g. indices) that do not take part in the order.
    Floats are ordered as jax.lax.sort does: -0.0 equals 0.0 and every NaN is one
    value above +inf (last ascending, first descending), by comparing integer keys
    (the bits, with the non-sign bits of negatives flipped), so the order is total
    and the sort well defined.
    Shared per (dtype, direction, carried).
    """
    if direction not in (Direction.LT, Direction.GT):
        raise ValueError(f"a sort comparator needs LT or GT, not {direction.value}")
    suffix = "".join(f"_{dt.text}" for dt in carried)
    name = f"compare_{direction.value.lower()}_{dtype.text}{suffix}"
    for comp in module.computations:
        if comp.name == name:
            return comp
    b = ComputationBuilder(module, name)
    dtypes = [dtype, *carried]
    params = [
        b.parameter(i, Shape(dtypes[i // 2], ()), f"p{i // 2}_{'lr'[i % 2]}")
        for i in range(2 * len(dtypes))
    ]
    lhs, rhs = _total_order_keys(b, params[:2], dtype)
    return b.build(b.compare(lhs, rhs, direction))


_SAME_WIDTH_INT = {16: DType.S16, 32: DType.S32, 64: DType.S64}


def _total_order_keys(b: ComputationBuilder, xs: list[Instruction], dtype: DType) -> list:
    """`xs` themselves for integers; for floats signed integers whose order is the total
    order above (-0.0 made +0.0 and NaNs the canonical +NaN first)."""
    if not dtype.is_float:
        return xs
    if dtype.bits not in _SAME_WIDTH_INT:  # 8- and 4-bit floats: order their f32 values
        xs = [b.convert(x, DType.F32) for x in xs]
        dtype = DType.F32
    int_dtype = _SAME_WIDTH_INT[dtype.bits]
    zero, nan = b.scalar(0, dtype), b.scalar(np.nan, dtype)
    sign_shift = b.scalar(dtype.bits - 1, int_dtype)
    magnitude = b.scalar(2 ** (dtype.bits - 1) - 1, int_dtype)
    keys = []
    for x in xs:
        x = b.select(b.compare(x, zero, Direction.EQ), zero, x)
        x = b.select(b.compare(x, x, Direction.NE), nan, x)
        bits = b.bitcast_convert(x, int_dtype)
        sign = b.binary(Op.SHIFT_RIGHT_ARITHMETIC, bits, sign_shift)
        # negatives: flip all but the sign bit, so larger magnitudes compare smaller
        keys.append(b.binary(Op.XOR, bits, b.binary(Op.AND, sign, magnitude)))
    return keys


def replacer(module: Module, dtype: DType) -> Computation:
    """The scatter combiner `(current, update) -> update` on scalars, shared per dtype."""
    name = f"replace_{dtype.text}"
    for comp in module.computations:
        if comp.name == name:
            return comp
    b = ComputationBuilder(module, name)
    b.parameter(0, Shape(dtype, ()), "current")
    return b.build(b.parameter(1, Shape(dtype, ()), "update"))


def scalar_reducer(module: Module, op: Op, dtype: DType) -> Computation:
    """The computation `(x, y) -> op(x, y)` on scalars, shared per (op, dtype)."""
    name = f"{op.text}_{dtype.text}"
    for comp in module.computations:
        if comp.name == name:
            return comp
    b = ComputationBuilder(module, name)
    x = b.parameter(0, Shape(dtype, ()), "x")
    y = b.parameter(1, Shape(dtype, ()), "y")
    return b.build(b.binary(op, x, y))
