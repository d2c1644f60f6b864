"""Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (backends/cpu/winograd.py).

The channel and size thresholds are patched down so that small convolutions take
the Winograd plan (checked through `contraction_kind`), with each transform in turn;
values are compared with the evaluator (rtol 1e-5 and atol 1e-5 of the largest
magnitude: the transforms reassociate the sums, measured error about 2e-7 of it for
F2, 2e-6 for F4).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aotc.backends.cpu import parse_target, winograd
from aotc.backends.cpu.contraction import contraction_kind
from aotc.ir import ComputationBuilder, ConvDims, DType, Module, Op, Shape, Window
from aotc.ir.evaluate import evaluate

F32 = DType.F32
HOST = parse_target("host")
# generic x86-64 (SSE), and AVX2 where this machine runs it (its 8 lanes once read
# past a masked load's mask: the (1, 4, 8, 9) case)
TARGETS = ["host", "x86_64:x86-64-v2"] + (
    ["x86_64:x86-64-v3"] if HOST.arch == "x86_64" and HOST.vector_bits >= 256 else []
)


@pytest.fixture(autouse=True, params=["F2", "F4"])
def transform(request, monkeypatch):
    """Small thresholds, and every convolution on one transform."""
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 1)
    monkeypatch.setattr(winograd, "MIN_OUTPUT_CHANNELS", 1)
    monkeypatch.setattr(winograd, "MIN_OUTPUT_SIZE", 1)
    monkeypatch.setattr(winograd, "MIN_F4_TILES", 1 if request.param == "F4" else 10**9)
    return getattr(winograd, request.param)


def _conv(b, x, w, low=(1, 1), high=(1, 1), stride=(1, 1), dilation=(1, 1), groups=1):
    window = Window.make(w.shape.dims[2:], stride, low, high, rhs_dilation=dilation)
    return b.convolution(x, w, window, ConvDims.nchw(2), groups)


def _module(x_dims, w_values, **conv):
    module = Module("wino")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.from_numpy(w_values.dtype), x_dims))
    b.build(_conv(b, x, b.constant(w_values), **conv), entry=True)
    return module


def _kinds(compiled) -> list[str]:
    plan = compiled.plan
    return [k for k in (contraction_kind(HOST, plan, i) for i in plan.schedule) if k]


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.max(np.abs(want)))


# x dims, Cout, pad low, pad high: even and odd output sizes, asymmetric and no padding,
# more outputs than inputs, two images, many tile columns (several vectors and panels),
# Cin past one K slice, a row of 5 tiles (one past an AVX2 vector's lower half)
CASES = [
    ((1, 4, 8, 8), 4, (1, 1), (1, 1)),
    ((1, 5, 9, 7), 6, (1, 1), (1, 1)),
    ((1, 4, 10, 11), 4, (0, 2), (1, 0)),
    ((1, 6, 7, 9), 4, (0, 0), (0, 0)),
    ((1, 4, 6, 6), 9, (2, 2), (2, 2)),
    ((2, 3, 40, 37), 5, (1, 1), (1, 1)),
    ((1, 16, 70, 70), 8, (1, 1), (1, 1)),
    ((1, 700, 6, 9), 13, (1, 1), (1, 1)),
    ((1, 4, 8, 9), 4, (1, 1), (1, 1)),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_dims, cout, low, high", CASES)
def test_same_values_as_the_convolution(compile_module, target, x_dims, cout, low, high):
    rng = np.random.default_rng(1)
    w = rng.uniform(-1, 1, (cout, x_dims[1], 3, 3)).astype(np.float32)
    module = _module(x_dims, w, low=low, high=high)
    compiled = compile_module(module, target=target)
    assert _kinds(compiled) == ["winograd"]
    x = rng.uniform(-2, 2, x_dims).astype(np.float32)
    (got,) = compiled.run(x)
    _close(got, np.asarray(evaluate(module, [x])))


def test_epilogue_and_threads(compile_module, fuse, same_across_threads):
    """Bias, residual and ReLU fused after a Winograd convolution big enough to share
    out its transforms and GEMMs: bitwise the same at 1, 2 and 3 threads."""
    rng = np.random.default_rng(2)
    x_dims, cout = (1, 32, 30, 30), 32
    w = rng.uniform(-1, 1, (cout, 32, 3, 3)).astype(np.float32)
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, x_dims))
    bias = b.parameter(1, Shape(F32, (cout,)))

    def body(fb, p):
        y = fb.binary(Op.ADD, _conv(fb, p[0], p[1]), fb.broadcast(p[2], (1,), x_dims))
        y = fb.binary(Op.ADD, y, p[0])
        return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), x_dims))

    b.build(b.tuple([fuse(b, [x, b.constant(w), bias], body)]), entry=True)
    compiled = compile_module(module)
    assert _kinds(compiled) == ["winograd"]
    args = [
        rng.uniform(-2, 2, x_dims).astype(np.float32),
        rng.standard_normal(cout).astype(np.float32),
    ]
    (got,) = same_across_threads(compiled, args)
    _close(got, np.asarray(evaluate(module, args)[0]))


# not Winograd: stride 2, a 5x5 window, two groups, dilation, f64, cropping
OTHERS = [
    ((4, 4, 3, 3), {"stride": (2, 2)}),
    ((4, 4, 5, 5), {}),
    ((4, 2, 3, 3), {"groups": 2}),
    ((4, 4, 3, 3), {"dilation": (2, 2)}),
    ((4, 4, 3, 3), {"low": (-1, 0)}),
]


@pytest.mark.parametrize("w_dims, conv", OTHERS)
def test_other_convolutions_take_other_plans(compile_module, w_dims, conv):
    w = np.random.default_rng(3).uniform(-1, 1, w_dims).astype(np.float32)
    assert _kinds(compile_module(_module((1, 4, 9, 9), w, **conv))) not in ([], ["winograd"])


def test_only_constant_f32_kernels(compile_module):
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (1, 4, 9, 9)))
    b.build(_conv(b, x, b.parameter(1, Shape(F32, (4, 4, 3, 3)))), entry=True)
    assert _kinds(compile_module(module)) == ["gemm"]
    w = np.random.default_rng(4).uniform(-1, 1, (4, 4, 3, 3))
    assert _kinds(compile_module(_module((1, 4, 9, 9), w))) == ["gemm"]  # f64


def test_thresholds_keep_small_convolutions_on_im2col(compile_module, monkeypatch):
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 16)
    monkeypatch.setattr(winograd, "MIN_OUTPUT_CHANNELS", 64)
    monkeypatch.setattr(winograd, "MIN_OUTPUT_SIZE", 8)
    w = np.zeros((64, 16, 3, 3), np.float32)
    assert _kinds(compile_module(_module((1, 16, 8, 8), w))) == ["winograd"]
    assert _kinds(compile_module(_module((1, 16, 7, 7), w))) == ["gemm"]
    assert _kinds(compile_module(_module((1, 8, 8, 8), w[:, :8]))) == ["gemm"]
    assert _kinds(compile_module(_module((1, 16, 8, 8), w[:63]))) == ["gemm"]


def test_the_transforms_compute_a_correlation(transform):
    """Y = A^T [(G g G^T) . (B^T d B)] A is the m x m valid correlation of an
    (m + 2)^2 tile."""
    rng = np.random.default_rng(5)
    m, alpha = transform.m, transform.alpha
    d, g = rng.standard_normal((alpha, alpha)), rng.standard_normal((1, 1, 3, 3))
    u = winograd.transformed_kernel(g, transform).reshape(alpha, alpha)
    b_t, a_t = np.array(transform.b_t), np.array(transform.a_t)
    y = a_t @ (u * (b_t @ d @ b_t.T)) @ a_t.T
    want = [[np.sum(d[i : i + 3, j : j + 3] * g[0, 0]) for j in range(m)] for i in range(m)]
    np.testing.assert_allclose(y, want, rtol=1e-12)


@pytest.mark.parametrize("level, forms", [(2, {"winograd"}), (1, {"planes"}), (0, {"planes"})])
def test_below_O2_convolutions_sum_directly(level, forms):
    """-O2 and up take Winograd where it pays; -O1 and -O0 do not (sums rounded as the
    direct ones are)."""
    from onnx import TensorProto, helper, numpy_helper

    from aotc.driver import CompileOptions, compile_model

    w = np.random.default_rng(6).uniform(-1, 1, (64, 16, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "c",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 24, 22])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 24, 22])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    # for speed: a lone convolution's input and output are the plan's peak, where the
    # default plan would take a form without temporaries
    compiled = compile_model(model, CompileOptions(opt_level=level, plan_for="speed"))
    assert set(compiled.kernel_forms().values()) - {""} == forms


def _winograd_plan(compiled):
    """The plan of the one Winograd convolution of `compiled`."""
    from aotc.backends.cpu.contraction import contraction_plans

    plan = compiled.plan
    (found,) = [
        p
        for i in plan.schedule
        for p in (contraction_plans(HOST, plan, i) or ((), ()))[1]
        if p.kind == "winograd"
    ]
    return found


@pytest.mark.parametrize(
    "x_dims, cout", [((2, 5, 19, 23), 6), ((1, 16, 33, 17), 8), ((1, 3, 8, 40), 4)]
)
def test_bands_of_one_tile_row(compile_module, monkeypatch, x_dims, cout):
    """No arena bytes free while the convolution runs (a lone convolution): the plan
    takes its shortest bands, here one tile row each (the last of several images and of
    a band count that pads), and the values are those of the convolution."""
    monkeypatch.setattr(winograd, "MIN_BAND_TILES", 1)
    rng = np.random.default_rng(7)
    w = rng.uniform(-1, 1, (cout, x_dims[1], 3, 3)).astype(np.float32)
    module = _module(x_dims, w)
    compiled = compile_module(module)
    planned = _winograd_plan(compiled)
    assert planned.band_rows == 1 < planned.geometry.tile_rows
    x = rng.uniform(-2, 2, x_dims).astype(np.float32)
    (got,) = compiled.run(x)
    _close(got, np.asarray(evaluate(module, [x])))


def test_the_band_is_the_tallest_that_fits(compile_module, monkeypatch):
    from aotc.backends.cpu.workspace import Budget

    monkeypatch.setattr(winograd, "MIN_BAND_TILES", 1)
    w = np.ones((8, 8, 3, 3), np.float32)
    whole = replace(_winograd_plan(compile_module(_module((1, 8, 40, 40), w))), band_rows=0)
    rows = whole.geometry.tile_rows
    assert whole.banded(None) is whole
    assert whole.banded(Budget(whole.workspace_bytes)).band_rows == rows
    smallest = whole.banded(Budget(0))
    assert smallest.workspace_bytes == min(
        replace(whole, band_rows=h).workspace_bytes for h in range(1, rows + 1)
    )
    for free in (smallest.workspace_bytes, whole.workspace_bytes // 2, whole.workspace_bytes - 1):
        chosen = whole.banded(Budget(free))
        assert chosen.workspace_bytes <= free
        # no taller balanced band fits
        assert all(
            replace(whole, band_rows=-(-rows // n)).workspace_bytes > free
            for n in range(1, rows + 1)
            if -(-rows // n) > chosen.band_rows
        )


def _chain(x_dims, w_values, fuse, residual=False, **conv):
    """relu(conv(x)) into a second convolution (with bias and ReLU, and `residual`: +
    its own image), whose image dies there."""
    module = Module("chain")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, x_dims))
    zero = b.broadcast(b.scalar(0.0, F32), (), x_dims)
    a = b.binary(Op.MAXIMUM, _conv(b, x, b.constant(w_values[0]), **conv), zero)
    bias = b.constant(np.linspace(-1, 1, x_dims[1], dtype=np.float32))

    def body(fb, p):
        y = fb.binary(Op.ADD, _conv(fb, p[0], p[1], **conv), fb.broadcast(p[2], (1,), x_dims))
        if residual:
            y = fb.binary(Op.ADD, y, p[0])
        return fb.binary(Op.MAXIMUM, y, fb.broadcast(fb.scalar(0.0, F32), (), x_dims))

    b.build(fuse(b, [a, b.constant(w_values[1]), bias], body), entry=True)
    return module


def _winograd_plan_of(compiled, instr):
    from aotc.backends.cpu.contraction import contraction_plans

    (planned,) = contraction_plans(HOST, compiled.plan, instr)[1]
    return planned


def _second_conv(compiled):
    (fusion,) = [i for i in compiled.plan.schedule if i.op is Op.FUSION]
    return fusion


# same-shape convolutions: symmetric and one-sided padding, two images, one and several
# bands (MIN_BAND_TILES 1, no room: bands of one tile row), threads
@pytest.mark.parametrize(
    "x_dims, low, high, tiles",
    [
        ((1, 8, 12, 12), (1, 1), (1, 1), 10**6),
        ((1, 8, 17, 13), (1, 1), (1, 1), 1),
        ((2, 6, 11, 9), (0, 2), (2, 0), 1),
        ((1, 5, 10, 16), (2, 1), (0, 1), 1),
    ],
)
def test_output_over_its_dying_image(compile_module, fuse, monkeypatch, x_dims, low, high, tiles):
    """The second convolution's image dies there: the plan gives its output the image's
    bytes, and the values are still the convolutions' (each band's rows written after
    the next band's input was read)."""
    monkeypatch.setattr(winograd, "MIN_BAND_TILES", tiles)
    rng = np.random.default_rng(11)
    c = x_dims[1]
    w = [rng.uniform(-1, 1, (c, c, 3, 3)).astype(np.float32) for _ in range(2)]
    module = _chain(x_dims, w, fuse, low=low, high=high)
    compiled = compile_module(module)
    plan, second = compiled.plan, _second_conv(compiled)
    assert plan.slice_of(second) == plan.slice_of(second.operands[0])
    assert _kinds(compiled) == ["winograd", "winograd"]
    if tiles == 1:
        planned = _winograd_plan_of(compiled, second)
        assert 0 < planned.band_rows < planned.geometry.tile_rows
    x = rng.uniform(-2, 2, x_dims).astype(np.float32)
    (got,) = compiled.run(x)
    _close(got, np.asarray(evaluate(module, [x])))


