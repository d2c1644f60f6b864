"""The StableHLO op table: `LOWERINGS[op name](site, operands)` builds the op in IR.

Each entry reads the op's attributes in both spellings (pretty `dims = [1]`,
generic `broadcast_dimensions = array<i64: 1>`) and builds the instruction the
HLO text frontend builds for the same XLA op; the ops the IR lacks go through
that frontend's expansions (`hlo.expansions.EXPANSIONS`).  CHLO's ops are
`chlo.py`'s.  An op not in the table is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import ModelError, UnsupportedError
from ...ir import (
    ConvDims,
    Direction,
    DotDims,
    GatherDims,
    Instruction,
    Op,
    ScatterDims,
    TupleShape,
    Window,
    scalar_reducer,
)
from ...ir.ops import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE
from ..hlo.expansions import EXPANSIONS
from .chlo import CHLO_LOWERINGS
from .lowering import OpSite, free_values
from .syntax import Block
from .values import Dense, DialectAttr, dense_array, fields, inner, value

LowerOp = Callable[[OpSite, list[Instruction]], "Instruction | list[Instruction]"]


def _ints(site: OpSite, *names: str, default=None) -> tuple[int, ...]:
    found = site.attribute(*names, default=default)
    if hasattr(found, "tolist"):
        found = found.tolist()
    if not isinstance(found, (list, tuple)) or not all(_is_int(x) for x in found):
        raise site.fail(f"{names[0]} must be a list of integers, not {found}", ModelError)
    return tuple(int(x) for x in found)


def _int(site: OpSite, *names: str, default=None) -> int:
    found = site.attribute(*names, default=default)
    if not _is_int(found):
        raise site.fail(f"{names[0]} must be an integer, not {found}", ModelError)
    return int(found)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _elementwise(op: Op) -> LowerOp:
    return lambda site, args: site.b.add(op, args)


def _constant(site: OpSite, args):
    dense = site.attribute("value")
    if not isinstance(dense, Dense):
        raise site.fail("expects a dense<...> value")
    shape = site.result_shape
    return site.b.constant(dense_array(site.lowering.cur, dense, shape), shape.dtype)


def _iota(site: OpSite, args):
    return site.b.iota(site.result_shape, _int(site, "dim", "iota_dimension"))


def _broadcast_in_dim(site: OpSite, args):
    """The IR's broadcast, after a reshape drops the size-1 dims StableHLO stretches."""
    (x,) = args
    dims = _ints(site, "dims", "broadcast_dimensions")
    out = site.result_shape.dims
    source = x.array_shape.dims
    kept = [i for i, d in enumerate(dims) if i < len(source) and source[i] == out[d]]
    if len(kept) != len(source):
        x = site.b.reshape(x, [source[i] for i in kept])
        dims = tuple(dims[i] for i in kept)
    return site.b.broadcast(x, dims, out)


def _reshape(site: OpSite, args):
    return site.b.reshape(args[0], site.result_shape.dims)


def _transpose(site: OpSite, args):
    return site.b.transpose(args[0], _ints(site, "dims", "permutation"))


def _convert(site: OpSite, args):
    return site.b.convert(args[0], site.result_shape.dtype)


def _bitcast_convert(site: OpSite, args):
    shape = site.result_shape
    widened = EXPANSIONS["bitcast-convert"](site, shape, args, {})
    return widened or site.b.add(Op.BITCAST_CONVERT, args, shape)


def _slice(site: OpSite, args):
    written = [p for p in site.op.positional if isinstance(p, list)]
    if written:  # [0:2, 1:4:2]
        bounds = [b if isinstance(b, tuple) else (b, b + 1) for b in written[0]]
        starts = tuple(int(b[0]) for b in bounds)
        limits = tuple(int(b[1]) for b in bounds)
        strides = tuple(int(b[2]) if len(b) > 2 else 1 for b in bounds)
    else:
        starts, limits = _ints(site, "start_indices"), _ints(site, "limit_indices")
        strides = _ints(site, "strides", default=[1] * len(starts))
    return site.b.slice(args[0], starts, limits, strides)


def _dynamic_slice(site: OpSite, args):
    return site.b.dynamic_slice(args[0], args[1:], _ints(site, "sizes", "slice_sizes"))


