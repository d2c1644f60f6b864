"""onnxruntime's weight-only quantized MatMul (domain com.microsoft): MatMulNBits, the
2/4/8-bit blockwise quantized weights of LLM exports.

The weights, scales and zero points are initializers in every real model, so they are
dequantized here, at compile time, into one float weight constant, and the node becomes
one dot: for an ahead-of-time compiler the weights are constants like any other. (Keeping
the 8x smaller packed blob and dequantizing inside the kernel would save memory and
bandwidth; that is a later optimization, not a change of meaning.)

Definition (onnxruntime's schema and CPU kernel): B is (N, k_blocks, blob_size) bytes,
each holding 8 / bits values, low bits first; value k of row n belongs to block k //
block_size, or to block g_idx[k] where g_idx (act-order) is given; the weight is
(q - zero_point) * scale, the zero point 2^(bits-1) where none is given. uint8 zero points
are packed like B, per row; float ones are plain. accuracy_level only picks onnxruntime's
internal precision (4 quantizes A to int8 per block), not the result's definition: aotc
computes in A's type.
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import DotDims, DType, Instruction, Op
from .helpers import unidirectional
from .registry import MICROSOFT, NodeContext, onnx_op

NBITS_FLOATS = (DType.F32, DType.F16, DType.BF16)


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` `bits`-wide unsigned values packed along the last axis, low bits of
    each byte first."""
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


def _weight_input(ctx: NodeContext, x: Instruction, name: str) -> np.ndarray:
    return ctx.value(x, f"input '{name}' (dequantized at compile time)")


def _per_block(value: np.ndarray, n: int, width: int, name: str) -> np.ndarray:
    """A scale or zero point input as (N, width): it may be 1-D (older exports) or 2-D."""
    if value.shape not in ((n * width,), (n, width)):
        raise ShapeError(
            f"{name} has shape {list(value.shape)}, expected [{n}, {width}] or [{n * width}]"
        )
    return value.reshape(n, width)


def _groups(ctx: NodeContext, g_idx, k: int, block: int, k_blocks: int) -> np.ndarray:
    """The block of each of the K rows of the weight: k // block_size, or g_idx[k]."""
    if g_idx is None:
        return np.arange(k) // block
    groups = _weight_input(ctx, g_idx, "g_idx").astype(np.int64)
    if groups.shape not in ((k,), (k_blocks * block,)):
        raise ShapeError(
            f"g_idx has shape {list(groups.shape)}, expected [{k}] or [{k_blocks * block}]"
        )
    if groups.min(initial=0) < 0 or groups.max(initial=0) >= k_blocks:
        raise ModelError(f"g_idx values must lie in [0, {k_blocks})")
    return groups[:k]


def _zero_points(ctx: NodeContext, zero_points, n: int, k_blocks: int, bits: int) -> np.ndarray:
    """Each block's zero point, (N, k_blocks), as float32."""
    if zero_points is None:
        return np.full((n, k_blocks), 1 << (bits - 1), np.float32)
    value = _weight_input(ctx, zero_points, "zero_points")
    if zero_points.shape.dtype is DType.U8:
        packed = _per_block(value, n, (k_blocks * bits + 7) // 8, "zero_points")
        return unpack_bits(packed, bits, k_blocks).astype(np.float32)
    return _per_block(value, n, k_blocks, "zero_points").astype(np.float32)


def dequantized_nbits_weight(ctx: NodeContext, packed, scales, zero_points, g_idx):
    """MatMulNBits's weight as a float32 (N, K) array."""
    n, k = ctx.required_attr("N"), ctx.required_attr("K")
    bits, block = ctx.attr("bits", 4), ctx.required_attr("block_size")
    if bits not in (2, 4, 8):
        raise ModelError(f"attribute bits={bits} is not one of 2, 4, 8")
    if block < 16 or block & (block - 1):
        raise ModelError(f"attribute block_size={block} is not a power of 2 of at least 16")
    if ctx.attr("weight_prepacked", 0):
        raise UnsupportedError(
            "weight_prepacked=1 (an execution provider's own layout) is "
            "not supported; export the portable layout"
        )
    k_blocks = -(-k // block)
    blob = _weight_input(ctx, packed, "B")
    if blob.shape != (n, k_blocks, block * bits // 8):
        raise ShapeError(
            f"B has shape {list(blob.shape)}, expected "
            f"[{n}, {k_blocks}, {block * bits // 8}] for N={n}, K={k}, "
            f"block_size={block}, bits={bits}"
        )
    if g_idx is not None and zero_points is not None and zero_points.shape.dtype is DType.U8:
        # onnxruntime's CPU kernel ignores packed zero points when g_idx is given (it uses
        # 2^(bits-1)): refuse rather than disagree with it or with the definition
        raise UnsupportedError(
            "g_idx with uint8 zero points is not supported (onnxruntime "
            "ignores those zero points); use float zero points"
        )
    q = unpack_bits(blob, bits, block).reshape(n, k_blocks * block)[:, :k]
    scale = _per_block(_weight_input(ctx, scales, "scales"), n, k_blocks, "scales")
    zero = _zero_points(ctx, zero_points, n, k_blocks, bits)
    groups = _groups(ctx, g_idx, k, block, k_blocks)
    return (q.astype(np.float32) - zero[:, groups]) * scale.astype(np.float32)[:, groups]


@onnx_op("MatMulNBits", domain=MICROSOFT, since=1, arity=((3, 6), (1, 1)))
def matmul_nbits(
    ctx: NodeContext,
    a: Instruction,
    packed: Instruction,
    scales: Instruction,
    zero_points=None,
    g_idx=None,
    bias=None,
) -> Instruction:
    """A (..., K) times the dequantized weight transposed, plus bias: (..., N)."""
    b = ctx.b
    dtype = a.array_shape.dtype
    if dtype not in NBITS_FLOATS:
        raise UnsupportedError(f"MatMulNBits on {dtype.text} is not supported (f32/f16/bf16)")
    k = ctx.required_attr("K")
    if a.array_shape.rank == 0 or a.array_shape.dims[-1] != k:
        raise ShapeError(f"A has shape {list(a.array_shape.dims)}; its last dim must be K={k}")
    weight = b.constant(dequantized_nbits_weight(ctx, packed, scales, zero_points, g_idx), dtype)
    y = b.dot(a, weight, DotDims((), (), (a.array_shape.rank - 1,), (1,)))
    if bias is None:
        return y
    return b.binary(Op.ADD, y, unidirectional(b, bias, y.array_shape.dims))
