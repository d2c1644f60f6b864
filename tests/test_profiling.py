"""aotc.profiling and `aotc profile`: every kernel timed, its cost counted, the machine's
bound measured once and cached."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from aotc_testing import run_cli
from onnx import TensorProto, helper, numpy_helper

import aotc
from aotc.driver import CompileOptions, compile_model
from aotc.profiling import MachineBound, bound, kernel_costs, machine_bound, profile_model

M, K, N = 128, 256, 192  # the dense layer
CHANNELS, FILTERS, SIDE = 8, 16, 32  # the convolution, 3x3, padded
RUNS = 4
# a fixed roof: the tests measure no machine
ROOF = MachineBound(bandwidth_gbs=10.0, peak_gflops=100.0)


def dense_and_conv(path):
    """y = relu(x @ w + b) and z = conv(image, filters): two kernels at least."""
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(rng.random((K, N), np.float32), "w"),
        numpy_helper.from_array(rng.random(N, np.float32), "b"),
        numpy_helper.from_array(rng.random((FILTERS, CHANNELS, 3, 3), np.float32), "filters"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["xwb"]),
        helper.make_node("Relu", ["xwb"], ["y"]),
        helper.make_node("Conv", ["image", "filters"], ["z"], pads=[1, 1, 1, 1]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K]),
        helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, CHANNELS, SIDE, SIDE]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N]),
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, FILTERS, SIDE, SIDE]),
    ]
    graph = helper.make_graph(nodes, "dense_conv", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def lone_matmul(path):
    """A MatMul of two inputs: one dot kernel of known bytes and FLOPs."""
    nodes = [helper.make_node("MatMul", ["a", "b"], ["c"])]
    inputs = [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [M, K]),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, [K, N]),
    ]
    outputs = [helper.make_tensor_value_info("c", TensorProto.FLOAT, [M, N])]
    graph = helper.make_graph(nodes, "matmul", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def dense_conv_profile(tmp_path_factory):
    path = dense_and_conv(tmp_path_factory.mktemp("model") / "dense_conv.onnx")
    return profile_model(path, CompileOptions(), runs=RUNS, bound=ROOF)


def test_every_kernel_is_timed(dense_conv_profile, tmp_path):
    profile = dense_conv_profile
    compiled = compile_model(dense_and_conv(tmp_path / "m.onnx"), CompileOptions(profile=True))
    assert sorted(k.name for k in profile.kernels) == sorted(compiled.profile_kernels)
    assert len(profile.kernels) >= 2
    assert all(k.calls == RUNS and k.total_ns > 0 for k in profile.kernels)
    times = [k.total_ns for k in profile.kernels]
    assert times == sorted(times, reverse=True)
    # the kernels are nearly all of the run: the rest is the entry, the timers and cffi
    # (and, on a busy machine, a preemption between runs: hence not 0.95)
    assert 0.5 < sum(k.share for k in profile.kernels) <= 1.0
    assert sum(k.share for k in profile.kernels) == pytest.approx(
        profile.kernel_ns / profile.run_ns
    )
    assert profile.kernel_ns <= profile.run_ns


def test_kernel_costs(dense_conv_profile):
    by_ops = {k.cost.ops: k for k in dense_conv_profile.kernels}
    dense = next(k for ops, k in by_ops.items() if "dot" in ops)
    assert {"dot", "add", "maximum"} <= set(dense.cost.ops)
    # x, w and b read, y written
    assert dense.cost.bytes_moved == 4 * (M * K + K * N + N + M * N)
    conv = next(k for ops, k in by_ops.items() if "convolution" in ops)
    assert conv.cost.form  # how the backend emits it, as `aotc inspect` says
    assert conv.cost.flops == 2 * FILTERS * SIDE * SIDE * CHANNELS * 9
    # the roofline: bytes at 10 GB/s or FLOPs at 100 GFLOP/s, whichever takes longer
    for k in dense_conv_profile.kernels:
        roofline_ns = max(k.cost.bytes_moved / 10.0, k.cost.flops / 100.0) * k.calls
        assert k.bound_share == pytest.approx(roofline_ns / k.total_ns)
        assert k.gflops == pytest.approx(k.cost.flops * k.calls / k.total_ns)


def test_matmul_flops_and_bytes(tmp_path):
    compiled = compile_model(lone_matmul(tmp_path / "mm.onnx"), CompileOptions(profile=True))
    (dot,) = kernel_costs(compiled)
    assert dot.flops == 2 * M * N * K
    assert dot.bytes_moved == 4 * (M * K + K * N + M * N)
    assert dot.label.startswith("dot [")  # its form in brackets


def test_python_api(tmp_path):
    kernels = aotc.profile(lone_matmul(tmp_path / "mm.onnx"), runs=2)
    assert [(k.cost.ops, k.calls) for k in kernels] == [(("dot",), 2)]


def test_machine_bound_is_measured_once(tmp_path, monkeypatch):
    measured = []

    def bandwidth():
        measured.append("bandwidth")
        return 20.0

    def peak(target):
        measured.append(target)
        return 50.0

    monkeypatch.setattr(bound, "stream_bandwidth_gbs", bandwidth)
    monkeypatch.setattr(bound, "measure_peak_gflops", peak)
    first = machine_bound("host", cache_dir=tmp_path)
    assert first == MachineBound(20.0, 50.0)
    assert machine_bound("host", cache_dir=tmp_path) == first
    assert measured == ["bandwidth", "host"]
    machine_bound("x86_64:x86-64-v3", cache_dir=tmp_path)  # another target: its own entry
    machine_bound("host", cache_dir=tmp_path, remeasure=True)
    assert measured == ["bandwidth", "host", "bandwidth", "x86_64:x86-64-v3", "bandwidth", "host"]
    assert (tmp_path / "machine.json").is_file()


def test_streaming_bandwidth_is_measured():
    assert bound.stream_bandwidth_gbs() > 0.5  # GB/s: any machine of this century


def test_cli_prints_every_kernel(tmp_path, monkeypatch):
    model = lone_matmul(tmp_path / "mm.onnx")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    machine_bound("host", cache_dir=tmp_path / "cache" / "aotc")  # measured here, read there
    result = run_cli("profile", model, "--runs", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    (row,) = [line for line in lines if line.startswith("dot")]
    assert row.split()[1] == "3"  # calls
    assert any(line.startswith("total: 1 kernels") for line in lines)
