"""The integer GEMM (pairs.py): 8- and 16-bit operands summed in s32, exactly.

Quantized ONNX models (MatMulInteger, ConvInteger, QLinearMatMul) make s32 dots and
convolutions of 16-bit centered operands; these must run as packed GEMMs (the element
rule took 280x onnxruntime's time) and equal numpy's int64 sums bit for bit, for any
shape (odd K, edges of every tile), weights constant or not, on every target kind:
pmaddwd at full width (the host), SSE's (x86-64-v2) and the plain arithmetic of CPUs
without it (sandybridge: AVX without AVX2).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import aotc
from aotc.backends.cpu.amx import MIN_TILED_DEPTH

TARGETS = ["host", "x86_64:x86-64-v2", "x86_64:sandybridge"]


def _model(node, inputs, output, shape, initializers):
    graph = helper.make_graph(
        [node],
        "g",
        inputs,
        [helper.make_tensor_value_info(output, TensorProto.INT32, list(shape))],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _run(model, target: str, *feeds):
    compiled = aotc.compile(model, target=target)
    return _output(compiled, *feeds), compiled.kernel_forms()


def _output(compiled, *feeds) -> np.ndarray:
    """The model's one output on `feeds`."""
    got = compiled.load()(*feeds)
    return got[0] if isinstance(got, (list, tuple)) else got


def _int8(rng, shape, unsigned: bool) -> np.ndarray:
    if unsigned:
        return rng.integers(0, 256, shape).astype(np.uint8)
    return rng.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "m, k, n", [(1, 1, 1), (3, 5, 7), (13, 33, 17), (64, 256, 96), (37, 767, 50), (5, 2, 40)]
)
@pytest.mark.parametrize("constant_weights", [True, False], ids=["const", "input"])
def test_matmul_integer_is_exact(rng, target, m, k, n, constant_weights):
    a = _int8(rng, (m, k), unsigned=True)
    w = _int8(rng, (k, n), unsigned=False)
    a_zero, w_zero = np.uint8(rng.integers(0, 256)), np.int8(-5)
    initializers = [
        numpy_helper.from_array(np.array(a_zero), "azp"),
        numpy_helper.from_array(np.array(w_zero), "wzp"),
    ]
    inputs = [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])]
    if constant_weights:
        initializers.append(numpy_helper.from_array(w, "w"))
    else:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.INT8, [k, n]))
    node = helper.make_node("MatMulInteger", ["a", "w", "azp", "wzp"], ["y"])
    model = _model(node, inputs, "y", (m, n), initializers)
    got, forms = _run(model, target, a, *([] if constant_weights else [w]))
    want = (a.astype(np.int64) - int(a_zero)) @ (w.astype(np.int64) - int(w_zero))
    np.testing.assert_array_equal(got, want.astype(np.int32))
    assert set(forms.values()) & GEMM_FORMS, forms


def _symbols(compiled) -> set[str]:
    """The GEMM micro-kernels and packers in the object (their names say pairs or quads)."""
    found = re.findall(
        rb"(?:gemm\.(?:kernel|pack_quads|pack_pairs)|amx\.strips)\.[\w.]+", compiled.object_bytes
    )
    return {name.decode() for name in found}


GEMM_FORMS = {"gemm", "amx"}  # a blocked GEMM, or AMX tiles (by constant weights)

ZERO_POINTS = {  # a's, w's: None, a scalar, or a vector (a's per row, w's per column)
    "none": (False, False),
    "scalar": (True, True),
    "rows_columns": ("rows", "columns"),
    "a_only": (True, False),
}


RAW_CASES = [
    pytest.param("host", signs, zero_points, shape, constant, id=f"{signs}-{zero_points}-{shape}")
    for signs in ("u8s8", "s8u8", "s8s8", "u8u8")
    for zero_points in ZERO_POINTS
    for shape, constant in (
        ((3, 5, 7), True),
        ((37, 767, 50), False),
        ((29, 303, 70), True),
        ((1, 3, 2), True),
    )
] + [  # no byte products: pairs of the same operands
    pytest.param("x86_64:x86-64-v3", signs, "rows_columns", (37, 767, 50), constant)
    for signs in ("u8s8", "s8u8")
    for constant in (True, False)
]


