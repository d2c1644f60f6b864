"""Convolutions on image planes (plane_conv.py): the plane geometry, which shapes take
the path, and results against numpy in float64 (rtol 1e-4, atol 1e-4 of the largest
magnitude) on every target, with constant (pre-packed) and input kernels, fused bias and
relu, batches, strides, asymmetric padding and several input-channel blocks; grouped
convolutions likewise, and which of them take the path (TILE_RULES)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_gemm import ALL_TARGETS, _close, _conv_reference

from aotc.backends.cpu import parse_target
from aotc.backends.cpu.blocking import blocking
from aotc.backends.cpu.codegen import optimized_module
from aotc.backends.cpu.contraction import contraction_plans
from aotc.backends.cpu.gemm_config import gemm_config
from aotc.backends.cpu.plane_conv import (
    MAX_LANE_ROW_WASTE,
    MAX_WASTE,
    MIN_VALUE_PARTS,
    Planes,
    lane_row_width,
    segments,
    tail_width,
    tile_columns,
    tile_rule,
)
from aotc.buffers import assign_buffers
from aotc.driver import CompileOptions, compile_model
from aotc.frontends.onnx import import_onnx
from aotc.ir import DType
from aotc.passes.pipeline import make_pipeline


def _planes(x, w, stride, pad_low, pad_high) -> Planes:
    (n, c, h, wd), (o, _, kh, kw) = x, w
    out = [
        (size + lo + hi - k) // s + 1
        for size, lo, hi, k, s in zip((h, wd), pad_low, pad_high, (kh, kw), stride)
    ]
    return Planes(n, h, wd, c, *out, o, (kh, kw), stride, (1, 1), pad_low, pad_high)


@pytest.mark.parametrize(
    "x, w, stride, pad_low, pad_high",
    [
        ((1, 2, 9, 11), (1, 2, 3, 3), (2, 2), (1, 1), (1, 1)),
        ((1, 3, 20, 17), (1, 3, 7, 7), (2, 2), (3, 3), (2, 3)),
        ((1, 2, 10, 12), (1, 2, 3, 5), (1, 2), (0, 2), (1, 0)),
        ((1, 2, 13, 13), (1, 2, 1, 1), (3, 3), (0, 0), (0, 0)),
        ((1, 2, 6, 7), (1, 2, 3, 2), (1, 1), (0, 0), (0, 0)),
    ],
)
def test_every_tap_reads_its_padded_pixel(x, w, stride, pad_low, pad_high):
    """The planes built as the module docstring says, read at channel * channel_size +
    tap offset + grid position, hold the padded image's value under every tap of every
    output pixel."""
    p = _planes(x, w, stride, pad_low, pad_high)
    image = np.arange(np.prod(x), dtype=np.float64).reshape(x)[0] + 1
    padded = np.pad(image, [(0, 0), (pad_low[0], pad_high[0]), (pad_low[1], pad_high[1])])
    rows, cols = p.plane_shape
    sh, sw = stride
    planes = np.zeros((p.channels, len(p.phases), rows, cols))
    for k, (py, px) in enumerate(p.phases):
        phase = padded[:, py::sh, px::sw]
        planes[:, k, : phase.shape[1], : phase.shape[2]] = phase
    flat = planes.reshape(p.channels, -1)
    assert flat.shape[1] == p.channel_size
    offsets = p.tap_offsets()
    for c in range(p.channels):
        for y in range(p.out_height):
            for xo in range(p.out_width):
                q = y * cols + xo
                assert q < p.grid
                for t, (ky, kx) in enumerate(np.ndindex(*p.kernel)):
                    want = padded[c, sh * y + ky, sw * xo + kx]
                    assert flat[c, offsets[t] + q] == want, (c, y, xo, ky, kx)
    # the last pixel's reads stay inside its channel's planes
    assert p.grid - 1 + max(offsets) < p.channel_size


def test_wasteful_grids_stay_on_the_gemm():
    """A 7x7 image's grid of 49 pixels would take two 48-pixel tiles on AVX-512; 56x56
    wastes 1%."""
    config = gemm_config(parse_target("x86_64:skylake-avx512"), DType.F32)
    for x, w, takes in [
        ((1, 512, 7, 7), (2048, 512, 1, 1), False),
        ((1, 256, 56, 56), (64, 256, 1, 1), True),
    ]:
        p = _planes(x, w, (1, 1), (0, 0), (0, 0))
        nr = blocking(config, p.cout, p.grid, p.k).nr
        assert (-(-p.grid // nr) * nr <= MAX_WASTE * p.pixels) == takes


# (input, kernel, stride, pads [top, left, bottom, right]): in place (stride 1, no
# padding), padded, strided, a 7x7 stem-like window, channels past one block (3x3 x 130
# channels is more than an L1 A panel holds), output channels not a multiple of MR
CASES = [
    ((2, 40, 16, 24), (20, 40, 1, 1), (1, 1), (0, 0, 0, 0)),
    ((1, 130, 30, 30), (14, 130, 3, 3), (1, 1), (1, 1, 1, 1)),  # < 16 out: not Winograd
    ((2, 16, 33, 31), (24, 16, 3, 3), (2, 2), (1, 1, 1, 1)),
    ((1, 3, 64, 128), (16, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
    ((1, 12, 40, 70), (9, 12, 3, 5), (1, 2), (0, 2, 1, 0)),
    ((1, 24, 48, 48), (32, 24, 1, 1), (2, 2), (0, 0, 0, 0)),
]


def _conv_model(x, w, stride, pads, weights, bias, groups=1):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)]
    initializers = [numpy_helper.from_array(bias, "b")]
    if weights is None:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, w))
    else:
        initializers.append(numpy_helper.from_array(weights, "w"))
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"],
            ["y"],
            strides=list(stride),
            pads=list(pads),
            kernel_shape=list(w[2:]),
            group=groups,
        ),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "planes",
        inputs,
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("constant", [True, False], ids=["packed", "input"])
def test_plane_convolutions(target, constant):
    rng = np.random.default_rng(11)
    for x, w, stride, pads in CASES:
        xv = rng.standard_normal(x).astype(np.float32)
        wv = rng.standard_normal(w).astype(np.float32)
        bias = rng.standard_normal(w[0]).astype(np.float32)
        model = _conv_model(x, w, stride, pads, wv if constant else None, bias)
        compiled = compile_model(model, CompileOptions(target=target))
        assert set(compiled.kernel_forms().values()) == {"planes"}, (x, w)
        feeds = {"x": xv} if constant else {"x": xv, "w": wv}
        got = compiled.load()(**feeds)
        got = got[0] if isinstance(got, (list, tuple)) else got
        conv = _conv_reference(xv, wv, stride, pads[:2], pads[2:], (1, 1), 1)
        want = np.maximum(conv + bias[None, :, None, None], 0)
        _close(got, want, f"{target} {x} {w} {stride} {pads}")


def test_plane_convolutions_in_float64():
    """Doubles take the same path (8-lane vectors on AVX-512), to rounding (1e-12)."""
    rng = np.random.default_rng(12)
    for x, w, stride, pads in [CASES[2], CASES[3]]:
        inputs = [
            helper.make_tensor_value_info("x", TensorProto.DOUBLE, x),
            helper.make_tensor_value_info("w", TensorProto.DOUBLE, w),
        ]
        node = helper.make_node("Conv", ["x", "w"], ["y"], strides=list(stride), pads=list(pads))
        output = helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)
        graph = helper.make_graph([node], "planes64", inputs, [output])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
        compiled = compile_model(model)
        assert set(compiled.kernel_forms().values()) == {"planes"}, (x, w)
        xv, wv = rng.standard_normal(x), rng.standard_normal(w)
        got = compiled.load()(x=xv, w=wv)
        got = got[0] if isinstance(got, (list, tuple)) else got
        want = _conv_reference(xv, wv, stride, pads[:2], pads[2:], (1, 1), 1)
        _close(got, want, f"{x} {w}", rtol=1e-12)


def _silu_model(x, w, wv, bias):
    """Conv + bias, then x * sigmoid(x) (an epilogue of transcendental math)."""
    model = _conv_model(x, w, (1, 1), (0, 0, 0, 0), wv, bias)
    model.graph.node[1].op_type, model.graph.node[1].output[0] = "Sigmoid", "s"
    model.graph.node.append(helper.make_node("Mul", ["y", "s"], ["z"]))
    return model


@pytest.mark.parametrize("width", [64, 48, 56])
def test_epilogue_loops_vectorize(width):
    """The epilogue's output index splits a pixel into (row, column) and its addresses give
    the pixel back (elemental.linearize), so the loop over a run of pixels vectorizes:
    with a power-of-two width LLVM folded the recombination into masks and left a SiLU
    epilogue scalar (3.3x slower)."""
    x, w = (1, 64, 64, width), (256, 64, 1, 1)
    rng = np.random.default_rng(5)
    wv = rng.standard_normal(w).astype(np.float32)
    bias = rng.standard_normal(w[0]).astype(np.float32)
    model = _silu_model(x, w, wv, bias)
    target = parse_target("x86_64:x86-64-v4")
    module = import_onnx(model)
    make_pipeline(2, None, False).run(module)
    text = str(optimized_module(module, assign_buffers(module), "m", target)[0])
    # the sigmoid's exp scales by 2^n with one ldexp per vector, or per element when scalar
    assert "@llvm.ldexp.v16f32" in text, "the epilogue loop is scalar"
    compiled = compile_model(model)
    assert set(compiled.kernel_forms().values()) == {"planes"}
    xv = rng.standard_normal(x).astype(np.float32)
    got = compiled.load()(x=xv)
    got = got[0] if isinstance(got, (list, tuple)) else got
    conv = _conv_reference(xv, wv, (1, 1), (0, 0), (0, 0), (1, 1), 1) + bias[None, :, None, None]
    _close(got, conv / (1 + np.exp(-conv)), f"silu {x}")


# (input, kernel, stride, pads, groups): odd sizes, 8 channels per group at stride 1; 6
# in and 9 out per group (not a multiple of MR) at stride 2 over a batch; 16 per group
# with asymmetric padding; 32 out per group at stride 2; a pointwise kernel read in
# place, 2 out per group; 80 in per group (two input-channel blocks of an A panel)
GROUPED_CASES = [
    ((1, 32, 23, 21), (32, 8, 3, 3), (1, 1), (1, 1, 1, 1), 4),
    ((2, 24, 30, 27), (36, 6, 3, 3), (2, 2), (1, 1, 1, 1), 4),
    ((1, 48, 17, 19), (48, 16, 3, 3), (1, 1), (0, 1, 1, 0), 3),
    ((1, 64, 30, 30), (64, 32, 3, 3), (2, 2), (1, 1, 1, 1), 2),
    ((1, 16, 12, 12), (8, 4, 1, 1), (1, 1), (0, 0, 0, 0), 4),
    ((1, 160, 12, 14), (8, 80, 3, 3), (1, 1), (1, 1, 1, 1), 2),
]


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("constant", [True, False], ids=["packed", "input"])
def test_grouped_plane_convolutions(target, constant):
    """Each feature group a convolution of its channels' planes, bias and relu fused."""
    rng = np.random.default_rng(13)
    for x, w, stride, pads, groups in GROUPED_CASES:
        xv = rng.standard_normal(x).astype(np.float32)
        wv = rng.standard_normal(w).astype(np.float32)
        bias = rng.standard_normal(w[0]).astype(np.float32)
        model = _conv_model(x, w, stride, pads, wv if constant else None, bias, groups)
        compiled = compile_model(model, CompileOptions(target=target))
        assert set(compiled.kernel_forms().values()) == {"planes"}, (x, w, groups)
        feeds = {"x": xv} if constant else {"x": xv, "w": wv}
        got = compiled.load()(**feeds)
        got = got[0] if isinstance(got, (list, tuple)) else got
        conv = _conv_reference(xv, wv, stride, pads[:2], pads[2:], (1, 1), groups)
        want = np.maximum(conv + bias[None, :, None, None], 0)
        _close(got, want, f"{target} {x} {w} {stride} {pads} {groups}")


