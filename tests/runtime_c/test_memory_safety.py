"""Memory safety of generated code and the runtime, on a sample of models.

One C driver runs every sample model with buffers of exactly the sizes NAME.h documents
(inputs, outputs, scratch: no slack), so that an access past any of them is caught:
under valgrind's memcheck (the models built for x86-64-v3, as valgrind does not decode
AVX-512), and built with the runtime under -fsanitize=address,undefined.  A second
driver runs models from several threads at once, while the thread count changes, as the
header's thread-safety note promises; also under ThreadSanitizer (the runtime and the
driver instrumented; the model objects are LLVM output and are linked in as they are).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from aotc_testing import EXAMPLES
from onnx import TensorProto, helper

from aotc.artifacts.runtime import runtime_sources
from aotc.conformance import check_outputs, load_cases
from aotc.driver import CompileOptions, compile_model
from aotc.errors import InputValuesRequired
from aotc.ir.bounds import Bounds
from aotc.resources import resource_dir

CC = shutil.which("cc") or shutil.which("gcc")
VALGRIND = shutil.which("valgrind")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")

TARGET = "x86_64:x86-64-v3"
# onnx backend node cases, a spread over the op families (all pass in test_onnx_node.py)
NODE_CASES = [
    "conv_with_strides_padding",
    "conv_with_autopad_same",
    "convtranspose",
    "averagepool_2d_pads",
    "maxpool_2d_pads",
    "globalaveragepool",
    "gemm_all_attributes",
    "matmul_3d",
    "einsum_batch_matmul",
    "softmax_axis_1",
    "logsoftmax_axis_1",
    "reduce_sum_keepdims_random",
    "argmax_keepdims_random",
    "gather_1",
    "gather_elements_1",
    "scatter_elements_with_axis",
    "scatternd",
    "gathernd_example_int32",
    "resize_upsample_scales_linear",
    "resize_downsample_scales_cubic",
    "edge_pad",
    "reflect_pad",
    "slice_neg_steps",
    "concat_3d_axis_1",
    "transpose_all_permutations_3",
    "lstm_defaults",
    "gru_defaults",
    "top_k",
    "layer_normalization_3d_axis1_epsilon",
    "instancenorm_example",
    "cumsum_1d_exclusive",
    "where_long_example",
    "tile",
    "depthtospace_crd_mode_example",
    "lrn",
    "qlinearmatmul_2D_uint8_float32",
    "mod_mixed_sign_int32",
    "range_float_type_positive_delta",
]


@dataclass
class Sample:
    """One compiled model: its name, its inputs and what its outputs should be."""

    name: str
    inputs: list[np.ndarray]
    expected: list[np.ndarray] | None  # None: only memory safety is checked
    rtol: float = 1e-4
    atol: float = 1e-5
    # a model whose outputs the data bounds (TopK by a k given as data): its raw outputs'
    # dtypes and dims, and how they are cut to their extents
    raw_outputs: list[tuple[np.dtype, tuple[int, ...]]] | None = None
    bounds: Bounds | None = None


def small_cnn() -> onnx.ModelProto:
    """Strided, padded, depthwise and pointwise convolutions, a residual add, pooling and
    a classifier: the kernels a CNN compiles to."""
    rng = np.random.default_rng(1)

    def weight(name, *shape):
        data = (rng.standard_normal(shape) * 0.2).astype(np.float32)
        return helper.make_tensor(name, TensorProto.FLOAT, shape, data.ravel())

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "dw"], ["c2"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c2", "pw"], ["c3"]),
        helper.make_node("Add", ["c3", "r1"], ["s"]),
        helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    inits = [
        weight("w1", 8, 3, 3, 3),
        weight("b1", 8),
        weight("dw", 8, 1, 3, 3),
        weight("pw", 8, 8, 1, 1),
        weight("fc", 5, 8),
        weight("fb", 5),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 19, 17])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def transformer_block(seq: int = 7, dim: int = 16, heads: int = 2) -> onnx.ModelProto:
    """Pre-norm self-attention and an MLP with residuals (odd sequence length: no kernel
    gets a multiple of the vector width)."""
    rng = np.random.default_rng(2)
    head = dim // heads
    inits = []

    def const(name, array):
        array = np.asarray(array)
        kind = TensorProto.INT64 if array.dtype == np.int64 else TensorProto.FLOAT
        inits.append(helper.make_tensor(name, kind, array.shape, array.ravel()))
        return name

    def weight(name, *shape):
        return const(name, (rng.standard_normal(shape) * 0.3).astype(np.float32))

    split_shape = const("split_shape", np.array([1, seq, heads, head], np.int64))
    merge_shape = const("merge_shape", np.array([1, seq, dim], np.int64))
    ones = const("ones", np.ones(dim, np.float32))
    zeros = const("zeros", np.zeros(dim, np.float32))
    nodes = [helper.make_node("LayerNormalization", ["x", ones, zeros], ["n1"], axis=-1)]
    for part in "qkv":
        nodes += [
            helper.make_node("MatMul", ["n1", weight(f"w{part}", dim, dim)], [f"{part}0"]),
            helper.make_node("Reshape", [f"{part}0", split_shape], [f"{part}1"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", const("scale", np.float32(head**-0.5))], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx1", merge_shape], ["ctx2"]),
        helper.make_node("MatMul", ["ctx2", weight("wo", dim, dim)], ["o"]),
        helper.make_node("Add", ["x", "o"], ["h"]),
        helper.make_node("LayerNormalization", ["h", ones, zeros], ["n2"], axis=-1),
        helper.make_node("MatMul", ["n2", weight("w1", dim, 3 * dim)], ["m1"]),
        helper.make_node("Add", ["m1", weight("b1", 3 * dim)], ["m2"]),
        helper.make_node("Erf", ["m2"], ["m3"]),
        helper.make_node("Mul", ["m2", "m3"], ["m4"]),
        helper.make_node("MatMul", ["m4", weight("w2", 3 * dim, dim)], ["m5"]),
        helper.make_node("Add", ["h", "m5"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, dim])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _compile(model, name: str, inputs: dict[str, np.ndarray], out: Path):
    """Compile for TARGET into `out`; inputs whose values fix shapes become constants, as
    aotc.backend does.  The compiled model's inputs, in its order."""
    values: dict[str, np.ndarray] = {}
    while True:
        options = CompileOptions(
            name=name,
            input_shapes={n: a.shape for n, a in inputs.items()},
            input_values=values,
            target=TARGET,
            # the masked-padding form that memory plans take at their peak unrolls blocks
            # past valgrind's VEX temporary storage on AVX2; tests/backends check it
            plan_for="speed",
        )
        try:
            compiled = compile_model(model, options)
            break
        except InputValuesRequired as need:
            assert not set(need.inputs) <= set(values), need.inputs
            values = {n: inputs[n] for n in {*values, *need.inputs}}
    compiled.write(out)
    return compiled


