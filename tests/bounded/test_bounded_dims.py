"""Bounded dims (passes/bounded_dims.py): one compile for every extent up to the bounds.

The IR's `<=N` dims print and parse; the shape rules carry them and refuse the index
maps that would read an extent; the padder's static program, evaluated with NaN in the
padding, equals numpy at the actual extents; ONNX models compiled once with --dim
ranges match onnxruntime at several extents (rtol 1e-4, atol 1e-5), from Python and
from C through NAME_run_bounded; what cannot be bounded yet is refused in one line.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from aotc_testing import build_c, run_cli
from bounded_models import encoder_layer, mlp, shape_driven
from onnx import TensorProto, helper, numpy_helper

from aotc.driver import CompileOptions, compile_model
from aotc.errors import AotcError, ShapeError
from aotc.ir import (
    ComputationBuilder,
    DotDims,
    DType,
    Module,
    Op,
    Shape,
    scalar_reducer,
)
from aotc.ir.bounds import DimRange
from aotc.ir.evaluate import evaluate
from aotc.ir.parser import parse_module
from aotc.ir.text import print_module
from aotc.ir.verify import verify
from aotc.passes.bounded_dims import BoundedDims

RTOL, ATOL = 1e-4, 1e-5


def _bounded(*dims, dtype=DType.F32) -> Shape:
    """A shape from dims written as ints (static) or "<=N" strings (bounded)."""
    flags = [isinstance(d, str) for d in dims]
    return Shape(dtype, tuple(int(str(d).lstrip("<=")) for d in dims), tuple(flags))


# -- the IR ----------------------------------------------------------------------------


def test_bounded_dims_print_and_parse():
    text = """HloModule m

ENTRY %main (x: f32[<=8,16]) -> f32[<=8] {
  %x = f32[<=8,16]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %t = f32[16,<=8]{1,0} transpose(f32[<=8,16]{1,0} %x), dimensions={1,0}
  ROOT %r = f32[<=8]{0} reduce(f32[16,<=8]{1,0} %t, f32[] %zero), dimensions={0}, to_apply=%add
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
"""
    module = parse_module(text)
    root = module.entry.root
    assert root.shape == _bounded("<=8")
    assert root.operands[0].shape == _bounded(16, "<=8")
    assert "f32[<=8,16]" in print_module(module)
    assert parse_module(print_module(module)).entry.root.shape == root.shape


def test_a_written_shape_must_carry_the_bounds():
    text = """HloModule m

ENTRY %main (x: f32[<=8,16]) -> f32[8,16] {
  %x = f32[<=8,16]{1,0} parameter(0)
  ROOT %n = f32[8,16]{1,0} negate(f32[<=8,16]{1,0} %x)
}
"""
    with pytest.raises(ShapeError, match=r"negate gives f32\[<=8,16\]"):
        parse_module(text)


# op built on a bounded operand -> the message of the shape rule that refuses it
REFUSED = {
    "slice": ("slices bounded dim 0", lambda b, x: b.slice(x, [1, 0], [8, 16])),
    "reverse": ("reverses bounded dim 0", lambda b, x: b.reverse(x, [0])),
    "pad": (
        "pads bounded dim 0",
        lambda b, x: b.pad(x, b.scalar(0, DType.F32), [0, 0], [1, 0]),
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_index_maps_that_read_an_extent_are_refused(case):
    message, build = REFUSED[case]
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, _bounded("<=8", 16), "x")
    with pytest.raises(ShapeError, match=message):
        build(b, x)


def test_shape_rules_carry_the_bounds():
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, _bounded("<=8", 4, 16), "x")
    w = b.constant(np.ones((16, 3), np.float32))
    assert b.dot(x, w, DotDims((), (), (2,), (0,))).shape == _bounded("<=8", 4, 3)
    assert b.reshape(x, [32, 16]).shape == _bounded("<=32", 16)  # the major dim of a merge
    assert b.reshape(x, [2, 4, 4, 16]).shape == _bounded("<=2", 4, 4, 16)  # and of a split
    assert b.broadcast(x, [0, 1, 2], [8, 4, 16, 2]).shape == _bounded("<=8", 4, 16, 2)
    y = b.binary(Op.ADD, x, b.broadcast(b.scalar(1, DType.F32), [], [8, 4, 16]))
    assert y.shape == x.shape  # a static operand at the bound is read at the extents
    reduced = b.reduce(x, b.scalar(0, DType.F32), [2], scalar_reducer(module, Op.ADD, DType.F32))
    assert reduced.shape == _bounded("<=8", 4)


# -- the padder ------------------------------------------------------------------------


def _padded_program():
    """x [<=8, 16] -> (sum over the batch of exp(x W), exp(x W) flattened, (x W)^T (x W),
    softmax of x W over the batch): reductions and a dot along the bounded dim, a merge."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, _bounded("<=8", 16), "x")
    y = b.dot(x, b.constant(w), DotDims((), (), (1,), (0,)))
    e = b.unary(Op.EXP, y)
    add = scalar_reducer(module, Op.ADD, DType.F32)
    maximum = scalar_reducer(module, Op.MAXIMUM, DType.F32)
    total = b.reduce(e, b.scalar(0, DType.F32), [0], add)
    gram = b.dot(b.transpose(y, [1, 0]), y, DotDims((), (), (1,), (0,)))
    peak = b.reduce(y, b.scalar(-np.inf, DType.F32), [0], maximum)
    shifted = b.unary(Op.EXP, b.binary(Op.SUBTRACT, y, b.broadcast(peak, [1], [8, 4])))
    norm = b.reduce(shifted, b.scalar(0, DType.F32), [0], add)
    softmax = b.binary(Op.DIVIDE, shifted, b.broadcast(norm, [1], [8, 4]))
    b.build(b.tuple([total, b.reshape(e, [32]), gram, softmax]), entry=True)
    return module, w


@pytest.mark.parametrize("batch", [0, 1, 3, 8])
def test_padded_program_equals_the_actual_extents(batch):
    module, w = _padded_program()
    assert BoundedDims().run(module)
    verify(module)
    assert all(i.shape.is_static for i in module.entry.instructions if not i.shape.is_tuple)
    bounds = module.bounds
    assert bounds.inputs == ((0, 0, 8),) and bounds.input_dims == 1
    assert [o[:2] for o in bounds.outputs] == [(1, 0), (3, 0)]
    x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
    args = bounds.padded_args([(8, 16)], [x])
    args[0][batch:] = np.nan  # the padding holds anything
    got = bounds.actual_outputs(list(evaluate(module, args)))
    y = x.astype(np.float64) @ w
    e = np.exp(y)
    softmax = np.exp(y - y.max(0, initial=-np.inf)) / np.exp(y - y.max(0, initial=-np.inf)).sum(0)
    for have, want in zip(got, [e.sum(0), e.reshape(-1), y.T @ y, softmax]):
        assert have.shape == want.shape
        np.testing.assert_allclose(have, want, rtol=RTOL, atol=ATOL)


def test_a_static_module_is_left_alone():
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (4,)), "x")
    b.build(b.unary(Op.NEGATE, x), entry=True)
    assert not BoundedDims().run(module)
    assert module.bounds is None


