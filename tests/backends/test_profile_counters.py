"""Profile counters of the CPU backend (backends/cpu/profile_counters.py): absent, byte
for byte, from a build that does not ask for them; read from C through the header."""

from __future__ import annotations

import subprocess
from pathlib import Path

from aotc_testing import EXAMPLES, build_c

from aotc.backends.cpu import parse_target
from aotc.backends.cpu.backend import CpuBackend
from aotc.backends.cpu.peak import peak_gflops
from aotc.backends.cpu.program import kernel_instructions
from aotc.buffers import assign_buffers
from aotc.driver import CompileOptions, compile_model

MNIST = EXAMPLES / "mnist" / "mnist.onnx"
FORI_LOOP = Path(__file__).resolve().parent.parent / "fixtures" / "hlo" / "fori_loop.hlo"
PROFILE_SYMBOLS = (b"mnist_profile_ns", b"mnist_profile_calls", b"mnist_profile_reset")


def test_unprofiled_object_is_the_one_without_the_option():
    """No cost when not profiling: the object is byte for byte the backend's compile
    without the option (the call every build made before it existed)."""
    default = compile_model(MNIST, CompileOptions())
    off = compile_model(MNIST, CompileOptions(profile=False))
    module = default.module
    plan = assign_buffers(module)
    absent = CpuBackend().compile(module, plan, "mnist", parse_target("host"))
    assert default.object_bytes == off.object_bytes == absent.object_bytes
    assert not any(s in default.object_bytes for s in [*PROFILE_SYMBOLS, b"clock_gettime"])
    assert default.profile_kernels == absent.profile_kernels == ()
    profiled = compile_model(MNIST, CompileOptions(profile=True))
    assert all(s in profiled.object_bytes for s in [*PROFILE_SYMBOLS, b"clock_gettime"])


def test_profile_kernels_are_the_kernels_in_run_order():
    compiled = compile_model(MNIST, CompileOptions(profile=True))
    assert compiled.profile_kernels == tuple(i.name for i in kernel_instructions(compiled.plan))
    assert len(compiled.profile_kernels) >= 3  # three dense layers at least


# runs the model on zeros, then prints each kernel's name, calls and nanoseconds
C_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "{name}.h"

int main(void) {{
    void *inputs[{upper}_NUM_INPUTS + 1], *outputs[{upper}_NUM_OUTPUTS + 1];
    for (int i = 0; i < {upper}_NUM_INPUTS; i++)
        inputs[i] = calloc(1, {name}_inputs_desc[i].bytes + 1);
    for (int i = 0; i < {upper}_NUM_OUTPUTS; i++)
        outputs[i] = calloc(1, {name}_outputs_desc[i].bytes + 1);
    {name}_profile_reset();
    for (int run = 0; run < {runs}; run++)
        if ({name}_run_generic(inputs, outputs, NULL) != 0) return 1;
    for (int k = 0; k < {upper}_PROFILE_KERNELS; k++)
        printf("%s %lld %lld\n", {name}_profile_names[k], (long long){name}_profile_calls[k],
               (long long){name}_profile_ns[k]);
    {name}_profile_reset();
    return {name}_profile_calls[0] != 0 || {name}_profile_ns[0] != 0;
}}
"""


def _counters_from_c(model: Path, name: str, runs: int, tmp_path: Path) -> list[list[str]]:
    """Compile `model` with counters, run it `runs` times from C; the counters printed."""
    compiled = compile_model(model, CompileOptions(name=name, profile=True))
    paths = compiled.write(tmp_path / "build")
    source = tmp_path / "main.c"
    source.write_text(C_PROGRAM.format(name=name, upper=name.upper(), runs=runs))
    program = build_c([source], tmp_path / "main", [paths.header.parent], [paths.library])
    result = subprocess.run([str(program)], capture_output=True, text=True, check=True)
    rows = [line.split() for line in result.stdout.splitlines()]
    assert [row[0] for row in rows] == list(compiled.profile_kernels)
    return rows


def test_counters_read_from_c_through_the_header(tmp_path):
    rows = _counters_from_c(MNIST, "mnist", 5, tmp_path)
    assert all(int(calls) == 5 and int(ns) > 0 for _, calls, ns in rows)


def test_a_while_loop_counts_under_its_instruction(tmp_path):
    """Its body's kernels are no entries of their own: the loop is one, called once a run."""
    rows = _counters_from_c(FORI_LOOP, "loop", 3, tmp_path)
    assert [(name, calls) for name, calls, _ in rows] == [("while.7", "3")]


def test_fma_peak_is_measured():
    target = parse_target("host")
    peak = peak_gflops(target)
    # at least one f32 multiply-add of its vectors per ns (slow CPUs run at ~1 GHz)
    assert peak > target.vector_bits // 32, peak
