"""Random ops (RandomUniform/Normal and -Like, Bernoulli, Multinomial, training Dropout).

The draws are Philox bits fixed by the seed, so every check here is deterministic: the
statistical bounds below are wide enough (about 4 sigma, or a Kolmogorov-Smirnov
distance with a 1e-4 false-alarm rate) that a correct generator passes them with these
seeds, and a wrong distribution (shifted, scaled, truncated, a biased class) fails them.
Each model also runs compiled, and its bits must equal the IR evaluator's.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aotc.backend
from aotc.errors import UnsupportedError
from aotc.frontends.onnx import import_onnx
from aotc.ir.evaluate import evaluate

F32, F64, F16 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16


def model(nodes, outputs, inputs=(), opset=17) -> onnx.ModelProto:
    """`outputs`: (name, elem type, dims)."""
    outs = [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs]
    graph = helper.make_graph(nodes, "random", list(inputs), outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run_both(m: onnx.ModelProto, args=()) -> list[np.ndarray]:
    """The outputs from the IR evaluator, checked equal to the compiled code's."""
    expected = list(evaluate(import_onnx(m), list(args)))
    compiled = aotc.backend.prepare(m).run(list(args))
    for e, c in zip(expected, compiled):
        assert e.dtype == c.dtype and e.shape == c.shape
        # the bits are equal; Box-Muller's log and cos may differ by an ulp between numpy
        # and the vector library, which mean + scale * z can leave as a few ulps of 1
        tolerance = 1e-3 if e.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(c, e, rtol=tolerance, atol=tolerance)
    return compiled


def ks_distance(sample: np.ndarray, cdf) -> float:
    """Kolmogorov-Smirnov distance between the sample's empirical CDF and `cdf`."""
    x = np.sort(sample.astype(np.float64).ravel())
    n = len(x)
    theory = np.array([cdf(v) for v in x])
    return max(np.max(np.arange(1, n + 1) / n - theory), np.max(theory - np.arange(n) / n))


def ks_bound(n: int) -> float:
    return math.sqrt(-math.log(1e-4 / 2) / (2 * n))  # P(distance > bound) = 1e-4


def test_random_uniform_fills_its_range_evenly():
    node = helper.make_node(
        "RandomUniform", [], ["u"], shape=[64, 64], low=-2.0, high=3.0, seed=7.0
    )
    (u,) = run_both(model([node], [("u", F32, [64, 64])]))
    assert u.dtype == np.float32 and u.min() >= -2 and u.max() < 3
    assert ks_distance(u, lambda v: (v + 2) / 5) < ks_bound(u.size)


@pytest.mark.parametrize("elem", [F32, F64])
def test_random_normal_has_its_mean_and_scale(elem):
    node = helper.make_node(
        "RandomNormal", [], ["z"], shape=[4000], mean=1.0, scale=2.0, dtype=elem, seed=3.0
    )
    (z,) = run_both(model([node], [("z", elem, [4000])]))
    assert z.dtype == (np.float32 if elem == F32 else np.float64)
    normal_cdf = lambda v: 0.5 * (1 + math.erf((v - 1) / (2 * math.sqrt(2))))
    assert ks_distance(z, normal_cdf) < ks_bound(z.size)


def test_like_ops_take_the_input_shape_and_type():
    x = helper.make_tensor_value_info("x", F16, [3, 50])
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["u"], seed=1.0),
        helper.make_node("RandomNormalLike", ["x"], ["z"], dtype=F32, seed=1.0),
    ]
    m = model(nodes, [("u", F16, [3, 50]), ("z", F32, [3, 50])], [x])
    u, z = run_both(m, [np.zeros((3, 50), np.float16)])
    assert u.dtype == np.float16 and 0 <= u.min() and u.max() < 1
    assert z.dtype == np.float32 and z.shape == (3, 50) and z.std() > 0.5


