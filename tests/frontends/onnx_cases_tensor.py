"""ONNX test cases for data movement, constants, extra ops and small multi-op models."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_case_kit import (
    CaseList,
    Const,
    In,
    OnnxCase,
    f32,
    graph_case,
    i64,
    ints,
    op_case,
    ort_reference,
)


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


def _body(name, nodes, inputs, outputs):
    """A subgraph (If branch, Loop or Scan body) with untyped-shape float/bool/int values."""
    kinds = {"b": TensorProto.BOOL, "i": TensorProto.INT64}
    values = [
        [helper.make_tensor_value_info(n, kinds.get(n[0], TensorProto.FLOAT), None) for n in ns]
        for ns in (inputs, outputs)
    ]
    return helper.make_graph(nodes, name, *values)


def _control(cases: CaseList) -> None:
    """Sequences and control flow beyond the ONNX node suite: erase/at/insert/concat,
    If and Loop on runtime conditions (select, masking), Scan along other axes, reversed."""
    nodes = [
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1),
        helper.make_node("SequenceErase", ["s", "minus_two"], ["s2"]),
        helper.make_node("SequenceAt", ["s", "minus_two"], ["a"]),
        helper.make_node("SequenceInsert", ["s2", "a", "zero"], ["s3"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["y"], axis=1),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
    ]
    consts = {"split": i64(1, 2, 1), "minus_two": np.int64(-2), "zero": np.int64(0)}
    inputs = {"x": f32(2, 4, 3)}
    cases.add(graph_case("sequence_erase_at_insert", nodes, inputs, consts, outputs=("y", "n")))
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=-1, new_axis=1),
        helper.make_node("SplitToSequence", ["d", "two"], ["chunks"]),
        helper.make_node("SequenceAt", ["chunks", "last"], ["z"]),
    ]
    inputs = {"a": f32(2, 3), "b": f32(2, 3), "c": f32(2, 3), "d": f32(5, 2)}
    consts = {"two": np.int64(2), "last": np.int64(-1)}
    cases.add(graph_case("sequence_stack_and_chunks", nodes, inputs, consts, outputs=("y", "z")))
    then_branch = _body("then", [helper.make_node("Relu", ["x"], ["t"])], [], ["t"])
    else_branch = _body("else", [helper.make_node("Neg", ["x"], ["e"])], [], ["e"])
    nodes = [helper.make_node("If", ["b"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    for value in (True, False):
        inputs = {"b": np.array(value), "x": f32(3, 4)}
        cases.add(graph_case(f"if_runtime_condition_{value}", nodes, inputs))
    # the body's condition depends on the input's values: iterations are masked with select
    body = _body(
        "body",
        [
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["b_out"]),
        ],
        ["i", "b_in", "acc_in"],
        ["b_out", "acc_out"],
    )
    nodes = [helper.make_node("Loop", ["trips", "go", "acc0"], ["y"], body=body)]
    consts = {"trips": np.int64(6), "go": np.array(True), "acc0": np.zeros(3, np.float32)}
    consts["limit"] = np.float32(9)
    cases.add(graph_case("loop_runtime_condition", nodes, {"x": f32(3, low=0.5, high=3)}, consts))
    cases.add(_scan_reversed())


def _scan_reversed() -> OnnxCase:
    """Scan over axis 1 backwards, outputs prepended (onnx.reference runs only forwards)."""
    body = _body(
        "body",
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "x_t"], ["out_t"]),
        ],
        ["s_in", "x_t"],
        ["s_out", "out_t"],
    )
    attrs = {"num_scan_inputs": 1, "scan_input_axes": [1], "scan_input_directions": [1]}
    attrs |= {"scan_output_axes": [-1], "scan_output_directions": [1]}
    node = helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, **attrs)
    values = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, d)
        for n, d in (("s0", [2]), ("x", [2, 4]), ("s", [2]), ("y", [2, 4]))
    ]
    graph = helper.make_graph([node], "case", values[:2], values[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)

    def reference(case: OnnxCase) -> list[np.ndarray]:
        state, steps = case.inputs["s0"], []
        for t in reversed(range(4)):
            state = state + case.inputs["x"][:, t]
            steps.append(state * case.inputs["x"][:, t])
        return [state, np.stack(steps[::-1], axis=-1)]

    return OnnxCase(
        "scan_axis1_reversed", model, {"s0": f32(2), "x": f32(2, 4)}, atol=1e-5, reference=reference
    )


def _indexing(cases: CaseList) -> None:
    """Index-driven and selection ops, beyond what the node conformance cases cover."""
    data = f32(3, 4)
    cases.add(
        op_case(
            "gather_elements_partial",
            "GatherElements",
            [In(data), In(ints(2, 4, low=-3, high=3))],
            {"axis": 0},
        )
    )
    cases.add(
        op_case(
            "gather_elements_axis1",
            "GatherElements",
            [In(data), In(ints(3, 2, low=-4, high=4))],
            {"axis": 1},
        )
    )
    indices = ints(2, 3, 1, 1, low=-4, high=4)
    cases.add(
        op_case(
            "gathernd_batch2_slices",
            "GatherND",
            [In(f32(2, 3, 4, 5)), In(indices)],
            {"batch_dims": 2},
        )
    )
    hot = np.array([[0.0, 1.5, 2.0], [-1.0, 3.0, -4.0]], np.float32)
    cases.add(
        op_case(
            "onehot_float_indices",
            "OneHot",
            [In(hot), Const(np.float32(3)), Const(np.array([2, 5], np.int32))],
            {"axis": 0},
        )
    )
    cases.add(
        op_case(
            "eyelike_k_negative", "EyeLike", [In(ints(3, 5))], {"k": -2, "dtype": TensorProto.BOOL}
        )
    )
    nan = np.array([[3.0, np.nan, 1.0, 3.0], [np.nan, -0.0, 0.0, 2.0]], np.float32)
    for largest in (0, 1):
        cases.add(
            op_case(
                f"top_k_nan_largest{largest}",
                "TopK",
                [In(nan), Const(i64(3))],
                {"largest": largest},
                outputs=2,
            )
        )
    cases.add(
        op_case("top_k_opset9", "TopK", [In(f32(3, 5))], {"k": 2, "axis": 0}, opset=9, outputs=2)
    )
    # long rows of few values: the CPU selects small k in one pass, merge sorts long k
    ties = ints(4, 3000, low=-5, high=5, dtype=np.float32)
    for largest in (0, 1):
        for k in (5, 200):
            cases.add(
                op_case(
                    f"top_k_long_ties_k{k}_largest{largest}",
                    "TopK",
                    [In(ties), Const(i64(k))],
                    {"largest": largest},
                    outputs=2,
                )
            )
    cases.add(op_case("unique_nan", "Unique", [Const(nan)], outputs=4))
    rows = np.array([[2, 1], [0, 5], [2, 1], [0, 4], [0, 5]], np.int64)
    cases.add(
        op_case(
            "unique_unsorted_axis0", "Unique", [Const(rows)], {"axis": 0, "sorted": 0}, outputs=4
        )
    )
    slices = np.array([[-1], [1], [3]], np.int64)  # rows 3 and -1 are one: the last wins
    cases.add(
        op_case(
            "scatternd_slices_repeated",
            "ScatterND",
            [In(f32(4, 3, 2)), In(slices), In(f32(3, 3, 2))],
        )
    )
    targets = np.array([[0, 2, -3], [1, 1, 0]], np.int64)
    cases.add(
        op_case(
            "scatter_elements_add_repeated",
            "ScatterElements",
            [In(data), In(targets), In(f32(2, 3))],
            {"axis": 1, "reduction": "add"},
            atol=1e-5,
        )
    )
    cube = ints(2, 3, 4, low=-1, high=2)
    cases.add(op_case("nonzero_3d", "NonZero", [Const(cube)]))
    cases.add(
        op_case(
            "compress_long_condition",
            "Compress",
            [In(data), Const(np.array([True, False, True, False, False]))],
            {"axis": 0},
        )
    )


def _resampling(cases: CaseList) -> None:
    """What the conformance cases leave out: integer resizing (rounds and saturates),
    antialias on one axis, nearest extrapolation, 3-D; GridSample far outside the image;
    RoiAlign's per-roi sampling grid; NonMaxSuppression without a score threshold."""
    x = f32(2, 3, 5, 7)
    u8 = ints(1, 2, 4, 5, low=0, high=256, dtype=np.uint8)
    cases.add(
        op_case(
            "resize_linear_u8",
            "Resize",
            [In(u8), None, None, Const(i64(1, 2, 7, 3))],
            {"mode": "linear"},
            opset=19,
        )
    )
    i8 = ints(1, 1, 4, 4, low=-128, high=128, dtype=np.int8)
    scales = np.array([1, 1, 2.0, 1.5], np.float32)
    cases.add(
        op_case(
            "resize_cubic_s8", "Resize", [In(i8), None, Const(scales)], {"mode": "cubic"}, opset=19
        )
    )
    cases.add(
        op_case(
            "resize_cubic_antialias_axis",
            "Resize",
            [In(x), None, Const(np.array([0.55], np.float32))],
            {"mode": "cubic", "antialias": 1, "axes": [3], "exclude_outside": 1},
            opset=19,
        )
    )
    roi = np.array([0.2, -0.3, 0.9, 1.4], np.float32)
    cases.add(
        op_case(
            "resize_nearest_crop_extrapolate",
            "Resize",
            [In(x), Const(roi), None, Const(i64(6, 9))],
            {
                "mode": "nearest",
                "coordinate_transformation_mode": "tf_crop_and_resize",
                "axes": [2, 3],
                "extrapolation_value": -7.0,
            },
            opset=19,
        )
    )
    scales = np.array([1, 1, 1.5, 0.7, 2], np.float32)
    cases.add(
        op_case(
            "resize_linear_3d",
            "Resize",
            [In(f32(1, 2, 3, 4, 5)), None, Const(scales)],
            {"mode": "linear"},
            opset=19,
        )
    )
    image, grid = f32(2, 3, 4, 5), f32(2, 6, 7, 2, low=-3, high=3)
    for mode, padding in (("cubic", "reflection"), ("cubic", "border"), ("nearest", "reflection")):
        cases.add(
            op_case(
                f"gridsample_{mode}_{padding}_far",
                "GridSample",
                [In(image), In(grid)],
                {"mode": mode, "padding_mode": padding},
                opset=22,
            )
        )
    cases.add(
        op_case(
            "gridsample_3d_reflection",
            "GridSample",
            [In(f32(1, 2, 3, 4, 5)), In(f32(1, 2, 3, 4, 3, low=-2.5, high=2.5))],
            {"mode": "linear", "padding_mode": "reflection", "align_corners": 1},
            opset=22,
        )
    )
    rois = np.array(
        [[0, 0, 9, 9], [1.3, 2.2, 4.1, 8.9], [-3, -2, 3, 4], [5, 5, 20, 14]], np.float32
    )
    for mode in ("avg", "max"):
        cases.add(
            op_case(
                f"roialign_{mode}_adaptive_grid",
                "RoiAlign",
                [In(f32(2, 3, 10, 12)), Const(rois), In(i64(0, 1, 1, 0))],
                {"mode": mode, "output_height": 3, "output_width": 4, "spatial_scale": 0.8},
                opset=22,
            )
        )
    boxes = f32(2, 12, 4, low=0, high=10)
    boxes[..., 2:] = np.abs(boxes[..., 2:]) / 2.5 + 0.5
    scores = f32(2, 3, 12, low=0, high=1)
    scores[0, 0, 3] = scores[0, 0, 5]  # a tie goes to the lower index
    cases.add(
        op_case(
            "nms_center_no_score_threshold",
            "NonMaxSuppression",
            [Const(boxes), Const(scores), Const(i64(4)), Const(np.array([0.3], np.float32))],
            {"center_point_box": 1},
            opset=11,
        )
    )
    offsets, mask = f32(2, 24, 3, 6), f32(2, 12, 3, 6, low=0, high=1)
    cases.add(
        op_case(
            "deform_conv_groups",
            "DeformConv",
            [In(f32(2, 4, 6, 7)), In(f32(6, 2, 3, 2)), In(offsets), In(f32(6)), In(mask)],
            {
                "group": 2,
                "offset_group": 2,
                "strides": [2, 1],
                "dilations": [2, 2],
                "pads": [2, 1, 1, 0],
            },
            opset=22,
        )
    )