def _dynamic_update_slice(site: OpSite, args):
    return site.b.dynamic_update_slice(args[0], args[1], args[2:])


def _concatenate(site: OpSite, args):
    return site.b.concatenate(args, _int(site, "dim", "dimension"))


def _pad(site: OpSite, args):
    low = _ints(site, "low", "edge_padding_low")
    high = _ints(site, "high", "edge_padding_high")
    interior = _ints(site, "interior", "interior_padding", default=[0] * len(low))
    return site.b.pad(args[0], args[1], low, high, interior)


def _reverse(site: OpSite, args):
    return site.b.reverse(args[0], _ints(site, "dims", "dimensions"))


def _enum(site: OpSite, position: int, name: str) -> str | None:
    """`compare GT, ..., FLOAT` (words) or `comparison_direction = #stablehlo<...>`."""
    attr = site.attribute(name, required=False)
    if isinstance(attr, DialectAttr):
        return attr.word
    words = site.op.words
    return words[position] if position < len(words) else None


def _compare(site: OpSite, args):
    written = _enum(site, 0, "comparison_direction")
    try:
        direction = Direction(written)
    except ValueError:
        raise site.fail(f"comparison direction {written}", ModelError) from None
    kind = _enum(site, 1, "compare_type")
    attributes = {"type": kind, "direction": direction}
    total_order = EXPANSIONS["compare"](site, site.result_type, args, attributes)
    return total_order or site.b.compare(args[0], args[1], direction)


def _select(site: OpSite, args):
    return site.b.select(*args)


def _clamp(site: OpSite, args):
    return site.b.clamp(*args)


def _dot_general(site: OpSite, args):
    numbers = site.attribute("dot_dimension_numbers", required=False)
    if isinstance(numbers, DialectAttr):
        f = fields(site.lowering.cur, numbers)
        dims = DotDims(
            f.get("lhs_batching_dimensions", []),
            f.get("rhs_batching_dimensions", []),
            f.get("lhs_contracting_dimensions", []),
            f.get("rhs_contracting_dimensions", []),
        )
    else:
        batch = site.attribute("batching_dims", default=([], []))
        contracting = site.attribute("contracting_dims", default=([], []))
        dims = DotDims(batch[0], batch[1], contracting[0], contracting[1])
    return site.b.dot(args[0], args[1], dims, site.result_shape.dtype)


def _dot(site: OpSite, args):
    lhs, rhs = args
    dims = DotDims((), (), (lhs.array_shape.rank - 1,), (0,) if rhs.array_shape.rank else ())
    return site.b.dot(lhs, rhs, dims, site.result_shape.dtype)


def conv_dims(site: OpSite, labels) -> ConvDims:
    """`[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]` -> the IR's dimension numbers."""
    if isinstance(labels, DialectAttr):
        labels = value(inner(site.lowering.cur, labels))
    if not (isinstance(labels, tuple) and len(labels) == 3):
        raise site.fail("cannot read the dimension numbers", ModelError)
    lhs, rhs, out = ([str(x) for x in side] for side in labels)
    rank = len(lhs) - 2
    try:
        spatial = [str(k) for k in range(rank)]
        return ConvDims(
            lhs.index("b"),
            lhs.index("f"),
            tuple(lhs.index(k) for k in spatial),
            rhs.index("i"),
            rhs.index("o"),
            tuple(rhs.index(k) for k in spatial),
            out.index("b"),
            out.index("f"),
            tuple(out.index(k) for k in spatial),
        )
    except ValueError:
        raise site.fail(f"cannot read the dimension numbers {labels}", ModelError) from None


def _padding_pairs(site: OpSite, *names: str, rank: int) -> tuple[tuple[int, ...], ...]:
    """`pad = [[1, 1], [0, 0]]` or `padding = dense<...> : tensor<2x2xi64>` -> (low, high)."""
    pairs = site.attribute(*names, default=[[0, 0]] * rank)
    pairs = pairs.tolist() if hasattr(pairs, "tolist") else pairs
    return tuple(int(p[0]) for p in pairs), tuple(int(p[1]) for p in pairs)


