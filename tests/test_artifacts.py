"""aotc.artifacts: header rendering, C names, archives, atomic writing, the examples.

The model objects here are fakes: small C files that define NAME_run / NAME_run_generic
(a dense layer + softmax, through the runtime's parallel loop), compiled with cc.  Their
outputs are checked against numpy, so the header, the archive and the C app are tested
end to end without the compiler pipeline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aotc import artifacts
from aotc.artifacts import MemoryStats, TensorSpec
from aotc.buffers import Blob
from aotc.errors import AotcError, ToolError
from aotc.ir import DType
from aotc.resources import resource_dir

REPO = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")
CXX = shutil.which("c++") or shutil.which("g++")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")

STATS = MemoryStats(
    arena_bytes=40, alignment=64, lower_bound=40, naive_total=80, weight_bytes=0, kernel_count=2
)

# ------------------------------------------------------------------ fake model objects

FAKE_MODEL_C = r"""
#include <math.h>
#include <stdint.h>
#include "aotc_runtime.h"

#define N_IN {n_in}
#define N_OUT {n_out}

typedef struct {{ const float *x; float *logits; }} job_t;

static float weight(int64_t i, int64_t j) {{
    return (float)(((i * 7 + j * 13 + {salt}) % 17) - 8) / 64.0f;
}}

static void dense(void *p, int64_t begin, int64_t end) {{
    job_t *job = (job_t *)p;
    for (int64_t j = begin; j < end; j++) {{
        float s = 0.0f;
        for (int64_t i = 0; i < N_IN; i++) s += job->x[i] * weight(i, j);
        job->logits[j] = s;
    }}
}}

static _Alignas(64) unsigned char {name}_static_arena[64];

int {name}_run(const float *x, float *probs, void *scratch) {{
    if (!scratch) scratch = {name}_static_arena;
    if ((uintptr_t)scratch % 64u) return 1;
    float *logits = (float *)scratch;
    job_t job = {{x, logits}};
    aotc_parallel_for(N_OUT, dense, &job);
    float top = logits[0], total = 0.0f;
    for (int j = 1; j < N_OUT; j++) top = logits[j] > top ? logits[j] : top;
    for (int j = 0; j < N_OUT; j++) total += probs[j] = expf(logits[j] - top);
    for (int j = 0; j < N_OUT; j++) probs[j] /= total;
    return 0;
}}

