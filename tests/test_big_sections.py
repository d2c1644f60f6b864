"""Big static arenas and weights: placed after all other data, so that libraries with
gigabytes of either link with plain `cc app.c libNAME.a -lm -lpthread` and run
(backends/cpu/sections.py); sizes no program of the target can hold are refused.

The low-threshold tests run the big-blob placement on a tiny model (host and aarch64);
the slow ones link and run an arena past 2 GiB (a branch that is not taken holds it, so
it costs little memory unless the taken branch is asked for too), an aarch64 arena past
4 GiB, and weights past 2 GiB (which take 2 GiB of disk per copy: object, library,
program)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from aotc_testing import c_compiler, run_cli

from aotc.artifacts import MemoryStats, TensorSpec
from aotc.backends.cpu import codegen, sections
from aotc.backends.cpu.backend import CpuBackend
from aotc.backends.llvm.elf import (
    SHF_WRITE,
    SHT_PROGBITS,
    ElfFormatError,
    fill_section,
    section_headers,
)
from aotc.buffers import assign_buffers
from aotc.errors import UnsupportedError
from aotc.ir import ComputationBuilder, DType, Module, Op, Shape

GiB = 2**30
CROSS_CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
SYSROOT = Path("/usr/aarch64-linux-gnu")
needs_aarch64 = pytest.mark.skipif(
    not (CROSS_CC and QEMU and (SYSROOT / "lib").is_dir()),
    reason="needs aarch64-linux-gnu-gcc, qemu-aarch64 and the aarch64 libc "
    "(apt-get install gcc-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross)",
)
on_x86_64 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="links for x86-64")
AARCH64 = "aarch64-linux-gnu:cortex-a72"
SHF_X86_64_LARGE = 0x10000000
# what the slow tests take at most: the weights test here (2 cores) took about 50 s
CI_SECONDS = 60


def needs_room(disk: int, memory: int, where: Path) -> None:
    """Skip, saying why, unless `where` has `disk` bytes free and the machine `memory`
    bytes available."""
    free = shutil.disk_usage(where).free
    if free < disk:
        pytest.skip(f"needs {disk / GiB:.0f} GiB of free disk, {free / GiB:.1f} GiB free")
    available = available_memory()
    if available < memory:
        pytest.skip(f"needs {memory / GiB:.0f} GiB of memory, {available / GiB:.1f} available")


def available_memory() -> int:
    """MemAvailable where Linux says it, else the physical memory."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def run_program(program: Path, *args: str) -> str:
    emulator = [QEMU, "-L", str(SYSROOT)] if "aarch64" in program.name else []
    result = subprocess.run(
        [*emulator, str(program), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def link(app: Path, build: Path, name: str, target: str = "host") -> Path:
    """`cc app.c -Ibuild build/libNAME.a -lm -lpthread`, as the header says."""
    cc = CROSS_CC if target.startswith("aarch64") else c_compiler()
    program = app.with_name(f"{app.stem}_{target.split('-')[0]}")
    command = [cc, str(app), f"-I{build}", str(build / f"lib{name}.a"), "-lm", "-lpthread"]
    result = subprocess.run(
        [*command, "-o", str(program)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return program


def write_model(module: Module, build: Path, name: str, target: str) -> Path:
    """NAME.h, NAME.o and libNAME.a of an IR module, as `aotc compile` writes them."""
    backend = CpuBackend()
    cpu = backend.parse_target(target)
    plan = assign_buffers(module)
    code = backend.compile(module, plan, name, cpu)
    stats = MemoryStats(
        plan.arena_bytes,
        plan.alignment,
        plan.lower_bound,
        plan.naive_total,
        plan.weight_bytes,
        code.kernel_count,
        plan.workspace_bytes,
        code.arena_section,
        code.weights_section,
    )
    params = module.entry.parameters
    inputs = [TensorSpec.make(p.name, p.shape.dtype, p.shape.dims) for p in params]
    root = module.entry.root
    outputs = [TensorSpec.make("y", root.shape.dtype, root.shape.dims)]
    backend.write_artifacts(build, name, inputs, outputs, code.object, stats, cpu, name)
    return build / f"{name}.o"


# -- the big-blob placement on a tiny model ------------------------------------

TINY_C = r"""
#include <stdio.h>
#include "tiny.h"
int main(void) {
    float x[TINY_X_SIZE], y[TINY_Y_SIZE];
    for (int i = 0; i < TINY_X_SIZE; i++) x[i] = 0.5f * i;
    if (tiny_run(x, y, NULL) != 0) return 2;
    for (int i = 0; i < TINY_Y_SIZE; i++) printf("%.9g\n", y[i]);
    return 0;
}
"""


def tiny_module(weights: np.ndarray) -> Module:
    """y = s + s * s for s = x + w: s is an arena buffer (no passes, so no fusion)."""
    module = Module("tiny")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, weights.shape), name="x")
    total = b.binary(Op.ADD, x, b.constant(weights))
    square = b.binary(Op.MULTIPLY, total, total)
    b.build(b.binary(Op.ADD, total, square), entry=True)
    return module


@pytest.mark.parametrize(
    "target",
    [pytest.param("host", marks=on_x86_64), pytest.param(AARCH64, marks=needs_aarch64)],
    ids=["host", "aarch64"],
)
def test_big_blob_placement_links_and_runs(tmp_path, monkeypatch, target):
    """With the threshold at 64 bytes, a tiny model's arena and weights are placed as
    big ones are; the weights section holds the bytes, read-only."""
    monkeypatch.setattr(sections, "LARGE_BLOB_BYTES", 64)
    weights = np.arange(256, dtype=np.float32) / 4
    obj = write_model(tiny_module(weights), tmp_path / "build", "tiny", target).read_bytes()
    headers = section_headers(obj)
    arch = "aarch64" if target == AARCH64 else "x86_64"
    weights_section = sections.PLACEMENTS[arch].weights_section.format(name="tiny")
    _, header = headers[weights_section]
    assert header[1] == SHT_PROGBITS and not header[2] & SHF_WRITE
    assert obj[header[4] : header[4] + header[5]] == weights.tobytes()
    assert ".bss.tiny_weights" not in headers
    text = (tmp_path / "build" / "tiny.h").read_text()
    if arch == "x86_64":
        assert header[2] & SHF_X86_64_LARGE and headers[".lbss"][1][5] >= 1024
        assert "static arena   in .lbss" in text and "weights in     .lrodata" in text
    else:
        assert "static arena   in a COMMON symbol" in text
    app = tmp_path / "tiny.c"
    app.write_text(TINY_C)
    got = np.array(run_program(link(app, tmp_path / "build", "tiny", target)).split(), float)
    x = np.arange(256, dtype=np.float32) / 2
    total = x + weights
    np.testing.assert_array_equal(got, total + total * total)


def test_fill_section_checks(monkeypatch):
    """Only an empty section of the blob's size is filled."""
    monkeypatch.setattr(sections, "LARGE_BLOB_BYTES", 64)
    module = tiny_module(np.zeros(32, np.float32))
    cpu = CpuBackend().parse_target("host")
    monkeypatch.setattr(codegen, "fill_section", lambda obj, *args: obj)
    obj = codegen.emit_object(module, assign_buffers(module), "tiny", cpu)
    with pytest.raises(ElfFormatError, match="expected NOBITS with 3 bytes"):
        fill_section(obj, ".bss.tiny_weights", 3, ".rodata.x")
    with pytest.raises(ElfFormatError, match="no section"):
        fill_section(obj, ".bss.nope", 0, ".rodata.x")
    head = fill_section(obj, ".bss.tiny_weights", 128, ".lrodata.tiny_weights")
    data = bytes(range(128))  # follows the head in the object
    _, header = section_headers(head + data)[".lrodata.tiny_weights"]
    assert header[1] == SHT_PROGBITS and (header[4], header[5]) == (len(head), len(data))


def test_small_blobs_stay_where_they_were():
    """Under the threshold nothing changes: .bss and .rodata, nothing for the header."""
    small = sections.LARGE_BLOB_BYTES - 1
    for arch in sections.PLACEMENTS:
        assert sections.big_sections(arch, "m", small, small) == ("", "")
        assert sections.arena_linkage(arch, small) == ""
        assert sections.weights_sections(arch, "m", small) == (".rodata.m_weights",) * 2


# -- sizes no program of the target holds -----------------------------------------


def test_weights_past_aarch64_reach_are_refused():
    with pytest.raises(UnsupportedError, match="4294967296 bytes of weights"):
        sections.check_blobs("aarch64", 0, 4 * GiB)
    sections.check_blobs("x86_64", 0, 4 * GiB)


def broadcast_hlo(rows: int, columns: int = 1024) -> str:
    return f"""HloModule wide
ENTRY main {{
  v = f32[{columns}] parameter(0)
  big = f32[{rows},{columns}] broadcast(v), dimensions={{1}}
  last = f32[1,{columns}] slice(big), slice={{[{rows - 1}:{rows}], [0:{columns}]}}
  ROOT r = f32[{columns}] reshape(last)
}}
"""


def test_an_arena_past_the_address_space_is_refused(tmp_path):
    """2^48 bytes of arena (allowed by --max-memory): past x86-64's 2^47-byte user space,
    refused in one line that names the size, before any code and with nothing written."""
    model = tmp_path / "wide.hlo"
    model.write_text(broadcast_hlo(2**36))
    out = tmp_path / "out"
    result = run_cli("compile", model, "-o", out, "-O0", "--max-memory", "1000T", "-q")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "address space" in lines[0], result.stderr
    assert str(2**48) in lines[0]
    assert not out.exists()


# -- the real sizes ---------------------------------------------------------------------


def branch_hlo(rows: int) -> str:
    """flag ? the last row of v broadcast to `rows` rows (an arena of rows x 4 KiB)
    : v + v (little arena: the big buffer is never touched)."""
    return f"""HloModule big

spread {{
  x = f32[1024] parameter(0)
  big = f32[{rows},1024] broadcast(x), dimensions={{1}}
  last = f32[1,1024] slice(big), slice={{[{rows - 1}:{rows}], [0:1024]}}
  ROOT row = f32[1024] reshape(last)
}}

double {{
  y = f32[1024] parameter(0)
  ROOT twice = f32[1024] add(y, y)
}}

ENTRY main {{
  flag = pred[] parameter(0)
  v = f32[1024] parameter(1)
  ROOT r = f32[1024] conditional(flag, v, v), true_computation=spread, false_computation=double
}}
"""


BRANCH_C = r"""
#include <stdio.h>
#include "big.h"
int main(int argc, char **argv) {
    bool flag = argc > 1 && argv[1][0] == '1';
    static float v[BIG_V_SIZE], r[BIG_R_SIZE];
    for (int c = 0; c < 1024; c++) v[c] = (float)(c % 7);
    if (big_run(&flag, v, r, NULL) != 0) return 2;
    for (int c = 0; c < 1024; c++)
        if (r[c] != (flag ? 1.0f : 2.0f) * (c % 7)) { printf("r[%d] = %g\n", c, r[c]); return 1; }
    printf("ok\n");
    return 0;
}
"""


def compile_branch(tmp_path: Path, rows: int, target: str) -> Path:
    model = tmp_path / "big.hlo"
    model.write_text(branch_hlo(rows))
    build = tmp_path / target.split("-")[0]
    result = run_cli("compile", model, "-o", build, "-O0", "--target", target, "--max-memory", "8G")
    assert result.returncode == 0, result.stderr
    app = tmp_path / "big.c"
    app.write_text(BRANCH_C)
    return link(app, build, "big", target)


@pytest.mark.slow
@on_x86_64
def test_an_arena_past_2gib_links_and_runs(tmp_path):
    """2.06 GiB of arena: in .bss it failed to link ("relocation truncated to fit:
    R_X86_64_PC32 against .bss", the runtime's own data pushed past 2 GiB)."""
    rows = (2 * GiB + 64 * 2**20) // 4096
    program = compile_branch(tmp_path, rows, "host")
    header = (tmp_path / "host" / "big.h").read_text()
    assert "static arena   in .lbss" in header
    assert run_program(program, "0") == "ok\n"  # the arena mapped, not touched
    if available_memory() < 6 * GiB:
        pytest.skip("the taken branch writes 2 GiB of arena: needs 6 GiB of memory")
    assert run_program(program, "1") == "ok\n"  # reads the row at 2 GiB into the arena


@pytest.mark.slow
@needs_aarch64
def test_an_aarch64_arena_past_4gib_links_and_runs(tmp_path):
    """4.5 GiB of arena, past ADRP's 4 GiB reach: a COMMON symbol at the end of .bss."""
    program = compile_branch(tmp_path, (4 * GiB + GiB // 2) // 4096, AARCH64)
    assert "a COMMON symbol" in (tmp_path / "aarch64" / "big.h").read_text()
    assert run_program(program, "0") == "ok\n"


TABLE_ROWS = 2**19 + 256  # 2 GiB and 1 MiB of f32 rows of 1024
TABLE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "table.h"
int main(int argc, char **argv) {
    static float y[TABLE_Y_SIZE];
    for (int k = 1; k < argc; k++) {
        int32_t row = atoi(argv[k]);
        if (table_run(&row, y, NULL) != 0) return 2;
        for (int c = 0; c < 1024; c++)
            if (y[c] != (float)((row % 4096) * 1024 + c)) { printf("%d: %g\n", row, y[c]); return 1; }
    }
    printf("ok\n");
    return 0;
}
"""


def table_module() -> Module:
    """One row of a 2 GiB constant table, at a run-time row index: the weights are big,
    the compute reads 4 KiB of them."""
    rows = (np.arange(TABLE_ROWS, dtype=np.float32) % 4096) * 1024
    values = rows[:, None] + np.arange(1024, dtype=np.float32)
    module = Module("table")
    b = ComputationBuilder(module, "main")
    row = b.parameter(0, Shape(DType.S32, ()), name="row")
    table = b.constant(values)
    del values
    b.build(b.dynamic_slice(table, [row, b.constant(np.int32(0))], [1, 1024]), entry=True)
    return module


@pytest.mark.slow
@on_x86_64
def test_weights_past_2gib_link_and_run(tmp_path):
    """2 GiB of weights in .lrodata, the row past 2 GiB read right."""
    if os.environ.get("CI") == "true":
        pytest.skip(
            f"2 GiB of weights take about 50 s on 2 cores, near the {CI_SECONDS} s a CI test "
            "may take, and 7 GiB each of memory and disk"
        )
    needs_room(7 * GiB, 8 * GiB, tmp_path)
    started = time.perf_counter()
    write_model(table_module(), tmp_path / "build", "table", "host")
    app = tmp_path / "table.c"
    app.write_text(TABLE_C)
    program = link(app, tmp_path / "build", "table")
    (tmp_path / "build" / "table.o").unlink()  # the library and program keep two copies
    assert run_program(program, "0", str(TABLE_ROWS // 2), str(TABLE_ROWS - 1)) == "ok\n"
    header_text = (tmp_path / "build" / "table.h").read_text()
    assert "weights in     .lrodata.table_weights" in header_text
    assert time.perf_counter() - started < 300