def _convolution(site: OpSite, args):
    lhs, rhs = args
    dims = conv_dims(site, site.attribute("dim_numbers", "dimension_numbers"))
    window = site.attribute("window", default={})
    rank = len(dims.kernel_spatial)
    ones = [1] * rank
    site.attributes.update(window)  # pretty: window = {stride = [..], pad = [[..]]}
    low, high = _padding_pairs(site, "pad", "padding", rank=rank)
    if any(site.attribute("reverse", "window_reversal", default=[False] * rank)):
        raise site.fail("window reversal is not supported")
    return site.b.add(
        Op.CONVOLUTION,
        [lhs, rhs],
        site.result_shape.with_dims(()),
        window=Window(
            tuple(rhs.array_shape.dims[d] for d in dims.kernel_spatial),
            _ints(site, "stride", "window_strides", default=ones),
            low,
            high,
            _ints(site, "lhs_dilate", "lhs_dilation", default=ones),
            _ints(site, "rhs_dilate", "rhs_dilation", default=ones),
        ),
        conv=dims,
        feature_group_count=_int(site, "feature_group_count", default=1),
        batch_group_count=_int(site, "batch_group_count", default=1),
    )


def _results(site: OpSite, instr: Instruction) -> list[Instruction]:
    """A tuple-shaped instruction's elements; an array's itself."""
    if isinstance(instr.shape, TupleShape):
        return [site.b.get_tuple_element(instr, i) for i in range(len(instr.shape.elements))]
    return [instr]


def _reducer(site: OpSite, dtype) -> object:
    """`applies stablehlo.add` (pretty) or the op's region."""
    words = site.op.words
    if "applies" in words:
        applied = (
            words[words.index("applies") + 1] if words.index("applies") + 1 < len(words) else ""
        )
        op = _REDUCER_OPS.get(applied)
        if op is None:
            raise site.fail(f"reducer {applied}")
        return scalar_reducer(site.lowering.module, op, dtype)
    return site.scalar_region(0, "reducer")


def _reduce(site: OpSite, args):
    n = len(args) // 2
    if "init" in site.op.words:  # pretty: (%x init: %c), (%y init: %d)
        args = args[0::2] + args[1::2]
    dims = _ints(site, "dimensions")
    if "applies" in site.op.words and n != 1:
        raise site.fail("applies with several operands", ModelError)
    reducer = _reducer(site, args[0].array_shape.dtype)
    reduced = site.b.add(Op.REDUCE, args, dimensions=dims, called=(reducer,))
    return _results(site, reduced)


def _window(site: OpSite, rank: int, sizes: str = "window_dimensions") -> Window:
    ones = [1] * rank
    low, high = _padding_pairs(site, "padding", rank=rank)
    return Window(
        _ints(site, sizes),
        _ints(site, "window_strides", default=ones),
        low,
        high,
        _ints(site, "base_dilations", default=ones),
        _ints(site, "window_dilations", default=ones),
    )


def _reduce_window(site: OpSite, args):
    window = _window(site, args[0].array_shape.rank)
    reducer = _reducer(site, args[0].array_shape.dtype)
    return _results(site, site.b.add(Op.REDUCE_WINDOW, args, window=window, called=(reducer,)))


def _select_and_scatter(site: OpSite, args):
    select = site.scalar_region(0, "select")
    scatter = site.scalar_region(1, "scatter")
    attributes = {
        "window": _window(site, args[0].array_shape.rank),
        "select": (select.name,),
        "scatter": (scatter.name,),
    }
    return site.expand("select-and-scatter", site.result_type, args, attributes)


def _gather(site: OpSite, args):
    f = fields(site.lowering.cur, site.attribute("dimension_numbers"))
    dims = GatherDims(
        f.get("offset_dims", []),
        f.get("collapsed_slice_dims", []),
        f.get("start_index_map", []),
        f.get("index_vector_dim", 0),
        _ints(site, "slice_sizes"),
        f.get("operand_batching_dims", []),
        f.get("start_indices_batching_dims", []),
    )
    return site.b.gather(args[0], args[1], dims)


def _scatter(site: OpSite, args):
    if len(args) != 3:
        raise site.fail("scatter of several operands")
    f = fields(site.lowering.cur, site.attribute("scatter_dimension_numbers"))
    dims = ScatterDims(
        f.get("update_window_dims", []),
        f.get("inserted_window_dims", []),
        f.get("scatter_dims_to_operand_dims", []),
        f.get("index_vector_dim", 0),
        f.get("input_batching_dims", []),
        f.get("scatter_indices_batching_dims", []),
    )
    combiner = site.scalar_region(0, "combiner")
    return site.b.scatter(args[0], args[1], args[2], dims, combiner)


