"""GPU benchmark: aotc's CUDA kernels timed with CUDA events, side by side with PyTorch.

    python bench/gpu.py [MODEL ...] [--reps N] [--top K] [--no-torch] [--no-gemm]
                        [--no-fusions] [--copy-mb MB] [--compile-only [--archs sm_80,sm_90]]
                        [--jobs N] [--out FILE]

For each model (default: every one of models.BENCH_MODELS), on GPU 0:

- compile it for this GPU (`--target cuda:sm_XY`, the driver's compute capability) and
  for the CPU (every model first, `--jobs` at once: compiling is most of the time); build
  a shared library from libNAME.a and load it with ctypes; upload models.model_inputs;
- check the outputs against the CPU backend (models.compare, as bench/run.py);
- latency per inference: CUDA events around `--reps` NAME_cuda_run_generic calls queued
  on the default stream (after warm-up), divided by the count;
- the dominant kernels (the `--top` slowest, timed alone with NAME_cuda_run_kernel):
  achieved bandwidth (the bytes the kernel must move at least / its time) against the
  device's peak (memory clock x bus width) and against a measured device-to-device copy,
  and FLOP/s against the FP32 peak (SMs x clock x FP32 lanes x 2);
- PyTorch, when installed with CUDA (TF32 off): the MLPs and transformer layers written
  in PyTorch with the same weights (outputs compared too), torchvision's ResNet-50 for
  resnet50 (same architecture, other weights: timing only).

Then the acceptance checks of issue 7: an f32 4096^3 GEMM, aotc's tiled kernel against
torch.matmul (TF32 off; >= 50% wanted), and elementwise, reduction and row fusions over
64M floats (>= 70% of peak bandwidth wanted); beside them the tensor-core GEMMs, f16 and
f32 with `+tf32`, against torch.matmul in f16 and with TF32 on.  Prints the tables and writes them to
bench/gpu_results.md.  Exits 1 when a model failed or disagreed with the CPU.

`--compile-only` needs no GPU: it compiles every model for `--archs` (default sm_80 and
sm_90) and links each library, the check that CI does for the light models.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))
from models import BENCH_MODELS, QUANTIZED, compare, model_inputs

from aotc.artifacts import find_compiler
from aotc.driver import CompileOptions, compile_model
from aotc.errors import AotcError
from aotc.ir.types import from_storage, to_storage

# CUdevice_attribute values (cuda.h)
CLOCK_RATE, SM_COUNT, MEMORY_CLOCK, BUS_WIDTH, CC_MAJOR, CC_MINOR = 13, 16, 36, 37, 75, 76
# FP32 lanes per SM by compute capability (A100's sm_80 has half of the later ones')
FP32_LANES = {80: 64, 86: 128, 87: 128, 89: 128, 90: 128, 100: 128, 120: 128}
# the PyTorch versions of benchmark models: (hidden, seq, heads) of transformer layers
TRANSFORMERS = {"transformer_256x128": (256, 128, 4), "transformer_768x128": (768, 128, 12)}
FUSION_ELEMENTS = 1 << 26  # 64M floats: 256 MB per array


class BenchError(AotcError):
    """The driver or a model library failed."""


# -- the CUDA driver through ctypes -----------------------------------------------------


class Driver:
    """The few driver calls the measurements need (events, attributes, copies)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        # the primary context of GPU 0: the one the models' runtime uses too
        self.context = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), 0), "retain")
        self.check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]

    def check(self, status: int, what: str) -> None:
        if status != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(status, ctypes.byref(name))
            raise BenchError(f"{what}: {(name.value or b'?').decode()} ({status})")

    def attribute(self, attribute: int) -> int:
        value = ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(value), attribute, 0), "attribute")
        return value.value

    @property
    def arch(self) -> int:
        return 10 * self.attribute(CC_MAJOR) + self.attribute(CC_MINOR)

    def peak_bandwidth(self) -> float:
        """Bytes per second: two transfers per memory clock over the bus."""
        return 2 * self.attribute(MEMORY_CLOCK) * 1e3 * self.attribute(BUS_WIDTH) / 8

    def peak_flops(self) -> float:
        lanes = FP32_LANES.get(self.arch, 128)
        return 2 * lanes * self.attribute(SM_COUNT) * self.attribute(CLOCK_RATE) * 1e3

    def time_ms(self, launch, reps: int, warmup: int = 3) -> float:
        """Milliseconds per call of `launch` (queued on the default stream), CUDA events."""
        for _ in range(warmup):
            launch()
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuEventCreate(ctypes.byref(start), 0), "cuEventCreate")
        self.check(self.lib.cuEventCreate(ctypes.byref(stop), 0), "cuEventCreate")
        self.check(self.lib.cuEventRecord(start, None), "cuEventRecord")
        for _ in range(reps):
            launch()
        self.check(self.lib.cuEventRecord(stop, None), "cuEventRecord")
        self.check(self.lib.cuEventSynchronize(stop), "cuEventSynchronize")
        elapsed = ctypes.c_float()
        self.check(self.lib.cuEventElapsedTime(ctypes.byref(elapsed), start, stop), "elapsed")
        self.lib.cuEventDestroy_v2(start)
        self.lib.cuEventDestroy_v2(stop)
        return elapsed.value / reps

    def copy_bandwidth(self, megabytes: int) -> float:
        """Bytes per second read and written by a device-to-device copy (a practical peak)."""
        size = megabytes << 20
        a, b = ctypes.c_uint64(), ctypes.c_uint64()
        for pointer in (a, b):
            self.check(
                self.lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), "cuMemAlloc"
            )
        copy = self.lib.cuMemcpyDtoD_v2
        copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t]
        ms = self.time_ms(lambda: self.check(copy(b.value, a.value, size), "cuMemcpyDtoD"), 10)
        self.lib.cuMemFree_v2(a.value)
        self.lib.cuMemFree_v2(b.value)
        return 2 * size / (ms * 1e-3)


