"""Speed benchmark: aotc-compiled models called from C against onnxruntime.

    python bench/run.py [--models a,b] [--threads 1,2] [--repeat N] [--quick] [--out FILE]
    python bench/run.py --corpus [--models a,b] [--threads 1] [--quick] [--top-kernel]

For each model of `models.BENCH_MODELS` (fixed seeds), or with --corpus of
`corpus.CORPUS` (models exported from torchvision, transformers and scikit-learn by
their packages' exporters, built once and cached; needs the `bench` extra): compile it
with aotc, link bench/driver.c against libNAME.a, and time, interleaved in the same run
and with the same thread count, the driver (timing inside C) and an onnxruntime
InferenceSession (all graph optimizations, intra-op threads = T, one inter-op thread,
sequential) on the same inputs (`models.model_inputs`).  Outputs must agree within
`RTOL`/`ATOL_SCALE`, or else be no further from the reference interpreter than
`REFEREE_FACTOR` x onnxruntime's distance from it.  Prints the table and writes it to bench/results.md (--corpus:
bench/corpus_results.md), with the single-core float32 GEMM peak measured in the same
run.  A model that fails to build or compile is a row with its error; the run goes on,
and exits 1 at the end when a model failed or its outputs disagreed.  --top-kernel adds
each model's slowest kernel from `aotc profile` (an instrumented build, profiled apart).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.metadata
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))
import corpus
from models import (
    ATOL_SCALE,
    BENCH_MODELS,
    QUANTIZED,
    QUANTIZED_ATOL_SCALE,
    REFEREE_FACTOR,
    RTOL,
    compare,
    model_inputs,
    refereed,
    reference_outputs,
)

import aotc
from aotc import report
from aotc.artifacts import find_compiler
from aotc.errors import AotcError

# Outputs agree with onnxruntime's by models.compare: both sum float32 products in
# different orders (and ORT fuses batch norms into weights); for int8 models, onnxruntime
# also requantizes in f32 where aotc follows onnx.reference (f64; aotc matches
# onnx.reference to 2e-7 on transformer_768x128_int8, onnxruntime is 2e-3 from both)
# interleaving: each runtime's samples are split over up to this many alternating turns; one
# sample per turn, since this shared machine's speed drifts within seconds
ROUNDS = 50
PAUSE_S = 0.01  # between turns, so that ORT's spinning workers go idle first
# a turn of a runtime whose run is shorter than this starts with one untimed run: waking
# its sleeping threads (slow on this virtual machine) and refilling the caches after the
# other runtime's turn is not what a sample measures
WARM_TURN_S = 0.05
MIN_SAMPLES = 3
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
ERROR_CHARS = 240  # a failed model's row shows this much of its one-line error
# the packages whose exporters made the corpus, named in its report
CORPUS_PACKAGES = ("torch", "torchvision", "transformers", "scikit-learn", "skl2onnx", "onnxscript")


class BenchError(AotcError):
    """The driver program could not be built or run."""


class ModelBuildError(BenchError):
    """The benchmark's model could not be built (its exporter failed)."""


Builder = Callable[[], onnx.ModelProto]


def model_table(use_corpus: bool) -> dict[str, Builder]:
    """name -> builder: models.BENCH_MODELS, or the corpus (built once, then cached)."""
    if use_corpus:
        return {name: functools.partial(corpus.load, name) for name in corpus.CORPUS}
    return BENCH_MODELS


def find_builder(name: str) -> Builder:
    """The builder of a model of either table."""
    return BENCH_MODELS.get(name) or model_table(use_corpus=True)[name]


def one_line(error: BaseException) -> str:
    """The error on one line, at most ERROR_CHARS long, for a table cell."""
    text = str(error) if isinstance(error, AotcError) else f"{type(error).__name__}: {error}"
    text = " ".join(text.split()).replace("|", "/")
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


@dataclass(frozen=True)
class Settings:
    """How long to measure; `--quick` trades precision for seconds."""

    repeat: int = 30  # samples per model, runtime and thread count (fewer when slow)
    warm_s: float = 0.5  # warm-up time before sampling
    sample_s: float = 0.01  # a sample is the mean of enough runs to last this long
    budget_s: float = 30.0  # sampling time per model, runtime and thread count
    peak_n: int = 2048  # GEMM size of the peak measurement
    peak_reps: int = 5

    @classmethod
    def quick(cls, repeat: int | None) -> Settings:
        return cls(repeat or 5, 0.02, 0.0002, 1.0, 512, 3)


