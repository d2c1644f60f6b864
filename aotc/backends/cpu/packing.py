"""GEMM operands packed from strided memory at run time.

`strided_packer` lays a strided matrix out as panels of `width` rows, each kc x width
elements (k-major, then the row): the layout the micro-kernel (tiles.py) reads.
Contiguous rows are copied as vectors, rows contiguous along k transposed in 4x4
register blocks, others gathered or copied element by element; rows past the count
are zeros.  `panel_loop` and `clamped_rows` serve the integer GEMM's pair packers
(pairs.py) too.
"""

from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

from ..llvm.context import EmitContext
from ..llvm.lltypes import I32, I64, PTR, i64
from ..llvm.loops import for_range
from .gemm_config import GemmConfig
from .shared_functions import shared_function
from .vectors import lanes, lanes_below, masked_gather, masked_load, smaller, splat, vector_gep


def strided_packer(ctx: EmitContext, cfg: GemmConfig, width: int, gather: bool):
    """`pack(src, p_stride, k_stride, count, kc, dst)`: panels of `width` from memory.

    Panels whose rows are contiguous (p_stride == 1) are copied as vectors (the
    partial last one by masked loads); others (transposing, strided, the partial last
    panel) are gathered with
    32-bit lane offsets (`gather`: p_stride * width fits), else copied element
    by element; rows past `count` are zeros.
    """
    name = f"{ctx.prefix}.gemm.pack.{cfg.dtype.text}.{width}{'' if gather else '.wide'}"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64, I64, PTR])
    if b is None:
        return function
    src, p_stride, k_stride, count, kc, dst = function.args
    ty = cfg.element
    row_type = ir.VectorType(ty, width)
    with panel_loop(b, (src, ty), (dst, ty), p_stride, count, kc, width) as panel:
        source, out, valid, full = panel
        contiguous = b.icmp_unsigned("==", p_stride, i64(1))
        transposing = b.and_(full, b.icmp_unsigned("==", k_stride, i64(1)))
        with b.if_else(contiguous) as (vector, other):
            with vector, b.if_else(full) as (whole, part):
                with whole, for_range(b, kc, "k") as k:
                    p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
                    row = b.load(p, typ=row_type, align=cfg.itemsize)
                    q = b.gep(out, [b.mul(k, i64(width))], source_etype=ty)
                    b.store(row, q, align=cfg.itemsize)
                # the last panel of contiguous rows: masked loads, not a gather (a
                # 96 x 49 x 288 GEMM spent a third of its time gathering one column)
                with part:
                    mask = lanes_below(b, valid, width)
                    with for_range(b, kc, "k") as k:
                        p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
                        row = masked_load(ctx, b, cfg, p, mask)
                        q = b.gep(out, [b.mul(k, i64(width))], source_etype=ty)
                        b.store(row, q, align=cfg.itemsize)
            with other, b.if_else(transposing) as (rows, rest):
                with rows:
                    _transposed_panel(b, cfg, source, out, p_stride, kc, width)
                with rest:
                    if gather:
                        _gathered_panel(
                            ctx, b, cfg, source, out, p_stride, k_stride, kc, valid, width
                        )
                    else:
                        _scalar_panel(b, ty, source, out, p_stride, k_stride, kc, valid, width)
    b.ret_void()
    return function


@contextmanager
def panel_loop(b: ir.IRBuilder, src, dst, p_stride, count, kc, width: int):
    """A loop over the panels of `width` rows that a packer writes from strided memory:
    yields (where the panel's first row starts in `src`, where its kc x width elements go
    in `dst`, its rows before `count`, whether it has all `width`); `src` and `dst` are
    (pointer, element type)."""
    (src, src_type), (dst, dst_type) = src, dst
    panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
    with for_range(b, panels, "panel") as panel:
        first = b.mul(panel, i64(width))
        valid = smaller(b, i64(width), b.sub(count, first))
        source = b.gep(src, [b.mul(first, p_stride)], source_etype=src_type)
        out = b.gep(dst, [b.mul(first, kc)], source_etype=dst_type)
        yield source, out, valid, b.icmp_unsigned("==", valid, i64(width))


