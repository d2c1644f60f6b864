"""Bounded dims on the CUDA backend: the padded program (passes/bounded_dims.py) runs
emulated (tests/cuda/cuda_testing.py), and on a GPU where there is one, matching
onnxruntime at several batch sizes (rtol 1e-4, atol 1e-5); its elementwise kernels and
reductions stop at the extents (NaN in the inputs' padding shows a read of it)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from bounded_models import encoder_layer, mlp
from cuda_testing import RUNNERS, c_compiler, require_ptxas

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
