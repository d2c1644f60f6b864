"""Pooling kernels (pooling.py): ONNX MaxPool/AveragePool/global pools compiled with aotc,
run through the runner and compared with onnx.reference (f32: rtol 1e-5, atol 1e-6 of
the largest magnitude; f64: 1e-12); `pooling_kind` checks the fast path computed it, so
a case cannot pass by falling back to the element rules unnoticed.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import aotc
from aotc.backends.cpu.pooling import pooling_kind
from aotc.ir import ComputationBuilder, DType, Module, Op, Shape, Window, scalar_reducer
from aotc.passes.separable_windows import window_passes

TOLERANCES = {np.float32: 1e-5, np.float64: 1e-12}
ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(op: str, shape, attrs: dict, dtype=np.float32):
    x = helper.make_tensor_value_info("x", ONNX_TYPES[dtype], list(shape))
    y = helper.make_tensor_value_info("y", ONNX_TYPES[dtype], [None] * len(shape))
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g", [x], [y])
    opset = [helper.make_opsetid("", 19)]
    return helper.make_model(graph, opset_imports=opset, ir_version=10)


def _compile_and_run(model, x: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The compiled model's output and how its pooling kernels were emitted."""
    compiled = aotc.compile(model, name="pool")
    plan = compiled.plan
    kinds = [pooling_kind(plan, i) for i in plan.schedule if plan.needs_code(i)]
    (got,) = compiled.load().run([x])
    return got, [k for k in kinds if k is not None]


def _close(got: np.ndarray, expected: np.ndarray, dtype) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tolerance = TOLERANCES[dtype]
    finite = np.abs(expected[np.isfinite(expected)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * scale)


# (name, op, input shape, attributes, expected kind of kernel)
CASES = [
    ("max_k1", "MaxPool", (1, 2, 5, 6), {"kernel_shape": [1, 1]}, "window"),
    ("max_k2s2", "MaxPool", (2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}, "window"),
    (
        "max_squeezenet",
        "MaxPool",
        (1, 8, 111, 111),
        {"kernel_shape": [3, 3], "strides": [2, 2]},
        "window",
    ),
    (
        "max_resnet",
        "MaxPool",
        (1, 4, 112, 112),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        "window",
    ),
    (
        "max_k7s3_asymmetric",
        "MaxPool",
        (1, 3, 40, 37),
        {"kernel_shape": [7, 7], "strides": [3, 3], "pads": [3, 1, 2, 0]},
        "window",
    ),
    (
        "max_nonsquare",
        "MaxPool",
        (2, 2, 9, 20),
        {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 1]},
        "window",
    ),
    (
        "max_ceil",
        "MaxPool",
        (1, 2, 10, 11),
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        "window",
    ),
    (
        "max_dilated",
        "MaxPool",
        (1, 2, 12, 13),
        {"kernel_shape": [3, 2], "strides": [1, 2], "dilations": [2, 3], "pads": [2, 1, 2, 1]},
        "window",
    ),
    (
        "max_1d",
        "MaxPool",
        (2, 3, 50),
        {"kernel_shape": [3], "strides": [2], "pads": [1, 2]},
        "window",
    ),
    (
        "max_1x1_input",
        "MaxPool",
        (1, 3, 1, 1),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        "window",
    ),
    (
        "max_window_over_input",
        "MaxPool",
        (1, 2, 3, 3),
        {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]},
        "window",
    ),
    (
        "avg_k3s1_pad",
        "AveragePool",
        (1, 4, 14, 14),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        "window",
    ),
    (
        "avg_k3s1_pad_count",
        "AveragePool",
        (1, 4, 14, 14),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        "window",
    ),
    (
        "avg_k2s2",
        "AveragePool",
        (2, 3, 16, 16),
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        "window",
    ),
    (
        "avg_k7s3_asymmetric",
        "AveragePool",
        (1, 3, 30, 41),
        {"kernel_shape": [7, 7], "strides": [3, 3], "pads": [0, 3, 3, 1]},
        "window",
    ),
    (
        "avg_k7s3_asymmetric_count",
        "AveragePool",
        (1, 3, 30, 41),
        {"kernel_shape": [7, 7], "strides": [3, 3], "pads": [0, 3, 3, 1], "count_include_pad": 1},
        "window",
    ),
    (
        "avg_nonsquare_ceil",
        "AveragePool",
        (1, 2, 11, 17),
        {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1},
        "window",
    ),
    (
        "avg_1d",
        "AveragePool",
        (2, 3, 33),
        {"kernel_shape": [7], "strides": [3], "pads": [3, 0]},
        "window",
    ),
    ("avg_whole_plane", "AveragePool", (1, 16, 13, 13), {"kernel_shape": [13, 13]}, "window"),
    (
        "avg_window_over_input",
        "AveragePool",
        (1, 2, 1, 1),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        "window",
    ),
    ("global_avg", "GlobalAveragePool", (1, 100, 13, 13), {}, "global"),
    ("global_avg_resnet", "GlobalAveragePool", (2, 64, 7, 7), {}, "global"),
    ("global_max", "GlobalMaxPool", (1, 20, 9, 11), {}, "global"),
    ("global_avg_1d", "GlobalAveragePool", (2, 5, 30), {}, "global"),
]