@dataclass
class Row:
    """One model at one thread count."""

    model: str
    threads: int
    category: str = ""
    gflop: float = math.nan
    compile_s: float = math.nan
    ort_ms: float = math.nan
    aotc_ms: float | None = None  # None: aotc runs single-threaded ("n/a")
    samples: str = ""
    rel_err: float = math.nan
    agree: bool | None = None
    refereed: bool = False  # agree was decided against the reference interpreter
    error: str = ""
    top_kernel: str = ""  # --top-kernel: the profile's slowest kernel (aotc profile)

    @property
    def ratio(self) -> float | None:
        return None if self.aotc_ms is None else self.ort_ms / self.aotc_ms

    @property
    def gflops(self) -> float | None:
        return None if self.aotc_ms is None else self.gflop / self.aotc_ms * 1e3


@dataclass
class Compiled:
    """A model compiled, linked into the driver, with its inputs on disk."""

    name: str
    path: Path  # the ONNX file both runtimes load
    program: Path
    inputs_bin: Path
    feeds: dict[str, np.ndarray]
    outputs: list  # aotc TensorSpecs, in C order
    gflop: float
    compile_s: float
    threaded: bool
    workdir: Path


# ---------------------------------------------------------------------------- machine peak

_PEAK_CHILD = r"""
import sys, time
import numpy as np
n, reps = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
a @ b
best = float("inf")
for _ in range(reps):
    start = time.perf_counter()
    a @ b
    best = min(best, time.perf_counter() - start)
print(2 * n**3 / best / 1e9)
"""


# OpenBLAS kernels to try beside the one it picks itself, by the host's vector ISA: its
# run-time detection takes CPUs newer than it for older ones (a Zen 5 ran its Zen
# kernel, AVX2, at 117 GFLOP/s against 222 for the SkylakeX kernel, AVX-512)
PEAK_CORETYPES = {"avx512f": "SKYLAKEX", "avx2": "HASWELL"}


def measure_peak(settings: Settings) -> float:
    """Single-core float32 GEMM GFLOP/s: numpy matmul in a one-thread subprocess, the
    best of OpenBLAS's own kernel choice and the kernel for the host's vector ISA."""
    env = {**os.environ, **{k: "1" for k in THREAD_ENV}}
    argv = [sys.executable, "-c", _PEAK_CHILD, str(settings.peak_n), str(settings.peak_reps)]
    best = 0.0
    for coretype in [None, *_host_coretypes()]:
        child_env = env if coretype is None else {**env, "OPENBLAS_CORETYPE": coretype}
        out = subprocess.run(argv, env=child_env, capture_output=True, text=True, check=True)
        best = max(best, float(out.stdout.split()[-1]))
    return best