def test_seeds_fix_the_stream():
    def draw(seed_a, seed_b):
        nodes = [
            helper.make_node("RandomUniform", [], [name], shape=[16], **seed)
            for name, seed in (("a", seed_a), ("b", seed_b))
        ]
        return run_both(model(nodes, [("a", F32, [16]), ("b", F32, [16])]))

    a, b = draw({"seed": 5.0}, {"seed": 5.0})
    np.testing.assert_array_equal(a, b)  # one seed, one stream (as onnxruntime)
    again, _ = draw({"seed": 5.0}, {})
    np.testing.assert_array_equal(a, again)  # reproducible from compile to compile
    c, _ = draw({"seed": 6.0}, {})
    assert not np.array_equal(a, c)  # another seed, another stream
    e, f = draw({}, {})
    assert not np.array_equal(e, f)  # unseeded nodes differ from each other


def test_bernoulli_hits_each_probability():
    p = np.repeat(np.array([[0.0], [0.3], [0.9], [1.0]], np.float32), 2000, axis=1)
    x = helper.make_tensor_value_info("p", F32, list(p.shape))
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=2.0, dtype=TensorProto.INT64)
    (y,) = run_both(model([node], [("y", TensorProto.INT64, list(p.shape))], [x], opset=15), [p])
    assert y.dtype == np.int64 and set(np.unique(y)) <= {0, 1}
    assert y[0].sum() == 0 and y[3].sum() == 2000
    for row, prob in ((1, 0.3), (2, 0.9)):
        sigma = math.sqrt(prob * (1 - prob) / 2000)
        assert abs(y[row].mean() - prob) < 4 * sigma


def test_multinomial_samples_the_softmax():
    probs = np.array([[0.5, 0.0, 0.2, 0.3], [0.1, 0.1, 0.1, 0.7]])
    with np.errstate(divide="ignore"):
        logits = (np.log(probs) + 3.0).astype(np.float32)  # unnormalized, one -inf
    x = helper.make_tensor_value_info("x", F32, [2, 4])
    node = helper.make_node(
        "Multinomial", ["x"], ["y"], sample_size=3000, seed=4.0, dtype=TensorProto.INT64
    )
    (y,) = run_both(model([node], [("y", TensorProto.INT64, [2, 3000])], [x]), [logits])
    for row in range(2):
        counts = np.bincount(y[row], minlength=4)
        assert len(counts) == 4
        expected = probs[row] * 3000
        chi2 = sum((c - e) ** 2 / e for c, e in zip(counts, expected) if e > 0)
        assert chi2 < 21.1  # chi-square, 3 degrees of freedom, P = 1e-4
        assert counts[probs[row] == 0].sum() == 0


def test_training_dropout_keeps_and_scales():
    x = np.linspace(1, 2, 4000, dtype=np.float32).reshape(40, 100)
    ratio = onnx.numpy_helper.from_array(np.array(0.25, np.float32), "ratio")
    training = onnx.numpy_helper.from_array(np.array(True), "training")
    node = helper.make_node("Dropout", ["x", "ratio", "training"], ["y", "mask"], seed=9)
    m = model(
        [node],
        [("y", F32, [40, 100]), ("mask", TensorProto.BOOL, [40, 100])],
        [helper.make_tensor_value_info("x", F32, [40, 100])],
        opset=13,
    )
    m.graph.initializer.extend([ratio, training])
    y, mask = run_both(m, [x])
    np.testing.assert_allclose(y[mask], x[mask] / 0.75, rtol=1e-6)
    assert not y[~mask].any()
    assert abs(mask.mean() - 0.75) < 4 * math.sqrt(0.75 * 0.25 / mask.size)


def test_each_run_draws_afresh_and_a_reload_repeats_the_runs():
    node = helper.make_node("RandomNormal", [], ["z"], shape=[3, 5], seed=11.0)
    m = model([node], [("z", F32, [3, 5])])
    first = aotc.backend.prepare(m)
    runs = [first.run([])[0] for _ in range(3)]
    assert not np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[1], runs[2])
    again = aotc.backend.prepare(m)  # a fresh load counts from 0 again
    for want in runs:
        np.testing.assert_array_equal(again.run([])[0], want)
    module = import_onnx(m)  # the evaluator keeps the same counter
    for want in runs:
        np.testing.assert_allclose(evaluate(module, [])[0], want, rtol=1e-6, atol=1e-6)


def test_integer_random_values_are_refused():
    node = helper.make_node("RandomUniform", [], ["u"], shape=[4], dtype=TensorProto.INT32)
    m = model([node], [("u", TensorProto.INT32, [4])])
    with pytest.raises(UnsupportedError, match="only float types"):
        import_onnx(m)
