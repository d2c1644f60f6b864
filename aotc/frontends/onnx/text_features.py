"""TfIdfVectorizer over integer tokens.

The n-gram pool is a set of attributes, hence static: each counted n-gram length
`n` and skip distance `d` lowers to a fixed computation.  The n input tokens of
every window (start p, tokens p, p+d, ..., p+(n-1)d) are slices of the input;
they are compared with every pool n-gram of length n at once, the matches summed
over the windows, and a one-hot matrix product adds each pool n-gram's count
into its output slot (ngram_indexes).

Which windows count follows onnx.reference (and onnxruntime) exactly: lengths
min_gram_length..max_gram_length, skip distances 1..max_skip_count+1, but
unigrams only once (at distance 1, when min_gram_length is 1).  A pool n-gram
listed twice counts only at its last listing (the reference's trie keeps the
last id).  aotc has no string type, so pool_strings is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DotDims, DType, Instruction, Op
from .helpers import full, full_like, reduce
from .registry import NodeContext, onnx_op

MODES = ("TF", "IDF", "TFIDF")


@dataclass(frozen=True)
class NgramPool:
    """The pool n-grams that can be counted, by length, and where each one counts."""

    grams: dict[int, np.ndarray]  # n -> [K_n, n] int64 n-grams of length n
    slots: dict[int, np.ndarray]  # n -> [K_n] output index of each n-gram
    size: int  # output vector length: max(ngram_indexes) + 1


def ngram_pool(ctx: NodeContext, min_n: int, max_n: int) -> NgramPool:
    """The pool from the attributes, numbered as the reference numbers it: ids run over
    every length's n-grams in pool order, but only lengths in [min_n, max_n] are kept."""
    pool = [int(v) for v in ctx.attr("pool_int64s") or ()]
    starts = [int(v) for v in ctx.required_attr("ngram_counts")]
    indexes = [int(v) for v in ctx.required_attr("ngram_indexes")]
    if not indexes or min(indexes) < 0:
        raise ModelError("ngram_indexes must be non-empty and non-negative")
    found: dict[int, dict[tuple[int, ...], int]] = {}
    gram_id = 0  # the 0-based id of the next pool n-gram
    for i, start in enumerate(starts):
        n = i + 1
        end = starts[i + 1] if i + 1 < len(starts) else len(pool)
        if not 0 <= start <= end <= len(pool):
            raise ModelError(f"ngram_counts {starts} do not split a pool of {len(pool)} items")
        count = (end - start) // n
        if min_n <= n <= max_n:
            for k in range(count):
                if gram_id + k >= len(indexes):
                    raise ModelError(f"ngram_indexes has no entry for n-gram {gram_id + k}")
                gram = tuple(pool[start + k * n : start + (k + 1) * n])
                found.setdefault(n, {})[gram] = indexes[gram_id + k]  # a repeat: last wins
        gram_id += count
    grams = {n: np.array(list(g), dtype=np.int64).reshape(len(g), n) for n, g in found.items()}
    slots = {n: np.array(list(g.values()), dtype=np.int64) for n, g in found.items()}
    return NgramPool(grams, slots, max(indexes) + 1)


def counted_windows(min_n: int, max_n: int, max_skip: int) -> list[tuple[int, int]]:
    """The (length, skip distance) pairs whose windows are counted: the reference counts
    lengths >= min_n at distance 1, and from distance 2 on stops counting unigrams."""
    pairs = []
    for d in range(1, max_skip + 2):
        lowest = 2 if d > 1 and min_n == 1 else min_n
        pairs += [(n, d) for n in range(max(lowest, 1), max_n + 1)]
    return pairs


def window_counts(
    b: ComputationBuilder, x: Instruction, grams: np.ndarray, d: int
) -> Instruction | None:
    """[N, K] f32: how many windows of x [N, C] with skip distance `d` equal each of the K
    n-grams `grams` [K, n]; None when no window of that length fits in C tokens."""
    rows, length = x.array_shape.dims
    k, n = grams.shape
    windows = length - (n - 1) * d
    if windows <= 0:
        return None
    dims = [rows, windows, k]
    match = None
    for j in range(n):  # token j of every window against token j of every n-gram
        tokens = b.slice(x, [0, j * d], [rows, j * d + windows])
        wanted = b.broadcast(b.constant(grams[:, j], DType.S64), [2], dims)
        equal = b.compare(b.broadcast(tokens, [0, 1], dims), wanted, Direction.EQ)
        match = equal if match is None else b.binary(Op.AND, match, equal)
    return reduce(b, b.convert(match, DType.F32), Op.ADD, [1], keepdims=False)


