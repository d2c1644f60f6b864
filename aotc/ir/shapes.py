"""Shape inference: the shape rules, `rule(instr) -> shape`, one per op family.

A rule reads the operands' shapes and the instruction's attributes.  For the
ops whose result cannot be derived from operands (parameter, constant, iota,
reshape, broadcast, convert, ...) the instruction carries its shape and the
rule only checks it.  Each op's `OP_DEFS` row names its rule (so this module
knows no opcodes); the builder calls them to fill in shapes, the parser and
the verifier to check shapes.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, TypeVar

from ..errors import ShapeError
from .types import AnyShape, DType, Shape, TupleShape

if TYPE_CHECKING:
    from .module import Instruction

T = TypeVar("T")


def infer_shape(instr: Instruction) -> AnyShape:
    """The shape `instr`'s op gives its operands and attributes; ShapeError if they do not fit."""
    return instr.op.shape_rule(instr)


def _check(cond: bool, instr: Instruction, message: str) -> None:
    if not cond:
        operands = ", ".join(str(o.shape) for o in instr.operands)
        raise ShapeError(f"{instr.op.text}({operands}): {message}")


def _present(value: T | None, instr: Instruction, message: str) -> T:
    """`value`, refused with `message` where the instruction lacks it."""
    _check(value is not None, instr, message)
    assert value is not None  # _check raised otherwise; says so to the type checker
    return value


def _arr(instr: Instruction, i: int) -> Shape:
    shape = instr.operands[i].shape
    _check(isinstance(shape, Shape), instr, f"operand {i} must be an array, got {shape}")
    assert isinstance(shape, Shape)
    return shape


def _flags(x: Shape) -> list[bool]:
    """Each dim's bounded flag (Shape.dynamic), False for all of a static shape."""
    return list(x.dynamic) or [False] * x.rank


def _merged(*shapes: Shape) -> list[bool]:
    """The flags of arrays of equal dims combined elementwise: a dim bounded in any of
    them is bounded in the result (a static operand of the bound's extent is read at
    the first extents, as a broadcast to the bound is)."""
    return [any(flags) for flags in zip(*(_flags(x) for x in shapes))]


def _static_dims(instr: Instruction, x: Shape, dims, what: str) -> None:
    """Refuse where one of `dims` of `x` is bounded: the op's index map there would
    read the extent, which only the run knows."""
    bounded = [d for d in dims if x.is_dynamic(d)]
    _check(not bounded, instr, f"{what} bounded dim {bounded[0] if bounded else ''}")


def given(instr: Instruction) -> AnyShape:
    _check(instr.shape is not None, instr, "needs an explicit result shape")
    return instr.shape


def _given_array(instr: Instruction) -> Shape:
    """`given` for the ops whose result is an array."""
    given(instr)
    return instr.array_shape


def rng_state(instr: Instruction) -> Shape:
    _check(instr.index is not None and instr.index > 0, instr, "needs a positive delta=")
    return Shape(DType.U64, (2,))


def unary(instr: Instruction) -> Shape:
    return _arr(instr, 0)


def bitwise_unary(instr: Instruction) -> Shape:
    x = _arr(instr, 0)
    _check(not x.dtype.is_float, instr, "needs an integer or pred operand")
    return x


def is_finite(instr: Instruction) -> Shape:
    x = _arr(instr, 0)
    _check(x.dtype.is_float, instr, "needs a floating-point operand")
    return x.with_dtype(DType.PRED)


def binary(instr: Instruction) -> Shape:
    x, y = _arr(instr, 0), _arr(instr, 1)
    _check(
        x.static() == y.static(), instr, "operands must have equal shapes (broadcast explicitly)"
    )
    return x.with_dims(x.dims, _merged(x, y))


def bitwise_binary(instr: Instruction) -> Shape:
    x = binary(instr)
    _check(not x.dtype.is_float, instr, "needs integer or pred operands")
    return x


def compare(instr: Instruction) -> Shape:
    x, y = _arr(instr, 0), _arr(instr, 1)
    _check(x.static() == y.static(), instr, "operands must have equal shapes")
    _check(instr.direction is not None, instr, "needs direction=")
    return Shape(DType.PRED, x.dims, tuple(_merged(x, y)))


