"""Parallel loops: a kernel's outer loops split across runtime_c's thread pool.

A kernel is `kernel(inputs, outputs, arena)`.  When its loop nest is big
enough, the nest's body moves into an internal function
`body(args, begin, end)`, args pointing at the kernel's three pointers, and
the kernel calls `aotc_parallel_for(n, body, args)`: the runtime runs
chunks [begin, end) of the n outer iterations on its threads, or inline
when the model runs on one thread.  Rules emit into the body exactly as into
a kernel: the context is rebound to the body's builder and pointers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from llvmlite import ir

from .context import EmitContext
from .elemental import delinearize
from .lltypes import I64, PTR, VOID, i64
from .loops import for_range, loop_nest

# loops over fewer elements than this run on the calling thread: a pool dispatch costs
# a few microseconds
MIN_PARALLEL_ELEMENTS = 1 << 14

# split off enough leading iterations that chunks balance over the threads
MIN_OUTER_ITERATIONS = 64

BODY_TYPE = ir.FunctionType(VOID, [PTR, I64, I64])


@contextmanager
def parallel_loop_nest(
    ctx: EmitContext, dims: Sequence[int], name: str = "i", work: int | None = None
) -> Iterator[list[ir.Value]]:
    """`loop_nest(dims)` whose leading dims are shared out to the threads when the nest
    does at least MIN_PARALLEL_ELEMENTS elements of `work` (default: its own size)."""
    split = _outer_dims(dims)
    outer = math.prod(dims[:split])
    if (work if work is not None else math.prod(dims)) < MIN_PARALLEL_ELEMENTS or outer < 2:
        with loop_nest(ctx.builder, dims, name) as index:
            yield index
        return
    kernel_builder, kernel_pointers = ctx.builder, ctx.kernel_pointers
    function = kernel_builder.function
    body = ir.Function(ctx.module, BODY_TYPE, ctx.module.get_unique_name(f"{function.name}.body"))
    body.linkage = "internal"
    body.attributes.add("nounwind")
    b = ir.IRBuilder(body.append_basic_block("entry"))
    args, begin, end = body.args
    ctx.bind(b, [_load_pointer(b, args, k) for k in range(len(kernel_pointers))])
    with for_range(b, b.sub(end, begin), f"{name}.chunk") as offset:
        position = delinearize(b, b.add(begin, offset, flags=["nuw", "nsw"]), dims[:split])
        with loop_nest(b, dims[split:], name) as inner:
            yield [*position, *inner]
    b.ret_void()

    ctx.bind(kernel_builder, kernel_pointers)
    slots = ctx.alloca(ir.ArrayType(PTR, len(kernel_pointers)), "parallel.args")
    for k, pointer in enumerate(kernel_pointers):
        kernel_builder.store(pointer, kernel_builder.gep(slots, [i64(0), i64(k)], inbounds=True))
    parallel_for = ctx.declare("aotc_parallel_for", VOID, [i64(0), body, slots])
    kernel_builder.call(parallel_for, [i64(outer), body, slots])


def _outer_dims(dims: Sequence[int]) -> int:
    """How many leading dims the parallel loop runs over."""
    count, iterations = 0, 1
    while count < len(dims) and iterations < MIN_OUTER_ITERATIONS:
        iterations *= dims[count]
        count += 1
    return count


def _load_pointer(b: ir.IRBuilder, table: ir.Value, k: int) -> ir.Value:
    return b.load(b.gep(table, [i64(k)], inbounds=True, source_etype=PTR), typ=PTR)