def _numpy_coerced_hardmax(case: OnnxCase) -> list[np.ndarray]:
    """Hardmax-11 over the input seen as 2-D from axis 1 (onnx.reference runs Hardmax-13)."""
    x = case.inputs["x0"]
    flat = x.reshape(x.shape[0], -1)
    y = np.zeros_like(flat)
    y[np.arange(len(flat)), flat.argmax(axis=1)] = 1
    return [y.reshape(x.shape)]


def _numpy_l1_normalization(case: OnnxCase) -> list[np.ndarray]:
    """LpNormalization p=1 divides by sum |x| (onnx.reference forgets the abs)."""
    x = case.inputs["x0"]
    return [x / np.abs(x).sum(axis=-1, keepdims=True)]


def _losses_norms(cases: CaseList) -> None:
    """Normalization, activation and trigonometry forms the node conformance cases do not
    reach."""
    ties = ints(2, 3, 4, low=0, high=3).astype(np.float32)
    cases.add(
        op_case(
            "hardmax_coerced_opset11",
            "Hardmax",
            [In(ties)],
            {"axis": 1},
            opset=11,
            reference=_numpy_coerced_hardmax,
        )
    )
    cases.add(
        op_case(
            "shrink_int32",
            "Shrink",
            [In(np.arange(-5, 6, dtype=np.int32))],
            {"lambd": 1.5, "bias": 0.5},
            opset=9,
        )
    )
    cases.add(
        op_case(
            "lpnormalization_p1",
            "LpNormalization",
            [In(f32(3, 4))],
            {"p": 1},
            reference=_numpy_l1_normalization,
        )
    )
    cases.add(
        op_case(
            "lppool_p3_strides",
            "LpPool",
            [In(f32(1, 2, 5, 6))],
            {"kernel_shape": [2, 3], "p": 3, "strides": [2, 1]},
            opset=18,
        )
    )
    # onnx.reference has no GlobalLpPool
    for name, x, attrs in (
        ("p3", f32(2, 3, 4, 5), {"p": 3}),
        ("p1_3d", f32(1, 2, 3, 4, 2), {"p": 1}),
        ("default_1d", f32(2, 3, 7), {}),
    ):
        cases.add(
            op_case(f"globallppool_{name}", "GlobalLpPool", [In(x)], attrs, reference=ort_reference)
        )
    edges = np.array(
        [0, 1e-30, -1e-6, 0.5, -0.99, 1, 1.5, 30, -85, 89, 4e3, 3e8, -1e30], np.float32
    )
    for op in ("Asinh", "Sinh", "Cosh", "Asin", "Acos", "Acosh", "Atanh"):
        cases.add(op_case(f"{op.lower()}_edges", op, [In(edges)], rtol=1e-5, atol=0))


