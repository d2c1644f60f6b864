"""bench/corpus.py's table reads without the `bench` extra, and bench's inputs and
error rows work for any model (no torch needed)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from aotc_testing import BENCH, bench_module
from onnx import TensorProto, helper, numpy_helper

# imports corpus.py with the packages that build the models made unimportable
_TABLE_WITHOUT_EXTRA = f"""
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {{"torch", "torchvision", "transformers", "sklearn", "skl2onnx"}}:
            raise ImportError(name)
sys.meta_path.insert(0, Refuse())
sys.path.insert(0, {str(BENCH)!r})
import corpus
for name, entry in corpus.CORPUS.items():
    print(name, entry.category, entry.exporter)
"""


def test_corpus_table_reads_without_the_bench_extra():
    argv = [sys.executable, "-c", _TABLE_WITHOUT_EXTRA]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    entries = [line.split() for line in done.stdout.splitlines()]
    categories = {category for _, category, _ in entries}
    exporters = [exporter for _, _, exporter in entries]
    assert len(entries) >= 30
    assert categories == set(bench_module("corpus").CATEGORIES)
    assert exporters.count("dynamo") >= 6 and "torchscript" in exporters
    assert all(name.endswith("_dynamo") == (exporter == "dynamo") for name, _, exporter in entries)


def _token_model() -> onnx.ModelProto:
    """ids (int64) -> Cast -> Gather into a 50-row table; mask (int64) -> Cast -> Mul."""
    table = numpy_helper.from_array(np.zeros((50, 4), np.float32), "table")
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Gather", ["table", "ids32"], ["embedded"]),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axes"], ["mask3"]),
        helper.make_node("Mul", ["embedded", "mask3"], ["y"]),
    ]
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    graph = helper.make_graph(
        nodes,
        "tokens",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 16]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 16]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 4])],
        initializer=[table, axes],
    )
    return helper.make_model(graph)


def test_model_inputs_follow_the_input_dtype():
    feeds = bench_module("models").model_inputs(_token_model())
    ids, mask, x = feeds["ids"], feeds["mask"], feeds["x"]
    assert ids.dtype == np.int64 and ids.shape == (1, 16)  # symbolic batch: 1
    assert ids.min() >= 0 and ids.max() < 50 and len(np.unique(ids)) > 1
    assert mask.dtype == np.int64 and (mask == 1).all()
    assert x.dtype == np.float32 and x.shape == (2, 3) and 0 <= x.min() and x.max() < 1


def test_failed_model_row_shows_its_error_on_one_line():
    pytest.importorskip("onnxruntime")
    run = bench_module("run")
    error = run.one_line(ValueError("no kernel for op\nFoo | bar" + "x" * 1000))
    assert "\n" not in error and "|" not in error and len(error) <= run.ERROR_CHARS
    row = run.Row("m", 1, "ocr", error=f"failed: {error}")
    cells = run.table([row], 100.0, run.CORPUS_COLUMNS).splitlines()[-1].strip("|").split("|")
    assert [c.strip() for c in cells[:2]] == ["m", "ocr"]
    assert cells[-1].strip().startswith("failed: ValueError: no kernel for op Foo / bar")
