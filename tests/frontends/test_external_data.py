"""External data (frontends/onnx/external_data.py): every tensor kept in a file, wherever it
sits in the model, is read only from a regular, singly linked file of the model's folder,
within the file and at the tensor's size; anything else is one line naming the tensor and
its location, and nothing is written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aotc
from aotc.cli import main as aotc_main
from aotc.errors import ModelError
from aotc.frontends.onnx import import_onnx
from aotc.frontends.onnx.external_data import external_tensors, place, read_span
from aotc.ir.evaluate import evaluate

VALUES = np.array([1.0, 2.0, 3.0], np.float32)  # the weight: 12 bytes


def external_tensor(array: np.ndarray, name: str, **entries: object) -> TensorProto:
    """A tensor of `array`'s type and shape whose data is in a file (the entries)."""
    tensor = numpy_helper.from_array(array, name)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=str(value))
    return tensor


def value(name: str, dims, elem=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def graph_model(nodes, initializers=(), sparse=()) -> onnx.ModelProto:
    """y = x + the weight, for x of 3 floats."""
    graph = helper.make_graph(
        nodes,
        "g",
        [value("x", [3])],
        [value("y", [3])],
        list(initializers),
        sparse_initializer=list(sparse),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def in_initializer(weight: TensorProto) -> onnx.ModelProto:
    return graph_model([helper.make_node("Add", ["x", "w"], ["y"])], [weight])


def in_if_branch(weight: TensorProto) -> onnx.ModelProto:
    """The weight is an initializer of an If's then-branch (the condition is known)."""
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [value("t", [3])], [weight]
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [value("e", [3])]
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)
    return graph_model([node], [cond])


def in_constant(weight: TensorProto) -> onnx.ModelProto:
    constant = helper.make_node("Constant", [], ["c"], name="const", value=weight)
    return graph_model([constant, helper.make_node("Add", ["x", "c"], ["y"])])


def in_sparse_initializer(weight: TensorProto) -> onnx.ModelProto:
    indices = numpy_helper.from_array(np.arange(3, dtype=np.int64), "")
    sparse = helper.make_sparse_tensor(weight, indices, [3])
    return graph_model([helper.make_node("Add", ["x", "w"], ["y"])], sparse=[sparse])


# where the weight sits -> the model, and how the error names the tensor
PLACES = {
    "initializer": (in_initializer, "tensor 'w' (initializer of graph 'g')"),
    "if_branch": (in_if_branch, "tensor 'w' (initializer of graph 'then')"),
    "constant": (in_constant, "tensor 'w' (attribute 'value' of node 'const' in graph 'g')"),
    "sparse": (in_sparse_initializer, "tensor 'w' (sparse initializer of graph 'g', its values)"),
}


def link_outside(folder: Path, outside: Path) -> str:
    (folder / "link.bin").symlink_to(outside)
    return "link.bin"


def hard_link(folder: Path, outside: Path) -> str:
    os.link(outside, folder / "linked.bin")
    return "linked.bin"


def directory(folder: Path, outside: Path) -> str:
    (folder / "data").mkdir()
    return "data"


def fifo(folder: Path, outside: Path) -> str:
    os.mkfifo(folder / "pipe")
    return "pipe"


def device(folder: Path, outside: Path) -> str:
    try:
        os.mknod(folder / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs privileges this user lacks")
    return "null"


# trick -> (what it puts in the folder, giving the location; offset; length; the refusal)
TRICKS = {
    "symlink_outside": (link_outside, None, None, "is outside the model's folder"),
    "hard_link": (hard_link, None, None, "has 2 hard links"),
    "absolute": (lambda folder, outside: str(outside), None, None, "is absolute"),
    "parent": (lambda folder, outside: "../secret.bin", None, None, "steps out with '..'"),
    "parent_inside": (lambda folder, outside: "x/../w.bin", None, None, "steps out with '..'"),
    "empty": (lambda folder, outside: "", None, None, "location '' is empty"),
    "offset_past_end": (lambda folder, outside: "w.bin", 8, 12, "runs past the end of 'w.bin'"),
    "length_past_end": (lambda folder, outside: "w.bin", 0, 16, "runs past the end of 'w.bin'"),
    "length_not_size": (lambda folder, outside: "w.bin", 0, 8, "not the tensor's 12 bytes"),
    "negative_offset": (lambda folder, outside: "w.bin", -4, None, "not a non-negative integer"),
    "directory": (directory, None, None, "is a directory, not a regular file"),
    "fifo": (fifo, None, None, "is a fifo, not a regular file"),
    "device": (device, None, None, "is a character device, not a regular file"),
    "missing": (lambda folder, outside: "gone.bin", None, None, "no external data file"),
}


def model_folder(tmp_path: Path) -> tuple[Path, Path]:
    """The model's folder holding w.bin (the weight), and a file outside it holding it too."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(VALUES.tobytes())
    outside = tmp_path / "secret.bin"
    outside.write_bytes(VALUES.tobytes())
    return folder, outside


def save_with_weight(place: str, folder: Path, location: str, offset=None, length=None) -> Path:
    entries = {"location": location, "offset": offset, "length": length}
    weight = external_tensor(VALUES, "w", **{k: v for k, v in entries.items() if v is not None})
    path = folder / "m.onnx"
    onnx.save(PLACES[place][0](weight), str(path))
    return path


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_trick_is_refused_in_one_line_and_nothing_written(tmp_path, capsys, trick, place):
    folder, outside = model_folder(tmp_path)
    make_location, offset, length, refusal = TRICKS[trick]
    location = make_location(folder, outside)
    path = save_with_weight(place, folder, location, offset, length)
    out = tmp_path / "out"
    assert aotc_main(["compile", str(path), "-o", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"aotc: error: {PLACES[place][1]}: "), line
    assert f"'{location}'" in line and refusal in line, line
    assert not out.exists()


@pytest.mark.parametrize("place", ["initializer", "if_branch", "constant"])
@pytest.mark.parametrize("where", ["symlink_inside", "subfolder", "dot", "offset"])
def test_locations_inside_the_folder_are_read(tmp_path, place, where):
    """A symlink to a file of the folder, a file in a subfolder, './w.bin', and a span of
    a file holding more: read, and the values are the weight's."""
    folder, _ = model_folder(tmp_path)
    (folder / "sub").mkdir()
    (folder / "sub" / "w.bin").write_bytes(VALUES.tobytes())
    (folder / "link.bin").symlink_to(folder / "sub" / "w.bin")
    (folder / "padded.bin").write_bytes(bytes(20) + VALUES.tobytes() + bytes(4))
    location, offset, length = {
        "symlink_inside": ("link.bin", None, None),
        "subfolder": ("sub/w.bin", None, None),
        "dot": ("./w.bin", 0, 12),
        "offset": ("padded.bin", 20, 12),
    }[where]
    path = save_with_weight(place, folder, location, offset, length)
    x = np.array([10.0, 20.0, 30.0], np.float32)
    (y,) = evaluate(import_onnx(path), [x])
    np.testing.assert_array_equal(y, x + VALUES)


def test_model_with_external_data_compiles_and_runs(tmp_path):
    """Weights in files of the folder (a span of a shared file, a Constant's value, an If
    branch's initializer in a subfolder) compile, and the compiled code computes
    where(flag, (x @ W + b) * s, -(x @ W + b)) as numpy does (float32 sums in another
    order: rtol 1e-5, atol 1e-6)."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    s = rng.standard_normal(3).astype(np.float32)
    folder = tmp_path / "model"
    (folder / "data").mkdir(parents=True)
    (folder / "weights.bin").write_bytes(w.tobytes() + bytes(16) + b.tobytes())
    (folder / "data" / "scale.bin").write_bytes(s.tobytes())
    weight = external_tensor(w, "W", location="weights.bin", offset=0, length=48)
    bias = external_tensor(b, "b", location="weights.bin", offset=64, length=12)
    scale = external_tensor(s, "s", location="data/scale.bin")
    then = helper.make_graph(
        [helper.make_node("Mul", ["h", "s"], ["t"])], "then", [], [value("t", [2, 3])], [scale]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["h"], ["e"])], "else", [], [value("e", [2, 3])]
    )
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Constant", [], ["bias"], value=bias),
        helper.make_node("Add", ["xw", "bias"], ["h"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other),
    ]
    inputs = [value("x", [2, 4]), value("flag", [], TensorProto.BOOL)]
    graph = helper.make_graph(nodes, "g", inputs, [value("y", [2, 3])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(folder / "m.onnx"))
    run = aotc.compile(folder / "m.onnx").load()
    x = rng.standard_normal((2, 4)).astype(np.float32)
    h = x @ w + b
    for flag, expected in ((True, h * s), (False, -h)):
        (y,) = run(x, np.array(flag))
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_a_file_replaced_after_its_check_is_not_read(tmp_path):
    folder, outside = model_folder(tmp_path)
    weight = external_tensor(VALUES, "w", location="w.bin")
    span = place(weight, os.path.realpath(folder), "tensor 'w'")
    os.replace(outside, folder / "w.bin")  # another file under the checked name
    with pytest.raises(ModelError, match="^tensor 'w': .*'w.bin' was replaced after it"):
        read_span(span, "tensor 'w'")


def test_model_in_memory_reads_from_the_working_folder_into_a_copy(tmp_path, monkeypatch):
    folder, _ = model_folder(tmp_path)
    monkeypatch.chdir(folder)
    model = in_initializer(external_tensor(VALUES, "w", location="w.bin"))
    x = np.zeros(3, np.float32)
    np.testing.assert_array_equal(evaluate(import_onnx(model), [x])[0], VALUES)
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL
    outside = in_initializer(external_tensor(VALUES, "w", location="../secret.bin"))
    with pytest.raises(ModelError, match=r"^tensor 'w' \(initializer of graph 'g'\): .*'\.\.'"):
        import_onnx(outside)


def test_tensors_are_found_at_any_depth():
    """Subgraphs are walked with a worklist, not recursion: a tensor 30 Ifs deep (about as
    deep as protobuf lets messages nest) is found."""
    weight = external_tensor(VALUES, "deep", location="w.bin")
    graph = helper.make_graph([], "g0", [], [value("w", [3])], [weight])
    other = helper.make_graph([], "else", [], [])
    for depth in range(1, 31):
        node = helper.make_node("If", ["c"], ["w"], then_branch=graph, else_branch=other)
        graph = helper.make_graph([node], f"g{depth}", [], [value("w", [3])])
    found = [what for _, what in external_tensors(helper.make_model(graph))]
    assert found == ["tensor 'deep' (initializer of graph 'g0')"]
