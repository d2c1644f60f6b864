"""StableHLO functions -> IR computations: values, regions, calls.

`Lowering` walks `@main`'s ops in order and builds each with the op table
(`ops.LOWERINGS`: op name -> function).  Regions become computations: a
reducer's (reduce, sort, scatter, ...) takes its block's scalars; the branches
of `case`/`if` and the `cond`/`do` of `while` read values of the enclosing
function too (MLIR regions may), which the IR's computations cannot, so those
values travel in a tuple operand (the loop's state).  `func.call` and
`stablehlo.composite` inline their callee: the IR then has one computation per
region, and the passes see the whole program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...errors import ModelError, UnsupportedError
from ...ir import Computation, ComputationBuilder, Instruction, Module, Op, Shape, TupleShape
from ...ir.types import AnyShape
from ..hlo.expansions import EXPANSIONS
from .syntax import Block, Function, Operation
from .tokens import Cursor

_TERMINATORS = frozenset({"return", "func.return", "stablehlo.return"})
_INLINE_DEPTH = 64  # func.call nesting beyond this is recursion


class Lowering:
    """One module's lowering; `LOWERINGS` is given so that ops.py may import this module."""

    def __init__(
        self,
        cur: Cursor,
        functions: list[Function],
        lowerings: dict[str, Callable],
        arity: dict[str, int],
    ):
        self.cur = cur
        self.functions = {f.name: f for f in functions}
        self.lowerings = lowerings
        self.arity = arity
        self.module = Module("main")
        self._calls: list[str] = []

    def fail(self, op: Operation | None, message: str, kind: type = UnsupportedError):
        return self.cur.error(message, op.token if op else None, kind)

    def main(self) -> Function:
        main = self.functions.get("main")
        if main is None:
            raise self.cur.error("no function @main", None, ModelError)
        return main

    def lower(self) -> Module:
        main = self.main()
        b = ComputationBuilder(self.module, "main")
        params = [
            b.parameter(i, shape, _plain(name)) for i, (name, shape) in enumerate(main.arguments)
        ]
        results = self.block(b, main.body, params, {})
        root = results[0] if len(results) == 1 else b.tuple(results)
        b.build(root, entry=True)
        self.module.name = "main"
        return self.module

    # -- blocks ---------------------------------------------------------------------

    def block(
        self,
        b: ComputationBuilder,
        block: Block,
        args: Sequence[Instruction],
        scope: dict[str, Instruction],
    ) -> list[Instruction]:
        """Lower `block`'s ops with its arguments bound to `args`; what it returns."""
        scope = dict(scope)
        if len(args) != len(block.arguments):
            raise self.cur.error(
                f"a block of {len(block.arguments)} arguments given {len(args)} values"
            )
        for (name, _), arg in zip(block.arguments, args):
            scope[name] = arg
        for op in block.operations:
            if op.name in _TERMINATORS:
                return [self.value(op, scope, name) for name in op.operands]
            self.operation(b, op, scope)
        raise self.cur.error("a block without a return", None, ModelError)

    def value(self, op: Operation, scope: dict[str, Instruction], name: str) -> Instruction:
        found = scope.get(name)
        if found is None:
            raise self.fail(op, f"{name} is not defined before its use", ModelError)
        return found

    def operation(self, b: ComputationBuilder, op: Operation, scope: dict[str, Instruction]):
        lower = self.lowerings.get(op.name)
        if lower is None:
            raise self.fail(op, f"{op.name} is not supported")
        args = [self.value(op, scope, name) for name in op.operands]
        wanted = self.arity.get(op.name, len(args))
        if len(args) != wanted or (op.name.endswith("reduce") and len(args) % 2):
            raise self.fail(op, f"{op.name} takes {wanted} operands, not {len(args)}", ModelError)
        try:
            results = lower(OpSite(self, b, op, scope), args)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError) as error:
            # hand-written text can give an attribute any kind of value; the lowerings
            # read what JAX writes, and anything else surfaces here
            message = f"{op.name}: cannot read its attributes ({type(error).__name__}: {error})"
            raise self.fail(op, message, ModelError) from None
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        if len(results) != len(op.results):
            raise self.fail(
                op, f"{len(op.results)} results written, {len(results)} made", ModelError
            )
        for name, result, written in zip(op.results, results, op.result_types or results):
            if not isinstance(written, Instruction) and result.shape != written:
                raise self.fail(
                    op, f"type {written} is written, but the op gives {result.shape}", ModelError
                )
            scope[name] = result

    # -- regions ----------------------------------------------------------------------

    def scalar_region(
        self, op: Operation, block: Block, name: str, outer: dict[str, Instruction]
    ) -> Computation:
        """A reducer's or comparator's region: parameters are its block's arguments; the
        outer constants it reads (jax.export hoists them) are copied in."""
        b = ComputationBuilder(self.module, name)
        scope = {}
        for free in sorted(free_values(block)):
            value = self.value(op, outer, free)
            if value.op is not Op.CONSTANT:
                raise self.fail(op, f"a {name} region reading {free} from outside it")
            scope[free] = b.constant(value.literal, value.array_shape.dtype)
        params = [b.parameter(i, shape, _plain(n)) for i, (n, shape) in enumerate(block.arguments)]
        results = self.block(b, block, params, scope)
        return b.build(results[0] if len(results) == 1 else b.tuple(results))

    def tuple_region(
        self,
        block: Block,
        name: str,
        state: TupleShape,
        arguments: int,
        captured: list[str],
        wrap: Callable[[ComputationBuilder, list[Instruction], list[Instruction]], Instruction],
    ) -> Computation:
        """A region taking one tuple: its first `arguments` elements are the block's
        arguments, the rest the `captured` outer values; `wrap(b, results, captures)`
        makes the root."""
        b = ComputationBuilder(self.module, name)
        param = b.parameter(0, state, "state")
        elements = [b.get_tuple_element(param, i) for i in range(len(state.elements))]
        scope = dict(zip(captured, elements[arguments:]))
        results = self.block(b, block, elements[:arguments], scope)
        return b.build(wrap(b, results, elements[arguments:]))

    def inline(
        self, b: ComputationBuilder, op: Operation, callee: str, args: list[Instruction]
    ) -> list[Instruction]:
        function = self.functions.get(callee)
        if function is None:
            raise self.fail(op, f"no function @{callee}", ModelError)
        if len(self._calls) > _INLINE_DEPTH or callee in self._calls:
            raise self.fail(op, f"@{callee} calls itself")
        self._calls.append(callee)
        try:
            return self.block(b, function.body, args, {})
        finally:
            self._calls.pop()


