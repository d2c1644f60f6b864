"""`--weights external`: the weights in NAME.weights beside a small NAME.o, handed over
with NAME_set_weights / NAME_load_weights (checked: size, alignment, checksum), from
Python (LoadedModel) and from a C program, with the same outputs as the embedded build.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from aotc_testing import build_c, run_cli
from onnx import TensorProto, helper, numpy_helper

from aotc.artifacts import weights_checksum
from aotc.driver import CompileOptions, compile_model
from aotc.errors import AotcError

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

NAME = "big"
# 4 MiB of matmul weights (and a small convolution): the external object stays below this
EXTERNAL_OBJECT_BOUND = 256 * 1024


def big_model():
    """x[1,3,16,16] -> conv 3x3 (16 channels) -> relu -> flatten[1,4096] -> matmul by
    4096x256 (4 MiB of f32)."""
    rng = np.random.default_rng(7)
    conv = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    matrix = rng.standard_normal((4096, 256)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])
    nodes = [
        helper.make_node("Conv", ["x", "conv"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "matrix"], ["y"]),
    ]
    initializers = [
        numpy_helper.from_array(conv, "conv"),
        numpy_helper.from_array(matrix, "matrix"),
    ]
    graph = helper.make_graph(nodes, "big", [x], [y], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """mode -> (CompiledModel, its ArtifactPaths), and the input the tests run."""
    model = big_model()
    built = {}
    for mode in ("embedded", "external"):
        compiled = compile_model(model, CompileOptions(name=NAME, weights=mode))
        built[mode] = (compiled, compiled.write(tmp_path_factory.mktemp(mode)))
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    return built, x


def header_macro(header: str, macro: str) -> str:
    return re.search(rf"#define {macro} (\S+)", header).group(1)


def test_both_modes_give_the_same_outputs(builds):
    built, x = builds
    embedded, external = (built[mode][0].load()(x)[0] for mode in ("embedded", "external"))
    np.testing.assert_array_equal(external, embedded)  # the same kernels: exact


def test_external_object_is_small_and_the_file_is_as_the_header_says(builds):
    built, _ = builds
    embedded, external = built["embedded"][1], built["external"][1]
    assert external.object.stat().st_size < EXTERNAL_OBJECT_BOUND
    assert embedded.object.stat().st_size > 4 * 2**20
    assert embedded.weights is None and not (embedded.object.parent / f"{NAME}.weights").exists()
    data = external.weights.read_bytes()
    header = external.header.read_text()
    assert header_macro(header, "BIG_WEIGHTS_BYTES") == f"{len(data)}u"
    checksum = int(header_macro(header, "BIG_WEIGHTS_CHECKSUM")[len("UINT64_C(") : -1], 16)
    assert checksum == weights_checksum(data)
    assert "big_set_weights" not in embedded.header.read_text()


C_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "big.h"

/* argv: weights file, input file; prints the statuses of bad hand-overs, then the
 * outputs of a run with the file read into memory and of one with it mapped. */
static int run(float *x, float *y) { return big_run(x, y, NULL); }

int main(int argc, char **argv) {
    static float x[BIG_X_SIZE], y[BIG_Y_SIZE];
    int status;
    unsigned char *weights = aligned_alloc(64, BIG_WEIGHTS_BYTES + 64);
    FILE *f = fopen(argv[1], "rb");
    if (argc != 3 || !f || fread(weights, 1, BIG_WEIGHTS_BYTES, f) != BIG_WEIGHTS_BYTES) return 10;
    fclose(f);
    f = fopen(argv[2], "rb");
    if (!f || fread(x, sizeof x, 1, f) != 1) return 11;
    fclose(f);
    printf("unset %d\n", run(x, y));
    printf("size %d\n", big_set_weights(weights, BIG_WEIGHTS_BYTES - 1));
    printf("after-size %d\n", run(x, y));
    memmove(weights + 1, weights, BIG_WEIGHTS_BYTES);
    printf("misaligned %d\n", big_set_weights(weights + 1, BIG_WEIGHTS_BYTES));
    memmove(weights, weights + 1, BIG_WEIGHTS_BYTES);
    weights[BIG_WEIGHTS_BYTES / 2] ^= 1;
    printf("corrupted %d\n", big_set_weights(weights, BIG_WEIGHTS_BYTES));
    printf("after-corrupted %d\n", run(x, y));
    printf("missing-file %d\n", big_load_weights("no/such.weights"));
    weights[BIG_WEIGHTS_BYTES / 2] ^= 1;
    status = big_set_weights(weights, BIG_WEIGHTS_BYTES);
    printf("read %d %d\n", status, run(x, y));
    for (int i = 0; i < BIG_Y_SIZE; i++) printf("%a\n", y[i]);
    memset(y, 0, sizeof y);
    status = big_load_weights(argv[1]);
    printf("mapped %d %d\n", status, run(x, y));
    for (int i = 0; i < BIG_Y_SIZE; i++) printf("%a\n", y[i]);
    return 0;
}
"""