def _reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray]):
    """onnxruntime's outputs, or None without it."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def build_samples(out: Path) -> list[Sample]:
    """Every sample model compiled into `out`."""
    samples = []
    cases = {case.name: case for case in load_cases()}
    for short in NODE_CASES:
        case = cases["test_" + short]
        arrays, expected = case.data_sets[0]
        names = [i.name for i in case.model.graph.input]
        inputs = dict(zip(names, map(np.asarray, arrays)))
        compiled = _compile(case.model, short, inputs, out)
        ordered = [inputs[spec.name] for spec in compiled.inputs]
        raw = [(spec.dtype.numpy, spec.dims) for spec in compiled.outputs]
        expected = [np.asarray(e) for e in expected]
        bounds = compiled.module.bounds
        samples.append(Sample(short, ordered, expected, case.rtol, case.atol, raw, bounds))
    rng = np.random.default_rng(0)
    models = {
        "mnist": onnx.load(str(EXAMPLES / "mnist" / "mnist.onnx")),
        "cnn": onnx.load(str(EXAMPLES / "cnn" / "cnn.onnx")),
        "small_cnn": small_cnn(),
        "transformer": transformer_block(),
    }
    for name, model in models.items():
        initializers = {i.name for i in model.graph.initializer}
        inputs = {
            v.name: rng.random(
                [d.dim_value for d in v.type.tensor_type.shape.dim], dtype=np.float32
            )
            for v in model.graph.input
            if v.name not in initializers
        }
        compiled = _compile(model, name, inputs, out)
        ordered = [inputs[spec.name] for spec in compiled.inputs]
        samples.append(Sample(name, ordered, _reference(model, inputs)))
    return samples


DRIVER_HEAD = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "aotc_runtime.h"
%(includes)s

/* A buffer of exactly `bytes` bytes, read from DIR/NAME.KIND.I.bin when `dir` is set. */
static void *exact(const char *dir, const char *name, const char *kind, int i, size_t bytes) {
    void *p = malloc(bytes);
    char path[4096];
    FILE *f;
    if (!dir) return p;
    snprintf(path, sizeof path, "%%s/%%s.%%s%%d.bin", dir, name, kind, i);
    f = fopen(path, "rb");
    if (!f || fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %%s\n", path); exit(3); }
    fclose(f);
    return p;
}

static void save(const char *dir, const char *name, int i, const void *p, size_t bytes) {
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%%s/%%s.out%%d.bin", dir, name, i);
    f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) { fprintf(stderr, "cannot write %%s\n", path); exit(4); }
    fclose(f);
}
"""

