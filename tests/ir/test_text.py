"""HLO text printer and parser: round trips, XLA-written samples, errors.

Samples with what only XLA's dumps carry (sharding, backend_config, ...) are read by
the HLO frontend's `parse_hlo`, the IR parser extended to XLA's dialect."""

from __future__ import annotations

import re

import numpy as np
import pytest

from aotc.errors import ModelError, ShapeError, UnsupportedError
from aotc.frontends.hlo import parse_hlo
from aotc.ir import (
    ComputationBuilder,
    ConvDims,
    Direction,
    DotDims,
    DType,
    FusionKind,
    GatherDims,
    Module,
    Op,
    PaddingConfig,
    ScatterDims,
    Shape,
    SliceSpec,
    Window,
    replacer,
    scalar_reducer,
)
from aotc.ir.builder import comparator
from aotc.ir.ops import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE
from aotc.ir.text import (
    dim_labels_text,
    padding_text,
    parse_module,
    print_instruction,
    print_module,
    slice_text,
    window_text,
)
from aotc.ir.types import bf16_from_bits
from aotc.ir.verify import verify

F32, S32 = DType.F32, DType.S32
INT_OPS = {
    Op.NOT,
    Op.POPCNT,
    Op.CLZ,
    Op.AND,
    Op.OR,
    Op.XOR,
    Op.SHIFT_LEFT,
    Op.SHIFT_RIGHT_ARITHMETIC,
    Op.SHIFT_RIGHT_LOGICAL,
}

# values at the edges of each dtype (bf16 ones are rounded to bf16 by the builder)
EDGE_VALUES = {
    DType.PRED: [True, False],
    DType.S8: [-128, 127, 0, -1],
    DType.S16: [-(2**15), 2**15 - 1, 7],
    DType.S32: [-(2**31), 2**31 - 1, 0],
    DType.S64: [-(2**63), 2**63 - 1, 12345678901234],
    DType.U8: [0, 255],
    DType.U16: [0, 2**16 - 1],
    DType.U32: [0, 2**32 - 1],
    DType.U64: [0, 2**64 - 1, 2**63],
    DType.F16: [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.1,
        1 / 3,
        65504.0,
        -65504.0,
        2.0**-14,
        2.0**-24,
        np.inf,
        -np.inf,
        np.nan,
    ],
    DType.BF16: [
        0.0,
        -0.0,
        1.0,
        0.1,
        1 / 3,
        1e20,
        3.3895314e38,
        2.0**-126,
        2.0**-133,
        np.inf,
        -np.inf,
        np.nan,
    ],
    DType.F32: [
        0.0,
        -0.0,
        1.0,
        0.1,
        1 / 3,
        16777216.0,
        3.4028235e38,
        2.0**-126,
        2.0**-149,
        1e-5,
        np.inf,
        -np.inf,
        np.nan,
    ],
    DType.F64: [
        0.0,
        -0.0,
        1.0,
        0.1,
        1 / 3,
        1.7976931348623157e308,
        2.0**-1022,
        5e-324,
        1e22,
        np.inf,
        -np.inf,
        np.nan,
    ],
    DType.F8E4M3FN: [0.0, -0.0, 448.0, -448.0, 2.0**-9, 0.1, np.nan],
    DType.F8E4M3FNUZ: [0.0, 240.0, -240.0, 2.0**-10, 0.1, np.nan],
    DType.F8E5M2: [0.0, -0.0, 57344.0, 2.0**-16, 0.1, np.inf, -np.inf, np.nan],
    DType.F8E5M2FNUZ: [0.0, 57344.0, 2.0**-17, 0.1, np.nan],
    DType.F8E8M0FNU: [1.0, 2.0**127, 2.0**-127, 0.25, np.nan],
    DType.F4E2M1FN: [0.0, -0.0, 6.0, -6.0, 0.5, 1.5],
    DType.S4: [-8, 7, 0, -1],
    DType.U4: [0, 15],
    DType.S2: [-2, 1, 0, -1],
    DType.U2: [0, 3],
}