# -- ONNX models -----------------------------------------------------------------------


def _check_against_onnxruntime(model, loaded, shapes, seed=0):
    """Each shape run from Python, and again on garbage: NaN in the inputs' padding and
    NaN bytes in all of the scratch (so a kernel that reads padding or a value it
    clipped away, llvm/extents.py, shows NaN)."""
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(seed)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        want = session.run(None, {"x": x})
        for got in (loaded.run([x]), _run_on_garbage(loaded, [x])):
            assert len(got) == len(want)
            for have, expected in zip(got, want):
                assert have.shape == expected.shape, shape
                np.testing.assert_allclose(have, expected, rtol=RTOL, atol=ATOL)


def _run_on_garbage(loaded, arrays):
    """`loaded.run(arrays)` with the padding NaN and the scratch NaN bytes before it."""
    bounds = loaded.bounds
    padded = bounds.padded_args([t.dims for t in loaded.model_inputs], arrays, fill=np.nan)
    loaded._scratch[:] = 0xFF
    return bounds.actual_outputs(loaded._run_once(padded))


def test_mlp_compiled_once_for_batch_1_to_8():
    model = mlp()
    compiled = compile_model(model, CompileOptions(dim_extents={"batch": DimRange(1, 8)}))
    assert [t.type_text for t in compiled.inputs] == ["f32[<=8,32]", "s32[1]"]
    assert [t.type_text for t in compiled.outputs] == ["f32[<=8,10]", "f32[10]", "s32[1]"]
    _check_against_onnxruntime(model, compiled.load(), [(1, 32), (3, 32), (8, 32)])


def test_encoder_layer_compiled_once_for_batch_and_sequence():
    model = encoder_layer()
    ranges = {"batch": DimRange(1, 3), "seq": DimRange(1, 16)}
    compiled = compile_model(model, CompileOptions(dim_extents=ranges))
    forms = compiled.kernel_forms()
    gemms = [kind for kind in forms.values() if kind.startswith("gemm")]
    assert gemms and all(kind == "gemm, to extents" for kind in gemms), forms
    shapes = [(1, 1, 64), (1, 7, 64), (3, 16, 64), (2, 5, 64)]
    _check_against_onnxruntime(model, compiled.load(), shapes)


