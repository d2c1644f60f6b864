"""Parallel kernels: results do not depend on the thread count; the count comes from
NAME_set_num_threads, else $AOTC_NUM_THREADS, else the compile-time default."""

from __future__ import annotations

import os
import subprocess
import sys

import cffi
import numpy as np
import pytest
from test_gemm import _close, _conv_reference
from test_row_fusion import REDUCERS

from aotc.backends.cpu import emit_object, parse_target
from aotc.backends.cpu.contraction import _analyze
from aotc.backends.cpu.gemm_config import gemm_config
from aotc.backends.cpu.gemm_split import MAX_IMBALANCE, MIN_SHARED_PACKING, _imbalance, gemm_split
from aotc.buffers import assign_buffers
from aotc.ir import ComputationBuilder, ConvDims, DotDims, DType, Module, Op, Shape, Window
from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module
from aotc.passes.pipeline import make_pipeline

# big enough that the softmax rows and the elementwise chain run as parallel loops
MODEL = (
    """HloModule par
"""
    + REDUCERS
    + """
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
)

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
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == ["0", str(expected)]


# -- contractions shared out over the threads (gemm_split.py `Split`, depthwise planes) -

F32 = DType.F32


def _dot(b, x, y, batch=()):
    contracting = len(batch) + 1
    return b.dot(x, y, DotDims(batch, batch, (contracting,), (len(batch),)))


def _conv(b, x, w, pad, groups=1, stride=1):
    window = Window.make(w.shape.dims[2:], (stride, stride), (pad, pad), (pad, pad))
    return b.convolution(x, w, window, ConvDims.nchw(2), groups)


def _relu(b, y):
    zero = b.broadcast(b.scalar(0.0, F32), (), y.shape.dims)
    return b.binary(Op.MAXIMUM, y, zero)


def _conv_bias_relu(pad):
    def body(fb, p):
        y = _conv(fb, p[0], p[1], pad)
        return _relu(fb, fb.binary(Op.ADD, y, fb.broadcast(p[2], (1,), y.shape.dims)))

    return body


def test_splits_share_out_evenly():
    """Over the longer dimension unless its parts share out unevenly: 128 channels of
    784 pixels split over M (17 column panels in parts of 4 would run 12 on one thread
    and 5 on the other); 3136 pixels stay split over N."""
    config = gemm_config(parse_target("x86_64:skylake-avx512"), DType.F32)
    assert _imbalance(17, 4) > MAX_IMBALANCE and _imbalance(16, 1) == 1.0
    assert gemm_split(config, (), 128, 784, 1152).mode == "m"
    assert gemm_split(config, (), 64, 3136, 576).mode == "n"
    for m, n, k in [(128, 784, 1152), (64, 3136, 576), (256, 196, 2304), (512, 49, 4608)]:
        split = gemm_split(config, (), m, n, k)
        width = split.blocks.mr if split.mode == "m" else split.blocks.nr
        panels = -(-(m if split.mode == "m" else n) // width)
        assert _imbalance(panels, split.per) <= MAX_IMBALANCE, (m, n, k)


def test_contractions_do_not_depend_on_the_thread_count(compile_module, fuse, same_across_threads):
    """GEMMs (split over M and N blocks, batched), gemvs, depthwise convolutions and
    convolutions on image planes big enough to share out, some with fused epilogues:
    bitwise equal at 1, 2 and 3 threads and close to numpy (float64)."""
    rng = np.random.default_rng(5)
    module = Module("pdot")
    b = ComputationBuilder(module, "main")
    specs = [  # input shapes, then how to build the output from the parameters
        ([(200, 300), (300, 150)], lambda p: _dot(b, *p)),
        ([(3, 64, 80), (3, 80, 96)], lambda p: _dot(b, *p, batch=(0,))),
        ([(9, 48, 64), (9, 64, 72)], lambda p: _dot(b, *p, batch=(0,))),  # GEMM per unit
        ([(1, 700), (700, 2003)], lambda p: _dot(b, *p)),  # gemv.axpy, ragged tail
        ([(3001, 500), (500, 1)], lambda p: _dot(b, *p)),  # gemv.dot
        (
            [(1, 64, 7, 7), (128, 64, 3, 3), (128,)],  # ResNet's last stage: N = 49
            lambda p: fuse(b, p, _conv_bias_relu(1)),
        ),
        ([(1, 32, 56, 56), (64, 32, 3, 3), (64,)], lambda p: fuse(b, p, _conv_bias_relu(1))),
        ([(2, 16, 20, 20), (32, 8, 3, 3)], lambda p: _conv(b, *p, pad=1, groups=2)),
        ([(2, 32, 40, 40), (32, 1, 3, 3)], lambda p: _conv(b, *p, pad=1, groups=32)),
        ([(384, 300), (300, 256)], lambda p: _dot(b, *p)),  # B blocks packed in parallel
        ([(256, 300), (300, 2048)], lambda p: _dot(b, *p)),  # A blocks packed in parallel
        ([(2, 24, 57, 57), (40, 24, 3, 3)], lambda p: _conv(b, *p, pad=1, stride=2)),
        ([(1024, 256), (256, 1)], lambda p: _dot(b, *p)),  # an LSTM step's gates (256)
        ([(192, 1152), (1152, 49)], lambda p: _dot(b, *p)),  # B packed whole: 3 K slices
    ]
    outputs, args, count = [], [], 0
    for shapes, make in specs:
        params = [b.parameter(count + i, Shape(F32, s)) for i, s in enumerate(shapes)]
        count += len(shapes)
        outputs.append(make(params))
        args.append([rng.standard_normal(s).astype(np.float32) for s in shapes])
    b.build(b.tuple(outputs), entry=True)
    compiled = compile_module(module)
    target = parse_target("host")
    modes = []
    for out in outputs:  # each of them shared out, not left on the calling thread
        plan = _analyze(target, compiled.plan, out).plans[-1]
        modes.append(plan.kind if plan.kind in ("depthwise", "planes") else plan.split.mode)
    assert modes == [
        "m",
        "m",
        "batch",
        "batch",
        "batch",
        "m",
        "planes",
        "planes",  # grouped: (run of tiles, group) units
        "depthwise",
        "m",
        "n",
        "planes",
        "batch",
        "m",
    ]
    plans = [_analyze(target, compiled.plan, out).plans[-1] for out in outputs]
    whole = [getattr(getattr(plan, "split", None), "whole_b", False) for plan in plans]
    assert [k for k, w in enumerate(whole) if w] == [len(outputs) - 1]
    for out in outputs[-5:-3]:
        blocks = _analyze(target, compiled.plan, out).plans[-1].split.blocks
        shared = blocks.nb if out is outputs[-5] else blocks.mb
        assert shared * blocks.kc >= MIN_SHARED_PACKING
    flat = [a for group in args for a in group]
    results = same_across_threads(compiled, flat)
    expected = [
        args[0][0].astype(np.float64) @ args[0][1],
        np.einsum("bmk,bkn->bmn", args[1][0].astype(np.float64), args[1][1]),
        np.einsum("bmk,bkn->bmn", args[2][0].astype(np.float64), args[2][1]),
        args[3][0].astype(np.float64) @ args[3][1],
        args[4][0].astype(np.float64) @ args[4][1],
    ]
    for x, w, bias in (args[5], args[6]):
        conv = _conv_reference(x, w, (1, 1), (1, 1), (1, 1), (1, 1), 1)
        expected.append(np.maximum(conv + bias[None, :, None, None], 0))
    expected.append(_conv_reference(*args[7], (1, 1), (1, 1), (1, 1), (1, 1), 2))
    expected.append(_conv_reference(*args[8], (1, 1), (1, 1), (1, 1), (1, 1), 32))
    expected += [x.astype(np.float64) @ y for x, y in args[9:11]]
    expected.append(_conv_reference(*args[11], (2, 2), (1, 1), (1, 1), (1, 1), 1))
    expected += [x.astype(np.float64) @ y for x, y in args[12:14]]
    for k, (got, want) in enumerate(zip(results, expected)):
        _close(got, want, f"output {k}")


def test_small_contractions_stay_on_the_calling_thread(compile_module):
    """Below the work threshold a GEMM is not split (no dispatch, serial workspace)."""
    module = Module("small")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, (32, 40)))
    y = b.parameter(1, Shape(F32, (40, 48)))
    out = _dot(b, x, y)
    b.build(b.tuple([out]), entry=True)
    compiled = compile_module(module)
    plan = _analyze(parse_target("host"), compiled.plan, out).plans[-1]
    assert plan.kind == "gemm" and plan.split is None
    assert b"aotc_parallel_for" not in compiled.obj
