"""Hostile-input fuzzing of `aotc compile`: every bad input must end in one line, exit 2.

    python bench/fuzz.py --cases N --seed S [--jobs J] [--timeout T] [--out report.md]
                         [--kinds PREFIX,...] [--failures DIR]

Generates N cases (deterministic for a seed; the mutation kinds of `MUTATORS` take turns)
and runs `aotc compile` on each in a forked child of this process, which imported aotc
once: the child runs `aotc.cli.main(argv)` exactly as `python -m aotc` does, but starts in
milliseconds, and a signal, a hang (killed after --timeout) or an exit code is seen as
from a subprocess.  Each case is classified (`CLASSES`):

- refusal   exit 2, exactly one non-empty stderr line, no traceback
- accepted  exit 0, the header and object written
- internal  exit 3, a traceback, exit 2 with other than one line, or exit 0 without output
- crash     killed by a signal (a child over --mem-limit too) or any other exit code
- hang      still running after --timeout seconds

and, apart from its class, `left behind`: after a non-zero exit the output path must be as
it was (absent, or the file a case put there) with no staging folder beside it
(aotc/artifacts/staging.py promises all or nothing).  Inputs of every other case are
copied under --failures (default build/fuzz-failures) with the command that reproduces
it; the report (stdout, and --out) tables cases per class and per kind and lists them.

The mutation kinds: byte-level damage of small valid ONNX models built here (`SEEDS`),
semantic damage through the onnx API (dims, dtypes, names, attributes, opsets, graph
shapes, initializers, external data), token damage of the HLO text fixtures in
tests/fixtures/hlo, and bad command-line flags.  tests/fuzz/test_fuzz_sample.py runs a
fixed-seed sample of the same table.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
# the aotc beside this script, not another installed copy
sys.path.insert(0, str(REPO))

HLO_FIXTURES = REPO / "tests" / "fixtures" / "hlo"
CLASSES = ("refusal", "accepted", "internal", "crash", "hang")
CLEAN = ("refusal", "accepted")
MODEL = "model.onnx"


@dataclass
class Case:
    """One input: files written into a fresh case folder, and the argv after `aotc`.

    In `argv`, `{dir}` stands for the case folder and `{out}` for the output path."""

    kind: str
    detail: str
    files: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # name -> symlink target
    argv: list[str] = field(default_factory=lambda: ["compile", "{dir}/" + MODEL])
    out: str = "out"  # the output path, relative to the case folder


@dataclass
class Result:
    index: int
    case: Case
    cls: str
    exit: int | None
    stderr: str
    seconds: float
    left_behind: str = ""  # what a failed compile left in or beside the output path
    repro: str = ""

    @property
    def clean(self) -> bool:
        return self.cls in CLEAN and not self.left_behind

    @property
    def message(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


# ---------------------------------------------------------------------------- seed models


def _value(name, dims, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, dims)


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _weights(rng: np.random.Generator, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _mlp(w):
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    inits = [
        _const("w1", _weights(w, 8, 16)),
        _const("b1", _weights(w, 16)),
        _const("w2", _weights(w, 16, 4)),
    ]
    return helper.make_graph(nodes, "mlp", [_value("x", [2, 8])], [_value("y", [2, 4])], inits)


def _conv(w):
    nodes = [
        helper.make_node(
            "Conv", ["x", "k", "kb"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]
        ),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "g", "gb"], ["y"], transB=1),
    ]
    inits = [
        _const("k", _weights(w, 4, 3, 3, 3)),
        _const("kb", _weights(w, 4)),
        _const("g", _weights(w, 5, 64)),
        _const("gb", _weights(w, 5)),
    ]
    return helper.make_graph(
        nodes, "convnet", [_value("x", [1, 3, 8, 8])], [_value("y", [1, 5])], inits
    )


def _branch(name, op):
    return helper.make_graph(
        [helper.make_node(op, ["x"], [f"{name}_y"])], name, [], [_value(f"{name}_y", [2, 3])]
    )


def _control(w):
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
        ],
        "body",
        [_value("i", [], TensorProto.INT64), _value("cond_in", [], TensorProto.BOOL)],
        [_value("cond_out", [], TensorProto.BOOL), _value("acc_out", [2, 3])],
    )
    body.input.append(_value("acc_in", [2, 3]))
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node(
            "If",
            ["cond"],
            ["b"],
            then_branch=_branch("then", "Relu"),
            else_branch=_branch("else", "Neg"),
        ),
        helper.make_node("Loop", ["trips", "true", "b"], ["y"], body=body),
    ]
    inits = [
        _const("zero", np.float32(0)),
        _const("trips", np.int64(3)),
        _const("true", np.bool_(True)),
    ]
    return helper.make_graph(nodes, "control", [_value("x", [2, 3])], [_value("y", [2, 3])], inits)


def _attention(w):
    d = 8
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Div", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["a"], axis=-1),
        helper.make_node("MatMul", ["a", "v"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["y"], axis=-1),
    ]
    inits = [
        _const("wq", _weights(w, d, d)),
        _const("wk", _weights(w, d, d)),
        _const("wv", _weights(w, d, d)),
        _const("scale", np.float32(np.sqrt(d))),
        _const("gamma", np.ones(d, np.float32)),
        _const("beta", np.zeros(d, np.float32)),
    ]
    return helper.make_graph(
        nodes, "attention", [_value("x", [1, 4, d])], [_value("y", [1, 4, d])], inits
    )


SEEDS: dict[str, Callable[[np.random.Generator], onnx.GraphProto]] = {
    "mlp": _mlp,
    "conv": _conv,
    "control": _control,
    "attention": _attention,
}


def seed_model(rng: random.Random) -> onnx.ModelProto:
    """A valid seed model (one of `SEEDS`, opset 17..21, IR version 9)."""
    name = rng.choice(sorted(SEEDS))
    graph = SEEDS[name](np.random.default_rng(rng.randrange(2**32)))
    opset = rng.randint(17, 21)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _onnx_case(kind, detail, model: onnx.ModelProto, **extra) -> Case:
    return Case(kind, detail, files={MODEL: model.SerializeToString()}, **extra)


# ------------------------------------------------------------------------ byte mutations


def _bitflip(rng, data: bytearray) -> str:
    flips = [rng.randrange(len(data) * 8) for _ in range(rng.randint(1, 8))]
    for bit in flips:
        data[bit // 8] ^= 1 << (bit % 8)
    return f"flipped bits {flips}"


def _truncate(rng, data: bytearray) -> str:
    at = rng.randrange(len(data))
    del data[at:]
    return f"truncated to {at} bytes"


def _insert(rng, data: bytearray) -> str:
    at, n = rng.randrange(len(data)), rng.randint(1, 16)
    data[at:at] = bytes(rng.randrange(256) for _ in range(n))
    return f"inserted {n} random bytes at {at}"


def _delete(rng, data: bytearray) -> str:
    at, n = rng.randrange(len(data)), rng.randint(1, 32)
    del data[at : at + n]
    return f"deleted {n} bytes at {at}"


def _duplicate(rng, data: bytearray) -> str:
    at, n = rng.randrange(len(data)), rng.randint(1, 256)
    data[at:at] = data[at : at + n]
    return f"duplicated {n} bytes at {at}"


def _byte_mutator(mutate):
    def generate(rng: random.Random) -> Case:
        model = seed_model(rng)
        data = bytearray(model.SerializeToString())
        detail = mutate(rng, data)
        return Case("", f"{model.graph.name}: {detail}", files={MODEL: bytes(data)})

    return generate


# -------------------------------------------------------------------- semantic mutations


def _tensor_types(model):
    """Every declared tensor type of the top graph (inputs, outputs, value_info)."""
    g = model.graph
    return [v for v in [*g.input, *g.output, *g.value_info] if v.type.HasField("tensor_type")]


def _some_dim(rng, model):
    value = rng.choice(_tensor_types(model))
    shape = value.type.tensor_type.shape
    if not shape.dim:
        shape.dim.add()
    return value.name, rng.choice(shape.dim)


def _dims(values):
    def mutate(rng, model) -> str:
        name, dim = _some_dim(rng, model)
        new = rng.choice(values)
        if isinstance(new, str):
            dim.dim_param = new
        else:
            dim.dim_value = new
        return f"a dim of {name!r} -> {new!r}"

    return mutate


def _dtype(values):
    def mutate(rng, model) -> str:
        value = rng.choice(_tensor_types(model))
        new = rng.choice(values)
        value.type.tensor_type.elem_type = new
        return f"elem_type of {value.name!r} -> {new}"

    return mutate


def _node_names(model):
    return [(n, i) for n in model.graph.node for i in range(len(n.input)) if n.input[i]]


def _name_empty(rng, model) -> str:
    node, i = rng.choice(_node_names(model))
    node.input[i] = ""
    return f"input {i} of {node.op_type} -> ''"


def _name_dangling(rng, model) -> str:
    node, i = rng.choice(_node_names(model))
    node.input[i] = "no_such_value"
    return f"input {i} of {node.op_type} -> 'no_such_value'"


def _name_duplicate(rng, model) -> str:
    choice = rng.randrange(3)
    g = model.graph
    if choice == 0 and len(g.node) > 1:  # two nodes write the same value
        a, b = rng.sample(range(len(g.node)), 2)
        g.node[b].output[0] = g.node[a].output[0]
        return f"{g.node[b].op_type} writes {g.node[a].output[0]!r} too"
    if choice == 1:
        g.input.append(g.input[0])
        return f"graph input {g.input[0].name!r} twice"
    if g.initializer:
        g.initializer.append(g.initializer[0])
        return f"initializer {g.initializer[0].name!r} twice"
    g.output.append(g.output[0])
    return f"graph output {g.output[0].name!r} twice"


def _rename(model, old: str, new: str) -> None:
    g = model.graph
    for v in [*g.input, *g.output, *g.value_info, *g.initializer]:
        if v.name == old:
            v.name = new
    for node in g.node:
        node.input[:] = [new if x == old else x for x in node.input]
        node.output[:] = [new if x == old else x for x in node.output]


def _name_nonascii(rng, model) -> str:
    old = rng.choice([model.graph.input[0].name, model.graph.output[0].name])
    new = rng.choice(["x\u00e9\u4e2d", "\u0000", "\U0001f600", "a b/..\\c", "1"])
    _rename(model, old, new)
    return f"renamed {old!r} -> {new!r}"


def _attributed(model):
    return [n for n in model.graph.node if n.attribute]


def _attr_missing(rng, model) -> str:
    node = rng.choice(_attributed(model))
    attr = node.attribute.pop(rng.randrange(len(node.attribute)))
    return f"removed {node.op_type}.{attr.name}"


def _attr_wrong_type(rng, model) -> str:
    node = rng.choice(_attributed(model))
    i = rng.randrange(len(node.attribute))
    name = node.attribute[i].name
    new = rng.choice([1.5, "text", [1.0, 2.0], b"\xff", -1])
    node.attribute[i].CopyFrom(helper.make_attribute(name, new))
    return f"{node.op_type}.{name} -> {new!r}"


def _ints_attr(node, name, values):
    for attr in node.attribute:
        if attr.name == name:
            node.attribute.remove(attr)
            break
    node.attribute.append(helper.make_attribute(name, values, attr_type=onnx.AttributeProto.INTS))


def _windowed(model):
    return [n for n in model.graph.node if n.op_type in ("Conv", "MaxPool")]


def _attr_window(name, options):
    def mutate(rng, model) -> str:
        nodes = _windowed(model)
        if not nodes:  # only the conv seed has windows: give it one
            model.CopyFrom(
                helper.make_model(
                    _conv(np.random.default_rng(0)),
                    opset_imports=[helper.make_opsetid("", 17)],
                    ir_version=9,
                )
            )
            nodes = _windowed(model)
        node = rng.choice(nodes)
        values = rng.choice(options)
        _ints_attr(node, name, values)
        return f"{node.op_type}.{name} -> {values}"

    return mutate


def _attr_huge(rng, model) -> str:
    node = rng.choice(_attributed(model))
    attr = rng.choice(node.attribute)
    huge = rng.choice([2**62, -(2**62), 10**9, 2**31])
    if attr.type == onnx.AttributeProto.INTS:
        attr.ints[:] = [huge] * max(1, len(attr.ints))
    else:
        attr.CopyFrom(helper.make_attribute(attr.name, huge))
    return f"{node.op_type}.{attr.name} -> {huge}"


def _opset(values):
    def mutate(rng, model) -> str:
        new = rng.choice(values)
        model.opset_import[0].version = new
        return f"opset -> {new}"

    return mutate


def _ir_version(rng, model) -> str:
    new = rng.choice([0, -1, 2**62, 99])
    model.ir_version = new
    return f"ir_version -> {new}"


def _cycle(rng, model) -> str:
    g = model.graph
    a, b = sorted(rng.sample(range(len(g.node)), 2))
    g.node[a].input[0] = g.node[b].output[0]  # a reads what a later node computes from a
    return f"{g.node[a].op_type} reads {g.node[b].output[0]!r}, a later node's output"


# nodes of graph.chain and inputs of graph.wide's one node (the CI sample takes fewer)
GRAPH_SIZE = 20_000


def _wide(rng, model) -> str:
    n = GRAPH_SIZE
    graph = helper.make_graph(
        [helper.make_node(rng.choice(["Sum", "Concat"]), ["x"] * n, ["y"], axis=0)],
        "wide",
        [_value("x", [1, 2])],
        [_value("y", None)],
    )
    model.graph.CopyFrom(graph)
    return f"one {graph.node[0].op_type} with {n} inputs"


def _chain(rng, model) -> str:
    n = GRAPH_SIZE
    names = ["x", *(f"t{i}" for i in range(n - 1)), "y"]
    nodes = [helper.make_node("Relu", [a], [b]) for a, b in itertools.pairwise(names)]
    model.graph.CopyFrom(helper.make_graph(nodes, "chain", [_value("x", [4])], [_value("y", [4])]))
    return f"a chain of {n} Relu nodes"


def _nested_if(rng, model) -> str:
    depth = rng.choice([64, 500, 2000])
    leaf = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "leaf", [], [_value("y", [2])]
    )
    model.graph.CopyFrom(
        helper.make_graph([], "nested", [_value("x", [2]), _value("c", [], TensorProto.BOOL)], [])
    )
    graph = model.graph
    for level in range(depth):  # built in place: make_attribute would copy, quadratically
        node = graph.node.add(op_type="If", input=["c"], output=["y"])
        node.attribute.add(name="else_branch", type=onnx.AttributeProto.GRAPH).g.CopyFrom(leaf)
        then = node.attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH)
        graph.output.append(_value("y", [2]))
        graph = then.g
        graph.name = f"then{level}"
    graph.CopyFrom(leaf)
    return f"If nested {depth} deep"


def _init_length(rng, model) -> str:
    init = rng.choice(list(model.graph.initializer))
    data = numpy_helper.to_array(init).tobytes()
    cut = rng.choice([0, 1, len(data) // 2, len(data) + 4, len(data) * 3])
    init.ClearField("float_data")
    init.ClearField("int64_data")
    init.raw_data = (data * 4)[:cut]
    return f"initializer {init.name!r} of {len(data)} bytes given {cut}"


def _semantic(mutate):
    def generate(rng: random.Random) -> Case:
        model = seed_model(rng)
        detail = mutate(rng, model)
        return _onnx_case("", f"{model.graph.name}: {detail}", model)

    return generate


# ------------------------------------------------------------------------- external data


def _external(location: str, offset: int | None, length: int | None, files=None, links=None):
    def generate(rng: random.Random) -> Case:
        model = seed_model(rng)
        init = max(model.graph.initializer, key=lambda t: len(numpy_helper.to_array(t).tobytes()))
        data = numpy_helper.to_array(init).tobytes()
        init.ClearField("raw_data")
        init.ClearField("float_data")
        init.data_location = TensorProto.EXTERNAL
        entries = {"location": location}
        if offset is not None:
            entries["offset"] = str(offset)
        if length is not None:
            entries["length"] = str(length if length >= 0 else len(data) + 64)
        for key, value in entries.items():
            init.external_data.add(key=key, value=value)
        extra = {name: data for name in files or ()}
        detail = f"{model.graph.name}: {init.name!r} in {location!r} at {entries}"
        case = _onnx_case("", detail, model, links=dict(links or {}))
        case.files.update(extra)
        return case

    return generate


# ------------------------------------------------------------------------ HLO text tokens

_TOKEN = re.compile(r"\s+|[A-Za-z_][\w.\-]*|\d+|.", re.DOTALL)


def _hlo_tokens(rng):
    path = rng.choice(sorted(HLO_FIXTURES.glob("*.hlo")))
    return path.name, _TOKEN.findall(path.read_text())


def _words(tokens):
    return [i for i, t in enumerate(tokens) if not t.isspace()]


def _hlo_delete(rng, tokens) -> str:
    i = rng.choice(_words(tokens))
    return f"deleted {tokens.pop(i)!r} (token {i})"


def _hlo_duplicate(rng, tokens) -> str:
    i = rng.choice(_words(tokens))
    tokens.insert(i, tokens[i])
    return f"duplicated {tokens[i]!r} (token {i})"


def _hlo_swap(rng, tokens) -> str:
    i, j = rng.sample(_words(tokens), 2)
    tokens[i], tokens[j] = tokens[j], tokens[i]
    return f"swapped {tokens[i]!r} and {tokens[j]!r} (tokens {i}, {j})"


def _hlo_number(rng, tokens) -> str:
    numbers = [i for i, t in enumerate(tokens) if t.isdigit()]
    i = rng.choice(numbers)
    new = str(rng.choice([0, 1, 7, 2**31, 2**63, 10**30, 99999]))
    old, tokens[i] = tokens[i], new
    return f"number {old} -> {new} (token {i})"


def _hlo(mutate):
    def generate(rng: random.Random) -> Case:
        name, tokens = _hlo_tokens(rng)
        detail = mutate(rng, tokens)
        files = {"model.hlo": "".join(tokens).encode()}
        return Case("", f"{name}: {detail}", files=files, argv=["compile", "{dir}/model.hlo"])

    return generate


# -------------------------------------------------------------------------- command line


def _cli_flags(options: list[list[str]]):
    """Valid model, bad flags: one of `options` added to the command."""

    def generate(rng: random.Random) -> Case:
        model = seed_model(rng)
        flags = rng.choice(options)
        name = model.graph.input[0].name
        flags = [f.replace("{input}", name) for f in flags]
        argv = ["compile", "{dir}/" + MODEL, *flags]
        return _onnx_case("", f"{model.graph.name}: flags {flags}", model, argv=argv)

    return generate


def _cli_case(detail, argv, files=None, out="out"):
    def generate(rng: random.Random) -> Case:
        model = seed_model(rng)
        case = _onnx_case("", detail, model, argv=argv, out=out)
        case.files.update(files or {})
        return case

    return generate


CLI_UNKNOWN = [["--frobnicate"], ["-Z"], ["--input"], ["--const"], ["-O"], ["--"], ["-"], ["-x"]]
CLI_INPUT = [
    ["--input", v]
    for v in [
        "{input}=",
        "=1x2",
        "{input}=1xx2",
        "{input}=-1x8",
        "{input}=99999999999999999999x8",
        "{input}=1x2x3x4x5x6x7x8x9",
        "nosuch=1x4",
        "{input}=0x8",
        "{input}=2,4,",
        "{input}=3x8",
        "{input}",
        "{input}=\u0661x8",
        "{input}=1x" + "1x" * 2000 + "1",
    ]
]
CLI_CONST = [
    ["--const", v]
    for v in [
        "{input}=1,2,abc",
        "{input}=",
        "nosuch=1",
        "{input}=nan,inf",
        "{input}=1e999",
        ",".join(["{input}=1"] * 1000),
        "{input}=" + ",".join(["1"] * 16),
        "=1,2",
        "{input}=0x10",
    ]
]
CLI_TARGET = [
    ["--target", v]
    for v in [
        "",
        "nosuch",
        "cuda:sm_1",
        "x86_64:",
        ":",
        "cuda:",
        "aarch64-linux-gnu:nosuchcpu",
        "x" * 1000,
        "x86_64:x86-64-v99",
        "host:host:host",
        "cuda:sm_90,,",
    ]
]
CLI_OPT = [["-O", v] for v in ["4", "-1", "abc", "99999999999999999999", ""]] + [
    ["--threads", v] for v in ["-1", "abc", "99999999999", ""]
]
CLI_NAME = [["--name", v] for v in ["", "1abc", "a b", "../../x", "\u4e2d", "x" * 5000, "int"]]


MUTATORS: dict[str, Callable[[random.Random], Case]] = {
    "bytes.bitflip": _byte_mutator(_bitflip),
    "bytes.truncate": _byte_mutator(_truncate),
    "bytes.insert": _byte_mutator(_insert),
    "bytes.delete": _byte_mutator(_delete),
    "bytes.duplicate": _byte_mutator(_duplicate),
    "dims.negative": _semantic(_dims([-1, -7, -(2**40)])),
    "dims.zero": _semantic(_dims([0])),
    "dims.huge": _semantic(_dims([2**40, 10**9, 2**63 - 1, 2**31])),
    "dims.symbolic": _semantic(_dims(["N", "", "batch size", "\u00e9"])),
    "dtype.undefined": _semantic(_dtype([TensorProto.UNDEFINED])),
    "dtype.string": _semantic(_dtype([TensorProto.STRING])),
    "dtype.wrong": _semantic(_dtype([TensorProto.INT64, TensorProto.BOOL, 99, 1000])),
    "names.empty": _semantic(_name_empty),
    "names.duplicate": _semantic(_name_duplicate),
    "names.dangling": _semantic(_name_dangling),
    "names.nonascii": _semantic(_name_nonascii),
    "attr.missing": _semantic(_attr_missing),
    "attr.wrong_type": _semantic(_attr_wrong_type),
    "attr.stride0": _semantic(_attr_window("strides", [[0, 0], [0, 1], [-1, 1]])),
    "attr.empty_kernel": _semantic(_attr_window("kernel_shape", [[], [0, 0], [3]])),
    "attr.huge": _semantic(_attr_huge),
    "opset.zero": _semantic(_opset([0, -1])),
    "opset.huge": _semantic(_opset([2**62, 10**6, 99])),
    "opset.ir_version": _semantic(_ir_version),
    "graph.cycle": _semantic(_cycle),
    "graph.wide": _semantic(_wide),
    "graph.chain": _semantic(_chain),
    "graph.nested_if": _semantic(_nested_if),
    "init.wrong_length": _semantic(_init_length),
    "extdata.parent": _external("../x.bin", None, None),
    "extdata.absolute": _external("/etc/passwd", 0, 64),
    "extdata.symlink": _external("w.bin", None, None, links={"w.bin": "/etc/passwd"}),
    "extdata.missing": _external("nowhere.bin", None, None),
    "extdata.past_end": _external("w.bin", 1 << 20, 64, files=["w.bin"]),
    "extdata.too_long": _external("w.bin", 0, -1, files=["w.bin"]),
    "hlo.delete": _hlo(_hlo_delete),
    "hlo.duplicate": _hlo(_hlo_duplicate),
    "hlo.swap": _hlo(_hlo_swap),
    "hlo.number": _hlo(_hlo_number),
    "cli.unknown_flag": _cli_flags(CLI_UNKNOWN),
    "cli.input_spec": _cli_flags(CLI_INPUT),
    "cli.const_spec": _cli_flags(CLI_CONST),
    "cli.target": _cli_flags(CLI_TARGET),
    "cli.opt_threads": _cli_flags(CLI_OPT),
    "cli.name": _cli_flags(CLI_NAME),
    "cli.missing_file": _cli_case("no such model file", ["compile", "{dir}/absent.onnx"]),
    "cli.directory_model": _cli_case("the model is a folder", ["compile", "{dir}"]),
    "cli.empty_file": _cli_case(
        "an empty model file", ["compile", "{dir}/empty.onnx"], {"empty.onnx": b""}
    ),
    "cli.output_is_file": _cli_case(
        "the output path is a file", ["compile", "{dir}/" + MODEL], {"taken": b"keep"}, "taken"
    ),
    "cli.output_under_file": _cli_case(
        "the output path is below a file",
        ["compile", "{dir}/" + MODEL],
        {"taken": b"keep"},
        "taken/sub",
    ),
}


def generate(count: int, seed: int, kinds: list[str] | None = None) -> list[Case]:
    """`count` cases; the kinds (those starting with a prefix in `kinds`) take turns, and
    case i depends only on (seed, i)."""
    table = [k for k in MUTATORS if not kinds or any(k.startswith(p) for p in kinds)]
    if not table:
        raise SystemExit(f"fuzz: no mutation kind starts with {kinds}")
    cases = []
    for i in range(count):
        kind = table[i % len(table)]
        case = MUTATORS[kind](random.Random(f"{seed}:{i}"))
        case.kind = kind
        cases.append(case)
    return cases


# --------------------------------------------------------------------------------- runner


def _preload() -> Callable[[list[str]], int]:
    """Import aotc (and what a compile imports lazily) once, before forking."""
    import importlib

    from aotc import cli

    for module in ("aotc.driver", "aotc.frontends.onnx", "aotc.frontends.hlo", "aotc.backends"):
        importlib.import_module(module)
    return cli.main


def _child(main, argv: list[str], stderr_path: Path, mem_limit: int) -> None:
    """In the forked child: run the CLI as `python -m aotc` would, then _exit."""
    code = 1
    try:
        os.setpgid(0, 0)  # its own group: a hang is killed with its C compilers
        if mem_limit:
            resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
        out = os.open(os.devnull, os.O_WRONLY)
        err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        # fresh streams on fds 1 and 2: pytest's capture replaced sys.stdout and sys.stderr
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = sys.__stderr__ = open(2, "w", closefd=False)  # noqa: SIM115
        os.environ.pop("AOTC_TRACEBACK", None)
        try:
            code = main(argv)
        except SystemExit as e:  # argparse exits; a str code is printed, as Python does
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - what escapes main is the finding
            traceback.print_exc()
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # still _exit below
                stream.flush()
        os._exit(code if isinstance(code, int) else 1)


def _prepare(case: Case, folder: Path) -> tuple[list[str], Path, object]:
    folder.mkdir(parents=True)
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    for name, target in case.links.items():
        os.symlink(target, folder / name)
    out = folder / case.out
    before = out.read_bytes() if out.is_file() else None
    argv = [a.replace("{dir}", str(folder)) for a in case.argv]
    return [*argv, "-o", str(out)], out, before


def _left_behind(out: Path, before, folder: Path) -> str:
    """What a failed compile left: the output path changed, or a staging folder beside it."""
    found = []
    if before is not None:
        if not out.is_file() or out.read_bytes() != before:
            found.append(f"{out.name} (a file) changed")
    elif out.is_dir() and any(out.iterdir()):
        found.append(f"{out.name}/: {sorted(p.name for p in out.iterdir())[:5]}")
    elif out.exists() and not out.is_dir():
        found.append(f"{out.name} created")
    beside = [folder, out.parent] if out.parent.is_dir() else [folder]
    found += sorted({p.name for d in beside for p in d.iterdir() if ".aotc-" in p.name})
    return "; ".join(found)


def _classify(code: int | None, signaled: int | None, stderr: str, out: Path) -> str:
    if code is None and signaled is None:
        return "hang"
    if signaled is not None:
        return "crash"
    lines = [line for line in stderr.splitlines() if line.strip()]
    traced = "Traceback (most recent call last)" in stderr
    if code == 2:
        return "refusal" if len(lines) == 1 and not traced else "internal"
    if code == 0:
        written = out.is_dir() and any(out.glob("*.h")) and any(out.glob("*.o"))
        return "accepted" if written and not traced else "internal"
    if code in (1, 3) or traced:
        return "internal"
    return "crash"


def run_cases(
    cases: list[Case],
    workdir: Path,
    jobs: int = 1,
    timeout: float = 60.0,
    mem_limit: int = 8 << 30,
    failures: Path | None = None,
    progress: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run every case in a forked child, `jobs` at a time; results in case order."""
    main = _preload()
    results: dict[int, Result] = {}
    running: dict[int, tuple[int, float, Path, Path, object]] = {}  # pid -> its case
    pending = list(enumerate(cases))
    pending.reverse()
    while pending or running:
        while pending and len(running) < jobs:
            index, case = pending.pop()
            folder = workdir / f"case{index:05d}"
            argv, _, before = _prepare(case, folder)
            stderr_path = workdir / f"case{index:05d}.err"
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(main, argv, stderr_path, mem_limit)
            with contextlib.suppress(OSError):  # the child does it too; whoever is first
                os.setpgid(pid, pid)
            running[pid] = (index, time.monotonic(), folder, stderr_path, before)
        pid, status = os.waitpid(-1, os.WNOHANG)
        now = time.monotonic()
        finished = []
        if pid:
            finished.append((pid, status))
        for other, (_, started, *_rest) in running.items():
            if other != pid and now - started > timeout:
                _kill(other)
                finished.append((other, None))
        for done, status in finished:
            index, started, folder, stderr_path, before = running.pop(done)
            results[index] = _result(
                index, cases[index], status, now - started, folder, stderr_path, before
            )
            result = results[index]
            if not result.clean and failures is not None:
                result.repro = _keep(result, failures)
            shutil.rmtree(folder, ignore_errors=True)
            stderr_path.unlink(missing_ok=True)
            if progress:
                progress(result)
        if not finished:
            time.sleep(0.01)
    return [results[i] for i in range(len(cases))]


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def _result(index, case, status, seconds, folder, stderr_path, before) -> Result:
    out = folder / case.out
    code = signaled = None
    if status is not None:
        if os.WIFSIGNALED(status):
            signaled = os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
    stderr = stderr_path.read_text(errors="replace") if stderr_path.exists() else ""
    if signaled is not None:
        stderr += f"\n(killed by signal {signal.Signals(signaled).name})"
    elif status is None:
        stderr += "\n(timed out)"
    cls = _classify(code, signaled, stderr, out)
    left = _left_behind(out, before, folder) if code != 0 else ""
    return Result(index, case, cls, code, stderr, seconds, left)


