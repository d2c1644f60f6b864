"""CLI errors: one line on stderr, exit code 2, nothing left in the output folder."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from aotc_testing import EXAMPLES, build_c, generic_driver_source, run_c_model, run_cli
from onnx import TensorProto, helper

MNIST = EXAMPLES / "mnist" / "mnist.onnx"


def unsupported_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("ImageDecoder", ["a"], ["b"], name="decode"),
        helper.make_node("FancyOp", ["b"], ["c"], name="fancy", domain="com.example"),
        helper.make_node("StringNormalizer", ["c"], ["y"], name="strnorm"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
        ir_version=10,
    )
    onnx.save(model, str(path))
    return path


def assert_one_line_error(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_missing_file(tmp_path):
    result = run_cli("compile", tmp_path / "nope.onnx", "-o", tmp_path / "out")
    assert_one_line_error(result, "nope.onnx")
    assert not (tmp_path / "out").exists()


def test_corrupt_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not a protobuf\xff\xff\xff")
    result = run_cli("compile", bad, "-o", tmp_path / "out")
    assert_one_line_error(result, "bad.onnx")
    assert not (tmp_path / "out").exists()


def test_unsupported_ops_are_all_listed(tmp_path):
    model = unsupported_model(tmp_path / "m.onnx")
    result = run_cli("compile", model, "-o", tmp_path / "out")
    line = assert_one_line_error(
        result, "ImageDecoder", "FancyOp", "StringNormalizer", "decode", "strnorm"
    )
    assert "Relu" not in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "spec", ["input", "input=1xfoo", "=1x784", "nosuch=1x784", "input=1x2x3", "input=2x784x"]
)
def test_bad_input_spec(spec, tmp_path):
    result = run_cli("compile", MNIST, "-o", tmp_path / "out", "--input", spec)
    assert_one_line_error(result, "input" if "nosuch" not in spec else "nosuch")
    assert not (tmp_path / "out").exists()


def test_bad_flag(tmp_path):
    result = run_cli("compile", MNIST, "-o", tmp_path / "out", "--frobnicate")
    assert_one_line_error(result, "--frobnicate")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("nope.onnx",), ("nope.onnx",)),
        ((MNIST, "--frobnicate"), ("--frobnicate",)),
        ((MNIST, "--runs", "0"), ("--runs",)),
        ((MNIST, "--input", "input=1xfoo"), ("input",)),
        ((MNIST, "--target", "cuda:sm_80"), ("CUDA",)),
    ],
)
def test_profile_bad_input(args, words, tmp_path):
    """`aotc profile` fails as the other commands do, before running anything."""
    args = [tmp_path / a if a == "nope.onnx" else a for a in args]
    assert_one_line_error(run_cli("profile", *args), *words)


def test_bad_name(tmp_path):
    result = run_cli("compile", MNIST, "-o", tmp_path / "out", "--name", "9lives")
    assert_one_line_error(result, "9lives")


def test_failure_leaves_existing_output_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = run_cli("compile", unsupported_model(tmp_path / "m.onnx"), "-o", out)
    assert result.returncode == 2
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_input_cannot_contradict_a_fixed_dim(tmp_path):
    result = run_cli("compile", MNIST, "-o", tmp_path / "out", "--input", "input=4x784")
    assert_one_line_error(result, "input", "dim 0")
    assert not (tmp_path / "out").exists()


def test_input_fixes_a_symbolic_batch(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(tmp_path / "sym.onnx"))
    missing = run_cli("compile", tmp_path / "sym.onnx", "-o", tmp_path / "out")
    assert_one_line_error(missing, "x", "--input")
    result = run_cli("compile", tmp_path / "sym.onnx", "-o", tmp_path / "out", "--input", "x=5x3")
    assert result.returncode == 0, result.stderr
    header = (tmp_path / "out" / "sym.h").read_text()
    assert "#define SYM_X_DIM0 5" in header, header


def test_negative_dims_are_unknown_dims(tmp_path):
    """A dim_value of -1 (paddle2onnx's spelling) is an unknown dim, as onnxruntime reads it:
    --input fixes it, and without --input it is refused naming the input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, -1, -1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, -1, -1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(tmp_path / "neg.onnx"))
    missing = run_cli("compile", tmp_path / "neg.onnx", "-o", tmp_path / "out")
    assert_one_line_error(missing, "'x'", "--input x=")
    out = tmp_path / "out"
    result = run_cli("compile", tmp_path / "neg.onnx", "-o", out, "--input", "x=1x3x48x192")
    assert result.returncode == 0, result.stderr
    data = np.random.default_rng(0).standard_normal((1, 3, 48, 192)).astype(np.float32)
    source = tmp_path / "driver.c"
    source.write_text(generic_driver_source("neg", 1, 1))
    program = build_c([source], tmp_path / "driver", [out], [out / "libneg.a"])
    (got,) = run_c_model(program, [data], [data], tmp_path)
    np.testing.assert_array_equal(got, np.maximum(data, 0))


