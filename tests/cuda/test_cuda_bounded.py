"""Bounded dims on the CUDA backend: the padded program (passes/bounded_dims.py) runs
emulated (tests/cuda/cuda_testing.py), and on a GPU where there is one, matching
onnxruntime at several batch sizes (rtol 1e-4, atol 1e-5); its elementwise kernels and
reductions stop at the extents (NaN in the inputs' padding shows a read of it)."""

from __future__ import annotations

import subprocess

import numpy as np
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
)

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