def _host_coretypes() -> list[str]:
    """PEAK_CORETYPES of the vector extensions this (Linux) CPU has."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return []
    return [coretype for flag, coretype in PEAK_CORETYPES.items() if flag in flags]


def blas_name() -> str:
    blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
    return f"{blas.get('name', 'unknown BLAS')} {blas.get('version', '')}".strip()


# ---------------------------------------------------------------------------- building


def build_model(name: str, build: Builder | None = None) -> onnx.ModelProto:
    try:
        return (build or find_builder(name))()
    except Exception as e:  # any exporter's failure: one model's result, not the run's end
        raise ModelBuildError(f"building the model failed: {one_line(e)}") from e


def compile_model(name: str, workdir: Path, build: Builder | None = None) -> Compiled:
    """Build the model (`build`, else its builder in either table), compile it with aotc,
    write the artifacts, build the driver and the inputs file."""
    model = build_model(name, build)
    path = workdir / f"{name}.onnx"
    onnx.save(model, str(path))
    build = workdir / "build"
    started = time.perf_counter()
    compiled = aotc.compile(path, name=name)
    paths = compiled.write(build)
    compile_s = time.perf_counter() - started
    gflop = sum(k.flops for k in report.kernels(compiled.plan)) / 1e9
    header = paths.header.read_text()
    # the model runs in parallel once its code calls the runtime's pool, or once the
    # header declares a per-model thread setter
    own_setter = re.search(rf"\b{name}_set_num_threads\s*\(", header) is not None
    threaded = own_setter or b"aotc_parallel" in compiled.object_bytes
    setter = f"{name}_set_num_threads" if own_setter else None
    if setter is None and re.search(r"\baotc_set_num_threads\s*\(", header):
        setter = "aotc_set_num_threads"
    program = build_driver(name, len(compiled.inputs), len(compiled.outputs), build, setter)
    feeds = model_inputs(model)
    inputs_bin = workdir / "inputs.bin"
    with open(inputs_bin, "wb") as f:
        f.writelines(
            np.ascontiguousarray(feeds[s.name], s.dtype.numpy).tobytes() for s in compiled.inputs
        )
    return Compiled(
        name,
        path,
        program,
        inputs_bin,
        feeds,
        compiled.outputs,
        gflop,
        compile_s,
        threaded,
        workdir,
    )


def build_driver(name: str, n_in: int, n_out: int, build: Path, setter: str | None) -> Path:
    """cc -O2 driver.c libNAME.a -lm -lpthread, with the model's symbols as -D flags."""
    args = [f"in[{i}]" for i in range(n_in)] + [f"out[{i}]" for i in range(n_out)]
    call = f"-DAOTC_CALL(in,out,s)={name}_run({', '.join([*args, 's'])})"
    defines = [f'-DAOTC_HEADER="{name}.h"', f"-DAOTC_NAME={name}", f"-DAOTC_UPPER={name.upper()}"]
    if setter:
        defines.append(f"-DAOTC_SET_THREADS={setter}")
    program = build / f"{name}_bench"
    argv = [
        *find_compiler(),
        "-O2",
        "-I",
        str(build),
        *defines,
        call,
        str(BENCH / "driver.c"),
        str(build / f"lib{name}.a"),
        "-lm",
        "-lpthread",
        "-o",
        str(program),
    ]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"building the driver for {name} failed:\n{done.stderr.strip()}")
    return program


# ---------------------------------------------------------------------------- timing


@dataclass
class Timer:
    """One runtime's `sample(n, k)`: n samples, each the mean ns of k back-to-back runs."""

    sample: Callable[[int, int], list[float]]
    per_sample: int = 1
    samples: int = MIN_SAMPLES
    warm_turns: bool = True  # start each turn with an untimed run
    times_ns: list[float] = field(default_factory=list)