def _dtype_cases():
    """Every case in f32; in f64 the global ones and those at least 20 wide (the others
    add nothing the f32 run does not check)."""
    for name, op, shape, attrs, kind in CASES:
        yield pytest.param(op, shape, attrs, kind, np.float32, id=f"{name}-f32")
        if op not in ("MaxPool", "AveragePool") or shape[-1] >= 20:
            yield pytest.param(op, shape, attrs, kind, np.float64, id=f"{name}-f64")


@pytest.mark.parametrize(("op", "shape", "attrs", "kind", "dtype"), list(_dtype_cases()))
def test_pooling_matches_reference(op, shape, attrs, kind, dtype):
    model = _model(op, shape, attrs, dtype)
    x = np.random.default_rng(7).standard_normal(shape).astype(dtype)
    got, kinds = _compile_and_run(model, x)
    # a large max pool runs as one pool per dim (passes/separable_windows.py)
    passes = window_passes(attrs.get("kernel_shape", [])) if op == "MaxPool" else 1
    assert kinds == [kind] * passes
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    _close(got, expected, dtype)


def _max_pool_numpy(x: np.ndarray, kernel, strides, pads) -> np.ndarray:
    """2-D max pool with -inf padding; np.max propagates NaN."""
    padded = np.pad(
        x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=-np.inf
    )
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=(2, 3))
    return windows[:, :, :: strides[0], :: strides[1]].max(axis=(-2, -1))


def test_max_pool_nan_and_infinities():
    """NaN anywhere in a window makes it NaN (as the element rules' llvm.maximum); -inf
    and +inf are ordinary values, a window of -inf is -inf."""
    shape, kernel, strides, pads = (1, 2, 21, 40), [3, 3], [2, 2], [1, 1, 1, 1]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    x[0, 0, 5, 7] = np.nan  # interior
    x[0, 0, 0, 0] = np.nan  # corner: an edge chunk
    x[0, 1, 20, 39] = np.nan
    x[0, 1, 10:13, 10:13] = -np.inf
    x[0, 1, 3, 30] = np.inf
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    got, kinds = _compile_and_run(_model("MaxPool", shape, attrs), x)
    assert kinds == ["window"]
    expected = _max_pool_numpy(x, kernel, strides, pads)
    assert np.isnan(expected).sum() == 4 + 1 + 1
    np.testing.assert_array_equal(got, expected)  # equal_nan: NaN where NaN


def test_fast_path_on_squeezenet_shapes():
    """SqueezeNet's three 3x3/2 max pools and its global average pool are pooling
    kernels, the average's division fused."""
    shapes = [(1, 64, 111, 111), (1, 128, 55, 55), (1, 256, 27, 27)]
    for shape in shapes:
        attrs = {"kernel_shape": [3, 3], "strides": [2, 2]}
        compiled = aotc.compile(_model("MaxPool", shape, attrs), name="pool")
        kinds = [pooling_kind(compiled.plan, i) for i in compiled.plan.schedule]
        assert kinds.count("window") == 1
    compiled = aotc.compile(_model("GlobalAveragePool", (1, 1000, 13, 13), {}), name="pool")
    fused = [i for i in compiled.plan.schedule if pooling_kind(compiled.plan, i) == "global"]
    assert len(fused) == 1 and fused[0].op is Op.FUSION