int {name}_run_generic(void *const *inputs, void *const *outputs, void *scratch) {{
    return {name}_run((const float *)inputs[0], (float *)outputs[0], scratch);
}}
"""


def fake_expected(x: np.ndarray, n_out: int, salt: int) -> np.ndarray:
    """What the fake model computes, in float64."""
    i = np.arange(x.size)[:, None]
    j = np.arange(n_out)[None, :]
    w = (((i * 7 + j * 13 + salt) % 17) - 8) / 64.0
    logits = x.reshape(-1).astype(np.float64) @ w
    e = np.exp(logits - logits.max())
    return e / e.sum()


def fake_object(tmp: Path, name: str, n_in: int, n_out: int = 10, salt: int = 0) -> Blob:
    source = tmp / f"fake_{name}.c"
    source.write_text(FAKE_MODEL_C.format(name=name, n_in=n_in, n_out=n_out, salt=salt))
    obj = tmp / f"fake_{name}.o"
    runtime = resource_dir("runtime_c")
    cmd = [CC, "-std=c11", "-O1", "-fPIC", "-c", source.name, f"-I{runtime}", "-o", obj.name]
    subprocess.run(cmd, cwd=tmp, check=True)
    return Blob.of(obj.read_bytes())


def mnist_specs() -> tuple[list[TensorSpec], list[TensorSpec]]:
    return (
        [TensorSpec.make("input", DType.F32, (1, 784))],
        [TensorSpec.make("probs", DType.F32, (1, 10))],
    )


def write_mnist(tmp: Path, out_dir: Path, salt: int = 0) -> artifacts.ArtifactPaths:
    inputs, outputs = mnist_specs()
    obj = fake_object(tmp, "mnist", 784, salt=salt)
    return artifacts.write_artifacts(
        out_dir, "mnist", inputs, outputs, obj, STATS, "x86_64-test", "mnist.onnx"
    )


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in cmd], check=True, capture_output=True, text=True, timeout=120, **kwargs
    )


# ------------------------------------------------------------------ names


def test_resources_found():
    assert (resource_dir("templates") / "model.h.j2").is_file()
    assert (resource_dir("runtime_c") / "aotc_runtime.c").is_file()
    assert (resource_dir("runtime_c") / "aotc_runtime.h").is_file()


@pytest.mark.parametrize(
    "name, c_name",
    [
        ("input", "input"),
        ("Input.1", "input_1"),
        ("conv1/W:0", "conv1_w_0"),
        ("__x__", "x"),
        ("a--b", "a_b"),
        ("0", "t_0"),
        ("", "t"),
        ("int", "t_int"),
        ("class", "t_class"),
        ("scratch", "t_scratch"),
        ("errno", "t_errno"),
        ("é", "t"),
    ],
)
def test_c_identifier(name, c_name):
    assert artifacts.c_identifier(name) == c_name


def test_unique_specs_across_inputs_and_outputs():
    # an ONNX graph may output one of its inputs; names that differ in case collide too
    inputs = [TensorSpec.make(n, DType.F32, (2,)) for n in ("x", "X", "x_2")]
    outputs = [TensorSpec.make("x", DType.F32, (2,))]
    new_inputs, new_outputs = artifacts.unique_specs(inputs, outputs)
    c_names = [t.c_name for t in new_inputs + new_outputs]
    assert c_names == ["x", "x_2", "x_2_2", "x_3"]
    assert [t.name for t in new_inputs + new_outputs] == ["x", "X", "x_2", "x"]


@pytest.mark.parametrize("name", ["9lives", "a-b", "", "aotc_runtime", "x y"])
def test_bad_model_names(name):
    inputs, outputs = mnist_specs()
    with pytest.raises(AotcError):
        artifacts.render_header(name, inputs, outputs, STATS, "t", "s")


# ------------------------------------------------------------------ header

# tensors that stress the header: odd names, a scalar, an empty tensor, every C type kind
TRICKY_INPUTS = [
    TensorSpec.make('in "quoted" \\ */ ??/ é', DType.F32, (2, 3)),
    TensorSpec.make("Scalar", DType.BF16, ()),
    TensorSpec.make("mask", DType.PRED, (4,)),
    TensorSpec.make("empty", DType.S64, (3, 0)),
    TensorSpec.make("int", DType.U8, (5,)),
]
TRICKY_OUTPUTS = [
    TensorSpec.make("scalar", DType.F64, ()),
    TensorSpec.make("half", DType.F16, (1, 2, 3, 4)),
]
TRICKY_STATS = MemoryStats(1000, 64, 900, 5000, 123456, 17)


def write_headers(tmp: Path) -> None:
    tricky = artifacts.render_header(
        "tricky", TRICKY_INPUTS, TRICKY_OUTPUTS, TRICKY_STATS, "host */ x", "/* model.onnx"
    )
    (tmp / "tricky.h").write_text(tricky)
    inputs, outputs = mnist_specs()
    (tmp / "mnist.h").write_text(
        artifacts.render_header("mnist", inputs, outputs, STATS, "x86_64", "mnist.onnx")
    )


def test_headers_compile_strict_c99_and_cxx(tmp_path):
    write_headers(tmp_path)
    runtime = resource_dir("runtime_c")
    source = '#include "mnist.h"\n#include "tricky.h"\n#include "aotc_runtime.h"\n'
    source += '#include "mnist.h"\nint main(void) { return mnist_inputs_desc[0].rank - 2; }\n'
    (tmp_path / "tu.c").write_text(source)
    flags = ["-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{runtime}", "-I."]
    run([CC, "-std=c99", *flags, "-c", "tu.c", "-o", "tu_c.o"], cwd=tmp_path)
    if CXX:
        (tmp_path / "tu.cc").write_text(source)
        run([CXX, "-std=c++11", *flags, "-c", "tu.cc", "-o", "tu_cc.o"], cwd=tmp_path)


def test_header_values(tmp_path):
    """Macros and descriptor tables, printed by a C program, match the specs."""
    write_headers(tmp_path)
    inputs, outputs = artifacts.unique_specs(TRICKY_INPUTS, TRICKY_OUTPUTS)
    lines = ["#include <stdio.h>", '#include "tricky.h"', "int main(void) {"]
    lines.append(
        'printf("%u %u %d %d\\n", TRICKY_SCRATCH_BYTES, TRICKY_SCRATCH_ALIGN, '
        "TRICKY_NUM_INPUTS, TRICKY_NUM_OUTPUTS);"
    )
    for t in inputs + outputs:
        m = f"TRICKY_{t.c_name.upper()}"
        dims = "".join(f'printf(" %d", {m}_DIM{i});' for i in range(t.rank))
        lines.append(f'printf("%d %u %u", {m}_RANK, {m}_SIZE, {m}_BYTES); {dims} puts("");')
    for table in ("inputs", "outputs"):
        lines.append(f"for (const tricky_tensor_desc *d = tricky_{table}_desc; d->name; d++) {{")
        lines.append(
            '  printf("[%s] %s %d %zu %zu", d->name, d->dtype, d->rank, d->size, d->bytes);'
        )
        lines.append('  for (int i = 0; i < d->rank; i++) printf(" %lld", (long long)d->dims[i]);')
        lines.append('  puts(""); }')
    lines.append("return 0; }")
    (tmp_path / "values.c").write_text("\n".join(lines))
    run([CC, "-std=c99", "-Wall", "-Werror", "values.c", "-o", "values"], cwd=tmp_path)
    out = subprocess.run([tmp_path / "values"], capture_output=True, check=True).stdout
    got = out.decode("utf-8").splitlines()

    expected = [f"1024 64 {len(inputs)} {len(outputs)}"]  # arena rounded up to the alignment
    for t in inputs + outputs:
        expected.append(" ".join(map(str, [t.rank, t.size, t.nbytes, *t.dims])))
    for t in inputs + outputs:
        dims = "".join(f" {d}" for d in t.dims)
        expected.append(f"[{t.name}] {t.dtype.text} {t.rank} {t.size} {t.nbytes}{dims}")
    assert got == expected
    # the sizes themselves, independently of the specs' properties
    assert got[1:6] == ["2 6 24 2 3", "0 1 2", "1 4 4 4", "2 0 0 3 0", "1 5 5 5"]
    assert got[6:8] == ["0 1 8", "4 24 48 1 2 3 4"]


def test_header_sizes_fit_their_types():
    """A scratch past what size_t and int64_t hold is refused, naming the macro; big blobs'
    sections are stated in the memory plan, small ones' are not."""
    inputs, outputs = mnist_specs()
    huge = MemoryStats(2**63, 64, 2**63, 2**63, 0, 2)
    with pytest.raises(AotcError, match=f"MNIST_SCRATCH_BYTES would be {2**63}"):
        artifacts.render_header("mnist", inputs, outputs, huge, "x86_64", "mnist.onnx")
    big = MemoryStats(2**31, 64, 2**31, 2**31, 0, 2, 0, ".lbss (large)", ".lrodata.x (large)")
    text = artifacts.render_header("mnist", inputs, outputs, big, "x86_64", "mnist.onnx")
    assert " *   static arena   in .lbss (large)\n" in text
    assert " *   weights in     .lrodata.x (large)\n" in text
    small = artifacts.render_header("mnist", inputs, outputs, STATS, "x86_64", "mnist.onnx")
    assert "static arena   in" not in small and "weights in" not in small


