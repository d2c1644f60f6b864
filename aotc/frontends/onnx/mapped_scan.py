"""A Scan that maps its body over the rows of its scan inputs, lowered once for all rows.

Scan unrolls (control.py): one copy of its body per iteration.  When the states pass
through unchanged (each state output is its input, by Identity) every iteration is
independent, and a body made of elementwise ops and reductions computes all rows at
once with the scan inputs whole: each value computed from a scan input carries the
sequence as an extra leading dim, and each scan output is that value, stacked already.
skl2onnx writes k-nearest-neighbours distances this way, a Scan over the training
rows: 2,000 iterations unrolled into 4,000 kernels, or one kernel mapped.

Each body node lowers through its own ONNX lowering (a one-node graph): elementwise
nodes with their sequence-carrying operands given unit dims up to the node's rank, so
that broadcasting lines them up; reductions with their axes moved past the sequence
dim.  A body with any other node, or states that change, unrolls as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from ...ir import Instruction
from .helpers import normalize_axis

# a value of the body, and whether it carries the sequence as its leading dim
Mapped = tuple[Instruction, bool]

ELEMENTWISE = frozenset(
    {"Add", "Sub", "Mul", "Div", "Abs", "Neg", "Sqrt", "Exp", "Log", "Pow", "Relu", "Cast"}
)
REDUCTIONS = frozenset({"ReduceSum", "ReduceSumSquare", "ReduceMean", "ReduceMax", "ReduceMin"})
# reductions whose axes are an attribute up to this opset (an input from 18, ReduceSum's 13)
AXES_ATTRIBUTE_UNTIL = {"ReduceSum": 12}


def mapped_scan(ctx, states, xs, axes, reverse, out_axes, out_reverse) -> list | None:
    """The Scan's (final states, scan outputs) computed for all rows at once, or None when
    it is not such a map (see the module docstring)."""
    body: onnx.GraphProto = ctx.required_attr("body")
    n = len(states)
    if any(axes) or any(reverse) or any(out_axes) or any(out_reverse):
        return None
    if not all(isinstance(v, Instruction) for v in states):
        return None
    values: dict[str, Mapped] = {}
    values.update((info.name, (s, False)) for info, s in zip(body.input[:n], states))
    values.update((info.name, (x, True)) for info, x in zip(body.input[n:], xs))
    for node in body.node:
        if any(name and name not in values for name in node.input):
            return None  # reads a value from outside the body: left to unrolling
        lowered = _lower_mapped(ctx, node, [values[name] for name in node.input if name])
        if lowered is None:
            return None
        values[node.output[0]] = lowered
    final = [values.get(o.name) for o in body.output[:n]]
    if any(v is None or v[0] is not s for v, s in zip(final, states)):
        return None  # a state changes: the iterations depend on each other
    outputs = []
    for info in body.output[n:]:
        value = values.get(info.name)
        if value is None or not value[1]:
            return None  # the same in every iteration: left to unrolling
        outputs.append(value[0])
    return [*states, *outputs]


def _lower_mapped(ctx, node: onnx.NodeProto, inputs: Sequence[Mapped]) -> Mapped | None:
    if len(node.output) != 1:
        return None
    mapped = any(m for _, m in inputs)
    if node.op_type == "Identity":
        return inputs[0]
    if node.domain:
        return None
    if node.op_type in ELEMENTWISE:
        rank = max(_rank(v, m) for v, m in inputs)
        operands = [_with_rank(ctx, v, rank) if m else v for v, m in inputs]
        return _lower_node(ctx, node, operands), mapped
    if node.op_type in REDUCTIONS and len(inputs) == 1:
        moved = _reduction_moved(ctx, node, *inputs[0])
        return None if moved is None else (_lower_node(ctx, moved, [inputs[0][0]]), mapped)
    return None


def _rank(value: Instruction, mapped: bool) -> int:
    """The rank a body value has in one iteration."""
    return value.array_shape.rank - mapped


def _with_rank(ctx, value: Instruction, rank: int) -> Instruction:
    """A mapped value [L, dims...] as [L, 1, ..., dims...]: `rank` dims after L."""
    dims = value.array_shape.dims
    ones = (1,) * (rank - (len(dims) - 1))
    return ctx.b.reshape(value, (dims[0], *ones, *dims[1:])) if ones else value


def _reduction_moved(ctx, node, value: Instruction, mapped: bool) -> onnx.NodeProto | None:
    """`node` reducing the same dims of a mapped value (its axes one dim later)."""
    if not mapped:
        return node
    if node.domain or ctx.opset > AXES_ATTRIBUTE_UNTIL.get(node.op_type, 17):
        return None  # axes as an input: not this form
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    rank = _rank(value, mapped)
    axes = attrs.get("axes")
    axes = range(rank) if axes is None else [normalize_axis(a, rank) for a in axes]
    attrs["axes"] = [a + 1 for a in axes]
    return helper.make_node(node.op_type, list(node.input), list(node.output), **attrs)


def _lower_node(ctx, node: onnx.NodeProto, operands: Sequence[Instruction]) -> Instruction:
    """`node` lowered by its ONNX lowering, its inputs bound to `operands`."""
    names = [name for name in node.input if name]
    inputs = [helper.make_empty_tensor_value_info(name) for name in names]
    outputs = [helper.make_empty_tensor_value_info(node.output[0])]
    graph = helper.make_graph([node], f"mapped_{node.op_type}", inputs, outputs)
    (result,) = ctx.lower_graph(graph, list(operands))
    return result