def test_pooling_does_not_depend_on_the_thread_count(compile_module):
    """Planes shared out over the threads: bitwise equal at 1, 2 and 3 threads, and
    equal to the evaluator (max) or close to it (sums)."""
    from aotc.ir.evaluate import evaluate

    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (2, 32, 56, 57)))
    mx = scalar_reducer(module, Op.MAXIMUM, DType.F32)
    add = scalar_reducer(module, Op.ADD, DType.F32)
    window = Window.make((1, 1, 3, 3), (1, 1, 2, 2), (0, 0, 1, 1), (0, 0, 1, 0))
    outputs = [
        b.reduce_window(x, b.scalar(-np.inf, DType.F32), window, mx),
        b.reduce_window(x, b.scalar(0.0, DType.F32), window, add),
        b.reduce(x, b.scalar(0.0, DType.F32), (2, 3), add),
    ]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module)
    assert [pooling_kind(compiled.plan, o) for o in outputs] == ["window", "window", "global"]
    xv = np.random.default_rng(11).standard_normal((2, 32, 56, 57)).astype(np.float32)
    compiled.ffi.cdef("void m_set_num_threads(int);")
    runs = {}
    for threads in (1, 3, 2):
        compiled.lib.m_set_num_threads(threads)
        runs[threads] = compiled.run(xv)
    compiled.lib.m_set_num_threads(1)  # joins the workers before the library is dropped
    for k in range(len(outputs)):
        np.testing.assert_array_equal(runs[1][k], runs[2][k])
        np.testing.assert_array_equal(runs[1][k], runs[3][k])
    expected = evaluate(module, [xv])
    np.testing.assert_array_equal(runs[1][0], expected[0])
    for k in (1, 2):
        np.testing.assert_allclose(runs[1][k], expected[k], rtol=1e-5, atol=1e-4)


def test_refused_shapes_stay_with_the_rules(compile_module):
    """Base dilation, and a sum whose nonzero init the padding would see, are left to the
    element rules (and still right)."""
    from aotc.ir.evaluate import evaluate

    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (1, 2, 9, 8)))
    add = scalar_reducer(module, Op.ADD, DType.F32)
    dilated = Window.make((1, 1, 2, 2), (1, 1, 1, 1), lhs_dilation=(1, 1, 2, 1))
    padded = Window.make((1, 1, 3, 3), (1, 1, 1, 1), (0, 0, 1, 1), (0, 0, 1, 1))
    outputs = [
        b.reduce_window(x, b.scalar(0.0, DType.F32), dilated, add),
        b.reduce_window(x, b.scalar(0.5, DType.F32), padded, add),
    ]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module)
    assert [pooling_kind(compiled.plan, o) for o in outputs] == [None, None]
    xv = np.random.default_rng(2).standard_normal((1, 2, 9, 8)).astype(np.float32)
    for got, expected in zip(compiled.run(xv), evaluate(module, [xv])):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["x86_64:x86-64-v2", "x86_64:x86-64-v3", "host"])
def test_vector_widths(compile_module, fuse, target):
    """4, 8 and the host's lanes per chunk (edge chunks, masked tails, strided columns,
    a transposed input read by gathers, a fused epilogue) against the evaluator."""
    from aotc.ir.evaluate import evaluate

    module = Module("m")
    b = ComputationBuilder(module, "main")
    f64 = DType.F64
    x = b.parameter(0, Shape(f64, (3, 2, 19, 23)))
    mx = scalar_reducer(module, Op.MAXIMUM, f64)
    add = scalar_reducer(module, Op.ADD, f64)
    pool3 = Window.make((1, 1, 3, 3), (1, 1, 2, 2), (0, 0, 1, 1), (0, 0, 1, 1))
    wide = Window.make((1, 1, 2, 5), (1, 1, 1, 3), (0, 0, 1, 2), (0, 0, 0, 1))

    def transposed_max(fb, p):  # columns a stride apart in memory: gathered
        window = Window.make((1, 1, 3, 2), (1, 1, 1, 2))
        return fb.reduce_window(
            fb.transpose(p[0], (0, 1, 3, 2)), fb.scalar(-np.inf, f64), window, mx
        )

    def average(fb, p):  # the division fused, applied per row
        total = fb.reduce_window(p[0], fb.scalar(0.0, f64), wide, add)
        return fb.binary(Op.DIVIDE, total, fb.broadcast(fb.scalar(10.0, f64), (), total.shape.dims))

    outputs = [
        b.reduce_window(x, b.scalar(-np.inf, f64), pool3, mx),
        b.reduce_window(x, b.scalar(0.0, f64), wide, add),
        fuse(b, [x], transposed_max, "transposed"),
        fuse(b, [x], average, "average"),
    ]
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module, target=target)
    assert [pooling_kind(compiled.plan, o) for o in outputs] == ["window"] * 4
    xv = np.random.default_rng(4).standard_normal((3, 2, 19, 23))
    for got, expected in zip(compiled.run(xv), evaluate(module, [xv])):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