def _keep(result: Result, failures: Path) -> str:
    """Write a failing case's inputs and the command that reproduces it under `failures`."""
    target = failures / f"{result.index:05d}-{result.case.kind}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name, data in result.case.files.items():
        (target / name).write_bytes(data)
    for name, link in result.case.links.items():
        os.symlink(link, target / name)
    argv = [a.replace("{dir}", str(target)) for a in result.case.argv]
    (target / "command.txt").write_text(
        f"python -m aotc {' '.join(map(_quote, argv))} -o {target}/{result.case.out}\n"
        f"# {result.case.kind}: {result.case.detail}\n# {result.message}\n"
    )
    return str(target)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


# --------------------------------------------------------------------------------- report


def _pattern(message: str) -> str:
    """A message with its paths and numbers blurred, to group the same failure."""
    message = re.sub(r"/\S*", "PATH", message)
    return re.sub(r"\d+", "N", message)


def report(results: list[Result], seed: int, seconds: float) -> str:
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        by_kind[r.case.kind][r.cls] += 1
        by_kind[r.case.kind]["left behind"] += bool(r.left_behind)
    columns = [*CLASSES, "left behind"]
    total = collections.Counter()
    for counts in by_kind.values():
        total.update(counts)
    lines = [
        f"# aotc fuzz report: {len(results)} cases, seed {seed}, {seconds:.0f} s",
        "",
        "| kind | cases | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for kind, counts in [*sorted(by_kind.items()), ("**all**", total)]:
        cells = [str(counts[c]) if counts[c] else "" for c in columns]
        lines.append(f"| {kind} | {sum(counts[c] for c in CLASSES)} | " + " | ".join(cells) + " |")
    bad = [r for r in results if not r.clean]
    groups: dict[tuple[str, str], list[Result]] = collections.defaultdict(list)
    for r in bad:
        groups[(r.cls if r.cls not in CLEAN else "left behind", _pattern(r.message))].append(r)
    lines += ["", "## Distinct failures", "", "| class | cases | kinds | message (first case) |"]
    lines.append("|---|---|---|---|")
    for (cls, _), members in sorted(groups.items(), key=lambda g: -len(g[1])):
        kinds = ", ".join(sorted({r.case.kind for r in members}))
        first = members[0]
        message = (first.message or f"exit {first.exit}").replace("|", "\\|")
        lines.append(f"| {cls} | {len(members)} | {kinds} | {message} (#{first.index}) |")
    lines += ["", "## Non-clean cases", ""]
    lines += [
        "| # | kind | class | exit | mutation | left behind | reproducer | last stderr line |"
    ]
    lines.append("|---|---|---|---|---|---|---|---|")
    for r in bad:
        cells = [
            str(r.index),
            r.case.kind,
            r.cls,
            str(r.exit),
            r.case.detail[:160],
            r.left_behind,
            r.repro,
            r.message[:300],
        ]
        lines.append(
            "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case (60)")
    parser.add_argument("--mem-limit", type=int, default=8, help="GiB of address space per case")
    parser.add_argument("--kinds", help="only the kinds starting with these prefixes (a,b)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument(
        "--failures", type=Path, default=REPO / "build" / "fuzz-failures", help="reproducers"
    )
    args = parser.parse_args(argv)
    cases = generate(args.cases, args.seed, args.kinds.split(",") if args.kinds else None)
    args.failures.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def progress(result: Result) -> None:
        if not result.clean:
            print(
                f"#{result.index} {result.case.kind}: {result.cls}"
                f"{' +left behind' if result.left_behind else ''}: {result.message[:200]}",
                flush=True,
            )

    with tempfile.TemporaryDirectory(prefix="aotc-fuzz-") as tmp:
        results = run_cases(
            cases,
            Path(tmp),
            args.jobs,
            args.timeout,
            args.mem_limit << 30,
            args.failures.resolve(),
            progress,
        )
    text = report(results, args.seed, time.monotonic() - started)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(r.clean for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
