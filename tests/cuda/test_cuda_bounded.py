"""Bounded dims on the CUDA backend: the padded program (passes/bounded_dims.py) runs
emulated (tests/cuda/cuda_testing.py), and on a GPU where there is one, matching
onnxruntime at several batch sizes (rtol 1e-4, atol 1e-5; TF32 tensor cores 2e-2); its
kernels stop at the extents (NaN in the inputs' padding shows a read of it), and do less
work for smaller extents: the emulator counts each kernel's synchronizations (barriers,
warp shuffles), which a GEMM's tiles and depth steps, a row's and a sort's blocks make."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from bounded_models import encoder_layer, mlp
from cuda_testing import (
    RUNNERS,
    build_emulation,
    c_compiler,
    fake_driver,
    fake_environment,
    link_program,
    require_ptxas,
    run_emulated,
)
from onnx import TensorProto, helper, numpy_helper

from aotc.driver import CompileOptions, compile_model
from aotc.ir.bounds import DimRange


@pytest.mark.parametrize("runner", RUNNERS)
def test_mlp_for_batch_1_to_8_on_cuda(runner, tmp_path):
    require_ptxas()
    c_compiler()
    model = mlp()
    options = CompileOptions(target="cuda:sm_80", dim_extents={"batch": DimRange(1, 8)})
    compiled = compile_model(model, options)
    bounds = compiled.module.bounds
    session = ort.InferenceSession(model.SerializeToString())
    like = [np.zeros(t.dims, t.dtype.numpy) for t in compiled.outputs]
    for batch in (1, 3, 8):
        x = np.random.default_rng(batch).standard_normal((batch, 32)).astype(np.float32)
        args = bounds.padded_args([(8, 32)], [x])
        workdir = tmp_path / str(batch)
        workdir.mkdir()
        got = bounds.actual_outputs(runner(compiled, args, like, workdir))
        for have, want in zip(got, session.run(None, {"x": x})):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("runner", RUNNERS)
def test_encoder_layer_for_batch_and_sequence_on_cuda(runner, tmp_path):
    require_ptxas()
    c_compiler()
    model = encoder_layer(hidden=32)
    ranges = {"batch": DimRange(1, 2), "seq": DimRange(1, 12)}
    compiled = compile_model(model, CompileOptions(target="cuda:sm_80", dim_extents=ranges))
    bounds = compiled.module.bounds
    session = ort.InferenceSession(model.SerializeToString())
    like = [np.zeros(t.dims, t.dtype.numpy) for t in compiled.outputs]
    for batch, seq in ((1, 1), (2, 5), (2, 12)):
        x = np.random.default_rng(seq).standard_normal((batch, seq, 32)).astype(np.float32)
        args = bounds.padded_args([(2, 12, 32)], [x], fill=np.nan)
        workdir = tmp_path / f"{batch}x{seq}"
        workdir.mkdir()
        got = bounds.actual_outputs(runner(compiled, args, like, workdir))
        for have, want in zip(got, session.run(None, {"x": x})):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


# the kernels whose work the emulator's counts measure
COUNTED_KINDS = ("gemm", "row", "reduction", "sort")


def _run_counted(compiled, session, feeds: dict, workdir, tolerance) -> dict[str, int]:
    """Run emulated on `feeds` (NaN in the inputs' padding and in every byte of device
    memory before the run), compare with onnxruntime, and return each kernel's count of
    synchronizations."""
    bounds = compiled.module.bounds
    workdir.mkdir()
    like = [np.zeros(t.dims, t.dtype.numpy) for t in compiled.outputs]
    at_bounds = [tuple(t.dims) for t in compiled.inputs[: len(feeds)]]
    args = bounds.padded_args(at_bounds, list(feeds.values()), fill=np.nan)
    counts = workdir / "counts.txt"
    outputs = run_emulated(compiled, args, like, workdir, counts=counts, fill="ff")
    got = bounds.actual_outputs(outputs)
    for have, want in zip(got, session.run(None, feeds)):
        assert have.shape == want.shape
        np.testing.assert_allclose(have, want, **tolerance)
    rows = (line.split() for line in counts.read_text().splitlines())
    return {name: int(count) for name, count in rows}


def _less_work(compiled, small: dict[str, int], large: dict[str, int]) -> float:
    """Check that every counted kernel that synchronizes at the larger extents does so
    less at the smaller ones; the ratio of their totals."""
    counted = [k.name for k in compiled.program.launches if k.kind in COUNTED_KINDS]
    busy = [name for name in counted if large[name]]
    assert busy, "no kernel synchronizes: nothing is measured"
    assert [n for n in busy if small[n] >= large[n]] == [], (small, large)
    return sum(small[n] for n in busy) / sum(large[n] for n in busy)


@pytest.mark.parametrize(
    "target, tolerance",
    [
        ("cuda:sm_80", {"rtol": 1e-4, "atol": 1e-5}),
        ("cuda:sm_90+tf32", {"rtol": 2e-2, "atol": 2e-2}),
    ],
    ids=["simt", "tf32-mma"],
)
def test_gemm_and_row_kernels_skip_what_the_call_does_not_need(target, tolerance, tmp_path):
    """An encoder layer whose GEMMs are tiled (SIMT, or TF32 tensor cores): blocks of tiles
    past the extents return at once, the attention's P V stops at the keys' extent, and
    softmax and layer-norm rows past them are skipped: at batch 1 x seq 5 the kernels
    synchronize under a fifth as often as at the bounds 2 x 64."""
    require_ptxas()
    c_compiler()
    model = encoder_layer(hidden=64)
    ranges = {"batch": DimRange(1, 2), "seq": DimRange(1, 64)}
    compiled = compile_model(model, CompileOptions(target=target, dim_extents=ranges))
    kinds = [k.kind for k in compiled.program.launches]
    assert kinds.count("gemm") >= 5 and "row" in kinds, kinds
    session = ort.InferenceSession(model.SerializeToString())
    counts = []
    for batch, seq in ((1, 5), (2, 64)):
        x = np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)
        counts.append(
            _run_counted(compiled, session, {"x": x}, tmp_path / f"{batch}x{seq}", tolerance)
        )
    assert _less_work(compiled, *counts) < 0.2


def _conv_gemv_topk() -> onnx.ModelProto:
    """x [batch, 256] @ W [256, 512] (a matrix-vector product: few rows), its top 16 per
    row (a sort per row), and relu(conv3x3(img [batch, 8, 16, 16])) (an implicit GEMM
    over the batch's pixels)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((256, 512)) / 16).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) / 8).astype(np.float32), "k"),
        numpy_helper.from_array(np.array([16], np.int64), "top"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("TopK", ["y", "top"], ["values", "indices"], axis=-1),
        helper.make_node("Conv", ["img", "k"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
    ]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "m",
        [
            info("x", TensorProto.FLOAT, ["batch", 256]),
            info("img", TensorProto.FLOAT, ["batch", 8, 16, 16]),
        ],
        [
            info("y", TensorProto.FLOAT, ["batch", 512]),
            info("values", TensorProto.FLOAT, ["batch", 16]),
            info("indices", TensorProto.INT64, ["batch", 16]),
            info("r", TensorProto.FLOAT, ["batch", 16, 16, 16]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_gemv_conv_and_sort_kernels_skip_what_the_call_does_not_need(tmp_path):
    """The matrix-vector kernel sums only the needed rows, the convolution's GEMM only
    the needed images' pixels, the sort only the needed rows: right at batch 1, 3 and 8,
    and the conv's and sort's blocks past the batch return at once."""
    require_ptxas()
    c_compiler()
    model = _conv_gemv_topk()
    options = CompileOptions(target="cuda:sm_80", dim_extents={"batch": DimRange(1, 8)})
    compiled = compile_model(model, options)
    kinds = [k.kind for k in compiled.program.launches]
    assert {"gemv", "gemm", "sort"} <= set(kinds), kinds
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(1)
    counts = {}
    for batch in (1, 3, 8):
        feeds = {
            "x": rng.standard_normal((batch, 256)).astype(np.float32),
            "img": rng.standard_normal((batch, 8, 16, 16)).astype(np.float32),
        }
        tolerance = {"rtol": 1e-4, "atol": 1e-5}
        counts[batch] = _run_counted(compiled, session, feeds, tmp_path / str(batch), tolerance)
    assert _less_work(compiled, counts[1], counts[8]) < 0.2
    assert _less_work(compiled, counts[3], counts[8]) < 0.5


BOUNDED_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"

/* argv: batch, the input file, the outputs file: runs mlp_cuda_run_bounded on compact
 * device buffers, writes each output's dims then its elements. */
int main(int argc, char **argv) {
    (void)argc;
    int64_t batch = atoll(argv[1]);
    size_t in_bytes = (size_t)batch * 32 * sizeof(float);
    float *x = malloc(in_bytes);
    FILE *in = fopen(argv[2], "rb");
    if (fread(x, 1, in_bytes, in) != in_bytes) return 4;
    fclose(in);
    mlp_cuda_ctx ctx;
    if (mlp_cuda_init(&ctx, 0) != 0) { puts(mlp_cuda_last_error(&ctx)); return 1; }
    aotc_cuda_ptr dx, dp, ds, scratch;
    aotc_cuda_malloc(&dx, in_bytes);
    aotc_cuda_upload(dx, x, in_bytes);
    aotc_cuda_malloc(&dp, MLP_P_BYTES);
    aotc_cuda_malloc(&ds, MLP_S_BYTES);
    aotc_cuda_malloc(&scratch, MLP_CUDA_BOUNDED_SCRATCH_BYTES);
    const aotc_cuda_ptr inputs[] = {dx};
    const aotc_cuda_ptr outputs[] = {dp, ds};
    int64_t in_dims[] = {batch, 32}, out_dims[3];
    if (mlp_cuda_run_bounded(&ctx, inputs, in_dims, outputs, out_dims, scratch, NULL) != 0) {
        puts(mlp_cuda_last_error(&ctx));
        return 2;
    }
    float p[8 * 10], s[10];
    aotc_cuda_download(p, dp, (size_t)(out_dims[0] * out_dims[1]) * sizeof(float));
    aotc_cuda_download(s, ds, sizeof s);
    FILE *out = fopen(argv[3], "wb");
    fwrite(out_dims, sizeof(int64_t), 3, out);
    fwrite(p, sizeof(float), (size_t)(out_dims[0] * out_dims[1]), out);
    fwrite(s, sizeof(float), 10, out);
    fclose(out);
    int64_t wrong[] = {9, 32};  /* past the bound: refused */
    return mlp_cuda_run_bounded(&ctx, inputs, wrong, outputs, out_dims, scratch, NULL) ==
                   AOTC_CUDA_ERROR_EXTENT ? 0 : 3;
}
"""


def test_run_bounded_on_compact_device_buffers(tmp_path):
    """mlp_cuda_run_bounded (the header's) pads compact device buffers, runs, and cuts the
    outputs back, emulated under the stand-in driver."""
    require_ptxas()
    c_compiler()
    model = mlp()
    options = CompileOptions(target="cuda:sm_80", name="mlp", dim_extents={"batch": DimRange(1, 8)})
    compiled = compile_model(model, options)
    build = tmp_path / "build"
    compiled.write(build)
    source = tmp_path / "main.c"
    source.write_text(BOUNDED_PROGRAM)
    program = link_program(source, build, "mlp", tmp_path / "main")
    library, _ = build_emulation(compiled, tmp_path / "emulation")
    env = fake_environment(fake_driver(tmp_path / "fake"), library)
    session = ort.InferenceSession(model.SerializeToString())
    for batch in (1, 3, 8):
        x = np.random.default_rng(batch).standard_normal((batch, 32)).astype(np.float32)
        (tmp_path / "x.bin").write_bytes(x.tobytes())
        result = subprocess.run(
            [str(program), str(batch), str(tmp_path / "x.bin"), str(tmp_path / "out.bin")],
            check=False,
            env=env,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
        raw = (tmp_path / "out.bin").read_bytes()
        dims = np.frombuffer(raw[:24], np.int64)
        assert list(dims) == [batch, 10, 10]
        p = np.frombuffer(raw[24 : 24 + batch * 40], np.float32).reshape(batch, 10)
        s = np.frombuffer(raw[24 + batch * 40 :], np.float32)
        want = session.run(None, {"x": x})
        np.testing.assert_allclose(p, want[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(s, want[1], rtol=1e-4, atol=1e-5)