def select(instr: Instruction) -> Shape:
    p, x, y = _arr(instr, 0), _arr(instr, 1), _arr(instr, 2)
    _check(p.dtype is DType.PRED, instr, "predicate must be pred")
    _check(x.static() == y.static(), instr, "branches must have equal shapes")
    _check(p.dims == x.dims, instr, "predicate dims must equal the branches' dims")
    return x.with_dims(x.dims, _merged(p, x, y))


def clamp(instr: Instruction) -> Shape:
    lo, x, hi = _arr(instr, 0), _arr(instr, 1), _arr(instr, 2)
    for bound in (lo, hi):
        _check(bound.dtype == x.dtype, instr, "bounds must have the operand's dtype")
        _check(bound.dims in ((), x.dims), instr, "bounds must be scalars or the operand's shape")
    return x.with_dims(x.dims, _merged(x, *(b for b in (lo, hi) if b.dims == x.dims)))


def convert(instr: Instruction) -> Shape:
    out = _given_array(instr)
    x = _arr(instr, 0)
    _check(out.dims == x.dims, instr, "convert keeps dims")
    return out.with_dims(out.dims, x.dynamic)


def bitcast_convert(instr: Instruction) -> Shape:
    out, x = _given_array(instr), _arr(instr, 0)
    _check(out.dims == x.dims and out.dtype.bits == x.dtype.bits, instr, "needs equal widths")
    return out.with_dims(out.dims, x.dynamic)


def broadcast(instr: Instruction) -> Shape:
    out, x = _given_array(instr), _arr(instr, 0)
    dims = instr.dimensions
    _check(dims is not None and len(dims) == x.rank, instr, "dimensions= must map every dim")
    assert dims is not None
    _check(out.dtype == x.dtype, instr, "broadcast keeps dtype")
    _check(list(dims) == sorted(set(dims)), instr, "dimensions= must be increasing")
    flags = _flags(out)
    for i, d in enumerate(dims):
        _check(0 <= d < out.rank and out.dims[d] == x.dims[i], instr, f"dim {i} does not fit")
        flags[d] = flags[d] or x.is_dynamic(i)
    return out.with_dims(out.dims, flags)


def reshape(instr: Instruction) -> Shape:
    out, x = _given_array(instr), _arr(instr, 0)
    _check(out.dtype == x.dtype and out.size == x.size, instr, f"cannot reshape to {out}")
    return out.with_dims(out.dims, _reshaped_flags(instr, x, out))


def _reshaped_flags(instr: Instruction, x: Shape, out: Shape) -> list[bool]:
    """The result's bounded flags: in each run of dims (`reshape_groups`) with bounded
    operand dims, the run's first non-unit result dim is bounded (its values are the
    run's, in order, at the first extents; where the bounded dim is not the run's major
    one, or several are, the padder moves them there: `relayout` in
    passes/bounded_dims.py).  The given flags are kept."""
    flags = _flags(out)
    for ins, outs in reshape_groups(x.dims, out.dims):
        bounded = [i for i in ins if x.is_dynamic(i)]
        if not bounded:
            continue
        _check(outs != (), instr, f"bounded dim {bounded[0]} has no result dim")
        first = next((j for j in outs if out.dims[j] != 1), outs[0])
        flags[first] = True
    return flags


def reshape_moves_values(x: Shape, out: Shape) -> bool:
    """Whether a reshape of bounded dims moves values in the padded layout: some run of
    dims holds several bounded dims, or one under a non-unit dim."""
    for ins, _ in reshape_groups(x.dims, out.dims):
        bounded = [i for i in ins if x.is_dynamic(i)]
        if len(bounded) > 1 or any(x.dims[i] != 1 for i in ins if bounded and i < bounded[0]):
            return True
    return False


