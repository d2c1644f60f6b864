"""Cross-compilation: what each target implies, artifacts for aarch64 and x86-64 levels.

aarch64 code is linked by `aarch64-linux-gnu-gcc` and run under `qemu-aarch64`: the
example models and a sample of the ONNX node conformance cases, each compared with its
reference at the host tests' tolerances.  The x86-64-v2 build of the examples runs here.
Those tests skip, saying what to install, where the toolchain is missing.

Every program is built from one driver source (DRIVER_C) that reads each input from a
file and writes each output to a file, sized by the model header's descriptor tables.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from aotc_testing import EXAMPLES, c_compiler, run_cli

from aotc import artifacts
from aotc.backends.cpu.target import NOTABLE_TARGETS, CpuTarget, parse_target
from aotc.driver import CompileOptions, compile_model
from aotc.errors import InputValuesRequired, ToolError
from aotc.ir.types import from_storage, to_storage

CROSS_CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's libc6-arm64-cross
IS_X86_HOST = artifacts.host_arch() == "x86_64"

needs_aarch64 = pytest.mark.skipif(
    not (CROSS_CC and QEMU and (SYSROOT / "lib").is_dir()) or not IS_X86_HOST,
    reason="needs an x86-64 host with aarch64-linux-gnu-gcc, qemu-aarch64 and "
    f"{SYSROOT} (apt-get install gcc-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross)",
)
needs_x86_host = pytest.mark.skipif(not IS_X86_HOST, reason="x86-64 levels run on x86-64 hosts")

AARCH64 = "aarch64-linux-gnu:cortex-a72"
MODELS = {"mnist": EXAMPLES / "mnist" / "mnist.onnx", "cnn": EXAMPLES / "cnn" / "cnn.onnx"}

DRIVER_C = r"""
/* Runs one compiled model: argv = input files, then output files (raw bytes).
 * Built with -DMODEL=name -DMODEL_UPPER=NAME; the header's tables give the sizes. */
#include <stdio.h>
#include <stdlib.h>
#define STR_(x) #x
#define STR(x) STR_(x)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#include STR(MODEL.h)

#define INPUTS CAT(MODEL, _inputs_desc)
#define OUTPUTS CAT(MODEL, _outputs_desc)
#define ALIGN CAT(MODEL_UPPER, _SCRATCH_ALIGN)

