"""Winograd F(2x2, 3x3): 3x3 stride-1 NCHW convolutions with 2.25x fewer multiply-adds.

Per 2x2 output tile, the 4x4 input tile d and the kernel g: Y = A^T [(G g G^T) .
(B^T d B)] A.  The rewrite writes it in the IR's own ops, so every backend
compiles it with what it has:

- U = G g G^T per (output, input) channel: 16 matrices [Cout, Cin] of sums of the
  kernel's taps (constant folding computes them at compile time for constant weights);
- V = B^T d B per tile: [Cin, 16, tiles], a depthwise convolution of the zero-padded
  image (4x4 window, stride 2, 16 outputs per channel: the backend's depthwise loop);
- M = U V: one batched dot of 16 GEMMs (K = Cin, N = tiles), where the multiply-adds are;
- Y = A^T M A: the four output phases as sums of nine slices of M, interleaved into
  the NCHW output (one loop fusion, with the epilogue the convolution had).

V and M take 4x the image's and output's bytes, so only convolutions with many
channels on both sides and enough tiles pay back their memory traffic (see
MIN_CHANNELS); dedicated transform kernels would lower that bar.  F(2x2, 3x3)
keeps f32 rounding close to the direct sum (its matrices hold 0, +-1 and 1/2).
"""

from __future__ import annotations

import numpy as np

from ..ir import ConvDims, DotDims, DType, Instruction, Op, Window
from .rewrite import InsertingBuilder, rewrite, rule

# V and M cost 4x the image's and the output's memory traffic, and the transforms
# run as a depthwise convolution and a loop fusion: the saved multiply-adds outweigh
# them with many channels on both sides and tiles enough for the GEMMs' N.  Two-layer
# chains, against im2col + GEMM: 512 channels at 28x28 0.79 of the time, at 14x14 0.69,
# at 7x7 1.23; 256 at 56x56 1.0; 128 at 28x28 1.6
MIN_CHANNELS = 512
MIN_OUTPUT_SIZE = 14

B_T = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
A_T = ((1, 1, 1, 0), (0, 1, -1, -1))


def eligible(conv: Instruction) -> bool:
    """A 2-D NCHW convolution of one image with a 3x3 window at stride 1, no dilation,
    one group, f32, non-negative padding, MIN_CHANNELS on both sides and outputs of
    at least MIN_OUTPUT_SIZE rows and columns."""
    window, shape = conv.window, conv.array_shape
    if conv.conv != ConvDims.nchw(2) or shape.dtype is not DType.F32:
        return False
    if conv.feature_group_count != 1 or conv.batch_group_count != 1:
        return False
    if tuple(window.size) != (3, 3) or any(v != 1 for v in (*window.stride, *window.lhs_dilation,
                                                          *window.rhs_dilation)):  # fmt: skip
        return False
    if any(p < 0 for p in (*window.pad_low, *window.pad_high)):
        return False
    cout, cin = conv.operands[1].shape.dims[:2]
    batch = shape.dims[0]  # the dot's tiles are one image's (batches keep the direct form)
    return batch == 1 and min(cin, cout) >= MIN_CHANNELS and min(shape.dims[2:]) >= MIN_OUTPUT_SIZE


