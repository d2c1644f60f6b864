"""The verifier: every structural rule of the IR, checked on a whole module.

Passes run it after every change in tests (and with `--verify`).  Its errors
quote the offending instruction as printed HLO text and say what is wrong.
What each opcode requires (arity, attributes, shape rule) is its `OP_DEFS` row.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import AotcError, ShapeError
from .module import Computation, Instruction, Module
from .ops import OP_DEFS, VARIADIC, Op, missing_attributes
from .shapes import infer_shape
from .text import print_instruction
from .types import DType, Shape, TupleShape

# constants bigger than this are quoted as `constant({...})` in messages
_QUOTED_CONSTANT_ELEMENTS = 16


class VerifyError(AotcError):
    """The IR breaks a structural rule: a bug in the pass or frontend that built it."""

    def __init__(self, message: str, instruction: Instruction | None = None):
        super().__init__(message)
        self.instruction = instruction


def verify(module: Module) -> None:
    """Raise VerifyError on the first broken rule; return None if the module is well formed."""
    if module.entry is None:
        raise VerifyError(f"module {module.name} has no entry computation")
    members = {id(c) for c in module.computations}
    if id(module.entry) not in members:
        raise VerifyError(f"entry %{module.entry.name} is not one of the module's computations")
    comp_names: set[str] = set()
    for comp in module.computations:
        if comp.name in comp_names:
            raise VerifyError(f"two computations are named %{comp.name}")
        comp_names.add(comp.name)
    order = _callees_first(module, members)
    names: dict[str, Computation] = {}
    for comp in order:
        _verify_computation(comp, names)
    for comp in order:  # after the rules above, which say better what a stray read broke
        _check_use_lists(comp)


def _fail(comp: Computation, instr: Instruction, problem: str) -> VerifyError:
    line = print_instruction(instr, elide_constants_over=_QUOTED_CONSTANT_ELEMENTS)
    return VerifyError(f"in %{comp.name}: {problem}: {line}", instr)


def _callees_first(module: Module, members: set[int]) -> list[Computation]:
    """The module's computations, callees before callers; raises on a call cycle.  An
    explicit stack: nesting is as deep as the model's (loops in loops)."""
    order: list[Computation] = []
    state: dict[int, str] = {}  # id -> "open" while on the DFS stack, "done" after
    for start in module.computations:
        if id(start) in state:
            continue
        state[id(start)] = "open"
        stack = [(start, _calls(start))]
        while stack:
            comp, calls = stack[-1]
            for instr, callee in calls:
                if id(callee) not in members:
                    raise _fail(comp, instr, f"calls %{callee.name}, not in the module")
                if state.get(id(callee)) == "open":
                    raise _fail(comp, instr, f"call cycle through %{callee.name}")
                if id(callee) not in state:
                    state[id(callee)] = "open"
                    stack.append((callee, _calls(callee)))
                    break
            else:
                stack.pop()
                state[id(comp)] = "done"
                order.append(comp)
    return order


def _calls(comp: Computation) -> Iterator[tuple[Instruction, Computation]]:
    return ((instr, callee) for instr in comp.instructions for callee in instr.called)


def _verify_computation(comp: Computation, names: dict[str, Computation]) -> None:
    defined: set[int] = set()
    parameters: dict[int, Instruction] = {}
    for instr in comp.instructions:
        if not instr.name:
            raise _fail(comp, instr, "instruction has no name")
        if instr.name in names:
            raise _fail(
                comp, instr, f"name %{instr.name} is also used in %{names[instr.name].name}"
            )
        names[instr.name] = comp
        arity = OP_DEFS[instr.op].arity
        if arity != VARIADIC and len(instr.operands) != arity:
            raise _fail(
                comp, instr, f"{instr.op.text} takes {arity} operands, has {len(instr.operands)}"
            )
        for operand in instr.operands:
            if id(operand) not in defined:
                raise _fail(comp, instr, f"operand %{operand.name} is not defined before its use")
        missing = missing_attributes(instr)
        if missing:
            raise _fail(comp, instr, f"{instr.op.text} needs {', '.join(missing)}")
        if instr.op is Op.PARAMETER:
            if instr.index in parameters:
                raise _fail(comp, instr, f"parameter number {instr.index} is used twice")
            parameters[instr.index] = instr
        if instr.op in _CALLEE_CHECKS and instr.called:
            _CALLEE_CHECKS[instr.op](comp, instr)
        _check_shape(comp, instr)
        defined.add(id(instr))
    if comp.root is None:
        raise VerifyError(f"computation %{comp.name} has no root")
    if id(comp.root) not in defined:
        raise _fail(comp, comp.root, "root is not an instruction of the computation")
    for number, param in parameters.items():
        if not 0 <= number < len(parameters):
            raise _fail(comp, param, f"parameters must be numbered 0..{len(parameters) - 1}")


