"""The HLO text frontend on what XLA prints beyond aotc's own text: dump tables, XLA
opcodes the frontend rewrites (aotc.frontends.hlo.expansions), refusals.  Each rewrite
is checked with the evaluator against numpy, and compiled against the evaluator."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from aotc.driver import CompileOptions, compile_model
from aotc.errors import AotcError, UnsupportedError
from aotc.frontends.hlo import import_hlo, is_hlo_text, parse_hlo
from aotc.ir import Op
from aotc.ir.evaluate import evaluate


def module_file(tmp_path, text: str):
    path = tmp_path / "module.hlo"
    path.write_text(text)
    return path


def evaluated_and_compiled(tmp_path, text: str, *args) -> tuple[list, list]:
    """The entry's outputs from the evaluator and from compiled code (lists of arrays)."""
    path = module_file(tmp_path, text)
    expected = evaluate(import_hlo(path), list(args))
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    compiled = compile_model(path, CompileOptions(name="m")).load()(*args)
    for want, got in zip(expected, compiled):
        if want.dtype.kind == "f":  # compiled code sums in f32, the evaluator in f64
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        else:
            np.testing.assert_array_equal(got, want)
    return expected, compiled


def test_sniffing():
    assert is_hlo_text(b"HloModule m\n")
    assert is_hlo_text(b"\n  // a comment\n/* and\n another */ HloModule m")
    assert not is_hlo_text(b"\x08\x07\x12\x05HloModule")  # protobuf bytes
    assert not is_hlo_text(b"// HloModule in a comment\nENTRY e {")


DUMP = """HloModule jit_f, entry_computation_layout={(f32[3]{0})->(f32[3]{0}, f32[3]{0})}, \
allow_spmd_sharding_propagation_to_output={true}

FileNames
1 "/tmp/f.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=11 end_column=20}

StackFrames
1 {file_location_id=1 parent_frame_id=1}


ENTRY %main.2 (x.1: f32[3]) -> (f32[3], f32[3]) {
  %x.1 = f32[3]{0} parameter(0), metadata={op_name="x"}
  %copy.1 = f32[3]{0} copy(f32[3]{0} %x.1), sharding={replicated}
  %tuple.0 = (f32[3]{0}) tuple(%copy.1)
  %barrier.1 = (f32[3]{0}) opt-barrier((f32[3]{0}) %tuple.0)
  %gte.1 = f32[3]{0} get-tuple-element(%barrier.1), index=0
  %sin.1 = f32[3]{0} sine(%gte.1), metadata={op_name="jit(f)/sin" stack_frame_id=1}
  %cc.1 = f32[3]{0} custom-call(%sin.1), custom_call_target="Sharding", sharding={replicated}
  ROOT %tuple.1 = (f32[3]{0}, f32[3]{0}) tuple(%cc.1, %x.1), frontend_attributes={a="b"}
}
"""


def test_dump_tables_metadata_and_identities_are_read(tmp_path):
    module = import_hlo(module_file(tmp_path, DUMP))
    ops = [i.op for i in module.entry.instructions]
    assert ops == [Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.SIN, Op.TUPLE]
    x = np.array([0.5, -1.0, 2.0], np.float32)
    sin, same = evaluate(module, [x])
    np.testing.assert_allclose(sin, np.sin(x), rtol=1e-6)
    np.testing.assert_array_equal(same, x)
    # the C API keeps the written names
    assert module.input_names == ["x.1"] and module.output_names == ["sin.1", "x.1"]


# every f32 class in total order: -NaN < -inf < -1 < -0 < +0 < 1 < inf < +NaN
TOTAL_ORDER = np.array([-np.nan, -np.inf, -1.0, -0.0, 0.0, 1.0, np.inf, np.nan], np.float32)
TOTAL_ORDER[0] = -np.abs(TOTAL_ORDER[0])  # a NaN with its sign bit set


@pytest.mark.parametrize("direction", ["LT", "GE", "EQ"])
def test_total_order_compare(tmp_path, direction):
    text = f"""HloModule m
ENTRY e {{
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  ROOT c = pred[64] compare(x, y), direction={direction}, type=TOTALORDER
}}
"""
    rank_x, rank_y = np.divmod(np.arange(64), 8)  # every pair of classes
    x, y = TOTAL_ORDER[rank_x], TOTAL_ORDER[rank_y]
    expected = {"LT": rank_x < rank_y, "GE": rank_x >= rank_y, "EQ": rank_x == rank_y}[direction]
    (got, _) = evaluated_and_compiled(tmp_path, text, x, y)
    np.testing.assert_array_equal(got[0], expected)


