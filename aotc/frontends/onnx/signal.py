"""Signal processing and small linear algebra: DFT, STFT, the window functions,
MelWeightMatrix, Einsum and Det.

Fourier transforms are dots (DFT) or strided convolutions (STFT) with constant
cos/sin matrices; those depend only on shapes and attributes, so numpy builds
them.  Windows and MelWeightMatrix depend only on their (constant) inputs' values
and become constants.  Einsum is diagonals, reductions and a chain of dot
generals; Det is an LU factorisation with partial pivoting, unrolled over the
static matrix size.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import (
    ComputationBuilder,
    ConvDims,
    Direction,
    DotDims,
    DType,
    Instruction,
    Op,
    Shape,
    Window,
)
from .dtypes import to_dtype
from .helpers import full, full_like, normalize_axis, reduce
from .linalg import square_matrices
from .registry import NodeContext, onnx_op

# a constant Fourier matrix larger than this (elements) is refused: it would bloat the object
MAX_MATRIX_ELEMENTS = 1 << 24
# Det unrolls O(n) steps of O(n^2) work each; larger matrices are refused
MAX_DET_SIZE = 64


def _float_input(x: Instruction, what: str) -> DType:
    if not x.array_shape.dtype.is_float:
        raise UnsupportedError(f"{what} must be a float tensor, not {x.array_shape.dtype.text}")
    return x.array_shape.dtype


def _work_dtype(dtype: DType) -> DType:
    """f16 and bf16 compute in f32 (their constants and sums would lose too much)."""
    return DType.F32 if dtype in (DType.F16, DType.BF16) else dtype


# -- DFT and STFT -----------------------------------------------------------------


def _fourier_matrix(
    n_in: int, length: int, parts_in: int, inverse: bool, onesided: bool
) -> np.ndarray:
    """M[n, p, k, q]: output k (part q) = sum over input n (part p) of x[n, p] M[n, p, k, q].

    Forward: X_k = sum_n x_n e^(-2 pi i kn/L) (onesided: k <= L/2).  Inverse:
    x_k = sum_n X_n e^(2 pi i kn/L) / L; onesided inverse is numpy's irfft (the
    input is the half spectrum, extended by Hermitian symmetry; the output is real).
    Inputs past `length` (or past L/2 + 1 for irfft) do not contribute (truncation).
    """
    irfft = inverse and onesided
    n_used = min(n_in, length // 2 + 1 if irfft else length)
    k_out = length // 2 + 1 if onesided and not inverse else length
    n, k = np.arange(n_used)[:, None], np.arange(k_out)[None, :]
    # exact integer phase, so the angle stays accurate for long transforms
    angle = 2 * np.pi * ((n * k) % length) / length
    factor = np.exp(1j * angle) / length if inverse else np.exp(-1j * angle)
    if irfft:
        # the conjugate half of the spectrum doubles every bin but DC and Nyquist
        weight = np.where((np.arange(n_used) == 0) | (2 * np.arange(n_used) == length), 1, 2)
        factor = factor * weight[:, None]
    parts_out = 1 if irfft else 2
    matrix = np.zeros((n_in, parts_in, k_out, parts_out))
    # (xr + i xi)(fr + i fi) = (xr fr - xi fi) + i (xr fi + xi fr)
    matrix[:n_used, 0, :, 0] = factor.real
    if parts_out == 2:
        matrix[:n_used, 0, :, 1] = factor.imag
    if parts_in == 2:
        matrix[:n_used, 1, :, 0] = -factor.imag
        if parts_out == 2:
            matrix[:n_used, 1, :, 1] = factor.real
    if matrix.size > MAX_MATRIX_ELEMENTS:
        raise UnsupportedError(
            f"a {length}-point transform needs a {matrix.size}-element constant matrix "
            f"(more than {MAX_MATRIX_ELEMENTS})"
        )
    return matrix


def _complex_parts(x: Instruction, what: str) -> int:
    parts = x.array_shape.dims[-1] if x.array_shape.rank else 0
    if x.array_shape.rank < 2 or parts not in (1, 2):
        raise ShapeError(
            f"{what} must be [..., N, 1] (real) or [..., N, 2] (complex), got {list(x.array_shape.dims)}"
        )
    return parts


def _dft(ctx: NodeContext, x: Instruction, axis: int) -> Instruction:
    b = ctx.b
    dtype = _float_input(x, "DFT input")
    parts = _complex_parts(x, "DFT input")
    rank = x.array_shape.rank
    axis = normalize_axis(axis, rank)
    if axis == rank - 1:
        raise ModelError("axis must not be the last (real/imaginary) dimension")
    inverse, onesided = bool(ctx.attr("inverse")), bool(ctx.attr("onesided"))
    n_in = x.array_shape.dims[axis]
    length = ctx.const_ints(1)
    if length is not None:
        length = length[0]
    else:
        # irfft's default: the even length whose half spectrum is the input
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    if length < 1:
        raise ModelError(f"dft_length must be positive, got {length}")
    # accumulate in f64 and round once: a length-N sum of f32 products loses ~N ulps,
    # enough to miss tight tolerances on outputs near zero
    work = DType.F64
    matrix = b.constant(_fourier_matrix(n_in, length, parts, inverse, onesided), work)
    # contract (axis, parts) -> [other dims..., K, parts_out]; then K goes back to `axis`
    out = b.dot(b.convert(x, work), matrix, DotDims((), (), (axis, rank - 1), (0, 1)))
    perm = [*range(axis), rank - 2, *range(axis, rank - 2), rank - 1]
    return b.convert(b.transpose(out, perm), dtype)


@onnx_op("DFT", since=17, until=19)
def dft_17(ctx: NodeContext, x: Instruction, dft_length=None) -> Instruction:
    return _dft(ctx, x, ctx.attr("axis", 1))


@onnx_op("DFT", since=20)
def dft_20(ctx: NodeContext, x: Instruction, dft_length=None, axis=None) -> Instruction:
    axes = ctx.const_ints(2)
    return _dft(ctx, x, axes[0] if axes else -2)


@onnx_op("STFT", since=17)
def stft(ctx: NodeContext, signal, frame_step, window=None, frame_length=None) -> Instruction:
    """Frames times window, Fourier transformed: one strided convolution whose kernel
    is the window times the constant Fourier matrix."""
    b = ctx.b
    dtype = _float_input(signal, "STFT signal")
    parts = _complex_parts(signal, "STFT signal")
    if signal.shape.rank != 3:
        raise ShapeError(f"signal must be [batch, length, 1 or 2], got {list(signal.shape.dims)}")
    batch, n_signal = signal.shape.dims[:2]
    step = ctx.const_ints(1)[0]
    given = ctx.const_ints(3)
    length = given[0] if given else window.shape.dims[0] if window is not None else n_signal
    if window is not None and window.shape.dims != (length,):
        raise ShapeError(f"window has shape {list(window.shape.dims)}, expected [{length}]")
    if step < 1 or not 1 <= length <= n_signal:
        raise ModelError(f"frame_step {step} / frame_length {length} do not fit the signal")
    matrix = _fourier_matrix(length, length, parts, False, bool(ctx.attr("onesided")))
    bins = matrix.shape[2]
    # [L, P, K, 2] -> kernel [K * 2 (output features), P (input features), L]
    kernel_array = matrix.transpose(2, 3, 1, 0).reshape(bins * 2, parts, length)
    work = _work_dtype(dtype)
    kernel = b.constant(kernel_array, work)
    if window is not None:
        window = b.broadcast(b.convert(window, work), [2], kernel.array_shape.dims)
        kernel = b.binary(Op.MULTIPLY, kernel, window)
    channels_first = b.convert(b.transpose(signal, [0, 2, 1]), work)
    out = b.convolution(channels_first, kernel, Window.make([length], [step]), ConvDims.nchw(1))
    frames = out.array_shape.dims[2]
    out = b.transpose(b.reshape(out, [batch, bins, 2, frames]), [0, 3, 1, 2])
    return b.convert(out, dtype)


# -- windows and the mel filter bank (constants from constant inputs) -------------


def _window_terms(n: np.ndarray, denominator: int, name: str) -> np.ndarray:
    phase = 2 * np.pi * n / denominator
    if name == "HannWindow":
        return np.sin(phase / 2) ** 2
    if name == "HammingWindow":
        alpha = 25 / 46  # the reference's a0 (numpy's 0.54 rounded less)
        return alpha - (1 - alpha) * np.cos(phase)
    return 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)


@onnx_op("HannWindow", "HammingWindow", "BlackmanWindow", since=17)
def window_function(ctx: NodeContext, size: Instruction) -> Instruction:
    n = ctx.const_ints(0)[0]
    if n < 0:
        raise ModelError(f"window size must not be negative, got {n}")
    dtype = to_dtype(ctx.attr("output_datatype"), "output_datatype")
    denominator = n if ctx.attr("periodic") else n - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        values = _window_terms(np.arange(n, dtype=np.float64), denominator, ctx.node.op_type)
    return ctx.b.constant(values, dtype)


@onnx_op("MelWeightMatrix", since=17)
def mel_weight_matrix(ctx: NodeContext, *inputs: Instruction) -> Instruction:
    """Triangular mel filters, computed as the reference does (same dtypes, same
    rounding of the bin edges), as a constant [dft_length // 2 + 1, num_mel_bins]."""
    num_mel_bins, dft_length, sample_rate, lower_hz, upper_hz = (ctx.const(i) for i in range(5))
    bins = np.arange(0, int(num_mel_bins) + 2)
    low_mel = 2595 * np.log1p(lower_hz / 700) / np.log(10)
    high_mel = 2595 * np.log1p(upper_hz / 700) / np.log(10)
    mel_step = (high_mel - low_mel) / bins.shape[0]
    hertz = 700 * np.expm1((bins * mel_step + low_mel) / 2595 * np.log(10))
    edges = (((dft_length + 1) * hertz) // sample_rate).astype(int)
    out = np.zeros((int(dft_length) // 2 + 1, int(num_mel_bins)))
    for i in range(int(num_mel_bins)):
        low, center, high = (int(e) for e in edges[i : i + 3])
        if center == low:
            out[center, i] = 1
        else:
            out[low : center + 1, i] = (np.arange(low, center + 1) - low) / (center - low)
        if high > center:
            out[center:high, i] = (high - np.arange(center, high)) / (high - center)
    return ctx.b.constant(out, to_dtype(ctx.attr("output_datatype"), "output_datatype"))


# -- Einsum -----------------------------------------------------------------------

# labels standing for the dims an ellipsis covers (never letters, so never clash)
ELLIPSIS_LABELS = [chr(0x2460 + i) for i in range(64)]


def _expand_term(term: str, rank: int, ellipsis_rank: int | None) -> list[str]:
    """A term's labels with '...' replaced by ellipsis labels, right-aligned."""
    if "..." not in term:
        labels = list(term)
        if rank >= 0 and len(labels) != rank:
            raise ShapeError(f"einsum term '{term}' has {len(labels)} labels for rank {rank}")
        return labels
    head, _, tail = term.partition("...")
    count = rank - len(head) - len(tail) if rank >= 0 else ellipsis_rank
    if count < 0:
        raise ShapeError(f"einsum term '{term}' has more labels than rank {rank}")
    total = ellipsis_rank if ellipsis_rank is not None else count
    return [*head, *ELLIPSIS_LABELS[total - count : total], *tail]


def parse_einsum(equation: str, ranks: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    """Each operand's labels and the output's, ellipses expanded."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ModelError(f"equation '{equation}' has {len(terms)} operands, not {len(ranks)}")
    for term in terms + ([rhs] if arrow else []):
        letters = term.replace("...", "")
        if any(c not in string.ascii_letters for c in letters) or term.count("...") > 1:
            raise ModelError(f"einsum term '{term}' is not letters with at most one '...'")
    ellipsis = max((r - len(t) + 3 for t, r in zip(terms, ranks) if "..." in t), default=0)
    inputs = [_expand_term(t, r, ellipsis) for t, r in zip(terms, ranks)]
    if arrow:
        return inputs, _expand_term(rhs, -1, ellipsis)
    # implicit output: the ellipsis dims, then the labels used once, sorted
    counts: dict[str, int] = {}
    for label in lhs.replace("...", "").replace(",", ""):
        counts[label] = counts.get(label, 0) + 1
    singles = sorted(label for label, count in counts.items() if count == 1)
    return inputs, [*ELLIPSIS_LABELS[:ellipsis], *singles]


class _Term:
    """An operand during contraction: its instruction and one label per dim."""

    def __init__(self, b: ComputationBuilder, x: Instruction, labels: list[str]):
        self.b, self.x, self.labels = b, x, labels

    def take_diagonals(self) -> None:
        """x[..i..i..] -> x[..i..]: keep where the two indices agree, sum one away."""
        b = self.b
        while len(set(self.labels)) != len(self.labels):
            first = next(lb for i, lb in enumerate(self.labels) if lb in self.labels[:i])
            p = self.labels.index(first)
            q = self.labels.index(first, p + 1)
            dims = self.x.array_shape.dims
            if dims[p] != dims[q]:
                raise ShapeError(f"einsum label '{first}' has sizes {dims[p]} and {dims[q]}")
            index = Shape(DType.S32, dims)
            on_diagonal = b.compare(b.iota(index, p), b.iota(index, q), Direction.EQ)
            self.x = b.select(on_diagonal, self.x, full_like(b, 0, self.x))
            self.x = reduce(b, self.x, Op.ADD, [q], keepdims=False)
            del self.labels[q]

    def broadcast(self, sizes: dict[str, int]) -> None:
        """Stretch size-1 dims to their label's size (ellipsis broadcasting)."""
        dims = [sizes[lb] for lb in self.labels]
        if list(self.x.array_shape.dims) != dims:
            self.x = self.b.broadcast_to(self.x, dims)

    def sum_out(self, keep: set[str]) -> None:
        axes = [i for i, lb in enumerate(self.labels) if lb not in keep]
        if axes:
            self.x = reduce(self.b, self.x, Op.ADD, axes, keepdims=False)
            self.labels = [lb for lb in self.labels if lb in keep]

    def contract(self, other: _Term, keep: set[str]) -> None:
        """self <- self * other, summing the shared labels not in `keep`."""
        b = self.b
        self.sum_out(keep | set(other.labels))
        other.sum_out(keep | set(self.labels))
        shared = [lb for lb in self.labels if lb in other.labels]
        batch = [lb for lb in shared if lb in keep]
        summed = [lb for lb in shared if lb not in keep]
        mine = [lb for lb in self.labels if lb not in shared]
        theirs = [lb for lb in other.labels if lb not in shared]
        dims = DotDims(
            [self.labels.index(lb) for lb in batch],
            [other.labels.index(lb) for lb in batch],
            [self.labels.index(lb) for lb in summed],
            [other.labels.index(lb) for lb in summed],
        )
        self.x = b.dot(self.x, other.x, dims)
        self.labels = batch + mine + theirs


@onnx_op("Einsum", since=12)
def einsum(ctx: NodeContext, *operands: Instruction) -> Instruction:
    b = ctx.b
    inputs, output = parse_einsum(
        ctx.required_attr("equation"), [x.array_shape.rank for x in operands]
    )
    if len(set(output)) != len(output):
        raise ModelError("einsum output repeats a label")
    dtypes = {x.array_shape.dtype for x in operands}
    if len(dtypes) != 1:
        raise ShapeError("einsum operands must have one element type")
    sizes: dict[str, int] = {}
    for labels, x in zip(inputs, operands):
        for label, size in zip(labels, x.array_shape.dims):
            known = sizes.get(label, 1)
            if size != 1 and known not in (1, size):
                raise ShapeError(f"einsum label '{label}' has sizes {known} and {size}")
            sizes[label] = size if size != 1 else known
    missing = [lb for lb in output if lb not in sizes]
    if missing:
        raise ModelError(f"einsum output label(s) {', '.join(missing)} are in no operand")
    terms = [_Term(b, x, list(labels)) for x, labels in zip(operands, inputs)]
    for term in terms:
        term.take_diagonals()
        term.broadcast(sizes)
    result = terms[0]
    for i, term in enumerate(terms[1:], start=2):
        later = set(output).union(*(t.labels for t in terms[i:]))
        result.contract(term, later)
    result.sum_out(set(output))
    return b.transpose(result.x, [result.labels.index(lb) for lb in output])


# -- Det --------------------------------------------------------------------------


@onnx_op("Det", since=11)
def det(ctx: NodeContext, x: Instruction) -> Instruction:
    """LU with partial pivoting (as LAPACK's getrf): the determinant is the product of
    the pivots, negated per row swap.  Each step works on the shrinking trailing block."""
    b = ctx.b
    n, lead, batch = square_matrices(x, "Det", MAX_DET_SIZE)
    work = _work_dtype(x.array_shape.dtype)
    block = b.reshape(b.convert(x, work), [batch, n, n])
    result = full(b, 1, work, [batch])
    for m in range(n, 0, -1):
        block, pivot = _lu_step(b, block, m)
        result = b.binary(Op.MULTIPLY, result, pivot)
    return b.convert(b.reshape(result, lead), x.array_shape.dtype)


def _lu_step(b: ComputationBuilder, block: Instruction, m: int) -> tuple[Instruction, Instruction]:
    """One elimination step on [batch, m, m]: the (signed) pivot and the next block."""
    batch = block.array_shape.dims[0]
    column = b.reshape(b.slice(block, [0, 0, 0], [batch, m, 1]), [batch, m])
    magnitude = b.unary(Op.ABS, column)
    largest = reduce(b, magnitude, Op.MAXIMUM, [1], keepdims=False)
    is_largest = b.compare(magnitude, b.broadcast(largest, [0], [batch, m]), Direction.EQ)
    rows = b.iota(Shape(DType.S32, [batch, m]), 1)
    # the first row holding the largest magnitude is the pivot row
    pivot_index = reduce(
        b, b.select(is_largest, rows, full_like(b, m, rows)), Op.MINIMUM, [1], keepdims=False
    )
    is_pivot = b.compare(rows, b.broadcast(pivot_index, [0], [batch, m]), Direction.EQ)
    rows_2d = [batch, m, m]
    pivot_mask = b.broadcast(is_pivot, [0, 1], rows_2d)
    pivot_row = reduce(b, b.select(pivot_mask, block, full_like(b, 0, block)), Op.ADD, [1], False)
    top_row = b.reshape(b.slice(block, [0, 0, 0], [batch, 1, m]), [batch, m])
    pivot = b.reshape(b.slice(pivot_row, [0, 0], [batch, 1]), [batch])
    swapped = b.compare(pivot_index, full_like(b, 0, pivot_index), Direction.NE)
    signed = b.select(swapped, b.unary(Op.NEGATE, pivot), pivot)
    if m == 1:
        return block, signed
    # the pivot row's old place takes the top row; rows 1.. are all that is kept
    block = b.select(pivot_mask, b.broadcast(top_row, [0, 2], rows_2d), block)
    rest = b.slice(block, [0, 1, 0], [batch, m, m])
    # a zero pivot means a zero column: nothing to eliminate (and no 0/0)
    safe = b.select(
        b.compare(pivot, full_like(b, 0, pivot), Direction.EQ), full_like(b, 1, pivot), pivot
    )
    lead = b.reshape(b.slice(rest, [0, 0, 0], [batch, m - 1, 1]), [batch, m - 1])
    factors = b.binary(Op.DIVIDE, lead, b.broadcast(safe, [0], [batch, m - 1]))
    rest_dims = [batch, m - 1, m]
    update = b.binary(
        Op.MULTIPLY,
        b.broadcast(factors, [0, 1], rest_dims),
        b.broadcast(pivot_row, [0, 2], rest_dims),
    )
    rest = b.binary(Op.SUBTRACT, rest, update)
    return b.slice(rest, [0, 0, 1], [batch, m - 1, m]), signed