def _to_float(name: str, source: str) -> NodeProto:
    return helper.make_node("Cast", [source], [name], to=TensorProto.FLOAT)


def _quantization(cases: CaseList) -> None:
    """Cast and quantization behaviour the ONNX node cases leave out; float8 results are
    cast back to float32 for the comparison."""
    powers = np.array(
        [1.5, 3.0, 0.75, 1.2, 0.0, 1e-39, 3e38, 2.0**127, -2.5, np.inf, np.nan], np.float32
    )
    for mode, saturate in (("nearest", 0), ("down", 1), ("up", 0)):
        nodes = [
            helper.make_node(
                "Cast", ["x"], ["e"], to=TensorProto.FLOAT8E8M0, round_mode=mode, saturate=saturate
            ),
            _to_float("y", "e"),
        ]
        cases.add(
            graph_case(f"cast_e8m0_{mode}_saturate{saturate}", nodes, {"x": powers}, opset=24)
        )
    x = np.array([0.0, 1.0, -3.0, 500.0, -1e5, 250.0, 0.01, np.inf], np.float32)
    scale, zero = np.array(2.0, np.float32), np.zeros((), ml_dtypes.float8_e4m3fn)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], saturate=0),
        _to_float("y", "q"),
    ]
    cases.add(
        graph_case(
            "quantizelinear_e4m3fn_no_saturate", nodes, {"x": x}, {"s": scale, "z": zero}, opset=21
        )
    )
    half = (f32(2, 6) * 5).astype(np.float16)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, block_size=4),
        helper.make_node("Cast", ["q"], ["y"], to=TensorProto.INT8),
    ]
    scales = np.array([[0.5, 2.0], [1.5, 3.0]], np.float16)
    zeros = np.array([[1, -2], [0, 3]], ml_dtypes.int4)
    q = graph_case(
        "quantizelinear_int4_blocked_f16_tail",
        nodes,
        {"x": half},
        {"s": scales, "z": zeros},
        opset=21,
    )
    cases.add(q)
    codes = np.arange(256, dtype=np.uint8)
    nodes = [
        helper.make_node("BitCast", ["x"], ["f"], to=TensorProto.FLOAT8E5M2),
        _to_float("y", "f"),
    ]
    cases.add(graph_case("bitcast_uint8_to_e5m2", nodes, {"x": codes}, opset=26))
    x = ints(1, 2, 5, 5, low=0, high=255, dtype=np.uint8)
    w = ints(3, 2, 3, 3, low=-128, high=127, dtype=np.int8)
    consts = {
        "xs": np.array(0.02, np.float32),
        "xz": np.array(120, np.uint8),
        "w": w,
        "ws": np.array([0.01, 0.03, 0.002], np.float32),
        "wz": np.array([0, 3, -2], np.int8),
        "ys": np.array(0.05, np.float32),
        "yz": np.array(10, np.uint8),
        "bias": ints(3, low=-500, high=500, dtype=np.int32),
    }
    nodes = [
        helper.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"],
            ["y"],
            pads=[1, 1, 1, 1],
            strides=[2, 1],
        )
    ]
    cases.add(graph_case("qlinearconv_per_channel_bias", nodes, {"x": x}, consts, opset=10))


