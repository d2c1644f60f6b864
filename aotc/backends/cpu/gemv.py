"""Matrix-vector products (M == 1 or N == 1), unpacked and vectorized.

`gemv.axpy` keeps UNROLL vectors of outputs in registers and adds one
broadcast vector element times a matrix row per k (the matrix contiguous
along the outputs); `gemv.dot` sums UNROLL vectors of products along k per
output and reduces them at the end (the matrix contiguous along k).  One
internal function per kind and element type, sizes and strides as arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.lltypes import I64, PTR, i64
from ..llvm.loops import entry_alloca, for_range
from .gemm_config import GemmConfig
from .shared_functions import shared_function
from .vectors import lanes_below, mul_add, splat, store_lanes

if TYPE_CHECKING:
    from .panels import StridedPanels

GEMV_UNROLL = 4  # independent vector accumulators
DOT_ROWS = 4  # gemv.dot outputs computed together (matrix rows streamed at once)


def gemv_kind(
    m: int, n: int, matrix: tuple[int, int], vector_k_stride: int, constant: bool = False
) -> str | None:
    """The matrix-vector path for M == 1 or N == 1, by the matrix's (p_stride,
    k_stride): "axpy" when it is a constant (prepack.py packs it into panels of outputs,
    whatever its strides) or contiguous along the outputs, "dot" when contiguous along
    K (with a contiguous vector); None: use the packed GEMM.  A constant matrix is
    streamed packed rather than read in rows: a row of 144 reduced across lanes per
    output made a 144 -> 576 layer 2.7x slower than the GEMM."""
    if m != 1 and n != 1:
        return None
    p_stride, k_stride = matrix
    if constant or p_stride == 1:
        return "axpy"
    if k_stride == 1 and vector_k_stride == 1:
        return "dot"
    return None


def emit_gemv(
    ctx: EmitContext,
    cfg: GemmConfig,
    kind: str,
    count: int | ir.Value,
    depth: int,
    vector: StridedPanels,
    matrix: StridedPanels,
    out: ir.Value,
) -> None:
    """out[i] = sum_k vector[k] matrix[i, k] for i < count (`vector` indexes as (0, k))."""
    function = _gemv_function(ctx, cfg, kind)
    stride = matrix.k_stride if kind == "axpy" else matrix.p_stride
    count = i64(count) if isinstance(count, int) else count
    args = [count, i64(depth), vector.base, i64(vector.k_stride), matrix.base, i64(stride)]
    ctx.builder.call(function, [*args, out])


def packed_width(cfg: GemmConfig, count: int) -> int:
    """Outputs per panel of a pre-packed axpy matrix: GEMV_UNROLL vectors, fewer for
    fewer outputs."""
    return min(cfg.lanes * GEMV_UNROLL, -(-count // cfg.lanes) * cfg.lanes)


def emit_packed_gemv(ctx, cfg: GemmConfig, width: int, count, depth: int, vector, panels, out):
    """out[i] = sum_k vector[k] matrix[i, k] for i < count, the matrix pre-packed as
    panels of `width` outputs (prepack.py: per panel, k by k, its `width` values)."""
    function = _packed_axpy_function(ctx, cfg, width)
    count = i64(count) if isinstance(count, int) else count
    args = [count, i64(depth), vector.base, i64(vector.k_stride), panels, out]
    ctx.builder.call(function, args)


def _packed_axpy_function(ctx: EmitContext, cfg: GemmConfig, width: int) -> ir.Function:
    """`gemv(count, depth, x, x_stride, panels, y)`: per panel, its `width` outputs in
    registers over all of k, read as one contiguous stream (a row-major matrix read
    `width` columns at a time strides by its row length, a power of two for the usual
    widths, which maps the rows onto a few cache sets); even and odd k into separate
    accumulators, added at the end; the last panel's outputs past `count` not stored."""
    name = f"{ctx.prefix}.gemv.packed.{cfg.dtype.text}.{width}"
    function, b = shared_function(ctx, name, [I64, I64, PTR, I64, PTR, PTR])
    if b is None:
        return function
    count, depth, x, x_stride, panels, y = function.args
    ty = cfg.element
    vec = ir.VectorType(ty, cfg.lanes)
    vectors = width // cfg.lanes
    blocks = b.udiv(b.add(count, i64(width - 1)), i64(width))
    with for_range(b, blocks, "panel") as block:
        i0 = b.mul(block, i64(width))
        panel = b.gep(panels, [b.mul(i0, depth)], source_etype=ty)
        accs = [[entry_alloca(b, vec) for _ in range(vectors)] for _ in range(2)]
        for acc in (a for pair in accs for a in pair):
            b.store(ir.Constant(vec, None), acc)

        def step(k, sums):
            xs = splat(b, b.load(b.gep(x, [b.mul(k, x_stride)], source_etype=ty), typ=ty), vec)
            row = b.gep(panel, [b.mul(k, i64(width))], source_etype=ty)
            for v, acc in enumerate(sums):
                p = b.gep(row, [i64(v * cfg.lanes)], source_etype=ty)
                value = b.load(p, typ=vec, align=cfg.itemsize)
                b.store(mul_add(ctx, b, cfg, xs, value, b.load(acc)), acc)

        pairs = b.udiv(depth, i64(2))
        with for_range(b, pairs, "k2") as k2:
            k = b.mul(k2, i64(2))
            step(k, accs[0])
            step(b.add(k, i64(1)), accs[1])
        with for_range(b, b.sub(depth, b.mul(pairs, i64(2))), "klast") as t:
            step(b.add(b.mul(pairs, i64(2)), t), accs[0])
        left = b.sub(count, i0)
        for v in range(vectors):
            total = b.fadd(b.load(accs[0][v]), b.load(accs[1][v]))
            p = b.gep(y, [b.add(i0, i64(v * cfg.lanes))], source_etype=ty)
            store_lanes(ctx, b, cfg, total, p, lanes_below(b, left, cfg.lanes, v * cfg.lanes))
    b.ret_void()
    return function


