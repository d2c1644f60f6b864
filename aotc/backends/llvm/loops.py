"""Control flow for the emitters: loops and branches as IRBuilder context managers.

No rule assembles basic blocks by hand; they use these.  Loop counters are
i64 phis counting up from 0; loop-carried values go through `entry_alloca`
slots, which LLVM's SROA/mem2reg turn back into registers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

from llvmlite import ir

from .lltypes import I64, i64

# LLVM unrolls a loop of a few dozen constant turns completely before its loop vectorizer
# runs, leaving scalar code: a softmax over rows of 49 ran 9x slower than onnxruntime's.
# Loops meant for the vectorizer say so where their turns are at risk: at least a 16-lane
# vector's (shorter ones are better unrolled), fewer than LLVM's whole-unroll budget lets
# through (longer loops keep the partial unrolling of the vectorized loop, which the mark
# would also stop: rows of 128 and 197 ran 15% slower with it).
KEEP_FOR_VECTORIZER = "llvm.loop.unroll.disable"
VECTOR_TURNS = range(16, 128)


@contextmanager
def for_range(
    builder: ir.IRBuilder, count: int | ir.Value, name: str = "i", vectorize: bool = False
) -> Iterator[ir.Value]:
    """`for (i = 0; i < count; ++i)`, the body emitted inside the `with` (count: int or i64);
    `vectorize`: left whole for LLVM's loop vectorizer (KEEP_FOR_VECTORIZER)."""
    if isinstance(count, int) and count == 1:  # no loop for unit extents (common batch dims)
        yield i64(0)
        return
    before = builder.basic_block
    header = builder.append_basic_block(f"{name}.header")
    body = builder.append_basic_block(f"{name}.body")
    done = builder.append_basic_block(f"{name}.done")
    builder.branch(header)
    builder.position_at_end(header)
    counter = builder.phi(I64, name)
    counter.add_incoming(i64(0), before)
    bound = count if isinstance(count, ir.Value) else i64(count)
    builder.cbranch(builder.icmp_unsigned("<", counter, bound), body, done)
    builder.position_at_end(body)
    yield counter
    following = builder.add(counter, i64(1), name=f"{name}.next", flags=["nuw", "nsw"])
    counter.add_incoming(following, builder.basic_block)
    back_edge = builder.branch(header)
    if vectorize:
        back_edge.set_metadata("llvm.loop", _loop_id(builder.module, KEEP_FOR_VECTORIZER))
    builder.position_at_end(done)


def _loop_id(module: ir.Module, *properties: str) -> ir.MDValue:
    """A loop's own ID node: it refers to itself (as LLVM requires), so each is distinct,
    which is why it bypasses `add_metadata`'s sharing of equal nodes."""
    marks = [module.add_metadata([ir.MetaDataString(module, p)]) for p in properties]
    loop_id = ir.MDValue(module, marks, name=str(len(module.metadata)))
    loop_id.operands = (loop_id, *marks)
    return loop_id


@contextmanager
def unrolled_range(
    builder: ir.IRBuilder, count: int | ir.Value, name: str = "i", most: int = 4
) -> Iterator[list[ir.Value]]:
    """`for (i = 0; i < count; ++i)` with the body emitted for several consecutive i per
    turn (the most of `most`, ..., 2, 1 that divides count): yields those i (i64), for a
    body whose copies are independent enough to overlap (GPU loads in flight together).
    A run-time count (i64) takes `most` per turn, the last turn's i past it too: there
    the body checks i < count."""
    if isinstance(count, int):
        unroll = next(u for u in range(most, 0, -1) if count % u == 0)
        turns: int | ir.Value = count // unroll
    else:
        unroll = most
        turns = builder.udiv(builder.add(count, i64(most - 1)), i64(most))
    with for_range(builder, turns, name) as turn:
        first = builder.mul(turn, i64(unroll), flags=["nuw", "nsw"])
        yield [builder.add(first, i64(u), flags=["nuw", "nsw"]) for u in range(unroll)]


@contextmanager
def loop_nest(
    builder: ir.IRBuilder, dims: Sequence[int | ir.Value], name: str = "i", vectorize: bool = False
) -> Iterator[list[ir.Value]]:
    """Nested loops over `dims` (outermost first; ints or i64 counts), yielding one index
    per dim;
    `vectorize`: the innermost is for_range's `vectorize` loop."""
    with ExitStack() as stack:
        index = [
            stack.enter_context(
                for_range(builder, extent, f"{name}{level}", vectorize and level == len(dims) - 1)
            )
            for level, extent in enumerate(dims)
        ]
        yield index


@contextmanager
def while_loop(
    builder: ir.IRBuilder, condition: Callable[[], ir.Value], name: str = "while"
) -> Iterator[None]:
    """`while (condition()) { body }`: `condition` emits its test (it may branch) each turn."""
    header = builder.append_basic_block(f"{name}.header")
    body = builder.append_basic_block(f"{name}.body")
    done = builder.append_basic_block(f"{name}.done")
    builder.branch(header)
    builder.position_at_end(header)
    builder.cbranch(condition(), body, done)
    builder.position_at_end(body)
    yield
    builder.branch(header)
    builder.position_at_end(done)


@contextmanager
def if_then(builder: ir.IRBuilder, condition: ir.Value | None) -> Iterator[None]:
    """Emit the body only where `condition` (an i1) holds; None: always."""
    if condition is None:
        yield
        return
    with builder.if_then(condition):
        yield


def branch_value(
    builder: ir.IRBuilder,
    condition: ir.Value,
    on_true: Callable[[], ir.Value],
    on_false: Callable[[], ir.Value],
) -> ir.Value:
    """`condition ? on_true() : on_false()`, evaluating only the chosen side."""
    with builder.if_else(condition) as (then, otherwise):
        with then:
            true_value = on_true()
            true_block = builder.basic_block
        with otherwise:
            false_value = on_false()
            false_block = builder.basic_block
    merged = builder.phi(true_value.type)
    merged.add_incoming(true_value, true_block)
    merged.add_incoming(false_value, false_block)
    return merged


def entry_alloca(builder: ir.IRBuilder, ty: ir.Type, name: str = "") -> ir.Value:
    """A stack slot allocated in the function's entry block (so mem2reg promotes it)."""
    with builder.goto_entry_block():
        return builder.alloca(ty, name=name)
