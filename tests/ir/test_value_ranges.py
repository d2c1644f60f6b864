"""Integer value ranges (aotc/ir/value_ranges.py): what follows a value, what is unknown."""

from __future__ import annotations

import numpy as np

from aotc.ir import ComputationBuilder, DType, GatherDims, Module, Op, Shape
from aotc.ir.value_ranges import integer_ranges

S32 = DType.S32


def _lookup(b, table, index):
    dims = GatherDims((), (0,), (0,), index.array_shape.rank, (1,))
    return b.gather(table, index, dims)


def _next_nodes(module_name="r"):
    """A traversal step: node' = select(p, left[node], right[node]) from roots."""
    module = Module(module_name)
    b = ComputationBuilder(module, "main")
    p = b.parameter(0, Shape(DType.PRED, (4, 3)))
    unknown = b.parameter(1, Shape(S32, (4, 3)))
    roots = b.broadcast(b.constant(np.array([0, 2, 5], np.int32), S32), [1], (4, 3))
    left = b.constant(np.array([1, 3, 4, 6, 6, 7, 7, 7], np.int32), S32)
    right = b.constant(np.array([2, -1, 5, 9, 6, 7, 7, 7], np.int32), S32)
    node = b.select(p, _lookup(b, left, roots), _lookup(b, right, roots))
    shifted = b.binary(Op.ADD, node, unknown)
    b.build(b.tuple([node, shifted]), entry=True)
    return module, roots, node, shifted


def test_ranges_follow_constants_broadcasts_lookups_and_selects():
    module, roots, node, shifted = _next_nodes()
    ranges = integer_ranges(module)
    assert ranges[id(roots)] == (0, 5)
    assert ranges[id(node)] == (-1, 9)  # the union of both tables
    assert id(shifted) not in ranges  # arithmetic on a parameter: unknown
    assert ranges.get(id(module.entry.parameters[1])) is None


def test_ranges_enter_fused_computations_through_their_operands():
    from aotc.passes.fusion import Fusion

    module, _, _, _ = _next_nodes()
    Fusion().run(module)
    ranges = integer_ranges(module)
    fusions = [i for i in module.entry.instructions if i.op is Op.FUSION]
    assert fusions
    for fusion in fusions:
        root = fusion.called[0].root
        if root.op is not Op.TUPLE and ranges.get(id(root)) == (-1, 9):
            assert ranges[id(fusion)] == (-1, 9)
            break
    else:
        raise AssertionError("no fused traversal step with its range")


def test_narrowing_convert_and_float_values_are_unknown():
    module = Module("c")
    b = ComputationBuilder(module, "main")
    wide = b.constant(np.array([0, 300], np.int32), S32)
    narrow = b.convert(wide, DType.S8)
    kept = b.convert(wide, DType.S64)
    floats = b.constant(np.array([1.0, 2.0], np.float32), DType.F32)
    iota = b.iota(Shape(S32, (3, 7)), 1)
    b.build(b.tuple([narrow, kept, floats, iota]), entry=True)
    ranges = integer_ranges(module)
    assert id(narrow) not in ranges and id(floats) not in ranges
    assert ranges[id(kept)] == (0, 300)
    assert ranges[id(iota)] == (0, 6)