@pytest.mark.parametrize(
    "x, w, stride, groups, form",
    [
        # 16 out per group at 7x7: two masked 8 x 32 tiles per row panel (1.31 waste)
        ((1, 400, 7, 7), (400, 16, 3, 3), (1, 1), 25, "planes"),
        ((1, 400, 14, 14), (400, 16, 3, 3), (2, 2), 25, "planes"),
        # 32 per group at stride 1: im2col's GEMMs are as fast, waste or not
        ((1, 256, 28, 28), (256, 32, 3, 3), (1, 1), 8, "gemm"),
        ((1, 1024, 14, 14), (1024, 32, 3, 3), (2, 2), 32, "planes"),
        ((1, 64, 56, 56), (64, 1, 3, 3), (1, 1), 64, "depthwise"),
    ],
)
def test_which_grouped_convolutions_take_planes(x, w, stride, groups, form):
    """For speed: a lone convolution is the plan's peak, where the default plan takes
    the forms without temporaries."""
    model = _conv_model(x, w, stride, (1, 1, 1, 1), None, np.zeros(w[0], np.float32), groups)
    compiled = compile_model(
        model, CompileOptions(target="x86_64:skylake-avx512", plan_for="speed")
    )
    assert set(compiled.kernel_forms().values()) == {form}