# -- a compiled model loaded with ctypes ------------------------------------------------


@dataclass
class GpuModel:
    """libNAME.a linked into a shared library, loaded, its inputs on the device."""

    compiled: object
    directory: Path
    inputs: list[np.ndarray]
    lib: ctypes.CDLL = field(init=False)

    def __post_init__(self):
        name = self.compiled.name
        self.compiled.write(self.directory)
        library = self.directory / f"lib{name}.so"
        argv = [
            *find_compiler(),
            "-shared",
            "-o",
            str(library),
            "-Wl,--whole-archive",
            str(self.directory / f"lib{name}.a"),
            "-Wl,--no-whole-archive",
            "-ldl",
            "-lpthread",
            "-lm",
        ]
        subprocess.run(argv, check=True, capture_output=True, text=True)
        self.lib = ctypes.CDLL(str(library))
        self.launches = self.compiled.program.launches
        self.ctx = ctypes.create_string_buffer(4096 + 8 * len(self.launches))
        getattr(self.lib, f"{name}_cuda_last_error").restype = ctypes.c_char_p
        status = getattr(self.lib, f"{name}_cuda_init")(self.ctx, 0)
        if status != 0:
            raise BenchError(getattr(self.lib, f"{name}_cuda_last_error")(self.ctx).decode())
        self.lib.aotc_cuda_upload.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        self.lib.aotc_cuda_download.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.aotc_cuda_free.argtypes = [ctypes.c_uint64]
        raw = [
            np.ascontiguousarray(to_storage(x, s.dtype))
            for x, s in zip(self.inputs, self.compiled.inputs)
        ]
        self.in_ptrs = [self.alloc(r.nbytes) for r in raw]
        for pointer, array in zip(self.in_ptrs, raw):
            self._check(self.lib.aotc_cuda_upload(pointer, array.ctypes.data, array.nbytes))
        self.out_ptrs = [self.alloc(s.nbytes) for s in self.compiled.outputs]
        self.in_table = (ctypes.c_uint64 * max(len(raw), 1))(*self.in_ptrs)
        self.out_table = (ctypes.c_uint64 * max(len(self.out_ptrs), 1))(*self.out_ptrs)
        self._run = getattr(self.lib, f"{name}_cuda_run_generic")
        self._run_kernel = getattr(self.lib, f"{name}_cuda_run_kernel")

    def _check(self, status: int) -> None:
        if status != 0:
            self.lib.aotc_cuda_error_string.restype = ctypes.c_char_p
            raise BenchError(self.lib.aotc_cuda_error_string(status).decode())

    def alloc(self, size: int) -> int:
        pointer = ctypes.c_uint64()
        self._check(self.lib.aotc_cuda_malloc(ctypes.byref(pointer), ctypes.c_size_t(size)))
        return pointer.value

    def free(self, pointer: int) -> None:
        self.lib.aotc_cuda_free(pointer)

    def run(self) -> None:
        self._check(self._run(self.ctx, self.in_table, self.out_table, None))

    def run_kernel(self, k: int) -> None:
        self._check(self._run_kernel(self.ctx, k, self.in_table, self.out_table, None))

    def outputs(self) -> list[np.ndarray]:
        self._check(self.lib.aotc_cuda_synchronize(None))
        result = []
        for spec, pointer in zip(self.compiled.outputs, self.out_ptrs):
            raw = np.zeros(spec.dims, spec.dtype.storage)
            self._check(self.lib.aotc_cuda_download(raw.ctypes.data, pointer, raw.nbytes))
            result.append(from_storage(raw, spec.dtype))
        return result


