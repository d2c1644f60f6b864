"""Control-flow kernels: while and conditional, running their computations' kernels.

Each computation a while or conditional runs is emitted as the entry is, a
schedule of kernels laid out by its plan (`BufferPlan.nested`, see
buffers.plan.NestedPlan); the instruction's own kernel calls them:

- while: copy the init values into the state, then loop: run the condition,
  load its pred, stop when false, run the body, copy its results into the state;
- conditional: load the selector (pred true -> branch 0, false -> branch 1; an
  index out of range -> the last branch), run that branch, copy its results out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from ...buffers import Slice
from ...buffers.plan import NestedPlan
from ...ir import DType, Instruction, Op
from ..llvm.context import EmitContext
from ..llvm.lltypes import i64, load_element
from ..llvm.loops import if_then, while_loop

# emits, at the builder's position, calls of one computation's kernels
Program = Callable[[], None]
ControlKernel = Callable[[EmitContext, Instruction, NestedPlan, list[Program]], None]

I1 = ir.IntType(1)
I32 = ir.IntType(32)


def emit_while(
    ctx: EmitContext, instr: Instruction, nested: NestedPlan, programs: list[Program]
) -> None:
    """Init copies; then test, body and copies into the state until the pred is false."""
    condition, body = programs
    test_plan, body_plan = nested.plans
    predicate = test_plan.slice_of(instr.called[0].root)
    copy_slices(ctx, nested.init_copies)

    def test() -> ir.Value:
        condition()
        return load_element(ctx.builder, DType.PRED, ctx.slice_pointer(predicate))

    with while_loop(ctx.builder, test, "while"):
        body()
        copy_slices(ctx, body_plan.output_copies)


def emit_conditional(
    ctx: EmitContext, instr: Instruction, nested: NestedPlan, programs: list[Program]
) -> None:
    """Run the selected branch and its copies into the result."""
    b = ctx.builder
    selector = instr.operands[0]
    value = load_element(
        b, selector.array_shape.dtype, ctx.slice_pointer(ctx.plan.slice_of(selector))
    )
    last = len(programs) - 1
    if selector.array_shape.dtype is DType.PRED:
        index = b.select(value, ir.Constant(I32, 0), ir.Constant(I32, 1))
    else:  # negative indices compare as huge unsigned ones: out of range too
        out_of_range = b.icmp_unsigned(">", value, ir.Constant(I32, last))
        index = b.select(out_of_range, ir.Constant(I32, last), value)
    for k, (program, plan) in enumerate(zip(programs, nested.plans)):
        with if_then(b, b.icmp_unsigned("==", index, ir.Constant(I32, k))):
            program()
            copy_slices(ctx, plan.output_copies)


def copy_slices(ctx: EmitContext, copies: Sequence[tuple[Slice, Slice]]) -> None:
    """memcpy each (source, destination) pair, in order."""
    for source, destination in copies:
        if source == destination or source.size == 0:
            continue
        ctx.memcpy(ctx.slice_pointer(destination), ctx.slice_pointer(source), i64(source.size))


CONTROL_KERNELS: dict[Op, ControlKernel] = {
    Op.WHILE: emit_while,
    Op.CONDITIONAL: emit_conditional,
}
