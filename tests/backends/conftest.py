"""Helpers for CPU backend tests: compile a module, link a shared object, call it (cffi)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import cffi
import numpy as np
import pytest

from aotc.artifacts import compile_runtime
from aotc.backends.cpu import emit_object, parse_target
from aotc.backends.cpu.contraction import image_overwrites
from aotc.buffers import BufferPlan, assign_buffers
from aotc.ir import Module, Op, Shape
from aotc.ir.types import from_storage, to_storage


def c_compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler on this machine")
    return cc


def link_shared(objects: dict[str, bytes], directory: Path) -> Path:
    """Write the objects and link them into one shared library (with -lm)."""
    paths = []
    for name, data in objects.items():
        path = directory / f"{name}.o"
        path.write_bytes(data)
        paths.append(str(path))
    library = directory / f"lib{'_'.join(objects)}.so"
    runtime = [str(p) for p in compile_runtime(directory / "runtime")]
    subprocess.run(
        [c_compiler(), "-shared", "-o", str(library), *paths, *runtime, "-lm", "-lpthread"],
        check=True,
        capture_output=True,
        text=True,
    )
    return library


def output_shapes(module: Module) -> list[Shape]:
    root = module.entry.root
    return [o.shape for o in root.operands] if root.op is Op.TUPLE else [root.shape]


@dataclass
class Compiled:
    """A model linked into a shared object; `run` takes and returns evaluator arrays."""

    module: Module
    plan: BufferPlan
    name: str
    obj: bytes
    lib: object
    ffi: cffi.FFI

    def run(self, *inputs: np.ndarray, scratch: str = "caller", generic: bool = False):
        params = self.module.entry.parameters
        assert len(inputs) == len(params)
        raw_inputs = [
            np.ascontiguousarray(to_storage(np.asarray(x), p.shape.dtype))
            for x, p in zip(inputs, params)
        ]
        shapes = output_shapes(self.module)
        raw_outputs = [np.zeros(s.dims, s.dtype.storage) for s in shapes]
        args = [self.ffi.from_buffer(a) for a in raw_inputs + raw_outputs]
        if scratch == "null":
            scratch_ptr = self.ffi.NULL
        else:
            size = max(self.plan.scratch_bytes, 1) + 128
            buffer = np.full(size, 0xAB, np.uint8)  # garbage, as a caller's memory would be
            start = (-buffer.ctypes.data) % 64 + (1 if scratch == "misaligned" else 0)
            scratch_ptr = self.ffi.from_buffer(buffer[start:])
        if generic:
            ins = self.ffi.new("void *[]", args[: len(inputs)] or [self.ffi.NULL])
            outs = self.ffi.new("void *[]", args[len(inputs) :] or [self.ffi.NULL])
            status = getattr(self.lib, f"{self.name}_run_generic")(ins, outs, scratch_ptr)
        else:
            status = getattr(self.lib, f"{self.name}_run")(*args, scratch_ptr)
        if status != 0:
            return status
        return [from_storage(r, s.dtype) for r, s in zip(raw_outputs, shapes)]


def prototypes(module: Module, name: str) -> str:
    count = len(module.entry.parameters) + len(output_shapes(module))
    params = ", ".join(["void *"] * (count + 1))
    return (
        f"int {name}_run({params});\n"
        f"int {name}_run_generic(void *const *, void *const *, void *);\n"
    )


@pytest.fixture
def compile_module(tmp_path):
    """compile_module(module, name="m", target="host") -> Compiled."""
    counter = iter(range(1000))

    def compile_(module: Module, name: str = "m", target: str = "host") -> Compiled:
        cpu = parse_target(target)
        plan = assign_buffers(module)
        overwrites = image_overwrites(cpu, plan)  # as the driver plans
        if overwrites:
            plan = assign_buffers(module, None, True, overwrites)
        obj = emit_object(module, plan, name, cpu)
        directory = tmp_path / f"build{next(counter)}"
        directory.mkdir()
        library = link_shared({name: obj}, directory)
        ffi = cffi.FFI()
        ffi.cdef(prototypes(module, name))
        return Compiled(module, plan, name, obj, ffi.dlopen(str(library)), ffi)

    return compile_


def assert_matches(got: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what=""):
    """Floats within tolerance (NaN where NaN), everything else exactly."""
    assert got.shape == expected.shape, what
    if got.dtype.kind == "f":
        np.testing.assert_allclose(
            got.astype(np.float64),
            expected.astype(np.float64),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            err_msg=what,
        )
    else:
        np.testing.assert_array_equal(got, expected, err_msg=what)


@pytest.fixture
def same_across_threads():
    """same_across_threads(compiled, args) -> the outputs at 1 thread, checked bit for bit
    against 3 and 2 threads (set through the model's `m_set_num_threads`)."""

    def run(compiled, args):
        compiled.ffi.cdef("void m_set_num_threads(int);")
        runs = {}
        for threads in (1, 3, 2):
            compiled.lib.m_set_num_threads(threads)
            runs[threads] = compiled.run(*args)
        compiled.lib.m_set_num_threads(1)  # joins the workers before the library is dropped
        for k, (one, two, three) in enumerate(zip(runs[1], runs[2], runs[3])):
            np.testing.assert_array_equal(one, two, err_msg=f"output {k}")
            np.testing.assert_array_equal(one, three, err_msg=f"output {k}")
        return runs[1]

    return run


@pytest.fixture
def check(compile_module):
    """check(module, inputs, rtol, atol, tolerances={output: (rtol, atol)}) -> Compiled.

    Runs the compiled module and the evaluator on the same inputs and compares
    every output.
    """
    from aotc.ir.evaluate import evaluate

    def check_(module, inputs, rtol=1e-6, atol=1e-6, tolerances=None, **kwargs):
        compiled = compile_module(module, **kwargs)
        got = compiled.run(*inputs)
        expected = evaluate(module, inputs)
        expected = list(expected) if isinstance(expected, tuple) else [expected]
        root = module.entry.root
        names = [o.name for o in root.operands] if root.op is Op.TUPLE else [root.name]
        for name, g, e in zip(names, got, expected, strict=True):
            r, a = (tolerances or {}).get(name, (rtol, atol))
            assert_matches(g, np.asarray(e), r, a, what=name)
        return compiled

    return check_


def random_array(rng: np.random.Generator, shape: Shape, low=-4.0, high=4.0) -> np.ndarray:
    """Random values of the shape's dtype (as the evaluator holds them)."""
    from aotc.ir.types import DType, cast_array

    dtype = shape.dtype
    if dtype is DType.PRED:
        return rng.random(shape.dims) < 0.5
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        lo, hi = max(int(low), int(info.min)), min(int(high), int(info.max))
        return rng.integers(lo, hi, size=shape.dims, endpoint=True).astype(dtype.numpy)
    return cast_array(rng.uniform(low, high, size=shape.dims), dtype)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def rand(rng):
    """rand(shape, low=-4, high=4) -> random evaluator array of the shape's dtype."""
    return lambda shape, low=-4.0, high=4.0: random_array(rng, shape, low, high)


@pytest.fixture
def fuse():
    """fuse(builder, operands, body) -> a kLoop FUSION instruction in `builder`.

    `body(fused_builder, params)` builds the fused computation and returns its root.
    """
    from aotc.ir import ComputationBuilder, FusionKind

    def fuse_(b, operands, body, name="fused"):
        fb = ComputationBuilder(b.module, name)
        params = [fb.parameter(i, o.shape) for i, o in enumerate(operands)]
        computation = fb.build(body(fb, params))
        return b.add(Op.FUSION, operands, called=(computation,), fusion_kind=FusionKind.LOOP)

    return fuse_


@pytest.fixture
def link(tmp_path):
    """link({name: object bytes}) -> path of one shared library holding them all."""
    return lambda objects: link_shared(objects, tmp_path)