def all_ops_module() -> Module:
    """A module using every opcode and every dtype, built with the builder."""
    m = Module("all_ops")
    add = scalar_reducer(m, Op.ADD, F32)
    rb = ComputationBuilder(m, "max_and_index")
    a, ai = rb.parameter(0, Shape(F32, ())), rb.parameter(1, Shape(S32, ()))
    c, ci = rb.parameter(2, Shape(F32, ())), rb.parameter(3, Shape(S32, ()))
    argmax = rb.build(rb.tuple([rb.binary(Op.MAXIMUM, a, c), rb.binary(Op.MINIMUM, ai, ci)]))
    fb = ComputationBuilder(m, "fused_computation")
    fp = fb.parameter(0, Shape(F32, (2, 3)), "param_0")
    fq = fb.parameter(1, Shape(F32, (2, 3)), "param_1")
    fused = fb.build(fb.binary(Op.MULTIPLY, fb.unary(Op.EXP, fp), fq))

    b = ComputationBuilder(m, "main")
    b.origin = 'node "q" \\ back\nslash\ttab \x01 é'
    x = b.parameter(0, Shape(F32, (2, 3)), "x")
    b.origin = None
    n = b.parameter(1, Shape(S32, (2, 3)), "n")
    outs = [b.parameter(2 + k, Shape(dt, (2,)), f"p_{dt.text}") for k, dt in enumerate(DType)]
    outs += [b.constant(np.array(EDGE_VALUES[dt], dtype=object), dt) for dt in DType]
    outs.append(b.constant(np.array(1.5, dtype=np.float32)))
    outs.append(b.constant(np.zeros((2, 0, 3), dtype=np.float16), DType.F16))
    outs.append(b.constant(np.arange(24, dtype=np.int16).reshape(2, 3, 4)))
    for op in UNARY_ELEMENTWISE:
        outs.append(b.unary(op, n if op in INT_OPS else x))
    outs.append(b.unary(Op.IS_FINITE, x))
    for op in BINARY_ELEMENTWISE:
        operand = n if op in INT_OPS else x
        outs.append(b.binary(op, operand, operand))
    pred = b.compare(x, x, Direction.LT)
    outs.append(b.select(pred, x, x))
    zero, one = b.scalar(0.0, F32), b.scalar(1.0, F32)
    outs.append(b.clamp(zero, x, one))
    outs.append(b.convert(x, DType.BF16))
    outs.append(b.bitcast_convert(x, DType.U32))
    outs.append(b.iota(Shape(S32, (4, 5)), 1))
    outs.append(b.broadcast(x, [0, 2], [2, 7, 3]))
    outs.append(b.broadcast(zero, [], [4]))
    outs.append(b.reshape(x, [3, 2]))
    outs.append(b.add(Op.BITCAST, [x], Shape(F32, (6,))))
    outs.append(b.transpose(x, [1, 0]))
    outs.append(b.slice(x, [0, 1], [2, 3], [1, 2]))
    outs.append(b.concatenate([x, x], 1))
    outs.append(b.pad(x, zero, [1, -1], [0, 2], [1, 0]))
    outs.append(b.pad(x, zero, [1, 0], [0, 2]))
    outs.append(b.reverse(x, [0, 1]))
    table, idx = (
        b.parameter(2 + len(DType), Shape(F32, (5, 4)), "table"),
        b.iota(Shape(S32, (3, 1)), 0),
    )
    outs.append(b.gather(table, idx, GatherDims((1,), (0,), (0,), 1, (1, 4))))
    batched = b.parameter(3 + len(DType), Shape(F32, (2, 5, 4)), "batched")
    bidx = b.iota(Shape(S32, (2, 3, 1)), 1)
    outs.append(b.gather(batched, bidx, GatherDims((2,), (1,), (1,), 2, (1, 1, 4), (0,), (0,))))
    by_key = comparator(m, F32, Direction.LT, [S32])
    outs.append(b.get_tuple_element(b.sort([x, n], 1, by_key, is_stable=True), 1))
    outs.append(b.sort([n], 0, comparator(m, S32, Direction.GT)))
    starts = [b.parameter(8 + len(DType), Shape(S32, ()), "i"), b.scalar(1, S32)]
    outs.append(b.dynamic_slice(x, starts, [1, 2]))
    outs.append(b.get_dimension_size(x, 1))
    outs.append(b.set_dimension_size(x, b.scalar(1, S32), 0))  # f32[<=2,3]
    outs.append(b.dynamic_update_slice(x, b.slice(x, [0, 0], [1, 2]), starts))
    scatter_dims = ScatterDims((1,), (0,), (0,), 1)
    outs.append(b.scatter(table, b.iota(Shape(S32, (2, 1)), 0), x, scatter_dims, add))
    batched_dims = ScatterDims((), (1,), (1,), 2, (0,), (0,))
    outs.append(b.scatter(x, n, x, batched_dims, replacer(m, F32)))
    outs.append(b.reduce(x, zero, [1], add))
    outs.append(b.add(Op.REDUCE, [x, n, zero, b.scalar(0, S32)], dimensions=(0,), called=(argmax,)))
    window = Window.make((2, 2), (1, 2), (1, 0), (0, 1), (1, 1), (2, 1))
    outs.append(b.reduce_window(x, zero, window, add))
    lhs = b.parameter(4 + len(DType), Shape(F32, (4, 2, 3)), "lhs")
    rhs = b.parameter(5 + len(DType), Shape(F32, (4, 3, 5)), "rhs")
    outs.append(b.dot(lhs, rhs, DotDims((0,), (0,), (2,), (1,))))
    outs.append(b.dot(x, x, DotDims((), (), (), ()), F32))
    image = b.parameter(6 + len(DType), Shape(F32, (1, 7, 7, 4)), "image")
    kernel = b.parameter(7 + len(DType), Shape(F32, (3, 3, 2, 6)), "kernel")
    nhwc = ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    conv_window = Window.make((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), (1, 2))
    outs.append(b.convolution(image, kernel, conv_window, nhwc, groups=2))
    # control flow: a counter loop, conditionals on a pred and on an index, a call
    count = Shape(S32, ())
    cb = ComputationBuilder(m, "loop_cond")
    loop_cond = cb.build(cb.compare(cb.parameter(0, count, "c"), cb.scalar(3, S32), Direction.LT))
    lb = ComputationBuilder(m, "loop_body")
    loop_body = lb.build(lb.binary(Op.ADD, lb.parameter(0, count, "c"), lb.scalar(1, S32)))
    outs.append(b.while_loop(loop_cond, loop_body, b.scalar(0, S32)))
    branches = []
    for op in (Op.NEGATE, Op.EXP, Op.ABS):
        bb = ComputationBuilder(m, f"branch_{op.text}")
        branches.append(bb.build(bb.unary(op, bb.parameter(0, x.shape, "v"))))
    flag = b.compare(zero, one, Direction.LT)
    outs.append(b.conditional(flag, branches[:2], [x, x]))
    outs.append(b.conditional(starts[0], branches, [x, x, x]))
    kb = ComputationBuilder(m, "callee")
    kx, kn = kb.parameter(0, x.shape, "v"), kb.parameter(1, n.shape, "k")
    callee = kb.build(kb.tuple([kb.unary(Op.NEGATE, kx), kn]))
    outs.append(b.get_tuple_element(b.call(callee, [x, n]), 0))
    t = b.tuple([x, n])
    outs.append(b.get_tuple_element(t, 1))
    outs.append(b.add(Op.FUSION, [x, x], called=(fused,), fusion_kind=FusionKind.LOOP))
    outs.append(b.rng_state(7))
    b.build(b.tuple(outs), entry=True)
    assert {i.op for c in m.computations for i in c.instructions} == set(Op)
    return m


