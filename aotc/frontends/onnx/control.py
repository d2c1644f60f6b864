"""Control flow: If, Loop and Scan, lowered inline (`ctx.lower_graph`) by unrolling.

An If whose condition is a compile-time constant lowers only the branch taken; otherwise
both, merged with `select` where their outputs agree in shape, else it specialises on the
condition's inputs.  A Loop runs its body once per iteration, unrolled: its trip count
must be a compile-time constant (or specialised), and its condition is evaluated per
iteration where constant; a runtime condition masks the carried values with `select`
(no scan outputs) or specialises.  Scan unrolls over its static sequence length.
Values may change shape from one iteration to the next, since each iteration is its own
code.  A Scan whose iterations are independent (its states pass through unchanged) and
whose body is elementwise ops and reductions is lowered once for all rows instead
(mapped_scan.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ...errors import AotcError, ModelError, ShapeError, UnsupportedError
from ...ir import DType, Instruction, Op
from ...ir.evaluate import evaluate_constant
from .boundary import declared_dims
from .dtypes import to_dtype
from .extents import unbounded
from .helpers import normalize_axis
from .mapped_scan import mapped_scan
from .registry import NodeContext, onnx_op
from .sequence import NO_VALUE, SequenceValue, Value, as_tensor

# unrolling beyond this many iterations would make code too large to be worth it
MAX_UNROLLED_ITERATIONS = 4096


def _known(cond: Instruction) -> bool | None:
    """A condition's value where it is a compile-time constant, else None."""
    value = evaluate_constant(cond)
    if value is None:
        return None
    value = np.asarray(value)
    if value.size != 1:
        raise ModelError(f"a condition must hold one element, got shape {list(value.shape)}")
    return bool(value.reshape(-1)[0])


def _scalar_pred(ctx: NodeContext, cond: Instruction) -> Instruction:
    if cond.array_shape.size != 1:
        raise ModelError(f"a condition must hold one element, got {cond.shape}")
    return ctx.b.reshape(ctx.b.convert(cond, DType.PRED), ())


def _select(ctx: NodeContext, pred: Instruction, a: Value, b: Value) -> Value | None:
    """`pred ? a : b` for values of one structure and shape, else None."""
    if isinstance(a, Instruction) and isinstance(b, Instruction):
        if a.shape != b.shape:
            return _select_extents(ctx, pred, a, b)
        return ctx.b.select(ctx.b.broadcast(pred, [], a.array_shape.dims), a, b)
    if isinstance(a, SequenceValue) and isinstance(b, SequenceValue) and len(a) == len(b):
        items = [_select(ctx, pred, x, y) for x, y in zip(a, b)]
        return None if None in items else SequenceValue(items)
    return NO_VALUE if a is NO_VALUE and b is NO_VALUE else None


def _select_extents(ctx: NodeContext, pred: Instruction, a: Instruction, b: Instruction):
    """`pred ? a : b` for arrays of one dtype and rank whose dims differ (or are
    bounded): both at the larger bounds, the dims that differ bounded by the extent of
    the one chosen at run time; None for other arrays."""
    sa, sb = a.array_shape, b.array_shape
    if sa.dtype != sb.dtype or sa.rank != sb.rank:
        return None
    builder = ctx.b
    dims = [max(x, y) for x, y in zip(sa.dims, sb.dims)]
    padded = []
    for x in (a, b):
        static = unbounded(ctx, x)
        high = [d - e for d, e in zip(dims, x.array_shape.dims)]
        zero = builder.scalar(0, sa.dtype)
        padded.append(builder.pad(static, zero, [0] * sa.rank, high) if any(high) else static)
    chosen = builder.select(builder.broadcast(pred, [], dims), *padded)
    for d in range(sa.rank):
        if sa.dims[d] == sb.dims[d] and not (sa.is_dynamic(d) or sb.is_dynamic(d)):
            continue
        extents = [_extent(builder, x, d) for x in (a, b)]
        chosen = builder.set_dimension_size(chosen, builder.select(pred, *extents), d)
    return chosen


def _extent(b, x: Instruction, dim: int) -> Instruction:
    if x.array_shape.is_dynamic(dim):
        return b.get_dimension_size(x, dim)
    return b.scalar(x.array_shape.dims[dim], DType.S32)


def _specialise(ctx: NodeContext, cond: Instruction, why: str) -> None:
    """Raise InputValuesRequired for the inputs `cond` depends on."""
    ctx.value(cond, f"the condition ({why})")
    raise AssertionError("a condition that is not constant is a runtime value")