def test_header_text():
    inputs, outputs = mnist_specs()
    text = artifacts.render_header("mnist", inputs, outputs, STATS, "x86_64-test", "mnist.onnx")
    assert text == artifacts.render_header(
        "mnist", inputs, outputs, STATS, "x86_64-test", "mnist.onnx"
    )
    assert "int mnist_run(const float *input, float *probs, void *scratch);" in text
    assert "#define MNIST_SCRATCH_BYTES 64u" in text
    assert "#define MNIST_SCRATCH_ALIGN 64u" in text
    assert "#define MNIST_INPUT_DIM1 784" in text
    assert "x86_64-test" in text and "mnist.onnx" in text and "aotc 0" in text
    for word in ("scratch arena", "lower bound", "naive total", "weights", "kernels"):
        assert word in text
    assert not re.search(r"\d{4}-\d\d-\d\d", text)  # no dates
    assert max(len(line) for line in text.splitlines()) <= 100


def test_c_string_and_comment_escaping():
    assert artifacts.c_string('a"b\\c??/\n') == '"a\\"b\\\\c\\?\\?/\\012"'
    assert artifacts.c_string("é") == '"\\303\\251"'
    assert "*/" not in artifacts.c_comment("x*/y") and "??" not in artifacts.c_comment("a???/")