def _sort(site: OpSite, args):
    comparator = site.scalar_region(0, "comparator")
    dimension = _int(site, "dimension", default=-1)
    dimension %= args[0].array_shape.rank
    stable = bool(site.attribute("is_stable", default=False))
    return _results(site, site.b.sort(args, dimension, comparator, stable))


def _while(site: OpSite, args):
    n = len(args)
    cond, body = site.region(0), site.region(1)
    if site.op.bindings:  # pretty: the regions' arguments are the %iterArg bindings
        arguments = [(name, a.shape) for name, a in zip(site.op.bindings, args)]
        cond, body = Block(arguments, cond.operations), Block(arguments, body.operations)
    captured = sorted(free_values(cond) | free_values(body))
    outer = [site.lowering.value(site.op, site.scope, name) for name in captured]
    state = TupleShape(tuple(a.shape for a in args + outer))
    lowering = site.lowering
    condition = lowering.tuple_region(cond, "while_cond", state, n, captured, lambda b, r, c: r[0])
    step = lowering.tuple_region(
        body, "while_body", state, n, captured, lambda b, r, c: b.tuple(r + c)
    )
    loop = site.b.while_loop(condition, step, site.b.tuple(args + outer))
    return [site.b.get_tuple_element(loop, i) for i in range(n)]


def _branches(site: OpSite, selector: Instruction):
    """case (an index, out of range: the last branch) and if (pred: true, false)."""
    comps, operands = [], []
    for k, branch in enumerate(site.op.regions):
        captured = sorted(free_values(branch))
        outer = [site.lowering.value(site.op, site.scope, name) for name in captured]
        state = TupleShape(tuple(a.shape for a in outer))
        comps.append(
            site.lowering.tuple_region(
                branch,
                f"branch_{k}",
                state,
                0,
                captured,
                lambda b, r, c: r[0] if len(r) == 1 else b.tuple(r),
            )
        )
        operands.append(site.b.tuple(outer))
    if not comps:
        raise site.fail("needs branches", ModelError)
    return _results(site, site.b.conditional(selector, comps, operands))


_RNG_ALGORITHMS = {"DEFAULT": "rng_default", "PHILOX": "rng_philox", "THREE_FRY": "rng_three_fry"}


def _rng_bit_generator(site: OpSite, args):
    written = site.attribute("rng_algorithm", "algorithm", default="DEFAULT")
    written = written.word if isinstance(written, DialectAttr) else written
    shape = TupleShape(tuple(site.op.result_types))
    attributes = {"algorithm": _RNG_ALGORITHMS.get(written, written)}
    return _results(site, site.expand("rng-bit-generator", shape, args, attributes))


def _reduce_precision(site: OpSite, args):
    written = site.attribute("format", required=False)  # pretty: format = e5m10
    if isinstance(written, str) and written.startswith("e") and "m" in written:
        exponent, mantissa = (int(x) for x in written[1:].split("m"))
    else:
        exponent, mantissa = _int(site, "exponent_bits"), _int(site, "mantissa_bits")
    attributes = {"exponent_bits": exponent, "mantissa_bits": mantissa}
    return site.expand("reduce-precision", site.result_type, args, attributes)


def _get_tuple_element(site: OpSite, args):
    written = [p for p in site.op.positional if isinstance(p, list)]
    index = written[0][0] if written else _int(site, "index")
    return site.b.get_tuple_element(args[0], int(index))


def _custom_call(site: OpSite, args):
    target = site.op.symbol or site.attribute("call_target_name", default="?")
    raise site.lowering.fail(site.op, f"stablehlo.custom_call @{target} is not supported")


def _call(site: OpSite, args):
    callee = site.op.symbol or site.attribute("callee")
    return site.lowering.inline(site.b, site.op, callee, args)


def _composite(site: OpSite, args):
    return site.lowering.inline(site.b, site.op, site.attribute("decomposition"), args)


def _unsupported(reason: str) -> LowerOp:
    def refuse(site: OpSite, args):
        raise site.fail(reason, UnsupportedError)

    return refuse