def assert_same_module(a: Module, b: Module) -> None:
    """Structural equality: ops, shapes, names, attributes, literals bit for bit."""
    fields = (
        "dimensions",
        "slice",
        "padding",
        "window",
        "dot",
        "conv",
        "feature_group_count",
        "batch_group_count",
        "gather",
        "scatter",
        "dynamic_slice_sizes",
        "direction",
        "is_stable",
        "index",
        "fusion_kind",
        "origin",
    )
    assert a.name == b.name
    assert sorted(c.name for c in a.computations) == sorted(c.name for c in b.computations)
    assert a.entry.name == b.entry.name
    for ca in a.computations:
        cb = b.computation(ca.name)
        assert ca.root.name == cb.root.name
        assert [i.name for i in ca.instructions] == [i.name for i in cb.instructions]
        for ia, ib in zip(ca.instructions, cb.instructions):
            assert (ia.op, ia.shape) == (ib.op, ib.shape), ia.name
            assert [o.name for o in ia.operands] == [o.name for o in ib.operands]
            assert [c.name for c in ia.called] == [c.name for c in ib.called]
            for field in fields:
                assert getattr(ia, field) == getattr(ib, field), (ia.name, field)
            assert (ia.literal is None) == (ib.literal is None)
            if ia.literal is not None:
                assert_same_bits(ia.literal, ib.literal)


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        np.testing.assert_array_equal(nan, np.isnan(b))
        a, b = a[~nan], b[~nan]
    assert a.tobytes() == b.tobytes()


def round_trip(module: Module) -> Module:
    text = print_module(module)
    parsed = parse_module(text)
    assert print_module(parsed) == text
    return parsed


def test_every_op_and_dtype_round_trips():
    m = all_ops_module()
    verify(m)
    parsed = round_trip(m)
    assert_same_module(m, parsed)
    verify(parsed)