def test_attention_chain_clipped_to_the_extents():
    """Scores of 2 x 4 heads x 512 x 512 make the attention one kChain kernel
    (passes/attention_chains.py), which clips its batch, query rows and keys."""
    model = encoder_layer(hidden=32)
    ranges = {"batch": DimRange(1, 2), "seq": DimRange(1, 512)}
    compiled = compile_model(model, CompileOptions(dim_extents=ranges))
    assert "attention, to extents" in compiled.kernel_forms().values()
    shapes = [(1, 1, 32), (1, 77, 32), (2, 300, 32), (2, 512, 32)]
    _check_against_onnxruntime(model, compiled.load(), shapes)


def test_shapes_computed_from_bounded_dims():
    """Shape, Gather, Concat, Range, Slice, ConstantOfShape, Expand and Reshape by the
    computed shapes (a merge of two bounded dims and the split back): one compile."""
    model = shape_driven()
    ranges = {"batch": DimRange(1, 3), "seq": DimRange(1, 12)}
    compiled = compile_model(model, CompileOptions(dim_extents=ranges))
    shapes = [(1, 1, 16), (2, 5, 16), (3, 12, 16), (3, 7, 16)]
    _check_against_onnxruntime(model, compiled.load(), shapes)


def test_input_ranges_given_per_input():
    model = mlp()
    options = CompileOptions(input_shapes={"x": (DimRange(2, 4), 32)})
    loaded = compile_model(model, options).load()
    _check_against_onnxruntime(model, loaded, [(2, 32), (4, 32)])
    for batch in (1, 5):  # outside the range, on either side
        with pytest.raises(AotcError, match=f"input 0 dim 0 is {batch}, expected 2..4"):
            loaded.run([np.zeros((batch, 32), np.float32)])
    assert loaded.model_inputs[0].low == (2, 32)
    with pytest.raises(AotcError, match="input 0 dim 1 is 31, expected 32"):
        loaded.run([np.zeros((2, 31), np.float32)])


def _nonzero_model():
    """x [batch, 4] -> NonZero(x): a count that only the data gives."""
    nodes = [helper.make_node("NonZero", ["x"], ["s"])]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [2, None])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_nonzero_of_a_bounded_input():
    """The non-zero entries within the extents (NaN padding is non-zero), in order."""
    model = _nonzero_model()
    compiled = compile_model(model, CompileOptions(dim_extents={"batch": DimRange(1, 8)}))
    loaded = compiled.load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    for batch in (1, 3, 8):
        x = (rng.standard_normal((batch, 4)) * (rng.random((batch, 4)) < 0.5)).astype(np.float32)
        want = session.run(None, {"x": x})
        for got in (loaded.run([x]), _run_on_garbage(loaded, [x])):
            np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("axis", [0, None], ids=["axis0", "flat"])
def test_compress_of_bounded_inputs(axis):
    """Compress(x [batch, 3], condition [batch]): the rows (or entries) selected within
    the extents."""
    n = helper.make_node
    graph = helper.make_graph(
        [n("Compress", ["x", "keep"], ["y"], **({} if axis is None else {"axis": axis}))],
        "m",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("keep", TensorProto.BOOL, ["batch"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_model(model, CompileOptions(dim_extents={"batch": DimRange(1, 8)}))
    loaded = compiled.load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 3)).astype(np.float32)
        keep = rng.random(batch) < 0.5
        want = session.run(None, {"x": x, "keep": keep})
        for got in (loaded.run([x, keep]), _run_on_garbage(loaded, [x, keep])):
            np.testing.assert_array_equal(got[0], want[0])


def _means_and_running_sums():
    """x [b, seq, 4] and img [b, 3, h, h] -> means over bounded dims (divisors only the
    run knows: ReduceMean, GlobalAveragePool, InstanceNormalization,
    MeanVarianceNormalization) and running sums and products along them (from the
    start, from the end, exclusive)."""
    n = helper.make_node
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.linspace(0.5, 1.5, 3).astype(np.float32), "scale"),
        numpy_helper.from_array(np.linspace(-1, 1, 3).astype(np.float32), "bias"),
    ]
    nodes = [
        n("ReduceMean", ["x"], ["mean_seq"], axes=[1], keepdims=0),
        n("ReduceMean", ["x"], ["mean_all"], keepdims=1),
        n("GlobalAveragePool", ["img"], ["pooled"]),
        n("InstanceNormalization", ["img", "scale", "bias"], ["instance"]),
        n("MeanVarianceNormalization", ["img"], ["mvn"]),
        n("CumSum", ["x", "one"], ["forward"]),
        n("CumSum", ["x", "one"], ["backward"], reverse=1),
        n("CumSum", ["x", "one"], ["backward_exclusive"], reverse=1, exclusive=1),
        n("CumSum", ["x", "zero"], ["over_batch"], exclusive=1),
    ]
    outputs = [o for node in nodes for o in node.output]
    graph = helper.make_graph(
        nodes,
        "m",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "seq", 4]),
            helper.make_tensor_value_info("img", TensorProto.FLOAT, ["b", 3, "h", "h"]),
        ],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_means_and_running_sums_over_bounded_dims():
    """Compiled once for b 1..3, seq 1..9, h 2..8: divisors from the extents, running
    sums from the end that skip the padding (rtol 1e-5, atol 1e-6)."""
    model = _means_and_running_sums()
    ranges = {"b": DimRange(1, 3), "seq": DimRange(1, 9), "h": DimRange(2, 8)}
    loaded = compile_model(model, CompileOptions(dim_extents=ranges)).load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(8)
    for b, seq, h in ((1, 1, 2), (2, 5, 3), (3, 9, 8)):
        feed = [
            rng.standard_normal((b, seq, 4)).astype(np.float32),
            rng.standard_normal((b, 3, h, h)).astype(np.float32),
        ]
        want = session.run(None, {"x": feed[0], "img": feed[1]})
        for got in (loaded.run(feed), _run_on_garbage(loaded, feed)):
            for have, expected in zip(got, want):
                assert have.shape == expected.shape
                np.testing.assert_allclose(have, expected, rtol=1e-5, atol=1e-6)