int main(int argc, char **argv) {
    enum { N_IN = CAT(MODEL_UPPER, _NUM_INPUTS), N_OUT = CAT(MODEL_UPPER, _NUM_OUTPUTS) };
    void *inputs[N_IN + 1] = {0}, *outputs[N_OUT + 1] = {0};
    if (argc != 1 + N_IN + N_OUT) return 10;
    for (int i = 0; i < N_IN; i++) {
        size_t bytes = INPUTS[i].bytes;
        FILE *f = fopen(argv[1 + i], "rb");
        inputs[i] = malloc(bytes ? bytes : 1);
        if (!f || fread(inputs[i], 1, bytes, f) != bytes) return 11;
        fclose(f);
    }
    for (int i = 0; i < N_OUT; i++) outputs[i] = malloc(OUTPUTS[i].bytes ? OUTPUTS[i].bytes : 1);
    void *scratch = aligned_alloc(ALIGN, (CAT(MODEL_UPPER, _SCRATCH_BYTES) + ALIGN) / ALIGN * ALIGN);
    if (CAT(MODEL, _run_generic)(inputs, outputs, scratch) != 0) return 12;
    for (int i = 0; i < N_OUT; i++) {
        FILE *f = fopen(argv[1 + N_IN + i], "wb");
        if (!f || fwrite(outputs[i], 1, OUTPUTS[i].bytes, f) != OUTPUTS[i].bytes) return 13;
        fclose(f);
    }
    return 0;
}
"""


# ------------------------------------------------------------------ building and running


def build_program(cc: str, build: Path, name: str, out: Path) -> Path:
    """DRIVER_C linked with build/libNAME.a by `cc`, as a user of the library would."""
    driver = build / "aotc_test_driver.c"
    if not driver.exists():
        driver.write_text(DRIVER_C)
    cmd = [
        cc,
        "-std=c11",
        "-O1",
        "-Wall",
        "-Werror",
        f"-DMODEL={name}",
        f"-DMODEL_UPPER={name.upper()}",
        f"-I{build}",
        driver,
        build / f"lib{name}.a",
        "-lm",
        "-lpthread",
        "-o",
        out,
    ]
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return out


def run_program(
    program: Path, inputs: list[np.ndarray], output_bytes: list[int], workdir: Path
) -> list[bytes]:
    """Run a driver program (under qemu-aarch64 if it is aarch64); the outputs' bytes."""
    workdir.mkdir(parents=True, exist_ok=True)
    in_files = [workdir / f"in{i}.bin" for i in range(len(inputs))]
    out_files = [workdir / f"out{i}.bin" for i in range(len(output_bytes))]
    for path, array in zip(in_files, inputs):
        path.write_bytes(np.ascontiguousarray(array).tobytes())
    emulator = [QEMU, "-L", str(SYSROOT)] if _elf_machine(program) == "aarch64" else []
    argv = [*emulator, str(program), *map(str, in_files + out_files)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{program.name} exited {result.returncode}: {result.stderr}"
    got = [path.read_bytes() for path in out_files]
    assert [len(g) for g in got] == output_bytes
    return got


def _elf_machine(path: Path) -> str:
    return artifacts.elf_machine(path.read_bytes()[:20])


def reference(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def example_inputs(path: Path, seed: int) -> list[np.ndarray]:
    model = onnx.load(str(path))
    initializers = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    return [
        rng.random([d.dim_value for d in v.type.tensor_type.shape.dim], dtype=np.float32)
        for v in model.graph.input
        if v.name not in initializers
    ]


def check_example(
    cc: str, build: Path, name: str, tmp_path: Path, seed: int, path: Path | None = None
) -> None:
    """Link the example `name` (or the model at `path`) from `build`, run it, compare
    with onnxruntime."""
    from test_e2e import ATOL, RTOL  # the host's end-to-end tolerances

    path = path or MODELS[name]
    inputs = example_inputs(path, seed)
    expected = reference(path, inputs)
    program = build_program(cc, build, name, tmp_path / f"{name}_driver")
    raw = run_program(program, inputs, [e.nbytes for e in expected], tmp_path / name)
    for got, want in zip(raw, expected):
        got = np.frombuffer(got, want.dtype).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def compile_examples(build: Path, target: str) -> None:
    for path in MODELS.values():
        result = run_cli("compile", path, "-o", build, "--target", target, "-q")
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""


# ------------------------------------------------------------------ what targets imply


# facts from the vendors' manuals, not from LLVM: (cpu, vector bits, native FMA)
X86_CPUS = [
    ("x86-64", 128, False),
    ("x86-64-v2", 128, False),
    ("x86-64-v3", 256, True),
    ("x86-64-v4", 512, True),
    ("core2", 128, False),
    ("nehalem", 128, False),
    ("sandybridge", 256, False),  # AVX without FMA
    ("btver2", 256, False),  # Jaguar: AVX without FMA
    ("haswell", 256, True),
    ("skylake", 256, True),
    ("skylake-avx512", 512, True),
    ("icelake-server", 512, True),
    ("znver2", 256, True),
    ("znver4", 512, True),
]
# NEON is 128 bits with FMLA on every ARMv8-A CPU; kernels use fixed-width vectors, so
# SVE CPUs (neoverse-v1, a64fx) get NEON's width too
AARCH64_CPUS = ["generic", "cortex-a53", "cortex-a72", "neoverse-n1", "neoverse-v1", "a64fx"]


@pytest.mark.parametrize("cpu, bits, fma", X86_CPUS)
def test_x86_vector_width_and_fma(cpu, bits, fma):
    target = parse_target(f"x86_64:{cpu}")
    assert (target.vector_bits, target.has_fma) == (bits, fma)


@pytest.mark.parametrize("cpu", AARCH64_CPUS)
def test_aarch64_vector_width_and_fma(cpu):
    target = parse_target(f"aarch64-linux-gnu:{cpu}")
    assert (target.vector_bits, target.has_fma, target.vector_isa) == (128, True, "NEON")


def test_features_override_the_cpu():
    base = CpuTarget("x86_64-unknown-linux-gnu", "x86-64-v2", "+avx2,+fma")
    assert (base.vector_bits, base.has_fma) == (256, True)
    skx = CpuTarget("x86_64-unknown-linux-gnu", "skylake-avx512", "-avx512f")
    assert skx.vector_bits == 256


@needs_x86_host
def test_host_target_matches_proc_cpuinfo():
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.MULTILINE).group(1).split())
    bits = 512 if "avx512f" in flags else 256 if "avx" in flags else 128
    host = parse_target("host")
    assert (host.vector_bits, host.has_fma) == (bits, "fma" in flags or "fma4" in flags)