_REDUCER_OPS = {
    f"stablehlo.{op}": Op.from_text(op)
    for op in ("add", "multiply", "maximum", "minimum", "and", "or", "xor")
}

_UNARY = ("stablehlo.convert", "stablehlo.bitcast_convert", "stablehlo.broadcast_in_dim")
# operand counts of the ops that take a fixed number (the others check their own)
ARITY: dict[str, int] = {
    **{f"stablehlo.{op.text.replace('-', '_')}": 1 for op in (*UNARY_ELEMENTWISE, Op.IS_FINITE)},
    **{f"stablehlo.{op.text.replace('-', '_')}": 2 for op in BINARY_ELEMENTWISE},
    **dict.fromkeys(_UNARY, 1),
    **dict.fromkeys(("stablehlo.reshape", "stablehlo.transpose", "stablehlo.slice"), 1),
    **dict.fromkeys(("stablehlo.reverse", "stablehlo.rng_bit_generator"), 1),
    **dict.fromkeys(("stablehlo.reduce_precision", "stablehlo.get_tuple_element"), 1),
    **dict.fromkeys(("stablehlo.case", "stablehlo.if"), 1),
    **dict.fromkeys(("stablehlo.constant", "stablehlo.iota"), 0),
    **dict.fromkeys(("stablehlo.compare", "stablehlo.pad", "stablehlo.gather"), 2),
    **dict.fromkeys(("stablehlo.dot", "stablehlo.dot_general", "stablehlo.convolution"), 2),
    **dict.fromkeys(("stablehlo.select", "stablehlo.clamp", "stablehlo.scatter"), 3),
    "stablehlo.select_and_scatter": 3,
    **dict.fromkeys(CHLO_LOWERINGS, 1),
}

LOWERINGS: dict[str, LowerOp] = {
    **{
        f"stablehlo.{op.text.replace('-', '_')}": _elementwise(op)
        for op in (*UNARY_ELEMENTWISE, *BINARY_ELEMENTWISE, Op.IS_FINITE)
    },
    "stablehlo.constant": _constant,
    "stablehlo.iota": _iota,
    "stablehlo.broadcast_in_dim": _broadcast_in_dim,
    "stablehlo.reshape": _reshape,
    "stablehlo.transpose": _transpose,
    "stablehlo.convert": _convert,
    "stablehlo.bitcast_convert": _bitcast_convert,
    "stablehlo.slice": _slice,
    "stablehlo.dynamic_slice": _dynamic_slice,
    "stablehlo.dynamic_update_slice": _dynamic_update_slice,
    "stablehlo.concatenate": _concatenate,
    "stablehlo.pad": _pad,
    "stablehlo.reverse": _reverse,
    "stablehlo.compare": _compare,
    "stablehlo.select": _select,
    "stablehlo.clamp": _clamp,
    "stablehlo.dot_general": _dot_general,
    "stablehlo.dot": _dot,
    "stablehlo.convolution": _convolution,
    "stablehlo.reduce": _reduce,
    "stablehlo.reduce_window": _reduce_window,
    "stablehlo.select_and_scatter": _select_and_scatter,
    "stablehlo.gather": _gather,
    "stablehlo.scatter": _scatter,
    "stablehlo.sort": _sort,
    "stablehlo.while": _while,
    "stablehlo.case": lambda site, args: _branches(site, args[0]),
    "stablehlo.if": lambda site, args: _branches(site, args[0]),
    "stablehlo.rng_bit_generator": _rng_bit_generator,
    "stablehlo.reduce_precision": _reduce_precision,
    "stablehlo.optimization_barrier": lambda site, args: list(args),
    "stablehlo.tuple": lambda site, args: site.b.tuple(args),
    "stablehlo.get_tuple_element": _get_tuple_element,
    "stablehlo.custom_call": _custom_call,
    "stablehlo.composite": _composite,
    "func.call": _call,
    "call": _call,
    "stablehlo.rng": _unsupported("the stateful rng is not supported (use rng_bit_generator)"),
    "stablehlo.fft": _unsupported("fft is not supported"),
    "stablehlo.triangular_solve": _unsupported("triangular_solve is not supported"),
    "stablehlo.cholesky": _unsupported("cholesky is not supported"),
    **CHLO_LOWERINGS,
}