def test_ieee_compare_types_are_plain_compares():
    module = parse_hlo("""HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  ROOT c = pred[2] compare(x, x), direction=EQ, type=FLOAT
}
""")
    assert module.entry.root.op is Op.COMPARE
    np.testing.assert_array_equal(
        evaluate(module, [np.array([1, np.nan], np.float32)]), [True, False]
    )


def test_topk(tmp_path):
    text = """HloModule m
ENTRY e {
  x = f32[3,10] parameter(0)
  ROOT t = (f32[3,4], s32[3,4]) topk(x), k=4, largest=true
}
"""
    x = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    x[1, 2] = x[1, 7] = 5.0  # a tie: the lower index first
    (values, indices), _ = evaluated_and_compiled(tmp_path, text, x)
    order = np.argsort(-x, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))


def select_and_scatter_reference(x, source, init, size, stride, pad_low, choose):
    """XLA's definition, loop by loop: each window picks its first valid element,
    replaced by each later one `choose(picked, later)` rejects; source values add in."""
    out = np.full(x.shape, init, x.dtype)
    for position in np.ndindex(source.shape):
        picked = None
        for tap in np.ndindex(*size):
            at = tuple(p * s + t - lo for p, s, t, lo in zip(position, stride, tap, pad_low))
            if any(a < 0 or a >= n for a, n in zip(at, x.shape)):
                continue
            if picked is None or not choose(x[picked], x[at]):
                picked = at
        if picked is not None:
            out[picked] += source[position]
    return out


@pytest.mark.parametrize("select", ["GE", "LE"])
def test_select_and_scatter(tmp_path, select):
    # overlapping 3x3 windows, stride 2, padded: elements picked twice add up
    text = f"""HloModule m
pick {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction={select}
}}
sum {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[2,7,6] parameter(0)
  src = f32[2,4,3] parameter(1)
  zero = f32[] constant(0.5)
  ROOT r = f32[2,7,6] select-and-scatter(x, src, zero), window={{size=1x3x3 stride=1x2x2 \
pad=0_0x1_1x1_0}}, select=pick, scatter=sum
}}
"""
    r = np.random.default_rng(1)
    x = r.integers(-3, 4, (2, 7, 6)).astype(np.float32)  # small ints: many ties
    source = r.standard_normal((2, 4, 3)).astype(np.float32)
    choose = np.greater_equal if select == "GE" else np.less_equal
    expected = select_and_scatter_reference(x, source, 0.5, (1, 3, 3), (1, 2, 2), (0, 1, 1), choose)
    (got,), _ = evaluated_and_compiled(tmp_path, text, x, source)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("bits, narrow", [((8, 7), ml_dtypes.bfloat16), ((5, 10), np.float16)])
def test_reduce_precision(tmp_path, bits, narrow):
    exponent, mantissa = bits
    text = f"""HloModule m
ENTRY e {{
  x = f32[9] parameter(0)
  ROOT r = f32[9] reduce-precision(x), exponent_bits={exponent}, mantissa_bits={mantissa}
}}
"""
    finfo = ml_dtypes.finfo(narrow)
    normal = np.array([1.0, -1 / 3, 0.1, 1000.7, -2.5e-3, 3.14159], np.float32)
    # just past the largest value: inf; below the smallest normal: zero where the
    # exponent narrows (f16: no denormals), the narrow type's denormal where it does not
    edges = np.array([float(finfo.max) * 1.003, float(finfo.tiny) / 4, np.nan], np.float32)
    tiny = 0.0 if exponent < 8 else float(edges[1].astype(narrow))
    x = np.concatenate([normal, edges])
    (got,), _ = evaluated_and_compiled(tmp_path, text, x)
    np.testing.assert_array_equal(got[:6], normal.astype(narrow).astype(np.float32))
    np.testing.assert_array_equal(got[6:8], [np.inf, tiny])
    assert np.isnan(got[8])


KCUSTOM = """HloModule m
fused {
  a = f32[2,3] parameter(0)
  b = f32[3,2] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[3,2] parameter(1)
  ROOT f = f32[2,2] fusion(x, y), kind=kCustom, calls=fused, backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
}
"""


def test_library_fusions_are_inlined(tmp_path):
    module = import_hlo(module_file(tmp_path, KCUSTOM))
    assert [i.op for i in module.entry.instructions] == [Op.PARAMETER, Op.PARAMETER, Op.DOT]
    r = np.random.default_rng(2)
    x, y = (
        r.standard_normal((2, 3)).astype(np.float32),
        r.standard_normal((3, 2)).astype(np.float32),
    )
    (got,), _ = evaluated_and_compiled(tmp_path, KCUSTOM, x, y)
    np.testing.assert_allclose(got, x @ y, rtol=1e-6)