def test_grouped_tiles_are_sized_by_whole_masked_tiles():
    """A 7x7 image's grid of 61 columns (rows 9 apart) in 8 x 48 tiles would be 96 columns
    for 49 pixels: grouped convolutions take 8 x 32 tiles (64); one group keeps the
    GEMM's tile, whose last columns the edge kernel would take."""
    config = gemm_config(parse_target("x86_64:skylake-avx512"), DType.F32)
    grouped = replace(_planes((1, 400, 7, 7), (400, 16, 3, 3), (1, 1), (1, 1), (1, 1)), groups=25)
    rule = tile_rule(grouped)
    blocks = blocking(config, grouped.group_cout, grouped.grid, grouped.group_k, rule.edges)
    assert (blocks.mr, blocks.nr) == (8, 32) and grouped.grid == 61
    single = _planes((1, 16, 7, 7), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1))
    assert tile_rule(single).max_waste == MAX_WASTE and tile_rule(single).edges


# Compact tiles (AVX-512): rows 6 wide (four loads per vector), 14x14 at stride 2 and
# at stride 1 (three), rows of 23 over a batch with 5x5 windows, in place (rows k - 1
# shorter than the image's, no padding)
COMPACT_CASES = [
    ((1, 32, 12, 6), (32, 16, 3, 3), (1, 1), (1, 1, 1, 1), 2),
    ((1, 64, 28, 28), (64, 16, 3, 3), (2, 2), (1, 1, 1, 1), 4),
    ((1, 32, 14, 14), (32, 16, 3, 3), (1, 1), (1, 1, 1, 1), 2),
    ((2, 24, 23, 23), (24, 8, 5, 5), (1, 1), (2, 2, 2, 2), 3),
    ((1, 16, 20, 40), (24, 16, 5, 5), (1, 1), (0, 0, 0, 0), 1),
]