def test_an_image_read_by_the_epilogue_keeps_its_bytes(compile_module, fuse):
    """A residual of the image itself: the epilogue reads it after the output is
    written, so the output gets bytes of its own."""
    rng = np.random.default_rng(12)
    x_dims = (1, 8, 10, 10)
    w = [rng.uniform(-1, 1, (8, 8, 3, 3)).astype(np.float32) for _ in range(2)]
    module = _chain(x_dims, w, fuse, residual=True)
    compiled = compile_module(module)
    plan, second = compiled.plan, _second_conv(compiled)
    assert not plan.slice_of(second).overlaps(plan.slice_of(second.operands[0]))
    x = rng.uniform(-2, 2, x_dims).astype(np.float32)
    (got,) = compiled.run(x)
    _close(got, np.asarray(evaluate(module, [x])))


def test_a_streamed_kernel_takes_shorter_bands_only_to_fit(compile_module, monkeypatch):
    """U past its share of L3 (here any U): bands of Cin x Cout / (Cin + Cout) tiles or
    more where one fits, a shorter one (down to MIN_BAND_TILES) only where none does."""
    from aotc.backends.cpu.workspace import Budget

    monkeypatch.setattr(winograd, "MIN_BAND_TILES", 1)
    monkeypatch.setattr(winograd, "U_L3_SHARE", 10**12)
    w = np.ones((32, 32, 3, 3), np.float32)
    whole = replace(_winograd_plan(compile_module(_module((1, 32, 40, 20), w))), band_rows=0)
    g = whole.geometry
    preferred = -(-(g.cin * g.cout // (g.cin + g.cout)) // g.tile_columns)
    assert 1 < preferred < g.tile_rows
    tall = sorted({-(-g.tile_rows // n) for n in range(1, g.tile_rows + 1)})  # balanced
    at = {h: replace(whole, band_rows=h).workspace_bytes for h in tall}
    lowest_tall = min(h for h in tall if h >= preferred)
    assert whole.banded(Budget(at[lowest_tall])).band_rows == lowest_tall
    short = max(h for h in tall if h < preferred)
    assert whole.banded(Budget(at[lowest_tall] - 1)).band_rows == short
    assert whole.banded(Budget(0)).band_rows == 1