def _gemv_function(ctx: EmitContext, cfg: GemmConfig, kind: str) -> ir.Function:
    """`gemv(count, depth, x, x_stride, mat, stride, y)`.

    axpy: mat[i + k*stride], vectorized over i (UNROLL vectors of outputs in
    registers, one broadcast x[k] per k); dot: mat[i*stride + k], vectorized
    over k (UNROLL partial sums per output, reduced at the end).
    """
    name = f"{ctx.prefix}.gemv.{kind}.{cfg.dtype.text}"
    function, b = shared_function(ctx, name, [I64, I64, PTR, I64, PTR, I64, PTR])
    if b is None:
        return function
    count, depth, x, x_stride, mat, stride, y = function.args
    emit = _gemv_axpy if kind == "axpy" else _gemv_dot
    emit(ctx, b, cfg, count, depth, x, x_stride, mat, stride, y)
    b.ret_void()
    return function


def _gemv_axpy(ctx, b, cfg, count, depth, x, x_stride, mat, stride, y) -> None:
    ty = cfg.element
    vec = ir.VectorType(ty, cfg.lanes)
    done_slot = entry_alloca(b, I64)  # outputs finished by the wider steps
    b.store(i64(0), done_slot)
    for width, vectors in ((cfg.lanes * GEMV_UNROLL, GEMV_UNROLL), (cfg.lanes, 1), (1, 1)):
        t = vec if width > 1 else ty
        step = cfg.lanes if width > 1 else 1
        done = b.load(done_slot)
        blocks = b.udiv(b.sub(count, done), i64(width))
        with for_range(b, blocks, f"axpy{width}") as block:
            i0 = b.add(done, b.mul(block, i64(width)))
            accs = [entry_alloca(b, t) for _ in range(vectors)]
            for acc in accs:
                b.store(ir.Constant(t, None), acc)
            with for_range(b, depth, "k") as k:
                xk = b.load(b.gep(x, [b.mul(k, x_stride)], source_etype=ty), typ=ty)
                row = b.gep(mat, [b.add(b.mul(k, stride), i0)], source_etype=ty)
                xs = splat(b, xk, vec) if width > 1 else xk
                for v, acc in enumerate(accs):
                    p = b.gep(row, [i64(v * step)], source_etype=ty)
                    value = b.load(p, typ=t, align=cfg.itemsize)
                    b.store(_mul_add_any(ctx, b, cfg, xs, value, b.load(acc)), acc)
            for v, acc in enumerate(accs):
                p = b.gep(y, [b.add(i0, i64(v * step))], source_etype=ty)
                b.store(b.load(acc), p, align=cfg.itemsize)
        b.store(b.add(done, b.mul(blocks, i64(width))), done_slot)