class Driver:
    """The C driver as a child process that answers timing commands on stdin."""

    def __init__(self, model: Compiled, threads: int):
        self.outputs_bin = model.workdir / f"outputs_{threads}.bin"
        env = {**os.environ, "AOTC_NUM_THREADS": str(threads)}
        argv = [str(model.program), str(model.inputs_bin), str(self.outputs_bin), str(threads)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def sample(self, n: int, k: int) -> list[float]:
        self.proc.stdin.write(f"{n} {k}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError(f"the driver exited with status {self.proc.wait()}")
        return [float(t) for t in line.split()]

    def finish(self, specs: list) -> list[np.ndarray]:
        """Quit; the outputs of its last run."""
        self.proc.communicate("q\n", timeout=60)
        if self.proc.returncode != 0:
            raise BenchError(f"the driver exited with status {self.proc.returncode}")
        data = self.outputs_bin.read_bytes()
        arrays, offset = [], 0
        for spec in specs:
            arrays.append(np.frombuffer(data, spec.dtype.numpy, spec.size, offset))
            offset += spec.nbytes
        return [a.reshape(spec.dims) for a, spec in zip(arrays, specs)]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def ort_session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # its workers spin between the ops of a run as usual, but stop when the run returns:
    # left spinning, they took a core from aotc's next turn (2 threads ran at 1 thread's
    # speed)
    options.add_session_config_entry("session.force_spinning_stop", "1")
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: not the unused-initializer warnings
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_sampler(session, feeds: dict[str, np.ndarray]) -> Callable[[int, int], list[float]]:
    def sample(n: int, k: int) -> list[float]:
        times = []
        for _ in range(n):
            start = time.perf_counter_ns()
            for _ in range(k):
                session.run(None, feeds)
            times.append((time.perf_counter_ns() - start) / k)
        return times

    return sample


def plan(timer: Timer, settings: Settings) -> None:
    """Warm up, then choose runs per sample and the number of samples from the run time."""
    run_ns = timer.sample(1, 1)[0]
    if run_ns < settings.warm_s * 1e9:  # a slow model's first run is warm-up enough
        warm_runs = min(10_000, math.ceil(settings.warm_s * 1e9 / run_ns))
        run_ns = timer.sample(1, warm_runs)[0]
    timer.warm_turns = run_ns < WARM_TURN_S * 1e9
    timer.per_sample = max(1, math.ceil(settings.sample_s * 1e9 / run_ns))
    affordable = int(settings.budget_s * 1e9 / (run_ns * timer.per_sample))
    timer.samples = max(MIN_SAMPLES, min(settings.repeat, affordable))


def interleave(timers: list[Timer], settings: Settings) -> None:
    """Sample every timer in alternating turns, so that drifts in the machine's load
    hit all of them alike."""
    for timer in timers:
        plan(timer, settings)
    rounds = min(ROUNDS, *(t.samples for t in timers))
    for r in range(rounds):
        for timer in timers if r % 2 == 0 else timers[::-1]:
            n = timer.samples // rounds + (r < timer.samples % rounds)
            if timer.warm_turns:
                timer.sample(1, 1)
            timer.times_ns += timer.sample(n, timer.per_sample)
            time.sleep(PAUSE_S)


def measure(
    model: Compiled, threads: list[int], settings: Settings, category: str = ""
) -> list[Row]:
    """Time both runtimes on one model at every thread count, all in one interleaved
    schedule (so that speed-ups over thread counts see the same machine), and compare
    their outputs."""
    rows = [Row(model.name, t, category, model.gflop, model.compile_s) for t in threads]
    reference: list[np.ndarray] = []  # the reference interpreter's outputs, once needed
    sessions = [ort_session(model.path, t) for t in threads]
    # single-threaded code gains nothing from a second thread: "n/a", not a repeat
    drivers = [Driver(model, t) if t == 1 or model.threaded else None for t in threads]
    try:
        ort_timers = [Timer(ort_sampler(session, model.feeds)) for session in sessions]
        aotc_timers = [Timer(driver.sample) if driver else None for driver in drivers]
        interleave([*ort_timers, *(t for t in aotc_timers if t)], settings)
        for row, session, driver, ort_timer, aotc_timer in zip(
            rows, sessions, drivers, ort_timers, aotc_timers
        ):
            want = session.run(None, model.feeds)
            row.ort_ms = statistics.median(ort_timer.times_ns) / 1e6
            row.samples = f"{len(ort_timer.times_ns)}x{ort_timer.per_sample}"
            if driver:
                row.aotc_ms = statistics.median(aotc_timer.times_ns) / 1e6
                row.samples += f" / {len(aotc_timer.times_ns)}x{aotc_timer.per_sample}"
                quantized = row.model in QUANTIZED
                got = driver.finish(model.outputs)
                row.agree, row.rel_err = compare(got, want, quantized)
                if not (row.agree or quantized):
                    reference = reference or reference_outputs(onnx.load(model.path), model.feeds)
                    row.agree, row.refereed = refereed(got, want, reference), True
    finally:
        for driver in drivers:
            if driver:
                driver.kill()
    return rows


# ---------------------------------------------------------------------------- report


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None or math.isnan(value) else format(value, fmt)


@dataclass(frozen=True)
class Column:
    """A column of the results table: its header, Markdown alignment and cell text."""

    header: str
    cell: Callable[[Row, float], str]  # (row, GEMM peak) -> text
    align: str = "---:"
    on_error: bool = False  # shown on the row of a model that failed (with its error last)


def _percent_of_peak(r: Row, peak: float) -> str:
    return _num(None if r.gflops is None else 100 * r.gflops / (peak * r.threads), ".3g")


AGREE_TEXT = {True: "yes", False: "**NO**", None: "n/a"}
COLUMNS = [
    Column("model", lambda r, p: r.model, "---", on_error=True),
    Column("GFLOP", lambda r, p: _num(r.gflop, ".4g"), on_error=True),
    Column("ORT ms", lambda r, p: _num(r.ort_ms, ".4g")),
    Column("aotc ms", lambda r, p: _num(r.aotc_ms, ".4g")),
    Column("ratio ORT/aotc", lambda r, p: _num(r.ratio, ".3g")),
    Column("aotc GFLOP/s", lambda r, p: _num(r.gflops, ".3g")),
    Column("% of peak", _percent_of_peak),
    Column("compile s", lambda r, p: _num(r.compile_s, ".1f")),
    Column("samples ORT / aotc", lambda r, p: r.samples, "---"),
    Column("max rel err", lambda r, p: _num(r.rel_err, ".1e")),
    Column("agree", lambda r, p: AGREE_TEXT[r.agree] + " (refereed)" * r.refereed, "---"),
]
# the corpus table names each model's category after its name
CORPUS_COLUMNS = [
    COLUMNS[0],
    Column("category", lambda r, p: r.category, "---", on_error=True),
    *COLUMNS[1:],
]


TOP_KERNEL_COLUMN = Column("top kernel (aotc profile)", lambda r, p: r.top_kernel, "---")
PROFILE_RUNS = 3


def table(rows: list[Row], peak: float, columns: list[Column] = COLUMNS) -> str:
    lines = [
        "| " + " | ".join(c.header for c in columns) + " |",
        "|" + "|".join(c.align for c in columns) + "|",
    ]
    for r in rows:
        if r.error:
            cells = [c.cell(r, peak) if c.on_error else "" for c in columns[:-1]] + [r.error]
        else:
            cells = [c.cell(r, peak) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(map(math.log, values))) if values else None


def _ratios(rows: list[Row]) -> list[float]:
    return [r.ratio for r in rows if r.ratio is not None]


def summary(rows: list[Row], threads: list[int]) -> str:
    lines = []
    for t in threads:
        ratios = _ratios([r for r in rows if r.threads == t])
        lines.append(
            f"- {t} thread(s): geometric-mean ratio ORT/aotc {_num(geomean(ratios), '.3f')} "
            f"over {len(ratios)} models"
        )
    lines += category_summary(rows, threads)
    lines += problem_summary(rows, threads)
    base = {r.model: r for r in rows if r.threads == 1 and not r.error}
    for t in (t for t in threads if t != 1):
        for r in (r for r in rows if r.threads == t and r.model in base and not r.error):
            one = base[r.model]
            aotc = None if r.aotc_ms is None or one.aotc_ms is None else one.aotc_ms / r.aotc_ms
            aotc_text = "n/a" if aotc is None else f"{aotc:.2f}x"
            lines.append(
                f"- {r.model}: speed-up at {t} threads over 1: aotc {aotc_text}, "
                f"ORT {one.ort_ms / r.ort_ms:.2f}x"
            )
    return "\n".join(lines) + "\n"


def category_summary(rows: list[Row], threads: list[int]) -> list[str]:
    """Per category (corpus rows have one): the geometric-mean ratio at each thread count."""
    lines = []
    for category in dict.fromkeys(r.category for r in rows if r.category):
        means = []
        for t in threads:
            ratios = _ratios([r for r in rows if r.threads == t and r.category == category])
            means.append(f"{_num(geomean(ratios), '.3f')} at {t} thread(s) ({len(ratios)})")
        lines.append(f"- {category}: geometric-mean ratio {', '.join(means)}")
    return lines


def problem_summary(rows: list[Row], threads: list[int]) -> list[str]:
    """The models that failed, and those whose outputs disagreed, at the first thread count."""
    first = [r for r in rows if r.threads == threads[0]]
    failed = [r.model for r in first if r.error]
    disagree = [r.model for r in first if r.agree is False]
    return [
        f"- {what}: {len(names)} ({', '.join(names) or 'none'})"
        for what, names in (("failed", failed), ("outputs disagree", disagree))
    ]


def package_versions(names: tuple[str, ...]) -> str:
    versions = []
    for name in names:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    return ", ".join(versions)


def corpus_note() -> str:
    return f"""- Models: bench/corpus.py's corpus, random weights (seed {corpus.SEED}), exported by
  {package_versions(CORPUS_PACKAGES)};
  NAME_dynamo is NAME through torch's dynamo exporter, the others through the TorchScript
  exporter (or skl2onnx). Integer inputs that index a table (token ids) are uniform over
  it, other integer inputs (attention masks) are ones (`models.model_inputs`).
"""


def revision() -> str:
    """`git describe` of the tree that was benchmarked, when it is a git checkout."""
    argv = ["git", "-C", str(BENCH.parent), "describe", "--always", "--dirty"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    return f" from git {done.stdout.strip()}" if done.returncode == 0 else ""


def header_text(
    argv: list[str], peak: float, settings: Settings, loads: list, use_corpus: bool = False
) -> str:
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"model name\s*:\s*(.*)", cpuinfo.read_text())
        cpu = found.group(1) if found else cpu
    load = ", ".join(f"{a:.2f}" for a in loads)
    command = " ".join(["python bench/run.py", *argv])
    title = "Speed on the corpus" if use_corpus else "Speed"
    return f"""# {title}: aotc against onnxruntime

Made by `{command}`{revision()} on {now}.

{corpus_note() if use_corpus else ""}- Machine: {cpu}, {os.cpu_count()} logical CPUs; 1-minute load average at start and end:
  {load} (the machine is shared: noisy neighbours inflate both columns alike).
- Peak: {peak:.1f} GFLOP/s, single-core float32 GEMM: numpy {np.__version__}
  ({blas_name()}) `a @ b` on {settings.peak_n}x{settings.peak_n} matrices in a subprocess
  with {"/".join(THREAD_ENV)}=1, best of {settings.peak_reps} after one warm-up, of OpenBLAS's
  own kernel and the one for the host's vector ISA (`OPENBLAS_CORETYPE`), measured at
  the start and the end of this run (the better one is kept). "% of peak" divides aotc's
  GFLOP/s by T x this peak at T threads.
- GFLOP per inference: counted by `aotc/report.py` over the optimized module (2 per
  multiply-add in dot and convolution, 1 per element and op elsewhere).
- aotc: `bench/driver.c` linked against `libNAME.a` (`cc -O2`), calling `NAME_run` with
  aligned_alloc'ed buffers, timed inside C with clock_gettime(CLOCK_MONOTONIC).
  ORT: onnxruntime {ort.__version__} InferenceSession, ORT_ENABLE_ALL, intra_op_num_threads
  = T, inter_op_num_threads = 1, ORT_SEQUENTIAL, session.force_spinning_stop = 1 (its
  workers stop spinning when a run returns), timed around `session.run` in Python
  (so it includes the binding's per-call cost of some microseconds, which matters for the
  tiny MLP only).
  Same inputs (seed 0); weights are initializers (constants) for both.
- ms: median over samples; a sample is the mean of K back-to-back runs (K chosen so that
  a sample lasts >= {settings.sample_s * 1e3:g} ms), after {settings.warm_s:g} s of warm-up
  (one run when a run is longer); "samples" is N x K. Up to {settings.repeat} samples, fewer
  (at least {MIN_SAMPLES}) when {settings.budget_s:g} s would not fit them. The two runtimes
  are sampled, at all thread counts of a model together, in up to {ROUNDS} alternating
  turns; a turn of a runtime whose run is
  shorter than {WARM_TURN_S * 1e3:g} ms starts with one untimed run (its threads woken, its
  data back in cache).
- Threads: aotc's count is set through the header's thread setter and AOTC_NUM_THREADS;
  "n/a" at T > 1 when the compiled code does not use the runtime's thread pool yet.
- agree: |aotc - ORT| <= {ATOL_SCALE:g} x max|ORT| + {RTOL:g} x |ORT| for every element
  (int8 models, quantized by onnxruntime's tools: <= {QUANTIZED_ATOL_SCALE:g} x max|ORT|,
  since onnxruntime requantizes in f32 and aotc in f64 as onnx.reference does, and a tie
  rounded the other way moves a value a whole quantization step);
  max rel err is max|aotc - ORT| / max|ORT|.  "(refereed)": outside that, both runtimes
  were measured against aotc's reference interpreter (f64 sums, each op rounded to its
  dtype), and aotc agrees when onnxruntime is within the tolerance of it and aotc's
  max|error| / max|reference| is at most {REFEREE_FACTOR:g}x onnxruntime's.
"""


def write_report(
    rows: list[Row], threads: list[int], peak: float, head: str, columns: list[Column] = COLUMNS
) -> str:
    parts = [head]
    for t in threads:
        parts.append(f"\n## {t} thread{'s' if t > 1 else ''}\n\n")
        parts.append(table([r for r in rows if r.threads == t], peak, columns))
    parts.append("\n## Summary\n\n" + summary(rows, threads))
    return "".join(parts)


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", action="store_true", help="the models of bench/corpus.py (bench extra)"
    )
    parser.add_argument(
        "--top-kernel",
        action="store_true",
        help="a column with each model's slowest kernel, from an instrumented build",
    )
    parser.add_argument("--models", default=None, help="comma-separated (default: all)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--repeat", type=int, default=None, help="samples per measurement")
    parser.add_argument("--quick", action="store_true", help="few short samples (smoke test)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default bench/results.md, --corpus: corpus_results.md",
    )
    args = parser.parse_args(argv)
    args.table = model_table(args.corpus)
    args.models = [m for m in args.models.split(",") if m] if args.models else list(args.table)
    unknown = [m for m in args.models if m not in args.table]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(args.table)}")
    args.threads = [int(t) for t in args.threads.split(",") if t]
    if not args.threads or min(args.threads) < 1:
        parser.error("--threads takes positive counts, e.g. 1,2")
    if args.out is None:
        args.out = BENCH / ("corpus_results.md" if args.corpus else "results.md")
    return args