# -- PyTorch ----------------------------------------------------------------------------


def torch_version(name: str, model: onnx.ModelProto):
    """(forward(inputs) -> outputs, comparable outputs?) in PyTorch, or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    w = {
        i.name: torch.from_numpy(numpy_helper.to_array(i).copy()).cuda()
        for i in model.graph.initializer
    }
    if name.startswith("mlp"):
        layers = sum(1 for key in w if key.startswith("w"))

        def mlp(x):
            for i in range(layers):
                x = x @ w[f"w{i}"] + w[f"b{i}"]
                x = torch.relu(x) if i < layers - 1 else x
            return [x]

        return mlp, True
    if name in TRANSFORMERS:
        hidden, seq, heads = TRANSFORMERS[name]
        head = hidden // heads
        norm = torch.nn.functional.layer_norm

        def layer(x):
            q, k, v = ((x @ w[f"w{p}"] + w[f"b{p}"]).reshape(1, seq, heads, head) for p in "qkv")
            scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) / math.sqrt(head)
            context = (scores.softmax(-1) @ v.transpose(1, 2)).transpose(1, 2)
            attention = context.reshape(1, seq, hidden) @ w["wo"] + w["bo"]
            ln1 = norm(attention + x, (hidden,), w["g1"], w["beta1"], 1e-5)
            f1 = ln1 @ w["w1"] + w["b1"]
            gelu = f1 * 0.5 * (1 + torch.erf(f1 / math.sqrt(2)))
            return [norm(gelu @ w["w2"] + w["b2"] + ln1, (hidden,), w["g2w"], w["beta2"], 1e-5)]

        return layer, True
    if name == "resnet50":
        try:
            import torchvision
        except ImportError:
            return None
        net = torchvision.models.resnet50(weights=None).eval().cuda()
        return (lambda x: [net(x)]), False
    return None


def torch_ms(forward, inputs, reps: int) -> tuple[float, list[np.ndarray]]:
    import torch

    tensors = [torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in inputs]
    with torch.inference_mode():
        for _ in range(3):
            outputs = forward(*tensors)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            forward(*tensors)
        stop.record()
        stop.synchronize()
    return start.elapsed_time(stop) / reps, [o.float().cpu().numpy() for o in outputs]


# -- measurements -----------------------------------------------------------------------


@dataclass
class Result:
    name: str
    ms: float = math.nan
    torch_ms: float = math.nan
    kernels: int = 0
    agree: bool | None = None
    torch_agree: bool | None = None
    top: list = field(default_factory=list)  # (launch, ms)
    error: str = ""


def prepare_model(name: str, arch: int):
    """(the model compiled for sm_`arch`, the CPU backend's outputs); a string saying what
    failed instead.  Run in worker processes: compiling is most of the time."""
    try:
        model = BENCH_MODELS[name]()
        inputs = list(model_inputs(model).values())
        compiled = compile_model(model, CompileOptions(target=f"cuda:sm_{arch}", name=name))
        expected = compile_model(model, CompileOptions(name=name)).load().run(inputs)
    except (AotcError, OSError, subprocess.SubprocessError) as error:
        return " ".join(str(error).split())
    return compiled, expected


def measure_model(driver: Driver, name: str, prepared, args, work: Path) -> Result:
    if isinstance(prepared, str):
        return Result(name, error=prepared)
    compiled, expected = prepared
    model = BENCH_MODELS[name]()
    inputs = list(model_inputs(model).values())
    result = Result(name)
    gpu = GpuModel(compiled, work / name, inputs)
    result.kernels = len(gpu.launches)
    gpu.run()
    result.agree = compare(gpu.outputs(), expected, name in QUANTIZED)[0]
    result.ms = driver.time_ms(gpu.run, args.reps)
    times = [
        (k, driver.time_ms(lambda k=k: gpu.run_kernel(k), max(args.reps // 4, 3), 1))
        for k in range(len(gpu.launches))
    ]
    times.sort(key=lambda kt: -kt[1])
    result.top = [(gpu.launches[k], ms) for k, ms in times[: args.top]]
    if args.torch:
        version = torch_version(name, model)
        if version is not None:
            forward, comparable = version
            result.torch_ms, outputs = torch_ms(forward, inputs, args.reps)
            result.torch_agree = compare(outputs, expected)[0] if comparable else None
    return result


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _f32(name: str, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


# GEMM cases at 4096^3: (ONNX element type, target options, torch dtype, torch TF32)
GEMMS = {
    "gemm_f32": (TensorProto.FLOAT, "", "float32", False),
    "gemm_f16": (TensorProto.FLOAT16, "", "float16", False),
    "gemm_tf32": (TensorProto.FLOAT, "+tf32", "float32", True),
}


def acceptance_models(n: int = 4096, rows: int = 8192) -> dict[str, onnx.ModelProto]:
    """The GEMMs and the fusions of the acceptance criteria (inputs, no weights)."""
    cols = FUSION_ELEMENTS // rows
    n_ = helper.make_node
    sqrt2 = helper.make_tensor("sqrt2", TensorProto.FLOAT, [], [math.sqrt(2)])
    gemms = {}
    for name, (dtype, _, _, _) in GEMMS.items():
        value = lambda v, dtype=dtype: helper.make_tensor_value_info(v, dtype, [n, n])
        gemms[name] = _model(
            [n_("MatMul", ["a", "b"], ["c"])], [value("a"), value("b")], [value("c")]
        )
    return {
        **gemms,
        "gelu_elementwise": _model(
            [
                n_("Constant", [], ["s"], value=sqrt2),
                n_("Div", ["x", "s"], ["t"]),
                n_("Erf", ["t"], ["e"]),
                n_("Mul", ["x", "e"], ["y"]),
            ],
            [_f32("x", [rows, cols])],
            [_f32("y", [rows, cols])],
        ),
        "row_sum": _model(
            [n_("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
            [_f32("x", [rows, cols])],
            [_f32("y", [rows])],
            [numpy_helper.from_array(np.array([1], np.int64), "axes")],
        ),
        "softmax_rows": _model(
            [n_("Softmax", ["x"], ["y"], axis=-1)],
            [_f32("x", [rows, cols])],
            [_f32("y", [rows, cols])],
        ),
    }


def measure_acceptance(driver: Driver, args, work: Path, peak_bw: float, lines: list) -> None:
    rng = np.random.default_rng(0)
    models = acceptance_models()
    selected = [
        k for k in models if (k in GEMMS and args.gemm) or (k not in GEMMS and args.fusions)
    ]
    for name in selected:
        model = models[name]
        feeds = [
            rng.random([d.dim_value for d in i.type.tensor_type.shape.dim], dtype=np.float32)
            for i in model.graph.input
        ]
        options = GEMMS[name][1] if name in GEMMS else ""
        options = CompileOptions(target=f"cuda:sm_{driver.arch}{options}", name=name)
        gpu = GpuModel(compile_model(model, options), work / name, feeds)
        for k, launch in enumerate(gpu.launches):
            ms = driver.time_ms(lambda k=k, gpu=gpu: gpu.run_kernel(k), args.reps)
            if name in GEMMS:
                tflops = launch.flops / (ms * 1e-3) / 1e12
                text = f"| {name} | {launch.kind} | {ms:.3f} | {tflops:.1f} TFLOP/s |"
                lines.append(text + _torch_gemm(args, *GEMMS[name][2:]))
            else:
                bandwidth = launch.bytes / (ms * 1e-3)
                lines.append(
                    f"| {name} | {launch.kind} | {ms:.3f} | {bandwidth / 1e9:.0f} GB/s "
                    f"({100 * bandwidth / peak_bw:.0f}% of peak) | |"
                )


def _torch_gemm(args, dtype: str, tf32: bool) -> str:
    if not args.torch:
        return " |"
    try:
        import torch
    except ImportError:
        return " (no torch) |"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a, b = (np.random.default_rng(k).random((4096, 4096)).astype(dtype) for k in range(2))
    ms, _ = torch_ms(lambda x, y: [x @ y], [a, b], args.reps)
    torch.backends.cuda.matmul.allow_tf32 = False
    return f" torch {ms:.3f} ms, {2 * 4096**3 / (ms * 1e-3) / 1e12:.1f} TFLOP/s |"


# -- reporting --------------------------------------------------------------------------


def report(driver: Driver, results: list[Result], acceptance: list[str], copy_bw: float) -> str:
    peak_bw, peak_flops = driver.peak_bandwidth(), driver.peak_flops()
    lines = [
        f"# aotc on GPU sm_{driver.arch}",
        "",
        (
            f"Peak: {peak_bw / 1e9:.0f} GB/s (memory clock x bus), {copy_bw / 1e9:.0f} GB/s "
            f"measured device-to-device copy, {peak_flops / 1e12:.1f} TFLOP/s FP32."
        ),
        "",
        "| model | kernels | aotc ms | torch ms | aotc / torch | matches CPU | torch matches |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.name} | failed: {r.error} | | | | | |")
            continue
        ratio = f"{r.torch_ms / r.ms:.2f}" if not math.isnan(r.torch_ms) else "-"
        torch_ms_text = f"{r.torch_ms:.3f}" if not math.isnan(r.torch_ms) else "-"
        lines.append(
            f"| {r.name} | {r.kernels} | {r.ms:.3f} | {torch_ms_text} | {ratio} | "
            f"{r.agree} | {'-' if r.torch_agree is None else r.torch_agree} |"
        )
    lines += [
        "",
        "Dominant kernels (timed alone):",
        "",
        "| model | kernel | kind | grid x block | ms | GB/s (% peak) | TFLOP/s (% peak) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for launch, ms in r.top:
            bandwidth, flops = launch.bytes / (ms * 1e-3), launch.flops / (ms * 1e-3)
            achieved = f"{bandwidth / 1e9:.0f} ({100 * bandwidth / peak_bw:.0f}%)"
            lines.append(
                f"| {r.name} | {launch.instruction} | {launch.kind} | {launch.grid} x "
                f"{launch.block} | {ms:.3f} | {achieved} | {flops / 1e12:.2f} "
                f"({100 * flops / peak_flops:.0f}%) |"
            )
    if acceptance:
        lines += [
            "",
            (
                "Acceptance (issue 7): f32 GEMM 4096^3 >= 50% of torch (TF32 off); "
                "fusions >= 70% of peak bandwidth."
            ),
            "",
            "| case | kind | ms | achieved | torch |",
            "|---|---|---|---|---|",
            *acceptance,
        ]
    return "\n".join(lines) + "\n"


def compile_only(names: list[str], archs: str) -> int:
    """Compile every model for `archs` and link its library (no GPU needed)."""
    failed = 0
    for name in names:
        started = time.perf_counter()
        try:
            compiled = compile_model(
                BENCH_MODELS[name](), CompileOptions(target=f"cuda:{archs}", name=name)
            )
            with tempfile.TemporaryDirectory(prefix=f"aotc_gpu_{name}_") as tmp:
                compiled.write(Path(tmp))
            sizes = ", ".join(
                f"{a} {len(c) // 1024} KiB" for a, c in compiled.program.cubins.items()
            )
            print(
                f"{name}: {len(compiled.program.launches)} kernels, cubins {sizes} "
                f"({time.perf_counter() - started:.1f} s)",
                flush=True,
            )
        except AotcError as error:
            failed += 1
            print(f"{name}: failed: {error}", flush=True)
    return 1 if failed else 0


def parse_args(argv: list[str]):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=list(BENCH_MODELS))
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--top", type=int, default=3, help="kernels reported per model")
    parser.add_argument("--no-torch", dest="torch", action="store_false")
    parser.add_argument("--no-gemm", dest="gemm", action="store_false")
    parser.add_argument("--no-fusions", dest="fusions", action="store_false")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--archs", default="sm_80,sm_90")
    parser.add_argument("--copy-mb", type=int, default=1024, help="size of the copy measured")
    parser.add_argument("--out", type=Path, default=BENCH / "gpu_results.md")
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count(),
        help="models compiled at once (before any is timed)",
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in BENCH_MODELS]
    if unknown:
        parser.error(f"unknown models {unknown} (known: {', '.join(BENCH_MODELS)})")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.compile_only:
        return compile_only(args.models, args.archs)
    try:
        driver = Driver()
    except OSError as error:  # no libcuda.so.1
        print(
            f"bench/gpu.py: no CUDA driver ({error}): run it on a machine with an NVIDIA GPU, "
            "or use --compile-only",
            file=sys.stderr,
        )
        return 2
    # compiled in fresh processes (spawned: this one has initialized CUDA)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        prepared = list(pool.map(prepare_model, args.models, [driver.arch] * len(args.models)))
    results: list[Result] = []
    acceptance: list[str] = []
    with tempfile.TemporaryDirectory(prefix="aotc_gpu_") as tmp:
        work = Path(tmp)
        for name, ready in zip(args.models, prepared):
            try:
                result = measure_model(driver, name, ready, args, work)
            except (AotcError, OSError, subprocess.SubprocessError) as error:
                result = Result(name, error=" ".join(str(error).split()))
            results.append(result)
            print(
                f"{name}: {result.error or f'{result.ms:.3f} ms'} (torch {result.torch_ms:.3f} "
                f"ms, matches the CPU: {result.agree})",
                flush=True,
            )
        copy_bw = driver.copy_bandwidth(args.copy_mb)
        measure_acceptance(driver, args, work, driver.peak_bandwidth(), acceptance)
    text = report(driver, results, acceptance, copy_bw)
    print("\n" + text)
    args.out.write_text(text)
    return 1 if any(r.error or r.agree is False for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
