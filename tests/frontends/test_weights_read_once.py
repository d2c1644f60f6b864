"""Weights read once (frontends/onnx/wire.py, tensor_arrays.py, external_data.py): a model
file is parsed without its big raw_data payloads, each payload and each external tensor is
read straight into an array of its dtype and shape, and the import's peak memory grows by
about the weights' size, not twice it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import ModelError
from aotc.frontends.onnx import external_data, import_onnx, importer, wire
from aotc.frontends.onnx.dtypes import ONNX_DTYPES, tensor_to_array
from aotc.frontends.onnx.importer import load_model
from aotc.frontends.onnx.tensor_arrays import ARRAY_TYPES
from aotc.frontends.onnx.wire import PAYLOAD_THRESHOLD, encode_varint
from aotc.ir import Op
from aotc.ir.evaluate import evaluate

RNG = np.random.default_rng(3)

# name -> an initializer's values: every array type, over the threshold, and one under it
ARRAYS = {
    "f32": RNG.standard_normal((40, 50)).astype(np.float32),
    "f16": RNG.standard_normal((3, 1500)).astype(np.float16),
    "f64": RNG.standard_normal(700),
    "s8": RNG.integers(-128, 128, 5000, dtype=np.int8),
    "s64": RNG.integers(-(2**62), 2**62, (20, 30), dtype=np.int64),
    "u16": RNG.integers(0, 2**16, 3000, dtype=np.uint16),
    "pred": RNG.integers(0, 2, (64, 80)).astype(bool),
    "small": np.arange(6, dtype=np.float32).reshape(2, 3),
}
# tensors whose raw bytes are not the IR's array (bfloat16 and int4 are held widened)
WIDENED = {
    "bf16": helper.make_tensor(
        "bf16",
        TensorProto.BFLOAT16,
        [2500],
        RNG.integers(0, 2**16, 2500, dtype=np.uint16).tobytes(),
        raw=True,
    ),
    "s4": helper.make_tensor(
        "s4",
        TensorProto.INT4,
        [12000],
        RNG.integers(0, 256, 6000, dtype=np.uint8).tobytes(),
        raw=True,
    ),
}


def value(name: str, elem: int, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def identity_model(tensors: list[TensorProto]) -> onnx.ModelProto:
    """Every tensor an initializer and, through an Identity, an output."""
    nodes = [helper.make_node("Identity", [t.name], [f"out_{t.name}"]) for t in tensors]
    outputs = [value(f"out_{t.name}", t.data_type, list(t.dims)) for t in tensors]
    graph = helper.make_graph(nodes, "weights", [], outputs, tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def all_tensors() -> list[TensorProto]:
    arrays = [numpy_helper.from_array(a, name) for name, a in ARRAYS.items()]
    return arrays + list(WIDENED.values())


def expected_array(tensor: TensorProto) -> np.ndarray:
    """numpy_helper's values, as the IR holds them (bf16 and int4 widened)."""
    return np.asarray(numpy_helper.to_array(tensor)).astype(ONNX_DTYPES[tensor.data_type].numpy)


def constants(module) -> dict[str, np.ndarray]:
    return {i.name: i.literal for i in module.entry.instructions if i.op is Op.CONSTANT}


def assert_same_arrays(module, tensors: list[TensorProto]) -> None:
    got = constants(module)
    for tensor in tensors:
        want = expected_array(tensor)
        assert got[tensor.name].dtype == want.dtype, tensor.name
        assert got[tensor.name].shape == want.shape, tensor.name
        np.testing.assert_array_equal(got[tensor.name], want, err_msg=tensor.name)


def test_ir_arrays_are_the_types_read_as_they_are():
    for elem, dtype in ARRAY_TYPES.items():
        assert np.dtype(ONNX_DTYPES[elem].numpy) == dtype.newbyteorder("="), elem


