"""Parallel kernels: results do not depend on the thread count; the count comes from
NAME_set_num_threads, else $AOTC_NUM_THREADS, else the compile-time default."""

from __future__ import annotations

import os
import subprocess
import sys

import cffi
import numpy as np
import pytest
from test_row_fusion import REDUCERS

from aotc.backends.cpu import emit_object, parse_target
from aotc.buffers import assign_buffers
from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module
from aotc.passes.pipeline import make_pipeline

# big enough that the softmax rows and the elementwise chain run as parallel loops
MODEL = """HloModule par
""" + REDUCERS + """
ENTRY %main (x: f32[96,300], y: f32[96,300]) -> (f32[96,300], f32[96,300]) {
  %x = f32[96,300]{1,0} parameter(0)
  %y = f32[96,300]{1,0} parameter(1)
  %ninf = f32[] constant(-inf)
  %mx = f32[96]{0} reduce(f32[96,300]{1,0} %x, f32[] %ninf), dimensions={1}, to_apply=%max
  %mxb = f32[96,300]{1,0} broadcast(f32[96]{0} %mx), dimensions={0}
  %e = f32[96,300]{1,0} exponential(f32[96,300]{1,0} %x)
  %em = f32[96,300]{1,0} exponential(f32[96,300]{1,0} %mxb)
  %q = f32[96,300]{1,0} divide(f32[96,300]{1,0} %e, f32[96,300]{1,0} %em)
  %zero = f32[] constant(0)
  %sum = f32[96]{0} reduce(f32[96,300]{1,0} %q, f32[] %zero), dimensions={1}, to_apply=%add
  %sb = f32[96,300]{1,0} broadcast(f32[96]{0} %sum), dimensions={0}
  %soft = f32[96,300]{1,0} divide(f32[96,300]{1,0} %q, f32[96,300]{1,0} %sb)
  %t = f32[96,300]{1,0} tanh(f32[96,300]{1,0} %y)
  %chain = f32[96,300]{1,0} multiply(f32[96,300]{1,0} %t, f32[96,300]{1,0} %y)
  ROOT %out = (f32[96,300]{1,0}, f32[96,300]{1,0}) tuple(%soft, %chain)
}"""

PROTOTYPES = """
int par_run(void *, void *, void *, void *, void *);
void par_set_num_threads(int);
int aotc_get_num_threads(void);
"""


@pytest.fixture
def library(tmp_path, link):
    """(compile(threads) -> path of a shared library, inputs, expected outputs)."""
    module = parse_module(MODEL)
    make_pipeline(2).run(module)
    plan = assign_buffers(module)

    def compile_(threads: int = 1):
        obj = emit_object(module, plan, "par", parse_target("host"), threads)
        return link({"par": obj})

    rng = np.random.default_rng(3)
    inputs = [rng.uniform(-3, 3, (96, 300)).astype(np.float32) for _ in range(2)]
    expected = evaluate(parse_module(MODEL), inputs)
    return compile_, inputs, expected, plan.scratch_bytes


def _run(lib, ffi, inputs, scratch_bytes):
    outputs = [np.zeros((96, 300), np.float32) for _ in range(2)]
    scratch = np.zeros(scratch_bytes + 64, np.uint8)
    start = (-scratch.ctypes.data) % 64
    args = [ffi.from_buffer(a) for a in [*inputs, *outputs]]
    assert lib.par_run(*args, ffi.from_buffer(scratch[start:])) == 0
    return outputs


def test_results_do_not_depend_on_the_thread_count(library):
    compile_, inputs, expected, scratch_bytes = library
    ffi = cffi.FFI()
    ffi.cdef(PROTOTYPES)
    lib = ffi.dlopen(str(compile_()))
    one = _run(lib, ffi, inputs, scratch_bytes)
    assert lib.aotc_get_num_threads() == 1
    lib.par_set_num_threads(3)
    assert lib.aotc_get_num_threads() == 3
    three = _run(lib, ffi, inputs, scratch_bytes)
    lib.par_set_num_threads(1)  # joins the workers before the library is dropped
    for a, b, e in zip(one, three, expected):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, e, rtol=2e-6, atol=1e-6)


# a fresh process: the library's first run picks the count (its runtime is its own)
CHILD = """
import sys, cffi, numpy as np
ffi = cffi.FFI()
ffi.cdef("int par_run(void *, void *, void *, void *, void *); int aotc_get_num_threads(void);")
lib = ffi.dlopen(sys.argv[1])
buffers = [np.zeros((96, 300), np.float32) for _ in range(4)]
status = lib.par_run(*[ffi.from_buffer(b) for b in buffers], ffi.NULL)
print(status, lib.aotc_get_num_threads())
"""


@pytest.mark.parametrize(("env", "default", "expected"), [(None, 2, 2), ("4", 2, 4), ("x", 3, 3)])
def test_thread_count_from_environment_else_compile_default(library, env, default, expected):
    compile_, *_ = library
    environment = {k: v for k, v in os.environ.items() if k != "AOTC_NUM_THREADS"}
    if env is not None:
        environment["AOTC_NUM_THREADS"] = env
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(compile_(default))],
        env=environment, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.split() == ["0", str(expected)]