@rule(Op.CONVOLUTION)
def winograd(b: InsertingBuilder, conv: Instruction):
    if not eligible(conv):
        return None
    x, w = conv.operands
    batch, cin, height, width = x.shape.dims
    cout = w.shape.dims[0]
    out_h, out_w = conv.array_shape.dims[2:]
    tiles_h, tiles_w = -(-out_h // 2), -(-out_w // 2)
    top, left = conv.window.pad_low
    # the image padded to whole 4x4 input tiles (2 more rows and columns than outputs)
    bottom, right = 2 * tiles_h + 2 - height - top, 2 * tiles_w + 2 - width - left
    zero = b.scalar(0.0, DType.F32)
    padded = b.pad(x, zero, (0, 0, top, left), (0, 0, bottom, right))
    v = _input_tiles(b, padded, tiles_h, tiles_w)  # [Cin, 16, tiles]
    u = b.concatenate([b.reshape(m, (1, cout, cin)) for m in _kernel_taps(b, w)], 0)
    m = b.dot(u, v, DotDims((0,), (1,), (2,), (0,)))  # [16, Cout, tiles]
    y = _output_tiles(b, m, cout, batch, tiles_h, tiles_w)  # [N, Cout, 2 th, 2 tw]
    return b.slice(y, (0, 0, 0, 0), (batch, cout, out_h, out_w))


def _combine(b: InsertingBuilder, terms: list[tuple[float, Instruction]]) -> Instruction:
    """sum(coefficient * term), with +-1 as adds and subtracts."""
    total = None
    for coefficient, term in terms:
        if coefficient not in (1, -1):
            term = b.binary(Op.MULTIPLY, term, b.broadcast_to(b.scalar(coefficient, DType.F32),
                                                              term.shape.dims))  # fmt: skip
            coefficient = 1
        if total is None:
            total = term if coefficient == 1 else b.unary(Op.NEGATE, term)
        else:
            total = b.binary(Op.ADD if coefficient == 1 else Op.SUBTRACT, total, term)
    return total


def _input_tiles(b: InsertingBuilder, padded: Instruction, tiles_h: int, tiles_w: int):
    """V_ab = sum_rs B^T[a][r] B^T[b][s] d_rs as [Cin, 16, tiles]: a depthwise convolution
    of the padded image (4x4 window, stride 2, 16 outputs per channel, the kernel the
    products of B^T's rows), so the backend's depthwise loop computes it."""
    batch, cin = padded.shape.dims[:2]
    taps = np.array([np.outer(row, col) for row in B_T for col in B_T], np.float32)  # [16, 4, 4]
    kernel = b.constant(np.tile(taps[None], (cin, 1, 1, 1)).reshape(cin * 16, 1, 4, 4))
    window = Window.make((4, 4), (2, 2), (0, 0), (0, 0))
    tiles = b.convolution(padded, kernel, window, ConvDims.nchw(2), groups=cin)
    return b.reshape(tiles, (cin, 16, batch * tiles_h * tiles_w))


def _kernel_taps(b: InsertingBuilder, w: Instruction):
    """U_ab = sum_rs G[a][r] G[b][s] g_rs, each [Cout, Cin] (g_rs: tap (r, s))."""
    cout, cin = w.shape.dims[:2]
    taps = {(r, s): b.reshape(b.slice(w, (0, 0, r, s), (cout, cin, r + 1, s + 1)), (cout, cin))
            for r in range(3) for s in range(3)}  # fmt: skip
    out = []
    for row in G:
        for col in G:
            terms = [(gr * gs, taps[r, s]) for r, gr in enumerate(row)
                     for s, gs in enumerate(col) if gr * gs]  # fmt: skip
            out.append(_combine(b, terms))
    return out


def _output_tiles(b: InsertingBuilder, m: Instruction, cout: int, batch: int, tiles_h: int,
                  tiles_w: int) -> Instruction:  # fmt: skip
    """Y = A^T M A per tile, interleaved into [N, Cout, 2 th, 2 tw]."""
    tiles = batch * tiles_h * tiles_w
    parts = [
        b.reshape(b.slice(m, (k, 0, 0), (k + 1, cout, tiles)), (cout, tiles)) for k in range(16)
    ]
    phases = []
    for row in A_T:
        columns = []
        for col in A_T:
            terms = [(ca * cb, parts[4 * a + c]) for a, ca in enumerate(row)
                     for c, cb in enumerate(col) if ca * cb]  # fmt: skip
            phase = b.reshape(_combine(b, terms), (cout, batch, tiles_h, 1, tiles_w, 1))
            columns.append(phase)
        phases.append(b.concatenate(columns, 5))
    y = b.concatenate(phases, 3)  # [Cout, N, th, 2, tw, 2]
    y = b.reshape(y, (cout, batch, 2 * tiles_h, 2 * tiles_w))
    return b.transpose(y, (1, 0, 2, 3))


class Winograd:
    name = "winograd"

    def run(self, module) -> bool:
        return rewrite(module, [winograd])
