"""XLA HLO text made by JAX (tests/fixtures/hlo, see make_fixtures.py): compile each module
with the CLI, link it, call it through cffi, compare with the outputs JAX computed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import cffi
import numpy as np
import pytest
from aotc_testing import REPO
from test_cli import assert_one_line_error

from aotc import artifacts
from aotc.frontends.hlo import import_hlo
from aotc.ir import DType
from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module, print_module
from aotc.ir.types import from_storage
from aotc.ir.verify import verify

FIXTURES = REPO / "tests" / "fixtures" / "hlo"
MODULES = sorted(FIXTURES.glob("*.hlo"))

# (rtol, atol) per output element type; integers and pred must be equal
TOLERANCES = {DType.F32: (1e-4, 1e-5), DType.F16: (1e-3, 1e-3), DType.BF16: (1e-2, 1e-2)}
# outputs that XLA computes with other roundings than the text says, by (fixture, output)
LOOSER = {
    # XLA CPU keeps the bf16 chain in f32 before the f32 sum; the text rounds to bf16
    ("bf16_mlp", 1): (1e-2, 1e-2),
}


def aotc(*args) -> subprocess.CompletedProcess:
    """`python -m aotc ARGS`, as a user runs it."""
    argv = [sys.executable, "-m", "aotc", *map(str, args)]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=600)


def test_enough_fixtures():
    names = {p.stem for p in MODULES}
    assert len(names) >= 15
    for path in MODULES:  # every module has its inputs and outputs, and is small
        assert (FIXTURES / f"{path.stem.removesuffix('_opt')}.npz").is_file(), path
        assert path.stat().st_size < 200 * 1024


def fixture_arrays(name: str) -> tuple[list[np.ndarray], list[tuple[DType, np.ndarray]]]:
    """The inputs as the C API takes them, and (dtype, raw) of each expected output."""
    data = np.load(FIXTURES / f"{name.removesuffix('_opt')}.npz")
    inputs = [data[f"in{i}"] for i in range(len(data["in_dtypes"]))]
    outputs = [(DType.from_text(str(d)), data[f"out{i}"]) for i, d in enumerate(data["out_dtypes"])]
    return inputs, outputs


def run_compiled(build: Path, name: str, inputs, outputs) -> list[np.ndarray]:
    """Link build/NAME.o into a shared object and call NAME_run_generic through cffi."""
    so = artifacts.link_shared(build / f"{name}.o", build / f"lib{name}.so")
    ffi = cffi.FFI()
    ffi.cdef(f"int {name}_run_generic(void *const *inputs, void *const *outputs, void *scratch);")
    lib = ffi.dlopen(str(so))
    header = (build / f"{name}.h").read_text()
    scratch_bytes = int(re.search(rf"#define {name.upper()}_SCRATCH_BYTES (\d+)u", header)[1])
    scratch = np.zeros(scratch_bytes + 64, np.uint8)  # the arena is 64-byte aligned
    scratch = scratch[(-scratch.ctypes.data) % 64 :]
    raw_in = [np.ascontiguousarray(a) for a in inputs]
    raw_out = [np.zeros(raw.shape, raw.dtype) for _, raw in outputs]
    pointers = [
        ffi.new("void *[]", [ffi.from_buffer(a) for a in arrays] or [ffi.NULL])
        for arrays in (raw_in, raw_out)
    ]
    assert getattr(lib, f"{name}_run_generic")(*pointers, ffi.from_buffer(scratch)) == 0
    return [raw.reshape(expected.shape) for raw, (_, expected) in zip(raw_out, outputs)]


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_fixture(path, tmp_path):
    name = path.stem
    inputs, outputs = fixture_arrays(name)
    result = aotc("compile", path, "-o", tmp_path, "--name", name, "-q")
    assert result.returncode == 0, result.stderr
    got = run_compiled(tmp_path, name, inputs, outputs)
    for k, ((dtype, expected), raw) in enumerate(zip(outputs, got)):
        compare(name, k, dtype, from_storage(raw, dtype), from_storage(expected, dtype))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_fixture_evaluates(path):
    """The parsed module is valid IR that prints and reads back the same, and the evaluator
    agrees with JAX too."""
    module = import_hlo(path)
    verify(module)
    printed = print_module(module)
    assert print_module(parse_module(printed)) == printed
    inputs, outputs = fixture_arrays(path.stem)
    values = evaluate(
        module, [from_storage(a, p.shape.dtype) for a, p in zip(inputs, module.entry.parameters)]
    )
    values = values if isinstance(values, tuple) else (values,)
    for k, (value, (dtype, expected)) in enumerate(zip(values, outputs)):
        compare(path.stem, k, dtype, value, from_storage(expected, dtype))


def compare(name: str, k: int, dtype: DType, actual: np.ndarray, wanted: np.ndarray) -> None:
    where = f"{name} output {k} ({dtype.text})"
    if dtype in TOLERANCES:
        rtol, atol = LOOSER.get((name, k), TOLERANCES[dtype])
        np.testing.assert_allclose(actual, wanted, rtol=rtol, atol=atol, err_msg=where)
    else:
        np.testing.assert_array_equal(actual, wanted, err_msg=where)


MODULE = """HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

ENTRY main.1 {
  x.1 = f32[4]{0} parameter(0)
  ROOT y.1 = f32[4]{0} %s
}
"""


@pytest.mark.parametrize(
    "body, words",
    [
        ("frobnicate(x.1)", ["frobnicate", "y.1"]),
        ('custom-call(x.1), custom_call_target="lapack_sgetrf_ffi"', ["lapack_sgetrf_ffi", "y.1"]),
    ],
    ids=["unknown-opcode", "custom-call"],
)
def test_refused_in_one_line(body, words, tmp_path):
    module = tmp_path / "m.hlo"
    module.write_text(MODULE % body)
    result = aotc("compile", module, "-o", tmp_path / "out", "--name", "m")
    assert_one_line_error(result, "m.hlo", *words)
    assert not (tmp_path / "out").exists()


def test_format_is_sniffed_not_taken_from_the_name(tmp_path):
    # a .txt (TensorFlow's dumps) and a .onnx name, comments before the header
    for file_name in ("module.txt", "module.onnx"):
        module = tmp_path / file_name
        module.write_text("// dumped by hand\n/* two\n lines */\n\n" + MODULE % "negate(x.1)")
        result = aotc("compile", module, "-o", tmp_path / file_name.replace(".", "_"), "-q")
        assert result.returncode == 0, result.stderr