def _raw_qk_reference(case: OnnxCase) -> list[np.ndarray]:
    """onnx.reference's outputs, but qk_matmul_output mode 0 is the raw Q K^T product (as
    the spec and the function body say; the reference softcaps it)."""

    outputs = ReferenceEvaluator(case.model).run(None, case.inputs)
    q, k = case.inputs["x0"], case.inputs["x1"]
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)  # GQA: each kv head serves a group
    factor = np.float32(np.sqrt(1 / np.sqrt(q.shape[-1])))
    outputs[3] = (q * factor) @ np.swapaxes(k * factor, -1, -2)
    return outputs


def _attention(cases: CaseList) -> None:
    """Attention-family combinations the ONNX node tests leave out."""
    q, k, v = f32(2, 4, 3, 4), f32(2, 2, 5, 4), f32(2, 2, 5, 4)
    tol = {"rtol": 1e-4, "atol": 1e-5}
    cases.add(
        op_case(
            "attention_qk_mode0_softcap",
            "Attention",
            [In(q), In(k), In(v)],
            {"softcap": 0.5},
            opset=24,
            outputs=4,
            reference=_raw_qk_reference,
            **tol,
        )
    )
    # 3-D GQA with a cache: causal and the left window offset by the past, a short float mask
    args = [
        In(f32(2, 3, 16)),
        In(f32(2, 3, 8)),
        In(f32(2, 3, 8)),
        In(f32(3, 4)),
        In(f32(2, 2, 2, 4)),
        In(f32(2, 2, 2, 4)),
    ]
    attrs = {
        "q_num_heads": 4,
        "kv_num_heads": 2,
        "is_causal": 1,
        "left_window_size": 1,
        "qk_matmul_output_mode": 2,
    }
    cases.add(
        op_case(
            "attention_3d_gqa_past_causal_window",
            "Attention",
            args,
            attrs,
            opset=25,
            outputs=4,
            **tol,
        )
    )
    # an external cache: per-batch window around the valid keys, a (heads, q, kv) bool mask
    args = [
        In(q),
        In(k),
        In(v),
        In(np.random.default_rng(5).random((4, 3, 5)) < 0.7),
        None,
        None,
        In(i64(3, 5)),
    ]
    attrs = {"left_window_size": 1, "right_window_size": 1, "qk_matmul_output_mode": 3}
    cases.add(
        op_case(
            "attention_nonpad_window_bool_mask",
            "Attention",
            args,
            attrs,
            opset=25,
            outputs=4,
            **tol,
        )
    )
    args = [
        In(f32(2, 3, 16)),
        In(f32(2, 3, 8)),
        In(f32(2, 3, 8)),
        In(f32(2, 2, 4, 4)),
        None,
        In(f32(2, 3, 1, low=0.1, high=0.9)),
    ]
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, "update_rule": "delta"}
    cases.add(
        op_case(
            "linear_attention_delta_gqa_past",
            "LinearAttention",
            args,
            attrs,
            opset=27,
            outputs=2,
            **tol,
        )
    )