def bench_model(
    name: str,
    build: Builder,
    category: str,
    threads: list[int],
    settings: Settings,
    top_kernel: bool = False,
) -> list[Row]:
    """One model's rows: measured, or its error (building, compiling or running it)."""
    with tempfile.TemporaryDirectory(prefix=f"aotc_bench_{name}_") as tmp:
        try:
            model = compile_model(name, Path(tmp), build)
        except Exception as e:  # noqa: BLE001 - a compiler bug is one model's result too
            return [Row(name, t, category, error=f"failed: {one_line(e)}") for t in threads]
        try:
            rows = measure(model, threads, settings, category)
        except Exception as e:  # noqa: BLE001 - so is a crash of either runtime
            error = f"failed: {one_line(e)}"
            return [
                Row(name, t, category, model.gflop, model.compile_s, error=error) for t in threads
            ]
        if top_kernel:
            for row in rows:
                row.top_kernel = slowest_kernel(model.path, row.threads)
        return rows


def slowest_kernel(path: Path, threads: int) -> str:
    """The profile's slowest kernel (`aotc profile`): its ops and form, its share of the
    run and of this machine's bound."""
    from aotc.driver import CompileOptions
    from aotc.profiling import profile_model

    try:
        profile = profile_model(path, CompileOptions(threads=threads), runs=PROFILE_RUNS)
    except Exception as e:  # noqa: BLE001 - the timing stands without it
        return f"profile failed: {one_line(e)}"
    top = profile.kernels[0]
    return f"{top.cost.label}: {top.share:.0%} of the run at {top.bound_share:.0%} of bound"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    settings = Settings.quick(args.repeat) if args.quick else Settings(args.repeat or 30)
    columns = CORPUS_COLUMNS if args.corpus else COLUMNS
    if args.top_kernel:
        columns = [*columns, TOP_KERNEL_COLUMN]
    loads = [os.getloadavg()[0]]
    peak = measure_peak(settings)
    print(f"single-core f32 GEMM peak: {peak:.1f} GFLOP/s", flush=True)
    rows: list[Row] = []
    for name in args.models:
        category = corpus.CORPUS[name].category if args.corpus else ""
        measured = bench_model(
            name, args.table[name], category, args.threads, settings, args.top_kernel
        )
        rows += measured
        for row in measured:
            line = table([row], peak, columns).splitlines()[-1]
            print(f"{row.threads} thread(s): {line}", flush=True)
    peak = max(peak, measure_peak(settings))
    loads.append(os.getloadavg()[0])
    head = header_text(argv, peak, settings, loads, args.corpus)
    text = write_report(rows, args.threads, peak, head, columns)
    print("\n" + text)
    args.out.write_text(text)
    failed = any(r.error or r.agree is False for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