def test_notable_targets_parse():
    for spec, purpose in NOTABLE_TARGETS:
        target = parse_target(spec)
        assert purpose and target.vector_isa and str(target) == target.describe()


def test_targets_command_lists_them(monkeypatch, tmp_path):
    monkeypatch.delenv("CC_aarch64", raising=False)
    result = run_cli("targets")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for spec, _ in NOTABLE_TARGETS:
        target = parse_target(spec)
        (row,) = [line for line in lines if line.split()[:1] == [spec]]
        assert target.triple in row and f"{target.vector_bits}-bit" in row, row
    (v4,) = [line for line in lines if line.startswith("x86_64:x86-64-v4 ")]
    assert "512-bit AVX-512" in v4 and "-march=x86-64-v4" in v4
    (a72,) = [line for line in lines if line.startswith(f"{AARCH64} ")]
    expect = "aarch64-linux-gnu-gcc -mcpu=cortex-a72" if CROSS_CC else "none found"
    assert expect in a72, a72
    if IS_X86_HOST:  # with no cross compiler on PATH the table says so
        monkeypatch.setenv("PATH", str(tmp_path))
        (a72,) = [
            line
            for line in run_cli("targets").stdout.splitlines()
            if line.startswith(f"{AARCH64} ")
        ]
        assert "none found" in a72


# ------------------------------------------------------------------ runtime compilers


@needs_x86_host
def test_runtime_compiler_flags():
    assert artifacts.runtime_compiler(parse_target("x86_64:x86-64-v2"))[-1] == "-march=x86-64-v2"
    if CROSS_CC:
        argv = artifacts.runtime_compiler(parse_target(AARCH64))
        assert Path(argv[0]).name == "aarch64-linux-gnu-gcc" and argv[1:] == ["-mcpu=cortex-a72"]
        generic = artifacts.runtime_compiler(parse_target("aarch64-linux-gnu"))
        assert generic[1:] == []


@needs_aarch64
def test_cpu_the_c_compiler_does_not_know_builds_a_baseline_runtime(tmp_path):
    """GCC 12 knows no neoverse-v2 (LLVM does): the runtime is built without -mcpu."""
    target = parse_target("aarch64-linux-gnu:neoverse-v2")
    argv = artifacts.runtime_compiler(target)
    unknown = subprocess.run(
        [CROSS_CC, "-mcpu=neoverse-v2", "-x", "c", "-c", "-o", os.devnull, "-"],
        input="",
        capture_output=True,
        check=False,
    )
    assert ("-mcpu=neoverse-v2" in argv) == (unknown.returncode == 0)
    for obj in artifacts.compile_runtime(tmp_path, target=target):
        assert _elf_machine(obj) == "aarch64"


@needs_aarch64
def test_cc_override_is_used_and_checked(tmp_path, monkeypatch):
    compiled = compile_model(MODELS["mnist"], CompileOptions(target=AARCH64))
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "my-cross-cc"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {CROSS_CC} "$@"\n')
    wrapper.chmod(0o755)
    artifacts.runtime_objects.cache_clear()
    monkeypatch.setenv("CC_aarch64", f"{wrapper} -O2")
    paths = compiled.write(tmp_path / "ok")
    assert "-mcpu=cortex-a72" in log.read_text() and paths.library.exists()
    # a C compiler for the wrong architecture is refused, and nothing is written
    monkeypatch.setenv("CC_aarch64", c_compiler())
    with pytest.raises(ToolError, match="builds for x86_64 but the model is compiled for"):
        compiled.write(tmp_path / "wrong")
    monkeypatch.setenv("CC_aarch64", "/nonexistent/gcc")
    with pytest.raises(ToolError, match=re.escape("from $CC_aarch64")):
        compiled.write(tmp_path / "wrong")
    assert not (tmp_path / "wrong").exists()