def test_scalar_input_spellings(tmp_path):
    """A rank-0 input: --const sr=16000 is its value, --input sr= its shape; a wrong
    spelling is refused naming the flag given."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    nodes = [
        helper.make_node("Cast", ["sr"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "f"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [x, sr], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = tmp_path / "sc.onnx"
    onnx.save(model, str(path))
    result = run_cli("compile", path, "-o", tmp_path / "a", "--const", "sr=16000")
    assert result.returncode == 0, result.stderr
    assert "input  sr" not in result.stdout
    result = run_cli("compile", path, "-o", tmp_path / "b", "--input", "sr=")
    assert result.returncode == 0, result.stderr
    assert "input  sr: s64[]" in result.stdout
    too_many = run_cli("compile", path, "-o", tmp_path / "c", "--const", "sr=1,2")
    assert_one_line_error(too_many, "--const sr")
    ranked = run_cli("compile", path, "-o", tmp_path / "c", "--input", "sr=1")
    assert_one_line_error(ranked, "--input sr", "--input sr=")


def test_foreign_target_without_cross_compiler_writes_sources(tmp_path, monkeypatch):
    """No C compiler for the target: one warning line, the object, the header and the
    runtime sources, the command that finishes the library, exit 0 (tests/test_cross.py
    runs that command)."""
    import platform

    foreign, arch = (
        ("x86_64", "x86_64")
        if platform.machine() in ("aarch64", "arm64")
        else ("aarch64-linux-gnu", "aarch64")
    )
    monkeypatch.delenv(f"CC_{arch}", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no cross compiler on it
    result = run_cli("compile", MNIST, "-o", tmp_path / "out", "--target", foreign, "-q")
    assert result.returncode == 0, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "no C compiler for" in result.stderr
    assert result.stdout.startswith("cd ") and "libmnist.a" in result.stdout
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    runtime = ["aotc_bounded.c", "aotc_bounded.h", "aotc_runtime.c", "aotc_runtime.h"]
    assert written == [*runtime, "mnist.h", "mnist.o"]


def test_const_fixes_a_shape_input(tmp_path):
    data = helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 3])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Reshape", ["data", "shape"], ["y"], name="r")
    graph = helper.make_graph([node], "g", [data, shape], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(tmp_path / "r.onnx"))
    missing = run_cli("compile", tmp_path / "r.onnx", "-o", tmp_path / "out")
    assert_one_line_error(missing, "shape", "--const")
    result = run_cli("compile", tmp_path / "r.onnx", "-o", tmp_path / "out", "--const", "shape=3,2")
    assert result.returncode == 0, result.stderr
    assert "output y: f32[3,2]" in result.stdout
    header = (tmp_path / "out" / "r.h").read_text()
    assert "R_NUM_INPUTS 1" in header


def test_inspect_prints_hlo_kernels_and_plan_and_draws_it(tmp_path):
    import xml.etree.ElementTree as ET

    svg = tmp_path / "plan.svg"
    args = ("--memory-plan", svg, "--plan-for", "speed")  # the GEMM's panels, drawn
    result = run_cli("inspect", EXAMPLES / "cnn" / "cnn.onnx", *args)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "ENTRY %main" in out and "fusion(" in out
    assert "kernels," in out and "FLOPs" in out
    assert "convolution,broadcast,add" in out and "[gemm]" in out  # how each conv runs
    arena_lines = [line for line in out.splitlines() if line.strip().startswith("arena[")]
    assert arena_lines, out
    root = ET.parse(svg).getroot()
    rects = root.findall(".//{http://www.w3.org/2000/svg}rect")
    assert len(rects) == len(arena_lines) + 1  # one per buffer, plus the frame


@pytest.mark.parametrize("count", ["513", "99999999999999999999"])
def test_thread_counts_past_the_pool_are_refused(tmp_path, count):
    result = run_cli("compile", MNIST, "-o", tmp_path / "out", "--threads", count)
    assert_one_line_error(result, f"--threads {count}", "512")
    assert not (tmp_path / "out").exists()