@onnx_op("If", since=7)
def if_(ctx: NodeContext, cond: Value) -> list[Value]:
    cond = as_tensor(cond, "the condition")
    branches = ctx.required_attr("then_branch"), ctx.required_attr("else_branch")
    taken = _known(cond)
    if taken is not None:
        return ctx.lower_graph(branches[0] if taken else branches[1], [])
    try:
        then_out = ctx.lower_graph(branches[0], [])
        else_out = ctx.lower_graph(branches[1], [])
    except AotcError as e:
        # a branch needs values or shapes fixed: specialising on the condition picks one
        _specialise(ctx, cond, f"a branch cannot be compiled without it: {e}")
    pred = _scalar_pred(ctx, cond)
    merged = [_select(ctx, pred, t, e) for t, e in zip(then_out, else_out)]
    if len(then_out) != len(else_out) or any(m is None for m in merged):
        _specialise(ctx, cond, "the branches' outputs differ in shape")
    return merged


@onnx_op("Loop", since=7)
def loop(ctx: NodeContext, trip: Value | None, cond: Value | None, *initial: Value) -> list:
    body: onnx.GraphProto = ctx.required_attr("body")
    n_carried = len(initial)
    n_scan = len(body.output) - 1 - n_carried
    if n_scan < 0:
        raise ModelError(f"the body has {len(body.output)} outputs for {n_carried} carried values")
    trips = None if trip is None else int(ctx.const(0).reshape(-1)[0])
    b = ctx.b
    running = b.scalar(True, DType.PRED) if cond is None else as_tensor(cond, "cond")
    carried = list(initial)
    scans: list[list[Instruction]] = [[] for _ in range(n_scan)]
    mask: Instruction | None = None  # whether iterations still run, once that is runtime data
    iteration = 0
    while trips is None or iteration < trips:
        known = _known(running)
        if known is False:
            break
        if known is None:
            if n_scan or trips is None or trips > MAX_UNROLLED_ITERATIONS:
                why = "scan outputs" if n_scan else f"trip count {trips}"
                _specialise(ctx, running, f"it decides the iteration count; {why}")
            step = _scalar_pred(ctx, running)
            mask = step if mask is None else b.binary(Op.AND, mask, step)
        if iteration >= MAX_UNROLLED_ITERATIONS:
            raise UnsupportedError(
                f"the loop runs over {MAX_UNROLLED_ITERATIONS} iterations; aotc unrolls loops"
            )
        counter = b.scalar(iteration, DType.S64)
        outputs = ctx.lower_graph(body, [counter, running, *carried])
        running = as_tensor(outputs[0], "the body's condition")
        updated = outputs[1 : 1 + n_carried]
        if mask is not None:
            updated = [_masked(ctx, mask, new, old) for new, old in zip(updated, carried)]
        carried = updated
        for values, value in zip(scans, outputs[1 + n_carried :]):
            values.append(as_tensor(value, "a scan output"))
        iteration += 1
    stacked = [
        _stack(ctx, values, 0) if values else _empty_scan(ctx, body.output[1 + n_carried + k])
        for k, values in enumerate(scans)
    ]
    return [*carried, *stacked]


def _masked(ctx: NodeContext, mask: Instruction, new: Value, old: Value) -> Value:
    merged = _select(ctx, mask, new, old)
    if merged is None:
        _specialise(ctx, mask, "a carried value changes shape while the loop may have ended")
    return merged


def _stack(ctx: NodeContext, values: Sequence[Instruction], axis: int) -> Instruction:
    """`values` (one shape) stacked along a new dimension `axis`."""
    dims = values[0].array_shape.dims
    if any(v.shape != values[0].shape for v in values):
        shapes = sorted({str(v.shape) for v in values})
        raise ShapeError(f"scan outputs differ in shape across iterations: {shapes}")
    rows = [ctx.b.reshape(v, dims[:axis] + (1,) + dims[axis:]) for v in values]
    return ctx.b.concatenate(rows, axis)


def _empty_scan(ctx: NodeContext, info: onnx.ValueInfoProto) -> Instruction:
    """A scan output of zero iterations: shape [0, ...] from the body's declared type."""
    tensor = info.type.tensor_type
    declared = declared_dims(tensor)
    declared = [None] if declared is None else declared
    dims = [d for d in declared if isinstance(d, int)]
    if len(dims) != len(declared):
        raise UnsupportedError(
            f"the loop runs no iteration and scan output '{info.name}' has no static shape"
        )
    dtype = to_dtype(tensor.elem_type, f"scan output '{info.name}'")
    return ctx.b.constant(np.zeros([0, *dims], dtype.numpy), dtype)