def test_custom_call_is_refused_naming_target_and_instruction():
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT lu = f32[4] custom-call(x), custom_call_target="lapack_sgetrf_ffi", api_version=API_VERSION_TYPED_FFI
}
"""
    with pytest.raises(
        UnsupportedError, match=r"line 4: custom-call target 'lapack_sgetrf_ffi' \(%lu\)"
    ):
        parse_hlo(text)


def test_bitcast_convert_between_widths(tmp_path):
    text = """HloModule m
ENTRY e {
  x = u32[3,2] parameter(0)
  y = f32[3] parameter(1)
  wide = u64[3] bitcast-convert(x)
  bytes = u8[3,4] bitcast-convert(y)
  back = s32[3,2] bitcast-convert(wide)
  ROOT t = (u64[3], u8[3,4], s32[3,2]) tuple(wide, bytes, back)
}
"""
    x = np.array([[1, 2], [0xFFFFFFFF, 0], [0x12345678, 0x9ABCDEF0]], np.uint32)
    y = np.array([1.5, -0.0, np.inf], np.float32)
    (wide, as_bytes, back), _ = evaluated_and_compiled(tmp_path, text, x, y)
    np.testing.assert_array_equal(wide, x.view(np.uint64).reshape(3))  # lane 0 lowest
    np.testing.assert_array_equal(as_bytes, y.view(np.uint8).reshape(3, 4))
    np.testing.assert_array_equal(back, x.view(np.int32))


def test_rng_bit_generator_known_answer(tmp_path):
    # JAX 0.10 on CPU: lax.rng_bit_generator(u32[1, 2, 3, 4], (5,), uint32, RNG_PHILOX)
    text = """HloModule m
ENTRY e {
  key = u32[4] parameter(0)
  pairs = u32[2,2] reshape(key)
  state = u64[2] bitcast-convert(pairs)
  rng = (u64[2], u32[5]) rng-bit-generator(state), algorithm=rng_philox
  new = u64[2] get-tuple-element(rng), index=0
  words = u32[2,2] bitcast-convert(new)
  new_key = u32[4] reshape(words)
  bits = u32[5] get-tuple-element(rng), index=1
  ROOT t = (u32[4], u32[5]) tuple(new_key, bits)
}
"""
    (state, bits), _ = evaluated_and_compiled(tmp_path, text, np.array([1, 2, 3, 4], np.uint32))
    np.testing.assert_array_equal(state, [1, 2, 5, 4])
    np.testing.assert_array_equal(bits, [512747620, 1298009047, 1267190206, 761827841, 1383286907])


def test_expansions_are_named_and_verify():
    from aotc.ir.verify import verify

    module = parse_hlo("""HloModule m
ENTRY e {
  x = f32[2,6] parameter(0)
  ROOT t = (f32[2,3], s32[2,3]) topk(x), k=3, largest=true
}
""")
    verify(module)
    names = [i.name for c in module.computations for i in c.instructions]
    assert len(names) == len(set(names)) and all(names)
    assert module.entry.root.name == "t" and module.entry.root.op is Op.TUPLE


def test_layouts_are_read_and_checked():
    body = """HloModule m, is_scheduled=true, entry_computation_layout={(f32[2,3]{1,0})->f32[3,2]{1,0}}
ENTRY e {
  x = f32[2,3]{1,0:T(8,128)} parameter(0)
  %s
}
"""
    # a transposed copy is only a copy; a bitcast of it would be a transpose: refused
    copy = parse_hlo(body % "ROOT c = f32[2,3]{0,1} copy(x)")
    assert copy.entry.root.op is Op.PARAMETER
    with pytest.raises(UnsupportedError, match="line 5: bitcast in a module with non-row-major"):
        parse_hlo(body % "c = f32[2,3]{0,1} copy(x)\n  ROOT b = f32[3,2]{1,0} bitcast(c)")
    reshape = parse_hlo(body % "ROOT b = f32[3,2]{1,0} bitcast(x)")  # row-major: a reshape
    np.testing.assert_array_equal(
        evaluate(reshape, [np.arange(6, dtype=np.float32).reshape(2, 3)]),
        np.arange(6).reshape(3, 2),
    )
    with pytest.raises(UnsupportedError, match="entry parameter with a layout other than row"):
        parse_hlo(body.replace("{1,0:T(8,128)}", "{0,1}") % "ROOT n = f32[2,3] negate(x)")


def test_attributes_without_meaning_here_are_ignored():
    decorated = """HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }, \
