"""The ONNX importer: every case of onnx_cases imported and run by the IR
evaluator against onnx.reference, the module's structure, and the errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_case_kit import assert_integers_match
from onnx_cases import CASES, OnnxCase, expected_outputs

from aotc.errors import AotcError, InputValuesRequired, ModelError, ShapeError, UnsupportedError
from aotc.frontends.onnx import import_onnx
from aotc.ir import DType, Op
from aotc.ir.evaluate import evaluate


def run(module, args) -> list[np.ndarray]:
    return list(evaluate(module, args))


def assert_outputs_match(got, expected, rtol: float, atol: float) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.shape == e.shape
        if np.issubdtype(e.dtype, np.floating):
            assert g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
        else:
            assert g.dtype == e.dtype
            assert_integers_match(g, e, atol)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_matches_reference(case: OnnxCase):
    module = import_onnx(case.model)
    args = [case.inputs[i.name] for i in case.model.graph.input if i.name in case.inputs]
    assert_outputs_match(run(module, args), expected_outputs(case), case.rtol, case.atol)


# -- models written by hand for structure and error tests ----------------------------------


def tensor(name: str, dims, elem=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def make_model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def relu_model(input_dims=(2, 3)) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return make_model(nodes, [tensor("x", input_dims)], [tensor("y", None)])


def test_entry_structure():
    nodes = [
        helper.make_node("Add", ["a.in", "w"], ["s"], name="add_w"),
        helper.make_node("Mul", ["s", "b:in"], ["y"]),
    ]
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    # `w` is a graph input and an initializer: a constant, not a parameter
    inputs = [tensor("a.in", [3]), tensor("w", [3]), tensor("b:in", [3])]
    module = import_onnx(make_model(nodes, inputs, [tensor("y", [3])], [w]), name="my-net")
    assert module.name == "my_net"
    params = module.entry.parameters
    assert [p.index for p in params] == [0, 1]
    assert [p.shape.dims for p in params] == [(3,), (3,)]
    assert params[0].name == "a.in" and params[1].name.startswith("b_in")
    root = module.entry.root
    assert root.op is Op.TUPLE and len(root.operands) == 1
    origins = {i.origin for i in module.entry.instructions if i.op in (Op.ADD, Op.MULTIPLY)}
    assert origins == {"add_w", "Mul_1"}
    a, b = np.arange(3, dtype=np.float32), np.full(3, 2, np.float32)
    np.testing.assert_array_equal(run(module, [a, b])[0], (a + 1) * b)


def test_load_from_path(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model(), str(path))
    module = import_onnx(path)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(module, [x])[0], np.maximum(x, 0))
    assert import_onnx(str(path)).entry.parameters[0].shape.dtype is DType.F32


def test_missing_file(tmp_path):
    path = tmp_path / "nope.onnx"
    with pytest.raises(ModelError, match="nope.onnx"):
        import_onnx(path)


def test_corrupt_file(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(ModelError, match="bad.onnx: not a readable ONNX model") as info:
        import_onnx(path)
    assert "\n" not in str(info.value)


def test_names_that_are_not_utf8_are_refused(tmp_path):
    """protobuf leaves a text field that is not UTF-8 as bytes; the importer refuses the
    model rather than failing inside onnx's schema lookup."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    data = helper.make_model(graph, ir_version=10).SerializeToString()
    assert data.count(b"Relu") == 1
    path = tmp_path / "bad.onnx"
    path.write_bytes(data.replace(b"Relu", b"R\xfflu"))
    with pytest.raises(ModelError, match="op_type is not UTF-8 text") as info:
        import_onnx(path)
    assert "\n" not in str(info.value)
    in_memory = onnx.ModelProto.FromString(data.replace(b"x", b"\xff"))
    with pytest.raises(ModelError, match="NodeProto.input is not UTF-8 text"):
        import_onnx(in_memory)


