"""Models from Python frameworks compiled in one call, against the framework's own output.

    python bench/front_doors.py [--out FILE]     (needs aotc[bench,jax])

- `aotc.compile_torch` on torchvision's resnet18 (random weights, eval mode, 1x3x224x224)
  and on a transformers BertModel from a BertConfig (hidden 128, 2 layers, 2 heads,
  sequence 32, random token ids);
- `aotc.compile_jax` on a JAX MLP (784-256-10, GELU, softmax; the parameters a pytree
  argument) and on a small transformer block written here in jax.numpy (embedding,
  causal multi-head attention, layer norm, GELU MLP, residuals).

Each row: the compile time, the exporter that took it, and the largest difference from
the framework's outputs relative to their largest magnitude (at most 1e-4 to pass).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import aotc
import aotc.frameworks

AGREE = 1e-4


def relative_error(got, want) -> float:
    worst = 0.0
    for have, expected in zip(got, want):
        expected = np.asarray(expected, np.float64)
        scale = max(float(np.abs(expected).max()), 1e-30)
        worst = max(worst, float(np.abs(np.asarray(have, np.float64) - expected).max()) / scale)
    return worst


def torch_rows() -> list[tuple]:
    import torch
    import torchvision
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    rows = []
    resnet = torchvision.models.resnet18(weights=None).eval()
    image = torch.randn(1, 3, 224, 224)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        max_position_embeddings=64,
    )
    bert = BertModel(config).eval()
    ids = torch.randint(0, 1000, (1, 32))
    for label, module, args, run_args in (
        ("torchvision resnet18", resnet, (image,), [image.numpy()]),
        ("transformers BertModel", bert, (ids,), [ids.numpy()]),
    ):
        started = time.perf_counter()
        compiled = aotc.compile_torch(module, args)
        seconds = time.perf_counter() - started
        with torch.no_grad():
            want = module(*args)
        if not isinstance(want, torch.Tensor):  # BertModel's output: its tensors in order
            want = [want.last_hidden_state, want.pooler_output]
        else:
            want = [want]
        got = compiled.load().run(run_args)
        rows.append(
            (label, "compile_torch", seconds, relative_error(got, [w.numpy() for w in want]))
        )
    return rows


def jax_rows() -> list[tuple]:
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)

    def mlp(params, x):
        (w1, b1), (w2, b2) = params
        return jax.nn.softmax(jax.nn.gelu(x @ w1 + b1) @ w2 + b2)

    params = (
        (rng.standard_normal((784, 256), np.float32) / 28, np.zeros(256, np.float32)),
        (rng.standard_normal((256, 10), np.float32) / 16, np.zeros(10, np.float32)),
    )
    x = rng.standard_normal((8, 784), np.float32)

    def block(weights, tokens):
        embed, wq, wk, wv, wo, w1, w2 = weights
        h = embed[tokens]  # [seq, 64]
        heads, seq = 4, tokens.shape[0]

        def norm(v):
            mean = v.mean(-1, keepdims=True)
            return (v - mean) / jnp.sqrt(((v - mean) ** 2).mean(-1, keepdims=True) + 1e-5)

        q, k, v = (norm(h) @ w for w in (wq, wk, wv))
        split = lambda t: t.reshape(seq, heads, -1).transpose(1, 0, 2)
        scores = split(q) @ split(k).transpose(0, 2, 1) / jnp.sqrt(16.0)
        scores = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, -1e9)
        attended = (jax.nn.softmax(scores) @ split(v)).transpose(1, 0, 2).reshape(seq, -1)
        h = h + attended @ wo
        return h + jax.nn.gelu(norm(h) @ w1) @ w2

    weights = [
        rng.standard_normal(s, np.float32) / np.sqrt(s[0])
        for s in ((100, 64), (64, 64), (64, 64), (64, 64), (64, 64), (64, 256), (256, 64))
    ]
    tokens = rng.integers(0, 100, 24).astype(np.int32)
    rows = []
    for label, fn, args in (
        ("JAX MLP", mlp, (params, x)),
        ("JAX transformer block", block, (weights, tokens)),
    ):
        started = time.perf_counter()
        compiled = aotc.compile_jax(fn, *args)
        seconds = time.perf_counter() - started
        got = compiled.load().run(jax.tree_util.tree_leaves(args))
        want = jax.tree_util.tree_leaves(fn(*args))
        rows.append((label, "compile_jax", seconds, relative_error(got, want)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = torch_rows() + jax_rows()
    lines = [
        "# Models from Python frameworks, compiled in one call",
        "",
        "Made by `python bench/front_doors.py --out bench/front_doors_results.md`.",
        "",
        "| model | call | compile s | max rel err vs the framework | agrees (1e-4) |",
        "|---|---|---:|---:|---|",
    ]
    for label, call, seconds, error in rows:
        lines.append(
            f"| {label} | {call} | {seconds:.1f} | {error:.1e} | {'yes' if error <= AGREE else 'NO'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
