"""The table of ONNX lowerings, and the context each lowering is called with.

`LOWERINGS[op_type]` lists the lowerings of an op type, each valid for a range
of opsets (where the ONNX semantics changed).  `@onnx_op("Relu")` registers a
function `fn(ctx, *inputs) -> outputs`: `inputs` are IR instructions (None for
an omitted optional input), `outputs` an instruction or a sequence of them
(None for an output that is not produced).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper

from ...errors import InputValuesRequired, ModelError, ShapeError
from ...ir import ComputationBuilder, Instruction, Op
from ...ir.evaluate import evaluate_constant
from ...ir.module import reached
from .tensor_arrays import TensorArrays

# The newest opset whose changes were reviewed: from 24 on they are mostly new
# low-precision types (float8/float4/int4/int2, refused by dtype), plus Range-27's
# stash_type, Mod-28 (fmod=0 on floats) and BitShift-28 (signed types), which the
# lowerings handle.  A node at a newer opset is refused only if its op changed.
MAX_OPSET = 28
DEFAULT_DOMAINS = ("", "ai.onnx")
# other domains whose ops may have lowerings (registered with onnx_op(domain=...))
EXTRA_DOMAINS = ("ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")
# onnxruntime's contrib ops, which onnx has no schemas for: their lowerings declare their
# arity (onnx_op(arity=...)) and read attributes with their defaults (ctx.attr(name, value)).
# onnxruntime also registers a few ops in the ONNX domain where onnx has no schema for them
# (SimplifiedLayerNormalization; LayerNormalization before opset 17): lowerings declared
# there with an arity serve only where onnx has no schema.
MICROSOFT = "com.microsoft"
CONTRIB_DOMAINS = (MICROSOFT,)


def canonical_domain(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


Lower = Callable[..., Any]


@dataclass(frozen=True)
class Lowering:
    op_type: str
    since: int
    until: int | None  # last opset (inclusive) this lowering serves; None: up to MAX_OPSET
    fn: Lower
    domain: str = ""
    # contrib ops: ((least, most) inputs, (least, most) outputs), in place of a schema's
    arity: tuple[tuple[int, int], tuple[int, int]] | None = None

    def serves(self, domain: str, opset: int) -> bool:
        in_range = self.since <= opset and (self.until is None or opset <= self.until)
        return self.domain == domain and in_range


LOWERINGS: dict[str, list[Lowering]] = {}


def onnx_op(
    *op_types: str,
    since: int = 7,
    until: int | None = None,
    domain: str = "",
    arity: tuple[tuple[int, int], tuple[int, int]] | None = None,
) -> Callable[[Lower], Lower]:
    """Register the decorated function as the lowering of `op_types` in [since, until]."""
    assert arity is not None or domain not in CONTRIB_DOMAINS, "contrib ops declare arity"
    assert arity is None or domain in (*CONTRIB_DOMAINS, ""), "only ONNX and contrib ops"

    def register(fn: Lower) -> Lower:
        for op_type in op_types:
            lowering = Lowering(op_type, since, until, fn, domain, arity)
            LOWERINGS.setdefault(op_type, []).append(lowering)
        return fn

    return register


@functools.cache
def schema(op_type: str, opset: int, domain: str = "") -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, canonical_domain(domain))
    except onnx.defs.SchemaError:
        return None


def find_lowering(op_type: str, domain: str, opset: int) -> Lowering | None:
    """The lowering serving this node, or None where aotc cannot compile it."""
    domain = canonical_domain(domain)
    if domain in CONTRIB_DOMAINS:
        return next((w for w in LOWERINGS.get(op_type, ()) if w.serves(domain, opset)), None)
    if domain and domain not in EXTRA_DOMAINS:
        return None
    spec = schema(op_type, opset, domain)
    if spec is None and not domain:
        # onnxruntime's own ONNX-domain registrations, where onnx has no schema
        extras = (w for w in LOWERINGS.get(op_type, ()) if w.arity is not None)
        return next((w for w in extras if w.serves(domain, opset)), None)
    if spec is None or (not domain and spec.since_version > MAX_OPSET):
        return None
    for lowering in LOWERINGS.get(op_type, ()):
        if lowering.arity is None and lowering.serves(
            domain, min(opset, MAX_OPSET) if not domain else opset
        ):
            return lowering
    return None


def lower_as_onnx(
    ctx: NodeContext,
    op_type: str,
    opset: int,
    inputs: Sequence[Instruction | None],
    attrs: dict[str, Any],
) -> Any:
    """The outputs of ONNX's `op_type` (at `opset`) lowered on `inputs` with `attrs` over its
    schema's defaults: the ONNX part of a fused contrib op (FusedGemm's Gemm...)."""
    lowering = find_lowering(op_type, "", opset)
    assert lowering is not None and lowering.arity is None, (op_type, opset)
    spec = schema(op_type, opset)
    inner = dataclasses.replace(
        ctx, opset=opset, inputs=list(inputs), attrs={**schema_defaults(spec), **attrs}
    )
    return lowering.fn(inner, *inputs)


def node_label(node: onnx.NodeProto, index: int, opset: int) -> str:
    """`OpType (node 'name', opset N)`, with the domain where it is not ONNX's own."""
    domain = "" if node.domain in DEFAULT_DOMAINS else f", domain '{node.domain}'"
    return f"{node.op_type} (node '{node_name(node, index)}'{domain}, opset {opset})"