def test_cffi_cdef_parses():
    cffi = pytest.importorskip("cffi")
    ffi = cffi.FFI()
    ffi.cdef(artifacts.cffi_cdef("tricky", TRICKY_INPUTS, TRICKY_OUTPUTS))
    ffi.cdef(artifacts.RUNTIME_CDEF)
    cdef = artifacts.cffi_cdef("tricky", TRICKY_INPUTS, TRICKY_OUTPUTS)
    assert "const bool *mask" in cdef and "double *scalar" in cdef and "#" not in cdef


# ------------------------------------------------------------------ writing


def test_write_artifacts_deterministic(tmp_path):
    a = write_mnist(tmp_path, tmp_path / "a" / "build")
    artifacts.runtime_objects.cache_clear()  # compile the runtime again, not from memory
    b = write_mnist(tmp_path, tmp_path / "b" / "build")
    for first, second in zip((a.header, a.object, a.library), (b.header, b.object, b.library)):
        assert first.read_bytes() == second.read_bytes(), first.name
    members = run(["ar", "t", a.library]).stdout.split()
    assert members == ["mnist.o", "aotc_bounded.o", "aotc_runtime.o"]
    assert str(tmp_path).encode() not in a.library.read_bytes()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["build"]  # no staging left
    assert sorted(p.name for p in (tmp_path / "a" / "build").iterdir()) == [
        "libmnist.a",
        "mnist.h",
        "mnist.o",
    ]


def test_write_artifacts_replaces_old_files(tmp_path):
    out = tmp_path / "build"
    out.mkdir()
    (out / "mnist.h").write_text("old")
    (out / "keep.txt").write_text("mine")
    paths = write_mnist(tmp_path, out)
    assert paths.header.read_text().startswith("/*")
    assert (out / "keep.txt").read_text() == "mine"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(
    "env, message",
    [
        ({"CC": "/nonexistent/cc"}, "C compiler '/nonexistent/cc'"),
        ({"CC": "false"}, "compiling runtime_c/aotc_bounded.c failed"),  # fails mid-way
        ({"AR": "/nonexistent/ar"}, "archiver '/nonexistent/ar'"),
        ({"AR": "false"}, "archiving libmnist.a failed"),
    ],
)
def test_write_artifacts_atomic(tmp_path, monkeypatch, env, message):
    obj = fake_object(tmp_path, "mnist", 784)
    inputs, outputs = mnist_specs()
    parent = tmp_path / "out"
    parent.mkdir()
    existing = parent / "build"
    existing.mkdir()
    (existing / "mnist.h").write_text("old header")
    (existing / "libmnist.a").write_bytes(b"old archive")
    before = snapshot(parent)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for out_dir in (existing, parent / "new" / "deeper"):
        with pytest.raises(ToolError, match=re.escape(message)):
            artifacts.write_artifacts(out_dir, "mnist", inputs, outputs, obj, STATS, "t", "s")
        assert snapshot(parent) == before
        assert sorted(p.name for p in parent.iterdir()) == ["build"]


