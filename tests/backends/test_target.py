"""Targets: spec parsing, cross-compiling for aarch64, x86-64 feature levels."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from aotc.backends.cpu import CpuTarget, TargetError, emit_llvm_ir, emit_object, parse_target
from aotc.backends.llvm.elf import machine
from aotc.buffers import assign_buffers
from aotc.errors import AotcError
from aotc.ir import ComputationBuilder, DType, Module, Op, Shape

EM_X86_64 = 62
EM_AARCH64 = 183


@pytest.mark.parametrize(
    "spec,triple,cpu",
    [
        ("x86_64", "x86_64-unknown-linux-gnu", "x86-64"),
        ("x86_64:x86-64-v2", "x86_64-unknown-linux-gnu", "x86-64-v2"),
        ("x86_64:x86-64-v3", "x86_64-unknown-linux-gnu", "x86-64-v3"),
        ("x86_64:x86-64-v4", "x86_64-unknown-linux-gnu", "x86-64-v4"),
        ("aarch64-linux-gnu", "aarch64-linux-gnu", "generic"),
        ("aarch64-linux-gnu:cortex-a72", "aarch64-linux-gnu", "cortex-a72"),
        ("x86_64-pc-linux-gnu:skylake", "x86_64-pc-linux-gnu", "skylake"),
    ],
)
def test_parse_target(spec, triple, cpu):
    assert parse_target(spec) == CpuTarget(triple, cpu)


def test_host_target():
    host = parse_target("host")
    assert host == parse_target()
    assert host.triple and host.cpu and host.describe().startswith(host.triple)


@pytest.mark.parametrize(
    "spec",
    ["foo-bar-baz", "x86_64:no-such-cpu", "aarch64:skylake", "x86_64-apple-darwin", "riscv64"],
)
def test_unknown_targets_are_one_line_errors(spec):
    with pytest.raises(AotcError) as info:
        parse_target(spec)
    assert isinstance(info.value, TargetError)
    assert "\n" not in str(info.value) and spec in str(info.value)


def _vector_module():
    module = Module("vec")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (4096,)))
    y = b.parameter(1, Shape(DType.F32, (4096,)))
    b.build(b.tuple([b.binary(Op.ADD, b.binary(Op.MULTIPLY, x, y), x)]), entry=True)
    return module


def _disassembly(obj: bytes, tmp_path) -> str:
    if not shutil.which("objdump"):
        pytest.skip("no objdump")
    path = tmp_path / "code.o"
    path.write_bytes(obj)
    return subprocess.run(
        ["objdump", "-d", str(path)], capture_output=True, text=True, check=True
    ).stdout


def test_x86_64_v2_uses_no_avx_registers(tmp_path):
    module = _vector_module()
    obj = emit_object(module, assign_buffers(module), "vec", parse_target("x86_64:x86-64-v2"))
    text = _disassembly(obj, tmp_path)
    assert "xmm" in text  # vectorized with SSE
    assert "ymm" not in text and "zmm" not in text


def test_x86_64_v3_uses_avx2(tmp_path):
    module = _vector_module()
    obj = emit_object(module, assign_buffers(module), "vec", parse_target("x86_64:x86-64-v3"))
    assert "ymm" in _disassembly(obj, tmp_path)


def test_aarch64_object(tmp_path):
    module = _vector_module()
    plan = assign_buffers(module)
    for spec in ("aarch64-linux-gnu", "aarch64-linux-gnu:cortex-a72"):
        obj = emit_object(module, plan, "vec", parse_target(spec))
        assert machine(obj) == EM_AARCH64
    host = emit_object(module, plan, "vec", parse_target("x86_64"))
    assert machine(host) == EM_X86_64
    assert "aarch64" in emit_llvm_ir(module, plan, "vec", parse_target("aarch64"))


def test_baseline_x86_64_f16_links_and_runs(compile_module):
    """Without F16C, half conversions are libgcc calls; the object must still link and run."""
    module = Module("half")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F16, (33,)))
    b.build(b.tuple([b.unary(Op.SQRT, b.binary(Op.MULTIPLY, x, x))]), entry=True)
    values = np.linspace(-3, 3, 33).astype(np.float16)
    (got,) = compile_module(module, name="half", target="x86_64").run(values)
    np.testing.assert_array_equal(got, np.sqrt(values * values))


def test_baseline_x86_64_libcalls_link_and_run(check, rng):
    """Without SSE4.1, rounding/min/max lower to libm calls; they must link (-lm) and agree."""
    module = Module("base")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (16,)))
    y = b.parameter(1, Shape(DType.F32, (16,)))
    unary = [Op.ROUND_NEAREST_EVEN, Op.ROUND_NEAREST_AFZ, Op.FLOOR, Op.CEIL, Op.SIGN]
    binary = [Op.MAXIMUM, Op.MINIMUM, Op.REMAINDER]
    outputs = [b.unary(op, x) for op in unary] + [b.binary(op, x, y) for op in binary]
    outputs += [b.convert(x, DType.S8), b.convert(x, DType.F16)]
    b.build(b.tuple(outputs), entry=True)
    xv = (rng.uniform(-200, 200, 16) * 2).round().astype(np.float32) / 2  # many .5 ties
    yv = rng.uniform(-5, 5, 16).astype(np.float32)
    check(module, [xv, yv], rtol=0, atol=0, name="base", target="x86_64")