def _gemv_dot(ctx, b, cfg, count, depth, x, x_stride, mat, stride, y) -> None:
    """DOT_ROWS outputs at a time (as many sequential streams of the matrix: one alone
    does not reach the memory bandwidth), then one at a time; each output sums its
    products the same way on either path."""
    rows = b.udiv(count, i64(DOT_ROWS))
    with for_range(b, rows, "rows") as index:
        _dot_rows(ctx, b, cfg, b.mul(index, i64(DOT_ROWS)), DOT_ROWS, depth, x, mat, stride, y)
    with for_range(b, b.sub(count, b.mul(rows, i64(DOT_ROWS))), "out") as t:
        i = b.add(b.mul(rows, i64(DOT_ROWS)), t)
        _dot_rows(ctx, b, cfg, i, 1, depth, x, mat, stride, y)


def _dot_rows(ctx, b, cfg, first, count: int, depth, x, mat, stride, y) -> None:
    """Outputs first..first+count-1: UNROLL vector partial sums each along k, reduced."""
    ty = cfg.element
    vec = ir.VectorType(ty, cfg.lanes)
    width = cfg.lanes * GEMV_UNROLL
    chunks = b.udiv(depth, i64(width))
    done = b.mul(chunks, i64(width))
    outputs = [b.add(first, i64(r)) for r in range(count)]
    lines = [b.gep(mat, [b.mul(i, stride)], source_etype=ty) for i in outputs]
    accs = [[entry_alloca(b, vec) for _ in range(GEMV_UNROLL)] for _ in lines]
    for acc in (a for row in accs for a in row):
        b.store(ir.Constant(vec, None), acc)
    with for_range(b, chunks, "kc") as chunk:
        k0 = b.mul(chunk, i64(width))
        for v in range(GEMV_UNROLL):
            offset = b.add(k0, i64(v * cfg.lanes))
            xs = b.load(b.gep(x, [offset], source_etype=ty), typ=vec, align=cfg.itemsize)
            for line, row_accs in zip(lines, accs):
                ms = b.load(b.gep(line, [offset], source_etype=ty), typ=vec, align=cfg.itemsize)
                acc = row_accs[v]
                b.store(mul_add(ctx, b, cfg, xs, ms, b.load(acc)), acc)
    for i, line, row_accs in zip(outputs, lines, accs):
        total = b.load(row_accs[0])
        for acc in row_accs[1:]:
            total = b.fadd(total, b.load(acc))
        scalar = entry_alloca(b, ty)
        b.store(_horizontal_sum(b, total), scalar)
        with for_range(b, b.sub(depth, done), "ktail") as t:
            k = b.add(done, t)
            xk = b.load(b.gep(x, [k], source_etype=ty), typ=ty)
            mk = b.load(b.gep(line, [k], source_etype=ty), typ=ty)
            b.store(b.fadd(b.load(scalar), b.fmul(xk, mk)), scalar)
        b.store(b.load(scalar), b.gep(y, [i], source_etype=ty))


def _horizontal_sum(b: ir.IRBuilder, vector: ir.Value) -> ir.Value:
    """Pairwise halving sum of a vector's lanes."""
    count = vector.type.count
    while count > 1:
        half = count // 2
        i32 = ir.IntType(32)
        low = b.shuffle_vector(
            vector, vector, ir.Constant(ir.VectorType(i32, half), list(range(half)))
        )
        high = b.shuffle_vector(
            vector, vector, ir.Constant(ir.VectorType(i32, half), list(range(half, count)))
        )
        vector = b.fadd(low, high)
        count = half
    return b.extract_element(vector, ir.Constant(ir.IntType(32), 0))


def _mul_add_any(ctx, b, cfg, x, y, acc) -> ir.Value:
    """`mul_add` for vectors or scalars."""
    if isinstance(x.type, ir.VectorType):
        return mul_add(ctx, b, cfg, x, y, acc)
    return b.fadd(b.fmul(x, y), acc)