def test_printed_form_is_xla_like():
    text = print_module(all_ops_module())
    lines = text.splitlines()
    assert lines[0].startswith("HloModule all_ops, entry_computation_layout={(f32[2,3]{1,0}, ")
    assert "%add_f32 (x: f32[], y: f32[]) -> f32[] {" in lines
    assert "  ROOT %add = f32[] add(f32[] %x, f32[] %y)" in lines
    assert lines[-1] == "}" and text.endswith("}\n")
    entry_at = next(i for i, line in enumerate(lines) if line.startswith("ENTRY %main ("))
    callees = [i for i, line in enumerate(lines) if line.startswith("%")]
    assert all(i < entry_at for i in callees)  # callees before the caller, ENTRY last
    assert r'parameter(0), metadata={op_name="node \"q\" \\ back\nslash\ttab \001 é"}' in text
    assert "iota(), iota_dimension=1" in text
    assert re.search(r"broadcast\(f32\[\] %constant\.\d+\), dimensions=\{\}", text)
    assert "kind=kLoop, calls=%fused_computation" in text
    assert "dimensions={1}, to_apply=%add_f32" in text
    assert "window={size=2x2 stride=1x2 pad=1_0x0_1 rhs_dilate=2x1}, to_apply=%add_f32" in text
    assert "dim_labels=b01f_01io->b01f, feature_group_count=2" in text
    assert (
        "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
        "rhs_contracting_dims={1}" in text
    )
    assert "lhs_contracting_dims={}, rhs_contracting_dims={}" in text
    assert "operand_batching_dims={0}, start_indices_batching_dims={0}" in text
    assert "padding=1_0_1x-1_2_0" in text and "padding=1_0x0_2" in text
    assert "slice={[0:2], [1:3:2]}" in text
    assert "direction=LT" in text
    assert "dimensions={1}, is_stable=true, to_apply=%compare_lt_f32_s32" in text
    assert re.search(
        r"dynamic-slice\(f32\[2,3\]\{1,0\} %x\S*, s32\[\] %i, s32\[\] %constant"
        r"\.\d+\), dynamic_slice_sizes=\{1,2\}",
        text,
    )
    assert re.search(
        r"dynamic-update-slice\(f32\[2,3\]\{1,0\} %x\S*, f32\[1,2\]\{1,0\} %slice"
        r"\S*, s32\[\] %i, s32\[\] %constant\.\d+\)\n",
        text,
    )
    assert (
        "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
        "index_vector_dim=1, to_apply=%add_f32" in text
    )
    assert (
        "update_window_dims={}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, "
        "input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, "
        "to_apply=%replace_f32" in text
    )
    assert "sort(s32[2,3]{1,0} %n), dimensions={0}, to_apply=%compare_gt_s32" in text
    assert "constant(1.5)" in text
    assert "constant({ { {0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11} }, " in text
    assert "f16[2,0,3]{2,1,0} constant({ {}, {} })" in text


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.text)
def test_literal_edge_values_round_trip(dtype):
    m = Module("literals")
    b = ComputationBuilder(m, "main")
    array = b.constant(np.array(EDGE_VALUES[dtype], dtype=object), dtype)
    scalar = b.constant(np.array(EDGE_VALUES[dtype][1], dtype=object), dtype)
    b.build(b.tuple([array, scalar]), entry=True)
    assert_same_module(m, round_trip(m))


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16], ids=lambda d: d.text)
def test_every_16_bit_float_round_trips(dtype):
    bits = np.arange(2**16, dtype=np.uint16)
    values = bits.view(np.float16) if dtype is DType.F16 else bf16_from_bits(bits)
    m = Module("all16")
    b = ComputationBuilder(m, "main")
    b.build(b.tuple([b.constant(values, dtype)]), entry=True)
    parsed = round_trip(m)
    assert_same_bits(m.entry.instructions[0].literal, parsed.entry.instructions[0].literal)


def test_random_f32_and_f64_round_trip():
    rng = np.random.default_rng(0)
    f32 = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f64 = rng.integers(0, 2**63, 5000, dtype=np.uint64).view(np.float64)
    m = Module("random")
    b = ComputationBuilder(m, "main")
    b.build(b.tuple([b.constant(f32, F32), b.constant(f64, DType.F64)]), entry=True)
    parsed = round_trip(m)
    for before, after in zip(m.entry.instructions, parsed.entry.instructions):
        if before.literal is not None:
            assert_same_bits(before.literal, after.literal)


def test_shortest_float_text():
    m = parse_module("""
    HloModule m
    ENTRY e {
      ROOT c = (f32[3], bf16[2], f16[2], f64[1]) tuple(
        f32[3] constant({0.1, 1, 1e-05}), bf16[2] constant({0.1, 100}),
        f16[2] constant({0.1, 65504}), f64[1] constant({0.1}))
    }""")
    text = print_module(m)
    assert "constant({0.1, 1, 1e-05})" in text
    assert "bf16[2]{0} constant({0.1, 100})" in text
    assert "f16[2]{0} constant({0.1, 65500})" in text
    assert "f64[1]{0} constant({0.1})" in text
    bf16 = m.entry.instructions[1].literal
    assert bf16[0] == np.float32(0.10009765625)  # 0.1 rounded to bf16


def test_special_values_and_nan_payloads():
    m = parse_module("""
    ENTRY e {
      ROOT c = f32[5] constant({inf, -inf, nan, -nan, -0})
    }""")
    literal = m.entry.root.literal
    assert np.isposinf(literal[0]) and np.isneginf(literal[1])
    assert np.isnan(literal[2]) and np.isnan(literal[3])
    assert np.signbit(literal[4]) and literal[4] == 0
    assert "constant({inf, -inf, nan, nan, -0})" in print_module(m)


def test_metadata_string_escapes():
    origin = 'a"b\\c\nd\te\x01f é'
    m = Module("esc")
    b = ComputationBuilder(m, "main")
    b.origin = origin
    b.build(b.tuple([b.parameter(0, Shape(F32, ()))]), entry=True)
    text = print_module(m)
    assert 'metadata={op_name="a\\"b\\\\c\\nd\\te\\001f é"}' in text
    assert parse_module(text).entry.instructions[0].origin == origin
    # absl::CEscape writes UTF-8 bytes as octal escapes
    xla = 'ENTRY e {\n ROOT p = f32[] parameter(0), metadata={op_name="\\303\\251\\x41"}\n}'
    assert parse_module(xla).entry.root.origin == "éA"