entry_computation_layout={(f32[2,2]{1,0:T(2,128)})->(f32[2,2]{1,0})}, num_partitions=1

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b), metadata={op_type="Add" op_name="a/\\"b\\"" \
source_file="x.py" source_line=3 stack_frame_id=2}
}

ENTRY %main (x: f32[2,2]) -> (f32[2,2]) {
  %x = f32[2,2]{1,0:T(2,128)} parameter(0), sharding={devices=[2,1]0,1}, \
frontend_attributes={_xla_compute_type="host"}, origin={{"x"}}
  %z = f32[] constant(0), backend_config="{\\"k\\": 1}"
  %r = f32[2] reduce(f32[2,2]{1,0} %x, f32[] %z), dimensions={1}, to_apply=%add, \
backend_config={"outer_dimension_partitions":[]}, statistics={visualizing_index=1}
  %e = f32[2,2]{1,0} exponential(%x), control-predecessors={%r}, result_accuracy={tolerance={atol=0 rtol=0 ulps=1}}
  ROOT %t = (f32[2,2]{1,0}) tuple(%e), sharding={{replicated}}
}
"""
    plain = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[2,2] parameter(0)
  z = f32[] constant(0)
  r = f32[2] reduce(x, z), dimensions={1}, to_apply=add
  e = f32[2,2] exponential(x)
  ROOT t = (f32[2,2]) tuple(e)
}
"""
    from aotc.ir.text import print_module

    def canonical(text):  # metadata is kept as the origin; it is not semantic
        module = parse_hlo(text)
        for comp in module.computations:
            for instr in comp.instructions:
                instr.origin = None
        return print_module(module)

    assert canonical(decorated) == canonical(plain)


RNG_MODULE = """HloModule m
ENTRY e {
  a = f32[] constant(-1)
  b = f32[] constant(3)
  u = f32[4000] rng(a, b), distribution=rng_uniform
  lo = s32[] constant(-5)
  hi = s32[] constant(7)
  i = s32[4000] rng(lo, hi), distribution=rng_uniform
  mu = f64[] constant(2)
  sd = f64[] constant(0.5)
  n = f64[4000] rng(mu, sd), distribution=rng_normal
  ROOT t = (f32[4000], s32[4000], f64[4000]) tuple(u, i, n)
}
"""


def test_stateful_rng_draws_its_distribution_afresh_each_run(tmp_path):
    """TF's stateful random ops dump as `rng`: Philox draws (the compiled code's equal the
    evaluator's), within 4 sigma of each distribution's mean and spread, and new ones on
    the next run."""
    (u, i, n), _ = evaluated_and_compiled(tmp_path, RNG_MODULE)
    assert -1 <= u.min() and u.max() < 3 and abs(u.mean() - 1) < 4 * (4 / 12**0.5) / 4000**0.5
    assert set(np.unique(i)) == set(range(-5, 7))  # every value of [-5, 7) drawn
    assert abs(n.mean() - 2) < 4 * 0.5 / 4000**0.5 and abs(n.std() - 0.5) < 0.03
    module = import_hlo(module_file(tmp_path, RNG_MODULE))
    first, second = evaluate(module, []), evaluate(module, [])
    assert not np.array_equal(first[0], second[0])


def test_a_module_the_verifier_refuses_is_refused_as_it_is_read(tmp_path):
    """A called computation's parameter numbered past its caller's operands (a mutated
    number) is refused naming the file and the instruction, not an IndexError later."""
    text = """HloModule m
callee {
  a = f32[4] parameter(7)
  ROOT n = f32[4] negate(a)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT c = f32[4] call(x), to_apply=callee
}
"""
    path = module_file(tmp_path, text)
    with pytest.raises(AotcError, match=r"module.hlo: in %callee: parameters must be numbered"):
        import_hlo(path)


@pytest.mark.parametrize(
    "root, message",
    [
        (
            (
                "f32[2,3] dot(a, b), lhs_contracting_dims={9223372036854775808}, "
                "rhs_contracting_dims={0}"
            ),
            r"lhs dims \[9223372036854775808\] repeated or not below 2",
        ),
        (
            "f32[2,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={-1}",
            r"rhs dims \[-1\] repeated or not below 2",
        ),
    ],
)
def test_dimension_numbers_out_of_range_are_refused(tmp_path, root, message):
    """Dimension numbers past an operand's rank (mutated numbers) are one clear error
    naming the instruction, not an IndexError from the shape rule."""
    text = f"""HloModule m
ENTRY e {{
  a = f32[2,4] parameter(0)
  b = f32[4,3] parameter(1)
  ROOT d = {root}
}}
"""
    with pytest.raises(AotcError, match=message):
        import_hlo(module_file(tmp_path, text))
