"""Models too big to run are refused before anything is built: every tensor, then the
memory plan, against --max-memory (default: this machine's memory)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from aotc_testing import run_cli
from onnx import TensorProto, helper, numpy_helper

from aotc.driver import CompileOptions, compile_model
from aotc.errors import AotcError
from aotc.memory_limits import MemoryLimitError, format_size, parse_size


def _save(path, nodes, inputs, initializers=()):
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(path))
    return path


def _relu(path, dims):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    return _save(path, [helper.make_node("Relu", ["x"], ["y"], name="relu")], [x])


def _expand(path, dims):
    """A 4-element input expanded to `dims` by a constant shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    shape = numpy_helper.from_array(np.array(dims, np.int64), "shape")
    node = helper.make_node("Expand", ["x", "shape"], ["y"], name="grow")
    return _save(path, [node], [x], [shape])


def _one_line_refusal(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(
    ("dims", "limit"),
    [
        ([2**40, 4], "--max-memory sets another"),
        # past 2^62 bytes no limit allows: refused as the input is read
        ([2**63 - 1, 4], "any memory limit"),
        ([3, 2**61], "any memory limit"),
        ([2**62, 8], "any memory limit"),
    ],
)
def test_a_declared_huge_input_is_refused(tmp_path, dims, limit):
    result = run_cli("compile", _relu(tmp_path / "m.onnx", dims), "-o", tmp_path / "out")
    _one_line_refusal(result, "'x'", "memory limit", limit)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("extent", "reason"),
    [
        (2**63, "dim 0 is 9223372036854775808"),
        (2**64, "dim 0 is 18446744073709551616"),
        # each extent fits, but a stride over the first dim is 2^64 bytes
        (2**62, "the bytes its nonzero dims span is 18446744073709551616"),
    ],
)
def test_an_extent_past_int64_is_refused_though_the_array_is_empty(tmp_path, extent, reason):
    """f32[2^64, 0] takes no bytes, but no int64_t dim of the header holds its extent;
    f32[2^62, 0]'s first dim spans more bytes than an int64 counts."""
    model = tmp_path / "empty.hlo"
    model.write_text(
        f"HloModule empty\nENTRY main {{\n  x = f32[{extent},0] parameter(0)\n"
        f"  ROOT y = f32[{extent},0] negate(x)\n}}\n"
    )
    result = run_cli("compile", model, "-o", tmp_path / "out")
    _one_line_refusal(result, "'x'", reason, "int64")
    assert not (tmp_path / "out").exists()


def test_an_inferred_huge_tensor_names_its_node(tmp_path):
    result = run_cli("compile", _expand(tmp_path / "m.onnx", [2**38, 4]), "-o", tmp_path / "out")
    _one_line_refusal(result, "grow", "4.0 TiB")
    assert not (tmp_path / "out").exists()


def test_max_memory_sets_the_limit(tmp_path):
    """250,000 x 4 floats (3.8 MiB): refused under 1M, compiled under 8M."""
    model = _expand(tmp_path / "m.onnx", [250_000, 4])
    small = run_cli("compile", model, "-o", tmp_path / "small", "--max-memory", "1M")
    _one_line_refusal(small, "3.8 MiB", "1.0 MiB")
    assert not (tmp_path / "small").exists()
    fits = run_cli("compile", model, "-o", tmp_path / "fits", "--max-memory", "8M", "-q")
    assert fits.returncode == 0, fits.stderr


def test_the_memory_plan_is_checked_too():
    """Each of two 256 KiB weight matrices fits 400,000 bytes; both together do not."""
    rng = np.random.default_rng(0)
    matrices = [
        numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), name)
        for name in "vw"
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])
    nodes = [
        helper.make_node("MatMul", ["x", "v"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["y"]),
    ]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [out], matrices)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    with pytest.raises(MemoryLimitError, match="the model needs .* weights 5"):
        compile_model(model, CompileOptions(max_memory=400_000))
    assert compile_model(model, CompileOptions(max_memory=600_000)).plan.weight_bytes > 2**19


@pytest.mark.parametrize(
    ("text", "size"),
    [("1000000", 1_000_000), ("64G", 64 * 2**30), ("512m", 512 * 2**20), ("1.5TiB", 3 * 2**39)],
)
def test_sizes_parse(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "2x", "-1G", "0", "9999999T"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(AotcError, match="--max-memory"):
        parse_size(text)


def test_bad_size_flag_is_one_line(tmp_path):
    model = _relu(tmp_path / "m.onnx", [2, 2])
    result = run_cli("compile", model, "-o", tmp_path / "out", "--max-memory", "lots")
    _one_line_refusal(result, "--max-memory", "lots")


def test_sizes_print_in_binary_units():
    assert [format_size(n) for n in (512, 3 * 2**20, 16 * 2**40)] == [
        "512 bytes",
        "3.0 MiB",
        "16.0 TiB",
    ]
