"""Throughput of elementwise kernels (exp, SiLU, GELU, softmax): aotc vs numpy.

    python bench/elementwise.py [--target host] [--rows 1024] [--cols 1024] [--repeat 50]

Each kernel is one f32 [rows, cols] -> [rows, cols] model, fused by the optimizer and
compiled for the target; it runs single-threaded from ctypes.  Throughput counts the input
read once and the output written once (8 bytes per element), medians of `--repeat` calls.
Columns: aotc with the inline vector math, aotc calling libm instead (the code before
vmath.py), numpy's equivalent expression (none for erf, which numpy lacks).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np

from aotc.backends.cpu import emit_object, parse_target
from aotc.backends.llvm import vmath
from aotc.buffers import assign_buffers
from aotc.ir import ComputationBuilder, DType, Instruction, Module, Op, Shape
from aotc.ir.builder import scalar_reducer
from aotc.passes.pipeline import make_pipeline

F32 = DType.F32


def _scale(b: ComputationBuilder, x: Instruction, factor: float) -> Instruction:
    return b.binary(Op.MULTIPLY, x, b.broadcast(b.scalar(factor, F32), [], x.shape.dims))


def _plus_one(b: ComputationBuilder, x: Instruction) -> Instruction:
    return b.binary(Op.ADD, x, b.broadcast(b.scalar(1.0, F32), [], x.shape.dims))


def exp(b, x):
    return b.unary(Op.EXP, x)


def silu(b, x):
    return b.binary(Op.MULTIPLY, x, b.unary(Op.LOGISTIC, x))


def gelu_erf(b, x):
    erf = b.unary(Op.ERF, _scale(b, x, 0.7071067811865476))
    return b.binary(Op.MULTIPLY, _scale(b, x, 0.5), _plus_one(b, erf))


def gelu_tanh(b, x):
    cube = b.binary(Op.MULTIPLY, b.binary(Op.MULTIPLY, x, x), x)
    inner = _scale(b, b.binary(Op.ADD, x, _scale(b, cube, 0.044715)), 0.7978845608028654)
    return b.binary(Op.MULTIPLY, _scale(b, x, 0.5), _plus_one(b, b.unary(Op.TANH, inner)))


def softmax(b, x):
    dims = x.shape.dims
    reducer = scalar_reducer(b.module, Op.MAXIMUM, F32)
    top = b.reduce(x, b.scalar(float("-inf"), F32), [1], reducer)
    e = b.unary(Op.EXP, b.binary(Op.SUBTRACT, x, b.broadcast(top, [0], dims)))
    total = b.reduce(e, b.scalar(0.0, F32), [1], scalar_reducer(b.module, Op.ADD, F32))
    return b.binary(Op.DIVIDE, e, b.broadcast(total, [0], dims))


def np_softmax(x, out):
    np.subtract(x, x.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)


def np_silu(x, out):
    np.exp(-x, out=out)
    out += 1.0
    np.divide(x, out, out=out)


def np_gelu_tanh(x, out):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    np.tanh(inner, out=out)
    out += 1.0
    out *= 0.5 * x


KERNELS: dict[str, tuple[Callable, Callable | None]] = {
    "exp": (exp, lambda x, out: np.exp(x, out=out)),
    "silu": (silu, np_silu),
    "gelu-erf": (gelu_erf, None),
    "gelu-tanh": (gelu_tanh, np_gelu_tanh),
    "softmax": (softmax, np_softmax),
}


def compile_kernel(name: str, dims: tuple[int, int], target: str, directory: Path):
    """The kernel's model compiled, linked and loaded: a `run(x, out)` function."""
    module = Module(name.replace("-", "_"))
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(F32, dims))
    b.build(KERNELS[name][0](b, x), entry=True)
    make_pipeline(2).run(module)
    plan = assign_buffers(module)
    symbol = module.name
    obj = directory / f"{symbol}.o"
    obj.write_bytes(emit_object(module, plan, symbol, parse_target(target)))
    library = directory / f"lib{symbol}.so"
    subprocess.run(["cc", "-shared", "-o", str(library), str(obj)], check=True)
    lib = ctypes.CDLL(str(library))
    entry = getattr(lib, f"{symbol}_run")
    entry.argtypes = [ctypes.c_void_p] * 3
    scratch = np.zeros(plan.scratch_bytes + 64, np.uint8)
    aligned = scratch.ctypes.data + (-scratch.ctypes.data) % 64

    def run(x: np.ndarray, out: np.ndarray) -> None:
        entry(x.ctypes.data, out.ctypes.data, aligned)

    run.keep = (lib, scratch)  # the library and arena live as long as `run`
    return run


def seconds_per_call(run: Callable, x: np.ndarray, out: np.ndarray, repeat: int) -> float:
    run(x, out)  # warm caches and pages
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(x, out)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="host")
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("kernels", nargs="*", default=list(KERNELS))
    args = parser.parse_args()
    dims = (args.rows, args.cols)
    x = np.random.default_rng(0).uniform(-6, 6, dims).astype(np.float32)
    out = np.empty_like(x)
    gigabytes = 8 * x.size / 1e9
    print(f"f32 {dims[0]}x{dims[1]}, target {parse_target(args.target).describe()}, GB/s")
    print(f"{'kernel':<10} {'aotc':>8} {'aotc+libm':>10} {'numpy':>8} {'vs numpy':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.kernels:
            fast = compile_kernel(name, dims, args.target, Path(tmp))
            libm_dir = Path(tmp) / "libm"
            libm_dir.mkdir(exist_ok=True)
            with mock.patch.dict(vmath.F32_UNARY, clear=True):  # the scalar libm calls
                slow = compile_kernel(name, dims, args.target, libm_dir)
            rates = [gigabytes / seconds_per_call(run, x, out, args.repeat) for run in (fast, slow)]
            reference = KERNELS[name][1]
            if reference is None:
                numpy_rate, ratio = "-", "-"
            else:
                expected = np.empty_like(x)
                reference(x, expected)
                fast(x, out)
                np.testing.assert_allclose(out, expected, rtol=1e-5, atol=2e-6, err_msg=name)
                rate = gigabytes / seconds_per_call(reference, x, out, args.repeat)
                numpy_rate, ratio = f"{rate:.2f}", f"{rates[0] / rate:.1f}x"
            print(f"{name:<10} {rates[0]:>8.2f} {rates[1]:>10.2f} {numpy_rate:>8} {ratio:>9}")


if __name__ == "__main__":
    main()
