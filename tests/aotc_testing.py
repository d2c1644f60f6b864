"""Shared test helpers (imported by name; not a conftest): running the CLI, building and running C programs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
BENCH = REPO / "bench"


def bench_module(name: str):
    """bench/NAME.py imported as module `bench_NAME` (bench/ is no package; its scripts
    import their neighbours)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`aotc ARGS` in a subprocess (the installed entry point's module)."""
    return subprocess.run(
        [sys.executable, "-m", "aotc.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def c_compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler on this machine")
    return cc


def build_c(
    sources: list[Path], out: Path, include: list[Path], libs: list[Path], system: tuple = ()
) -> Path:
    """Compile and link a C program against model libraries, as a user would (`system`:
    more system libraries, e.g. "-ldl" for a CUDA model's driver loader)."""
    cmd = [c_compiler(), "-std=c11", "-O1", "-Wall", "-Werror"]
    cmd += [str(s) for s in sources] + [f"-I{d}" for d in include]
    cmd += [str(lib) for lib in libs] + ["-lm", "-lpthread", *system, "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def generic_driver_source(name: str, n_inputs: int, n_outputs: int) -> str:
    """A C program that reads raw inputs from files and writes raw outputs to files.

    Usage: prog in0.bin ... out0.bin ...; sizes come from the header's descriptor table.
    """
    upper = name.upper()
    return f"""
#include <stdio.h>
#include <stdlib.h>
#include "{name}.h"

int main(int argc, char **argv) {{
    void *inputs[{max(n_inputs, 1)}];
    void *outputs[{max(n_outputs, 1)}];
    if (argc != 1 + {n_inputs} + {n_outputs}) return 10;
    for (int i = 0; i < {upper}_NUM_INPUTS; i++) {{
        size_t bytes = {name}_inputs_desc[i].bytes;
        inputs[i] = malloc(bytes ? bytes : 1);
        FILE *f = fopen(argv[1 + i], "rb");
        if (!f || fread(inputs[i], 1, bytes, f) != bytes) return 11;
        fclose(f);
    }}
    for (int i = 0; i < {upper}_NUM_OUTPUTS; i++)
        outputs[i] = malloc({name}_outputs_desc[i].bytes ? {name}_outputs_desc[i].bytes : 1);
    void *scratch = aligned_alloc({upper}_SCRATCH_ALIGN,
        ({upper}_SCRATCH_BYTES + {upper}_SCRATCH_ALIGN) / {upper}_SCRATCH_ALIGN * {upper}_SCRATCH_ALIGN);
    int status = {name}_run_generic(inputs, outputs, scratch);
    if (status != 0) return 12;
    for (int i = 0; i < {upper}_NUM_OUTPUTS; i++) {{
        FILE *f = fopen(argv[1 + {n_inputs} + i], "wb");
        if (!f || fwrite(outputs[i], 1, {name}_outputs_desc[i].bytes, f) != {name}_outputs_desc[i].bytes) return 13;
        fclose(f);
    }}
    return 0;
}}
"""


def run_c_model(
    program: Path, inputs: list[np.ndarray], outputs_like: list[np.ndarray], workdir: Path
) -> list[np.ndarray]:
    """Run a generic driver program on arrays; outputs take dtypes/shapes from `outputs_like`."""
    in_files, out_files = [], []
    for i, array in enumerate(inputs):
        path = workdir / f"in{i}.bin"
        path.write_bytes(np.ascontiguousarray(array).tobytes())
        in_files.append(path)
    out_files = [workdir / f"out{i}.bin" for i in range(len(outputs_like))]
    subprocess.run([str(program), *map(str, in_files + out_files)], check=True, timeout=120)
    return [
        np.frombuffer(path.read_bytes(), like.dtype).reshape(like.shape)
        for path, like in zip(out_files, outputs_like)
    ]


def hlo_reducer(name: str, op: str, dtype: str = "f32") -> str:
    """HLO text of a scalar computation `%NAME(x, y) = OP(x, y)` for a reduce's to_apply.

    Its instruction names carry NAME because HLO names are unique across a module."""
    scalar = f"{dtype}[]"
    return f"""%{name} ({name}_x: {scalar}, {name}_y: {scalar}) -> {scalar} {{
  %{name}_x = {scalar} parameter(0)
  %{name}_y = {scalar} parameter(1)
  ROOT %{name}_r = {scalar} {op}({scalar} %{name}_x, {scalar} %{name}_y)
}}
"""


def parsed_dot_fusion(m: int, k: int, n: int) -> str:
    """A dot with its bias as XLA's CPU may print it: a fusion recorded as kLoop (its
    kind must come from its body, aotc/ir/fusion_kinds.py)."""
    x, w, c = f"f32[{m},{k}]", f"f32[{k},{n}]", f"f32[{m},{n}]"
    return f"""HloModule parsed

%fused_dot (p0: {x}, p1: {w}, p2: {c}) -> {c} {{
  %p0 = {x}{{1,0}} parameter(0)
  %p1 = {w}{{1,0}} parameter(1)
  %p2 = {c}{{1,0}} parameter(2)
  %d = {c}{{1,0}} dot({x}{{1,0}} %p0, {w}{{1,0}} %p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT %y = {c}{{1,0}} add({c}{{1,0}} %d, {c}{{1,0}} %p2)
}}

ENTRY %main (x: {x}, w: {w}, c: {c}) -> {c} {{
  %x = {x}{{1,0}} parameter(0)
  %w = {w}{{1,0}} parameter(1)
  %c = {c}{{1,0}} parameter(2)
  ROOT %f = {c}{{1,0}} fusion({x}{{1,0}} %x, {w}{{1,0}} %w, {c}{{1,0}} %c), kind=kLoop, calls=%fused_dot
}}"""


def convolution_case(in_spatial, window, cin=2, cout=3, groups=1, batch=1, dims=None):
    """(module, args): an f64 module of one convolution (NC-spatial unless `dims`) and
    random arguments for it, for passes that rewrite convolutions to check against the
    evaluator."""
    from aotc.ir import ComputationBuilder, ConvDims, DType, Module, Shape

    n = len(in_spatial)
    dims = dims or ConvDims.nchw(n)
    lhs = [0] * (n + 2)
    lhs[dims.input_batch], lhs[dims.input_feature] = batch, cin
    kernel = [0] * (n + 2)
    kernel[dims.kernel_input_feature], kernel[dims.kernel_output_feature] = cin // groups, cout
    for d in range(n):
        lhs[dims.input_spatial[d]] = in_spatial[d]
        kernel[dims.kernel_spatial[d]] = window.size[d]
    module = Module("m")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F64, lhs))
    w = b.parameter(1, Shape(DType.F64, kernel))
    b.build(b.convolution(x, w, window, dims, groups), entry=True)
    rng = np.random.default_rng(0)
    return module, [rng.standard_normal(lhs), rng.standard_normal(kernel)]