def test_missing_compiler_message(monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolError) as info:
        artifacts.compile_runtime(tmp_path / "rt")
    assert str(info.value) == (
        "no C compiler found (looked for $CC, cc, gcc, clang): install one, "
        "e.g. apt-get install gcc"
    )
    monkeypatch.delenv("AR", raising=False)
    with pytest.raises(ToolError, match="no archiver found"):
        artifacts.find_archiver()


def test_c_app_example(tmp_path):
    """examples/c_app builds with the documented command and prints what numpy computes."""
    build = tmp_path / "build"
    write_mnist(tmp_path, build, salt=3)
    app = tmp_path / "app"
    main_c = REPO / "examples" / "c_app" / "main.c"
    run([CC, main_c, f"-I{build}", build / "libmnist.a", "-lm", "-lpthread", "-o", app])
    x = np.random.default_rng(0).uniform(0, 1, (1, 784)).astype(np.float32)
    (tmp_path / "x.f32").write_bytes(x.tobytes())
    lines = run([app, tmp_path / "x.f32"]).stdout.splitlines()
    probs = np.array([float(v) for v in lines[:-1]])
    np.testing.assert_allclose(probs, fake_expected(x, 10, 3), rtol=1e-5, atol=1e-7)
    assert lines[-1] == f"argmax: {int(np.argmax(probs))}"
    # no argument: a fixed pattern; a short file is refused
    assert run([app]).stdout.splitlines()[-1].startswith("argmax: ")
    (tmp_path / "short.f32").write_bytes(b"\0" * 12)
    short = subprocess.run([app, tmp_path / "short.f32"], capture_output=True, check=False)
    assert short.returncode == 2
    if shutil.which("make"):
        make_app = tmp_path / "made_app"
        c_app = REPO / "examples" / "c_app"
        run(["make", "-s", "-C", c_app, f"BUILD={build}", f"APP={make_app}"])
        assert run([make_app, tmp_path / "x.f32"]).stdout.splitlines() == lines


TWO_MODELS_APP = r"""
#include <stdio.h>
#include "mnist.h"
#include "cnn.h"

int main(void) {
    static float x[MNIST_INPUT_SIZE], a[MNIST_PROBS_SIZE], b[CNN_PROBS_SIZE];
    static _Alignas(64) unsigned char scratch[CNN_SCRATCH_BYTES];
    for (unsigned i = 0; i < MNIST_INPUT_SIZE; i++) x[i] = (float)(i % 10) / 10.0f;
    aotc_set_num_threads(3);
    if (mnist_run(x, a, NULL) != 0 || cnn_run(x, b, scratch) != 0) return 1;
    if (cnn_run(x, b, scratch + 4) != 1) return 2;  /* misaligned scratch is refused */
    for (unsigned i = 0; i < MNIST_PROBS_SIZE; i++) printf("%.9g %.9g\n", a[i], b[i]);
    printf("threads %d\n", aotc_get_num_threads());
    return 0;
}
"""