# Runs NAME twice (at the thread count given, then at 2 threads), each time with fresh
# buffers of exactly the documented sizes; writes the first outputs (an output byte left
# unwritten is then an uninitialised write(2) buffer to memcheck), requires the second
# run to give the same bytes.
MODEL_FUNCTION = r"""
_Static_assert(%(upper)s_SCRATCH_BYTES %% %(upper)s_SCRATCH_ALIGN == 0, "aligned_alloc's rule");

static int run_%(name)s(const char *dir) {
    void *in[%(upper)s_NUM_INPUTS + 1], *out[2][%(upper)s_NUM_OUTPUTS + 1], *scratch[2];
    int failures = 0;
    for (int i = 0; i < %(upper)s_NUM_INPUTS; i++)
        in[i] = exact(dir, "%(name)s", "in", i, %(name)s_inputs_desc[i].bytes);
    for (int r = 0; r < 2; r++) {
        if (r == 1) aotc_set_num_threads(2);
        for (int o = 0; o < %(upper)s_NUM_OUTPUTS; o++)
            out[r][o] = exact(NULL, "", "", 0, %(name)s_outputs_desc[o].bytes);
        scratch[r] = %(upper)s_SCRATCH_BYTES
            ? aligned_alloc(%(upper)s_SCRATCH_ALIGN, %(upper)s_SCRATCH_BYTES) : NULL;
        if (%(name)s_run_generic(in, out[r], scratch[r]) != 0) {
            fprintf(stderr, "%(name)s: run failed\n");
            failures++;
        }
    }
    for (int o = 0; o < %(upper)s_NUM_OUTPUTS; o++) {
        size_t bytes = %(name)s_outputs_desc[o].bytes;
        save(dir, "%(name)s", o, out[0][o], bytes);
        if (memcmp(out[0][o], out[1][o], bytes) != 0) {
            fprintf(stderr, "%(name)s: output %%d differs at 2 threads\n", o);
            failures++;
        }
        free(out[0][o]);
        free(out[1][o]);
    }
    for (int i = 0; i < %(upper)s_NUM_INPUTS; i++) free(in[i]);
    free(scratch[0]);
    free(scratch[1]);
    aotc_set_num_threads(%(threads)s);
    return failures;
}
"""


def driver_source(samples: list[Sample], threads: int) -> str:
    """The C driver that runs every sample (see MODEL_FUNCTION); usage: driver DIR."""
    includes = "\n".join(f'#include "{s.name}.h"' for s in samples)
    parts = [DRIVER_HEAD % {"includes": includes}]
    for s in samples:
        fields = {
            "name": s.name,
            "upper": s.name.upper(),
            "threads": threads,
        }
        parts.append(MODEL_FUNCTION % fields)
    calls = "\n".join(f"    failures += run_{s.name}(argv[1]);" for s in samples)
    parts.append(
        "int main(int argc, char **argv) {\n    int failures = 0;\n    if (argc != 2) return 2;\n"
        f"    aotc_set_num_threads({threads});\n{calls}\n"
        "    aotc_set_num_threads(1); /* joins the workers: nothing left at exit */\n"
        '    printf("failures=%d\\n", failures);\n    return failures != 0;\n}\n'
    )
    return "".join(parts)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[Sample]]:
    """The samples compiled into one folder, with their inputs as NAME.inI.bin."""
    out = tmp_path_factory.mktemp("memsafe")
    samples = build_samples(out)
    for s in samples:
        for i, array in enumerate(s.inputs):
            (out / f"{s.name}.in{i}.bin").write_bytes(np.ascontiguousarray(array).tobytes())
    return out, samples


