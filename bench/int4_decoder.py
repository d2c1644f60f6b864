"""Int4 weight-only Llama-style decoder: aotc against onnxruntime at one thread.

    python bench/int4_decoder.py [--layers 4] [--hidden 1024] [--heads 16] [--inter 2816]
                                 [--vocab 16000] [--prompt-len 128] [--turns 9]
                                 [--work bench/.int4] [--out FILE]

The decoder is built with onnx.helper from random weights (normal * 0.02, seed 0; the
RMSNorm gains are 1 + normal * 0.02): a Gather token embedding, then per layer RMSNorm,
q/k/v projections, multi-head causal self-attention over the past key/value cache and the
new keys/values (an additive mask initializer; no rotary position embedding), the output
projection, a residual add, RMSNorm, a SwiGLU MLP (gate * Sigmoid(gate) * up, then down)
and a residual add; then a final RMSNorm and the LM head.  Two models share the weights,
with all shapes static: `prompt` (seq = prompt-len, no past inputs) and `decode` (seq = 1,
past = prompt-len - 1).  onnxruntime's MatMulNBitsQuantizer (4 bits, block 32, asymmetric)
turns every weight MatMul into a com.microsoft MatMulNBits node; the attention's
activation x activation MatMuls stay MatMul.  The float and quantized models are saved
under --work, with aotc's object files.

Both runtimes run the quantized models single-threaded on the same seeded inputs: aotc
through `aotc.compile(path).load()`, onnxruntime through an InferenceSession with one
intra-op and one inter-op thread and no spinning.  Each timed call is a whole `run`
(inputs in, fresh numpy outputs back) for both.  They are sampled in alternating turns
(aotc then ORT, each for --turn-seconds after one untimed call); a runtime's time is the
median of all its calls.  Agreement is max |aotc - ORT| / max |ORT| over the logits.

Sizes: the packed weights as the ONNX file stores them (MatMulNBits B, scales and
zero points) and the other initializers, aotc's weight bytes and .o file size.  The
decode time is compared with the time to stream the packed weights once at this
machine's memory bandwidth for one thread reading: numpy's sum of a 512 MB float32 array
(best of 5; a decode step only reads its weights).  numpy's copy of it (read + write
counted) is printed beside it.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import aotc

OPSET = 17
IR_VERSION = 9  # onnxruntime 1.32 refuses onnx's default IR version
EPS = 1e-5
MASKED = -1e9
DISAGREE = 1e-3
QUANTIZED_OP = "MatMulNBits"


@dataclass(frozen=True)
class Config:
    hidden: int
    heads: int
    inter: int
    layers: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class Graph:
    """Nodes and initializers of an ONNX graph under construction, with fresh names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        self._count += 1
        out = out or f"{op_type.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out


