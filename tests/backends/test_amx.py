"""8-bit dots by constant 8-bit weights on AMX tiles (backends/cpu/amx.py).

Each case compiles an ONNX model for the host and compares with onnx.reference: the
s32 products must be exact, and the quantized layers' outputs equal to the reference's
float rounding.  The cases need a host whose CPU has AMX-INT8 and whose kernel grants
the tile state; elsewhere they skip.  The packing of B is checked in numpy everywhere.
"""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from aotc_testing import c_compiler, run_cli
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import aotc
from aotc.backends.cpu import parse_target, target
from aotc.backends.cpu.amx import K_STEP, MIN_TILED_DEPTH, STRIP, TILE_ROWS, AmxLayout
from aotc.backends.cpu.contraction import contraction_plans

HOST = parse_target("host")
needs_amx = pytest.mark.skipif(
    not HOST.has_amx_int8, reason="the host has no AMX-INT8 (or its kernel refuses the tiles)"
)
TYPES = {np.int8: (TensorProto.INT8, -128, 128), np.uint8: (TensorProto.UINT8, 0, 256)}


def _random(rng, dtype, shape):
    _, low, high = TYPES[dtype]
    return rng.integers(low, high, shape).astype(dtype)


def _compile(graph):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    compiled = aotc.compile(model)
    plans = [contraction_plans(HOST, compiled.plan, i) for i in compiled.plan.schedule]
    kinds = [p[1][-1].kind for p in plans if p is not None]
    return model, compiled, kinds


def _matmul_graph(w, transposed: bool, zero_points):
    """MatMulInteger(a, w[, za, zw]) nodes and initializers; with `transposed`, a is
    the transpose of input x."""
    nodes, inits = [], [numpy_helper.from_array(w, "w")]
    names = ["a", "w"]
    if transposed:  # A read through a transpose: its rows are not contiguous in memory
        nodes.append(helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]))
    if zero_points is not None:
        za, zw = zero_points
        inits += [numpy_helper.from_array(za, "za"), numpy_helper.from_array(zw, "zw")]
        names += ["za", "zw"]
    nodes.append(helper.make_node("MatMulInteger", names, ["y"]))
    return nodes, inits


@needs_amx
@pytest.mark.parametrize(
    "m, k, n",
    [(1, 256, 32), (24, 300, 40), (33, 257, 17), (5, 259, 7), (128, 768, 96), (64, 320, 64)],
)
@pytest.mark.parametrize("signs", ["u8s8", "s8u8", "s8s8", "u8u8"])
def test_matmul_integer_is_exact(m, k, n, signs):
    """Rows and columns past whole blocks and strips, K past whole 64-byte steps, every
    pair of signs, with zero points; the product runs on tiles."""
    rng = np.random.default_rng(m * 1000 + k + n)
    a_dtype = np.uint8 if signs.startswith("u8") else np.int8
    w_dtype = np.uint8 if signs.endswith("u8") else np.int8
    a, w = _random(rng, a_dtype, (m, k)), _random(rng, w_dtype, (k, n))
    zero_points = (_random(rng, a_dtype, ()), _random(rng, w_dtype, (n,)))
    nodes, inits = _matmul_graph(w, False, zero_points)
    graph = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("a", TYPES[a_dtype][0], [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
        inits,
    )
    model, compiled, kinds = _compile(graph)
    expected = ReferenceEvaluator(model).run(None, {"a": a})[0]
    (got,) = compiled.load()(a)
    np.testing.assert_array_equal(got, expected)
    assert kinds == ["amx"], kinds


@needs_amx
def test_shallow_products_stay_on_byte_quads():
    """Below MIN_TILED_DEPTH values of K the quads' GEMM is the faster form."""
    rng = np.random.default_rng(7)
    w = _random(rng, np.int8, (MIN_TILED_DEPTH - 1, 40))
    nodes, inits = _matmul_graph(w, False, None)
    graph = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [24, MIN_TILED_DEPTH - 1])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [24, 40])],
        inits,
    )
    _, _, kinds = _compile(graph)
    assert kinds == ["gemm"], kinds


CONVOLUTIONS = [  # (channels in, out, size, kernel, stride, pad, batch, tiles)
    (64, 64, 14, 3, 1, 1, 1, True),
    (32, 40, 17, 3, 2, 1, 1, True),
    (256, 72, 7, 1, 1, 0, 2, True),
    (16, 20, 9, 3, 1, 0, 1, False),  # K = 144: quads
]


@needs_amx
@pytest.mark.parametrize("ci, co, size, kernel, stride, pad, batch, tiles", CONVOLUTIONS)
def test_convolution_is_exact(ci, co, size, kernel, stride, pad, batch, tiles):
    """ConvInteger by a constant s8 kernel with the input's zero point: the kernel's rows
    pre-packed, the image's columns packed per strip; exact, on tiles from K 256 on."""
    rng = np.random.default_rng(ci + co + size)
    x = _random(rng, np.uint8, (batch, ci, size, size))
    w = _random(rng, np.int8, (co, ci, kernel, kernel))
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(131), "zx")]
    node = helper.make_node(
        "ConvInteger", ["x", "w", "zx"], ["y"], strides=[stride] * 2, pads=[pad] * 4
    )
    out = (size + 2 * pad - kernel) // stride + 1
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [batch, co, out, out])],
        inits,
    )
    model, compiled, kinds = _compile(graph)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(compiled.load()(x)[0], expected)
    assert kinds == (["amx"] if tiles else ["gemm"]), kinds