def _build(out: Path, source: str, program: str, objects: list[Path], flags=()) -> Path:
    """Compile `source` and link it with `objects` into out/program."""
    (out / f"{program}.c").write_text(source)
    argv = [CC, "-std=c11", "-O1", "-g", "-Wall", "-Werror", "-pthread", *flags]
    argv += [f"-I{out}", f"-I{resource_dir('runtime_c')}", f"{program}.c"]
    argv += [*map(str, objects), "-lm", "-o", program]
    subprocess.run(argv, cwd=out, check=True, capture_output=True, text=True)
    return out / program


def _check_outputs(out: Path, samples: list[Sample]) -> None:
    """The outputs the driver wrote are the expected ones (where known)."""
    for s in samples:
        if s.expected is None:
            continue
        shapes = s.raw_outputs or [(e.dtype, e.shape) for e in s.expected]
        got = [
            np.frombuffer((out / f"{s.name}.out{o}.bin").read_bytes(), dtype).reshape(dims)
            for o, (dtype, dims) in enumerate(shapes)
        ]
        if s.bounds is not None:
            got = s.bounds.actual_outputs(got)
        try:
            check_outputs(s.expected, got, s.rtol, s.atol)
        except AssertionError as e:
            raise AssertionError(f"{s.name}: {e}") from None


def _run(argv: list, out: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*map(str, argv), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )
    print(result.stdout, result.stderr[-20000:])
    return result


@pytest.mark.skipif(VALGRIND is None, reason="valgrind is not installed (apt-get install valgrind)")
def test_valgrind_memcheck(built):
    """No invalid access, uninitialised use or leak at exactly the documented sizes."""
    out, samples = built
    libraries = [out / f"lib{s.name}.a" for s in samples]
    program = _build(out, driver_source(samples, threads=1), "memcheck", libraries)
    result = _run([VALGRIND, "-q", "--error-exitcode=99", "--leak-check=full", program], out)
    assert result.returncode == 0, result.stderr[-20000:]
    assert "failures=0" in result.stdout
    _check_outputs(out, samples)


def test_address_and_undefined_sanitizers(built):
    """The runtime and driver under ASan and UBSan, the models at 2 threads."""
    out, samples = built
    objects = [*runtime_sources(), *(out / f"{s.name}.o" for s in samples)]
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover"]
    program = _build(out, driver_source(samples, threads=2), "asan", objects, flags)
    env = {
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }
    result = _run([program], out, env)
    assert result.returncode == 0, result.stderr[-20000:]
    assert "runtime error" not in result.stderr and "Sanitizer" not in result.stderr
    assert "failures=0" in result.stdout
    _check_outputs(out, samples)