def test_two_models_in_one_program(tmp_path):
    """Two libraries, each with a runtime copy, link together (no duplicate symbols)."""
    build = tmp_path / "build"
    write_mnist(tmp_path, build, salt=1)
    cnn_in = [TensorSpec.make("image", DType.F32, (1, 1, 28, 28))]
    cnn_out = [TensorSpec.make("probs", DType.F32, (1, 10))]
    obj = fake_object(tmp_path, "cnn", 784, salt=2)
    artifacts.write_artifacts(build, "cnn", cnn_in, cnn_out, obj, STATS, "t", "cnn.onnx")
    (tmp_path / "app.c").write_text(TWO_MODELS_APP)
    app = tmp_path / "app"
    libs = [build / "libmnist.a", build / "libcnn.a"]
    run(
        [
            CC,
            "-std=c11",
            "-Wall",
            "-Werror",
            "app.c",
            f"-I{build}",
            *libs,
            "-lm",
            "-lpthread",
            "-o",
            app,
        ],
        cwd=tmp_path,
    )
    lines = run([app]).stdout.splitlines()
    assert lines[-1] == "threads 3"
    got = np.array([[float(v) for v in line.split()] for line in lines[:-1]])
    x = (np.arange(784) % 10 / 10).astype(np.float32)
    np.testing.assert_allclose(got[:, 0], fake_expected(x, 10, 1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got[:, 1], fake_expected(x, 10, 2), rtol=1e-5, atol=1e-7)


def test_link_shared_and_call_with_cffi(tmp_path):
    cffi = pytest.importorskip("cffi")
    inputs, outputs = mnist_specs()
    obj = tmp_path / "mnist.o"
    obj.write_bytes(bytes(fake_object(tmp_path, "mnist", 784, salt=5)))
    so = artifacts.link_shared(obj, tmp_path / "libmnist.so")
    ffi = cffi.FFI()
    ffi.cdef(artifacts.cffi_cdef("mnist", inputs, outputs) + artifacts.RUNTIME_CDEF)
    lib = ffi.dlopen(str(so))
    x = np.random.default_rng(1).standard_normal((1, 784)).astype(np.float32)
    expected = fake_expected(x, 10, 5)
    raw = np.zeros(128, np.uint8)
    start = (-raw.ctypes.data) % 64
    scratch = ffi.from_buffer(raw[start : start + 64])
    for threads in (1, 4):
        lib.aotc_set_num_threads(threads)
        assert lib.aotc_get_num_threads() == threads
        y = np.zeros((1, 10), np.float32)
        x_ptr, y_ptr = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
        assert lib.mnist_run(x_ptr, y_ptr, scratch) == 0
        np.testing.assert_allclose(y[0], expected, rtol=1e-5, atol=1e-7)
        y2 = np.zeros((1, 10), np.float32)
        ins = ffi.new("void *[]", [ffi.from_buffer(x)])
        outs = ffi.new("void *[]", [ffi.from_buffer(y2)])
        assert lib.mnist_run_generic(ins, outs, ffi.NULL) == 0
        np.testing.assert_array_equal(y, y2)
    lib.aotc_set_num_threads(1)  # joins the workers before the library can go away


# ------------------------------------------------------------------ example models


@pytest.mark.parametrize(
    "script, model, input_name, shape",
    [
        ("mnist/make_mnist.py", "mnist/mnist.onnx", "input", (1, 784)),
        ("cnn/make_cnn.py", "cnn/cnn.onnx", "image", (1, 1, 28, 28)),
    ],
)
def test_example_models(tmp_path, script, model, input_name, shape):
    """The committed models are what the scripts make; ORT and onnx.reference agree."""
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    committed = REPO / "examples" / model
    assert committed.stat().st_size < 500_000
    fresh = tmp_path / "fresh.onnx"
    run([sys.executable, REPO / "examples" / script, fresh])
    assert fresh.read_bytes() == committed.read_bytes()
    proto = onnx.load(str(committed))
    onnx.checker.check_model(proto, full_check=True)
    assert proto.ir_version == 10 and proto.opset_import[0].version == 17
    assert [i.name for i in proto.graph.input] == [input_name]
    assert [o.name for o in proto.graph.output] == ["probs"]
    x = np.random.default_rng(2).uniform(0, 1, shape).astype(np.float32)
    (reference,) = ReferenceEvaluator(proto).run(None, {input_name: x})
    assert reference.shape == (1, 10)
    np.testing.assert_allclose(reference.sum(), 1.0, rtol=1e-5)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(committed), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {input_name: x})
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-6)