@pytest.mark.parametrize(
    "nodes, inputs, outputs, message",
    [
        ([("Relu", [""], ["y"])], [""], ["y"], "graph 'g': input 0 has an empty name"),
        ([("Relu", ["x"], [""])], ["x"], [""], "graph 'g': output 0 has an empty name"),
        (
            [("Relu", ["x"], [""]), ("Relu", [""], ["y"])],
            ["x"],
            ["y"],
            "node 'second'.*input 0 has an empty name, but the op requires it",
        ),
        (  # one of a variadic list
            [("Sum", ["x", "", "x"], ["y"])],
            ["x"],
            ["y"],
            "node 'first'.*input 1 has an empty name, but the op requires it",
        ),
    ],
)
def test_empty_names_refused(nodes, inputs, outputs, message):
    """An unnamed graph value is malformed; an empty node input name omits an optional
    input only, so a required one is refused naming the node."""
    made = [
        helper.make_node(op, ins, outs, name=name)
        for (op, ins, outs), name in zip(nodes, ["first", "second"])
    ]
    model = make_model(made, [tensor(n, [2]) for n in inputs], [tensor(n, [2]) for n in outputs])
    with pytest.raises(ModelError, match=message):
        import_onnx(model)


@pytest.mark.parametrize(
    "attribute, message",
    [
        (helper.make_attribute("axis", 1.5), "'axis' is of type FLOAT, the op takes INT"),
        (helper.make_attribute("axis", [1]), "'axis' is of type INTS, the op takes INT"),
    ],
)
def test_attributes_of_another_type_refused(attribute, message):
    node = helper.make_node("Softmax", ["x"], ["y"], name="soft")
    node.attribute.append(attribute)
    model = make_model([node], [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    with pytest.raises(ModelError, match=f"node 'soft'.*{message}"):
        import_onnx(model)


def test_empty_optional_names_are_omitted_values():
    nodes = [helper.make_node("Dropout", ["x", "", ""], ["y", ""])]
    model = make_model(nodes, [tensor("x", [2])], [tensor("y", [2])])
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(run(import_onnx(model), [x])[0], x)


def test_unsupported_ops_listed_at_once():
    nodes = [
        helper.make_node("RegexFullMatch", ["boxes"], ["sel"], name="regex_1"),
        helper.make_node("Relu", ["scores"], ["r"], name="fine"),
        helper.make_node("StringNormalizer", ["r"], ["v"], name="strings"),
        helper.make_node("Foo", ["v"], ["y"], name="f", domain="com.x"),
    ]
    inputs = [tensor("boxes", [1, 4, 4]), tensor("scores", [1, 1, 4]), tensor("k", [1], 7)]
    model = make_model(
        nodes, inputs, [tensor("y", None)], opset=13, extra_opsets=[helper.make_opsetid("com.x", 1)]
    )
    with pytest.raises(UnsupportedError) as info:
        import_onnx(model)
    assert str(info.value) == (
        "unsupported ONNX ops: RegexFullMatch (node 'regex_1', opset 13), "
        "StringNormalizer (node 'strings', opset 13), Foo (node 'f', domain 'com.x', opset 1)"
    )


def test_unsupported_in_nested_graph_and_old_opset():
    inner = helper.make_graph(
        [helper.make_node("Unique", ["x"], ["u"], name="inner_unique")],
        "then",
        [],
        [tensor("u", None)],
    )
    nodes = [
        helper.make_node("Add", ["x", "x"], ["s"], name="old_add"),
        helper.make_node("If", ["c"], ["y"], name="branch", then_branch=inner, else_branch=inner),
    ]
    model = make_model(
        nodes, [tensor("x", [2]), tensor("c", [], TensorProto.BOOL)], [tensor("y", None)], opset=6
    )
    with pytest.raises(UnsupportedError) as info:
        import_onnx(model)
    message = str(info.value)
    for label in (
        "Add (node 'old_add', opset 6)",
        "If (node 'branch', opset 6)",
        "Unique (node 'inner_unique', opset 6)",
    ):
        assert label in message


def test_newer_opset_with_unchanged_op():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = make_model(nodes, [tensor("x", [4])], [tensor("y", [4])], opset=25)
    x = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(run(import_onnx(model), [x])[0], np.maximum(x, 0))


@pytest.mark.parametrize("version", [2**62, 2**31, 0, -3])
def test_opset_version_out_of_range_refused(version):
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [4])], [tensor("y", [4])]
    )
    model.opset_import[0].version = version
    with pytest.raises(UnsupportedError, match=f"opset version {version} of domain ai.onnx is not"):
        import_onnx(model)