def reshape_groups(in_dims, out_dims) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """A reshape's dims in the smallest runs of equal size: (operand dims, result dims)
    pairs in order, cut wherever the elements before both sides are equally many, so
    that each run's index is its own (a merge, a split, or unit dims added or taken);
    unit dims join the run after them."""
    if 0 in in_dims or 0 in out_dims:
        return [(tuple(range(len(in_dims))), tuple(range(len(out_dims))))]
    in_cuts, out_cuts = _first_prefixes(in_dims), _first_prefixes(out_dims)
    cuts = sorted((in_cuts[size], out_cuts[size]) for size in in_cuts.keys() & out_cuts.keys())
    cuts.append((len(in_dims), len(out_dims)))
    return [
        (tuple(range(i, next_i)), tuple(range(j, next_j)))
        for (i, j), (next_i, next_j) in itertools.pairwise(cuts)
        if (i, j) != (next_i, next_j)
    ]


def _first_prefixes(dims) -> dict[int, int]:
    """{elements before position k: the first such k}."""
    first: dict[int, int] = {}
    size = 1
    for k, extent in enumerate(dims):
        first.setdefault(size, k)
        size *= extent
    first.setdefault(size, len(dims))
    return first


def transpose(instr: Instruction) -> Shape:
    x = _arr(instr, 0)
    perm = instr.dimensions
    _check(perm is not None and sorted(perm) == list(range(x.rank)), instr, "bad permutation")
    assert perm is not None
    return x.with_dims((x.dims[p] for p in perm), (x.is_dynamic(p) for p in perm))