def _scan_steps(
    ctx: NodeContext,
    states: Sequence[Value],
    xs: Sequence[Instruction],
    axes: Sequence[int],
    reverse: Sequence[int],
):
    """Run the Scan body over the scan inputs' slices; (final states, per-output steps)."""
    body: onnx.GraphProto = ctx.required_attr("body")
    lengths = {x.array_shape.dims[axis] for x, axis in zip(xs, axes)}
    if len(lengths) != 1:
        raise ShapeError(f"scan inputs have different sequence lengths {sorted(lengths)}")
    length = lengths.pop()
    if length > MAX_UNROLLED_ITERATIONS:
        raise UnsupportedError(
            f"the scan runs {length} iterations; aotc unrolls at most {MAX_UNROLLED_ITERATIONS}"
        )
    states = list(states)
    steps: list[list[Instruction]] = [[] for _ in range(len(body.output) - len(states))]
    for t in range(length):
        slices = []
        for x, axis, backwards in zip(xs, axes, reverse):
            at = length - 1 - t if backwards else t
            dims = x.array_shape.dims
            starts = [at if a == axis else 0 for a in range(len(dims))]
            limits = [at + 1 if a == axis else d for a, d in enumerate(dims)]
            piece = ctx.b.slice(x, starts, limits)
            slices.append(ctx.b.reshape(piece, dims[:axis] + dims[axis + 1 :]))
        outputs = ctx.lower_graph(body, [*states, *slices])
        states = outputs[: len(states)]
        for values, value in zip(steps, outputs[len(states) :]):
            values.append(as_tensor(value, "a scan output"))
    return states, steps


def _scan_output(ctx: NodeContext, values: list[Instruction], axis: int, backwards: bool):
    if not values:
        raise UnsupportedError("a scan over zero iterations is not supported")
    return _stack(ctx, values[::-1] if backwards else values, axis)


@onnx_op("Scan", since=9)
def scan(ctx: NodeContext, *inputs: Value) -> list[Value]:
    m = ctx.required_attr("num_scan_inputs")
    n = len(inputs) - m
    states, xs = inputs[:n], [as_tensor(x, "a scan input") for x in inputs[n:]]
    axes = ctx.attr("scan_input_axes") or [0] * m
    axes = [normalize_axis(a, x.array_shape.rank) for a, x in zip(axes, xs)]
    reverse = ctx.attr("scan_input_directions") or [0] * m
    k = len(ctx.required_attr("body").output) - n
    out_axes = ctx.attr("scan_output_axes") or [0] * k
    out_reverse = ctx.attr("scan_output_directions") or [0] * k
    mapped = mapped_scan(ctx, states, xs, axes, reverse, out_axes, out_reverse)
    if mapped is not None:
        return mapped
    final, steps = _scan_steps(ctx, states, xs, axes, reverse)
    outputs = []
    for values, axis, backwards in zip(steps, out_axes, out_reverse):
        rank = values[0].shape.rank + 1 if values else 1
        outputs.append(_scan_output(ctx, values, normalize_axis(axis, rank), backwards))
    return [*final, *outputs]


@onnx_op("Scan", since=8, until=8)
def scan8(ctx: NodeContext, lens: Value | None, *inputs: Value) -> list[Value]:
    """Scan-8: every input has a leading batch dimension; each batch row is its own scan."""
    m = ctx.required_attr("num_scan_inputs")
    n = len(inputs) - m
    tensors = [as_tensor(x, "a Scan-8 input") for x in inputs]
    batch = tensors[0].array_shape.dims[0]
    reverse = ctx.attr("directions") or [0] * m
    if lens is not None:
        full = tensors[n].shape.dims[1]
        if any(v != full for v in ctx.const_ints(0)):
            raise UnsupportedError("sequence_lens shorter than the scan inputs are not supported")
    rows = []
    for row in range(batch):
        sliced = []
        for x in tensors:
            dims = x.array_shape.dims
            piece = ctx.b.slice(x, [row] + [0] * (len(dims) - 1), [row + 1, *dims[1:]])
            sliced.append(ctx.b.reshape(piece, dims[1:]))
        final, steps = _scan_steps(ctx, sliced[:n], sliced[n:], [0] * m, reverse)
        rows.append([*final, *(_scan_output(ctx, values, 0, False) for values in steps)])
    return [
        _stack(ctx, [as_tensor(r[i], "a Scan-8 output") for r in rows], 0)
        for i in range(len(rows[0]))
    ]