@pytest.mark.parametrize("case", COMPACT_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_compact_tiles(case):
    """Tiles whose lanes are output pixels, each vector loaded row piece by row piece,
    the last tile narrower: the same results, and the kernels are the compact ones."""
    x, w, stride, pads, groups = case
    rng = np.random.default_rng(14)
    xv = rng.standard_normal(x).astype(np.float32)
    wv = rng.standard_normal(w).astype(np.float32)
    bias = rng.standard_normal(w[0]).astype(np.float32)
    model = _conv_model(x, w, stride, pads, wv, bias, groups)
    compiled = compile_model(
        model, CompileOptions(target="x86_64:skylake-avx512", plan_for="speed")
    )
    assert set(compiled.kernel_forms().values()) == {"planes"}
    # compact on copied planes (.fc.), or on the image, its padding masked (.fcp...)
    compact = rb"\.conv\.planes\.[^\x00]*\.fc(p\d+s\d+)?\."
    assert re.search(compact, compiled.object_bytes), "not compact"
    got = compiled.load()(x=xv)
    got = got[0] if isinstance(got, (list, tuple)) else got
    conv = _conv_reference(xv, wv, stride, pads[:2], pads[2:], (1, 1), groups)
    _close(got, np.maximum(conv + bias[None, :, None, None], 0), f"{case}")


def test_compact_tile_columns():
    """196 pixels in tiles of 32: six whole tiles and one of 4 (one vector); 49: one
    tile and one of 17 (two vectors: as many as a whole tile); rows of 14 pixels touch
    at most three rows per 16 lanes."""
    assert (tail_width(196, 32, 16), tile_columns(196, 32, 16)) == (4, 208)
    assert (tail_width(49, 32, 16), tile_columns(49, 32, 16)) == (17, 64)
    assert (tail_width(64, 32, 16), tile_columns(64, 32, 16)) == (32, 64)
    assert [segments(w, 16) for w in (5, 6, 7, 14, 16, 56)] == [4, 4, 4, 3, 2, 2]


def _residual_model(x, w, pads, weights, bias, groups, rng):
    """A ResNet block's end: mean over pixels of relu(conv(t) + b + e), e = conv0(x),
    t = relu(conv1(e)) (1x1 convolutions of x's channels, `conv` the case's, which keeps
    the image's size): the last kernel's output takes e's bytes (e dies there), so its
    convolution's values cannot go there."""
    channels = x[1]
    pointwise = [numpy_helper.from_array(_pointwise(rng, channels), f"w{k}") for k in range(2)]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["e"]),
        helper.make_node("Conv", ["e", "w1"], ["u"]),
        helper.make_node("Relu", ["u"], ["t"]),
        helper.make_node("Conv", ["t", "w", "b"], ["y"], pads=list(pads), group=groups),
        helper.make_node("Add", ["y", "e"], ["s"]),
        helper.make_node("Relu", ["s"], ["m"]),
        helper.make_node("GlobalAveragePool", ["m"], ["z"]),
    ]
    initializers = [
        *pointwise,
        numpy_helper.from_array(weights, "w"),
        numpy_helper.from_array(bias, "b"),
    ]
    return _graph_model(nodes, "residual", x, initializers)