def slice_(instr: Instruction) -> Shape:
    x, s = _arr(instr, 0), instr.slice
    _check(s is not None and len(s.starts) == x.rank, instr, "slice= must cover every dim")
    assert s is not None
    dims = []
    for d, start, limit, stride in zip(x.dims, s.starts, s.limits, s.strides, strict=True):
        _check(0 <= start <= limit <= d and stride >= 1, instr, f"bad slice [{start}:{limit}]")
        dims.append(-(-(limit - start) // stride))
    # a bounded dim only as a prefix (its extent then at most the limit)
    cut = [d for d in range(x.rank) if s.starts[d] != 0 or s.strides[d] != 1]
    _static_dims(instr, x, cut, "slices")
    return x.with_dims(dims, x.dynamic)


def _starts(instr: Instruction, first: int, rank: int) -> None:
    """Operands `first`... are the start indices: one integer scalar per dim, one dtype."""
    starts = [_arr(instr, i) for i in range(first, len(instr.operands))]
    _check(len(starts) == rank, instr, f"needs {rank} start indices, one per dim")
    _check(all(s.dims == () for s in starts), instr, "start indices must be scalars")
    _check(
        all(s.dtype.is_int and s.dtype == starts[0].dtype for s in starts),
        instr,
        "start indices must be integers of one dtype",
    )


def dynamic_slice(instr: Instruction) -> Shape:
    _check(len(instr.operands) >= 1, instr, "needs an operand")
    x, sizes = _arr(instr, 0), instr.dynamic_slice_sizes
    _starts(instr, 1, x.rank)
    _check(
        sizes is not None and len(sizes) == x.rank,
        instr,
        "dynamic_slice_sizes= must cover every dim",
    )
    assert sizes is not None
    for d, (size, extent) in enumerate(zip(sizes, x.dims)):
        _check(0 <= size <= extent, instr, f"slice size {size} exceeds dim {d}")
    _static_dims(instr, x, range(x.rank), "slices")
    return x.with_dims(sizes)


def dynamic_update_slice(instr: Instruction) -> Shape:
    _check(len(instr.operands) >= 2, instr, "needs an operand and an update")
    x, update = _arr(instr, 0), _arr(instr, 1)
    _starts(instr, 2, x.rank)
    _check(
        update.dtype == x.dtype and update.rank == x.rank,
        instr,
        "the update must have the operand's dtype and rank",
    )
    for d, (size, extent) in enumerate(zip(update.dims, x.dims)):
        _check(size <= extent, instr, f"the update exceeds dim {d}")
    _static_dims(instr, x, range(x.rank), "updates")
    _static_dims(instr, update, range(x.rank), "updates by")
    return x


def concatenate(instr: Instruction) -> Shape:
    _check(len(instr.operands) >= 1, instr, "needs operands")
    shapes = [_arr(instr, i) for i in range(len(instr.operands))]
    (axis,) = instr.dimensions
    first = shapes[0]
    _check(0 <= axis < first.rank, instr, "bad dimension")
    for s in shapes:
        same = all(a == b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != axis)
        _check(s.dtype == first.dtype and s.rank == first.rank and same, instr, "mismatch")
    dims = list(first.dims)
    dims[axis] = sum(s.dims[axis] for s in shapes)
    flags = [any(x.is_dynamic(d) for x in shapes) for d in range(first.rank)]
    # along a bounded dim too: the padder moves the pieces together (bounded_dims.py)
    return first.with_dims(dims, flags)


def pad(instr: Instruction) -> Shape:
    x, value, p = _arr(instr, 0), _arr(instr, 1), instr.padding
    _check(value.dims == () and value.dtype == x.dtype, instr, "padding value must be a scalar")
    _check(p is not None and len(p.low) == x.rank, instr, "padding= must cover every dim")
    assert p is not None
    dims = []
    for d, lo, hi, interior in zip(x.dims, p.low, p.high, p.interior, strict=True):
        _check(interior >= 0, instr, "interior padding must be >= 0")
        size = lo + hi + d + max(d - 1, 0) * interior
        _check(size >= 0, instr, "padding leaves a negative size")
        dims.append(size)
    padded = [d for d in range(x.rank) if (p.low[d], p.high[d], p.interior[d]) != (0, 0, 0)]
    _static_dims(instr, x, padded, "pads")
    return x.with_dims(dims, x.dynamic)


def reverse(instr: Instruction) -> Shape:
    x = _arr(instr, 0)
    dims = _present(instr.dimensions, instr, "needs dimensions=")
    _check(all(0 <= d < x.rank for d in dims), instr, "bad dimensions")
    _static_dims(instr, x, dims, "reverses")
    return x


def _split_variadic(instr: Instruction) -> tuple[list[Shape], list[Shape]]:
    n = len(instr.operands)
    _check(n % 2 == 0 and n > 0, instr, "needs inputs then as many init values")
    shapes = [_arr(instr, i) for i in range(n)]
    inputs, inits = shapes[: n // 2], shapes[n // 2 :]
    for x, init in zip(inputs, inits):
        _check(init.dims == () and init.dtype == x.dtype, instr, "init values must be scalars")
        _check(x.dims == inputs[0].dims, instr, "inputs must have equal dims")
    _check(len(instr.called) == 1, instr, "needs to_apply=")
    return inputs, inits


def _tuple_or_single(shapes: list[Shape]) -> AnyShape:
    return shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))


def reduce(instr: Instruction) -> AnyShape:
    inputs, _ = _split_variadic(instr)
    dims = _present(instr.dimensions, instr, "needs dimensions=")
    rank = inputs[0].rank
    _check(all(0 <= d < rank for d in dims) and len(set(dims)) == len(dims), instr, "bad dims")
    kept = [i for i in range(rank) if i not in dims]
    flags = [any(x.is_dynamic(i) for x in inputs) for i in kept]
    return _tuple_or_single([x.with_dims([x.dims[i] for i in kept], flags) for x in inputs])


def windowed_output_dims(in_dims, window) -> list[int]:
    """Output extents of a window sliding over `in_dims` (reduce-window, convolution)."""
    out = []
    for i, d in enumerate(in_dims):
        dilated = (d - 1) * window.lhs_dilation[i] + 1 if d > 0 else 0
        padded = dilated + window.pad_low[i] + window.pad_high[i]
        extent = (window.size[i] - 1) * window.rhs_dilation[i] + 1
        out.append(0 if padded < extent else (padded - extent) // window.stride[i] + 1)
    return out


def reduce_window(instr: Instruction) -> AnyShape:
    inputs, _ = _split_variadic(instr)
    w = instr.window
    _check(w is not None and w.rank == inputs[0].rank, instr, "window must cover every dim")
    assert w is not None
    dims = windowed_output_dims(inputs[0].dims, w)
    windowed = [d for d in range(w.rank) if not w.is_identity(d)]
    for x in inputs:
        _static_dims(instr, x, windowed, "slides a window along")
    return _tuple_or_single([x.with_dims(dims, x.dynamic) for x in inputs])


def dot(instr: Instruction) -> Shape:
    lhs, rhs = _arr(instr, 0), _arr(instr, 1)
    d = _present(instr.dot, instr, "needs dot dimension numbers")
    _check(len(d.lhs_batch) == len(d.rhs_batch), instr, "batch dims differ in number")
    _check(len(d.lhs_contracting) == len(d.rhs_contracting), instr, "contracting dims differ")
    for side, used, rank in (
        ("lhs", d.lhs_batch + d.lhs_contracting, lhs.rank),
        ("rhs", d.rhs_batch + d.rhs_contracting, rhs.rank),
    ):
        _check(
            _is_dim_set(used, rank), instr, f"{side} dims {list(used)} repeated or not below {rank}"
        )
    for a, b in zip(d.lhs_batch + d.lhs_contracting, d.rhs_batch + d.rhs_contracting):
        _check(lhs.dims[a] == rhs.dims[b], instr, f"lhs dim {a} != rhs dim {b}")
    _check(lhs.dtype == rhs.dtype, instr, "operands must have one dtype")
    lhs_free = [x for i, x in enumerate(lhs.dims) if i not in d.lhs_batch + d.lhs_contracting]
    rhs_free = [x for i, x in enumerate(rhs.dims) if i not in d.rhs_batch + d.rhs_contracting]
    dims = [lhs.dims[i] for i in d.lhs_batch] + lhs_free + rhs_free
    lhs_kept = [i for i in range(lhs.rank) if i not in d.lhs_batch + d.lhs_contracting]
    rhs_kept = [i for i in range(rhs.rank) if i not in d.rhs_batch + d.rhs_contracting]
    flags = [lhs.is_dynamic(a) or rhs.is_dynamic(b) for a, b in zip(d.lhs_batch, d.rhs_batch)]
    flags += [lhs.is_dynamic(i) for i in lhs_kept] + [rhs.is_dynamic(i) for i in rhs_kept]
    dtype = instr.array_shape.dtype if instr.shape is not None else lhs.dtype
    return Shape(dtype, tuple(dims), tuple(flags))


def convolution(instr: Instruction) -> Shape:
    lhs, rhs = _arr(instr, 0), _arr(instr, 1)
    c = _present(instr.conv, instr, "needs window= and dim_labels=")
    w = _present(instr.window, instr, "needs window= and dim_labels=")
    n = len(c.input_spatial)
    _check(lhs.rank == rhs.rank == n + 2 and w.rank == n, instr, "ranks do not fit")
    labels = (
        (c.input_batch, c.input_feature, *c.input_spatial),
        (c.kernel_output_feature, c.kernel_input_feature, *c.kernel_spatial),
        (c.output_batch, c.output_feature, *c.output_spatial),
    )
    _check(all(_is_dim_set(dims, n + 2) for dims in labels), instr, "bad dim_labels")
    _check(instr.feature_group_count >= 1 and instr.batch_group_count >= 1, instr, "groups < 1")
    groups = instr.feature_group_count
    in_features = lhs.dims[c.input_feature]
    out_features = rhs.dims[c.kernel_output_feature]
    _check(in_features % groups == 0, instr, "input features not divisible by groups")
    _check(rhs.dims[c.kernel_input_feature] * groups == in_features, instr, "feature mismatch")
    _check(out_features % groups == 0, instr, "output features not divisible by groups")
    _check(lhs.dims[c.input_batch] % instr.batch_group_count == 0, instr, "batch groups")
    for i, k in enumerate(c.kernel_spatial):
        _check(rhs.dims[k] == w.size[i], instr, "window size != kernel size")
    spatial = windowed_output_dims([lhs.dims[s] for s in c.input_spatial], w)
    dims = [0] * (n + 2)
    dims[c.output_batch] = lhs.dims[c.input_batch] // instr.batch_group_count
    dims[c.output_feature] = out_features
    for i, s in enumerate(c.output_spatial):
        dims[s] = spatial[i]
    _static_dims(instr, lhs, (c.input_feature, *c.input_spatial), "convolves along")
    _static_dims(instr, rhs, range(rhs.rank), "convolves by")
    _check(
        not lhs.is_dynamic(c.input_batch) or instr.batch_group_count == 1,
        instr,
        "groups a bounded batch",
    )
    flags = [False] * (n + 2)
    flags[c.output_batch] = lhs.is_dynamic(c.input_batch)
    dtype = instr.array_shape.dtype if instr.shape is not None else lhs.dtype
    return Shape(dtype, tuple(dims), tuple(flags))


def gather(instr: Instruction) -> Shape:
    operand, indices = _arr(instr, 0), _arr(instr, 1)
    g = _present(instr.gather, instr, "needs gather dimension numbers")
    _check(not indices.dtype.is_float, instr, "indices must be integers")
    _check(len(g.slice_sizes) == operand.rank, instr, "slice_sizes must cover every dim")
    _check(0 <= g.index_vector_dim <= indices.rank, instr, "index_vector_dim out of range")
    _check(_is_dim_set(g.start_index_map, operand.rank), instr, "bad start_index_map")
    removed_dims = (*g.collapsed_slice_dims, *g.operand_batching_dims)
    _check(
        _is_dim_set(removed_dims, operand.rank),
        instr,
        "collapsed_slice_dims and operand_batching_dims must be distinct operand dims",
    )
    # a bounded operand dim where single elements are picked by index (indices past
    # its extent read padding, as out-of-range ones read clamped elements), or where it
    # is taken whole, not indexed (an offset dim, bounded in the result)
    picked = {d for d in g.start_index_map if g.slice_sizes[d] == 1}
    whole = {
        d
        for d in range(operand.rank)
        if d not in g.start_index_map and g.slice_sizes[d] == operand.dims[d]
    }
    _static_dims(instr, operand, set(range(operand.rank)) - picked - whole, "gathers from")
    index_dims = list(indices.dims)
    index_flags = _flags(indices)
    if g.index_vector_dim < indices.rank:
        _check(index_dims[g.index_vector_dim] == len(g.start_index_map), instr, "index vector")
        _static_dims(instr, indices, [g.index_vector_dim], "gathers by the index vector of")
        del index_dims[g.index_vector_dim]
        del index_flags[g.index_vector_dim]
    else:
        _check(len(g.start_index_map) == 1, instr, "implicit index vector needs one start dim")
    removed = set(g.collapsed_slice_dims) | set(g.operand_batching_dims)
    offsets = [s for i, s in enumerate(g.slice_sizes) if i not in removed]
    offset_flags = iter(operand.is_dynamic(i) for i in range(operand.rank) if i not in removed)
    _check(len(offsets) == len(g.offset_dims), instr, "offset_dims do not fit slice_sizes")
    for i, s in enumerate(g.slice_sizes):
        _check(0 <= s <= operand.dims[i], instr, f"slice size {s} exceeds dim {i}")
    rank = len(index_dims) + len(offsets)
    _check(_is_dim_set(g.offset_dims, rank), instr, "bad offset_dims")
    dims, flags, batch, offset = [], [], iter(zip(index_dims, index_flags)), iter(offsets)
    for i in range(rank):
        extent, flag = (next(offset), next(offset_flags)) if i in g.offset_dims else next(batch)
        dims.append(extent)
        flags.append(flag)
    return operand.with_dims(dims, flags)


def _is_dim_set(dims, rank: int) -> bool:
    return all(0 <= d < rank for d in dims) and len(set(dims)) == len(dims)


def scatter(instr: Instruction) -> Shape:
    """XLA scatter: `updates` windows combined into `operand` at `indices`."""
    operand, indices, updates, s = _arr(instr, 0), _arr(instr, 1), _arr(instr, 2), instr.scatter
    _check(s is not None, instr, "needs scatter dimension numbers")
    assert s is not None
    _check(len(instr.called) == 1, instr, "needs to_apply= (the combiner)")
    _check(indices.dtype.is_int, instr, "indices must be integers")
    _check(updates.dtype == operand.dtype, instr, "updates must have the operand's dtype")
    _check(0 <= s.index_vector_dim <= indices.rank, instr, "index_vector_dim out of range")
    scatter_dims = [d for i, d in enumerate(indices.dims) if i != s.index_vector_dim]
    vector = indices.dims[s.index_vector_dim] if s.index_vector_dim < indices.rank else 1
    window = s.update_window_dims
    _check(
        list(window) == sorted(window) and _is_dim_set(window, updates.rank),
        instr,
        "update_window_dims must be increasing dims of the updates",
    )
    removed = s.inserted_window_dims + s.input_batching_dims
    _check(
        _is_dim_set(removed, operand.rank),
        instr,
        "inserted_window_dims and input_batching_dims must be distinct operand dims",
    )
    _check(
        len(window) + len(removed) == operand.rank,
        instr,
        "update_window_dims, inserted_window_dims and input_batching_dims must add up "
        "to the operand's rank",
    )
    _check(
        len(s.scatter_dims_to_operand_dims) == vector,
        instr,
        f"scatter_dims_to_operand_dims needs {vector} entries, the index vector's size",
    )
    _check(
        _is_dim_set(s.scatter_dims_to_operand_dims, operand.rank)
        and not set(s.scatter_dims_to_operand_dims) & set(s.input_batching_dims),
        instr,
        "scatter_dims_to_operand_dims must be distinct, non-batching operand dims",
    )
    batching = s.scatter_indices_batching_dims
    _check(
        len(batching) == len(s.input_batching_dims)
        and _is_dim_set(batching, indices.rank)
        and s.index_vector_dim not in batching,
        instr,
        "scatter_indices_batching_dims must pair input_batching_dims with index dims",
    )
    update_scatter = [d for i, d in enumerate(updates.dims) if i not in window]
    _check(
        update_scatter == scatter_dims,
        instr,
        "the updates' non-window dims must equal the indices' dims (less index_vector_dim)",
    )
    window_operand_dims = [d for d in range(operand.rank) if d not in removed]
    for k, d in enumerate(window_operand_dims):
        extent = updates.dims[window[k]]
        _check(extent <= operand.dims[d], instr, f"update window dim {window[k]} exceeds dim {d}")
    for a, b in zip(s.input_batching_dims, batching):
        _check(operand.dims[a] == indices.dims[b], instr, f"batching dims {a} and {b} differ")
    for x, what in ((operand, "scatters into"), (indices, "scatters by"), (updates, "scatters")):
        _static_dims(instr, x, range(x.rank), what)
    return operand


def sort(instr: Instruction) -> AnyShape:
    """Operands of equal dims sorted together along `dimensions={d}`; one result each."""
    _check(len(instr.operands) >= 1, instr, "needs operands")
    shapes = [_arr(instr, i) for i in range(len(instr.operands))]
    dims = instr.dimensions
    _check(dims is not None and len(dims) == 1, instr, "needs one sort dimension")
    assert dims is not None
    _check(0 <= dims[0] < shapes[0].rank, instr, f"sort dimension {dims[0]} out of range")
    _check(all(s.dims == shapes[0].dims for s in shapes), instr, "operands must have equal dims")
    _check(len(instr.called) == 1, instr, "needs to_apply= (the comparator)")
    # along a bounded dim too: the padder sorts the padding last (passes/bounded_dims.py)
    return _tuple_or_single([x.with_dims(x.dims, _merged(*shapes)) for x in shapes])


def get_dimension_size(instr: Instruction) -> Shape:
    x = _arr(instr, 0)
    dims = instr.dimensions
    _check(dims is not None and len(dims) == 1 and 0 <= dims[0] < x.rank, instr, "bad dimension")
    return Shape(DType.S32, ())


def set_dimension_size(instr: Instruction) -> Shape:
    """Operand 0 with dim `dimensions={d}` bounded by its extent, the run-time extent
    operand 1 (an s32 scalar, at most that)."""
    x, size = _arr(instr, 0), _arr(instr, 1)
    dims = instr.dimensions
    _check(dims is not None and len(dims) == 1 and 0 <= dims[0] < x.rank, instr, "bad dimension")
    assert dims is not None
    _check(size == Shape(DType.S32, ()), instr, "the size must be an s32 scalar")
    flags = _flags(x)
    flags[dims[0]] = True
    return x.with_dims(x.dims, flags)


def tuple_(instr: Instruction) -> TupleShape:
    return TupleShape(tuple(o.shape for o in instr.operands))


def get_tuple_element(instr: Instruction) -> AnyShape:
    t = instr.operands[0].shape
    _check(isinstance(t, TupleShape), instr, "operand must be a tuple")
    _check(0 <= instr.index < len(t.elements), instr, f"index {instr.index} out of range")
    return t.elements[instr.index]


def fusion(instr: Instruction) -> AnyShape:
    _check(len(instr.called) == 1, instr, "needs calls=")
    body = instr.called[0]
    params = body.parameters
    _check(len(params) == len(instr.operands), instr, "operand count != fused parameters")
    for p, o in zip(params, instr.operands):
        _check(p.shape == o.shape, instr, f"fused parameter {p.name} has shape {p.shape}")
    return body.root.shape


def _signature(instr: Instruction, role: str, comp, params: list[AnyShape], root) -> None:
    """Called computation `comp` must take `params` and return `root` (None: any)."""
    have = [p.shape for p in comp.parameters]
    have_root = comp.root.shape if comp.root is not None else None
    if have != params or (root is not None and have_root != root):
        want = ", ".join(str(s) for s in params)
        got = ", ".join(str(s) for s in have)
        _check(
            False,
            instr,
            f"{role} %{comp.name} must be ({want}) -> {root or '...'}, is ({got}) -> {have_root}",
        )


def while_(instr: Instruction) -> AnyShape:
    """condition: S -> pred[], body: S -> S; the result is the final state S."""
    _check(len(instr.called) == 2, instr, "needs condition= and body=")
    state = instr.operands[0].shape
    condition, body = instr.called
    _signature(instr, "condition", condition, [state], Shape(DType.PRED, ()))
    _signature(instr, "body", body, [state], state)
    return state


def conditional(instr: Instruction) -> AnyShape:
    """Branch k takes operand k + 1; all return one shape.  A pred selects between
    two branches (true first), an s32 index among any number."""
    selector = _arr(instr, 0)
    branches = instr.called
    _check(
        selector.dims == () and selector.dtype in (DType.PRED, DType.S32),
        instr,
        "the selector must be a pred[] or s32[] scalar",
    )
    if selector.dtype is DType.PRED:
        _check(len(branches) == 2, instr, "needs true_computation= and false_computation=")
    _check(len(branches) >= 1, instr, "needs branch_computations=")
    _check(len(instr.operands) == 1 + len(branches), instr, "needs one operand per branch")
    result = branches[0].root.shape if branches[0].root is not None else None
    for k, branch in enumerate(branches):
        _signature(instr, f"branch {k}", branch, [instr.operands[k + 1].shape], result)
    return result


def call(instr: Instruction) -> AnyShape:
    _check(len(instr.called) == 1, instr, "needs to_apply=")
    callee = instr.called[0]
    _signature(instr, "callee", callee, [o.shape for o in instr.operands], None)
    return callee.root.shape


def iota(instr: Instruction) -> Shape:
    out = _given_array(instr)
    (dim,) = instr.dimensions
    _check(0 <= dim < out.rank, instr, "iota_dimension out of range")
    return out


def constant(instr: Instruction) -> Shape:
    out = _given_array(instr)
    _check(instr.literal is not None, instr, "needs a literal")
    _check(tuple(instr.literal.shape) == out.dims, instr, "literal does not fit its shape")
    _check(out.is_static, instr, "a constant's dims are static")
    return out