def _text_features(cases: CaseList) -> None:
    """TfIdfVectorizer's IDF and TFIDF weighting (the conformance cases are TF only), with
    skips, a repeated pool n-gram and two n-grams sharing an output slot."""
    pool = [3, 1, 4, 1,  1, 2, 2, 3, 1, 2, 3, 1,  1, 2, 3, 2, 3, 1]  # fmt: skip
    attrs = {
        "ngram_counts": [0, 4, 12],
        "ngram_indexes": [0, 1, 2, 5, 3, 4, 5, 1, 6, 7],
        "pool_int64s": pool,
        "weights": [0.5, 1.5, 2.0, 0.25, 3.0, 1.25, 0.75, 4.0],
    }
    tokens = [[1, 2, 3, 1, 4, 1, 2, 3, 1], [2, 0, 3, 0, 1, 0, 0, 2, 3], [3, 1, 2, 3, 1, 1, 1, 2, 2]]
    runs = [[1, 2, 3, 1, 2, 3, 1, 2, 3, 1], [1, 0, 2, 0, 3, 2, 0, 3, 0, 1]]
    for mode, x, grams, skip in (
        ("IDF", np.array(tokens, np.int64), (1, 3), 2),
        ("TFIDF", np.int32([1, 2, 3, 1, 0, 2, 1, 2, 2, 3, 1]), (1, 2), 1),
        ("TFIDF", np.array(runs, np.int32), (2, 3), 3),
    ):
        attrs |= {
            "mode": mode,
            "min_gram_length": grams[0],
            "max_gram_length": grams[1],
            "max_skip_count": skip,
        }
        name = f"tfidf_{mode.lower()}_rank{x.ndim}_grams{grams[0]}{grams[1]}_skip{skip}"
        cases.add(op_case(name, "TfIdfVectorizer", [In(x)], dict(attrs), opset=9))