def _graph_model(nodes, name: str, x, initializers):
    """The model of `nodes` from input x (shape `x`) to output z."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _pointwise(rng, channels: int) -> np.ndarray:
    return (rng.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels)).astype(np.float32)


# (input, kernel, pads, groups, target): pointwise in place, padded 3x3 on the grid and
# in compact tiles, a batch of two, two groups; stride 1, the image's size kept
UNIT_VALUE_CASES = [
    ((1, 32, 28, 28), (32, 32, 1, 1), (0, 0, 0, 0), 1, "host"),
    ((2, 12, 20, 20), (12, 12, 3, 3), (1, 1, 1, 1), 1, "x86_64:x86-64-v3"),  # < 16: not Winograd
    ((1, 32, 14, 14), (32, 16, 3, 3), (1, 1, 1, 1), 2, "x86_64:skylake-avx512"),
    ((2, 24, 30, 30), (24, 24, 1, 1), (0, 0, 0, 0), 1, "x86_64:x86-64-v2"),
]


@pytest.mark.parametrize("case", UNIT_VALUE_CASES, ids=lambda c: "x".join(map(str, c[0])) + c[-1])
def test_values_per_unit_where_the_output_takes_a_residual(case):
    """A residual computed in place in the output: each unit's values go to its thread's
    region (a few units' worth, not the output's size) and the epilogue reads them there;
    the numbers as the reference's."""
    x, w, pads, groups, target = case
    rng = np.random.default_rng(15)
    xv = rng.standard_normal(x).astype(np.float32)
    wv = (rng.standard_normal(w) / np.sqrt(np.prod(w[1:]))).astype(np.float32)
    bias = rng.standard_normal(w[0]).astype(np.float32)
    model = _residual_model(x, w, pads, wv, bias, groups, rng)
    compiled = compile_model(model, CompileOptions(target=target))
    cpu = parse_target(target)
    last = [
        plans[-1]
        for i in compiled.plan.schedule
        if (found := contraction_plans(cpu, compiled.plan, i)) is not None
        for plans in [found[1]]
    ]
    per_unit = [plan for plan in last if getattr(plan, "value_parts", 0)]
    assert len(per_unit) == 1, "the values did not go per unit"
    assert per_unit[0].values_bytes < xv.nbytes  # whole values: the output's size
    got = compiled.load()(x=xv)
    got = got[0] if isinstance(got, (list, tuple)) else got
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    e = _conv_reference(xv, init["w0"], (1, 1), (0, 0), (0, 0), (1, 1), 1)
    t = np.maximum(_conv_reference(e, init["w1"], (1, 1), (0, 0), (0, 0), (1, 1), 1), 0)
    conv = _conv_reference(t, wv, (1, 1), pads[:2], pads[2:], (1, 1), groups)
    want = np.maximum(conv + bias[None, :, None, None] + e, 0).mean(axis=(2, 3), keepdims=True)
    _close(got, want, f"{case}")