@pytest.mark.parametrize("target, signs, zero_points, shape, constant_weights", RAW_CASES)
def test_raw_8bit_products_are_exact(rng, target, signs, zero_points, shape, constant_weights):
    """MatMulInteger's operands multiplied as they are, the zero points applied after:
    exact for every signedness and kind of zero point, K not a multiple of 4 or of 2,
    the weights pre-packed or packed at run time.  By constant weights on a target with
    AMX-INT8 every pair of signs runs on tiles; otherwise one u8 and one s8 operand run
    as quads of bytes (vpdpbusd) where the target lists AVX-512 VNNI, else as pairs."""
    m, k, n = shape
    a = _int8(rng, (m, k), unsigned=signs.startswith("u8"))
    w = _int8(rng, (k, n), unsigned=signs.endswith("u8"))
    a_kind, w_kind = ZERO_POINTS[zero_points]
    feeds, inputs, initializers, names = [a], [], [], ["a", "w", "", ""]
    inputs.append(helper.make_tensor_value_info("a", _ONNX_INT8[a.dtype], [m, k]))
    if constant_weights:
        initializers.append(numpy_helper.from_array(w, "w"))
    else:
        inputs.append(helper.make_tensor_value_info("w", _ONNX_INT8[w.dtype], [k, n]))
        feeds.append(w)
    a_zero = _zero_point(rng, a.dtype, a_kind, m)
    w_zero = _zero_point(rng, w.dtype, w_kind, n)
    for slot, (name, value) in enumerate((("azp", a_zero), ("wzp", w_zero)), start=2):
        if value is not None:
            initializers.append(numpy_helper.from_array(value, name))
            names[slot] = name
    while names[-1] == "":
        names.pop()
    node = helper.make_node("MatMulInteger", names, ["y"])
    model = _model(node, inputs, "y", (m, n), initializers)
    compiled = aotc.compile(model, target=target)
    got = _output(compiled, *feeds)
    centered_a = a.astype(np.int64) - (0 if a_zero is None else _column(a_zero, a_kind))
    centered_w = w.astype(np.int64) - (0 if w_zero is None else w_zero.astype(np.int64))
    np.testing.assert_array_equal(got, (centered_a @ centered_w).astype(np.int32))
    host = target == "host"
    if host and constant_weights and _tiled(k):
        # on AMX tiles (amx.py; same-signed pairs are one u8 and one s8 after the
        # frontend's sign flip), no GEMM micro-kernel
        found = {n for n in _symbols(compiled) if "kernel" in n or "amx" in n}
        assert len(found) == 1 and found.pop().startswith("amx.strips."), found
        return
    quads = host and "+avx512vnni" in _host_features() and signs in ("u8s8", "s8u8")
    kernels = {name for name in _symbols(compiled) if name.startswith("gemm.kernel.")}
    assert kernels and all((f".{signs}." in name) == quads for name in kernels), kernels


_ONNX_INT8 = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _zero_point(rng, dtype, kind, size: int):
    if kind is False:
        return None
    info = np.iinfo(dtype)
    shape = () if kind is True else (size,)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _column(a_zero: np.ndarray, kind) -> np.ndarray:
    """a's zero point as it broadcasts against a: per row when a vector."""
    values = a_zero.astype(np.int64)
    return values[:, None] if kind == "rows" else values


def _tiled(k: int) -> bool:
    """Whether a host product of constant 8-bit weights, K deep, runs on AMX tiles."""
    return "+amx-int8" in _host_features().split(",") and k >= MIN_TILED_DEPTH


def _host_features() -> str:
    from aotc.backends.cpu import parse_target

    return parse_target("host").features


@pytest.mark.parametrize("target", ["host", "x86_64:sandybridge"])
def test_batched_matmul_of_unsigned_and_symmetric_weights(rng, target):
    """A batch of products whose weights have no zero point (read as 8-bit values in
    place, widened while packed)."""
    a = _int8(rng, (2, 3, 9, 31), unsigned=True)
    w = _int8(rng, (31, 20), unsigned=False)
    a_zero = np.uint8(128)
    initializers = [
        numpy_helper.from_array(np.array(a_zero), "azp"),
        numpy_helper.from_array(w, "w"),
    ]
    inputs = [helper.make_tensor_value_info("a", TensorProto.UINT8, list(a.shape))]
    node = helper.make_node("MatMulInteger", ["a", "w", "azp"], ["y"])
    model = _model(node, inputs, "y", (2, 3, 9, 20), initializers)
    got, forms = _run(model, target, a)
    want = (a.astype(np.int64) - 128) @ w.astype(np.int64)
    np.testing.assert_array_equal(got, want.astype(np.int32))
    assert set(forms.values()) & GEMM_FORMS, forms


