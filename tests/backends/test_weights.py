"""The weights blob: patched into a read-only section after emission, fast for big blobs."""

from __future__ import annotations

import shutil
import struct
import subprocess
import time

import numpy as np
import pytest

from aotc.backends.cpu import emit_llvm_ir, emit_object, parse_target
from aotc.backends.llvm.elf import SHF_WRITE, ElfFormatError, patch_section, section_headers
from aotc.buffers import assign_buffers
from aotc.ir import ComputationBuilder, DType, Module, Op, Shape

SHF_ALLOC = 0x2


def _module_with_constant(values: np.ndarray):
    module = Module("w")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.from_numpy(values.dtype), values.shape))
    b.build(b.tuple([b.binary(Op.ADD, x, b.constant(values))]), entry=True)
    return module


@pytest.mark.parametrize("spec", ["host", "aarch64-linux-gnu"])
def test_weights_section_is_read_only_and_holds_the_blob(spec):
    values = np.arange(100, dtype=np.float32)
    module = _module_with_constant(values)
    plan = assign_buffers(module)
    obj = emit_object(module, plan, "w", parse_target(spec))
    _, header = section_headers(obj)[".rodata.w_weights"]
    flags, offset, size, align = header[2], header[4], header[5], header[8]
    assert flags & SHF_ALLOC and not flags & SHF_WRITE
    assert align == 64 and size == len(plan.weights)
    assert obj[offset : offset + size] == plan.weights
    assert plan.weights[:400] == values.tobytes()


def test_weights_run(compile_module, rng):
    values = rng.standard_normal((7, 9)).astype(np.float32)
    x = rng.standard_normal((7, 9)).astype(np.float32)
    (got,) = compile_module(_module_with_constant(values)).run(x)
    np.testing.assert_array_equal(got, x + values)


def test_big_weights_compile_fast(compile_module, rng):
    """50 MB of constants never pass through LLVM IR text."""
    values = rng.standard_normal(50 * 2**20 // 4).astype(np.float32)
    module = _module_with_constant(values)
    started = time.perf_counter()
    compiled = compile_module(module, name="big")
    elapsed = time.perf_counter() - started
    assert elapsed < 20, f"compiling a 50 MB constant took {elapsed:.1f} s"
    x = np.ones_like(values)
    (got,) = compiled.run(x)
    np.testing.assert_array_equal(got[:1000], values[:1000] + 1)
    np.testing.assert_array_equal(got[-1000:], values[-1000:] + 1)
    ir_text = emit_llvm_ir(module, compiled.plan, "big", parse_target("host"))
    assert len(ir_text) < 100_000


def test_patch_section_checks():
    module = _module_with_constant(np.arange(4, dtype=np.int32))
    obj = emit_object(module, assign_buffers(module), "w", parse_target("host"))
    with pytest.raises(ElfFormatError):
        patch_section(obj, ".rodata.w_weights", b"\0" * 3)  # wrong size
    with pytest.raises(ElfFormatError):
        patch_section(obj, ".rodata.nope", b"")
    with pytest.raises(ElfFormatError):
        patch_section(b"\x7fELF\x01" + obj[5:], ".rodata.w_weights", b"")  # ELF32
    patched = patch_section(obj, ".rodata.w_weights", bytes(range(16)))
    _, header = section_headers(patched)[".rodata.w_weights"]
    assert patched[header[4] : header[4] + 16] == bytes(range(16))
    assert struct.unpack_from("<H", patched, 0x12) == struct.unpack_from("<H", obj, 0x12)


def test_static_arena_is_bss_of_arena_size(tmp_path):
    if not shutil.which("readelf"):
        pytest.skip("no readelf")
    module = _module_with_constant(np.arange(64, dtype=np.float32).reshape(8, 8))
    plan = assign_buffers(module)
    path = tmp_path / "w.o"
    path.write_bytes(emit_object(module, plan, "w", parse_target("host")))
    result = subprocess.run(
        ["readelf", "-sW", str(path)], capture_output=True, text=True, check=True
    )
    symbols = result.stdout
    (line,) = [s for s in symbols.splitlines() if s.endswith(" w_static_arena")]
    size, index = int(line.split()[2]), line.split()[6]
    names = section_headers(path.read_bytes())
    bss_index = sorted(names, key=lambda n: names[n][0]).index(".bss")
    assert int(index) == bss_index and size == max(plan.scratch_bytes, 1)
