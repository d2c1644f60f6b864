"""End to end: the example models through the CLI, linked into C programs,
compared with onnxruntime."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from aotc_testing import EXAMPLES, build_c, generic_driver_source, run_c_model, run_cli

ort = pytest.importorskip("onnxruntime")

MODELS = {
    "mnist": EXAMPLES / "mnist" / "mnist.onnx",
    "cnn": EXAMPLES / "cnn" / "cnn.onnx",
}
# float32 kernels accumulate in a different order than onnxruntime's
RTOL, ATOL = 1e-4, 1e-6


def reference(path, inputs):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def random_inputs(path, seed=0):
    model = onnx.load(str(path))
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in model.graph.initializer}
    arrays = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        arrays.append(rng.random(dims, dtype=np.float32))
    return arrays


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both example models compiled by the CLI into one build folder."""
    build = tmp_path_factory.mktemp("build")
    for path in MODELS.values():
        result = run_cli("compile", path, "-o", build)
        assert result.returncode == 0, result.stderr
    return build


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cli_writes_artifacts_and_summary(name, tmp_path):
    result = run_cli("compile", MODELS[name], "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    for file in (f"{name}.h", f"{name}.o", f"lib{name}.a"):
        assert (tmp_path / "out" / file).stat().st_size > 0
    text = result.stdout
    for word in ("input", "output", "kernels", "arena", "lower bound", "naive", "weights", "time"):
        assert word in text, text


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_model_matches_onnxruntime(name, built, tmp_path):
    source = tmp_path / "driver.c"
    inputs = random_inputs(MODELS[name])
    expected = reference(MODELS[name], inputs)
    source.write_text(generic_driver_source(name, len(inputs), len(expected)))
    program = build_c([source], tmp_path / "driver", [built], [built / f"lib{name}.a"])
    got = run_c_model(program, inputs, expected, tmp_path)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def test_example_c_app_builds_and_runs(built, tmp_path):
    """The README's command: cc examples/c_app/main.c -Ibuild build/libmnist.a -lm -lpthread."""
    app = build_c(
        [EXAMPLES / "c_app" / "main.c"], tmp_path / "app", [built], [built / "libmnist.a"]
    )
    inputs = random_inputs(MODELS["mnist"], seed=3)
    (tmp_path / "input.bin").write_bytes(inputs[0].tobytes())
    result = subprocess.run(
        [str(app), str(tmp_path / "input.bin")], capture_output=True, text=True, check=True
    )
    # main.c prints one output value per line, then "argmax: N"
    lines = result.stdout.splitlines()
    values = np.array([float(line) for line in lines if not line.startswith("argmax")])
    expected = reference(MODELS["mnist"], inputs)[0].ravel()
    np.testing.assert_allclose(values, expected, rtol=RTOL, atol=ATOL)
    assert f"argmax: {int(np.argmax(expected))}" in result.stdout


def test_two_models_in_one_program(built, tmp_path):
    mnist_in = random_inputs(MODELS["mnist"], seed=1)
    cnn_in = random_inputs(MODELS["cnn"], seed=2)
    mnist_out = reference(MODELS["mnist"], mnist_in)[0]
    cnn_out = reference(MODELS["cnn"], cnn_in)[0]
    source = tmp_path / "both.c"
    source.write_text(f"""
#include <stdio.h>
#include "mnist.h"
#include "cnn.h"
static float a_in[{mnist_in[0].size}], a_out[{mnist_out.size}];
static float b_in[{cnn_in[0].size}], b_out[{cnn_out.size}];
int main(void) {{
    FILE *f = fopen("a.bin", "rb"); if (fread(a_in, 4, {mnist_in[0].size}, f) != {mnist_in[0].size}) return 1; fclose(f);
    f = fopen("b.bin", "rb"); if (fread(b_in, 4, {cnn_in[0].size}, f) != {cnn_in[0].size}) return 1; fclose(f);
    if (mnist_run(a_in, a_out, NULL) != 0) return 2;
    if (cnn_run(b_in, b_out, NULL) != 0) return 3;
    f = fopen("a.out", "wb"); fwrite(a_out, 4, {mnist_out.size}, f); fclose(f);
    f = fopen("b.out", "wb"); fwrite(b_out, 4, {cnn_out.size}, f); fclose(f);
    return 0;
}}
""")
    program = build_c(
        [source], tmp_path / "both", [built], [built / "libmnist.a", built / "libcnn.a"]
    )
    (tmp_path / "a.bin").write_bytes(mnist_in[0].tobytes())
    (tmp_path / "b.bin").write_bytes(cnn_in[0].tobytes())
    subprocess.run([str(program)], cwd=tmp_path, check=True)
    got_a = np.frombuffer((tmp_path / "a.out").read_bytes(), np.float32).reshape(mnist_out.shape)
    got_b = np.frombuffer((tmp_path / "b.out").read_bytes(), np.float32).reshape(cnn_out.shape)
    np.testing.assert_allclose(got_a, mnist_out, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got_b, cnn_out, rtol=RTOL, atol=ATOL)


def test_artifacts_are_byte_identical(tmp_path):
    for out in ("one", "two"):
        result = run_cli("compile", MODELS["cnn"], "-o", tmp_path / out, "-q")
        assert result.returncode == 0, result.stderr
    for file in ("cnn.h", "cnn.o", "libcnn.a"):
        assert (tmp_path / "one" / file).read_bytes() == (tmp_path / "two" / file).read_bytes()


def test_python_api_runs_model():
    import aotc

    compiled = aotc.compile(MODELS["cnn"])
    inputs = random_inputs(MODELS["cnn"], seed=5)
    got = compiled.load()(*inputs)
    np.testing.assert_allclose(got[0], reference(MODELS["cnn"], inputs)[0], rtol=RTOL, atol=ATOL)


def test_generic_x86_64_v2_build_runs(tmp_path):
    """Code for the x86-64-v2 level (no AVX) links, runs and matches on this machine."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("x86-64 levels run only on an x86-64 host")
    build = tmp_path / "build"
    result = run_cli("compile", MODELS["cnn"], "-o", build, "--target", "x86_64:x86-64-v2", "-q")
    assert result.returncode == 0, result.stderr
    disassembly = subprocess.run(
        ["objdump", "-d", str(build / "cnn.o")], capture_output=True, text=True, check=True
    ).stdout
    assert "%ymm" not in disassembly and "%zmm" not in disassembly
    inputs = random_inputs(MODELS["cnn"], seed=7)
    expected = reference(MODELS["cnn"], inputs)
    source = tmp_path / "driver.c"
    source.write_text(generic_driver_source("cnn", len(inputs), len(expected)))
    program = build_c([source], tmp_path / "driver", [build], [build / "libcnn.a"])
    got = run_c_model(program, inputs, expected, tmp_path)
    np.testing.assert_allclose(got[0], expected[0], rtol=RTOL, atol=ATOL)