def random_weights(cfg: Config, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    def gain() -> np.ndarray:
        return normal(cfg.hidden) + np.float32(1.0)

    h, m = cfg.hidden, cfg.inter
    weights = {"embed": normal(cfg.vocab, h)}
    for i in range(cfg.layers):
        weights |= {
            f"l{i}.attn_norm": gain(),
            **{f"l{i}.w{p}": normal(h, h) for p in "qkvo"},
            f"l{i}.mlp_norm": gain(),
            f"l{i}.w_gate": normal(h, m),
            f"l{i}.w_up": normal(h, m),
            f"l{i}.w_down": normal(m, h),
        }
    weights |= {"final_norm": gain(), "lm_head": normal(h, cfg.vocab)}
    return weights


def causal_mask(seq: int, past: int) -> np.ndarray:
    """[seq, past + seq] additive mask: query i (at position past + i) sees keys <= it."""
    keys = np.arange(past + seq)[None, :]
    queries = past + np.arange(seq)[:, None]
    return np.where(keys <= queries, 0.0, MASKED).astype(np.float32)


def rms_norm(g: Graph, x: str, weight: str) -> str:
    mean_square = g.op("ReduceMean", g.op("Mul", x, x), axes=[-1], keepdims=1)
    rms = g.op("Sqrt", g.op("Add", mean_square, "eps"))
    return g.op("Mul", g.op("Div", x, rms), weight)


def split_heads(g: Graph, x: str) -> str:
    """[1, seq, hidden] -> [1, heads, seq, head_dim]."""
    return g.op("Transpose", g.op("Reshape", x, "heads_shape"), perm=[0, 2, 1, 3])


def attention(g: Graph, x: str, i: int, past: int) -> str:
    q = split_heads(g, g.op("MatMul", x, f"l{i}.wq"))
    k = split_heads(g, g.op("MatMul", x, f"l{i}.wk"))
    v = split_heads(g, g.op("MatMul", x, f"l{i}.wv"))
    if past:
        k = g.op("Concat", f"past_k_{i}", k, axis=2, out=f"present_k_{i}")
        v = g.op("Concat", f"past_v_{i}", v, axis=2, out=f"present_v_{i}")
    else:
        k = g.op("Identity", k, out=f"present_k_{i}")
        v = g.op("Identity", v, out=f"present_v_{i}")
    scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), "scale")
    probs = g.op("Softmax", g.op("Add", scores, "mask"), axis=-1)
    context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    return g.op("MatMul", g.op("Reshape", context, "hidden_shape"), f"l{i}.wo")


def mlp(g: Graph, x: str, i: int) -> str:
    gate = g.op("MatMul", x, f"l{i}.w_gate")
    up = g.op("MatMul", x, f"l{i}.w_up")
    hidden = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up)
    return g.op("MatMul", hidden, f"l{i}.w_down")