def test_embedded_initializers_are_read_straight_into_arrays(tmp_path):
    tensors = all_tensors()
    path = tmp_path / "m.onnx"
    onnx.save(identity_model(tensors), str(path))
    assert_same_arrays(import_onnx(path), tensors)
    model, arrays = load_model(path)
    by_name = {t.name: t for t in model.graph.initializer}
    for name in ARRAYS:
        tensor = by_name[name]
        array, _ = tensor_to_array(tensor, name, arrays)
        if name == "small":  # under the threshold: its raw_data stays in the message
            assert tensor.raw_data and arrays.get(tensor) is None
            assert not array.flags.owndata  # a view of the raw bytes, not a copy
        else:  # no raw_data in the message, and the array read is the array used
            assert not tensor.HasField("raw_data") and array is arrays.get(tensor)
            assert not array.flags.writeable
    for name in WIDENED:  # read back into raw_data, for numpy_helper
        assert by_name[name].HasField("raw_data") and arrays.get(by_name[name]) is None


def test_external_initializers_are_read_straight_into_arrays(tmp_path):
    tensors = all_tensors()
    model = identity_model(tensors)
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, size_threshold=0)
    saved = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    assert {t.data_location for t in saved.graph.initializer} == {TensorProto.EXTERNAL}
    assert_same_arrays(import_onnx(tmp_path / "m.onnx"), tensors)
    model, arrays = load_model(tmp_path / "m.onnx")
    for tensor in model.graph.initializer:
        held = arrays.get(tensor) is not None
        assert held == (tensor.name in ARRAYS), tensor.name


def test_in_memory_models_read_external_data_into_a_copy(tmp_path, monkeypatch):
    tensors = all_tensors()
    onnx.save(
        identity_model(tensors),
        str(tmp_path / "m.onnx"),
        save_as_external_data=True,
        size_threshold=0,
    )
    model = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    monkeypatch.chdir(tmp_path)
    assert_same_arrays(import_onnx(model), tensors)
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL
    in_memory = identity_model(tensors)
    loaded, _ = load_model(in_memory)
    assert loaded is in_memory  # nothing external: the model itself
    assert_same_arrays(import_onnx(in_memory), tensors)


