"""Small self-contained ONNX models with realistic inputs, one or more per op
and per attribute variant that takes its own lowering path.

`CASES` is reused by the compiled-code tests (tests/test_onnx_ops.py), so
every model is valid ONNX, has static shapes, and needs nothing but its
`inputs` (initializers hold the constant operands).  Compare with
`expected_outputs(case)`.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from onnx_case_kit import (
    CaseList,
    Const,
    In,
    OnnxCase,
    bools,
    expected_outputs,
    f32,
    graph_case,
    i64,
    ints,
    numpy_batchnorm,
    numpy_coerced_softmax,
    numpy_lrn,
    op_case,
    pos,
)
from onnx_cases_contrib import CONTRIB_FAMILIES
from onnx_cases_ml import ML_FAMILIES
from onnx_cases_tensor import TENSOR_FAMILIES

__all__ = ["CASES", "OnnxCase", "expected_outputs"]


def _elementwise(cases: CaseList) -> None:
    unary_inputs = {
        "Neg": f32(2, 3, 4),
        "Abs": f32(2, 3, 4),
        "Sqrt": pos(2, 3, 4),
        "Exp": f32(2, 3, 4),
        "Log": pos(2, 3, 4),
        "Tanh": f32(2, 3, 4),
        "Sigmoid": f32(2, 3, 4),
        "Erf": f32(2, 3, 4),
        "Floor": f32(2, 3, 4),
        "Ceil": f32(2, 3, 4),
        "Sin": f32(2, 3, 4),
        "Cos": f32(2, 3, 4),
        "Tan": f32(2, 3, 4, low=-1, high=1),
        "Reciprocal": pos(2, 3, 4),
        "Not": bools(3, 4),
        "Round": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1.2, -2.7], np.float32),
        "Sign": np.array([-2.0, 0.0, 3.5, -0.0], np.float32),
        "IsNaN": np.array([1.0, np.nan, -np.inf, 0.0], np.float32),
        "IsInf": np.array([1.0, np.nan, -np.inf, np.inf], np.float32),
    }
    for op_type, value in unary_inputs.items():
        cases.add(op_case(op_type.lower(), op_type, [In(value)]))
    cases.add(op_case("neg_int32", "Neg", [In(ints(3, 4, dtype=np.int32))]))
    cases.add(op_case("abs_opset7", "Abs", [In(f32(5))], opset=7))

    binary = {
        "Add": (f32(2, 3, 4), f32(4)),
        "Sub": (f32(2, 1, 4), f32(3, 1)),
        "Mul": (f32(3, 4), f32(1)),
        "Div": (f32(2, 3), pos(2, 3)),
        "And": (bools(2, 3), bools(3)),
        "Or": (bools(2, 3), bools(2, 3)),
        "Xor": (bools(2, 3), bools(1, 3)),
    }
    for op_type, (a, b) in binary.items():
        cases.add(op_case(op_type.lower(), op_type, [In(a), In(b)]))
    cases.add(op_case("add_const_scalar", "Add", [In(f32(3, 4)), Const(np.float32(0.5))]))
    cases.add(op_case("add_int64", "Add", [In(ints(4, 3)), In(ints(3))]))
    cases.add(op_case("add_opset7", "Add", [In(f32(2, 3)), In(f32(3))], opset=7))
    cases.add(
        op_case(
            "div_int32",
            "Div",
            [In(ints(6, dtype=np.int32)), Const(np.array([3, -3, 4, 2, -5, 7], np.int32))],
        )
    )
    cases.add(op_case("pow", "Pow", [In(pos(3, 4)), In(f32(4))]))
    cases.add(op_case("pow_int_exponent", "Pow", [In(f32(3, 4)), Const(np.int64(2))]))
    cases.add(op_case("mod_fmod", "Mod", [In(f32(6)), In(pos(6))], {"fmod": 1}))
    numerator = np.array([7, -7, 7, -7, 0, 5], np.int32)
    divisor = np.array([3, 3, -3, -3, 2, 5], np.int32)
    cases.add(op_case("mod_int", "Mod", [In(numerator), In(divisor)]))
    cases.add(op_case("max_variadic", "Max", [In(f32(2, 3)), In(f32(3)), In(f32(2, 1))]))
    cases.add(op_case("min", "Min", [In(f32(2, 3)), In(f32(2, 3))]))
    cases.add(op_case("sum_variadic", "Sum", [In(f32(2, 3)), In(f32(3)), In(f32(2, 3))]))
    cases.add(op_case("mean", "Mean", [In(f32(2, 3)), In(f32(1, 3))]))
    cases.add(op_case("max_single", "Max", [In(f32(4))]))
    for op_type in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        cases.add(
            op_case(
                op_type.lower(),
                op_type,
                [In(ints(3, 4, low=0, high=3)), In(ints(4, low=0, high=3))],
            )
        )
    cases.add(op_case("less_float", "Less", [In(f32(3, 4)), In(f32(3, 1))]))
    cases.add(op_case("where", "Where", [In(bools(2, 3)), In(f32(2, 3)), In(f32(3))]))
    cases.add(
        op_case(
            "bitshift_left",
            "BitShift",
            [
                In(ints(5, low=0, high=9, dtype=np.uint8)),
                Const(np.array([1, 2, 0, 3, 1], np.uint8)),
            ],
            {"direction": "LEFT"},
        )
    )


def _casts(cases: CaseList) -> None:
    targets = {
        "f32_to_int32": (f32(3, 4, low=-5, high=5), TensorProto.INT32),
        "f32_to_f16": (f32(3, 4), TensorProto.FLOAT16),
        "f32_to_f64": (f32(3, 4), TensorProto.DOUBLE),
        "int64_to_f32": (ints(3, 4), TensorProto.FLOAT),
        "f32_to_bool": (np.array([0.0, 1.5, -2.0, 0.0], np.float32), TensorProto.BOOL),
        "bool_to_f32": (bools(3, 4), TensorProto.FLOAT),
        "int32_to_uint8": (ints(6, low=0, high=200, dtype=np.int32), TensorProto.UINT8),
        "int64_to_int8": (ints(6, low=-100, high=100), TensorProto.INT8),
    }
    for name, (value, to) in targets.items():
        cases.add(op_case(f"cast_{name}", "Cast", [In(value)], {"to": to}))
    # bf16 round trip: the output is f32 holding bf16-rounded values
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT),
    ]
    cases.add(graph_case("cast_bf16_round_trip", nodes, {"x": f32(3, 4)}))
    cases.add(op_case("castlike", "CastLike", [In(f32(3)), Const(np.zeros(1, np.float64))]))
    cases.add(op_case("identity", "Identity", [In(f32(2, 3))]))
    cases.add(
        op_case("dropout_with_mask", "Dropout", [In(f32(2, 3)), Const(np.float32(0.3))], outputs=2)
    )
    cases.add(op_case("dropout_opset10", "Dropout", [In(f32(2, 3))], {"ratio": 0.2}, opset=10))


def _activations(cases: CaseList) -> None:
    x = f32(2, 3, 4, low=-3, high=3)
    cases.add(op_case("relu", "Relu", [In(x)]))
    cases.add(op_case("leakyrelu", "LeakyRelu", [In(x)], {"alpha": 0.1}))
    cases.add(op_case("leakyrelu_default", "LeakyRelu", [In(x)]))
    cases.add(op_case("elu", "Elu", [In(x)], {"alpha": 0.7}))
    cases.add(op_case("selu", "Selu", [In(x)]))
    cases.add(op_case("celu", "Celu", [In(x)], {"alpha": 2.0}))
    cases.add(op_case("hardsigmoid", "HardSigmoid", [In(x)], {"alpha": 0.3, "beta": 0.4}))
    cases.add(op_case("hardswish", "HardSwish", [In(x)]))
    cases.add(op_case("softplus", "Softplus", [In(x)]))
    cases.add(op_case("softsign", "Softsign", [In(x)]))
    cases.add(op_case("thresholdedrelu", "ThresholdedRelu", [In(x)], {"alpha": 0.5}))
    cases.add(op_case("mish", "Mish", [In(x)], opset=18))
    cases.add(op_case("gelu", "Gelu", [In(x)], opset=20))
    cases.add(op_case("gelu_tanh", "Gelu", [In(x)], {"approximate": "tanh"}, opset=20))
    cases.add(op_case("prelu", "PRelu", [In(x), Const(f32(3, 1, low=0, high=1))]))
    cases.add(op_case("clip_attrs_opset7", "Clip", [In(x)], {"min": -1.0, "max": 1.5}, opset=7))
    cases.add(op_case("clip_attrs_default_max", "Clip", [In(x)], {"min": 0.0}, opset=10))
    cases.add(
        op_case("clip_inputs", "Clip", [In(x), Const(np.float32(-0.5)), Const(np.float32(0.8))])
    )
    cases.add(op_case("clip_min_only", "Clip", [In(x), Const(np.float32(-0.5))]))
    cases.add(op_case("clip_max_only", "Clip", [In(x), None, Const(np.float32(0.5))]))
    cases.add(
        op_case("clip_runtime_bounds", "Clip", [In(x), In(np.float32(-1.0)), In(np.float32(1.0))])
    )
    cases.add(
        op_case("clip_int", "Clip", [In(ints(3, 4)), Const(np.int64(-3)), Const(np.int64(4))])
    )
    cases.add(op_case("clip_no_bounds", "Clip", [In(x)]))


def _linalg(cases: CaseList) -> None:
    shapes = {
        "matmul_2d": ((3, 4), (4, 5)),
        "matmul_3d_2d": ((2, 3, 4), (4, 5)),
        "matmul_2d_3d": ((3, 4), (2, 4, 5)),
        "matmul_batch_broadcast": ((2, 1, 3, 4), (1, 3, 4, 2)),
        "matmul_vec_mat": ((4,), (4, 5)),
        "matmul_mat_vec": ((3, 4), (4,)),
        "matmul_vec_vec": ((4,), (4,)),
        "matmul_vec_batch": ((4,), (2, 4, 3)),
    }
    for name, (a, b) in shapes.items():
        cases.add(op_case(name, "MatMul", [In(f32(*a)), In(f32(*b))], rtol=1e-5, atol=1e-5))
    cases.add(op_case("matmul_weights", "MatMul", [In(f32(2, 3, 4)), Const(f32(4, 6))], atol=1e-5))
    cases.add(
        op_case(
            "matmul_int32",
            "MatMul",
            [In(ints(2, 3, dtype=np.int32)), In(ints(3, 2, dtype=np.int32))],
        )
    )
    gemm = {
        "gemm_plain": ((3, 4), (4, 5), None, {}),
        "gemm_bias_vector": ((3, 4), (4, 5), (5,), {}),
        "gemm_trans_a": ((4, 3), (4, 5), (3, 5), {"transA": 1}),
        "gemm_trans_b": ((3, 4), (5, 4), (5,), {"transB": 1}),
        "gemm_trans_both_alpha_beta": (
            (4, 3),
            (5, 4),
            (3, 1),
            {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
        ),
        "gemm_scalar_bias": ((3, 4), (4, 5), (), {"beta": 0.5}),
    }
    for name, (a, b, c, attrs) in gemm.items():
        args = [In(f32(*a)), Const(f32(*b))] + ([] if c is None else [Const(f32(*c))])
        cases.add(op_case(name, "Gemm", args, attrs, atol=1e-5))
    cases.add(
        op_case(
            "gemm_opset9",
            "Gemm",
            [In(f32(3, 4)), In(f32(4, 2)), In(f32(2))],
            {"alpha": 2.0},
            opset=9,
            atol=1e-5,
        )
    )


def _conv(cases: CaseList) -> None:
    tol = {"rtol": 1e-4, "atol": 1e-5}
    x = f32(1, 4, 7, 7)
    convs = {
        "conv_bias": (x, (6, 4, 3, 3), True, {}),
        "conv_strides_pads": (x, (5, 4, 3, 3), True, {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
        "conv_dilations": (x, (3, 4, 2, 3), False, {"dilations": [2, 1], "pads": [1, 1, 1, 1]}),
        "conv_groups": (x, (6, 2, 3, 3), True, {"group": 2}),
        "conv_depthwise": (x, (4, 1, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]}),
        "conv_same_upper": (x, (2, 4, 4, 4), False, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        "conv_same_lower": (x, (2, 4, 4, 3), False, {"auto_pad": "SAME_LOWER"}),
        "conv_valid": (x, (2, 4, 3, 3), True, {"auto_pad": "VALID", "strides": [2, 1]}),
        "conv_1d": (f32(2, 3, 9), (4, 3, 3), True, {"strides": [2], "pads": [1, 1]}),
        "conv_3d": (f32(1, 2, 4, 5, 4), (3, 2, 2, 3, 2), True, {"pads": [0, 1, 0, 0, 1, 1]}),
        "conv_batch2_kernel_shape": (
            f32(2, 3, 5, 5),
            (2, 3, 3, 3),
            False,
            {"kernel_shape": [3, 3]},
        ),
    }
    for name, (data, w, bias, attrs) in convs.items():
        args = [In(data), Const(f32(*w, low=-1, high=1))]
        if bias:
            args.append(Const(f32(w[0])))
        cases.add(op_case(name, "Conv", args, attrs, **tol))
    cases.add(op_case("conv_opset7", "Conv", [In(x), Const(f32(2, 4, 3, 3))], opset=7, **tol))


def _conv_transpose(cases: CaseList) -> None:
    tol = {"rtol": 1e-4, "atol": 1e-5}
    x = f32(1, 3, 4, 5)
    variants = {
        "plain": ((3, 2, 3, 3), True, {}),
        "strides_pads": ((3, 4, 3, 3), True, {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
        "output_padding": ((3, 2, 3, 2), False, {"strides": [2, 3], "output_padding": [1, 2]}),
        "dilations": ((3, 2, 2, 3), True, {"dilations": [2, 1], "pads": [0, 1, 1, 0]}),
        "output_shape": (
            (3, 2, 3, 3),
            False,
            {"strides": [2, 2], "output_shape": [8, 10], "auto_pad": "SAME_UPPER"},
        ),
        "same_upper": ((3, 2, 3, 3), False, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        "same_lower": ((3, 2, 4, 4), False, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    }
    for name, (w, bias, attrs) in variants.items():
        args = [In(x), Const(f32(*w, low=-1, high=1))]
        if bias:
            args.append(Const(f32(w[1])))
        cases.add(op_case(f"convtranspose_{name}", "ConvTranspose", args, attrs, **tol))
    cases.add(
        op_case(
            "convtranspose_1d",
            "ConvTranspose",
            [In(f32(2, 2, 6)), Const(f32(2, 3, 3))],
            {"strides": [3]},
            **tol,
        )
    )


def _pools(cases: CaseList) -> None:
    x = f32(1, 3, 7, 8)
    pools = {
        "2x2_stride2": {"kernel_shape": [2, 2], "strides": [2, 2]},
        "pads": {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        "asym_pads_strides": {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [0, 1, 2, 0]},
        "ceil_mode": {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        "ceil_mode_pads": {
            "kernel_shape": [2, 2],
            "strides": [2, 2],
            "pads": [1, 1, 1, 1],
            "ceil_mode": 1,
        },
        "same_upper": {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        "same_lower": {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
        "valid": {"kernel_shape": [2, 3], "auto_pad": "VALID"},
    }
    for variant, attrs in pools.items():
        cases.add(op_case(f"maxpool_{variant}", "MaxPool", [In(x)], attrs))
        cases.add(op_case(f"averagepool_{variant}", "AveragePool", [In(x)], attrs))
    padded = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    cases.add(
        op_case(
            "averagepool_count_include_pad",
            "AveragePool",
            [In(x)],
            {**padded, "count_include_pad": 1},
        )
    )
    cases.add(
        op_case(
            "averagepool_ceil_count_include_pad",
            "AveragePool",
            [In(x)],
            {**padded, "count_include_pad": 1, "ceil_mode": 1},
        )
    )
    cases.add(
        op_case(
            "maxpool_dilations",
            "MaxPool",
            [In(x)],
            {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 0]},
        )
    )
    cases.add(
        op_case("maxpool_1d", "MaxPool", [In(f32(2, 3, 9))], {"kernel_shape": [3], "strides": [2]})
    )
    cases.add(
        op_case(
            "averagepool_1d",
            "AveragePool",
            [In(f32(2, 3, 9))],
            {"kernel_shape": [3], "strides": [2]},
        )
    )
    cases.add(
        op_case("maxpool_3d", "MaxPool", [In(f32(1, 2, 4, 5, 4))], {"kernel_shape": [2, 2, 2]})
    )
    cases.add(op_case("maxpool_opset8", "MaxPool", [In(x)], {"kernel_shape": [2, 2]}, opset=8))
    cases.add(
        op_case(
            "maxpool_int8",
            "MaxPool",
            [In(ints(1, 2, 4, 4, dtype=np.int8))],
            {"kernel_shape": [2, 2], "strides": [2, 1]},
        )
    )
    cases.add(op_case("globalaveragepool", "GlobalAveragePool", [In(x)]))
    cases.add(op_case("globalmaxpool", "GlobalMaxPool", [In(x)]))
    cases.add(op_case("globalaveragepool_1d", "GlobalAveragePool", [In(f32(2, 3, 5))]))


def _norms(cases: CaseList) -> None:
    tol = {"rtol": 1e-5, "atol": 1e-5}
    c = 3
    stats = [Const(f32(c)), Const(f32(c)), Const(f32(c)), Const(pos(c))]
    cases.add(
        op_case(
            "batchnorm",
            "BatchNormalization",
            [In(f32(2, c, 4, 5)), *stats],
            {"epsilon": 1e-3},
            **tol,
        )
    )
    cases.add(op_case("batchnorm_2d_input", "BatchNormalization", [In(f32(4, c)), *stats], **tol))
    cases.add(
        op_case(
            "batchnorm_opset9",
            "BatchNormalization",
            [In(f32(2, c, 4)), *stats],
            opset=9,
            reference=numpy_batchnorm,
            **tol,
        )
    )
    x = f32(2, 3, 4, 5)
    cases.add(
        op_case(
            "layernorm_last_axis",
            "LayerNormalization",
            [In(x), Const(f32(5)), Const(f32(5))],
            **tol,
        )
    )
    cases.add(
        op_case(
            "layernorm_axis1_no_bias",
            "LayerNormalization",
            [In(x), Const(f32(3, 4, 5))],
            {"axis": 1, "epsilon": 1e-3},
            **tol,
        )
    )
    cases.add(
        op_case(
            "layernorm_stats",
            "LayerNormalization",
            [In(x), Const(f32(4, 5))],
            {"axis": -2},
            outputs=3,
            **tol,
        )
    )
    lrn = {"size": 3, "alpha": 0.01}
    cases.add(op_case("lrn", "LRN", [In(f32(2, 6, 3, 3))], lrn, reference=numpy_lrn(**lrn), **tol))
    cases.add(
        op_case(
            "lrn_even_size",
            "LRN",
            [In(f32(1, 5, 4, 2))],
            {"size": 4, "alpha": 0.1, "beta": 0.5, "bias": 2.0},
            reference=numpy_lrn(size=4, alpha=0.1, beta=0.5, bias=2.0),
            **tol,
        )
    )
    cases.add(
        op_case(
            "instancenorm",
            "InstanceNormalization",
            [In(f32(2, 3, 4, 5)), Const(f32(3)), Const(f32(3))],
            **tol,
        )
    )


def _reductions(cases: CaseList) -> None:
    x = f32(2, 3, 4)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    cases.add(
        op_case(
            "reducesum_opset11_keepdims0",
            "ReduceSum",
            [In(x)],
            {"axes": [1], "keepdims": 0},
            opset=11,
            **tol,
        )
    )
    cases.add(op_case("reducesum_axes_input", "ReduceSum", [In(x), Const(i64(0, -1))], **tol))
    cases.add(op_case("reducesum_all", "ReduceSum", [In(x)], {"keepdims": 0}, **tol))
    cases.add(op_case("reducesum_noop", "ReduceSum", [In(x)], {"noop_with_empty_axes": 1}))
    cases.add(op_case("reducesum_int64", "ReduceSum", [In(ints(3, 4)), Const(i64(1))]))
    cases.add(op_case("reducemean_opset13", "ReduceMean", [In(x)], {"axes": [-1]}, opset=13, **tol))
    cases.add(
        op_case("reducemean_opset18", "ReduceMean", [In(x), Const(i64(1, 2))], opset=18, **tol)
    )
    cases.add(
        op_case(
            "reducemax_opset18_keepdims0",
            "ReduceMax",
            [In(x), Const(i64(1))],
            {"keepdims": 0},
            opset=18,
        )
    )
    cases.add(op_case("reducemax_all", "ReduceMax", [In(x)], opset=18))
    cases.add(op_case("reducemin", "ReduceMin", [In(x)], {"axes": [0, 2]}))
    cases.add(op_case("reduceprod", "ReduceProd", [In(pos(2, 3, 4))], {"axes": [2]}, **tol))
    cases.add(op_case("reducel1", "ReduceL1", [In(x)], {"axes": [1]}, **tol))
    cases.add(op_case("reducel2", "ReduceL2", [In(x), Const(i64(1))], opset=18, **tol))
    cases.add(op_case("reducesumsquare", "ReduceSumSquare", [In(x)], {"axes": [0]}, **tol))
    cases.add(op_case("reducelogsum", "ReduceLogSum", [In(pos(2, 3, 4))], {"axes": [1]}, **tol))
    cases.add(op_case("reducelogsumexp", "ReduceLogSumExp", [In(x)], {"axes": [2]}, **tol))
    cases.add(op_case("argmax", "ArgMax", [In(f32(3, 4))], {"axis": 1}))
    ties = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 0, 0, 0]], np.int32)
    cases.add(op_case("argmax_ties_first", "ArgMax", [In(ties)], {"axis": -1, "keepdims": 0}))
    cases.add(
        op_case("argmin_ties_last", "ArgMin", [In(ties)], {"axis": 0, "select_last_index": 1})
    )
    cases.add(op_case("softmax", "Softmax", [In(f32(2, 3, 4, low=-5, high=5))], **tol))
    cases.add(op_case("softmax_axis1", "Softmax", [In(f32(2, 3, 4))], {"axis": 1}, **tol))
    cases.add(
        op_case(
            "softmax_opset11_coerced",
            "Softmax",
            [In(f32(2, 3, 4))],
            {"axis": 1},
            opset=11,
            reference=numpy_coerced_softmax(axis=1, log=False),
            **tol,
        )
    )
    cases.add(op_case("logsoftmax", "LogSoftmax", [In(f32(2, 5, low=-30, high=30))], **tol))
    cases.add(
        op_case(
            "logsoftmax_opset11",
            "LogSoftmax",
            [In(f32(2, 3, 4))],
            opset=11,
            reference=numpy_coerced_softmax(axis=1, log=True),
            **tol,
        )
    )


def _half(cases: CaseList) -> None:
    """float16 models: the evaluator rounds after every op, onnx.reference in numpy's f16."""
    tol = {"rtol": 2e-3, "atol": 2e-3}
    h = np.float16
    cases.add(op_case("add_f16", "Add", [In(f32(2, 3).astype(h)), In(f32(3).astype(h))], **tol))
    cases.add(op_case("sigmoid_f16", "Sigmoid", [In(f32(2, 3).astype(h))], **tol))
    cases.add(
        op_case(
            "matmul_f16",
            "MatMul",
            [In(f32(3, 4).astype(h)), In(f32(4, 2).astype(h))],
            rtol=1e-2,
            atol=1e-2,
        )
    )
    cases.add(
        op_case(
            "maxpool_f16",
            "MaxPool",
            [In(f32(1, 2, 4, 4).astype(h))],
            {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]},
        )
    )
    cases.add(
        op_case(
            "layernorm_f16",
            "LayerNormalization",
            [In(f32(2, 8).astype(h)), Const(f32(8).astype(h))],
            rtol=1e-2,
            atol=1e-2,
        )
    )


def _build() -> list[OnnxCase]:
    cases = CaseList()
    for family in (
        _elementwise,
        _casts,
        _activations,
        _linalg,
        _conv,
        _conv_transpose,
        _pools,
        _norms,
        _reductions,
        _half,
        *TENSOR_FAMILIES,
        *ML_FAMILIES,
        *CONTRIB_FAMILIES,
    ):
        family(cases)
    return cases.cases


CASES: list[OnnxCase] = _build()