def test_reshape_shape_fixed_by_input_values():
    nodes = [helper.make_node("Reshape", ["data", "shape_in"], ["y"], name="x")]
    inputs = [tensor("data", [2, 3]), tensor("shape_in", [2], TensorProto.INT64)]
    model = make_model(nodes, inputs, [tensor("y", None)], opset=13)
    with pytest.raises(InputValuesRequired) as info:
        import_onnx(model)
    assert info.value.inputs == ["shape_in"]
    module = import_onnx(model, input_values={"shape_in": np.array([3, 2])})
    assert module.input_names == ["data"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(module, [x])[0], x.reshape(3, 2))


def test_nonzero_count_at_run_time_or_fixed_by_input_values():
    # the count is a run-time extent (a bounded dim, at most the input's size), or a
    # constant where the input's values are given
    nodes = [helper.make_node("NonZero", ["x"], ["y"], name="nz")]
    model = make_model(nodes, [tensor("x", [2, 3])], [tensor("y", None, TensorProto.INT64)])
    (bounded,) = import_onnx(model).entry.root.shape.elements
    assert (bounded.dims, bounded.bounded_dims) == ((2, 6), (1,))
    x = np.array([[0, 1.5, 2], [-3, 0, 0]], np.float32)
    module = import_onnx(model, input_values={"x": x})
    np.testing.assert_array_equal(run(module, [])[0], np.stack(np.nonzero(x)))


def test_non_constant_reshape_shape():
    nodes = [helper.make_node("Reshape", ["data", "shape_in"], ["y"], name="x")]
    inputs = [tensor("data", [2, 3]), tensor("shape_in", [2], TensorProto.INT64)]
    model = make_model(nodes, inputs, [tensor("y", None)], opset=13)
    with pytest.raises(UnsupportedError) as info:
        import_onnx(model)
    assert str(info.value) == (
        "Reshape (node 'x', opset 13): input 'shape' must be a constant "
        "(it depends on input 'shape_in'; fix its value with --const NAME=VALUES)"
    )


def test_symbolic_dim_needs_input_shapes():
    model = relu_model(input_dims=("batch", 3))
    with pytest.raises(ModelError, match=r"input 'x' dim 0 is 'batch'.*--input x=1x3"):
        import_onnx(model)
    module = import_onnx(model, input_shapes={"x": (5, 3)})
    assert module.entry.parameters[0].shape.dims == (5, 3)
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(run(module, [x])[0], np.maximum(x, 0))


def test_input_without_shape_needs_input_shapes():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], [tensor("y", None)]
    )
    with pytest.raises(ModelError, match="input 'x' has no shape"):
        import_onnx(model)
    assert import_onnx(model, {"x": [2, 2, 2]}).entry.parameters[0].shape.dims == (2, 2, 2)


def test_bad_input_shapes():
    with pytest.raises(ModelError, match="names no graph input: nope"):
        import_onnx(relu_model(), input_shapes={"nope": (2, 3)})
    with pytest.raises(ModelError, match="rank 3 given.*rank 2"):
        import_onnx(relu_model(), input_shapes={"x": (2, 3, 1)})
    with pytest.raises(ModelError, match="dim 1 is 4, the model says 3"):
        import_onnx(relu_model(), input_shapes={"x": (2, 4)})
    with pytest.raises(ModelError, match="must not be negative"):
        import_onnx(relu_model(input_dims=("n", 3)), input_shapes={"x": (-1, 3)})