def test_tensors_in_subgraphs_and_constants_are_read_once(tmp_path):
    """An If branch's initializer, a Constant's value, and a Loop body's initializer (the
    body unrolled three times: three constants of one array read)."""
    w = RNG.standard_normal((30, 40)).astype(np.float32)
    c = RNG.standard_normal((30, 40)).astype(np.float32)
    b = RNG.standard_normal((30, 40)).astype(np.float32)
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"])],
        "then",
        [],
        [value("t", 1, [30, 40])],
        [numpy_helper.from_array(w, "w")],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [value("e", 1, [30, 40])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "b"], ["acc_out"]),
        ],
        "body",
        [
            value("i", TensorProto.INT64, []),
            value("cond_in", TensorProto.BOOL, []),
            value("acc_in", 1, [30, 40]),
        ],
        [value("cond_out", TensorProto.BOOL, []), value("acc_out", 1, [30, 40])],
        [numpy_helper.from_array(b, "b")],
    )
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c, "c")),
        helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Add", ["y", "c"], ["z"]),
        helper.make_node("Loop", ["trips", "go", "z"], ["out"], body=body),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [value("x", 1, [30, 40])],
        [value("out", 1, [30, 40])],
        [
            numpy_helper.from_array(np.array(True), "flag"),
            numpy_helper.from_array(np.array(3, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "go"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = RNG.standard_normal((30, 40)).astype(np.float32)
    module = import_onnx(path)
    (out,) = evaluate(module, [x])
    np.testing.assert_allclose(out, x + w + c + 3 * b, rtol=1e-6, atol=1e-6)
    _, arrays = load_model(path)
    assert len(arrays.arrays) == 3  # w, c and b, each read once


def _field(number: int, data: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(data)) + data


def _model_bytes(graph_fields: bytes, before: bytes = b"") -> bytes:
    """A model whose graph is y = Identity(w) after the nodes `before`, its other fields
    given as bytes."""
    model = identity_model([])
    model.graph.output.append(value("y", 1, [None]))
    node = helper.make_node("Identity", ["w"], ["y"]).SerializeToString()
    graph = model.graph.SerializeToString() + before + _field(1, node) + graph_fields
    model.ClearField("graph")
    return model.SerializeToString() + _field(7, graph)


def _read_as_onnx_does(path: Path) -> np.ndarray:
    (tensor,) = onnx.load(str(path)).graph.initializer
    return numpy_helper.to_array(tensor)


def test_protobuf_keeps_the_last_raw_data_and_unknown_fields(tmp_path):
    """A tensor holding a big raw_data and then a small one is the small one (as protobuf
    reads it); one holding unknown fields (a group among them) keeps them."""
    small = np.arange(4, dtype=np.float32)
    tensor = numpy_helper.from_array(small, "w").SerializeToString()
    big = _field(9, bytes(8 * PAYLOAD_THRESHOLD))
    group = (
        encode_varint(100 << 3 | 3)
        + encode_varint(101 << 3)
        + b"\x05"
        + encode_varint(100 << 3 | 4)
    )
    for name, data in {"twice": big + tensor, "unknown": tensor + group}.items():
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(_model_bytes(_field(5, data)))
        np.testing.assert_array_equal(_read_as_onnx_does(path), small)
        np.testing.assert_array_equal(constants(import_onnx(path))["w"], small)
    big_last = numpy_helper.from_array(np.arange(3000, dtype=np.float32), "w").SerializeToString()
    path = tmp_path / "unknown_big.onnx"
    path.write_bytes(_model_bytes(_field(5, group + big_last + group)))
    np.testing.assert_array_equal(
        constants(import_onnx(path))["w"], np.arange(3000, dtype=np.float32)
    )


def test_a_merged_tensor_attribute_is_read_as_protobuf_merges_it(tmp_path):
    """A Constant whose value field occurs twice: protobuf merges the two tensors, the
    second one's small raw_data replacing the first one's big one, which is therefore not
    left out as the tensor's payload."""
    first = TensorProto(data_type=TensorProto.FLOAT, raw_data=bytes(4 * PAYLOAD_THRESHOLD))
    second = TensorProto(dims=[2], raw_data=np.array([5, 6], np.float32).tobytes())
    attribute = helper.make_attribute("value", first).SerializeToString()
    attribute += _field(5, second.SerializeToString())
    constant = helper.make_node("Constant", [], ["w"]).SerializeToString() + _field(5, attribute)
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes(b"", before=_field(1, constant)))
    (tensor,) = [a.t for a in onnx.load(str(path)).graph.node[0].attribute]
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), [5, 6])
    (y,) = evaluate(import_onnx(path), [])
    np.testing.assert_array_equal(y, np.array([5, 6], np.float32))


def test_a_tensor_both_external_and_embedded_reads_its_file(tmp_path):
    """A tensor marked EXTERNAL that holds raw_data too is its file's values, as before:
    its raw_data is not taken for a payload."""
    weight = numpy_helper.from_array(np.zeros(3000, np.float32), "w")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="w.bin")
    ones = np.ones(3000, np.float32)
    (tmp_path / "w.bin").write_bytes(ones.tobytes())
    # (onnx.save would write the raw_data into w.bin)
    (tmp_path / "m.onnx").write_bytes(identity_model([weight]).SerializeToString())
    np.testing.assert_array_equal(constants(import_onnx(tmp_path / "m.onnx"))["w"], ones)


def test_text_formats_are_read_by_onnx(tmp_path):
    tensors = [numpy_helper.from_array(ARRAYS["small"], "small")]
    onnx.save(identity_model(tensors), str(tmp_path / "m.textproto"))
    assert_same_arrays(import_onnx(tmp_path / "m.textproto"), tensors)