def test_elided_constants():
    m = Module("big")
    b = ComputationBuilder(m, "main")
    big = b.constant(np.arange(100, dtype=np.float32))
    small = b.constant(np.arange(3, dtype=np.float32))
    b.build(b.tuple([big, small]), entry=True)
    text = print_module(m, elide_constants_over=10)
    assert "f32[100]{0} constant({...})" in text
    assert "f32[3]{0} constant({0, 1, 2})" in text
    with pytest.raises(ModelError, match=r"line 4: elided constant"):
        parse_module(text)
    with pytest.raises(ModelError, match="elided"):
        parse_module("ENTRY e {\n ROOT c = f32[] constant({...})\n}")


# -- XLA-written samples -------------------------------------------------------------

JAX_SAMPLE = """\
HloModule jit_f, entry_computation_layout={(f32[3]{0})->f32[3]{0}}

ENTRY main.4 {
  Arg_0.1 = f32[3]{0} parameter(0)
  sine.2 = f32[3]{0} sine(Arg_0.1)
  ROOT cosine.3 = f32[3]{0} cosine(sine.2)
}
"""

XLA_DUMP_SAMPLE = """\
HloModule jit_loss, is_scheduled=true, entry_computation_layout={(f32[2,3]{1,0}, s32[2]{0})->(f32[], f32[2,3]{1,0})}, allow_spmd_sharding_propagation_to_output={true}

%region_0.4 (Arg_0.5: f32[], Arg_1.6: f32[]) -> f32[] {
  %Arg_0.5 = f32[] parameter(0), metadata={op_name="jit(loss)/reduce_sum"}
  %Arg_1.6 = f32[] parameter(1)
  ROOT %add.7 = f32[] add(f32[] %Arg_0.5, f32[] %Arg_1.6), metadata={op_type="add" op_name="jit(loss)/add" source_file="/tmp/x.py" source_line=5}
}

ENTRY %main.10 (Arg_0.1: f32[2,3], Arg_1.2: s32[2]) -> (f32[], f32[2,3]) {
  %Arg_0.1 = f32[2,3]{1,0} parameter(0), sharding={replicated}
  %Arg_1.2 = s32[2]{0} parameter(1), frontend_attributes={_xla_buffer_placement="arg"}
  %constant.3 = f32[] constant(0)
  %reduce.8 = f32[] reduce(f32[2,3]{1,0} %Arg_0.1, f32[] %constant.3), dimensions={0,1}, to_apply=%region_0.4
  %exp = f32[2,3]{1,0} exponential(f32[2,3]{1,0} %Arg_0.1), backend_config={"outer_dimension_partitions":["2"],"x":{}}
  %cmp = pred[2,3]{1,0} compare(f32[2,3]{1,0} %Arg_0.1, f32[2,3]{1,0} %exp), direction=GE, type=TOTALORDER
  %sel = f32[2,3]{1,0} select(%cmp, %exp, %Arg_0.1) // a line comment
  ROOT %tuple.9 = (f32[], f32[2,3]{1,0}) tuple(f32[] %reduce.8, /*index=1*/f32[2,3]{1,0} %sel)
}
"""

TF_SAMPLE = """\
HloModule cluster

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT sum = f32[] add(x, y)
}

max {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT m = f32[] maximum(x, y)
}

ENTRY e {
  p = f32[4,6] parameter(0)
  pad = f32[6,10] pad(p, f32[] constant(0)), padding=1_1x2_2
  rw = f32[3,5] reduce-window(pad, f32[] constant(-inf)),
       window={size=2x2 stride=2x2}, to_apply=max
  ROOT r = f32[3] reduce(rw, f32[] constant(0)), dimensions={1}, to_apply=add
}
"""