# Two models (one input, one output each) from 4 + 2 threads at once, each call with its
# own scratch (NAME.h: calls that pass their own scratch may run concurrently), while
# another thread keeps changing the pool's size; every output must equal the
# single-threaded run's bytes.
CONCURRENT_DRIVER = r"""
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "aotc_runtime.h"
#include "cnn.h"
#include "transformer.h"

typedef int (*run_fn)(void *const *, void *const *, void *);
typedef struct { run_fn run; size_t in_bytes, out_bytes, scratch_bytes, align; void *in, *ref; } model;
typedef struct { model *m; int iters, bad; pthread_t thread; } job;
static model models[2];
static int stop, enough = 1; /* enough: the pool has changed size often enough */

static void *scratch_for(const model *m) {
    /* a zero-byte scratch still has to be a pointer of its own: NULL is the static arena */
    return aligned_alloc(m->align, m->scratch_bytes ? m->scratch_bytes : m->align);
}

static int run_once(const model *m, void *out, void *scratch) {
    void *in[1] = {m->in}, *outs[1] = {out};
    return m->run(in, outs, scratch);
}

static void *worker(void *p) {
    job *j = (job *)p;
    void *scratch = scratch_for(j->m), *out = malloc(j->m->out_bytes);
    for (int i = 0; i < j->iters || !__atomic_load_n(&enough, __ATOMIC_ACQUIRE); i++) {
        memset(out, 0xff, j->m->out_bytes);
        j->bad += run_once(j->m, out, scratch) != 0 || memcmp(out, j->m->ref, j->m->out_bytes) != 0;
    }
    free(scratch);
    free(out);
    return NULL;
}

static void *toggler(void *p) {
    struct timespec pause = {0, 200000};
    int n = 0, *changes = (int *)p;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        aotc_set_num_threads(1 + n++ % 4);
        if (n == 50) __atomic_store_n(&enough, 1, __ATOMIC_RELEASE);
        nanosleep(&pause, NULL);
    }
    *changes = n;
    return NULL;
}

static void load(model *m, const char *dir, const char *name) {
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s.in0.bin", dir, name);
    m->in = malloc(m->in_bytes);
    f = fopen(path, "rb");
    if (!f || fread(m->in, 1, m->in_bytes, f) != m->in_bytes) { fprintf(stderr, "cannot read %s\n", path); exit(3); }
    fclose(f);
    void *scratch = scratch_for(m);
    m->ref = malloc(m->out_bytes);
    if (run_once(m, m->ref, scratch) != 0) exit(4);
    free(scratch);
}

int main(int argc, char **argv) {
    job jobs[6];
    pthread_t t;
    int bad = 0, changes = 0;
    if (argc != 2) return 2;
    models[0] = (model){cnn_run_generic, CNN_IMAGE_BYTES, CNN_PROBS_BYTES, CNN_SCRATCH_BYTES,
                        CNN_SCRATCH_ALIGN, NULL, NULL};
    models[1] = (model){transformer_run_generic, TRANSFORMER_X_BYTES, TRANSFORMER_Y_BYTES,
                        TRANSFORMER_SCRATCH_BYTES, TRANSFORMER_SCRATCH_ALIGN, NULL, NULL};
    aotc_set_num_threads(1);
    load(&models[0], argv[1], "cnn");
    load(&models[1], argv[1], "transformer");
    for (int round = 0; round < 2; round++) {
        /* round 0: a fixed pool of 4 threads; round 1: its size changes meanwhile */
        aotc_set_num_threads(4);
        if (round == 1) {
            enough = 0;
            pthread_create(&t, NULL, toggler, &changes);
        }
        for (int i = 0; i < 6; i++) {
            jobs[i] = (job){&models[i < 4 ? 0 : 1], ITERS, 0, 0};
            pthread_create(&jobs[i].thread, NULL, worker, &jobs[i]);
        }
        for (int i = 0; i < 6; i++) { pthread_join(jobs[i].thread, NULL); bad += jobs[i].bad; }
        if (round == 1) {
            __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
            pthread_join(t, NULL);
        }
    }
    aotc_set_num_threads(1);
    for (int i = 0; i < 2; i++) { free(models[i].in); free(models[i].ref); }
    printf("changes=%d\nbad=%d\n", changes, bad);
    return bad != 0;
}
"""

SANITIZERS = {
    "none": [],
    "address,undefined": ["-fsanitize=address,undefined", "-fno-sanitize-recover"],
    "thread": ["-fsanitize=thread"],
}


@pytest.mark.parametrize("sanitizer", sorted(SANITIZERS))
def test_concurrent_runs(built, sanitizer):
    """Concurrent calls with their own scratch, of one model and of two, give the
    single-threaded bytes while the thread count changes; no deadlock (timeout)."""
    out, _ = built
    flags = [*SANITIZERS[sanitizer], "-DITERS=" + ("20" if sanitizer == "none" else "6")]
    objects = [*runtime_sources(), out / "cnn.o", out / "transformer.o"]
    program = _build(out, CONCURRENT_DRIVER, f"concurrent_{sanitizer[:6]}", objects, flags)
    env = {
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "TSAN_OPTIONS": "halt_on_error=1",
    }
    result = _run([program], out, env)
    if sanitizer == "thread" and "unexpected memory mapping" in result.stderr:
        pytest.skip("ThreadSanitizer does not run with this kernel's address randomisation")
    assert result.returncode == 0, result.stderr[-20000:]
    assert "WARNING" not in result.stderr and "runtime error" not in result.stderr
    assert "bad=0" in result.stdout
    assert int(result.stdout.split("changes=")[1].split()[0]) >= 50