def _numpy_rnn_sequence_lens(case: OnnxCase) -> list[np.ndarray]:
    """RNN (tanh, one direction) honouring sequence_lens, as onnxruntime: state carried and
    Y zero past each entry's length (onnx.reference ignores sequence_lens)."""
    x, w, r, bias, lengths = (case.inputs[f"x{i}"] for i in range(5))
    reverse = case.model.graph.node[0].attribute[0].s == b"reverse"
    seq, batch, _ = x.shape
    h = np.zeros((batch, r.shape[-1]), np.float32)
    y = np.zeros((seq, 1, batch, r.shape[-1]), np.float32)
    for t in reversed(range(seq)) if reverse else range(seq):
        new = np.tanh(x[t] @ w[0].T + h @ r[0].T + bias[0, : r.shape[1]] + bias[0, r.shape[1] :])
        valid = (t < lengths)[:, None]
        h = np.where(valid, new, h)
        y[t, 0] = np.where(valid, new, 0)
    return [y, np.where((lengths > 0)[:, None], h, 0)[None]]


def _signal_recurrent(cases: CaseList) -> None:
    """Einsum, Det, DFT, STFT and recurrent variants the conformance cases leave out:
    ellipsis broadcasting, diagonals, operand chains, pivoting, dft_length, complex and
    irfft transforms, peepholes with layout 1, linear_before_reset, sequence_lens."""
    tol = {"rtol": 1e-4, "atol": 1e-5}
    einsums = {
        "broadcast": ("...ij,...jk->...ik", [f32(2, 1, 3, 4), f32(5, 4, 6)]),
        "diagonal": ("iij->ji", [f32(3, 3, 2)]),
        "chain": ("ij,jk,kl->il", [f32(2, 3), f32(3, 4), f32(4, 5)]),
        "implicit": ("aBc,cB", [f32(2, 3, 4), f32(4, 3)]),
    }
    for name, (equation, xs) in einsums.items():
        args = [In(x) for x in xs]
        cases.add(op_case(f"einsum_{name}", "Einsum", args, {"equation": equation}, **tol))
    pivots = np.array([[[0, 1, 2], [3, 0, 4], [5, 6, 0]], [[1, 2, 3], [2, 4, 7], [1, 0, 1]]])
    cases.add(op_case("det_pivoting", "Det", [In(pivots.astype(np.float32))], **tol))
    cases.add(op_case("det_batch_4x4", "Det", [In(f32(2, 3, 4, 4))], **tol))
    transforms = {
        "padded": ({}, f32(2, 6, 1), 9),
        "inverse_cropped": ({"inverse": 1}, f32(2, 8, 2), 5),
        "irfft_odd": ({"inverse": 1, "onesided": 1}, f32(2, 5, 2), 9),
        "rfft_complex_axis0": ({"onesided": 1}, f32(7, 3, 2), None),
    }
    for name, (attrs, x, length) in transforms.items():
        axis = 0 if "axis0" in name else 1
        length = None if length is None else Const(np.array(length, np.int64))
        args = [In(x), length, Const(np.array(axis, np.int64))]
        cases.add(op_case(f"dft_{name}", "DFT", args, attrs, opset=20, rtol=1e-4, atol=1e-4))
    args = [In(f32(2, 40, 2)), Const(np.array(6, np.int64)), In(f32(10))]
    cases.add(op_case("stft_complex_window", "STFT", args, {"onesided": 0}, rtol=1e-4, atol=1e-4))
    hidden, batch = 3, 2
    lstm = [
        In(f32(batch, 4, 5)),
        In(f32(2, 4 * hidden, 5)),
        In(f32(2, 4 * hidden, hidden)),
        In(f32(2, 8 * hidden)),
        None,
        In(f32(batch, 2, hidden)),
        In(f32(batch, 2, hidden)),
        In(f32(2, 3 * hidden)),
    ]
    attrs = {"hidden_size": hidden, "direction": "bidirectional", "layout": 1}
    cases.add(op_case("lstm_peepholes_layout1", "LSTM", lstm, attrs, opset=14, outputs=3, **tol))
    gru = [
        In(f32(4, batch, 5)),
        In(f32(2, 3 * hidden, 5)),
        In(f32(2, 3 * hidden, hidden)),
        In(f32(2, 6 * hidden)),
        None,
        In(f32(2, batch, hidden)),
    ]
    attrs = {"hidden_size": hidden, "direction": "bidirectional", "linear_before_reset": 1}
    cases.add(op_case("gru_linear_before_reset", "GRU", gru, attrs, opset=14, outputs=2, **tol))
    for direction in ("forward", "reverse"):
        rnn = [
            In(f32(4, 3, 5)),
            In(f32(1, hidden, 5)),
            In(f32(1, hidden, hidden)),
            In(f32(1, 2 * hidden)),
            In(np.int32([4, 2, 0])),
        ]
        attrs = {"direction": direction, "hidden_size": hidden}
        cases.add(
            op_case(
                f"rnn_sequence_lens_{direction}",
                "RNN",
                rnn,
                attrs,
                opset=14,
                outputs=2,
                reference=_numpy_rnn_sequence_lens,
                **tol,
            )
        )


TENSOR_FAMILIES = (
    _shapes,
    _constants,
    _extras,
    _models,
    _control,
    _indexing,
    _resampling,
    _losses_norms,
    _quantization,
    _attention,
    _text_features,
    _signal_recurrent,
)