OPS_SAMPLE = """\
HloModule ops

%fused_computation (param_0: f32[1,2,3,3], param_1: f32[2]) -> f32[1,2,3,3] {
  %param_0 = f32[1,2,3,3]{3,2,1,0} parameter(0)
  %param_1 = f32[2]{0} parameter(1)
  %broadcast = f32[1,2,3,3]{3,2,1,0} broadcast(f32[2]{0} %param_1), dimensions={1}
  ROOT %add = f32[1,2,3,3]{3,2,1,0} add(f32[1,2,3,3]{3,2,1,0} %param_0, f32[1,2,3,3]{3,2,1,0} %broadcast)
}

ENTRY %main (x: f32[1,4,5,5], w: f32[2,2,3,3], b: f32[2], t: f32[5,4], i: s32[3,1], l: f32[8,2,3], r: f32[8,3,4]) -> (f32[1,2,3,3], f32[3,4], f32[8,2,4], f32[2,2], s32[2,3]) {
  %x = f32[1,4,5,5]{3,2,1,0} parameter(0)
  %w = f32[2,2,3,3]{3,2,1,0} parameter(1)
  %b = f32[2]{0} parameter(2)
  %t = f32[5,4]{1,0} parameter(3)
  %i = s32[3,1]{1,0} parameter(4)
  %l = f32[8,2,3]{2,1,0} parameter(5)
  %r = f32[8,3,4]{2,1,0} parameter(6)
  %conv = f32[1,2,3,3]{3,2,1,0} convolution(f32[1,4,5,5]{3,2,1,0} %x, f32[2,2,3,3]{3,2,1,0} %w), window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=1x1}, dim_labels=bf01_oi01->bf01, feature_group_count=2
  %fusion = f32[1,2,3,3]{3,2,1,0} fusion(f32[1,2,3,3]{3,2,1,0} %conv, f32[2]{0} %b), kind=kLoop, calls=%fused_computation
  %gather = f32[3,4]{1,0} gather(f32[5,4]{1,0} %t, s32[3,1]{1,0} %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}, indices_are_sorted=true
  %dot = f32[8,2,4]{2,1,0} dot(f32[8,2,3]{2,1,0} %l, f32[8,3,4]{2,1,0} %r), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, operand_precision={highest,highest}
  %slice = f32[2,2]{1,0} slice(f32[5,4]{1,0} %t), slice={[1:5:2], [0:4:2]}
  %iota = s32[2,3]{1,0} iota(), iota_dimension=1
  %pair = (f32[2,2]{1,0}, s32[2,3]{1,0}) tuple(%slice, %iota)
  %gte = s32[2,3]{1,0} get-tuple-element((f32[2,2]{1,0}, s32[2,3]{1,0}) %pair), index=1
  ROOT %out = (f32[1,2,3,3]{3,2,1,0}, f32[3,4]{1,0}, f32[8,2,4]{2,1,0}, f32[2,2]{1,0}, /*index=4*/s32[2,3]{1,0}) tuple(%fusion, %gather, %dot, %slice, %gte)
}
"""


SORT_SCATTER_SAMPLE = """\
HloModule jit_f, entry_computation_layout={(f32[5]{0}, s32[])->(f32[5]{0}, s32[5]{0}, f32[5]{0}, f32[2]{0})}

region_0.2 {
  Arg_0.3 = f32[] parameter(0)
  Arg_1.4 = f32[] parameter(1)
  Arg_2.5 = s32[] parameter(2)
  Arg_3.6 = s32[] parameter(3)
  ROOT compare.7 = pred[] compare(Arg_0.3, Arg_1.4), direction=GT
}

region_1.8 {
  Arg_0.9 = f32[] parameter(0)
  ROOT Arg_1.10 = f32[] parameter(1)
}

ENTRY main.20 {
  Arg_0.1 = f32[5]{0} parameter(0)
  Arg_1.2 = s32[] parameter(1)
  iota.11 = s32[5]{0} iota(), iota_dimension=0
  sort.12 = (f32[5]{0}, s32[5]{0}) sort(Arg_0.1, iota.11), dimensions={0}, is_stable=true, to_apply=region_0.2
  get-tuple-element.13 = f32[5]{0} get-tuple-element(sort.12), index=0
  get-tuple-element.14 = s32[5]{0} get-tuple-element(sort.12), index=1
  constant.15 = s32[2,1]{1,0} constant({ {4}, {0} })
  constant.16 = f32[2]{0} constant({-1, -2})
  scatter.17 = f32[5]{0} scatter(Arg_0.1, constant.15, constant.16), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, indices_are_sorted=false, unique_indices=false, to_apply=region_1.8
  dynamic-slice.18 = f32[2]{0} dynamic-slice(Arg_0.1, Arg_1.2), dynamic_slice_sizes={2}
  ROOT tuple.19 = (f32[5]{0}, s32[5]{0}, f32[5]{0}, f32[2]{0}) tuple(get-tuple-element.13, get-tuple-element.14, scatter.17, dynamic-slice.18)
}
"""


def test_xla_sort_scatter_dynamic_slice_sample():
    from aotc.ir.evaluate import evaluate

    m = parse_hlo(SORT_SCATTER_SAMPLE)
    verify(m)
    x = np.array([3.0, 1.0, 4.0, 1.5, 9.0], np.float32)
    values, order, scattered, window = evaluate(m, [x, np.array(7, np.int32)])
    assert order.tolist() == [4, 2, 0, 3, 1] and values.tolist() == sorted(x, reverse=True)
    assert scattered.tolist() == [-2.0, 1.0, 4.0, 1.5, -1.0]
    assert window.tolist() == [1.5, 9.0]  # start 7 clamped to 3


def test_jax_sample_without_sigils_or_operand_shapes():
    m = parse_module(JAX_SAMPLE)
    verify(m)
    assert m.name == "jit_f" and m.entry.name == "main.4"
    assert [i.op for i in m.entry.instructions] == [Op.PARAMETER, Op.SIN, Op.COS]
    assert m.entry.root.name == "cosine.3"
    assert m.entry.root.operands[0].name == "sine.2"