EXPECTED_STATUSES = {
    "unset": "4",  # NAME_run refuses until weights are set
    "size": "1",
    "after-size": "4",
    "misaligned": "2",
    "corrupted": "3",
    "after-corrupted": "4",
    "missing-file": "4",
    "read": "0 0",
    "mapped": "0 0",
}


def test_c_program_hands_over_the_file(builds, tmp_path):
    built, x = builds
    paths = built["external"][1]
    source = tmp_path / "app.c"
    source.write_text(C_PROGRAM)
    program = build_c([source], tmp_path / "app", [paths.header.parent], [paths.library])
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    # two threads: the kernels' parallel bodies read the weights pointer too
    result = subprocess.run(
        [program, paths.weights, tmp_path / "x.bin"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "AOTC_NUM_THREADS": "2"},
    )
    lines = result.stdout.splitlines()
    statuses = dict(line.split(" ", 1) for line in lines if not line.startswith(("0x", "-0x")))
    assert statuses == EXPECTED_STATUSES
    read, mapped = lines[8 : 8 + 256], lines[9 + 256 :]
    expected = built["embedded"][0].load()(x)[0].ravel()
    for outputs in (read, mapped):
        np.testing.assert_array_equal(np.array([float.fromhex(v) for v in outputs]), expected)


def test_loaded_model_refuses_other_weights(builds):
    built, x = builds
    compiled = built["external"][0]
    loaded = compiled.load()
    corrupted = bytearray(bytes(compiled.weights_file.data))
    corrupted[100] ^= 0x80
    with pytest.raises(AotcError, match="returned 3: not the model's weights"):
        loaded.set_weights(bytes(corrupted))
    with pytest.raises(AotcError, match="returned 4: no weights are set"):
        loaded(x)
    loaded.set_weights(compiled.weights_file.data)
    np.testing.assert_array_equal(loaded(x)[0], built["embedded"][0].load()(x)[0])


def test_a_repeater_keeps_the_weights(builds):
    built, x = builds
    repeat = built["external"][0].load().repeater([x])  # the LoadedModel goes at once
    gc.collect()
    repeat()  # its weights copy (and scratch) still there


def test_an_embedded_build_removes_a_stale_weights_file(builds, tmp_path):
    built, _ = builds
    assert built["external"][0].write(tmp_path).weights.is_file()
    built["embedded"][0].write(tmp_path)
    assert not (tmp_path / f"{NAME}.weights").exists()


def test_unknown_weights_mode_is_refused(tmp_path):
    result = run_cli("compile", "nope.onnx", "--weights", "foo", "-o", tmp_path / "out")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--weights" in result.stderr and "'foo'" in result.stderr
    with pytest.raises(AotcError, match="--weights foo: CPU code takes embedded or external"):
        compile_model(big_model(), CompileOptions(weights="foo"))
    with pytest.raises(AotcError, match="--weights external: CUDA code takes embedded"):
        compile_model(big_model(), CompileOptions(target="cuda:sm_80", weights="external"))