class OpSite:
    """What a lowering function sees: the builder, the op, its regions; also the Site
    of the HLO frontend's expansions (`hlo.expansions.Site`)."""

    def __init__(self, lowering: Lowering, b: ComputationBuilder, op: Operation, scope: dict):
        self.lowering = lowering
        self.b = b
        self.op = op
        self.scope = scope
        self.attributes = dict(op.attributes)  # a lowering may merge nested dicts in
        self.name: str | None = _plain(op.results[0]) if op.results else None
        self._extra: list[Computation] = []

    # -- the expansions' Site --------------------------------------------------------

    def builder(self, computation: Computation | None = None) -> ComputationBuilder:
        if computation is None:
            return self.b
        b = ComputationBuilder(self.lowering.module, computation.name)
        b.computation = computation
        return b

    def new_computation(self, name: str) -> Computation:
        comp = Computation(self.lowering.module.unique_name(name))
        self.lowering.module.add_computation(comp)
        return comp

    def computation(self, name: str) -> Computation:
        return self.lowering.module.computation(name)

    def fail(self, message: str, kind: type = UnsupportedError) -> Exception:
        return self.lowering.fail(self.op, f"{self.op.name}: {message}", kind)

    # -- for the lowerings -----------------------------------------------------------

    def expand(self, opcode: str, shape: AnyShape, args: list[Instruction], attributes: dict):
        """The HLO frontend's expansion of the XLA op `opcode`, which builds it whole."""
        result = EXPANSIONS[opcode](self, shape, args, attributes)
        if result is None:
            raise self.fail(f"no expansion of {opcode} for {shape}")
        return result

    @property
    def result_type(self) -> AnyShape:
        types = self.op.result_types
        if len(types) != 1:
            raise self.fail(f"expected one result type, found {len(types)}", ModelError)
        return types[0]

    @property
    def result_shape(self) -> Shape:
        shape = self.result_type
        if not isinstance(shape, Shape):
            raise self.fail("expected an array result", ModelError)
        return shape

    def attribute(self, *names: str, default=None, required: bool = True):
        """The first of `names` written (pretty and generic forms spell them apart)."""
        for name in names:
            if name in self.attributes:
                return self.attributes[name]
        if default is not None or not required:
            return default
        raise self.fail(f"needs {names[0]} =", ModelError)

    def region(self, index: int) -> Block:
        if index >= len(self.op.regions):
            raise self.fail(f"needs {index + 1} region(s)", ModelError)
        return self.op.regions[index]

    def scalar_region(self, index: int, name: str) -> Computation:
        return self.lowering.scalar_region(self.op, self.region(index), name, self.scope)


def free_values(block: Block) -> set[str]:
    """Values a block (and the regions in it) reads but does not define."""
    defined = {name for name, _ in block.arguments}
    free: set[str] = set()
    for op in block.operations:
        free |= {name for name in op.operands if name not in defined}
        for region in op.regions:
            free |= free_values(region) - defined - set(op.bindings)
        defined |= set(op.results) | set(op.bindings)
    return free


def _plain(name: str) -> str:
    """`%arg0` -> `arg0`, `%0#1` -> `v0_1`: an IR name."""
    text = name.lstrip("%").replace("#", "_")
    return text if text[:1].isalpha() or text[:1] == "_" else f"v{text}"
