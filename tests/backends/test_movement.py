"""Data movement: broadcast, reshape, transpose, slice, pad, concatenate, reverse, iota."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.backends.cpu.loop_dims import loop_dims
from aotc.ir import ComputationBuilder, DType, Module, Op, Shape


def test_movement_ops(check, fuse, rng):
    module = Module("mv")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (2, 3, 4)))
    y = b.parameter(1, Shape(DType.F32, (3,)))
    nine = b.scalar(9.5, DType.F32)
    outputs = [
        b.broadcast(y, [1], [2, 3, 4]),
        b.transpose(x, [2, 0, 1]),
        b.slice(x, [0, 1, 1], [2, 3, 4], [1, 1, 2]),
        b.pad(x, nine, [1, -1, 0], [0, 2, 1], [1, 0, 2]),
        b.pad(x, nine, [-1, 0, -2], [0, -1, 0]),
        b.reverse(x, [0, 2]),
        b.concatenate([x, b.slice(x, [0, 0, 0], [2, 1, 4]), x], 1),
        b.iota(Shape(DType.S32, (2, 3, 4)), 2),
        b.iota(Shape(DType.F16, (5, 3)), 0),
        fuse(b, [x], lambda f, p: f.unary(Op.NEGATE, f.transpose(f.reshape(p[0], [6, 4]), [1, 0]))),
        fuse(
            b,
            [x, y],
            lambda f, p: f.binary(
                Op.MULTIPLY,
                f.reshape(p[0], [4, 6]),
                f.reshape(f.broadcast(p[1], [0], [3, 8]), [4, 6]),
            ),
        ),
    ]
    b.build(b.tuple(outputs), entry=True)
    xv = rng.standard_normal((2, 3, 4)).astype(np.float32)
    yv = rng.standard_normal(3).astype(np.float32)
    compiled = check(module, [xv, yv], rtol=0, atol=0)
    # numpy spot checks, independent of the evaluator
    got = compiled.run(xv, yv)
    np.testing.assert_array_equal(got[1], xv.transpose(2, 0, 1))
    np.testing.assert_array_equal(got[2], xv[:, 1:3, 1:4:2])
    np.testing.assert_array_equal(got[5], xv[::-1, :, ::-1])
    np.testing.assert_array_equal(got[6], np.concatenate([xv, xv[:, :1], xv], axis=1))
    np.testing.assert_array_equal(got[4], np.pad(xv, [(0, 0), (0, 0), (0, 0)])[1:, :2, 2:])
    # dim 0: low 1, interior 1; dim 1: crop 1, high 2; dim 2: interior 2, high 1
    interior = np.full((4, 4, 11), 9.5, np.float32)
    interior[1::2, 0:2, 0:10:3] = xv[:, 1:, :]
    np.testing.assert_array_equal(got[3], interior)
    np.testing.assert_array_equal(got[9], -xv.reshape(6, 4).T)


def test_pad_of_empty_operand(check):
    module = Module("empty")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.S32, (0, 3)))
    b.build(b.tuple([b.pad(x, b.scalar(7, DType.S32), [1, 0], [1, 1])]), entry=True)
    check(module, [np.zeros((0, 3), np.int32)])


@pytest.mark.parametrize(
    "dtype",
    [DType.PRED, DType.S8, DType.U16, DType.S64, DType.F16, DType.BF16, DType.F64],
    ids=lambda d: d.text,
)
def test_movement_every_storage_type(check, fuse, rand, dtype):
    """Loads and stores of every in-memory representation (i8 pred, half, bf16 bits...)."""
    module = Module("mvd")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(dtype, (3, 5)))
    fill = b.scalar(1, dtype)
    outputs = [
        b.transpose(x, [1, 0]),
        b.pad(x, fill, [1, 0], [0, 2], [0, 1]),
        b.concatenate([x, b.reverse(x, [1])], 0),
        fuse(b, [x], lambda f, p: f.add(Op.BITCAST, [p[0]], Shape(dtype, (5, 3)))),
        b.broadcast(b.slice(x, [1, 0], [2, 5]), [0, 1], [1, 5]),
    ]
    b.build(b.tuple(outputs), entry=True)
    check(module, [rand(Shape(dtype, (3, 5)))], rtol=0, atol=0)


@pytest.mark.parametrize("phases", [(2, 2), (3, 1), (1, 4)], ids=str)
def test_interleaving_fusions_loop_over_the_split_dims(
    check, fuse, rng, same_across_threads, phases
):
    """Stride phases interleaved into an image (passes/conv_phases.py; depth-to-space
    too): reshape, transpose, reshape, and a per-channel add at the root.  The loops run
    over the dims the root's reshape splits (cpu/loop_dims.py); a crop after the
    reshape leaves them whole.  Big enough to be shared out to threads."""
    p1, p2 = phases
    channels, height, width = 3, 40, 70
    module = Module("interleave")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (1, p1 * p2 * channels, height, width)))
    bias = b.parameter(1, Shape(DType.F32, (channels,)))
    image = [1, channels, height * p1, width * p2]

    def interleaved(f, p):
        planes = f.reshape(p[0], [1, p1, p2, channels, height, width])
        moved = f.transpose(planes, [0, 3, 4, 1, 5, 2])
        return f.reshape(moved, image)

    def biased(f, p):
        return f.binary(Op.ADD, interleaved(f, p), f.broadcast(p[1], [1], image))

    def cropped(f, p):
        crop = f.slice(interleaved(f, p), [0, 0, 0, 0], [1, channels, height * p1 - 1, width * p2])
        return f.binary(Op.ADD, crop, f.broadcast(p[1], [1], crop.array_shape.dims))

    outputs = [fuse(b, [x, bias], body) for body in (biased, interleaved, cropped)]
    b.build(b.tuple(outputs), entry=True)
    split = [(1,), (channels,), (height, p1) if p1 > 1 else (height,)]
    split.append((width, p2) if p2 > 1 else (width,))
    assert loop_dims(outputs[0]) == split
    assert loop_dims(outputs[1]) == split
    assert loop_dims(outputs[2])[2] == (height * p1 - 1,)
    xv = rng.standard_normal(x.array_shape.dims).astype(np.float32)
    bv = rng.standard_normal(channels).astype(np.float32)
    got = same_across_threads(check(module, [xv, bv], rtol=0, atol=0), [xv, bv])
    planes = xv.reshape(p1, p2, channels, height, width).transpose(2, 3, 0, 4, 1)
    want = planes.reshape(image) + bv[None, :, None, None]
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("opt_level", [0, 2])
def test_concatenate_of_many_operands(opt_level):
    """100 operands (past concatenate.MAX_SEARCHED_OPERANDS) from every kind of buffer:
    caller inputs, weights, intermediates in the arena, a caller output; along a middle
    axis (2 rows of pieces).  Against numpy."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from aotc.backends.cpu.concatenate import MAX_SEARCHED_OPERANDS
    from aotc.driver import CompileOptions, compile_model

    rng = np.random.default_rng(3)
    c = rng.standard_normal((2, 1, 4)).astype(np.float32)
    pieces = ["a", "c", "r", "b", "n"] * 20
    assert len(pieces) > MAX_SEARCHED_OPERANDS
    value = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
    nodes = [
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Neg", ["b"], ["n"]),
        helper.make_node("Concat", pieces, ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [value("a", [2, 3, 4]), value("b", [2, 2, 4])],
        [value("y", [2, 220, 4]), value("r", [2, 3, 4])],
        [numpy_helper.from_array(c, "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 2, 4)).astype(np.float32)
    y, r = compile_model(model, CompileOptions(opt_level=opt_level)).load()(a=a, b=b)
    parts = {"a": a, "c": c, "r": np.maximum(a, 0), "b": b, "n": -b}
    np.testing.assert_array_equal(y, np.concatenate([parts[p] for p in pieces], axis=1))
    np.testing.assert_array_equal(r, parts["r"])