def _check_use_lists(comp: Computation) -> None:
    """Each instruction's use-list holds exactly the instructions of the computation that
    read it, once per operand they read it as (a pass that changed operands in place, or
    left a dropped instruction reading, breaks it)."""
    # (id(value), id(reader)) -> the reads not yet found in the value's use-list
    reads: dict[tuple[int, int], int] = {}
    for instr in comp.instructions:
        for operand in instr.operands:
            key = (id(operand), id(instr))
            reads[key] = reads.get(key, 0) + 1
    for instr in comp.instructions:
        for user in instr.users:
            key = (id(instr), id(user))
            if not reads.get(key):
                raise _fail(comp, instr, f"its use-list has %{user.name}, which does not read it")
            reads[key] -= 1
    by_id = {id(i): i for i in comp.instructions}
    for (value, reader), missing in reads.items():
        if missing:
            name = by_id[value].name
            raise _fail(comp, by_id[reader], f"reads %{name}, whose use-list misses it")


def _check_shape(comp: Computation, instr: Instruction) -> None:
    try:
        inferred = infer_shape(instr)
    except ShapeError as error:
        raise _fail(comp, instr, str(error)) from None
    except (IndexError, TypeError, ValueError, StopIteration) as error:
        # shape rules index operands by attributes, which may be out of range here
        raise _fail(comp, instr, f"attributes do not fit the operands ({error})") from None
    if inferred != instr.shape:
        raise _fail(comp, instr, f"shape is {instr.shape}, but {instr.op.text} gives {inferred}")


def _check_reducer(comp: Computation, instr: Instruction) -> None:
    """A reducer over N inputs takes N accumulators then N values, all scalars, returns N."""
    n = len(instr.operands) // 2
    dtypes = [o.shape.dtype for o in instr.operands[:n] if isinstance(o.shape, Shape)]
    if n == 0 or len(dtypes) != n:
        return  # the shape rule reports bad operands
    scalars = [Shape(dt, ()) for dt in dtypes]
    want_root = scalars[0] if n == 1 else TupleShape(tuple(scalars))
    _check_signature(comp, instr, "reducer", scalars + scalars, want_root)


def _check_comparator(comp: Computation, instr: Instruction) -> None:
    """A sort comparator takes (lhs, rhs) scalars of each operand in turn, returns pred."""
    if not all(isinstance(o.shape, Shape) for o in instr.operands):
        return  # the shape rule reports bad operands
    pairs = [Shape(o.array_shape.dtype, ()) for o in instr.operands for _ in range(2)]
    _check_signature(comp, instr, "comparator", pairs, Shape(DType.PRED, ()))


def _check_combiner(comp: Computation, instr: Instruction) -> None:
    """A scatter combiner takes (current, update) scalars of the operand's dtype."""
    operand = instr.operands[0].shape
    if isinstance(operand, Shape):
        scalar = Shape(operand.dtype, ())
        _check_signature(comp, instr, "combiner", [scalar, scalar], scalar)


def _check_signature(comp: Computation, instr: Instruction, role: str, want_params, want_root):
    """`instr.called[0]` takes scalars `want_params` and returns `want_root`."""
    callee = instr.called[0]
    params = [i for i in callee.instructions if i.op is Op.PARAMETER]
    params.sort(key=lambda p: p.index if p.index is not None else -1)
    have_params = [p.shape for p in params]
    have_root = callee.root.shape if callee.root is not None else None
    if have_params != want_params or have_root != want_root:
        want = ", ".join(str(s) for s in want_params)
        have = ", ".join(str(s) for s in have_params)
        raise _fail(
            comp,
            instr,
            f"{role} %{callee.name} must be ({want}) -> {want_root}, is ({have}) -> {have_root}",
        )


# opcode -> check of its called computation's signature
_CALLEE_CHECKS = {
    Op.REDUCE: _check_reducer,
    Op.REDUCE_WINDOW: _check_reducer,
    Op.SCATTER: _check_combiner,
    Op.SORT: _check_comparator,
}