def test_xla_dump_with_metadata_sharding_and_comments():
    m = parse_hlo(XLA_DUMP_SAMPLE)
    verify(m)
    region = m.computation("region_0.4")
    assert region.root.origin == "jit(loss)/add"
    assert region.instructions[0].origin == "jit(loss)/reduce_sum"
    entry = m.entry
    assert entry.name == "main.10"
    reduce = next(i for i in entry.instructions if i.op is Op.REDUCE)
    assert reduce.dimensions == (0, 1) and reduce.called == (region,)
    assert reduce.shape == Shape(F32, ())
    cmp = next(i for i in entry.instructions if i.op is Op.COMPARE)
    assert cmp.direction is Direction.GE
    assert [o.name for o in entry.root.operands] == ["reduce.8", "sel"]
    assert_same_module(m, round_trip(m))


def test_tf_sample_nested_operands_and_scoped_names():
    m = parse_module(TF_SAMPLE)
    verify(m)  # names unique module-wide after parsing
    names = [i.name for c in m.computations for i in c.instructions]
    assert len(set(names)) == len(names)
    assert [i.name for i in m.computation("add").instructions] == ["x", "y", "sum"]
    assert m.computation("max").instructions[0].name != "x"
    pad = next(i for i in m.entry.instructions if i.op is Op.PAD)
    assert pad.padding == PaddingConfig((1, 2), (1, 2), (0, 0))
    assert pad.operands[1].op is Op.CONSTANT and pad.operands[1].literal == 0
    rw = next(i for i in m.entry.instructions if i.op is Op.REDUCE_WINDOW)
    assert rw.window == Window.make((2, 2), (2, 2))
    assert np.isneginf(rw.operands[1].literal)
    assert rw.called == (m.computation("max"),)
    assert m.entry.root.shape == Shape(F32, (3,))
    assert_same_module(m, round_trip(m))


def test_ops_sample_attributes():
    m = parse_hlo(OPS_SAMPLE)
    verify(m)
    by_name = {i.name: i for i in m.entry.instructions}
    conv = by_name["conv"]
    assert conv.conv == ConvDims.nchw(2)
    assert conv.window == Window.make((3, 3), (2, 2), (1, 1), (1, 1))
    assert conv.feature_group_count == 2 and conv.batch_group_count == 1
    assert by_name["fusion"].fusion_kind is FusionKind.LOOP
    assert by_name["fusion"].called == (m.computation("fused_computation"),)
    assert by_name["gather"].gather == GatherDims((1,), (0,), (0,), 1, (1, 4))
    assert by_name["dot"].dot == DotDims((0,), (0,), (2,), (1,))
    assert by_name["slice"].slice == SliceSpec((1, 0), (5, 4), (2, 2))
    assert by_name["iota"].dimensions == (1,)
    assert by_name["gte"].index == 1
    assert_same_module(m, round_trip(m))


def test_attribute_spellings():
    assert (
        window_text(Window.make((3, 3), (2, 2), (1, 1), (1, 1)))
        == "{size=3x3 stride=2x2 pad=1_1x1_1}"
    )
    assert window_text(Window.make((3,))) == "{size=3}"
    full = Window.make((2, 1), (1, 1), (0, -1), (2, 0), (2, 1), (1, 3))
    assert window_text(full) == "{size=2x1 pad=0_2x-1_0 lhs_dilate=2x1 rhs_dilate=1x3}"
    assert padding_text(PaddingConfig((0, 1), (0, -1), (0, 0))) == "0_0x1_-1"
    assert padding_text(PaddingConfig((0, 1), (0, 1), (0, 2))) == "0_0_0x1_1_2"
    assert slice_text(SliceSpec((0, 1), (2, 5), (1, 2))) == "{[0:2], [1:5:2]}"
    assert dim_labels_text(ConvDims.nchw(2)) == "bf01_oi01->bf01"
    assert dim_labels_text(ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))) == "b01f_01io->b01f"


def test_parser_accepts_both_spellings_of_defaults():
    text = """
    HloModule m
    ENTRY e {
      p = f32[4,4] parameter(0)
      z = f32[] constant(0)
      a = f32[2,2] slice(p), slice={[0:2:1], [1:3:1]}
      b = f32[5,5] pad(p, z), padding=0_1_0x1_0_0
      ROOT c = f32[4,4] reduce-window(p, z), window={size=1x1 stride=1x1 pad=0_0x0_0 lhs_dilate=1x1 rhs_dilate=1x1}, to_apply=add
    }
    add {
      x = f32[] parameter(0)
      y = f32[] parameter(1)
      ROOT s = f32[] add(x, y)
    }
    """
    m = parse_module(text)  # to_apply names a computation defined further down
    verify(m)
    assert m.entry.name == "e"
    text = print_module(m)
    assert "slice={[0:2], [1:3]}" in text and "padding=0_1x1_0" in text
    assert "window={size=1x1}" in text


