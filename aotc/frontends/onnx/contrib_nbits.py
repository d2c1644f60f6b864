"""onnxruntime's weight-only quantized MatMul (domain com.microsoft): MatMulNBits, the
2/4/8-bit blockwise quantized weights of LLM exports.

The weights, scales and zero points are initializers in every real model.  The node
becomes one dot by the weight written as its parts (ir/dequantization.py): the values as
a 2/4/8-bit constant, converted, less the zero points (bytes where they are integers) and
times the scales, each broadcast over its block, so that a backend may keep the packed
values rather than floats 4-16x their size (the CPU's nbits.py does).  With g_idx, K is
reordered into block order (A's columns gathered likewise) where every block has
block_size rows; otherwise the weight is dequantized here into one float constant.

Definition (onnxruntime's schema and CPU kernel): B is (N, k_blocks, blob_size) bytes,
each holding 8 / bits values, low bits first; value k of row n belongs to block k //
block_size, or to block g_idx[k] where g_idx (act-order) is given; the weight is
(q - zero_point) * scale, the zero point 2^(bits-1) where none is given. uint8 zero points
are packed like B, per row; float ones are plain. accuracy_level only picks onnxruntime's
internal precision (4 quantizes A to int8 per block), not the result's definition: aotc
computes in A's type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import DotDims, DType, Instruction, Op
from .helpers import unidirectional
from .ml import take_last
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


@dataclass(frozen=True)
class NBitsParts:
    """MatMulNBits's weight as its parts: w[n, k] = (q[n, k] - zero[n, b]) * scale[n, b]
    for k's block b = group[k]; q unpacked (one value per element), (N, K)."""

    q: np.ndarray
    scale: np.ndarray
    zero: np.ndarray
    groups: np.ndarray
    bits: int
    block: int

    def dense(self) -> np.ndarray:
        """The float32 (N, K) weight."""
        zero, scale = self.zero[:, self.groups], self.scale.astype(np.float32)[:, self.groups]
        return (self.q.astype(np.float32) - zero) * scale

    def block_order(self) -> np.ndarray | None:
        """A permutation of K after which each block's rows are consecutive, `block` to a
        block in block order (the last block may be shorter), or None: no such order (some
        block of g_idx has another count)."""
        order = np.argsort(self.groups, kind="stable")
        in_blocks = np.arange(len(order)) // self.block
        return order if np.array_equal(self.groups[order], in_blocks) else None


def nbits_parts(ctx: NodeContext, packed, scales, zero_points, g_idx) -> NBitsParts:
    """MatMulNBits's weight parts, checked against its attributes."""
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
    return NBitsParts(q, scale, zero, groups, bits, block)


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
    weight = nbits_parts(ctx, packed, scales, zero_points, g_idx)
    order = weight.block_order()
    if order is None:
        w = b.constant(weight.dense(), dtype)
    else:
        if not np.array_equal(order, np.arange(k)):
            a = take_last(b, a, b.constant(order, DType.S64))
        w = _dequantized(b, weight, order, dtype)
    y = b.dot(a, w, DotDims((), (), (a.array_shape.rank - 1,), (1,)))
    if bias is None:
        return y
    return b.binary(Op.ADD, y, unidirectional(b, bias, y.array_shape.dims))


QUANTIZED_TYPES = {2: DType.U2, 4: DType.U4, 8: DType.U8}


def _dequantized(b, weight: NBitsParts, order: np.ndarray, dtype: DType) -> Instruction:
    """The weight as IR that keeps its parts: the quantized values as a 2/4/8-bit constant,
    converted, less the zero points and times the scales, each broadcast over its block
    (ir/dequantization.py's form, which the CPU backend computes from the values as they
    are stored)."""
    n, k = weight.q.shape
    q = b.constant(weight.q[:, order], QUANTIZED_TYPES[weight.bits])

    def per_block(values: np.ndarray) -> Instruction:
        k_blocks = values.shape[1]
        x = b.constant(values, dtype)
        if values is weight.zero and _bytes_hold(values):  # integers kept as bytes
            x = b.convert(b.constant(values, DType.U8), dtype)
        full = b.broadcast(x, (0, 1), (n, k_blocks, weight.block))
        whole = b.reshape(full, (n, k_blocks * weight.block))
        return whole if k_blocks * weight.block == k else b.slice(whole, (0, 0), (n, k))

    centered = b.binary(Op.SUBTRACT, b.convert(q, dtype), per_block(weight.zero))
    return b.binary(Op.MULTIPLY, centered, per_block(weight.scale))


def _bytes_hold(values: np.ndarray) -> bool:
    """Whether `values` are integers from 0 to 255."""
    return bool(np.all((values == np.round(values)) & (values >= 0) & (values <= 255)))
