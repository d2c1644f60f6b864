"""views.py: the strides (or mixed-radix digits) of re-indexed buffers.

Random chains of transposes and reshapes of an arange are walked through the
view rules and compared with numpy doing the same to the array: element
`index` of the view must sit at the offset numpy's result holds there.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from aotc.backends.cpu import views
from aotc.ir import DType


def _offsets(view: views.View) -> np.ndarray:
    """The offset of every element of `view` from its dims' digits (row-major walk)."""
    out = np.zeros(view.dims, np.int64)
    for index in itertools.product(*(range(e) for e in view.dims)):
        total = 0
        for dim, position in enumerate(index):
            digits = view.dim_digits(dim)
            inner = int(np.prod([e for e, _ in digits]))
            for extent, stride in digits:
                inner //= extent
                total += (position // inner) % extent * stride
        out[index] = total
    return out


def _transposed(view: views.View, perm) -> views.View:
    digits = [view.dim_digits(d) for d in perm]
    strides = [views._merged(d) for d in digits]
    dims = tuple(view.dims[d] for d in perm)
    return views.View(None, dims, tuple(strides), DType.F32, tuple(digits))


def _reshaped(view: views.View, dims) -> views.View | None:
    digits = views._reshaped_digits(view, dims)
    if digits is None:
        return None
    strides = [views._merged(d) for d in digits]
    return views.View(None, tuple(dims), tuple(strides), DType.F32, tuple(digits))


def _factorizations(rng, total: int) -> tuple[int, ...]:
    dims = []
    while total > 1:
        divisors = [d for d in range(2, total + 1) if total % d == 0]
        d = int(rng.choice(divisors))
        dims.append(d)
        total //= d
    rng.shuffle(dims)
    return tuple(dims) or (1,)


@pytest.mark.parametrize("seed", range(40))
def test_random_transpose_reshape_chains(seed):
    rng = np.random.default_rng(seed)
    total = int(rng.choice([12, 24, 36, 60, 64]))
    dims = _factorizations(rng, total)
    array = np.arange(total).reshape(dims)
    strides = tuple(int(s) // 8 for s in array.strides)
    view = views.View(None, dims, strides, DType.F32)
    for _ in range(4):
        if rng.random() < 0.5 and len(view.dims) > 1:
            perm = tuple(rng.permutation(len(view.dims)))
            view, array = _transposed(view, perm), array.transpose(perm)
        else:
            new_dims = _factorizations(rng, total)
            reshaped = _reshaped(view, new_dims)
            if reshaped is None:  # a new dim cuts a digit unevenly: refused, not wrong
                continue
            view, array = reshaped, array.reshape(new_dims)
        np.testing.assert_array_equal(_offsets(view), array)


def test_channel_shuffle_is_one_digit_pair():
    """[4*34] -> [4, 34] -> transposed -> [136]: stride None, digits (34: 784), (4: 26656)."""
    view = views.View(None, (1, 136, 28, 28), (136 * 784, 784, 28, 1), DType.F32)
    view = _reshaped(view, (1, 4, 34, 28, 28))
    view = _reshaped(_transposed(view, (0, 2, 1, 3, 4)), (1, 136, 28, 28))
    assert view.strides[1:] == (None, 28, 1)
    assert view.dim_digits(1) == ((34, 784), (4, 34 * 784))


def _split_conv_model(cin: int, hw: int, kernel: int, steps: int):
    """Split the channels in two; a convolution reads the second half (YOLO's C2f), through
    a strided slice when `steps` > 1."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    half = cin // 2
    w = numpy_helper.from_array(
        rng.standard_normal((8, half, kernel, kernel)).astype(np.float32), "w"
    )
    starts = numpy_helper.from_array(np.array([half, 0], np.int64), "starts")
    ends = numpy_helper.from_array(np.array([cin, hw], np.int64), "ends")
    axes = numpy_helper.from_array(np.array([1, 3], np.int64), "axes")
    step = numpy_helper.from_array(np.array([1, steps], np.int64), "step")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Slice", ["r", "starts", "ends", "axes", "step"], ["s"]),
        helper.make_node("Conv", ["s", "w"], ["y"], pads=[kernel // 2] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "split_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w, starts, ends, axes, step],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize(("kernel", "steps"), [(3, 1), (1, 1), (3, 2)])
def test_a_convolution_reads_a_slice_of_its_input_in_place(kernel, steps):
    import onnxruntime as ort

    import aotc

    model = _split_conv_model(32, 20, kernel, steps)
    x = np.random.default_rng(1).standard_normal((1, 32, 20, 20)).astype(np.float32)
    compiled = aotc.compile(model)
    (got,) = compiled.load().run([x])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
    # the convolution reads the slice as a strided view of the relu's buffer (packed from
    # memory, not through the element rules), offset to the second half's channels
    (fusion,) = [
        i
        for i in compiled.module.entry.instructions
        if i.op.text == "fusion" and any(j.op.text == "slice" for j in i.called[0].instructions)
    ]
    (sliced,) = [i for i in fusion.called[0].instructions if i.op.text == "slice"]
    view = views.fused_view(compiled.plan, fusion, sliced)
    whole = views.memory_view(compiled.plan, fusion.operands[sliced.operands[0].index])
    assert view is not None and view.strides == (32 * 400, 400, 20, steps)
    assert view.where.offset == whole.where.offset + 16 * 400 * 4
