"""ONNX maps, which the C API takes and returns as tensors: ZipMap, as scikit-learn's
default export ends (the probability tensor it wraps, its columns' classes in the
header), and map inputs that DictVectorizer or CastMap read (the values in key order,
the keys in the header); tests/fixtures/sklearn/make_fixtures.py."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
from aotc_testing import REPO, build_c, run_cli
from onnx import TensorProto, helper

from aotc.driver import CompileOptions, compile_model

FIXTURES = REPO / "tests" / "fixtures" / "sklearn"
MODEL = FIXTURES / "logistic_regression.onnx"
CLASSES = (10, 20, 30)  # the fixture's labels, in the order of its columns


def test_the_default_sklearn_export_compiles_to_its_probabilities(tmp_path):
    """LogisticRegression exported with no options: the probabilities equal onnxruntime's
    maps (rtol 1e-5, atol 1e-6), the labels its labels, and the header and the compile
    name the classes of the columns."""
    result = run_cli("compile", MODEL, "-o", tmp_path / "build", "--name", "lr", "--input", "X=5x4")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stdout.splitlines() if line.lstrip().startswith("note")]
    assert len(notes) == 1 and "ZipMap 'output_probability'" in notes[0], result.stdout
    header = (tmp_path / "build" / "lr.h").read_text()
    assert "#define LR_OUTPUT_PROBABILITY_LABELS {10, 20, 30}" in header
    for column, label in enumerate(CLASSES):
        assert f"#define LR_OUTPUT_PROBABILITY_CLASS_{label} {column}\n" in header
    loaded = compile_model(MODEL, CompileOptions(input_shapes={"X": (5, 4)})).load()
    x = np.random.default_rng(0).uniform(0, 7, (5, 4)).astype(np.float32)
    labels, probabilities = loaded.run([x])
    want_labels, maps = ort.InferenceSession(MODEL.read_bytes()).run(None, {"X": x})
    np.testing.assert_array_equal(labels, want_labels)
    want = np.array([[row[c] for c in CLASSES] for row in maps], np.float32)
    np.testing.assert_allclose(probabilities, want, rtol=1e-5, atol=1e-6)
    assert len(set(labels.tolist())) > 1  # the inputs reach more than one class


PROGRAM = r"""
#include <stdio.h>
#include "zm.h"

int main(void) {
    static const char *const names[] = ZM_Y_LABELS;
    printf("%d %s %s %s %d\n", ZM_Y_NUM_CLASSES, names[ZM_Y_CLASS_CAT], names[ZM_Y_CLASS_DOG],
           names[ZM_Y_CLASS_DOG_2], ZM_Y_CLASS_A_B);
    return 0;
}
"""


def test_string_labels_become_c_strings_and_macros(tmp_path):
    """Labels that are text: C string literals (escaped), a macro per class (labels that
    spell alike get _2), usable from C as the header says."""
    labels = ["cat", "dog", "Dog", 'a"b?']
    node = helper.make_node("ZipMap", ["x"], ["y"], domain="ai.onnx.ml", classlabels_strings=labels)
    graph = helper.make_graph(
        [node],
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    compiled = compile_model(model, CompileOptions(name="zm"))
    build = tmp_path / "build"
    compiled.write(build)
    (tmp_path / "main.c").write_text(PROGRAM)
    program = build_c([tmp_path / "main.c"], tmp_path / "main", [build], [build / "libzm.a"])
    printed = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    assert printed.split() == ["4", "cat", "dog", "Dog", "3"]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = compiled.load().run([x])
    np.testing.assert_array_equal(y, x)


def test_a_map_input_that_dict_vectorizer_reads_is_its_values_in_key_order(tmp_path):
    """scikit-learn's DictVectorizer pipeline: the input is the vector of the map's
    values in vocabulary order (0 for a key the map lacks); the header lists the keys;
    the probabilities equal onnxruntime's on the maps themselves."""
    model = FIXTURES / "dict_vectorizer.onnx"
    compiled = compile_model(model, CompileOptions(name="dv"))
    assert [t.type_text for t in compiled.inputs] == ["f32[4]"]
    assert any("input 'features' is a map" in note for note in compiled.module.notes)
    header = compiled.write(tmp_path / "build").header.read_text()
    keys = ("petal_length", "petal_width", "sepal_length", "sepal_width")  # sorted
    assert "#define DV_FEATURES_KEYS {" + ", ".join(f'"{k}"' for k in keys) + "}" in header
    assert "#define DV_FEATURES_KEY_PETAL_WIDTH 1\n" in header
    loaded = compiled.load()
    session = ort.InferenceSession(model.read_bytes())
    rng = np.random.default_rng(1)
    for _ in range(4):
        row = {k: float(v) for k, v in zip(keys, rng.uniform(0.5, 7, 4)) if v > 1.5}
        vector = np.array([row.get(k, 0.0) for k in keys], np.float32)
        labels, probabilities = loaded.run([vector])
        want_labels, maps = session.run(None, {"features": row})
        np.testing.assert_array_equal(labels, want_labels)
        want = np.array([[m[c] for c in sorted(m)] for m in maps], np.float32)
        np.testing.assert_allclose(probabilities, want, rtol=1e-5, atol=1e-6)


def _cast_map(form: str) -> onnx.ModelProto:
    node = helper.make_node(
        "CastMap", ["m"], ["y"], domain="ai.onnx.ml", map_form=form, max_map=5, cast_to="TO_FLOAT"
    )
    map_type = helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    )
    graph = helper.make_graph(
        [node],
        "m",
        [helper.make_value_info("m", map_type)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def test_a_sparse_cast_map_takes_keys_0_to_max_map():
    model = _cast_map("SPARSE")
    compiled = compile_model(model)
    assert [t.type_text for t in compiled.inputs] == ["f32[5]"]
    values = {0: 1.5, 3: -2.0}
    (got,) = compiled.load().run([np.array([values.get(k, 0.0) for k in range(5)], np.float32)])
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"m": values})
    np.testing.assert_array_equal(got, want)


def test_a_map_whose_keys_only_the_call_knows_is_refused(tmp_path):
    path = tmp_path / "dense.onnx"
    path.write_bytes(_cast_map("DENSE").SerializeToString())
    result = run_cli("compile", path, "-o", tmp_path / "build")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "input 'm' is a map, which aotc takes only where" in lines[0]
