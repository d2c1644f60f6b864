"""Parallel loops: a kernel's outer loops split across runtime_c's thread pool.

A kernel is `kernel(inputs, outputs, arena)`.  When its loop nest is big
enough, the nest's body moves into an internal function
`body(args, begin, end, slot)`, args pointing at the kernel's three
pointers, and the kernel calls `aotc_parallel_for(n, body, args)`: the
runtime runs chunks [begin, end) of the n outer iterations on its threads,
or inline when the model runs on one thread.  The slot (below
min(threads, n)) tells the threads of one loop apart, for scratch kept per
thread.  Rules emit into the body exactly as into
a kernel: the context is rebound to the body's builder and pointers.
`parallel_chunks` is the general form (gemm_split.py shares out GEMMs with it):
any code run on chunks of a range, kernel values passed along as i64s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.elemental import split_index
from ..llvm.extents import span
from ..llvm.lltypes import I64, PTR, VOID, i64
from ..llvm.loops import for_range, loop_nest

# loops over fewer elements than this run on the calling thread: a pool dispatch costs
# a few microseconds
MIN_PARALLEL_ELEMENTS = 1 << 14

# split off enough leading iterations that chunks balance over the threads
MIN_OUTER_ITERATIONS = 64

BODY_TYPE = ir.FunctionType(VOID, [PTR, I64, I64, I64])
PARALLEL_FOR_TYPE = ir.FunctionType(VOID, [I64, PTR, PTR])


@contextmanager
def parallel_loop_nest(
    ctx: EmitContext,
    dims: Sequence[int],
    name: str = "i",
    work: int | None = None,
    counts: Sequence[ir.Value | None] | None = None,
) -> Iterator[list[ir.Value]]:
    """`loop_nest(dims)` whose leading dims are shared out to the threads when the nest
    does at least MIN_PARALLEL_ELEMENTS elements of `work` (default: its own size);
    `counts`: per dim, the i64 count of positions to run (None: the whole dim)."""
    with parallel_loop_nest_passing(ctx, dims, (), name, work, counts) as (index, _):
        yield index


@contextmanager
def parallel_loop_nest_passing(
    ctx: EmitContext,
    dims: Sequence[int],
    values: Sequence[ir.Value],
    name: str = "i",
    work: int | None = None,
    counts: Sequence[ir.Value | None] | None = None,
) -> Iterator[tuple[list[ir.Value], list[ir.Value]]]:
    """`parallel_loop_nest` that yields (index, `values` as seen in the body): i64s of
    the kernel that the body uses.  With `counts`, the shared-out dims run the
    row-major positions that cover their counts' box (`extents.span`)."""
    split = _outer_dims(dims)
    outer = math.prod(dims[:split])
    counts = list(counts) if counts is not None else [None] * len(dims)
    if (work if work is not None else math.prod(dims)) < MIN_PARALLEL_ELEMENTS or outer < 2:
        turns = [d if c is None else c for d, c in zip(dims, counts)]
        with loop_nest(ctx.builder, turns, name) as index:
            yield index, list(values)
        return
    n = span(ctx.builder, counts[:split], dims[:split])
    inner = [c for c in counts[split:] if c is not None]
    with parallel_chunks(ctx, n, name, [*values, *inner]) as (begin, end, _, passed):
        b = ctx.builder
        passed, seen = passed[: len(values)], iter(passed[len(values) :])
        turns = [d if c is None else next(seen) for d, c in zip(dims[split:], counts[split:])]
        with for_range(b, b.sub(end, begin), f"{name}.chunk") as offset:
            # in range: no wrap of the outer dim, so a flat loop stays one unit-stride loop
            position = split_index(b, b.add(begin, offset, flags=["nuw", "nsw"]), dims[:split])
            with loop_nest(b, turns, name) as index:
                yield [*position, *index], passed


@contextmanager
def parallel_chunks(
    ctx: EmitContext, n: int | ir.Value, name: str = "i", values: Sequence[ir.Value] = ()
) -> Iterator[tuple]:
    """Code run on chunks [begin, end) of range(n) (n: an int or i64) by the threads:
    yields (begin, end,
    the running thread's slot, `values` as seen there: i64s of the kernel passed
    along) inside a new body function, the context bound to it until the block ends."""
    kernel_builder, kernel_pointers = ctx.builder, ctx.kernel_pointers
    function = kernel_builder.function
    body = ir.Function(ctx.module, BODY_TYPE, ctx.module.get_unique_name(f"{function.name}.body"))
    body.linkage = "internal"
    body.attributes.add("nounwind")
    b = ir.IRBuilder(body.append_basic_block("entry"))
    args, begin, end, slot = body.args
    count = len(kernel_pointers)
    ctx.bind(b, [_load_pointer(b, args, k) for k in range(count)])
    passed = [b.ptrtoint(_load_pointer(b, args, count + k), I64) for k in range(len(values))]
    yield begin, end, slot, passed
    ctx.builder.ret_void()

    ctx.bind(kernel_builder, kernel_pointers)
    kb = kernel_builder
    slots = ctx.alloca(ir.ArrayType(PTR, count + len(values)), f"{name}.args")
    items = [*kernel_pointers, *(kb.inttoptr(v, PTR) for v in values)]
    for k, item in enumerate(items):
        kb.store(item, kb.gep(slots, [i64(0), i64(k)], inbounds=True))
    parallel_for = ctx.module.globals.get("aotc_parallel_for")
    if parallel_for is None:  # declared with opaque pointers: tables of any length
        parallel_for = ir.Function(ctx.module, PARALLEL_FOR_TYPE, "aotc_parallel_for")
        parallel_for.attributes.add("nounwind")
    kb.call(parallel_for, [n if isinstance(n, ir.Value) else i64(n), body, slots])


def _outer_dims(dims: Sequence[int]) -> int:
    """How many leading dims the parallel loop runs over."""
    count, iterations = 0, 1
    while count < len(dims) and iterations < MIN_OUTER_ITERATIONS:
        iterations *= dims[count]
        count += 1
    return count


def _load_pointer(b: ir.IRBuilder, table: ir.Value, k: int) -> ir.Value:
    return b.load(b.gep(table, [i64(k)], inbounds=True, source_etype=PTR), typ=PTR)
