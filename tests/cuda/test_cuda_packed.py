"""Sub-byte constants packed in the CUDA weights blob (aotc/backends/cuda/packing.py), run
emulated (cuda_testing.run_emulated).

MatMulNBits of 2 and 4 bits, with and without zero points, by one row (the gemv) and 64
(the tiled GEMM), against numpy's float64 product by the weight dequantized here (rtol
1e-4, atol 1e-4 of the largest magnitude), with the object's weights within 10% of the
model's initializers (one byte a value took 1.8-3x) and the model's packed bytes found
as they are in the blob (ONNX's order).  Constants of every packed type read elementwise
(DequantizeLinear, Cast, Gather) are exact against onnx.reference, one of them also
returned as is (the launcher copies its bytes: it stays one byte a value).
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_testing import c_compiler, require_ptxas, run_emulated
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aotc.backends.cuda.packing import pack_constants, pack_fields
from aotc.driver import CompileOptions, compile_model

MS = "com.microsoft"


@pytest.fixture(autouse=True)
def _tools():
    require_ptxas()
    c_compiler()


def test_pack_fields_in_onnx_order():
    """Element 2i in the low nibble (2 bits: element 4i lowest); the fields of values
    stored sign-extended are their low bits; a last byte's free fields are zero."""
    assert pack_fields(bytes([1, 2, 3]), 4) == bytes([0x21, 0x03])
    assert pack_fields(bytes([0xFF, 0xF8]), 4) == bytes([0x8F])
    assert pack_fields(bytes([1, 2, 3, 0, 0xFE]), 2) == bytes([0b00111001, 0b10])


def _nbits_model(rng, m, k, n, block, bits, zero):
    """(model, the float64 weight (n, k), B's bytes) of a MatMulNBits by random values."""
    blocks = k // block
    b = rng.integers(0, 256, (n, blocks, block * bits // 8), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, (n, blocks)).astype(np.float32)
    initializers = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(scales, "s")]
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    q = ((b[..., None] >> shifts) & ((1 << bits) - 1)).reshape(n, k)
    zeros = np.full((n, blocks), 2 ** (bits - 1))
    if zero:
        packed = rng.integers(0, 256, (n, -(-blocks * bits // 8)), dtype=np.uint8)
        initializers.append(numpy_helper.from_array(packed, "z"))
        zeros = ((packed[..., None] >> shifts) & ((1 << bits) - 1)).reshape(n, -1)[:, :blocks]
    node = helper.make_node(
        "MatMulNBits",
        ["a", "b", "s", *(["z"] if zero else [])],
        ["y"],
        domain=MS,
        K=k,
        N=n,
        bits=bits,
        block_size=block,
    )
    graph = helper.make_graph(
        [node],
        "nbits",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        initializers,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    per_k = np.arange(k) // block
    weight = (q - zeros[:, per_k].astype(np.float64)) * scales.astype(np.float64)[:, per_k]
    return model, weight, b.tobytes()


# bits, block, zero points: the default zero points are one byte a block (the frontend's
# u8 constant), whose share block 64 keeps small for 2 bits
@pytest.mark.parametrize("bits,block", [(4, 32), (2, 64)])
@pytest.mark.parametrize("zero", [True, False])
@pytest.mark.parametrize("m,kind", [(1, "gemv"), (64, "gemm")])
def test_matmul_nbits(m, kind, bits, block, zero, tmp_path):
    rng = np.random.default_rng(m * bits + zero)
    k, n = 512, 136  # zero points of more than 4096 bytes as floats: not folded
    model, weight, b = _nbits_model(rng, m, k, n, block, bits, zero)
    name = f"nbits{bits}_{m}"
    compiled = compile_model(model, CompileOptions(target="cuda:sm_90", name=name))
    assert kind in [launch.kind for launch in compiled.program.launches]
    stored = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    assert compiled.stats.weight_bytes == compiled.program.weight_bytes <= 1.1 * stored
    assert b in compiled.program.weights
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    expected = a.astype(np.float64) @ weight.T
    (got,) = run_emulated(compiled, [a], [expected.astype(np.float32)], tmp_path)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)
    header = (tmp_path / "build" / f"{name}.h").read_text()
    assert f"weights {compiled.program.weight_bytes} bytes" in header


def _sub_byte_model(rng, dims):
    """Constants of the packed types (67 x 77: the last byte's fields partly free) read
    elementwise by a float input or gathered by indices; u4 also returned as is."""
    values = {
        "w4": (TensorProto.INT4, rng.integers(-8, 8, dims)),
        "u4": (TensorProto.UINT4, rng.integers(0, 16, dims)),
        "s2": (TensorProto.INT2, rng.integers(-2, 2, dims)),
        "u2": (TensorProto.UINT2, rng.integers(0, 4, dims)),
        "f4": (TensorProto.FLOAT4E2M1, rng.choice([0, 0.5, 1.5, 3, 6, -0.5, -2, -4], dims)),
    }
    initializers = [
        helper.make_tensor(name, dtype, dims, array.flatten().tolist())
        for name, (dtype, array) in values.items()
    ]
    initializers += [
        numpy_helper.from_array(np.array(0.25, np.float32), "scale"),
        helper.make_tensor("zero", TensorProto.INT4, [], [3]),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["w4", "scale", "zero"], ["dq"]),
        helper.make_node("Mul", ["dq", "x"], ["y"]),
        helper.make_node("Cast", ["u4"], ["cu"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["cu", "x"], ["z"]),
        helper.make_node("Cast", ["s2"], ["cs"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["u2"], ["cv"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["cs", "cv"], ["d"]),
        helper.make_node("Mul", ["d", "x"], ["v"]),
        helper.make_node("Cast", ["f4"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["cf", "x"], ["f"]),
        helper.make_node("Gather", ["w4", "rows"], ["g4"], axis=0),
        helper.make_node("Cast", ["g4"], ["g"], to=TensorProto.INT8),
        helper.make_node("Identity", ["u4"], ["same"]),
    ]
    outputs = [(o, TensorProto.FLOAT, dims) for o in "yzvf"]
    outputs += [("g", TensorProto.INT8, [5, dims[1]]), ("same", TensorProto.UINT4, dims)]
    graph = helper.make_graph(
        nodes,
        "sub_byte",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, dims),
            helper.make_tensor_value_info("rows", TensorProto.INT64, [5]),
        ],
        [helper.make_tensor_value_info(*o) for o in outputs],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)


def test_sub_byte_constants_read_elementwise(tmp_path):
    rng = np.random.default_rng(3)
    dims = [67, 77]
    model = _sub_byte_model(rng, dims)
    compiled = compile_model(model, CompileOptions(target="cuda:sm_90", name="sub_byte"))
    fields = pack_constants(compiled.plan).fields
    # u4 is returned as is: the launcher copies its bytes, so it stays a byte a value
    assert sorted(d.text for d in fields.values()) == ["f4e2m1fn", "s2", "s4", "u2"]
    assert sorted(s.size for s in fields) == [1290, 1290, 2580, 2580]
    feeds = [rng.normal(size=dims).astype(np.float32), np.array([0, 66, 3, 40, 1])]
    expected = ReferenceEvaluator(model).run(None, dict(zip(["x", "rows"], feeds)))
    expected[-1] = expected[-1].astype(np.uint8)  # u4 outputs: a byte each (NAME.h)
    got = run_emulated(compiled, feeds, expected, tmp_path)
    for k, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_array_equal(g, e, err_msg=f"output {k}")