def _transposed_panel(b, cfg: GemmConfig, source, out, p_stride, kc, width) -> None:
    """A full panel of rows contiguous along k (a row-major A): 4x4 blocks, transposed
    in registers, four rows at a time over all of k (reading all rows per k would
    touch `width` lines at once, which conflict in L1 for power-of-two strides)."""
    ty, align = cfg.element, cfg.itemsize
    quad = ir.VectorType(ty, 4)
    i32 = ir.IntType(32)

    def shuffle(x, y, order):
        return b.shuffle_vector(x, y, ir.Constant(ir.VectorType(i32, 4), order))

    chunks = b.udiv(kc, i64(4))
    for group in range(0, width - width % 4, 4):
        rows = [b.gep(source, [b.mul(i64(group + r), p_stride)], source_etype=ty) for r in range(4)]
        with for_range(b, chunks, f"quad{group}") as chunk:
            k = b.mul(chunk, i64(4))
            x = [b.load(b.gep(row, [k], source_etype=ty), typ=quad, align=align) for row in rows]
            low = [shuffle(x[0], x[1], [0, 4, 1, 5]), shuffle(x[2], x[3], [0, 4, 1, 5])]
            high = [shuffle(x[0], x[1], [2, 6, 3, 7]), shuffle(x[2], x[3], [2, 6, 3, 7])]
            columns = [
                shuffle(low[0], low[1], [0, 1, 4, 5]),
                shuffle(low[0], low[1], [2, 3, 6, 7]),
                shuffle(high[0], high[1], [0, 1, 4, 5]),
                shuffle(high[0], high[1], [2, 3, 6, 7]),
            ]
            for t, column in enumerate(columns):
                at = b.add(b.mul(b.add(k, i64(t)), i64(width)), i64(group))
                b.store(column, b.gep(out, [at], source_etype=ty), align=align)
    # the k past the last whole chunk, and the rows past the last group of four
    done = b.mul(chunks, i64(4))
    for j in range(width):
        row = b.gep(source, [b.mul(i64(j), p_stride)], source_etype=ty)
        start = done if j < width - width % 4 else i64(0)
        with for_range(b, b.sub(kc, start), f"t{j}") as t:
            k = b.add(start, t)
            value = b.load(b.gep(row, [k], source_etype=ty), typ=ty)
            b.store(value, b.gep(out, [b.add(b.mul(k, i64(width)), i64(j))], source_etype=ty))


def _gathered_panel(ctx, b, cfg, source, out, p_stride, k_stride, kc, valid, width) -> None:
    """Panel rows as masked gathers with 32-bit lane offsets; lanes past `valid` zero."""
    ty = cfg.element
    lane = lanes(width)
    offsets = b.mul(lane, splat(b, b.trunc(p_stride, I32), lane.type))
    mask = b.icmp_unsigned("<", lane, splat(b, b.trunc(valid, I32), lane.type))
    with for_range(b, kc, "k") as k:
        p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
        row = masked_gather(ctx, b, cfg, vector_gep(b, p, offsets, ty), mask)
        b.store(row, b.gep(out, [b.mul(k, i64(width))], source_etype=ty), align=cfg.itemsize)


def clamped_rows(b: ir.IRBuilder, valid, p_stride, width: int) -> list:
    """Per row j of a panel: (whether it is before `valid`, its offset, row 0's past
    `valid` so that a load there stays inside the operand)."""
    rows = []
    for j in range(width):
        inside = b.icmp_unsigned("<", i64(j), valid)
        rows.append((inside, b.mul(b.select(inside, i64(j), i64(0)), p_stride)))
    return rows


def _scalar_panel(b, ty, source, out, p_stride, k_stride, kc, valid, width) -> None:
    """Panel rows element by element; element j clamped into the panel so its load
    stays inside, then replaced by zero past `valid`."""
    zero = ir.Constant(ty, 0)
    offsets = clamped_rows(b, valid, p_stride, width)
    with for_range(b, kc, "k") as k:
        p = b.gep(source, [b.mul(k, k_stride)], source_etype=ty)
        q = b.gep(out, [b.mul(k, i64(width))], source_etype=ty)
        for j, (inside, offset) in enumerate(offsets):
            value = b.load(b.gep(p, [offset], source_etype=ty), typ=ty)
            b.store(b.select(inside, value, zero), b.gep(q, [i64(j)], source_etype=ty))
