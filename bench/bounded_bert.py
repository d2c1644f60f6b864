"""One BERT build for every batch and sequence length up to the bounds, beside static
builds and onnxruntime, at one thread.

    python bench/bounded_bert.py [--hidden 256] [--layers 4] [--heads 4] [--inter 1024]
                                 [--max-batch 8] [--max-seq 512] [--turns 5] [--out FILE]

A Hugging Face BertModel with random weights (transformers' BertConfig from the flags,
vocabulary 1000, seed 0) is exported by torch's legacy ONNX exporter with dynamic batch
and sequence axes (opset 17), so the graph computes its shapes (Shape, Gather, Concat,
Range, Expand, ConstantOfShape, the attention mask's advanced indexing).  aotc compiles
it once with `--dim batch=1..B --dim seq=1..L`, and statically at (B, L) and (1, 77).
The bounded build is checked against onnxruntime at (1, 1), (1, 77), (3, 128) and (B, L)
(max |aotc - ORT| / max |ORT| over both outputs, at most 1e-4), then each of the sizes
(B, L), (1, 77) and (3, 128) is timed for the bounded build, the static build of that
size and onnxruntime in alternating turns (one untimed call, then calls for --turn-seconds);
each time is the median of its calls, each call a whole `run` (numpy in and out; the
bounded build pads its inputs to the bounds and cuts its outputs back in numpy).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import aotc
from aotc.driver import CompileOptions, compile_model
from aotc.ir.bounds import DimRange

CHECKED = ((1, 1), (1, 77), (3, 128))
DISAGREE = 1e-4
VOCAB = 1000


def export_bert(args, path: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.inter,
        vocab_size=VOCAB,
        max_position_embeddings=max(512, args.max_seq),
    )
    bert = BertModel(config).eval()

    class Outputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            out = self.bert(input_ids=ids, attention_mask=mask)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, VOCAB, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    axes = {"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}
    axes |= {"hidden": {0: "batch", 1: "seq"}, "pooled": {0: "batch"}}
    torch.onnx.export(
        Outputs(),
        (ids, mask),
        str(path),
        input_names=["ids", "mask"],
        output_names=["hidden", "pooled"],
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )


def inputs(batch: int, seq: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq - seq // 4 :] = 0  # some padding tokens in the first sequence
    return [ids, mask]


def disagreement(got, want) -> float:
    return max(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)) for g, w in zip(got, want))


def timed(calls, turns: int, seconds: float) -> list[float]:
    """Median seconds per call of each callable, sampled in alternating turns."""
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(turns):
        for call, times in zip(calls, samples):
            call()
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
    return [statistics.median(t) for t in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--inter", type=int, default=1024)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-seq", type=int, default=512)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--turn-seconds", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import onnxruntime as ort

    big = (args.max_batch, args.max_seq)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bert.onnx"
        export_bert(args, path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options)
        started = time.perf_counter()
        ranges = {"batch": DimRange(1, big[0]), "seq": DimRange(1, big[1])}
        bounded = compile_model(path, CompileOptions(dim_extents=ranges))
        compile_s = time.perf_counter() - started
        loaded = bounded.load()
        lines = [
            "# One BERT build for every batch and sequence up to the bounds",
            "",
            (
                f"Made by `python {' '.join(sys.argv)}` (hidden {args.hidden}, layers "
                f"{args.layers}, heads {args.heads}, intermediate {args.inter}; bounds "
                f"batch 1..{big[0]}, seq 1..{big[1]}), one thread.  Bounded compile "
                f"{compile_s:.1f} s, scratch {bounded.plan.scratch_bytes} bytes."
            ),
            "",
            "| batch x seq | max rel err vs ORT |",
            "|---|---:|",
        ]
        within = [c for c in CHECKED if c[0] <= big[0] and c[1] <= big[1]]
        for k, (b, s) in enumerate((*within, big)):
            feed = inputs(b, s, k)
            got = loaded.run(feed)
            want = session.run(None, {"ids": feed[0], "mask": feed[1]})
            error = disagreement(got, want)
            assert error <= DISAGREE, (b, s, error)
            lines.append(f"| {b} x {s} | {error:.1e} |")
        lines += [
            "",
            "| batch x seq | bounded ms | static ms | ORT ms | bounded / static |",
            "|---|---:|---:|---:|---:|",
        ]
        timed_sizes = dict.fromkeys([big, (1, min(77, big[1])), (min(3, big[0]), min(128, big[1]))])
        for b, s in timed_sizes:
            shapes = {"ids": (b, s), "mask": (b, s)}
            static = aotc.compile(str(path), input_shapes=shapes).load()
            feed = inputs(b, s, 7)
            named = {"ids": feed[0], "mask": feed[1]}
            calls = [
                lambda feed=feed: loaded.run(feed),
                lambda feed=feed, static=static: static.run(feed),
                lambda named=named: session.run(None, named),
            ]
            ms = [1e3 * t for t in timed(calls, args.turns, args.turn_seconds)]
            lines.append(
                f"| {b} x {s} | {ms[0]:.2f} | {ms[1]:.2f} | {ms[2]:.2f} | {ms[0] / ms[1]:.2f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