def _stride_two_at_the_peak(x, cout, kernel, rng):
    """mean over pixels of relu(conv(e)), e = conv0(x) (1x1, `cout` channels), conv the
    case's stride-2 window, padded by half of it: e and its output are the plan's peak,
    so the whole image's planes find no room."""
    size = kernel[0]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["e"]),
        helper.make_node("Conv", ["e", "w", "b"], ["y"], strides=[2, 2], pads=[size // 2] * 4),
        helper.make_node("Relu", ["y"], ["m"]),
        helper.make_node("GlobalAveragePool", ["m"], ["z"]),
    ]
    w0 = (rng.standard_normal((cout, x[1], 1, 1)) / np.sqrt(x[1])).astype(np.float32)
    w = (rng.standard_normal((cout, cout, *kernel)) / np.sqrt(cout * size * size)).astype(
        np.float32
    )
    bias = rng.standard_normal(cout).astype(np.float32)
    initializers = [numpy_helper.from_array(v, k) for k, v in (("w0", w0), ("w", w), ("b", bias))]
    return _graph_model(nodes, "bands", x, initializers)


# (input, output channels, window, target): bands of 7 output rows over 20 (the last one
# 6), on the grid and in compact tiles; a batch of two
BAND_CASES = [
    ((1, 16, 40, 40), 32, (3, 3), "x86_64:x86-64-v3"),
    ((1, 16, 40, 40), 32, (3, 3), "x86_64:skylake-avx512"),
    ((2, 16, 48, 48), 32, (3, 3), "host"),
]


@pytest.mark.parametrize("case", BAND_CASES, ids=lambda c: "x".join(map(str, c[0])) + c[-1])
def test_planes_in_bands_where_the_image_finds_no_room(case):
    """A strided convolution at the plan's peak, planned for speed (planned for memory,
    it reads the image in place: test_padding_masked_where_no_temporary_fits): its
    planes are copied a band of output rows at a time, the band's planes the only
    temporary; the numbers as the reference's."""
    x, cout, kernel, target = case
    rng = np.random.default_rng(16)
    xv = rng.standard_normal(x).astype(np.float32)
    model = _stride_two_at_the_peak(x, cout, kernel, rng)
    compiled = compile_model(model, CompileOptions(target=target, plan_for="speed"))
    cpu = parse_target(target)
    banded = [
        plans[-1]
        for i in compiled.plan.schedule
        if (found := contraction_plans(cpu, compiled.plan, i)) is not None
        for plans in [found[1]]
        if getattr(plans[-1], "band_rows", 0)
    ]
    assert len(banded) == 1, "the planes were not banded"
    plan = banded[0]
    assert plan.band_rows < plan.planes.out_height
    assert plan.workspace_bytes < replace(plan, band_rows=0).workspace_bytes
    got = compiled.load()(x=xv)
    got = got[0] if isinstance(got, (list, tuple)) else got
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    e = _conv_reference(xv, init["w0"], (1, 1), (0, 0), (0, 0), (1, 1), 1)
    pad = (kernel[0] // 2,) * 2
    conv = _conv_reference(e, init["w"], (2, 2), pad, pad, (1, 1), 1)
    want = np.maximum(conv + init["b"][None, :, None, None], 0).mean(axis=(2, 3), keepdims=True)
    _close(got, want, f"{case}")


def _masked_plans(compiled, target: str) -> list:
    """The plane plans of `compiled` that read their image in place, padding masked."""
    cpu = parse_target(target)
    return [
        plan
        for i in compiled.plan.schedule
        if (found := contraction_plans(cpu, compiled.plan, i)) is not None
        for plan in found[1]
        if getattr(plan, "masked_padding", False)
    ]


# (input, kernel, stride, pads [top, left, bottom, right], groups): small planes at stride
# 1, which take the masked padding over the copied planes (TAPS_OUTSIDE_PLANE_BYTES), or
# where their grid would waste, as the last form (a lone convolution's plan has no room
# for im2col's panels); asymmetric padding past the window's half, a 5x5 window, groups,
# a batch of two
MASKED_CASES = [
    ((1, 8, 17, 23), (32, 8, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    ((1, 16, 9, 9), (40, 16, 3, 3), (1, 1), (1, 0, 2, 1), 1),
    ((2, 12, 21, 19), (20, 12, 5, 5), (1, 1), (2, 1, 2, 3), 1),
    ((1, 24, 12, 12), (24, 12, 3, 3), (1, 1), (1, 1, 1, 1), 2),
]


@pytest.mark.parametrize("case", MASKED_CASES, ids=lambda c: "x".join(map(str, c[1])))
def test_padding_masked_on_small_planes(case):
    """On AVX-512, a padded stride-1 image of small planes is read where it is, the
    padding the lanes the masked loads leave zero: no temporary, and the numbers as the
    reference's (rtol 1e-4, atol 1e-4 of the largest magnitude)."""
    x, w, stride, pads, groups = case
    target = "x86_64:skylake-avx512"
    rng = np.random.default_rng(21)
    xv = rng.standard_normal(x).astype(np.float32)
    wv = rng.standard_normal(w).astype(np.float32)
    bias = rng.standard_normal(w[0]).astype(np.float32)
    model = _conv_model(x, w, stride, pads, wv, bias, groups)
    compiled = compile_model(model, CompileOptions(target=target, plan_for="memory"))
    if set(compiled.kernel_forms().values()) != {"planes"}:
        pytest.fail(f"{case}: {compiled.kernel_forms()}")
    assert len(_masked_plans(compiled, target)) == 1
    assert not [b for b in compiled.plan.buffers if b.name.endswith(".temporary")]
    got = compiled.load()(x=xv)
    got = got[0] if isinstance(got, (list, tuple)) else got
    conv = _conv_reference(xv, wv, stride, pads[:2], pads[2:], (1, 1), groups)
    _close(got, np.maximum(conv + bias[None, :, None, None], 0), f"{case}")


def _at_the_peak(x, cout, stride, rng):
    """mean over pixels of relu(conv(e)), e = conv0(x) (1x1, `cout` channels), conv a
    3x3 window at `stride`, padded by one, to 8 channels more (not e's shape: its
    output has bytes of its own): e and its output are the plan's peak."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["e"]),
        helper.make_node("Conv", ["e", "w", "b"], ["y"], strides=list(stride), pads=[1] * 4),
        helper.make_node("Relu", ["y"], ["m"]),
        helper.make_node("GlobalAveragePool", ["m"], ["z"]),
    ]
    w0 = (rng.standard_normal((cout, x[1], 1, 1)) / np.sqrt(x[1])).astype(np.float32)
    w = (rng.standard_normal((cout + 8, cout, 3, 3)) / np.sqrt(cout * 9)).astype(np.float32)
    bias = rng.standard_normal(cout + 8).astype(np.float32)
    initializers = [numpy_helper.from_array(v, k) for k, v in (("w0", w0), ("w", w), ("b", bias))]
    return _graph_model(nodes, "peak", x, initializers)


# (input, output channels, stride): stride 2, whose copied phase planes find no room,
# and stride 1 on planes of 48x48 (above TAPS_OUTSIDE_PLANE_BYTES: the channels outside
# the taps), where neither Winograd's transforms nor the planes fit; a batch of two
PEAK_CASES = [
    ((1, 16, 40, 40), 32, (2, 2)),
    ((2, 16, 33, 29), 24, (2, 2)),
    ((1, 16, 48, 48), 32, (1, 1)),
    ((1, 8, 70, 66), 16, (1, 2)),
]


@pytest.mark.parametrize("target", ["x86_64:skylake-avx512", "x86_64:x86-64-v3"])
@pytest.mark.parametrize("case", PEAK_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_padding_masked_where_no_temporary_fits(case, target):
    """A convolution at the plan's peak reads its image in place with its padding
    masked (AVX2's masked loads too): the scratch is the peak of the values alone; the
    numbers as the reference's."""
    x, cout, stride = case
    rng = np.random.default_rng(22)
    xv = rng.standard_normal(x).astype(np.float32)
    model = _at_the_peak(x, cout, stride, rng)
    compiled = compile_model(model, CompileOptions(target=target, plan_for="memory"))
    assert len(_masked_plans(compiled, target)) == 1, compiled.kernel_forms()
    assert compiled.plan.scratch_bytes == assign_buffers(compiled.module).arena_bytes
    got = compiled.load()(x=xv)
    got = got[0] if isinstance(got, (list, tuple)) else got
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    e = _conv_reference(xv, init["w0"], (1, 1), (0, 0), (0, 0), (1, 1), 1)
    conv = _conv_reference(e, init["w"], stride, (1, 1), (1, 1), (1, 1), 1)
    want = np.maximum(conv + init["b"][None, :, None, None], 0).mean(axis=(2, 3), keepdims=True)
    _close(got, want, f"{case}")


def _strided_after_pointwise(x, cout, kernel, stride, pads, rng):
    """y = conv(e) + b, e = conv0(x) (1x1, `cout` channels), conv the case's window: e is
    the arena's only value, so the strided convolution has no room for planes."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["e"]),
        helper.make_node("Conv", ["e", "w", "b"], ["z"], strides=list(stride), pads=list(pads)),
    ]
    w0 = (rng.standard_normal((cout, x[1], 1, 1)) / np.sqrt(x[1])).astype(np.float32)
    w = rng.standard_normal((cout, cout, *kernel)) / np.sqrt(cout * kernel[0] * kernel[1])
    bias = rng.standard_normal(cout).astype(np.float32)
    values = (("w0", w0), ("w", w.astype(np.float32)), ("b", bias))
    return _graph_model(nodes, "strided", x, [numpy_helper.from_array(v, k) for k, v in values])


# (input, output channels, window, stride, pads): output rows of 28 in two vectors of
# AVX-512 (four of AVX2), 15 with the bottom and right padding past the window's half,
# a 5x5 window over a batch of two, rows of 7 in compact tiles (lane rows would waste)
LANE_ROW_CASES = [
    ((1, 8, 56, 56), 24, (3, 3), (2, 2), (1, 1, 1, 1)),
    ((1, 8, 30, 29), 16, (3, 3), (2, 2), (1, 0, 2, 2)),
    ((2, 8, 27, 31), 16, (5, 5), (2, 2), (2, 2, 2, 2)),
    ((1, 8, 14, 14), 16, (3, 3), (2, 2), (1, 1, 1, 1)),
]


@pytest.mark.parametrize("target", ["x86_64:skylake-avx512", "x86_64:x86-64-v3"])
@pytest.mark.parametrize("case", LANE_ROW_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_stride_two_read_in_place_in_lane_rows(case, target):
    """A stride-2 convolution reading its image in place runs its tiles over output rows
    in whole vectors (one row piece per vector) where that wastes little, else in compact
    tiles; every output element as the reference's."""
    x, cout, kernel, stride, pads = case
    rng = np.random.default_rng(23)
    xv = rng.standard_normal(x).astype(np.float32)
    model = _strided_after_pointwise(x, cout, kernel, stride, pads, rng)
    compiled = compile_model(model, CompileOptions(target=target, plan_for="memory"))
    (plan,) = [p for p in _masked_plans(compiled, target) if p.planes.stride == stride]
    lanes = plan.config.lanes
    out_width = plan.planes.out_width
    width = lane_row_width(out_width, lanes)
    assert plan.compact == (width > MAX_LANE_ROW_WASTE * out_width), (plan.compact, width)
    got = compiled.load()(x=xv)
    got = got[0] if isinstance(got, (list, tuple)) else got
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    e = _conv_reference(xv, init["w0"], (1, 1), (0, 0), (0, 0), (1, 1), 1)
    conv = _conv_reference(e, init["w"], stride, pads[:2], pads[2:], (1, 1), 1)
    _close(got, conv + init["b"][None, :, None, None], f"{case} {target}")


def _transition_block(x, mid, cout, rng):
    """A ResNet bottleneck that halves the image: mean over pixels of relu(s + v), s a
    strided 1x1 shortcut of x, v = conv1x1(relu(conv3x3/2(relu(conv1x1(x))))); v dies
    in s's kernel, which computes its residual in place."""
    channels = x[1]
    shapes = {
        "a": (mid, channels, 1),
        "b": (mid, mid, 3),
        "c": (cout, mid, 1),
        "d": (cout, channels, 1),
    }
    weights = {
        k: (rng.standard_normal((o, i, n, n)) / np.sqrt(i * n * n)).astype(np.float32)
        for k, (o, i, n) in shapes.items()
    }
    nodes = [
        helper.make_node("Conv", ["x", "a"], ["t0"]),
        helper.make_node("Relu", ["t0"], ["t"]),
        helper.make_node("Conv", ["t", "b"], ["u0"], strides=[2, 2], pads=[1] * 4),
        helper.make_node("Relu", ["u0"], ["u"]),
        helper.make_node("Conv", ["u", "c"], ["v"]),
        helper.make_node("Conv", ["x", "d"], ["s"], strides=[2, 2]),
        helper.make_node("Add", ["s", "v"], ["y0"]),
        helper.make_node("Relu", ["y0"], ["y"]),
        helper.make_node("GlobalAveragePool", ["y"], ["z"]),
    ]
    initializers = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    return _graph_model(nodes, "transition", x, initializers), weights


def test_unit_values_in_one_tile_runs_leave_room_for_planes():
    """Planned for memory, the strided shortcut's room is less than two units' values of
    the usual run: its units shorten to one tile, so that the regions and a band of
    planes both fit (else the image is read in place, 2x the time); the numbers as the
    reference's."""
    x = (1, 64, 56, 56)
    rng = np.random.default_rng(24)
    xv = rng.standard_normal(x).astype(np.float32)
    model, w = _transition_block(x, 32, 128, rng)
    target = "x86_64:skylake-avx512"
    compiled = compile_model(model, CompileOptions(target=target, plan_for="memory"))
    cpu = parse_target(target)
    shortcut = [
        (i, found[1][-1])
        for i in compiled.plan.schedule
        if (found := contraction_plans(cpu, compiled.plan, i)) is not None
        and getattr(found[1][-1], "value_parts", 0)
    ]
    assert len(shortcut) == 1, "no kernel keeps its values per unit"
    instr, plan = shortcut[0]
    assert (plan.run_tiles, plan.masked_padding) == (1, False), (plan.run_tiles, plan.band_rows)
    room = compiled.plan.headroom(instr)
    assert plan.band_rows and compiled.plan.temporary(instr).size <= room
    assert replace(plan, run_tiles=0).unit_bytes * MIN_VALUE_PARTS > room
    got = compiled.load()(x=xv)
    got = got[0] if isinstance(got, (list, tuple)) else got
    none = ((0, 0), (0, 0))
    t = np.maximum(_conv_reference(xv, w["a"], (1, 1), *none, (1, 1), 1), 0)
    u = np.maximum(_conv_reference(t, w["b"], (2, 2), (1, 1), (1, 1), (1, 1), 1), 0)
    v = _conv_reference(u, w["c"], (1, 1), *none, (1, 1), 1)
    s = _conv_reference(xv, w["d"], (2, 2), *none, (1, 1), 1)
    _close(got, np.maximum(s + v, 0).mean(axis=(2, 3), keepdims=True), "transition block")