def node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _attribute_value(attr: AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def schema_defaults(spec: onnx.defs.OpSchema | None) -> dict[str, Any]:
    """The attribute defaults a schema declares (none without a schema)."""
    if spec is None:
        return {}
    return {
        name: _attribute_value(decl.default_value)
        for name, decl in spec.attributes.items()
        if decl.default_value.type != AttributeProto.UNDEFINED
    }


# a schema's attribute type -> the AttributeProto type a node's attribute must have
SCHEMA_ATTRIBUTE_TYPES = {
    getattr(onnx.defs.OpSchema.AttrType, name): value
    for name, value in AttributeProto.AttributeType.items()
    if hasattr(onnx.defs.OpSchema.AttrType, name)
}


def node_attributes(node: onnx.NodeProto, opset: int) -> dict[str, Any]:
    """The node's attributes over the defaults its schema declares, each of the type the
    schema gives it (a float where a graph or an int belongs is refused, not read)."""
    spec = schema(node.op_type, opset, node.domain)
    attrs = schema_defaults(spec)
    declared = spec.attributes if spec is not None else {}
    for attr in node.attribute:
        want = declared.get(attr.name)
        if want is not None and SCHEMA_ATTRIBUTE_TYPES[want.type] != attr.type:
            given, taken = (
                AttributeProto.AttributeType.Name(t)
                for t in (attr.type, SCHEMA_ATTRIBUTE_TYPES[want.type])
            )
            raise ModelError(f"attribute '{attr.name}' is of type {given}, the op takes {taken}")
        attrs[attr.name] = _attribute_value(attr)
    return attrs


# the least value of each window attribute of the convolutions and pools: a stride or
# dilation of 0 divides by zero, an empty window or a negative pad is no defined window
WINDOW_MINIMUMS = {"kernel_shape": 1, "strides": 1, "dilations": 1, "pads": 0, "output_padding": 0}


@dataclass
class NodeContext:
    """What a lowering may use: the builder, the node's attributes and inputs."""

    b: ComputationBuilder
    node: onnx.NodeProto
    opset: int
    inputs: list[Instruction | None]
    attrs: dict[str, Any]
    outputs_used: list[bool]
    # id(parameter instruction) -> its ONNX graph input name, for error messages
    input_names: dict[int, str] = field(default_factory=dict)
    # lowers a graph attribute (If branch, Loop body...) inline from its input values,
    # seeing the enclosing graphs' values; returns its output values (importer.py)
    lower_graph: Callable[[onnx.GraphProto, Sequence[Any]], list[Any]] | None = None
    # the 8-bit operand types the target's byte dot products take (import_onnx): "mixed"
    # (one u8 and one s8) or "same" (two s8 or two u8); quantize.py makes them so
    byte_dot_signs: str = "mixed"
    # the most results the node's count the data gives may keep (--count on one of its
    # outputs), None: the bound the model gives; `count_bound` takes it
    count_cap: int | None = None
    count_cap_taken: bool = False
    # the arrays of the model's tensors read from files (load_model): tensor_to_array's
    arrays: TensorArrays | None = None

    def count_bound(self, bound: int) -> int:
        """The bound of the node's count the data gives: `bound` (the model's, as the
        input's size), or the --count given for an output of the node where smaller (a
        call whose data gives more keeps the first ones)."""
        self.count_cap_taken = True
        return bound if self.count_cap is None else min(bound, self.count_cap)

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute `name` (schema default applied), else `default`."""
        return self.attrs.get(name, default)

    def window_ints(self, name: str, count: int, default: int | None) -> list[int]:
        """Window attribute `name` of a convolution or pool: `count` ints (`default` each
        where absent; None: required), each at least its WINDOW_MINIMUMS entry."""
        values = self.attr(name)
        if values is None or (not len(values) and default is not None):
            return (
                [int(v) for v in self.required_attr(name)] if default is None else [default] * count
            )
        values = [int(v) for v in values]
        if len(values) != count:
            raise ShapeError(f"attribute {name} has {len(values)} values, expected {count}")
        least = WINDOW_MINIMUMS[name]
        if min(values) < least:
            raise ShapeError(f"attribute {name} is {values}; each must be at least {least}")
        return values

    def required_attr(self, name: str) -> Any:
        if name not in self.attrs:
            raise ModelError(f"missing required attribute '{name}'")
        return self.attrs[name]

    def choice(self, name: str, options: Sequence[str]) -> str:
        """A string attribute that must be one of `options`."""
        value = self.attr(name)
        if value not in options:
            raise ModelError(f"attribute {name}={value!r} is not one of {', '.join(options)}")
        return value

    def output_used(self, index: int) -> bool:
        return index < len(self.outputs_used) and self.outputs_used[index]

    def input_name(self, index: int) -> str:
        """The schema's name of input `index` (the last one for variadic inputs)."""
        spec = schema(self.node.op_type, self.opset, self.node.domain)
        if spec is None or not spec.inputs:
            return str(index)
        return spec.inputs[min(index, len(spec.inputs) - 1)].name

    def const(self, index: int) -> np.ndarray | None:
        """Input `index` as a compile-time array (None if omitted); refuses runtime data."""
        instr = self.inputs[index] if index < len(self.inputs) else None
        if instr is None:
            return None
        return self.value(instr, f"input '{self.input_name(index)}'")

    def value(self, instr: Instruction, what: str) -> np.ndarray:
        """`instr` evaluated at compile time, where its value decides a shape (NonZero's
        count...); refuses runtime data, naming the inputs to specialise on."""
        value = evaluate_constant(instr)
        if value is None:
            sources = self._depends_on(instr)
            listed = ", ".join(f"'{s}'" for s in sources)
            raise InputValuesRequired(
                f"{what} must be a constant (it depends on input "
                f"{listed}; fix its value with --const NAME=VALUES)",
                sources,
            )
        return np.asarray(value)

    def const_ints(self, index: int) -> list[int] | None:
        value = self.const(index)
        return None if value is None else [int(v) for v in value.reshape(-1)]

    def _depends_on(self, instr: Instruction) -> list[str]:
        """The model inputs whose values `instr` depends on, in parameter order."""
        params = [i for i in reached([instr]) if i.op is Op.PARAMETER]
        return [self.input_names.get(id(p), p.name) for p in sorted(params, key=lambda p: p.index)]