# how to break a model file's wire format -> what the one-line error says
BROKEN = {
    "truncated_in_a_payload": (lambda data: data[: len(data) // 2], "runs past the end"),
    "length_past_the_end": (
        lambda data: data + b"\x3a\xff\xff\x03" + bytes(10),
        "runs past the end",
    ),
    "bad_varint": (lambda data: data + b"\x08" + b"\xff" * 11, "longer than 10 bytes"),
    "bad_wire_type": (lambda data: data + b"\x0f", "wire type 7"),
    "end_group_alone": (lambda data: data + b"\x0c", "end-group tag"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_wire_format_is_one_line(tmp_path, broken):
    make, reason = BROKEN[broken]
    data = identity_model([numpy_helper.from_array(ARRAYS["f32"], "w")]).SerializeToString()
    path = tmp_path / "bad.onnx"
    path.write_bytes(make(data))
    with pytest.raises(ModelError) as info:
        import_onnx(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a readable ONNX model (") and reason in message, message
    assert "\n" not in message


def test_a_file_that_shrinks_while_it_is_read_is_refused(tmp_path, monkeypatch):
    """The model file, or an external data file, cut short after it was walked or checked:
    one line saying so, not the zeros of an array half read."""
    weight = numpy_helper.from_array(ARRAYS["f32"], "w")
    embedded = tmp_path / "embedded.onnx"
    onnx.save(identity_model([weight]), str(embedded))
    external = tmp_path / "m.onnx"
    onnx.save(identity_model([weight]), str(external), save_as_external_data=True, location="w.bin")

    def walked_then_cut(file):
        found = wire.slim_model(file)
        os.truncate(embedded, embedded.stat().st_size // 2)
        return found

    place = external_data.place

    def checked_then_cut(tensor, base, what):
        span = place(tensor, base, what)
        os.truncate(os.path.join(base, span.location), 100)
        return span

    monkeypatch.setattr(importer, "slim_model", walked_then_cut)
    with pytest.raises(ModelError, match=r"^tensor 'w' .*: the model file shrank while it"):
        import_onnx(embedded)
    monkeypatch.setattr(external_data, "place", checked_then_cut)
    with pytest.raises(ModelError, match=r"^tensor 'w' .*'w.bin' shrank while it was read"):
        import_onnx(external)


# the child: the peak RSS that importing the model adds to the process after its imports.
# The peak is /proc's VmHWM, this program's own: ru_maxrss would start at the test
# process's peak, which subprocess's vfork and exec hand on to the child
_MEASURE = r"""
import json, sys
from aotc.frontends.onnx import import_onnx
def peak():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024
base = peak()
module = import_onnx(sys.argv[1])
print(json.dumps({"growth": peak() - base}))
"""

LAYERS, SIDE = 18, 2048  # 302 MB of float32 weights, 16 MiB a tensor


def write_big_models(folder: Path) -> dict[str, Path]:
    """The same ~300 MB of float32 weights embedded in a model file and external to one."""
    weight = np.linspace(-1.0, 1.0, SIDE * SIDE, dtype=np.float32).reshape(SIDE, SIDE)
    model = identity_model([numpy_helper.from_array(weight, f"w{k}") for k in range(LAYERS)])
    (folder / "external").mkdir()
    paths = {"embedded": folder / "embedded.onnx", "external": folder / "external" / "m.onnx"}
    onnx.save(model, str(paths["embedded"]))
    onnx.save(model, str(paths["external"]), save_as_external_data=True, location="w.bin")
    return paths


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_import_peak_memory_grows_by_the_weights_once(tmp_path):
    """Importing ~300 MB of weights, embedded or external, adds about 1.08x their size to
    the process's peak (1.3x allowed); reading the file whole and then the message's copy,
    as onnx.load does, added 2.1x."""
    weight_bytes = LAYERS * SIDE * SIDE * 4
    for where, path in write_big_models(tmp_path).items():
        child = [sys.executable, "-c", _MEASURE, str(path)]
        done = subprocess.run(child, capture_output=True, text=True, check=True, timeout=120)
        growth = json.loads(done.stdout.strip().splitlines()[-1])["growth"]
        assert 0.9 * weight_bytes < growth < 1.3 * weight_bytes, (
            f"{where}: peak RSS grew {growth / weight_bytes:.2f}x the weights"
        )