# ------------------------------------------------------------------ aarch64 artifacts


@pytest.fixture(scope="module")
def aarch64_build(tmp_path_factory):
    build = tmp_path_factory.mktemp("aarch64")
    compile_examples(build, AARCH64)
    return build


@needs_aarch64
def test_aarch64_artifacts(aarch64_build, tmp_path):
    for name in MODELS:
        header = (aarch64_build / f"{name}.h").read_text()
        assert f'#define {name.upper()}_TARGET_TRIPLE "aarch64-linux-gnu"' in header
        assert f'#define {name.upper()}_TARGET_CPU "cortex-a72"' in header
        assert "Target:  aarch64-linux-gnu (cortex-a72)" in header
        members = subprocess.run(
            ["ar", "t", str(aarch64_build / f"lib{name}.a")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert members == [f"{name}.o", "aotc_bounded.o", "aotc_runtime.o"]
    subprocess.run(["ar", "x", str(aarch64_build / "libcnn.a")], cwd=tmp_path, check=True)
    for obj in ("cnn.o", "aotc_bounded.o", "aotc_runtime.o"):
        assert _elf_machine(tmp_path / obj) == "aarch64"


@needs_aarch64
@pytest.mark.parametrize("name", sorted(MODELS))
def test_aarch64_examples_match_onnxruntime(name, aarch64_build, tmp_path):
    check_example(CROSS_CC, aarch64_build, name, tmp_path, seed=11)


def _save_model(path: Path, nodes, weights, x: list[int], y: list[int], domains=()) -> Path:
    """A graph of `nodes` from float input x to float output y, saved at `path` (with
    opset 1 of each of `domains` too)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        weights,
    )
    onnx.save(
        helper.make_model(
            graph,
            opset_imports=[
                helper.make_opsetid("", 17),
                *(helper.make_opsetid(d, 1) for d in domains),
            ],
            ir_version=10,
        ),
        path,
    )
    return path


def _nbits_model(path: Path, rows: int) -> Path:
    """Two 4-bit MatMulNBits (block 32, byte zero points) in a chain: 160 -> 72 -> 40,
    scaled so that the outputs are about 1 (the check's absolute tolerance is 1e-6)."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(8)
    nodes, weights, width = [], [], 160
    for n, (k, out) in enumerate(((160, 72), (72, 40))):
        blocks = -(-k // 32)
        weights += [
            numpy_helper.from_array(rng.integers(0, 256, (out, blocks, 16), np.uint8), f"q{n}"),
            numpy_helper.from_array(
                rng.uniform(2e-3, 1e-2, (out, blocks)).astype(np.float32), f"s{n}"
            ),
            numpy_helper.from_array(
                rng.integers(0, 256, (out, -(-blocks // 2)), np.uint8), f"z{n}"
            ),
        ]
        inputs = ["x" if n == 0 else "h", f"q{n}", f"s{n}", f"z{n}"]
        attrs = {"K": k, "N": out, "bits": 4, "block_size": 32}
        name = "h" if n == 0 else "y"
        nodes.append(
            helper.make_node("MatMulNBits", inputs, [name], domain="com.microsoft", **attrs)
        )
        width = out
    return _save_model(path, nodes, weights, [rows, 160], [rows, width], ["com.microsoft"])


def _winograd_model(path: Path) -> Path:
    """Conv 16 -> 64 channels, 3x3, pad 1, on 24x22 (F(4x4, 3x3): 6x6 tiles), + bias,
    ReLU, 2x2 max pool, then conv 64 -> 64 on 12x11 (F(2x2, 3x3)), ReLU."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(4)
    # weights scaled by 1/sqrt(fan-in) as a trained model's, so outputs are about 1
    weights = [
        numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(9 * s[1])).astype(np.float32), n)
        for n, s in (("w", (64, 16, 3, 3)), ("v", (64, 64, 3, 3)))
    ]
    weights.append(numpy_helper.from_array(rng.standard_normal(64).astype(np.float32) / 10, "b"))
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "v"], ["d"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    return _save_model(path, nodes, weights, [1, 16, 24, 22], [1, 64, 12, 11])


def _depthwise_model(path: Path) -> Path:
    """ConvNeXt's depthwise 7x7 (pad 3) on 16 channels of 15x13, + bias, then a 3x3
    stride-2 depthwise (pad 1): edge chunks, bands of rows, strided taps."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(6)
    weights = [
        numpy_helper.from_array((rng.standard_normal(s) / s[-1]).astype(np.float32), n)
        for n, s in (("w", (16, 1, 7, 7)), ("v", (16, 1, 3, 3)), ("b", (16,)))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], group=16, pads=[3, 3, 3, 3]),
        helper.make_node("Conv", ["c", "v"], ["y"], group=16, pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    return _save_model(path, nodes, weights, [1, 16, 15, 13], [1, 16, 8, 7])


# per convolution form, a model of two convolutions of that form
FORM_MODELS = {
    "winograd": _winograd_model,
    "depthwise": _depthwise_model,
    "nbits4.gemv": lambda path: _nbits_model(path, 1),
    "nbits4.gemm": lambda path: _nbits_model(path, 9),
}


@pytest.mark.parametrize("form", sorted(FORM_MODELS))
@pytest.mark.parametrize("target", [
    pytest.param(AARCH64, marks=needs_aarch64),
    pytest.param("x86_64:x86-64-v2", marks=needs_x86_host),
])  # fmt: skip
def test_convolution_forms_run_on_other_targets(target, form, tmp_path):
    """NEON's and SSE's Winograd transforms (masked loads and stores, shuffles), both
    F(4x4, 3x3) and F(2x2, 3x3), depthwise bands (4 lanes a vector) and the 4-bit
    weights' kernels match onnxruntime at the host's end-to-end tolerances."""
    name = form.replace(".", "_")  # the model's name, a C identifier
    path = FORM_MODELS[form](tmp_path / f"{name}.onnx")
    # for speed: each form where it pays, not the forms without temporaries at the peak
    compiled = compile_model(path, CompileOptions(target=target, plan_for="speed"))
    assert list(compiled.kernel_forms().values()).count(form) == 2
    build = tmp_path / "build"
    result = run_cli("compile", path, "-o", build, "--target", target, "--plan-for", "speed", "-q")
    assert result.returncode == 0, result.stderr
    cc = CROSS_CC if target == AARCH64 else c_compiler()
    check_example(cc, build, name, tmp_path, seed=5, path=path)


# AArch64 CPU -> what its byte dots take (CpuTarget.byte_dot_signs): usdot (i8mm), sdot
# and udot (dotprod only), none (16-bit pairs)
BYTE_DOT_CPUS = {
    "neoverse-v1": "mixed",
    "cortex-a76": "same",
    "neoverse-n1": "same",
    "cortex-a72": None,
}
# (signs, A's and B's types) -> the GEMM micro-kernels' tag of the product the frontend
# makes: one side's sign flipped where the target's byte dots take other types
BYTE_DOT_KERNELS = {
    ("mixed", "u8s8"): "u8s8",
    ("mixed", "s8s8"): "u8s8",
    ("mixed", "u8u8"): "u8s8",
    ("same", "u8s8"): "s8s8",
    ("same", "s8s8"): "s8s8",
    ("same", "u8u8"): "u8u8",
}
BYTES = {"u8": (np.uint8, 0, 256), "s8": (np.int8, -128, 128)}


def _byte_program(graph, cpu: str, tmp_path: Path) -> tuple[Path, bytes]:
    """The ONNX graph compiled for aarch64-linux-gnu:`cpu` and linked: the program, the
    object's bytes."""
    from onnx import helper

    path = tmp_path / f"{graph.name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    build = tmp_path / "build"
    result = run_cli("compile", path, "-o", build, "--target", f"aarch64-linux-gnu:{cpu}", "-q")
    assert result.returncode == 0, result.stderr
    program = build_program(CROSS_CC, build, graph.name, tmp_path / f"{graph.name}_driver")
    return program, (build / f"{graph.name}.o").read_bytes()


def _byte_kernels(object_bytes: bytes) -> set[str]:
    """The tags of the GEMM micro-kernels in an object (e.g. "u8s8", "s32": pairs)."""
    return {m.decode() for m in re.findall(rb"gemm\.kernel\.(\w+?)\.\d", object_bytes)}


@needs_aarch64
@pytest.mark.parametrize("types", ["u8s8", "s8s8", "u8u8"])
@pytest.mark.parametrize("cpu", sorted(BYTE_DOT_CPUS))
def test_aarch64_byte_dots_are_exact(cpu, types, tmp_path):
    """8-bit products on AArch64: quads of bytes on usdot where the CPU has i8mm
    (neoverse-v1: every product made u8 x s8), on sdot and udot where it has only
    dotprod (cortex-a76, neoverse-n1: u8 x s8 made s8 x s8), 16-bit pairs where it has
    neither (cortex-a72); all exact against numpy's int64 product under qemu, K not a
    multiple of 4, with zero points."""
    from onnx import helper, numpy_helper

    signs = BYTE_DOT_CPUS[cpu]
    assert parse_target(f"aarch64-linux-gnu:{cpu}").byte_dot_signs == signs
    (a_type, a_low, a_high), (w_type, w_low, w_high) = BYTES[types[:2]], BYTES[types[2:]]
    rng = np.random.default_rng(9)
    m, k, n = 13, 131, 37
    a = rng.integers(a_low, a_high, (m, k)).astype(a_type)
    w = rng.integers(w_low, w_high, (k, n)).astype(w_type)
    za, zw = a_type(117 if a_low == 0 else -11), rng.integers(w_low, w_high, (n,)).astype(w_type)
    inits = [numpy_helper.from_array(v, name) for name, v in (("w", w), ("za", za), ("zw", zw))]
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["x", "w", "za", "zw"], ["y"])],
        "bytes",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(a.dtype), [m, k])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, [m, n])],
        inits,
    )
    program, object_bytes = _byte_program(graph, cpu, tmp_path)
    assert _byte_kernels(object_bytes) == {BYTE_DOT_KERNELS.get((signs, types), "s32")}
    (raw,) = run_program(program, [a], [m * n * 4], tmp_path / "run")
    want = (a.astype(np.int64) - za) @ (w.astype(np.int64) - zw)
    np.testing.assert_array_equal(np.frombuffer(raw, np.int32).reshape(m, n), want)


# AArch64 CPU -> the micro-kernels of a ConvInteger of a u8 image by s8 weights (A the
# weights, B the image's columns)
BYTE_CONV_KERNELS = {"neoverse-v1": "s8u8", "cortex-a76": "s8s8", "neoverse-n1": "s8s8"}


@needs_aarch64
@pytest.mark.parametrize("cpu", sorted(BYTE_DOT_CPUS))
def test_aarch64_byte_convolutions_are_exact(cpu, tmp_path):
    """A ConvInteger of a u8 image with a zero point by s8 weights, padded, K = 5 x 3 x 3
    (not a multiple of 4): im2col quads on usdot (neoverse-v1), on sdot with the image
    made s8 (cortex-a76, neoverse-n1), pairs on cortex-a72; exact against numpy."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(10)
    cin, cout, h, wd = 5, 12, 9, 11
    x = rng.integers(0, 256, (1, cin, h, wd)).astype(np.uint8)
    w = rng.integers(-128, 128, (cout, cin, 3, 3)).astype(np.int8)
    zx = np.uint8(131)
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "zx"], ["y"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, cin, h, wd])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, cout, h, wd])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(zx, "zx")],
    )
    program, object_bytes = _byte_program(graph, cpu, tmp_path)
    assert _byte_kernels(object_bytes) == {BYTE_CONV_KERNELS.get(cpu, "s32")}
    (raw,) = run_program(program, [x], [cout * h * wd * 4], tmp_path / "run")
    padded = np.pad(x.astype(np.int64) - zx, ((0, 0), (0, 0), (1, 1), (1, 1)))
    taps = np.lib.stride_tricks.sliding_window_view(padded[0], (3, 3), axis=(1, 2))
    want = np.einsum("chwij,ocij->ohw", taps, w.astype(np.int64))[None]
    np.testing.assert_array_equal(np.frombuffer(raw, np.int32).reshape(want.shape), want)


@needs_aarch64
def test_aarch64_library_does_not_link_into_a_host_program(aarch64_build, tmp_path):
    """The wrong architecture fails at link time, with the linker's own message."""
    (tmp_path / "driver.c").write_text(DRIVER_C)
    cmd = [
        c_compiler(),
        "-DMODEL=cnn",
        "-DMODEL_UPPER=CNN",
        f"-I{aarch64_build}",
        str(tmp_path / "driver.c"),
        str(aarch64_build / "libcnn.a"),
        "-lm",
        "-lpthread",
        "-o",
        str(tmp_path / "app"),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert re.search(r"wrong format|incompatible|EM: 183", result.stderr), result.stderr
    assert not (tmp_path / "app").exists()


@needs_aarch64
def test_missing_cross_compiler_then_the_printed_command(tmp_path):
    """Without a cross compiler: exit 0, one line on stderr, .h/.o/runtime sources and no
    library; the printed command then builds a library that links and runs."""
    build = tmp_path / "build"
    env = {k: v for k, v in os.environ.items() if k != "CC_aarch64"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "aotc.cli",
            "compile",
            MODELS["cnn"],
            "-o",
            build,
            "--target",
            AARCH64,
            "-q",
        ],
        capture_output=True,
        text=True,
        env={**env, "PATH": str(tmp_path / "empty")},
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (warning,) = result.stderr.splitlines()
    assert "no C compiler for aarch64" in warning and "libcnn.a" in warning
    assert sorted(p.name for p in build.iterdir()) == [
        "aotc_bounded.c",
        "aotc_bounded.h",
        "aotc_runtime.c",
        "aotc_runtime.h",
        "cnn.h",
        "cnn.o",
    ]
    (command,) = result.stdout.splitlines()
    assert "-mcpu=cortex-a72" in command
    subprocess.run(command, shell=True, check=True, capture_output=True)
    check_example(CROSS_CC, build, "cnn", tmp_path, seed=12)


# ------------------------------------------------------------------ x86-64-v2 on this machine


@needs_x86_host
def test_x86_64_v2_examples_run_without_avx(tmp_path):
    build = tmp_path / "build"
    compile_examples(build, "x86_64:x86-64-v2")
    for name in MODELS:
        for path in (build / f"{name}.o", build / f"lib{name}.a"):
            disassembly = subprocess.run(
                ["objdump", "-d", str(path)], capture_output=True, text=True, check=True
            ).stdout
            assert "%xmm" in disassembly  # vectorized, with SSE only
            assert "%ymm" not in disassembly and "%zmm" not in disassembly, path.name
        check_example(c_compiler(), build, name, tmp_path, seed=13)


# ------------------------------------------------------------------ ONNX conformance sample

SAMPLE_SIZE = 128
CHUNKS = 8


@functools.cache
def conformance_sample() -> list:
    """SAMPLE_SIZE node cases spread evenly over the distinct sets of op types.

    From the cases that pass on the host (not in the expected-failure list) whose inputs
    and outputs are plain tensors, skipping `_expanded` ones (the same ops as a function
    body), take the first case (by name) of each set of op types, then every n-th set.
    """
    from test_onnx_node import EXPECTED

    from aotc.conformance import load_cases

    first_per_ops: dict[tuple[str, ...], object] = {}
    for case in load_cases():
        graph = case.model.graph
        if case.name in EXPECTED or "_expanded" in case.name:
            continue
        if not all(_is_plain_tensor(v) for v in [*graph.input, *graph.output]):
            continue
        first_per_ops.setdefault(tuple(sorted({n.op_type for n in graph.node})), case)
    families = [first_per_ops[ops] for ops in sorted(first_per_ops)]
    assert len(families) >= SAMPLE_SIZE, len(families)
    return [families[i * len(families) // SAMPLE_SIZE] for i in range(SAMPLE_SIZE)]


def _is_plain_tensor(value: onnx.ValueInfoProto) -> bool:
    tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
    return tensor is not None and tensor.elem_type != onnx.TensorProto.STRING


def _as_array(value) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def compile_case(case, name: str, inputs: dict[str, np.ndarray]):
    """Compile for aarch64 at the inputs' shapes, fixing the inputs that shapes depend on
    to their values (as aotc.backend does)."""
    fixed: list[str] = []
    while True:
        options = CompileOptions(
            name=name,
            input_shapes={n: a.shape for n, a in inputs.items()},
            input_values={n: inputs[n] for n in fixed},
            target=AARCH64,
        )
        try:
            return compile_model(case.model, options)
        except InputValuesRequired as need:
            new = [n for n in need.inputs if n not in fixed]
            assert new, str(need)
            fixed += new


def run_case_aarch64(case, name: str, build: Path, workdir: Path) -> None:
    """Compile, link, run under qemu and compare one case (AssertionError if it differs)."""
    from aotc.conformance import check_outputs

    ((inputs, expected),) = case.data_sets
    initializers = {i.name for i in case.model.graph.initializer}
    names = [v.name for v in case.model.graph.input if v.name not in initializers]
    arrays = {n: _as_array(x) for n, x in zip(names, inputs)}
    expected = [_as_array(x) for x in expected]
    compiled = compile_case(case, name, arrays)
    compiled.write(build)
    program = build_program(CROSS_CC, build, name, build / name)
    bounds = compiled.module.bounds  # counts the data gives: outputs at their bounds
    values = [arrays[spec.name] for spec in compiled.inputs if spec.name in arrays]
    if bounds is not None:
        shapes = [spec.dims for spec in compiled.inputs if spec.name in arrays]
        values = bounds.padded_args(shapes, values)
    raw_inputs = [to_storage(v, spec.dtype) for v, spec in zip(values, compiled.inputs)]
    raw = run_program(program, raw_inputs, [s.nbytes for s in compiled.outputs], workdir)
    outputs = [
        from_storage(np.frombuffer(data, spec.dtype.storage).reshape(spec.dims), spec.dtype)
        for data, spec in zip(raw, compiled.outputs)
    ]
    if bounds is not None:
        outputs = bounds.actual_outputs(outputs)
    got = [v if v.dtype == w.dtype else v.astype(w.dtype) for v, w in zip(outputs, expected)]
    check_outputs(expected, got, case.rtol, case.atol)


@needs_aarch64
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_conformance_sample_aarch64(chunk, tmp_path):
    """One chunk of the sample: each case compiled for aarch64, linked, run under qemu."""
    cases = conformance_sample()[chunk::CHUNKS]
    failures = []
    for i, case in enumerate(cases):
        try:
            run_case_aarch64(case, f"case{i}", tmp_path / "build", tmp_path / f"run{i}")
        except AssertionError as error:
            failures.append(f"{case.name}: {' '.join(str(error).split())[:300]}")
    assert not failures, "\n".join(failures)


def test_conformance_sample_is_large_and_spread():
    if not (CROSS_CC and QEMU):
        pytest.skip("the sample is only loaded (10 s) where it runs")
    sample = conformance_sample()
    ops = {n.op_type for case in sample for n in case.model.graph.node}
    assert len({c.name for c in sample}) == SAMPLE_SIZE >= 100 and len(ops) >= 100


def test_finish_command_quotes_the_folder():
    command = artifacts.finish_command(Path("my build"), "net", parse_target(AARCH64))
    assert command.startswith("cd 'my build' && aarch64-linux-gnu-gcc ")
    assert shlex.split(command)[-5:] == [
        "rcs",
        "libnet.a",
        "net.o",
        "aotc_bounded.o",
        "aotc_runtime.o",
    ]