def pool_counts(
    b: ComputationBuilder, x: Instruction, pool: NgramPool, pairs: list[tuple[int, int]]
) -> Instruction:
    """[N, size] f32: the counts of every output slot over all counted windows."""
    rows = x.array_shape.dims[0]
    parts, slots = [], []
    for n, grams in sorted(pool.grams.items()):
        counts = [window_counts(b, x, grams, d) for m, d in pairs if m == n]
        counts = [c for c in counts if c is not None]
        if not counts:
            continue
        total = counts[0]
        for c in counts[1:]:
            total = b.binary(Op.ADD, total, c)
        parts.append(total)
        slots.append(pool.slots[n])
    if not parts:
        return full(b, 0.0, DType.F32, [rows, pool.size])
    counts = parts[0] if len(parts) == 1 else b.concatenate(parts, 1)
    flat_slots = np.concatenate(slots)
    # one-hot [K, size]: pool n-gram k adds into output slot flat_slots[k]
    one_hot = np.zeros((len(flat_slots), pool.size), dtype=np.float32)
    one_hot[np.arange(len(flat_slots)), flat_slots] = 1.0
    return b.dot(counts, b.constant(one_hot, DType.F32), DotDims((), (), (1,), (0,)))


def weigh(ctx: NodeContext, counts: Instruction, mode: str, size: int) -> Instruction:
    """The output from the counts: TF as is, IDF weight (or 1) where counted, TFIDF
    weight times count (no weights: the counts)."""
    b = ctx.b
    weights = [float(w) for w in ctx.attr("weights") or ()]
    if weights and len(weights) < size:
        raise ModelError(f"weights has {len(weights)} values for {size} outputs")
    if mode == "TF" or (mode == "TFIDF" and not weights):
        return counts
    if weights:
        scale = b.constant(np.float32(weights[:size]), DType.F32)
        scale = b.broadcast(scale, [1], counts.array_shape.dims)
    else:
        scale = full_like(b, 1.0, counts)
    if mode == "TFIDF":
        return b.binary(Op.MULTIPLY, counts, scale)
    seen = b.compare(counts, full_like(b, 0.0, counts), Direction.GT)
    return b.select(seen, scale, full_like(b, 0.0, counts))


@onnx_op("TfIdfVectorizer", since=9)
def tfidf_vectorizer(ctx: NodeContext, x: Instruction) -> Instruction:
    """[C] -> [size] or [N, C] -> [N, size] float32 n-gram counts, weighed by `mode`."""
    b = ctx.b
    if ctx.attr("pool_strings"):
        raise UnsupportedError(
            "TfIdfVectorizer over strings (pool_strings) is not supported (aotc has no string type)"
        )
    if x.array_shape.dtype not in (DType.S32, DType.S64):
        raise UnsupportedError(
            f"TfIdfVectorizer input must be int32 or int64, not {x.array_shape.dtype.text}"
        )
    if x.array_shape.rank > 2:
        raise ModelError(
            f"TfIdfVectorizer input must be [C] or [N, C], not {list(x.array_shape.dims)}"
        )
    mode = ctx.choice("mode", MODES)
    min_n = int(ctx.required_attr("min_gram_length"))
    max_n = int(ctx.required_attr("max_gram_length"))
    max_skip = int(ctx.required_attr("max_skip_count"))
    if max_skip < 0:
        raise ModelError(f"max_skip_count must be >= 0, not {max_skip}")
    pool = ngram_pool(ctx, min_n, max_n)
    batched = x.array_shape.rank == 2
    rows, length = (
        x.array_shape.dims if batched else (1, x.array_shape.size)
    )  # a scalar is one token
    tokens = b.convert(b.reshape(x, [rows, length]), DType.S64)
    counts = pool_counts(b, tokens, pool, counted_windows(min_n, max_n, max_skip))
    out = weigh(ctx, counts, mode, pool.size)
    return out if batched else b.reshape(out, [pool.size])