def test_whitespace_and_newlines_do_not_matter():
    squeezed = " ".join(TF_SAMPLE.split())
    assert print_module(parse_module(squeezed)) == print_module(parse_module(TF_SAMPLE))


def test_print_instruction_is_one_line():
    m = all_ops_module()
    for instr in m.entry.instructions:
        line = print_instruction(instr)
        assert "\n" not in line and line.startswith(f"%{instr.name} = ")


# -- errors ----------------------------------------------------------------------------


def bad(text: str, error=ModelError, match: str = ""):
    with pytest.raises(error, match=match) as info:
        parse_module(text)
    return str(info.value)


def test_unknown_opcode_names_line():
    text = "HloModule m\n\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT c = f32[2] frob(p)\n}\n"
    message = bad(text, ModelError, r"unknown opcode 'frob' \(%c\)")
    assert "line 5" in message and "ROOT c = f32[2] frob(p)" in message


def test_wrong_written_shape_names_line():
    text = """HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  ROOT y = f32[3] add(x, x)
}"""
    message = bad(text, ShapeError, "line 4")
    assert "f32[3]" in message and "add" in message


@pytest.mark.parametrize(
    "body, error, match",
    [
        ("ROOT y = f32[2] add(f32[3] x, x)", ShapeError, "written as f32\\[3\\]"),
        ("ROOT y = f32[2] add(x, z)", ModelError, "operand %z is not defined"),
        ("ROOT y = f32[1] slice(x)", ModelError, "slice needs slice="),
        ("ROOT y = f32[2] compare(x, x)", ModelError, "compare needs direction="),
        ("ROOT y = pred[2] compare(x, x), direction=XX", ModelError, "direction 'XX'"),
        ("ROOT y = s8[2] constant({1, 300})", ModelError, "out of range for s8"),
        ("ROOT y = s8[2] constant({1, 1.5})", ModelError, "'1.5' is not a s8 value"),
        ("ROOT y = f32[3] constant({1, 2})", ModelError, "2 entries in dimension 0"),
        ("ROOT y = c64[2] parameter(1)", ModelError, "unknown element type 'c64'"),
        ("ROOT y = f32[2] negate(x), metadata={op_name=\"open}", ModelError, "cannot read"),
        ("ROOT y = f32[2] reduce(x, x), dimensions={0}, to_apply=nowhere", ModelError,
         "no computation %nowhere"),
        ("ROOT y = f32[2] transpose(x), dimensions={3}", ShapeError, "bad permutation"),
        ("ROOT y = f32[2,2] dot(x, x), lhs_contracting_dims={5}, rhs_contracting_dims={0}",
         ShapeError, "line 3"),
        ("ROOT y = f32[2] add(x, x), window={size=2 bogus=1}", ModelError, "window field"),
    ],
)  # fmt: skip
def test_errors(body, error, match):
    # the bad instruction shares line 3 with the parameter
    text = f"HloModule m\nENTRY e {{\n  x = f32[2] parameter(0)  {body}\n}}\n"
    message = bad(text, error, match)
    assert "line 3" in message or "cannot read" in message


def test_parse_errors_for_structure():
    bad("HloModule m\n", ModelError, "no computations")
    bad("ENTRY e {\n}\n", ModelError, "no instructions")
    bad(
        "ENTRY e {\n  x = f32[2] parameter(0)\n  x = f32[2] parameter(1)\n}",
        ModelError,
        "defined twice",
    )
    bad(
        "ENTRY e (a: f32[3]) -> f32[3] {\n  ROOT x = f32[2] parameter(0)\n}",
        ModelError,
        "signature",
    )
    bad("ENTRY e {\n  ROOT x = f32[2 parameter(0)\n}", ModelError, "line 2: expected")


@pytest.mark.parametrize(
    "text, error, match",
    [
        ("HloModule m, is_scheduled=true\nENTRY e {\n  ROOT x = f32[2] parameter(0)\n}",
         ModelError, "unknown module attribute is_scheduled="),
        ("ENTRY e {\n  ROOT x = f32[2] parameter(0), sharding={replicated}\n}", ModelError,
         "line 2: unknown attribute sharding="),
        ('ENTRY e {\n  ROOT x = f32[2] parameter(0), metadata={op_type="a" op_name="b"}\n}',
         ModelError, "expected 'op_name'"),
        ("ENTRY e {\n  x = f32[2,3] parameter(0)\n  ROOT n = f32[2,3]{0,1} negate(x)\n}",
         UnsupportedError, r"line 3: layout \{0,1\} is not row-major"),
        ("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT c = f32[2] copy(x)\n}", ModelError,
         "unknown opcode 'copy'"),
    ],
)  # fmt: skip
def test_what_only_xla_dumps_carry_is_the_hlo_frontends(text, error, match):
    """The IR's parser reads its canonical text; XLA's extras need `parse_hlo`."""
    bad(text, error, match)
    parse_hlo(text)
