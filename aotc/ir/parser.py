"""HLO text parser: recursive descent over modules, computations and instructions,
the inverse of `text`'s printer.

Reads the canonical text `print_module` writes, over the IR's own opcodes and
attributes.  What XLA's grammar lets one leave out may be left out (the `%`
sigils, operand shapes, signatures, layouts, attributes at their defaults), an
operand may be an instruction written in place, names may repeat across
computations (they are scoped per computation, as in XLA), and comments are
skipped.  What the IR cannot hold is refused: unknown opcodes and attributes,
layouts other than row-major.  XLA's dumps carry such things; the HLO
frontend's `DumpParser` extends this class to read them, through `READERS` and
the methods marked as hooks.  Tokens come from `tokens.py`, the values of
literals and attributes from `literals.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ..errors import ShapeError, UnsupportedError
from . import literals
from .attrs import DotDims, GatherDims, ScatterDims
from .module import Computation, Instruction, Module
from .ops import Op, missing_attributes
from .shapes import infer_shape
from .tokens import Token, TokenStream
from .types import AnyShape, DType, Shape, TupleShape


def parse_module(text: str) -> Module:
    """Read canonical HLO text (as `print_module` writes it) into a Module.

    Raises ModelError for text it cannot read (with the line number and the
    line) and ShapeError where a written shape differs from the inferred one.
    """
    return Parser(text).module_()


_Scope = dict[str, Instruction]  # a computation's instructions by name, as parsed so far

# text attribute -> Instruction field it sets as read
_DIRECT_FIELDS = {
    "dimensions": "dimensions",
    "index": "index",
    "slice": "slice",
    "padding": "padding",
    "window": "window",
    "dim_labels": "conv",
    "feature_group_count": "feature_group_count",
    "batch_group_count": "batch_group_count",
    "direction": "direction",
    "kind": "fusion_kind",
    "metadata": "origin",
    "is_stable": "is_stable",
    "dynamic_slice_sizes": "dynamic_slice_sizes",
}
# attributes that together make one DotDims / GatherDims, in constructor order
_DOT_ATTRIBUTES = (
    "lhs_batch_dims",
    "rhs_batch_dims",
    "lhs_contracting_dims",
    "rhs_contracting_dims",
)
_GATHER_ATTRIBUTES = (
    "offset_dims",
    "collapsed_slice_dims",
    "start_index_map",
    "index_vector_dim",
    "slice_sizes",
    "operand_batching_dims",
    "start_indices_batching_dims",
)
_GATHER_REQUIRED = _GATHER_ATTRIBUTES[:5]
_SCATTER_ATTRIBUTES = (
    "update_window_dims",
    "inserted_window_dims",
    "scatter_dims_to_operand_dims",
    "index_vector_dim",
    "input_batching_dims",
    "scatter_indices_batching_dims",
)
_SCATTER_REQUIRED = _SCATTER_ATTRIBUTES[:4]


# attributes naming called computations, in the order `Instruction.called` holds them
_CALLED_ATTRIBUTES = (
    "to_apply",
    "calls",
    "condition",
    "body",
    "true_computation",
    "false_computation",
    "branch_computations",
)


def _called_names(attributes: dict) -> tuple[str, ...]:
    return tuple(name for key in _CALLED_ATTRIBUTES for name in attributes.get(key, ()))


Reader = Callable[[TokenStream], object]

# how each attribute's value is read
ATTRIBUTE_READERS: dict[str, Reader] = {
    "dimensions": TokenStream.int_list,
    "iota_dimension": TokenStream.integer,
    "index": TokenStream.integer,
    "delta": TokenStream.integer,
    "slice": literals.slice_spec,
    "dynamic_slice_sizes": TokenStream.int_list,
    "padding": literals.padding,
    "window": literals.window,
    "dim_labels": literals.dim_labels,
    "feature_group_count": TokenStream.integer,
    "batch_group_count": TokenStream.integer,
    **{name: TokenStream.int_list for name in _DOT_ATTRIBUTES},
    **{name: TokenStream.int_list for name in _GATHER_ATTRIBUTES if name != "index_vector_dim"},
    **{name: TokenStream.int_list for name in _SCATTER_ATTRIBUTES if name != "index_vector_dim"},
    "index_vector_dim": TokenStream.integer,
    "direction": literals.direction,
    "is_stable": literals.boolean,
    "kind": literals.fusion_kind,
    **{name: literals.computation_names for name in _CALLED_ATTRIBUTES},
    "metadata": literals.metadata,
}


class Parser(TokenStream):
    """Recursive descent over the token list; one method per grammar rule."""

    READERS: ClassVar[dict[str, Reader]] = ATTRIBUTE_READERS

    def __init__(self, text: str):
        super().__init__(text)
        self.module = Module("module")
        self.entry: Computation | None = None
        self.line_of: dict[int, int] = {}  # id(instruction) -> line it was written on
        self.calls: list[tuple[Instruction, tuple[str, ...]]] = []  # resolved at the end
        # instructions without a name (nested operands), with the name to make for them
        self.anonymous: list[tuple[Instruction, str]] = []

    # -- module and computations ----------------------------------------------------

    def module_(self) -> Module:
        self.header()
        while self.peek().kind != "eof":
            self.computation()
        if not self.module.computations:
            raise self.error("no computations")
        self.finish()
        return self.module

    def header(self) -> None:
        """`HloModule name, entry_computation_layout={...}` (all of it optional)."""
        if self.accept("HloModule"):
            self.module.name = self.name()
            while self.accept(","):
                key = self.name()
                self.expect("=")
                self.module_attribute(key)

    def module_attribute(self, key: str) -> None:
        """Hook: `entry_computation_layout={(shape, ...)->shape}` is the only one; it
        repeats the entry's signature, so it is read and not checked."""
        if key != "entry_computation_layout":
            raise self.error(f"unknown module attribute {key}=")
        self.expect("{")
        self.sequence("(", ")", self.shape)
        self.expect("->")
        self.shape()
        self.expect("}")

    def computation(self) -> None:
        line = self.line(self.peek())
        is_entry = self.accept("ENTRY")
        comp = Computation(self.name())
        if any(c.name == comp.name for c in self.module.computations):
            raise self.error(f"computation %{comp.name} defined twice", line)
        signature = self.signature() if self.at("(") else None
        self.expect("{")
        scope: _Scope = {}
        while not self.accept("}"):
            self.instruction(comp, scope)
        self.computation_attributes()
        if not comp.instructions:
            raise self.error(f"computation %{comp.name} has no instructions", line)
        comp.root = comp.root or comp.instructions[-1]
        if signature is not None:
            self.check_signature(comp, signature, line)
        self.module.add_computation(comp)
        if is_entry:
            if self.entry is not None:
                raise self.error("a second ENTRY computation", line)
            self.entry = comp

    def computation_attributes(self) -> None:
        """Hook: what follows a computation's `}` (canonical text has nothing there)."""

    def signature(self) -> tuple[list[AnyShape], AnyShape]:
        """`(x: f32[], y: f32[]) -> f32[]`: redundant with the body, read to check it."""

        def param() -> AnyShape:
            self.name()
            self.expect(":")
            return self.shape()

        params = self.sequence("(", ")", param)
        self.expect("->")
        return params, self.shape()

    def check_signature(self, comp: Computation, signature, line: int) -> None:
        params, result = signature
        written = [p.shape for p in comp.parameters]
        if written != params:
            shown = ", ".join(str(s) for s in params)
            raise self.error(f"signature ({shown}) does not match the parameters", line)
        if result != comp.root.shape:
            raise self.error(f"signature result {result} != root shape {comp.root.shape}", line)

    def instruction(self, comp: Computation, scope: _Scope) -> None:
        line = self.line(self.peek())
        is_root = self.accept("ROOT")
        name = self.name()
        if name in scope:
            raise self.error(f"%{name} defined twice in %{comp.name}", line)
        self.expect("=")
        instr = self.operation(comp, scope, name, self.shape(), line)
        scope[name] = instr
        if is_root:
            if comp.root is not None:
                raise self.error(f"a second ROOT in %{comp.name}", line)
            comp.root = instr

    def operation(
        self, comp: Computation, scope: _Scope, name: str | None, shape: AnyShape, line: int
    ) -> Instruction:
        """Hook: `opcode(args), attributes` after the result shape; appends the instruction."""
        token = self.advance()
        try:
            op = Op.from_text(token.text) if token.kind == "name" else None
        except ValueError:
            op = None
        if op is None:
            where = f" (%{name})" if name else ""
            raise self.error(f"unknown opcode {self.describe(token)}{where}", token)
        fields: dict = {}
        operands: list[Instruction] = []
        if op is Op.CONSTANT:
            self.expect("(")
            fields["literal"] = literals.literal(self, shape, line)
            self.expect(")")
        elif op is Op.PARAMETER:
            self.expect("(")
            fields["index"] = self.integer()
            self.expect(")")
        else:
            operands = self.operands(comp, scope, line)
        attributes = self.attributes(name, line)
        return self.append(comp, op, shape, operands, name, line, attributes, fields)

    def operands(self, comp: Computation, scope: _Scope, line: int) -> list[Instruction]:
        return self.sequence("(", ")", lambda: self.operand(comp, scope, line))

    def attributes(self, name: str | None, line: int) -> dict[str, object]:
        """`, key=value, ...` after the operands, each value read by its `READERS` entry."""
        attributes: dict[str, object] = {}
        # a nested instruction has no attributes: its ',' separates its user's operands
        while name is not None and self.accept(","):
            key = self.name()
            self.expect("=")
            reader = self.READERS.get(key)
            if reader is None:
                self.unknown_attribute(key, line)
            elif key in attributes:
                raise self.error(f"attribute {key}= given twice", line)
            else:
                attributes[key] = reader(self)
        return attributes

    def unknown_attribute(self, key: str, line: int) -> None:
        """Hook: an attribute `READERS` does not know, its `=` just read."""
        raise self.error(f"unknown attribute {key}=", line)

    def append(
        self,
        comp: Computation,
        op: Op,
        shape: AnyShape,
        operands: list[Instruction],
        name: str | None,
        line: int,
        attributes: dict,
        fields: dict,
    ) -> Instruction:
        """The instruction read, appended to `comp`; its calls are resolved at the end."""
        fields = {**fields, **self.fields(attributes)}
        instr = Instruction(op, shape, operands, name=name or "", **fields)
        called = _called_names(attributes)
        if called:
            self.calls.append((instr, called))
        if name is None:
            self.anonymous.append((instr, op.text))
        self.line_of[id(instr)] = line
        comp.instructions.append(instr)
        return instr

    def operand(self, comp: Computation, scope: _Scope, line: int) -> Instruction:
        """`[shape] name`, or a whole instruction written in place (`f32[] constant(0)`)."""
        written = None
        if self.at("(") or (self.peek().kind == "name" and self.at("[", 1)):
            written = self.shape()
            if self.peek().kind == "name" and self.at("(", 1):
                return self.operation(comp, scope, None, written, line)
        token = self.peek()
        name = self.name()
        if name not in scope:
            raise self.error(f"operand %{name} is not defined before its use", token)
        target = scope[name]
        if written is not None and written != target.shape:
            message = f"operand %{name} is written as {written} but is {target.shape}"
            raise self.error(message, token, ShapeError)
        return target

    @staticmethod
    def fields(attributes: dict) -> dict:
        """Instruction keyword arguments from the attributes read."""
        fields = {f: attributes[a] for a, f in _DIRECT_FIELDS.items() if a in attributes}
        if "delta" in attributes:
            fields["index"] = attributes["delta"]
        if "iota_dimension" in attributes:
            fields["dimensions"] = (attributes["iota_dimension"],)
        if any(a in attributes for a in _DOT_ATTRIBUTES):
            fields["dot"] = DotDims(*(attributes.get(a, ()) for a in _DOT_ATTRIBUTES))
        if all(a in attributes for a in _GATHER_REQUIRED):
            fields["gather"] = GatherDims(*(attributes.get(a, ()) for a in _GATHER_ATTRIBUTES))
        if all(a in attributes for a in _SCATTER_REQUIRED):
            fields["scatter"] = ScatterDims(*(attributes.get(a, ()) for a in _SCATTER_ATTRIBUTES))
        return fields

    def finish(self) -> None:
        """Resolve calls, name what has no name yet, check every shape, pick the entry."""
        module = self.module
        by_name = {c.name: c for c in module.computations}
        for instr, names in self.calls:
            unknown = [n for n in names if n not in by_name]
            if unknown:
                raise self.error(f"no computation %{unknown[0]}", self.line_of[id(instr)])
            instr.called = tuple(by_name[n] for n in names)
        self.name_instructions()
        for comp in module.computations:
            for instr in comp.instructions:
                self.check(instr)
        module.entry = self.entry or module.computations[-1]

    def name_instructions(self) -> None:
        """Hook: module-wide unique names, the written ones kept where they are unique."""
        module = self.module
        taken: set[str] = set()
        renamed = []
        for comp in module.computations:
            module.claim_name(comp.name)
            for instr in comp.instructions:
                if not instr.name:
                    continue
                # names are scoped per computation in XLA; aotc's are module-wide
                if instr.name in taken:
                    renamed.append(instr)
                else:
                    taken.add(instr.name)
                    module.claim_name(instr.name)
        for instr in renamed:
            instr.name = module.unique_name(instr.name)
        for instr, base in self.anonymous:
            instr.name = module.unique_name(base)

    def check(self, instr: Instruction) -> None:
        line = self.line_of[id(instr)]
        missing = missing_attributes(instr)
        if missing:
            raise self.error(f"{instr.op.text} needs {', '.join(missing)}", line)
        try:
            inferred = infer_shape(instr)
        except ShapeError as error:
            raise self.error(str(error), line, ShapeError) from None
        except (IndexError, TypeError, ValueError, StopIteration) as error:
            # shape rules index operands by attributes; text may hold any numbers
            message = f"{instr.op.text}: attributes do not fit the operands ({error})"
            raise self.error(message, line, ShapeError) from None
        if inferred != instr.shape:
            message = f"shape {instr.shape} is written, but {instr.op.text} gives {inferred}"
            raise self.error(message, line, ShapeError)

    # -- shapes -----------------------------------------------------------------------

    def shape(self) -> AnyShape:
        """`f32[2,3]{1,0}` (the layout optional) or `(shape, ...)`."""
        if self.at("("):
            return TupleShape(tuple(self.sequence("(", ")", self.shape)))
        token = self.advance()
        try:
            dtype = DType.from_text(token.text) if token.kind == "name" else None
        except ValueError:
            raise self.error(f"unknown element type '{token.text}'", token) from None
        if dtype is None:
            raise self.error(f"expected a shape, found {self.describe(token)}", token)
        marked = self.sequence("[", "]", self.dimension)
        dims = [d for d, _ in marked]
        if any(d < 0 for d in dims):
            raise self.error(f"negative dimension in {dtype.text}{dims}", token)
        # a layout is `{1,0}` or `{}`; a `{` before a name opens a body
        if self.at("{") and (self.peek(1).kind == "word" or self.at("}", 1)):
            self.layout(len(dims), token)
        return Shape(dtype, tuple(dims), tuple(bounded for _, bounded in marked))

    def dimension(self) -> tuple[int, bool]:
        """`128`, or `<=8` (a bounded dim): (the extent or bound, whether bounded)."""
        if self.accept("<"):
            self.expect("=")
            return self.integer(), True
        return self.integer(), False

    def layout(self, rank: int, token: Token) -> None:
        """Hook: the layout after the dims of `token`'s shape; aotc keeps every array
        row-major, so only that one (minor to major: rank-1, ..., 0) can be read."""
        minor_to_major = self.int_list()
        if minor_to_major and minor_to_major != tuple(reversed(range(rank))):
            text = ",".join(str(d) for d in minor_to_major)
            raise self.error(f"layout {{{text}}} is not row-major", token, UnsupportedError)