def _hardmax_model():
    """x [batch, 4] -> Hardmax(x) along the batch."""
    nodes = [helper.make_node("Hardmax", ["x"], ["y"], axis=0)]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"

/* argv: batch, x.bin, p.bin, s.bin; prints the output extents */
int main(int argc, char **argv) {
    if (argc != 5) return 10;
    int64_t batch = atoll(argv[1]);
    static float x[MLP_X_SIZE], p[MLP_P_SIZE], s[MLP_S_SIZE];
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(x, sizeof(float), (size_t)batch * MLP_X_DIM1, f) != (size_t)batch * MLP_X_DIM1)
        return 11;
    fclose(f);
    int64_t in_dims[] = {batch, MLP_X_DIM1}, out_dims[3];
    void *scratch = aligned_alloc(64, MLP_BOUNDED_SCRATCH_BYTES);
    const void *in[] = {x};
    void *out[] = {p, s};
    int status = mlp_run_bounded(in, in_dims, out, out_dims, scratch);
    if (status != 0) return 20 + status;
    printf("%lld %lld %lld\n", (long long)out_dims[0], (long long)out_dims[1],
           (long long)out_dims[2]);
    f = fopen(argv[3], "wb");
    fwrite(p, sizeof(float), (size_t)(out_dims[0] * out_dims[1]), f);
    fclose(f);
    f = fopen(argv[4], "wb");
    fwrite(s, sizeof(float), (size_t)out_dims[2], f);
    fclose(f);
    int64_t too_many[] = {MLP_X_DIM0 + 1, MLP_X_DIM1};
    if (mlp_run_bounded(in, too_many, out, out_dims, scratch) != 3) return 30;
    free(scratch);
    return 0;
}
"""


def test_c_program_runs_any_batch_through_run_bounded(tmp_path):
    import subprocess

    model = mlp()
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    build = tmp_path / "build"
    result = run_cli("compile", path, "-o", build, "--dim", "batch=1..8", "-q")
    assert result.returncode == 0, result.stderr
    header = (build / "mlp.h").read_text()
    assert "#define MLP_X_DIM0_BOUNDED 1" in header and "mlp_run_bounded" in header
    (tmp_path / "main.c").write_text(DRIVER)
    program = build_c([tmp_path / "main.c"], tmp_path / "main", [build], [build / "libmlp.a"])
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(3)
    for batch in (1, 5, 8):
        x = rng.standard_normal((batch, 32)).astype(np.float32)
        files = [tmp_path / f"{n}.bin" for n in ("x", "p", "s")]
        files[0].write_bytes(x.tobytes())
        argv = [program, str(batch), *map(str, files)]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 0, run.returncode
        assert run.stdout.split() == [str(batch), "10", "10"]
        p, s = session.run(None, {"x": x})
        np.testing.assert_allclose(
            np.fromfile(files[1], np.float32).reshape(batch, 10), p, rtol=RTOL, atol=ATOL
        )
        np.testing.assert_allclose(np.fromfile(files[2], np.float32), s, rtol=RTOL, atol=ATOL)


def test_backend_compiles_once_for_the_named_dims(monkeypatch):
    """aotc.backend bounds the model's named dims by the next power of two of the
    extents seen: batch 3 builds for 1..4, which then serves 1, 2 and 4; batch 5
    builds again for up to 8."""
    from aotc import backend

    compiles = []
    real = backend.compile_model

    def counted(model, options):
        compiles.append(dict(options.dim_extents))
        return real(model, options)

    monkeypatch.setattr(backend, "compile_model", counted)
    model = mlp()
    rep = backend.prepare(model)
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(5)
    for batch in (3, 1, 2, 4, 5):
        x = rng.standard_normal((batch, 32)).astype(np.float32)
        got = rep.run([x])
        for have, want in zip(got, session.run(None, {"x": x})):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=RTOL, atol=ATOL)
    assert compiles == [{"batch": DimRange(0, 4)}, {"batch": DimRange(0, 8)}]


def _selection_model():
    """x [3, 5] -> NonZero(x > 0) transposed [count, 2] and Compress(x[0], x[0] > 0)
    [count']: counts that only the data gives, from static inputs."""
    n = helper.make_node
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    row = helper.make_tensor("row", TensorProto.INT64, [], [0])
    nodes = [
        n("Greater", ["x", "zero"], ["positive"]),
        n("NonZero", ["positive"], ["where"]),
        n("Transpose", ["where"], ["points"], perm=[1, 0]),
        n("Gather", ["x", "row"], ["first"], axis=0),
        n("Greater", ["first", "zero"], ["keep"]),
        n("Compress", ["first", "keep"], ["kept"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [
            helper.make_tensor_value_info("points", TensorProto.INT64, [None, 2]),
            helper.make_tensor_value_info("kept", TensorProto.FLOAT, [None]),
        ],
        [zero, row],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_counts_the_data_gives_come_back_at_their_extents(tmp_path):
    """NonZero and Compress of a static input: one compile, outputs bounded by the
    input's size and cut to the count at run time, from Python and in the header."""
    model = _selection_model()
    compiled = compile_model(model, CompileOptions())
    assert [t.type_text for t in compiled.outputs] == ["s64[<=15,2]", "f32[<=5]", "s32[2]"]
    loaded = compiled.load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(11)
    for x in (rng.standard_normal((3, 5)), -np.ones((3, 5)), np.ones((3, 5))):
        x = x.astype(np.float32)
        got = loaded.run([x])
        want = session.run(None, {"x": x})
        for have, expected in zip(got, want):
            assert have.shape == expected.shape
            np.testing.assert_array_equal(have, expected)
    header = compiled.write(tmp_path / "build").header.read_text()
    assert "m_run_bounded" in header and "#define M_POINTS_DIM0_BOUNDED 1" in header


def _unique_model(attrs):
    """x [6, 2] (int64) -> Unique(x, **attrs): its four outputs, their count the data's."""
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs)
    graph = helper.make_graph(
        [node],
        "m",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [6, 2])],
        [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in node.output],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(
    "attrs", [{}, {"sorted": 0}, {"axis": 0}, {"axis": 0, "sorted": 0}], ids=str
)
def test_unique_counts_at_run_time(attrs):
    """Unique of data, compiled once without --const: as many groups as each input has."""
    model = _unique_model(attrs)
    loaded = compile_model(model).load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    counts = set()
    for values in (1, 2, 3, 12):
        x = rng.integers(0, values, (6, 2)).astype(np.int64)
        want = session.run(None, {"x": x})
        counts.add(len(want[3]))
        for got in (loaded.run([x]), _run_on_garbage(loaded, [x])):
            for have, expected in zip(got, want):
                np.testing.assert_array_equal(have, expected)
    assert len(counts) > 2  # the inputs make different numbers of groups


def _bounded_unique_model(dims, attrs):
    """x of `dims` (int64, symbolic names bounded) -> Unique(x, **attrs)."""
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs)
    graph = helper.make_graph(
        [node],
        "m",
        [helper.make_tensor_value_info("x", TensorProto.INT64, dims)],
        [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in node.output],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(
    "dims, attrs",
    [
        (["n"], {}),
        (["n", 2], {"axis": 0}),
        (["n", 2], {"axis": 0, "sorted": 0}),
        ([3, "n"], {"axis": 0}),  # the items' own elements are bounded
        ([3, "n"], {"axis": 1, "sorted": 0}),
        (["n", 2], {}),  # flattened
    ],
    ids=str,
)
def test_unique_of_a_bounded_input(dims, attrs):
    """Unique of the items within the extents, compiled once for n 1..6: the groups
    counted among them, compared by their elements within the extents."""
    model = _bounded_unique_model(dims, attrs)
    loaded = compile_model(model, CompileOptions(dim_extents={"n": DimRange(1, 6)})).load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(3)
    for n in (1, 2, 4, 6):
        shape = [n if d == "n" else d for d in dims]
        x = rng.integers(0, 2, shape).astype(np.int64)
        want = session.run(None, {"x": x})
        for got in (loaded.run([x]), _run_on_garbage(loaded, [x])):
            for have, expected in zip(got, want):
                assert have.shape == expected.shape
                np.testing.assert_array_equal(have, expected)


def _topk_data_model():
    """scores [3, 10] and k an input -> the k smallest of each row and their indices."""
    n = helper.make_node
    graph = helper.make_graph(
        [n("TopK", ["scores", "k"], ["top", "at"], largest=0)],
        "m",
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [3, 10]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("top", TensorProto.FLOAT, [3, None]),
            helper.make_tensor_value_info("at", TensorProto.INT64, [3, None]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_topk_whose_k_is_data():
    """TopK by a k given as an input, compiled once: as many results as each k asks."""
    model = _topk_data_model()
    loaded = compile_model(model).load()
    assert [t.type_text for t in loaded.model_outputs] == ["f32[3,<=10]", "s64[3,<=10]"]
    session = ort.InferenceSession(model.SerializeToString())
    x = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    for k in (0, 1, 7, 10):
        feed = [x, np.array([k], np.int64)]
        want = session.run(None, {"scores": feed[0], "k": feed[1]})
        for got in (loaded.run(feed), _run_on_garbage(loaded, feed)):
            for have, expected in zip(got, want):
                np.testing.assert_array_equal(have, expected)


def _top_model():
    """scores [n] -> the k = min(n, 4) largest and their indices, k from Shape(scores):
    a TopK along the bounded dim, by a k that varies with it."""
    n = helper.make_node
    four = helper.make_tensor("four", TensorProto.INT64, [1], [4])
    nodes = [
        n("Shape", ["scores"], ["count"]),
        n("Min", ["count", "four"], ["k"]),
        n("TopK", ["scores", "k"], ["top", "at"]),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n"])],
        [
            helper.make_tensor_value_info("top", TensorProto.FLOAT, [None]),
            helper.make_tensor_value_info("at", TensorProto.INT64, [None]),
        ],
        [four],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_topk_along_a_bounded_dim():
    """The sort puts the padding last, the k varies with the extent: n 1..10."""
    model = _top_model()
    loaded = compile_model(model, CompileOptions(dim_extents={"n": DimRange(1, 10)})).load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(12)
    for n in (1, 3, 4, 10, 7):
        scores = rng.standard_normal(n).astype(np.float32)
        got = loaded.run([scores])
        for have, want in zip(got, session.run(None, {"scores": scores})):
            assert have.shape == want.shape
            np.testing.assert_array_equal(have, want)


def test_topk_along_a_bounded_dim_by_a_k_that_is_data():
    """scores [2, n] (n 1..10) and k an input: k of each row's n, both known at run time."""
    n = helper.make_node
    graph = helper.make_graph(
        [n("TopK", ["scores", "k"], ["top", "at"])],
        "m",
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, "n"]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("top", TensorProto.FLOAT, [2, None]),
            helper.make_tensor_value_info("at", TensorProto.INT64, [2, None]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = compile_model(model, CompileOptions(dim_extents={"n": DimRange(1, 10)})).load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(5)
    for extent, k in ((1, 1), (4, 0), (4, 3), (10, 10), (7, 2)):
        feed = [rng.standard_normal((2, extent)).astype(np.float32), np.array([k], np.int64)]
        want = session.run(None, {"scores": feed[0], "k": feed[1]})
        for got in (loaded.run(feed), _run_on_garbage(loaded, feed)):
            for have, expected in zip(got, want):
                assert have.shape == expected.shape
                np.testing.assert_array_equal(have, expected)


def _nms_model(boxes: int = 6, most: int = 2):
    """NonMaxSuppression of `boxes` boxes of 2 classes, at most `most` per class, from
    scores and thresholds given at run time: a count only the data gives."""
    n = helper.make_node
    per_class = helper.make_tensor("per_class", TensorProto.INT64, [1], [most])
    nodes = [n("NonMaxSuppression", ["boxes", "scores", "per_class", "iou", "floor"], ["chosen"])]
    graph = helper.make_graph(
        nodes,
        "m",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, boxes, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, boxes]),
            helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("floor", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("chosen", TensorProto.INT64, [None, 3])],
        [per_class],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("count, most", [(6, 2), (100, 30)])  # unrolled; a while loop
def test_non_max_suppression_count_at_run_time(count, most):
    """The selected triples come back at their count (bound 1 x 2 x most), as
    onnxruntime's."""
    model = _nms_model(count, most)
    compiled = compile_model(model, CompileOptions())
    assert compiled.outputs[0].type_text == f"s64[<={2 * most},3]"
    loaded = compiled.load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(13)
    corners = rng.uniform(0, 1, (1, count, 2)).astype(np.float32)
    boxes = np.concatenate([corners, corners + rng.uniform(0.2, 0.6, (1, count, 2))], -1)
    boxes = boxes.astype(np.float32)
    for iou, floor in ((0.5, 0.0), (0.1, 0.3), (0.9, 0.95), (0.5, 2.0)):
        scores = rng.uniform(0, 1, (1, 2, count)).astype(np.float32)
        feed = [boxes, scores, np.float32([iou]), np.float32([floor])]
        (got,) = loaded.run(feed)
        (want,) = session.run(None, dict(zip(["boxes", "scores", "iou", "floor"], feed)))
        np.testing.assert_array_equal(got, want)


def test_counts_capped_by_the_user_keep_the_first_results():
    """--count chosen=5 on a NonMaxSuppression of bound 60: buffers for 5, and each call
    the first 5 of what onnxruntime selects (all of them where it selects fewer);
    NonZero's and Compress's counts capped the same way."""
    model = _nms_model(100, 30)
    compiled = compile_model(model, CompileOptions(count_caps={"chosen": 5}))
    assert compiled.outputs[0].type_text == "s64[<=5,3]"
    loaded = compiled.load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(14)
    corners = rng.uniform(0, 1, (1, 100, 2)).astype(np.float32)
    boxes = np.concatenate([corners, corners + rng.uniform(0.2, 0.6, (1, 100, 2))], -1)
    counts = set()
    for iou, floor in ((0.5, 0.0), (0.5, 0.97), (0.5, 2.0)):
        scores = rng.uniform(0, 1, (1, 2, 100)).astype(np.float32)
        feed = [boxes.astype(np.float32), scores, np.float32([iou]), np.float32([floor])]
        (got,) = loaded.run(feed)
        (want,) = session.run(None, dict(zip(["boxes", "scores", "iou", "floor"], feed)))
        counts.add(len(want))
        np.testing.assert_array_equal(got, want[:5])
    assert min(counts) < 5 < max(counts)
    model = _selection_model()
    caps = {"where": 4, "kept": 2}
    compiled = compile_model(model, CompileOptions(count_caps=caps))
    assert [t.type_text for t in compiled.outputs[:2]] == ["s64[<=4,2]", "f32[<=2]"]
    x = np.random.default_rng(15).standard_normal((3, 5)).astype(np.float32)
    got = compiled.load().run([x])
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0][:4])
    np.testing.assert_array_equal(got[1], want[1][:2])
    model = _topk_data_model()
    compiled = compile_model(model, CompileOptions(count_caps={"top": 4}))
    assert [t.type_text for t in compiled.outputs[:2]] == ["f32[3,<=4]", "s64[3,<=4]"]
    loaded = compiled.load()
    scores = np.random.default_rng(16).standard_normal((3, 10)).astype(np.float32)
    for k in (2, 7):
        feed = [scores, np.array([k], np.int64)]
        want = ort.InferenceSession(model.SerializeToString()).run(
            None, {"scores": feed[0], "k": feed[1]}
        )
        for have, expected in zip(loaded.run(feed), want):
            np.testing.assert_array_equal(have, expected[:, :4])


# (model, compile flags, what the one line of the refusal says)
REFUSED_COMPILES = [
    (_hardmax_model, ["--dim=batch=1..8"], "Hardmax does not take yet"),
    (mlp, ["--dim=batch=8..1"], "expected NAME=N or NAME=LOW..HIGH"),
    (mlp, ["--dim=size=1..8"], "--dim names no symbolic dim of the inputs: size (they are: batch)"),
    (mlp, ["--input=x=1..zx32"], "dims must be non-negative integers or ranges"),
    (mlp, ["--input=x=1..8x1..4"], "dim 1 is 1..4, the model says 32"),
    (_nms_model, ["--count=chosen"], "--count 'chosen': expected NAME=N"),
    (_nms_model, ["--count=nothing=3"], "--count names no node output of the model: nothing"),
    (lambda: _unique_model({}), ["--count=counts=2"], "its inverse indices need every group"),
    (_hardmax_model, ["--dim=batch=3", "--count=y=2"], "--count applies to the outputs"),
]


@pytest.mark.parametrize(
    "model, flags, message", REFUSED_COMPILES, ids=[" ".join(r[1]) for r in REFUSED_COMPILES]
)
def test_refused_in_one_line(model, flags, message, tmp_path):
    """What cannot be bounded or capped, and bad ranges and counts: exit 2, one line
    saying what and where, no artifacts."""
    path = tmp_path / "m.onnx"
    path.write_bytes(model().SerializeToString())
    result = run_cli("compile", path, "-o", tmp_path / "build", *flags)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "build").exists()


def test_concatenation_along_bounded_dims():
    """Two counts the data gives, concatenated along them (rows) and along a static
    dim of a bounded batch (columns): the pieces' values one after another."""
    n = helper.make_node
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    nodes = [
        n("Greater", ["a", "zero"], ["pa"]),
        n("NonZero", ["pa"], ["ia"]),
        n("Greater", ["b", "zero"], ["pb"]),
        n("NonZero", ["pb"], ["ib"]),
        n("Concat", ["ia", "ib"], ["rows"], axis=1),
        n("Concat", ["x", "x"], ["columns"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [7]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [5]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]),
        ],
        [
            helper.make_tensor_value_info("rows", TensorProto.INT64, [1, None]),
            helper.make_tensor_value_info("columns", TensorProto.FLOAT, ["n", 6]),
        ],
        [zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = compile_model(model, CompileOptions(dim_extents={"n": DimRange(1, 4)})).load()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(14)
    for rows in (1, 3, 4):
        feed = {
            "a": rng.standard_normal(7).astype(np.float32),
            "b": rng.standard_normal(5).astype(np.float32),
            "x": rng.standard_normal((rows, 3)).astype(np.float32),
        }
        got = loaded.run(list(feed.values()))
        for have, want in zip(got, session.run(None, feed)):
            assert have.shape == want.shape
            np.testing.assert_array_equal(have, want)


def _if_model():
    """x [5] -> if sum(x) > 0 then x[:2] else x: branches of different lengths, chosen
    by the data."""
    n = helper.make_node
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    starts = helper.make_tensor("starts", TensorProto.INT64, [1], [0])
    ends = helper.make_tensor("ends", TensorProto.INT64, [1], [2])
    then_branch = helper.make_graph(
        [n("Slice", ["x", "starts", "ends"], ["head"])],
        "then",
        [],
        [helper.make_tensor_value_info("head", TensorProto.FLOAT, [2])],
    )
    else_branch = helper.make_graph(
        [n("Identity", ["x"], ["all"])],
        "else",
        [],
        [helper.make_tensor_value_info("all", TensorProto.FLOAT, [5])],
    )
    nodes = [
        n("ReduceSum", ["x"], ["total"], keepdims=0),
        n("Greater", ["total", "zero"], ["positive"]),
        n("If", ["positive"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
        [zero, starts, ends],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_if_branches_of_different_lengths():
    """The output is bounded by the longer branch and comes back at the chosen one's."""
    model = _if_model()
    compiled = compile_model(model, CompileOptions())
    assert compiled.outputs[0].type_text == "f32[<=5]"
    loaded = compiled.load()
    session = ort.InferenceSession(model.SerializeToString())
    for x in (np.arange(5, dtype=np.float32), -np.arange(5, dtype=np.float32) - 1):
        (got,) = loaded.run([x])
        (want,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(got, want)


def test_a_shape_that_steps_with_the_extent():
    """x[:, : seq // 2] with seq 1..9: seq // 2 is 4 at both 9 and 8, yet varies."""
    n = helper.make_node
    consts = {"one": [1], "two": [2], "zero": [0], "axis": [1]}
    inits = [helper.make_tensor(k, TensorProto.INT64, [1], v) for k, v in consts.items()]
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Slice", ["shape", "one", "two"], ["seq"]),
        n("Div", ["seq", "two"], ["half"]),
        n("Slice", ["x", "zero", "half", "axis"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = compile_model(model, CompileOptions(dim_extents={"seq": DimRange(1, 9)})).load()
    for seq in (1, 3, 8, 9):
        x = np.arange(2 * seq, dtype=np.float32).reshape(2, seq)
        (got,) = loaded.run([x])
        np.testing.assert_array_equal(got, x[:, : seq // 2])


def test_the_compile_prints_the_bounds(tmp_path):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(mlp().SerializeToString())
    result = run_cli("compile", path, "-o", tmp_path / "build", "--dim", "batch=1..8")
    assert result.returncode == 0, result.stderr
    assert "input  x: f32[<=8,32]" in result.stdout
    assert "output p: f32[<=8,10]" in result.stdout


def test_negative_indices_count_from_the_extent():
    """GatherElements and GatherND into a bounded dim: index -1 is the last element at
    the run-time extent, not at the bound."""
    n = helper.make_node
    nodes = [
        n("GatherElements", ["x", "last"], ["tail"], axis=1),
        n("GatherND", ["x", "pairs"], ["picked"]),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"]),
            helper.make_tensor_value_info("last", TensorProto.INT64, [2, 1]),
            helper.make_tensor_value_info("pairs", TensorProto.INT64, [3, 2]),
        ],
        [
            helper.make_tensor_value_info("tail", TensorProto.FLOAT, [2, 1]),
            helper.make_tensor_value_info("picked", TensorProto.FLOAT, [3]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = compile_model(model, CompileOptions(dim_extents={"n": DimRange(1, 6)})).load()
    session = ort.InferenceSession(model.SerializeToString())
    for width in (2, 3, 6):
        feed = {
            "x": np.arange(2 * width, dtype=np.float32).reshape(2, width),
            "last": np.array([[-1], [-2 if width > 1 else -1]], np.int64),
            "pairs": np.array([[0, -1], [1, 0], [-1, -width]], np.int64),
        }
        got = loaded.run(list(feed.values()))
        for have, want in zip(got, session.run(None, feed)):
            np.testing.assert_array_equal(have, want)