def _reference_conv(x, w, stride: int, pad: int, groups: int) -> np.ndarray:
    n, _, h, width = x.shape
    out_channels, group_channels, kh, kw = w.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (width + 2 * pad - kw) // stride + 1
    out = np.zeros((n, out_channels, oh, ow), np.int64)
    per_group = out_channels // groups
    for g in range(groups):
        channels = slice(g * group_channels, (g + 1) * group_channels)
        outs = slice(g * per_group, (g + 1) * per_group)
        for i in range(kh):
            for j in range(kw):
                patch = padded[
                    :, channels, i : i + stride * oh : stride, j : j + stride * ow : stride
                ]
                out[:, outs] += np.einsum("nchw,oc->nohw", patch, w[outs, :, i, j])
    return out


CONVS = [
    # n, c, h, w, out, kernel, stride, pad, groups, weight zero point
    (1, 3, 17, 17, 8, 7, 2, 3, 1, 0),  # odd K: pairs through the generator, short quads
    (1, 16, 14, 14, 32, 3, 1, 1, 1, 0),  # im2col pairs, or quads
    (2, 8, 9, 9, 16, 1, 1, 0, 1, 0),  # pointwise: the image as a strided matrix
    (1, 32, 15, 15, 24, 3, 2, 1, 1, 0),
    (1, 8, 10, 10, 8, 3, 1, 1, 2, 0),  # grouped
    (1, 8, 10, 10, 8, 3, 1, 1, 8, 0),  # depthwise: the element rule
    (1, 5, 8, 8, 6, 3, 1, 1, 1, 3),  # weights with a zero point: s16 constants
    (1, 6, 23, 23, 40, 5, 2, 2, 1, 0),  # K = 150 over several panels: short last quad
    (2, 7, 12, 12, 52, 3, 1, 0, 1, 0),  # K = 63, a batch
    (1, 290, 5, 5, 24, 3, 1, 1, 1, 0),  # K = 2610: K slices, the last one short
]


@pytest.mark.parametrize("target", ["host", "x86_64:sandybridge"])
@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c)))
def test_conv_integer_is_exact(rng, target, case):
    n, c, h, w_, out, k, stride, pad, groups, w_zero = case
    x = _int8(rng, (n, c, h, w_), unsigned=True)
    w = _int8(rng, (out, c // groups, k, k), unsigned=False)
    x_zero = np.uint8(rng.integers(0, 256))
    want = _reference_conv(
        x.astype(np.int64) - int(x_zero), w.astype(np.int64) - w_zero, stride, pad, groups
    )
    initializers = [
        numpy_helper.from_array(np.array(x_zero), "xzp"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(w_zero, np.int8), "wzp"),
    ]
    node = helper.make_node(
        "ConvInteger",
        ["x", "w", "xzp", "wzp"],
        ["y"],
        strides=[stride] * 2,
        pads=[pad] * 4,
        group=groups,
    )
    inputs = [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))]
    compiled = aotc.compile(_model(node, inputs, "y", want.shape, initializers), target=target)
    got = _output(compiled, x)
    np.testing.assert_array_equal(got, want.astype(np.int32))
    depthwise = groups == c
    assert depthwise or set(compiled.kernel_forms().values()) & GEMM_FORMS
    # u8 images and s8 weights without a zero point: byte products (any K: the image's
    # last quad padded with zero rows), on AMX tiles from MIN_TILED_DEPTH on
    byte_products = target == "host" and not depthwise and not w_zero and groups == 1
    if byte_products and _tiled((c // groups) * k * k):
        assert "amx.strips.s8u8" in _symbols(compiled)
        return
    quads = target == "host" and "+avx512vnni" in _host_features()
    quads = quads and not depthwise and not w_zero
    kernels = {name for name in _symbols(compiled) if name.startswith("gemm.kernel.")}
    assert depthwise or all((".s8u8." in name) == quads for name in kernels), kernels