@needs_amx
def test_transposed_activations():
    """A read element by element (through a transpose) is copied into the tiles' rows."""
    rng = np.random.default_rng(3)
    m, k, n = 40, 290, 50
    x, w = _random(rng, np.uint8, (k, m)), _random(rng, np.int8, (k, n))
    nodes, inits = _matmul_graph(w, True, None)
    graph = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [k, m])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
        inits,
    )
    _, compiled, kinds = _compile(graph)
    (got,) = compiled.load()(x)
    want = x.T.astype(np.int64) @ w.astype(np.int64)
    np.testing.assert_array_equal(got, want.astype(np.int32))
    assert kinds == ["amx"], kinds


@needs_amx
def test_quantized_layer_with_epilogue_at_two_threads():
    """A QLinearMatMul with its requantization fused (the epilogue on each run of
    strips): equal to onnx.reference, and the same at 1 and 2 threads."""
    rng = np.random.default_rng(4)
    m, k, n = 96, 256, 3 * STRIP * 8 + 5  # runs of strips shared out, a partial strip
    a, w = _random(rng, np.uint8, (m, k)), _random(rng, np.int8, (k, n))
    scalars = {
        "sa": np.float32(0.02),
        "za": np.uint8(120),
        "sw": np.float32(0.01),
        "zw": np.int8(0),
        "sy": np.float32(0.5),
        "zy": np.uint8(128),
    }
    inits = [numpy_helper.from_array(w, "w")]
    inits += [numpy_helper.from_array(np.array(v), name) for name, v in scalars.items()]
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "w", "sw", "zw", "sy", "zy"], ["y"])
    graph = helper.make_graph(
        [node],
        "qmm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [m, n])],
        inits,
    )
    model, compiled, kinds = _compile(graph)
    expected = ReferenceEvaluator(model).run(None, {"a": a})[0]
    run = compiled.load()
    run._ffi.cdef(f"void {run.name}_set_num_threads(int);")
    results = []
    for threads in (1, 2, 1):  # back to 1: joins the workers before the library goes
        run.set_num_threads(threads)
        results.append(run(a)[0])
    np.testing.assert_array_equal(results[0], expected)
    np.testing.assert_array_equal(results[1], results[0])
    assert kinds == ["amx"], kinds


def test_layout_of_the_packed_weights():
    """Value (k, n) of B sits in strip n // 32, k step k // 64, tile (n % 32) // 16, row
    (k % 64) // 4, column n % 16, byte k % 4; zeros past k and n."""
    rng = np.random.default_rng(5)
    k, n = 130, 45
    matrix = _random(rng, np.int8, (k, n))
    lay = AmxLayout(n, k)
    packed = np.frombuffer(lay.pack(matrix), np.int8)
    assert packed.size == lay.strips * lay.strip_bytes
    shaped = packed.reshape(lay.strips, lay.steps, 2, TILE_ROWS, TILE_ROWS, 4)
    for kk, nn in [(0, 0), (129, 44), (64, 16), (3, 31), (77, 33)]:
        s, t, j, c = nn // STRIP, kk // K_STEP, (nn % STRIP) // TILE_ROWS, nn % TILE_ROWS
        assert shaped[s, t, j, (kk % K_STEP) // 4, c, kk % 4] == matrix[kk, nn]
    assert packed.astype(np.int64).sum() == matrix.astype(np.int64).sum()  # the rest is zero


def test_named_cpus_and_refusing_kernels_get_no_tiles(monkeypatch):
    """A CPU named without its features has no AMX (as no VNNI); the host's AMX features
    are marked off where the kernel refuses the tile state."""
    assert not parse_target("x86_64:x86-64-v4").has_amx_int8
    assert not parse_target("aarch64").has_amx_int8
    monkeypatch.setattr(target, "_tiles_granted", lambda: False)
    features = target._without_refused_tiles("+avx512f,+amx-tile,+amx-int8,+amx-bf16")
    assert features == "+avx512f,-amx-tile,-amx-int8,-amx-bf16"
    assert target._without_refused_tiles("+avx512f,-amx-tile") == "+avx512f,-amx-tile"


REFUSING_SYSCALL_C = r"""
long syscall(long number, ...) { (void)number; return -1; }
"""

STATUS_DRIVER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mm.h"
int main(void) {
    static unsigned char a[MM_A_SIZE];
    static int y[MM_Y_SIZE];
    printf("%d\n", mm_run(a, y, NULL));
    return 0;
}
"""


@needs_amx
def test_run_returns_2_where_linux_refuses_the_tiles(tmp_path):
    """NAME_run asks for the tile state before any kernel; a refusal (here a preloaded
    syscall that fails) returns 2 and computes nothing, where a tile instruction would
    have killed the program; granted, it returns 0."""
    w = _random(np.random.default_rng(6), np.int8, (256, 32))
    nodes, inits = _matmul_graph(w, False, None)
    graph = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [8, 256])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [8, 32])],
        inits,
    )
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    build = tmp_path / "build"
    result = run_cli("compile", path, "-o", build, "-q")
    assert result.returncode == 0, result.stderr
    assert "2 if Linux refuses the AMX" in (build / "mm.h").read_text()
    cc = c_compiler()
    (tmp_path / "driver.c").write_text(STATUS_DRIVER_C)
    (tmp_path / "refuse.c").write_text(REFUSING_SYSCALL_C)
    program, refuse = tmp_path / "app", tmp_path / "librefuse.so"
    steps = [
        [
            cc,
            "-I",
            build,
            tmp_path / "driver.c",
            build / "libmm.a",
            "-lm",
            "-lpthread",
            "-o",
            program,
        ],
        [cc, "-shared", "-fPIC", tmp_path / "refuse.c", "-o", refuse],
    ]
    for step in steps:
        done = subprocess.run([str(x) for x in step], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    for env, status in (({}, "0"), ({"LD_PRELOAD": str(refuse)}, "2")):
        done = subprocess.run([str(program)], capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0 and done.stdout.strip() == status, (env, done)