def decoder(cfg: Config, weights: dict[str, np.ndarray], seq: int, past: int) -> onnx.ModelProto:
    """The decoder for `seq` new tokens after `past` cached ones (no past inputs if 0)."""
    g = Graph()
    for name, array in weights.items():
        g.const(name, array)
    g.const("eps", np.array(EPS, np.float32))
    g.const("scale", np.array(cfg.head_dim**-0.5, np.float32))
    g.const("mask", causal_mask(seq, past))
    g.const("heads_shape", np.array([1, seq, cfg.heads, cfg.head_dim], np.int64))
    g.const("hidden_shape", np.array([1, seq, cfg.hidden], np.int64))

    x = g.op("Gather", "embed", "input_ids", axis=0)
    for i in range(cfg.layers):
        x = g.op("Add", x, attention(g, rms_norm(g, x, f"l{i}.attn_norm"), i, past))
        x = g.op("Add", x, mlp(g, rms_norm(g, x, f"l{i}.mlp_norm"), i))
    g.op("MatMul", rms_norm(g, x, "final_norm"), "lm_head", out="logits")

    def cache(prefix: str, length: int) -> list[onnx.ValueInfoProto]:
        shape = [1, cfg.heads, length, cfg.head_dim]
        return [
            helper.make_tensor_value_info(f"{prefix}_{kv}_{i}", TensorProto.FLOAT, shape)
            for i in range(cfg.layers)
            for kv in "kv"
        ]

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])]
    inputs += cache("past", past) if past else []
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, cfg.vocab])
    graph = helper.make_graph(
        g.nodes, "decoder", inputs, [logits, *cache("present", past + seq)], g.initializers
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    onnx.checker.check_model(model)
    return model


def quantize(model: onnx.ModelProto, cfg: Config) -> onnx.ModelProto:
    """4-bit weight-only, block 32, asymmetric; checks that every weight MatMul was taken."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    # the quantizer's module sets the root logger to INFO and logs every node
    logging.getLogger().setLevel(logging.WARNING)
    algo = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=False, bits=4)
    q = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=False, algo_config=algo)
    q.process()
    quantized = q.model.model
    ops = [node.op_type for node in quantized.graph.node]
    expected = {QUANTIZED_OP: 7 * cfg.layers + 1, "MatMul": 2 * cfg.layers}
    found = {op: ops.count(op) for op in expected}
    if found != expected:
        raise SystemExit(f"quantizer left {found} nodes, expected {expected}")
    return quantized


def initializer_bytes(model: onnx.ModelProto) -> tuple[int, int]:
    """(bytes of the MatMulNBits B, scales and zero points, bytes of all other initializers)."""
    packed_names = {
        name
        for node in model.graph.node
        if node.op_type == QUANTIZED_OP
        for name in node.input[1:4]
    }
    packed = other = 0
    for init in model.graph.initializer:
        nbytes = numpy_helper.to_array(init).nbytes
        if init.name in packed_names:
            packed += nbytes
        else:
            other += nbytes
    return packed, other


def random_inputs(model: onnx.ModelProto, vocab: int, seed: int) -> list[np.ndarray]:
    """Seeded token ids and normal past caches, in graph input order."""
    rng = np.random.default_rng(seed)
    inputs = []
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.name == "input_ids":
            inputs.append(rng.integers(0, vocab, shape, dtype=np.int64))
        else:
            inputs.append(rng.standard_normal(shape, dtype=np.float32))
    return inputs


def ort_session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def interleaved_medians(
    runs: dict[str, Callable[[], object]], turns: int, turn_seconds: float
) -> dict[str, tuple[float, int]]:
    """Each runtime's median call time in seconds and its number of timed calls, over
    `turns` alternating turns (one untimed call, then calls for `turn_seconds`)."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(turns):
        for name, run in runs.items():
            run()
            turn_end = time.perf_counter() + turn_seconds
            while True:
                start = time.perf_counter()
                run()
                end = time.perf_counter()
                samples[name].append(end - start)
                if end >= turn_end:
                    break
    return {name: (statistics.median(times), len(times)) for name, times in samples.items()}


def bandwidths(nbytes: int = 512 << 20, repeats: int = 5) -> tuple[float, float]:
    """Bytes per second of one thread reading a float32 array of `nbytes` (np.sum), and
    of np.copyto from it (read + write), the best of `repeats` each."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in

    def best(run: Callable[[], object]) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return min(times)

    return nbytes / best(src.sum), 2 * nbytes / best(lambda: np.copyto(dst, src))


@dataclass
class Result:
    name: str
    ort_ms: float
    aotc_ms: float
    ort_calls: int
    aotc_calls: int
    rel_diff: float
    nbits_kernels: int
    kernels: int
    compile_s: float
    object_bytes: int
    aotc_weight_bytes: int
    packed_bytes: int
    other_bytes: int

    @property
    def agree(self) -> str:
        verdict = "ok" if self.rel_diff <= DISAGREE else "disagree"  # NaN: disagree
        return f"{verdict} ({self.rel_diff:.1e})"


def measure(name: str, model: onnx.ModelProto, cfg: Config, args: argparse.Namespace) -> Result:
    path = args.work / f"{name}_int4.onnx"
    onnx.save(model, path)
    inputs = random_inputs(model, cfg.vocab, args.seed)
    feeds = {value.name: array for value, array in zip(model.graph.input, inputs)}

    print(f"{name}: compiling {path} with aotc ...", flush=True)
    compiled = aotc.compile(path)
    forms = compiled.kernel_forms()
    nbits = sum(form.startswith("nbits") for form in forms.values())
    print(f"  {compiled.seconds:.1f} s, {nbits} of {len(forms)} kernels with an nbits form")
    object_path = compiled.write(args.work / f"aotc_{name}").object
    run = compiled.load()
    session = ort_session(path)

    expected = session.run(["logits"], feeds)[0]
    got = run(*inputs)[0]
    rel_diff = float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))
    print(f"  logits max |aotc - ORT| / max |ORT| = {rel_diff:.2e}", flush=True)

    times = interleaved_medians(
        {"aotc": lambda: run(*inputs), "ort": lambda: session.run(None, feeds)},
        args.turns,
        args.turn_seconds,
    )
    packed, other = initializer_bytes(model)
    return Result(
        name,
        ort_ms=times["ort"][0] * 1e3,
        aotc_ms=times["aotc"][0] * 1e3,
        ort_calls=times["ort"][1],
        aotc_calls=times["aotc"][1],
        rel_diff=rel_diff,
        nbits_kernels=nbits,
        kernels=len(forms),
        compile_s=compiled.seconds,
        object_bytes=object_path.stat().st_size,
        aotc_weight_bytes=compiled.stats.weight_bytes,
        packed_bytes=packed,
        other_bytes=other,
    )


def report(cfg: Config, results: list[Result], bandwidth, matmul_params: int) -> str:
    mb = 1e-6
    config = (
        f"Config: hidden {cfg.hidden}, heads {cfg.heads}, intermediate {cfg.inter}, "
        f"layers {cfg.layers}, vocab {cfg.vocab}; {matmul_params / 1e6:.1f}M MatMul weights; "
        "1 thread; medians of interleaved calls."
    )
    lines = [
        config,
        "",
        "| model | ORT ms | aotc ms | ORT / aotc | agree |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.ort_ms:.2f} | {r.aotc_ms:.2f} | {r.ort_ms / r.aotc_ms:.2f} "
            f"| {r.agree} |"
        )
    lines.append("")
    for r in results:
        lines.append(
            f"- {r.name}: ONNX packed int4 weights (B + scales + zero points) "
            f"{r.packed_bytes * mb:.1f} MB, other initializers {r.other_bytes * mb:.1f} MB; "
            f"aotc weights {r.aotc_weight_bytes * mb:.1f} MB, .o {r.object_bytes * mb:.1f} MB; "
            f"{r.nbits_kernels} of {r.kernels} kernels nbits; compile {r.compile_s:.1f} s; "
            f"timed calls aotc {r.aotc_calls}, ORT {r.ort_calls}"
        )
    decode = next(r for r in results if r.name == "decode")
    read, copy = bandwidth
    stream_ms = decode.packed_bytes / read * 1e3
    lines.append(
        f"- bandwidth, one thread, 512 MB float32, best of 5: reading (np.sum) "
        f"{read / 1e9:.1f} GB/s; copying (np.copyto, read + write) {copy / 1e9:.1f} GB/s"
    )
    lines.append(
        f"- streaming the packed weights once: {stream_ms:.2f} ms; decode / stream time: "
        f"aotc {decode.aotc_ms / stream_ms:.2f}, ORT {decode.ort_ms / stream_ms:.2f}"
    )
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--inter", type=int, default=2816)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=16000)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--turns", type=int, default=9)
    p.add_argument("--turn-seconds", type=float, default=0.3)
    p.add_argument("--work", type=Path, default=Path("bench/.int4"))
    p.add_argument("--out", type=Path, help="also write the report here")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    cfg = Config(args.hidden, args.heads, args.inter, args.layers, args.vocab)
    if cfg.hidden % cfg.heads:
        raise SystemExit(f"--hidden {cfg.hidden} is not a multiple of --heads {cfg.heads}")
    args.work.mkdir(parents=True, exist_ok=True)
    weights = random_weights(cfg, args.seed)
    matmul_params = sum(w.size for n, w in weights.items() if w.ndim == 2 and n != "embed")
    shapes = {"decode": (1, args.prompt_len - 1), "prompt": (args.prompt_len, 0)}
    results = []
    for name, (seq, past) in shapes.items():
        model = decoder(cfg, weights, seq, past)
        onnx.save(model, args.work / f"{name}_float.onnx")
        results.append(measure(name, quantize(model, cfg), cfg, args))
    text = report(cfg, results, bandwidths(), matmul_params)
    print("\n" + text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