def test_const_values_take_the_model_static_shape():
    """A flat list of values (--const) fixes a scalar or a static rank-2 input."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["y"])]
    scalar = make_model(nodes, [tensor("x", [2, 2]), tensor("k", [])], [tensor("y", None)])
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    module = import_onnx(scalar, input_values={"k": np.array([3.0])})
    np.testing.assert_array_equal(run(module, [x])[0], x * 3)
    matrix = make_model(nodes, [tensor("x", [2, 2]), tensor("k", [2, 2])], [tensor("y", None)])
    module = import_onnx(matrix, input_values={"k": np.array([1.0, 2, 3, 4])})
    np.testing.assert_array_equal(run(module, [x])[0], x * (x + 1))


@pytest.mark.parametrize(
    "op, attrs, message",
    [
        ("Conv", {"strides": [0, 1]}, "strides is \\[0, 1\\]; each must be at least 1"),
        ("Conv", {"dilations": [1, 0]}, "dilations .* at least 1"),
        ("Conv", {"pads": [-1, 0, 0, 0]}, "pads .* at least 0"),
        ("MaxPool", {"kernel_shape": []}, "kernel_shape has 0 values, expected 2"),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [1, 0], "ceil_mode": 1}, "strides"),
        ("MaxPool", {"kernel_shape": [0, 2]}, "kernel_shape .* at least 1"),
    ],
)
def test_bad_window_attributes_refused(op, attrs, message):
    """A zero stride, dilation or kernel, or a negative pad, is a ShapeError naming the
    node and the attribute (was a ZeroDivisionError or an empty max())."""
    node = helper.make_node(op, ["x", "w"] if op == "Conv" else ["x"], ["y"], name="n")
    for name, values in attrs.items():
        kind = onnx.AttributeProto.INTS if isinstance(values, list) else onnx.AttributeProto.INT
        node.attribute.append(helper.make_attribute(name, values, attr_type=kind))
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    model = make_model([node], [tensor("x", [1, 1, 5, 5])], [tensor("y", None)], [w])
    with pytest.raises(ShapeError, match=f"{op} \\(node 'n'.*{message}"):
        import_onnx(model)


def test_omitted_outputs_are_not_used():
    # "" names an omitted optional output: not a use of MaxPool's Indices or Dropout's mask
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p", ""], kernel_shape=[2, 2]),
        helper.make_node("Dropout", ["p"], ["y", ""]),
    ]
    module = import_onnx(make_model(nodes, [tensor("x", [1, 1, 2, 2])], [tensor("y", None)]))
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    np.testing.assert_array_equal(run(module, [x])[0], np.full((1, 1, 1, 1), 3, np.float32))


def test_unsupported_input_dtype():
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    model = make_model(nodes, [tensor("x", [2], TensorProto.STRING)], [tensor("y", None)])
    with pytest.raises(UnsupportedError, match="input 'x' has element type STRING"):
        import_onnx(model)


def test_shape_error_names_the_node():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="bad_add")]
    model = make_model(nodes, [tensor("a", [3]), tensor("b", [4])], [tensor("y", None)])
    with pytest.raises(ShapeError, match=r"^Add \(node 'bad_add', opset 17\): .*broadcast"):
        import_onnx(model)


def test_bad_attribute_names_the_node():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c", auto_pad="SIDEWAYS")]
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    model = make_model(nodes, [tensor("x", [1, 1, 5, 5])], [tensor("y", None)], [w])
    with pytest.raises(ModelError, match=r"^Conv \(node 'c', opset 17\): attribute auto_pad"):
        import_onnx(model)


def test_training_dropout_ratio_out_of_range_refused():
    # training-mode Dropout is supported (tests/frontends/test_onnx_random.py); its ratio
    # must be a probability
    node = helper.make_node("Dropout", ["x", "ratio", "train"], ["y"])
    consts = [
        numpy_helper.from_array(np.float32(1.5), "ratio"),
        numpy_helper.from_array(np.bool_(True), "train"),
    ]
    model = make_model([node], [tensor("x", [1, 2, 4, 4])], [tensor("y", None)], consts)
    with pytest.raises(ModelError, match=r"ratio 1.5 is not in \[0, 1\]"):
        import_onnx(model)


def test_errors_are_aotc_errors():
    # the CLI relies on every refusal being an AotcError
    for error in (ModelError, ShapeError, UnsupportedError):
        assert issubclass(error, AotcError)


# a two-class SVMClassifier over 3 features, each test changing what it refuses
SVM_CLASSIFIER = {
    "classlabels_ints": [0, 1],
    "vectors_per_class": [1, 1],
    "coefficients": [1.0, -1.0],
    "support_vectors": [0.0, 1.0, 2.0, -1.0, 0.5, 0.0],
    "rho": [0.1],
    "kernel_type": "RBF",
    "kernel_params": [0.5, 0.0, 0.0],
}


@pytest.mark.parametrize(
    "attrs, error, message",
    [
        ({"classlabels_ints": None, "classlabels_strings": ["a", "b"]}, UnsupportedError,
         "no string type"),
        # onnxruntime writes only the first of the two scores
        ({"post_transform": "PROBIT"}, UnsupportedError, "second score undefined"),
        ({"support_vectors": [0.0, 1.0, 2.0, -1.0]}, ShapeError, "3 features but the support"),
        ({"kernel_params": [0.5]}, ModelError, "kernel_params holds 1 values"),
    ],
)  # fmt: skip
def test_svm_classifier_refusals(attrs, error, message):
    attrs = {k: v for k, v in (SVM_CLASSIFIER | attrs).items() if v is not None}
    node = helper.make_node(
        "SVMClassifier", ["x"], ["label", "scores"], name="svc", domain="ai.onnx.ml", **attrs
    )
    outputs = [tensor("label", None, TensorProto.INT64), tensor("scores", None)]
    ml = helper.make_opsetid("ai.onnx.ml", 1)
    model = make_model([node], [tensor("x", [2, 3])], outputs, extra_opsets=[ml])
    with pytest.raises(error, match=message):
        import_onnx(model)


@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_negative_pads_crop(mode):
    # onnx.reference cannot pad by negative amounts, so numpy is the reference here
    pads = numpy_helper.from_array(np.array([0, -1, 2, 1, 0, -2], np.int64), "pads")
    nodes = [helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)]
    module = import_onnx(make_model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)], [pads]))
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    cropped = x[:, 1:, :2]
    expected = np.pad(cropped, [(0, 1), (0, 0), (2, 0)], mode=mode)
    np.testing.assert_array_equal(run(module, [x])[0], expected)


def test_grouped_conv_transpose():
    # onnx.reference mishandles group > 1, so the reference is one group=1 run per group
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (2, 4, 3, 3)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 2, 2)).astype(np.float32)  # C_in=4, C_out/group=3
    attrs = {"strides": [2, 1], "pads": [0, 1, 1, 0]}

    def conv_transpose_model(weights, group):
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=group, **attrs)
        inputs = [tensor("x", [2, weights.shape[0], 3, 3])]
        init = [numpy_helper.from_array(weights, "w")]
        return make_model([node], inputs, [tensor("y", None)], init)

    module = import_onnx(conv_transpose_model(w, group=2))
    parts = [
        ReferenceEvaluator(conv_transpose_model(w[2 * g : 2 * g + 2], 1)).run(
            None, {"x": x[:, 2 * g : 2 * g + 2]}
        )[0]
        for g in range(2)
    ]
    expected = np.concatenate(parts, axis=1)
    np.testing.assert_allclose(run(module, [x])[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale", [1e30, 2.0**21, float("nan")])
def test_resize_to_a_huge_size_refused(scale):
    """A corrupt scale is a ShapeError saying the size is too large, not a ValueError."""
    scales = numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="rs")]
    model = make_model(nodes, [tensor("x", [1, 1, 4, 4])], [tensor("y", None)], [scales])
    with pytest.raises(ShapeError, match="Resize \\(node 'rs'.*too large"):
        import_onnx(model)


def test_resize_linear_of_bool_refused():
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode="linear")
    x = tensor("x", [1, 1, 2, 2], TensorProto.BOOL)
    model = make_model([node], [x], [tensor("y", None)], [scales])
    with pytest.raises(UnsupportedError, match=r"^Resize \(node 'up', opset 17\): linear resizing"):
        import_onnx(model)


@pytest.mark.parametrize(
    ("in_hw", "out_hw", "innermost_first"),
    [((8, 8), (64, 64), True), ((64, 64), (8, 8), False), ((5, 40), (40, 20), True)],
)
def test_resize_axes_in_the_cheapest_order(in_hw, out_hw, innermost_first):
    """Upsampling resizes the innermost axis first, while the image is small (its gathers
    are scattered); downsampling last.  Results match the reference either way."""
    sizes = numpy_helper.from_array(np.array([1, 2, *out_hw], np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")
    x = tensor("x", [1, 2, *in_hw])
    model = make_model([node], [x], [tensor("y", None)], [sizes], opset=18)
    module = import_onnx(model)
    gathers = [i for i in module.entry.instructions if i.op is Op.GATHER]
    first_axis = gathers[0].gather.start_index_map[0]
    assert (first_axis == 3) == innermost_first, [g.gather for g in gathers]
    data = np.random.default_rng(3).standard_normal((1, 2, *in_hw)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": data})
    np.testing.assert_allclose(run(module, [data])[0], expected, rtol=1e-5, atol=1e-5)


LINEAR = {"coefficients": [0.5, -1.0, 2.0], "intercepts": [0.1]}
ML_OPSET = helper.make_opsetid("ai.onnx.ml", 1)


@pytest.mark.parametrize(
    "op, attrs, error, message",
    [
        ("LinearClassifier", LINEAR | {"classlabels_strings": ["no", "yes"]}, UnsupportedError,
         "classlabels_strings .*no string type"),
        # onnxruntime leaves the second score unset, onnx.reference makes one NaN
        ("LinearClassifier", LINEAR | {"classlabels_ints": [0, 1], "post_transform": "PROBIT"},
         UnsupportedError, "PROBIT on a binary"),
        ("LinearRegressor", LINEAR | {"targets": 2}, ModelError,
         "coefficients hold 3 values, not 2 rows of 3"),
        ("OneHotEncoder", {"cats_strings": ["a", "b"]}, UnsupportedError, "no string type"),
        ("Imputer", {"imputed_value_int64s": [1]}, ModelError, "f32 input needs imputed_value_f"),
        ("Scaler", {"offset": [1.0, 2.0], "scale": [1.0]}, ModelError, "2 values for 3 features"),
    ],
)  # fmt: skip
def test_ml_refusals(op, attrs, error, message):
    outputs = ["label", "scores"] if op == "LinearClassifier" else ["y"]
    node = helper.make_node(op, ["x"], outputs, name="n", domain="ai.onnx.ml", **attrs)
    graph_outputs = [tensor(name, None) for name in outputs]
    model = make_model([node], [tensor("x", [2, 3])], graph_outputs, extra_opsets=[ML_OPSET])
    where = rf"^{op} \(node 'n', domain 'ai.onnx.ml', opset 1\): "
    with pytest.raises(error, match=where + ".*" + message):
        import_onnx(model)


def test_feature_vectorizer_rows_must_match():
    node = helper.make_node(
        "FeatureVectorizer", ["a", "b"], ["y"], domain="ai.onnx.ml", inputdimensions=[3, 3]
    )
    inputs = [tensor("a", [2, 3]), tensor("b", [3, 3])]
    model = make_model([node], inputs, [tensor("y", None)], extra_opsets=[ML_OPSET])
    with pytest.raises(ShapeError, match=r"different numbers of rows: \[2, 3\]"):
        import_onnx(model)


def _contrib_model(node: onnx.NodeProto) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", [tensor("x", [2])], [tensor("y", [2])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def test_contrib_ops_are_checked_like_onnx_ones():
    unknown = helper.make_node("NotAnOp", ["x"], ["y"], domain="com.microsoft")
    with pytest.raises(UnsupportedError, match=r"NotAnOp \(node .*domain 'com.microsoft'"):
        import_onnx(_contrib_model(unknown))
    extra_input = helper.make_node("Gelu", ["x", "x"], ["y"], domain="com.microsoft")
    with pytest.raises(ModelError, match=r"has 2 inputs, expected 1 to 1"):
        import_onnx(_contrib_model(extra_input))


def tree_classifier_model(**attrs) -> onnx.ModelProto:
    """One tree (x0 <= 0.5 ? node 1 : node 2) voting for class 0 or 1."""
    trees = {
        "nodes_treeids": [0, 0, 0],
        "nodes_nodeids": [0, 1, 2],
        "nodes_featureids": [0, 0, 0],
        "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
        "nodes_values": [0.5, 0, 0],
        "nodes_truenodeids": [1, 0, 0],
        "nodes_falsenodeids": [2, 0, 0],
        "class_treeids": [0, 0],
        "class_nodeids": [1, 2],
        "class_ids": [0, 1],
        "class_weights": [1.0, 1.0],
    }
    node = helper.make_node(
        "TreeEnsembleClassifier",
        ["x"],
        ["label", "p"],
        name="trees",
        domain="ai.onnx.ml",
        **(trees | attrs),
    )
    ml = [helper.make_opsetid("ai.onnx.ml", 3)]
    outputs = [tensor("label", None, TensorProto.INT64), tensor("p", None)]
    return make_model([node], [tensor("x", [2, 3])], outputs, extra_opsets=ml)


def test_tree_classifier_string_labels_refused():
    model = tree_classifier_model(classlabels_strings=["cat", "dog"])
    with pytest.raises(UnsupportedError, match=r"TreeEnsembleClassifier \(node 'trees'.*string"):
        import_onnx(model)


def test_tree_branch_to_missing_node_refused():
    model = tree_classifier_model(classlabels_int64s=[0, 1], nodes_falsenodeids=[7, 0, 0])
    with pytest.raises(ModelError, match="a branch names node 7 of tree 0, which does not exist"):
        import_onnx(model)


MS = "com.microsoft"


def _fused_model(node: onnx.NodeProto, inputs: dict[str, list[int]], opset: int = 17):
    graph = helper.make_graph(
        [node],
        "g",
        [tensor(n, dims) for n, dims in inputs.items()],
        [tensor(name, None) for name in node.output if name],
    )
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def test_fused_activation_outside_the_table_is_refused():
    node = helper.make_node(
        "FusedGemm",
        ["a", "b"],
        ["y"],
        domain="com.microsoft",
        activation="ScaledTanh",
        activation_alpha=1.0,
    )
    model = _fused_model(node, {"a": [2, 3], "b": [3, 4]})
    with pytest.raises(UnsupportedError, match=r"activation 'ScaledTanh' is not supported"):
        import_onnx(model)
    conv = helper.make_node(
        "FusedConv",
        ["x", "w"],
        ["y"],
        domain="com.microsoft",
        activation="LeakyRelu",
        activation_params=[0.1, 0.2],
    )
    with pytest.raises(ModelError, match=r"activation_params has 2 values, .* takes 1"):
        import_onnx(_fused_model(conv, {"x": [1, 2, 4, 4], "w": [3, 2, 3, 3]}))


def test_skip_norms_refuse_what_they_do_not_define():
    # the RMS form has no mean
    node = helper.make_node(
        "SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y", "mean"], domain="com.microsoft"
    )
    model = _fused_model(node, {"x": [2, 3, 8], "s": [2, 3, 8], "g": [8]})
    with pytest.raises(UnsupportedError, match=r"output 1 \('mean'\) is not supported"):
        import_onnx(model)
    node = helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g"], ["y"], domain="com.microsoft"
    )
    model = _fused_model(node, {"x": [2, 3, 8], "s": [2, 4, 8], "g": [8]})
    with pytest.raises(ShapeError, match=r"skip has shape \[2, 4, 8\]; its last two dims"):
        import_onnx(model)


def test_onnxruntime_onnx_domain_ops_serve_only_where_onnx_has_none():
    # onnxruntime registers LayerNormalization before opset 17 in ONNX's domain, and
    # SimplifiedLayerNormalization there only
    node = helper.make_node("LayerNormalization", ["x", "g"], ["y"])
    model = _fused_model(node, {"x": [2, 8], "g": [8]}, opset=13)
    assert [i.op for i in import_onnx(model).entry.instructions].count(Op.RSQRT) == 1
    elsewhere = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], domain=MS)
    with pytest.raises(UnsupportedError, match=r"SimplifiedLayerNormalization"):
        import_onnx(_fused_model(elsewhere, {"x": [2, 8], "g": [8]}))


def _matmul_nbits_model(runtime_b: bool, zero_points=None, g_idx=None) -> onnx.ModelProto:
    n, k, block = 2, 32, 16
    weights = {
        "B": np.zeros((n, 2, 8), np.uint8),
        "scales": np.ones((n, 2), np.float32),
        "zero_points": zero_points,
        "g_idx": g_idx,
    }
    names = ["a"] + [name if v is not None else "" for name, v in weights.items()]
    node = helper.make_node(
        "MatMulNBits", names, ["y"], domain="com.microsoft", N=n, K=k, block_size=block
    )
    inits = [numpy_helper.from_array(v, name) for name, v in weights.items() if v is not None]
    inputs = [tensor("a", [3, k])]
    if runtime_b:
        inputs.append(tensor("B", [n, 2, 8], TensorProto.UINT8))
        inits = inits[1:]
    ms = helper.make_opsetid("com.microsoft", 1)
    return make_model([node], inputs, [tensor("y", None)], inits, extra_opsets=[ms])


def test_matmul_nbits_refusals():
    with pytest.raises(
        InputValuesRequired,
        match=r"input 'B' \(dequantized at compile time\) "
        r"must be a constant",
    ):
        import_onnx(_matmul_nbits_model(runtime_b=True))
    zero_points, g_idx = np.zeros((2, 1), np.uint8), np.zeros(32, np.int32)
    with pytest.raises(UnsupportedError, match="g_idx with uint8 zero points"):
        import_onnx(_matmul_nbits_model(False, zero_points, g_idx))


def _contrib_quant_model(op: str, inputs: dict, consts: dict) -> onnx.ModelProto:
    names = list(inputs) + list(consts)
    node = helper.make_node(op, names, ["y"], domain="com.microsoft")
    graph_inputs = [
        tensor(n, list(v.shape), helper.np_dtype_to_tensor_dtype(v.dtype))
        for n, v in inputs.items()
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in consts.items()]
    ms = helper.make_opsetid("com.microsoft", 1)
    return make_model([node], graph_inputs, [tensor("y", None)], inits, extra_opsets=[ms])


def test_contrib_quantized_refusals():
    x, s, z = np.zeros((2, 3), np.uint8), np.array(0.1, np.float32), np.array(3, np.uint8)
    per_channel = {"as": np.ones(3, np.float32), "az": z, "b": x, "bs": s, "bz": z, "cs": s}
    with pytest.raises(ShapeError, match=r"has shape \[3\]; only per-tensor"):
        import_onnx(_contrib_quant_model("QLinearAdd", {"a": x}, per_channel))
    w = np.zeros((3, 4), np.uint8)
    no_output_zp = {"as": s, "az": z, "b": w, "bs": s, "bz": z, "c": np.zeros(4, np.int32), "ys": s}
    with pytest.raises(ModelError, match="y_scale is given without y_zero_point"):
        import_onnx(_contrib_quant_model("QGemm", {"a": x}, no_output_zp))


MS_OPSET = helper.make_opsetid("com.microsoft", 1)


def test_multi_head_attention_packed_qkv_refused():
    node = helper.make_node(
        "MultiHeadAttention", ["qkv"], ["y"], domain="com.microsoft", num_heads=2
    )
    model = make_model(
        [node], [tensor("qkv", [2, 3, 2, 3, 4])], [tensor("y", None)], extra_opsets=[MS_OPSET]
    )
    with pytest.raises(UnsupportedError, match=r"packed QKV \(a 5-D query\) is not supported"):
        import_onnx(model)


def test_attention_megatron_mask_refused():
    node = helper.make_node(
        "Attention", ["x", "w", "", "mask"], ["y"], domain="com.microsoft", num_heads=2
    )
    inputs = [
        tensor("x", [2, 3, 8]),
        tensor("w", [8, 24]),
        tensor("mask", [2, 1, 3, 3], TensorProto.INT32),
    ]
    model = make_model([node], inputs, [tensor("y", None)], extra_opsets=[MS_OPSET])
    with pytest.raises(UnsupportedError, match=r"4-D mask_index \(Megatron\) is not supported"):
        import_onnx(model)


def test_group_query_attention_needs_a_constant_total_length():
    names = ["q", "k", "v", "", "", "seqlens", "total"]
    node = helper.make_node(
        "GroupQueryAttention", names, ["y"], domain="com.microsoft", num_heads=2, kv_num_heads=1
    )
    lengths = [
        tensor(name, dims, TensorProto.INT32) for name, dims in (("seqlens", [2]), ("total", []))
    ]
    inputs = [tensor("q", [2, 3, 16]), tensor("k", [2, 3, 8]), tensor("v", [2, 3, 8]), *lengths]
    model = make_model([node], inputs, [tensor("y", None)], extra_opsets=[MS_OPSET])
    with pytest.raises(InputValuesRequired, match=r"total_sequence_length must be a constant"):
        import_onnx(model)


@pytest.mark.parametrize(("exponent", "products"), [(2.0, True), (3.0, True), (2.5, False)])
def test_pow_by_two_or_three_is_products(exponent, products):
    """x^2 and x^3 import as multiplies (as onnxruntime computes them: x^3 within 1 ulp
    more than pow); other exponents stay a power."""
    y = numpy_helper.from_array(np.array(exponent, np.float32), "y")
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    model = make_model([node], [tensor("x", [7])], [tensor("z", None)], [y])
    module = import_onnx(model)
    ops = {i.op for i in module.entry.instructions}
    assert (Op.POWER not in ops) == products, ops
    data = np.random.default_rng(2).uniform(0.1, 4, 7).astype(np.float32)
    want = data.astype(np.float64) ** exponent
    np.testing.assert_allclose(run(module, [data])[0], want, rtol=3e-7)
