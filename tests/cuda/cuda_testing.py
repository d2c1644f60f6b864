"""Helpers for the CUDA tests: ptxas checks, a C driver program, and running compiled
models where there is no GPU.

Without a GPU the kernels are emitted a second time for an `EmulatedDevice` (the same
kernel emitters, with thread numbers, barriers, warp shuffles, shared memory, mma and
dp4a as calls into emulator.c), compiled for this CPU into a shared library, and run by
fake_cuda.c, a stand-in libcuda.so.1 found through LD_LIBRARY_PATH.  The generated
launcher, the runtime (aotc_cuda.c) and the C program are the real ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from aotc.backends.cpu.target import parse_target, target_machine
from aotc.backends.cuda.program import build_program
from aotc.backends.cuda.tools import find_ptxas
from aotc.backends.llvm.context import MathLibrary
from aotc.backends.llvm.lltypes import I32, PTR, VOID, i64
from aotc.errors import ToolError

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def c_compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler on this machine")
    return cc


def require_ptxas() -> Path:
    try:
        return find_ptxas()
    except ToolError as error:
        pytest.skip(f"no ptxas: {error}")


def has_gpu() -> bool:
    """An NVIDIA GPU with its driver (nvidia-smi lists one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return result.returncode == 0 and "GPU" in result.stdout


# -- the C program ---------------------------------------------------------------------


def driver_source(name: str, n_inputs: int, n_outputs: int, runs: int = 1) -> str:
    """A C program running model `name` on the GPU `runs` times: prog in0.bin ... out0.bin
    ... (the last run's outputs).

    Exit codes: 0; 2 init failed (the code and message on stderr); 3 a run or copy
    failed; 10-13 bad arguments or files.  It prints the loaded image on stdout.
    """
    upper = name.upper()
    return f"""
#include <stdio.h>
#include <stdlib.h>
#include "{name}.h"

int main(int argc, char **argv) {{
    aotc_cuda_ptr inputs[{max(n_inputs, 1)}], outputs[{max(n_outputs, 1)}];
    {name}_cuda_ctx ctx;
    int status;
    if (argc != 1 + {n_inputs} + {n_outputs}) return 10;
    status = {name}_cuda_init(&ctx, 0);
    if (status != 0) {{
        fprintf(stderr, "%d %s\\n", status, {name}_cuda_last_error(&ctx));
        {name}_cuda_destroy(&ctx);
        return 2;
    }}
    printf("%s\\n", ctx.model.image);
    for (int i = 0; i < {upper}_NUM_INPUTS; i++) {{
        size_t bytes = {name}_inputs_desc[i].bytes;
        void *host = malloc(bytes ? bytes : 1);
        FILE *f = fopen(argv[1 + i], "rb");
        if (!f || fread(host, 1, bytes, f) != bytes) return 11;
        fclose(f);
        if (aotc_cuda_malloc(&inputs[i], bytes) || aotc_cuda_upload(inputs[i], host, bytes))
            return 3;
        free(host);
    }}
    for (int i = 0; i < {upper}_NUM_OUTPUTS; i++)
        if (aotc_cuda_malloc(&outputs[i], {name}_outputs_desc[i].bytes)) return 3;
    for (int run = 0; run < {runs} && status == 0; run++) {{
        status = {name}_cuda_run_generic(&ctx, inputs, outputs, NULL);
        if (status == 0) status = aotc_cuda_synchronize(NULL);
    }}
    if (status != 0) {{
        fprintf(stderr, "%d %s\\n", status, {name}_cuda_last_error(&ctx));
        return 3;
    }}
    for (int i = 0; i < {upper}_NUM_OUTPUTS; i++) {{
        size_t bytes = {name}_outputs_desc[i].bytes;
        void *host = malloc(bytes ? bytes : 1);
        if (aotc_cuda_download(host, outputs[i], bytes)) return 3;
        FILE *f = fopen(argv[1 + {n_inputs} + i], "wb");
        if (!f || fwrite(host, 1, bytes, f) != bytes) return 13;
        fclose(f);
        free(host);
    }}
    for (int i = 0; i < {upper}_NUM_INPUTS; i++) aotc_cuda_free(inputs[i]);
    for (int i = 0; i < {upper}_NUM_OUTPUTS; i++) aotc_cuda_free(outputs[i]);
    {name}_cuda_destroy(&ctx);
    return 0;
}}
"""


def link_program(source: Path, build: Path, name: str, program: Path) -> Path:
    """A C program `source` using model `name`'s CUDA artifacts in `build`, linked."""
    argv = [c_compiler(), "-std=c11", str(source), f"-I{build}", str(build / f"lib{name}.a")]
    argv += ["-lm", "-lpthread", "-ldl", "-o", str(program)]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return program


def build_driver(compiled, build: Path, out: Path, runs: int = 1) -> Path:
    """The C driver of a CUDA model written to `build`, linked as a user would."""
    source = out.with_suffix(".c")
    counts = len(compiled.inputs), len(compiled.outputs)
    source.write_text(driver_source(compiled.name, *counts, runs))
    argv = [
        c_compiler(),
        "-std=c11",
        "-O1",
        "-Wall",
        "-Werror",
        str(source),
        f"-I{build}",
        str(build / f"lib{compiled.name}.a"),
        "-lm",
        "-lpthread",
        "-ldl",
        "-o",
        str(out),
    ]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return out


def run_driver(program: Path, inputs, outputs_like, workdir: Path, env=None):
    """Run a driver program on arrays: (completed process, outputs or None)."""
    in_files = []
    for i, array in enumerate(inputs):
        path = workdir / f"in{i}.bin"
        path.write_bytes(np.ascontiguousarray(array).tobytes())
        in_files.append(path)
    out_files = [workdir / f"out{i}.bin" for i in range(len(outputs_like))]
    result = subprocess.run(
        [str(program), *map(str, in_files + out_files)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
        check=False,
    )
    if result.returncode != 0:
        return result, None
    outputs = [
        np.frombuffer(path.read_bytes(), like.dtype).reshape(like.shape)
        for path, like in zip(out_files, outputs_like)
    ]
    return result, outputs


# -- emulation -------------------------------------------------------------------------


MMA_KINDS = ("f16", "bf16", "tf32")  # emulator.c's codes for them


class EmulatedDevice:
    """The thread grid of emulator.c: kernels for this CPU, run by fake_cuda.c."""

    triple = llvm.get_process_triple()
    math = MathLibrary()  # libm

    def libm_for_intrinsic(self, name):
        return None

    def thread_index(self, ctx):
        return ctx.builder.call(ctx.declare("aotc_emu_tid", I32, [], pure=True), [])

    def block_index(self, ctx):
        return ctx.builder.call(ctx.declare("aotc_emu_ctaid", I32, [], pure=True), [])

    def barrier(self, ctx):
        ctx.builder.call(ctx.declare("aotc_emu_barrier", VOID, []), [])

    def shuffle_xor(self, ctx, value, lane_mask):
        args = [value, ir.Constant(I32, lane_mask)]
        return ctx.builder.call(ctx.declare("aotc_emu_shfl_xor", I32, args), args)

    def mma(self, ctx, kind, a, b, c):
        """aotc_emu_mma(kind, a, b, c): the fragments in stack arrays, D written over C."""
        builder = ctx.builder
        arrays = []
        for values in (a, b, c):
            array = ctx.alloca(ir.ArrayType(values[0].type, len(values)))
            for k, value in enumerate(values):
                builder.store(value, builder.gep(array, [i64(0), i64(k)]))
            arrays.append(array)
        args = [ir.Constant(I32, MMA_KINDS.index(kind)), *arrays]
        builder.call(ctx.declare("aotc_emu_mma", VOID, args), args)
        return [builder.load(builder.gep(arrays[2], [i64(0), i64(k)])) for k in range(len(c))]

    def dot4(self, ctx, a, b, c, signed):
        """aotc_emu_dp4a(a, b, c, a signed, b signed)."""
        args = [a, b, c, *(ir.Constant(I32, int(s)) for s in signed)]
        return ctx.builder.call(ctx.declare("aotc_emu_dp4a", I32, args, pure=True), args)

    def to_tf32(self, ctx, value):
        return ctx.builder.call(ctx.declare("aotc_emu_tf32", I32, [value], pure=True), [value])

    def shared_array(self, ctx, kernel, offset, size):
        with ctx.builder.goto_entry_block():
            base = ctx.builder.call(ctx.declare("aotc_emu_shared", PTR, [], pure=True), [])
            return ctx.byte_pointer(base, offset)

    def define_kernel(self, module, name, params, block):
        function = ir.Function(module, ir.FunctionType(VOID, [PTR] * params), name)
        wrapper = ir.Function(module, ir.FunctionType(VOID, [PTR]), f"{name}_emu")
        b = ir.IRBuilder(wrapper.append_basic_block("entry"))
        args = []
        for i in range(params):
            slot = b.load(b.gep(wrapper.args[0], [i64(i)], source_etype=PTR), typ=PTR)
            args.append(b.load(slot, typ=PTR))
        b.call(function, args)
        b.ret_void()
        return function


def build_emulation(compiled, directory: Path) -> tuple[Path, list]:
    """The model's kernels for the emulator: (shared library path, launches)."""
    program = build_program(
        compiled.module, compiled.plan, compiled.name, compiled.target, EmulatedDevice()
    )
    machine = target_machine(parse_target("host"))
    parsed = llvm.parse_assembly(str(program.module))
    parsed.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=2)
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(parsed, builder)
    directory.mkdir(parents=True, exist_ok=True)
    kernels = directory / "kernels.o"
    kernels.write_bytes(machine.emit_object(parsed))
    rows = [f"void {k.name}_emu(void **);" for k in program.launches]
    rows.append(
        "typedef struct { const char *name; void (*fn)(void **); unsigned shared; "
        "int cooperative; } row;"
    )
    rows.append("const row aotc_emu_kernels[] = {")
    rows += [
        f'    {{"{k.name}", {k.name}_emu, {k.shared_bytes}u, {int(k.cooperative)}}},'
        for k in program.launches
    ]
    rows.append("    {0, 0, 0u, 0},\n};")
    table = directory / "table.c"
    table.write_text("\n".join(rows) + "\n")
    library = directory / f"lib{compiled.name}_emu.so"
    subprocess.run(
        [
            c_compiler(),
            "-std=c11",
            "-O1",
            "-shared",
            "-fPIC",
            str(HERE / "emulator.c"),
            str(table),
            str(kernels),
            "-o",
            str(library),
            "-lm",
            "-pthread",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return library, program.launches


def fake_driver(directory: Path) -> Path:
    """A directory holding the stand-in libcuda.so.1 (for LD_LIBRARY_PATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    library = directory / "libcuda.so.1"
    if not library.exists():
        subprocess.run(
            [
                c_compiler(),
                "-std=c11",
                "-O1",
                "-shared",
                "-fPIC",
                str(HERE / "fake_cuda.c"),
                "-o",
                str(library),
                "-ldl",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    return directory


def fake_environment(driver_dir: Path, kernels: Path | None, **settings) -> dict:
    """The environment that makes a program load the fake driver and `kernels`."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{driver_dir}:{env.get('LD_LIBRARY_PATH', '')}"
    if kernels is not None:
        env["AOTC_FAKE_CUDA_KERNELS"] = str(kernels)
    for key, value in settings.items():
        env[f"AOTC_FAKE_CUDA_{key.upper()}"] = str(value)
    return env


def run_emulated(
    compiled, inputs, outputs_like, workdir: Path, runs: int = 1, **settings
) -> list[np.ndarray]:
    """Build a CUDA-compiled model's artifacts and C driver, run them `runs` times under
    the fake driver with the emulated kernels, and return the last run's outputs (raw
    arrays shaped like `outputs_like`)."""
    build = workdir / "build"
    compiled.write(build)
    program = build_driver(compiled, build, workdir / "driver", runs)
    library, launches = build_emulation(compiled, workdir / "emulation")
    assert [(k.name, k.grid, k.block) for k in launches] == [
        (k.name, k.grid, k.block) for k in compiled.program.launches
    ], "the emulated kernels must be launched as the real ones"
    env = fake_environment(fake_driver(workdir / "fake"), library, **settings)
    result, outputs = run_driver(program, inputs, outputs_like, workdir, env)
    assert result.returncode == 0, (result.returncode, result.stderr)
    return outputs


def run_on_gpu(compiled, inputs, outputs_like, workdir: Path) -> list[np.ndarray]:
    """The same on this machine's GPU, through the real driver."""
    build = workdir / "build"
    compiled.write(build)
    program = build_driver(compiled, build, workdir / "driver")
    result, outputs = run_driver(program, inputs, outputs_like, workdir)
    assert result.returncode == 0, (result.returncode, result.stderr)
    return outputs


# run_emulated, and run_on_gpu where there is a GPU: the runners a test parametrizes over
RUNNERS = [
    pytest.param(run_emulated, id="emulated"),
    pytest.param(
        run_on_gpu,
        id="gpu",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not has_gpu(), reason="no NVIDIA GPU with a driver here"),
        ],
    ),
]


def tiled_tools(monkeypatch) -> None:
    """ptxas and a C compiler (else skip), and tiled contraction kernels however small
    the GEMM (emulating big ones is slow)."""
    from aotc.backends.cuda import contraction

    require_ptxas()
    c_compiler()
    monkeypatch.setattr(contraction, "MIN_WORK", 1)
    monkeypatch.setattr(contraction, "MIN_SIDE", 1)
    monkeypatch.setattr(contraction, "MIN_DEPTH", 1)


# -- a conformance subset ----------------------------------------------------------------

# ONNX node cases (onnx.backend.test) that the CPU passes, one or two per op family the
# GPU kernels treat differently: elementwise math (libdevice), reductions, row fusions,
# contractions, pooling, data movement, sort and scatter (serial)
CONFORMANCE = (
    "test_abs",
    "test_acos",
    "test_add_bcast",
    "test_and2d",
    "test_argmax_default_axis_random",
    "test_asinh",
    "test_atan",
    "test_averagepool_2d_pads",
    "test_batchnorm_epsilon",
    "test_cast_FLOAT_to_FLOAT16",
    "test_ceil",
    "test_clip",
    "test_concat_3d_axis_1",
    "test_conv_with_autopad_same",
    "test_conv_with_strides_padding",
    "test_convtranspose",
    "test_cos",
    "test_cosh",
    "test_cumsum_1d",
    "test_depthtospace_example",
    "test_div",
    "test_einsum_batch_matmul",
    "test_elu",
    "test_equal",
    "test_erf",
    "test_exp",
    "test_expand_dim_changed",
    "test_floor",
    "test_gather_0",
    "test_gelu_tanh_2",
    "test_gemm_all_attributes",
    "test_gemm_default_matrix_bias",
    "test_globalaveragepool",
    "test_hardsigmoid",
    "test_hardswish",
    "test_instancenorm_example",
    "test_isnan",
    "test_layer_normalization_4d_axis1",
    "test_leakyrelu",
    "test_log",
    "test_logsoftmax_axis_1",
    "test_lrn",
    "test_matmul_3d",
    "test_matmul_4d",
    "test_max_example",
    "test_maxpool_2d_pads",
    "test_mean_example",
    "test_min_example",
    "test_mod_mixed_sign_float32",
    "test_neg",
    "test_pow",
    "test_prelu_example",
    "test_reciprocal",
    "test_reduce_max_default_axes_keepdim_example",
    "test_reduce_mean_default_axes_keepdims_random",
    "test_reduce_sum_default_axes_keepdims_random",
    "test_relu",
    "test_resize_upsample_scales_nearest",
    "test_round",
    "test_scatter_elements_with_axis",
    "test_selu",
    "test_sigmoid",
    "test_sign",
    "test_sin",
    "test_sinh",
    "test_slice",
    "test_softmax_axis_1",
    "test_softmax_large_number",
    "test_softplus",
    "test_sqrt",
    "test_sum_example",
    "test_tan",
    "test_tanh",
    "test_tile",
    "test_top_k",
    "test_transpose_all_permutations_0",
    "test_where_example",
)


def conformance_cases() -> list:
    from aotc.conformance import load_cases

    wanted = set(CONFORMANCE)
    return [case for case in load_cases() if case.name in wanted]


def run_conformance_case(case, runner, workdir: Path) -> None:
    """Compile a node case for CUDA (fixing the inputs that shapes depend on, as
    aotc.backend does), run each data set with `runner` (run_on_gpu or run_emulated) and
    compare as the ONNX runner does."""
    from aotc.conformance import _to_array, check_outputs
    from aotc.driver import CompileOptions, compile_model
    from aotc.errors import InputValuesRequired
    from aotc.ir.types import from_storage, to_storage

    initializers = {i.name for i in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in initializers]
    for number, (inputs, expected) in enumerate(case.data_sets):
        feed = dict(zip(names, (np.asarray(_to_array(x)) for x in inputs)))
        fixed: dict[str, np.ndarray] = {}
        while True:
            try:
                options = CompileOptions(target="cuda:sm_90", name="node", input_values=fixed)
                compiled = compile_model(case.model, options)
                break
            except InputValuesRequired as needed:
                assert not set(needed.inputs) <= set(fixed), needed
                fixed.update({name: feed[name] for name in needed.inputs})
        bounds = compiled.module.bounds
        specs = (
            compiled.inputs[:-1] if bounds and bounds.input_dims is not None else compiled.inputs
        )
        arrays = [feed[spec.name] for spec in specs]
        if bounds is not None:  # counts the data gives: outputs bounded, cut to them
            arrays = bounds.padded_args([spec.dims for spec in specs], arrays)
        raw_inputs = [to_storage(a, spec.dtype) for a, spec in zip(arrays, compiled.inputs)]
        like = [np.zeros(spec.dims, spec.dtype.storage) for spec in compiled.outputs]
        raw = runner(compiled, raw_inputs, like, workdir / f"set{number}")
        raw = [from_storage(r, spec.dtype) for r, spec in zip(raw, compiled.outputs)]
        if bounds is not None:
            raw = bounds.actual_outputs(raw)
        expected = [np.asarray(_to_array(x)) for x in expected]
        got = [r.astype(e.dtype) for r, e in zip(raw, expected)]
        check_outputs(expected, got, case.rtol, case.atol)
