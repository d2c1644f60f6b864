"""ONNX test cases for data movement, constants, extra ops and small multi-op models."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx_case_kit import CaseList, Const, In, f32, graph_case, i64, ints, op_case


def _shapes(cases: CaseList) -> None:
    x = f32(2, 3, 4)
    cases.add(op_case("reshape_zero_minus_one", "Reshape", [In(x), Const(i64(0, -1))]))
    cases.add(op_case("reshape_4d", "Reshape", [In(x), Const(i64(2, 2, 3, 2))]))
    cases.add(
        op_case(
            "reshape_allowzero", "Reshape", [In(x), Const(i64(4, 6))], {"allowzero": 1}, opset=14
        )
    )
    cases.add(op_case("reshape_opset5", "Reshape", [In(x), Const(i64(-1))], opset=5))
    for axis in (0, 2, -1):
        cases.add(op_case(f"flatten_axis{axis}", "Flatten", [In(x)], {"axis": axis}))
    cases.add(op_case("flatten_default", "Flatten", [In(f32(2, 3, 2, 2))]))
    cases.add(op_case("transpose_default", "Transpose", [In(x)]))
    cases.add(op_case("transpose_perm", "Transpose", [In(f32(2, 3, 4, 5))], {"perm": [0, 2, 3, 1]}))
    cases.add(
        op_case(
            "concat_last", "Concat", [In(f32(2, 3)), In(f32(2, 1)), Const(f32(2, 2))], {"axis": -1}
        )
    )
    cases.add(op_case("concat_axis0", "Concat", [In(f32(1, 3)), In(f32(2, 3))], {"axis": 0}))
    cases.add(
        op_case("squeeze_opset11", "Squeeze", [In(f32(2, 1, 3, 1))], {"axes": [1, -1]}, opset=11)
    )
    cases.add(op_case("squeeze_axes_input", "Squeeze", [In(f32(2, 1, 3, 1)), Const(i64(3))]))
    cases.add(op_case("squeeze_all", "Squeeze", [In(f32(1, 2, 1, 3))]))
    cases.add(op_case("unsqueeze_opset11", "Unsqueeze", [In(x)], {"axes": [0, 4]}, opset=11))
    cases.add(op_case("unsqueeze_axes_input", "Unsqueeze", [In(x), Const(i64(-1, 1))]))
    y = f32(5, 6, 7)
    big = np.iinfo(np.int64).max
    slices = {
        "basic": (i64(1, 0), i64(4, 3), i64(0, 2), None),
        "negative_indices": (i64(-4, -3), i64(-1, big), i64(0, 1), None),
        "steps": (i64(0, 1), i64(big, 6), i64(1, 2), i64(2, 3)),
        "negative_step": (i64(-1), i64(-big), i64(1), i64(-1)),
        "negative_step2_clamped": (i64(100, 5), i64(-100, 0), i64(0, 2), i64(-2, -3)),
        "no_axes": (i64(1, 2, 3), i64(3, 5, 6), None, None),
        "empty": (i64(3), i64(1), i64(0), None),
    }
    for name, (starts, ends, axes, steps) in slices.items():
        args = [In(y), Const(starts), Const(ends)]
        args += (
            [None if axes is None else Const(axes)] if steps is not None or axes is not None else []
        )
        if steps is not None:
            args.append(Const(steps))
        cases.add(op_case(f"slice_{name}", "Slice", args))
    cases.add(
        op_case(
            "slice_opset9",
            "Slice",
            [In(y)],
            {"starts": [1, -3], "ends": [3, 100], "axes": [0, 2]},
            opset=9,
        )
    )
    table = f32(5, 4)
    cases.add(op_case("gather_negative_const", "Gather", [In(table), Const(i64(0, -1, 3, -5))]))
    cases.add(
        op_case(
            "gather_axis1_2d_indices",
            "Gather",
            [In(f32(2, 5, 3)), Const(i64(4, 0, 2, 1).reshape(2, 2))],
            {"axis": 1},
        )
    )
    cases.add(
        op_case(
            "gather_runtime_indices",
            "Gather",
            [In(table), In(np.array([[1, -2], [0, -4]], np.int64))],
        )
    )
    cases.add(
        op_case("gather_scalar_index", "Gather", [In(f32(3, 4)), Const(np.int64(-1))], {"axis": -1})
    )
    cases.add(
        op_case("gather_int32_indices", "Gather", [In(table), In(np.array([3, -1], np.int32))])
    )
    z = f32(2, 3, 4)
    cases.add(
        op_case(
            "pad_constant", "Pad", [In(z), Const(i64(0, 1, 2, 1, 0, 3)), Const(np.float32(1.5))]
        )
    )
    cases.add(op_case("pad_default_value", "Pad", [In(z), Const(i64(1, 0, 0, 0, 2, 1))]))
    cases.add(
        op_case("pad_reflect", "Pad", [In(z), Const(i64(0, 2, 1, 0, 1, 3))], {"mode": "reflect"})
    )
    cases.add(op_case("pad_edge", "Pad", [In(z), Const(i64(1, 2, 0, 0, 1, 3))], {"mode": "edge"}))
    cases.add(
        op_case(
            "pad_wrap", "Pad", [In(z), Const(i64(0, 1, 3, 0, 2, 1))], {"mode": "wrap"}, opset=19
        )
    )
    cases.add(op_case("pad_axes", "Pad", [In(z), Const(i64(1, 2)), None, Const(i64(-1))], opset=18))
    cases.add(
        op_case("pad_opset7", "Pad", [In(z)], {"pads": [0, 1, 0, 0, 1, 2], "value": -1.0}, opset=7)
    )
    cases.add(
        op_case(
            "pad_opset7_reflect",
            "Pad",
            [In(z)],
            {"pads": [0, 1, 0, 0, 1, 2], "mode": "reflect"},
            opset=7,
        )
    )
    cases.add(
        op_case("pad_int", "Pad", [In(ints(2, 3)), Const(i64(1, 1, 1, 1)), Const(np.int64(7))])
    )
    cases.add(op_case("expand", "Expand", [In(f32(3, 1)), Const(i64(2, 3, 4))]))
    cases.add(op_case("expand_smaller_shape", "Expand", [In(f32(2, 1, 4)), Const(i64(3, 1))]))
    cases.add(op_case("tile", "Tile", [In(f32(2, 3)), Const(i64(2, 3))]))
    cases.add(op_case("tile_ones", "Tile", [In(f32(2, 3)), Const(i64(1, 1))]))
    cases.add(
        op_case(
            "split_sizes_input",
            "Split",
            [In(f32(2, 7)), Const(i64(2, 4, 1))],
            {"axis": 1},
            outputs=3,
        )
    )
    cases.add(op_case("split_equal_opset11", "Split", [In(f32(6, 2))], opset=11, outputs=3))
    cases.add(
        op_case(
            "split_attr_opset11",
            "Split",
            [In(f32(2, 5))],
            {"axis": -1, "split": [3, 2]},
            opset=11,
            outputs=2,
        )
    )
    cases.add(
        op_case(
            "split_num_outputs_uneven",
            "Split",
            [In(f32(7, 2))],
            {"num_outputs": 3},
            opset=18,
            outputs=3,
        )
    )


def _constants(cases: CaseList) -> None:
    tensor = numpy_helper.from_array(f32(2, 3), "t")
    cases.add(
        graph_case(
            "constant_tensor",
            [
                helper.make_node("Constant", [], ["c"], value=tensor),
                helper.make_node("Add", ["x", "c"], ["y"]),
            ],
            {"x": f32(2, 3)},
        )
    )
    cases.add(
        graph_case(
            "constant_value_floats",
            [
                helper.make_node("Constant", [], ["c"], value_floats=[1.0, -2.0, 3.5]),
                helper.make_node("Mul", ["x", "c"], ["y"]),
            ],
            {"x": f32(2, 3)},
        )
    )
    cases.add(
        graph_case(
            "constant_value_int",
            [
                helper.make_node("Constant", [], ["c"], value_int=3),
                helper.make_node("Add", ["x", "c"], ["y"]),
            ],
            {"x": ints(2, 3)},
        )
    )
    value = numpy_helper.from_array(np.array([7], np.int64), "v")
    cases.add(
        graph_case(
            "shape_constantofshape",
            [
                helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("ConstantOfShape", ["s"], ["y"], value=value),
            ],
            {"x": f32(2, 3)},
        )
    )
    cases.add(
        graph_case(
            "constantofshape_default",
            [
                helper.make_node("ConstantOfShape", ["s"], ["z"]),
                helper.make_node("Add", ["x", "z"], ["y"]),
            ],
            {"x": f32(2, 3)},
            {"s": i64(2, 3)},
        )
    )
    cases.add(
        graph_case(
            "shape_start_end",
            [
                helper.make_node("Shape", ["x"], ["s"], start=1, end=-1),
                helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT),
            ],
            {"x": f32(2, 3, 4, 5)},
            opset=15,
        )
    )
    cases.add(
        graph_case(
            "size",
            [
                helper.make_node("Size", ["x"], ["n"]),
                helper.make_node("Cast", ["n"], ["k"], to=TensorProto.FLOAT),
                helper.make_node("Mul", ["x", "k"], ["y"]),
            ],
            {"x": f32(2, 3)},
        )
    )
    cases.add(
        op_case(
            "range_float",
            "Range",
            [Const(np.float32(1.0)), Const(np.float32(4.0)), Const(np.float32(0.5))],
        )
    )
    cases.add(
        op_case(
            "range_int_negative",
            "Range",
            [Const(np.int64(10)), Const(np.int64(1)), Const(np.int64(-3))],
        )
    )


def _models(cases: CaseList) -> None:
    """Small multi-op graphs in the shape exporters write them."""
    # PyTorch's x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    consts = {"zero": np.int64(0), "axes0": i64(0), "minus_one": i64(-1)}
    cases.add(graph_case("model_shape_chain_reshape", nodes, {"x": f32(2, 3, 4)}, consts))
    # a tiny CNN: Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    consts = {
        "w": f32(4, 1, 3, 3, low=-1, high=1),
        "b": f32(4),
        "fc_w": f32(10, 64, low=-0.3, high=0.3),
        "fc_b": f32(10),
    }
    cases.add(
        graph_case("model_tiny_cnn", nodes, {"x": f32(2, 1, 8, 8)}, consts, rtol=1e-4, atol=1e-5)
    )
    # two outputs, one of them an intermediate value used again
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["h1"]),
        helper.make_node("Tanh", ["h1"], ["y"]),
        helper.make_node("ReduceMean", ["h1"], ["m"], axes=[-1]),
    ]
    cases.add(
        graph_case(
            "model_two_outputs",
            nodes,
            {"x": f32(3, 4)},
            {"w": f32(4, 5), "b": f32(5)},
            outputs=("y", "m"),
            atol=1e-5,
        )
    )
    # the same graph input feeding two nodes, and an output that is the input itself
    nodes = [helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("Identity", ["x"], ["z"])]
    cases.add(graph_case("model_input_passthrough", nodes, {"x": f32(2, 2)}, outputs=("y", "z")))


def _extras(cases: CaseList) -> None:
    """Ops beyond the required set that exported models use often."""
    x = f32(2, 4, 5)
    cases.add(op_case("trilu_upper", "Trilu", [In(x)]))
    cases.add(op_case("trilu_lower_k", "Trilu", [In(x), Const(np.int64(-1))], {"upper": 0}))
    cases.add(op_case("trilu_upper_k2", "Trilu", [In(f32(5, 3)), Const(np.int64(2))]))
    cases.add(op_case("cumsum", "CumSum", [In(x), Const(np.int64(1))], atol=1e-5))
    cases.add(
        op_case(
            "cumsum_int_reverse_exclusive",
            "CumSum",
            [In(ints(3, 4)), Const(np.int32(-1))],
            {"reverse": 1, "exclusive": 1},
        )
    )
    cases.add(
        op_case(
            "cumsum_exclusive", "CumSum", [In(x), Const(np.int64(2))], {"exclusive": 1}, atol=1e-5
        )
    )
    image = f32(1, 2, 3, 4)
    cases.add(
        op_case(
            "resize_nearest_scales",
            "Resize",
            [In(image), None, Const(np.array([1, 1, 2, 3], np.float32))],
        )
    )
    cases.add(
        op_case(
            "resize_nearest_sizes_asymmetric",
            "Resize",
            [In(image), None, None, Const(i64(1, 2, 9, 8))],
            {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        )
    )
    cases.add(
        op_case(
            "resize_axes",
            "Resize",
            [In(image), None, Const(np.array([2, 2], np.float32))],
            {"axes": [2, 3]},
            opset=18,
        )
    )
    cases.add(
        op_case(
            "resize_opset11",
            "Resize",
            [In(image), Const(np.zeros(0, np.float32)), Const(np.array([1, 1, 2, 2], np.float32))],
            opset=11,
        )
    )
    cases.add(
        op_case(
            "upsample_opset9",
            "Upsample",
            [In(image), Const(np.array([1, 1, 2, 2], np.float32))],
            opset=9,
        )
    )


TENSOR_FAMILIES = (_shapes, _constants, _extras, _models)
