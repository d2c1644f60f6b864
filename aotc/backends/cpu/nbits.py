"""Dots by block-dequantized weights (ir/dequantization.py), from the values as stored.

A weight w[n, k] = (q[n, k] - zero[n, b]) * scale[n, b] of 2, 4 or 8-bit q (MatMulNBits)
is pre-packed at compile time (prepack.py) into one copy of its own size, `NBitsLayout`:

- q in groups of `lanes` outputs (one vector), each group's values along k in chunks of
  32 / bits consecutive k, one 32-bit word per output and chunk (field i of word j:
  output j at the chunk's k i), so that a chunk of a group is one vector load and a
  shift and mask per k;
- groups in panels of PANEL_GROUPS (the last may have fewer), a panel's chunks
  interleaved group by group: one stream per panel;
- the scales and zero points per panel, block by block, a vector per group; the zero
  points as bytes when they are integers of 0..255 (the frontend keeps them so), else in
  the weight's type.

The original constants are then dropped from the blob: the object holds about the
bytes of the model's own packed weights.  Two kernels read the copy:

- one row of A (a decode step): `NBitsPlan` sums, per panel and block, a[k] times
  1 + q[n, k] / 2^bits, a float made from q's bits by integer operations alone (a
  convert per vector cost as much as the multiply-add: the decode kernel ran at half the
  speed), then adds scale * (that less the block's share of the offset and the zero
  points, from the block sums of a computed once per call): one multiply-add per weight
  value.  Panels are shared out to the threads;
- more rows (a prompt): the float GEMM (gemm.py), B packed by `NibblePanels`, which
  dequantizes each K slice's panels from the copy into the packing buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from ...buffers import Blob, BufferKind, Slice
from ...ir import DType
from ...ir.dequantization import block_dequantization
from ..llvm.context import EmitContext
from ..llvm.lltypes import F32, I8, I64, PTR, i64
from ..llvm.loops import entry_alloca, for_range
from .blocking import WORKSPACE_ALIGNMENT, aligned, round_up
from .gemm import GemmPlan
from .gemm_config import GemmConfig
from .gemm_split import MAX_PARTS, MIN_PARALLEL_GEMV_WORK, share_out
from .prepackable import PackedShape, Prepackable, StridedLayout, constant_elements
from .shared_functions import shared_function
from .vectors import lanes_below, mul_add, smaller, splat, store_lanes
from .views import fused_view

PANEL_GROUPS = 4  # vectors of outputs a decode kernel keeps in registers per panel
WORD_BITS = 32  # a chunk element: one output's values along k, `WORD_BITS // bits` of them
VALUE_BITS = (2, 4, 8)


@dataclass(frozen=True)
class NBitsLayout:
    """Where the pre-packed copy of an (n, k) weight of `bits`-bit values puts them."""

    n: int
    k: int
    bits: int
    block: int
    lanes: int
    zero: DType | None  # the zero points' type in the copy (U8 or the weight's); None: 0
    word: int  # bits of an element of a chunk: values of one output along k
    scale: DType = DType.F32

    @property
    def per_word(self) -> int:
        return self.word // self.bits

    @property
    def word_bytes(self) -> int:
        return self.word // 8

    @property
    def groups(self) -> int:
        return -(-self.n // self.lanes)

    @property
    def panels(self) -> int:
        return -(-self.groups // PANEL_GROUPS)

    @property
    def chunks(self) -> int:
        return self.k // self.per_word

    @property
    def blocks(self) -> int:
        return -(-self.k // self.block)

    @property
    def scale_offset(self) -> int:
        values = self.groups * self.chunks * self.lanes * self.word_bytes
        return round_up(values, WORKSPACE_ALIGNMENT)

    @property
    def zero_offset(self) -> int:
        scales = self.groups * self.blocks * self.lanes * self.scale.itemsize
        return round_up(self.scale_offset + scales, WORKSPACE_ALIGNMENT)

    @property
    def nbytes(self) -> int:
        zeros = 0 if self.zero is None else self.groups * self.blocks * self.lanes
        return self.zero_offset + zeros * (0 if self.zero is None else self.zero.itemsize)

    @property
    def tag(self) -> str:
        """What tells the kernels of two layouts apart (their offsets depend on all of it)."""
        return f"{self.bits}.{self.n}.{self.k}.{self.block}.{self.lanes}.{self.zero}.{self.word}"

    def panel_groups(self, panel: int) -> int:
        return min(PANEL_GROUPS, self.groups - panel * PANEL_GROUPS)

    def pack(self, q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None) -> bytes:
        """The copy of q (n, k), scale and zero (n, blocks)."""
        g, lanes = self.groups, self.lanes
        rows = g * lanes
        q = np.pad(q.astype(np.uint8), ((0, rows - self.n), (0, 0)))
        fields = q.reshape(g, lanes, self.chunks, self.per_word).astype(np.uint32)
        shifts = np.arange(self.per_word, dtype=np.uint32) * self.bits
        words = (fields << shifts).sum(axis=3, dtype=np.uint32)
        chunks = words.astype(f"<u{self.word_bytes}").transpose(0, 2, 1)
        out = bytearray(self.nbytes)
        parts = [(0, chunks)]
        parts.append((self.scale_offset, self._per_group(scale, self.scale)))
        if self.zero is not None and zero is not None:
            parts.append((self.zero_offset, self._per_group(zero, self.zero)))
        for offset, per_group in parts:  # (groups, steps, lanes) -> panels of groups
            data = b"".join(
                np.ascontiguousarray(
                    per_group[p * PANEL_GROUPS : p * PANEL_GROUPS + self.panel_groups(p)].transpose(
                        1, 0, 2
                    )
                ).tobytes()
                for p in range(self.panels)
            )
            out[offset : offset + len(data)] = data
        return bytes(out)

    def _per_group(self, values: np.ndarray, dtype: DType) -> np.ndarray:
        """(n, blocks) -> (groups, blocks, lanes) in `dtype`, zero past n."""
        rows = self.groups * self.lanes
        padded = np.pad(values.astype(dtype.numpy), ((0, rows - self.n), (0, 0)))
        return padded.reshape(self.groups, self.lanes, self.blocks).transpose(0, 2, 1)


@dataclass(frozen=True)
class NBitsWeight:
    """A dot's block-dequantized operand (contraction.operand_view): where its parts are."""

    values: Slice
    scale: Slice
    zero: Slice | None
    value_type: DType
    zero_type: DType | None  # as stored in the model
    block: int

    @property
    def slices(self) -> tuple[Slice, ...]:
        return tuple(s for s in (self.values, self.scale, self.zero) if s is not None)


@dataclass
class NibblePanels:
    """B of a GEMM by a pre-packed block-dequantized weight: `pack` dequantizes."""

    base: ir.Value
    layout: NBitsLayout

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        function = _pack_function(ctx, blocks.config, self.layout, width)
        ctx.builder.call(function, [self.base, p0, count, k0, kc, dst])
        return dst


@dataclass
class NBitsPlan(Prepackable):
    """A dot of A (m, k) by a block-dequantized (n, k) weight, pre-packed."""

    config: GemmConfig
    m: int
    layout: NBitsLayout
    weight: NBitsWeight
    gemm: GemmPlan  # the GEMM (its B replaced by NibblePanels) and its output placement
    layouts: tuple[StridedLayout | None, StridedLayout | None]
    packed: tuple[Slice | None, Slice | None] = (None, None)
    operands: tuple[int, int] = (0, 1)

    @property
    def kind(self) -> str:
        return f"nbits{self.layout.bits}.{'gemv' if self.m == 1 else 'gemm'}"

    @property
    def workspace_bytes(self) -> int:
        if self.m == 1:
            return aligned(self.layout.blocks * 4)
        return self.gemm.workspace_bytes

    def can_pack(self, side: int) -> bool:
        return side == 1

    def source(self, side: int) -> DType:
        return self.weight.value_type

    def packed_shape(self, side: int) -> PackedShape:
        # one copy per weight: its parts' places and the layout tell copies apart
        w, lay = self.weight, self.layout
        tag = f"nbits:{lay}:{[(s.offset, s.size) for s in w.slices]}"
        return PackedShape(lay.n, lay.k, lay.k, lay.lanes, (), (), transform=tag)

    def constant_slices(self, side: int) -> tuple[Slice, ...]:
        return self.weight.slices

    def pack_weights(self, side: int, weights: Blob) -> bytes:
        lay, w = self.layout, self.weight
        q = constant_elements(weights, w.values, w.value_type.numpy).reshape(lay.n, lay.k)
        scale = constant_elements(weights, w.scale, lay.scale.numpy).reshape(lay.n, lay.blocks)
        zero = None
        if w.zero is not None and w.zero_type is not None:
            zero = constant_elements(weights, w.zero, w.zero_type.numpy)
            zero = zero.reshape(lay.n, lay.blocks)
        return lay.pack(q, scale, zero)

    def emit(self, ctx: EmitContext, sources: list, c: Slice, workspace: Slice, epilogue):
        assert self.packed[1] is not None, "a block-dequantized weight is read pre-packed"
        where = self.packed[1]
        layout = self.layout

        def nibbles(ctx, sources, index):
            return NibblePanels(ctx.slice_pointer(where), layout)

        gemm = replace(self.gemm, b=nibbles)
        if self.m != 1:
            gemm.emit(ctx, sources, c, workspace, epilogue)
            return
        self._emit_gemv(ctx, gemm, sources, c, workspace, epilogue)

    def _emit_gemv(self, ctx, gemm: GemmPlan, sources, c, workspace, epilogue) -> None:
        lay = self.layout
        b = ctx.builder
        a, _, _, _ = gemm.batch_operands(ctx, sources, c, None, [])
        _block_sums(ctx, lay, a, b.bitcast(ctx.slice_pointer(workspace), PTR))
        work = lay.n * lay.k
        parts = 1 if work < MIN_PARALLEL_GEMV_WORK else min(MAX_PARTS, lay.panels)

        def unit(index, slot, passed):
            b = ctx.builder
            a, nib, c_row, region = gemm.batch_operands(ctx, sources, c, epilogue, [])
            sums = ctx.slice_pointer(workspace)
            panel = index[0]
            full = b.icmp_unsigned("<", panel, i64(lay.groups // PANEL_GROUPS))
            n0 = b.mul(panel, i64(PANEL_GROUPS * lay.lanes))
            count = smaller(b, i64(PANEL_GROUPS * lay.lanes), b.sub(i64(lay.n), n0))
            y = b.gep(c_row, [n0], source_etype=F32)
            args = [a.base, i64(a.k_stride), nib.base, panel, sums, y, count]
            tail = lay.panel_groups(lay.panels - 1)
            if tail == PANEL_GROUPS:
                b.call(_gemv_function(ctx, self.config, lay, PANEL_GROUPS), args)
            else:
                with b.if_else(full) as (then, otherwise):
                    with then:
                        b.call(_gemv_function(ctx, self.config, lay, PANEL_GROUPS), args)
                    with otherwise:
                        b.call(_gemv_function(ctx, self.config, lay, tail), args)
            if region is not None:
                region(i64(0), 1, n0, count)

        share_out(ctx, (lay.panels,), parts, unit)


def plan_nbits(problem, weight: NBitsWeight) -> NBitsPlan | None:
    """The plan of a float dot (dot.py's problem) of A by a block-dequantized B, or None
    where this form does not take it."""
    config = problem.config
    lhs, rhs = problem.lhs, problem.rhs
    bits = weight.value_type.bits
    if config.paired or config.dtype is not DType.F32 or bits not in VALUE_BITS:
        return None
    if weight.value_type.is_signed_int or problem.batch:
        return None
    if rhs.contracting != (1,) or rhs.free != (0,) or problem.k % (WORD_BITS // bits):
        return None
    zero = weight.zero_type
    if zero is not None and zero is not DType.U8:
        zero = DType.F32
    layout = NBitsLayout(problem.n, problem.k, bits, weight.block, config.lanes, zero, WORD_BITS)
    gemm = problem.gemm((lhs.factory(), rhs.factory()), problem.k)
    if problem.m == 1 and lhs.strides is None:  # the decode kernel reads A in memory
        return None
    layouts = (None, StridedLayout(weight.values, (), problem.k, 1))
    return NBitsPlan(
        config, problem.m, layout, weight, replace(gemm, layouts=(None, None)), layouts
    )


# -- kernels ------------------------------------------------------------------------


def _field(b, lay: NBitsLayout, word, i):
    """Field i of each lane of `word` (i: an int, or an i64 value) as i32 lanes."""
    lanes = word.type.count
    if isinstance(i, int):
        shift = ir.Constant(word.type, [i * lay.bits] * lanes)
    else:
        shift = splat(b, b.trunc(b.mul(i, i64(lay.bits)), word.type.element), word.type)
    field = b.and_(b.lshr(word, shift), ir.Constant(word.type, [(1 << lay.bits) - 1] * lanes))
    return field if lay.word == 32 else b.zext(field, ir.VectorType(ir.IntType(32), lanes))


def _offset_float(b, lay: NBitsLayout, word, i: int, vec):
    """Field i of each lane of `word` as the float 1 + q / 2^bits: q moved to the top of
    a mantissa whose exponent is 1.0's, by integer operations only (a convert per vector
    of values cost as much as its multiply-add)."""
    lanes = word.type.count
    top = 23 - lay.bits  # the field's lowest bit in the mantissa
    shift = top - i * lay.bits
    if shift > 0:
        word = b.shl(word, ir.Constant(word.type, [shift] * lanes))
    elif shift < 0:
        word = b.lshr(word, ir.Constant(word.type, [-shift] * lanes))
    field = b.and_(word, ir.Constant(word.type, [((1 << lay.bits) - 1) << top] * lanes))
    one = b.or_(field, ir.Constant(word.type, [0x3F800000] * lanes))
    return b.bitcast(one, vec)


def _load_zero(b, lay: NBitsLayout, zeros, at, vec):
    """The zero points of one group and block as floats."""
    if lay.zero is DType.U8:
        raw = b.load(b.gep(zeros, [at], source_etype=I8), typ=ir.VectorType(I8, vec.count), align=1)
        return b.uitofp(b.zext(raw, ir.VectorType(ir.IntType(32), vec.count)), vec)
    return b.load(b.gep(zeros, [at], source_etype=F32), typ=vec, align=4)


def _panel_pointers(b, lay: NBitsLayout, base, panel):
    """(values, scales, zeros) of `panel` in the copy at `base`."""
    full = PANEL_GROUPS * lay.lanes
    q = b.gep(base, [b.mul(panel, i64(full * lay.chunks * lay.word_bytes))], source_etype=I8)
    s_at = b.add(i64(lay.scale_offset), b.mul(panel, i64(full * lay.blocks * 4)))
    s = b.gep(base, [s_at], source_etype=I8)
    zsize = 0 if lay.zero is None else lay.zero.itemsize
    z_at = b.add(i64(lay.zero_offset), b.mul(panel, i64(full * lay.blocks * zsize)))
    return q, s, b.gep(base, [z_at], source_etype=I8)


def _block_sums(ctx, lay: NBitsLayout, a, out) -> None:
    """out[b] = the sum of a's k in block b (the zero points' share of each block)."""
    b = ctx.builder
    with for_range(b, lay.blocks, "asum") as blk:
        k0 = b.mul(blk, i64(lay.block))
        length = smaller(b, i64(lay.block), b.sub(i64(lay.k), k0))
        total = entry_alloca(b, F32)
        b.store(ir.Constant(F32, 0.0), total)
        with for_range(b, length, "ak", vectorize=True) as t:
            k = b.add(k0, t)
            x = b.load(b.gep(a.base, [b.mul(k, i64(a.k_stride))], source_etype=F32), typ=F32)
            b.store(b.fadd(b.load(total), x, flags=("reassoc", "nsz")), total)
        b.store(b.load(total), b.gep(out, [blk], source_etype=F32))


def _gemv_function(ctx, cfg: GemmConfig, lay: NBitsLayout, groups: int) -> ir.Function:
    """`f(a, a_stride, copy, panel, block_sums, y, count)`: y[j] for the j < count outputs
    of `panel` (of `groups` groups): per block, the products of a and q summed in float,
    then scale * (sum - zero * block sum) added."""
    name = f"{ctx.prefix}.nbits.gemv.{lay.tag}.{groups}"
    function, b = shared_function(ctx, name, [PTR, I64, PTR, I64, PTR, PTR, I64])
    if b is None:
        return function
    a, a_stride, base, panel, sums, y, count = function.args
    vec = ir.VectorType(F32, lay.lanes)
    chunk_type = ir.VectorType(ir.IntType(lay.word), lay.lanes)
    q, scales, zeros = _panel_pointers(b, lay, base, panel)
    accs = [entry_alloca(b, vec) for _ in range(groups)]
    # per group two independent sums (even and odd k), so that the multiply-adds do not
    # wait on each other
    dots = [[entry_alloca(b, vec) for _ in range(min(lay.per_word, 2))] for _ in range(groups)]
    for acc in accs:
        b.store(ir.Constant(vec, None), acc)
    per_block = lay.block // lay.per_word
    with for_range(b, lay.blocks, "blk") as blk:
        for slot in (s for row in dots for s in row):
            b.store(ir.Constant(vec, None), slot)
        first = b.mul(blk, i64(per_block))
        length = smaller(b, i64(per_block), b.sub(i64(lay.chunks), first))
        with for_range(b, length, "chunk") as t:
            chunk = b.add(first, t)
            k0 = b.mul(chunk, i64(lay.per_word))
            xs = []
            for i in range(lay.per_word):
                at = b.mul(b.add(k0, i64(i)), a_stride)
                xs.append(splat(b, b.load(b.gep(a, [at], source_etype=F32), typ=F32), vec))
            chunk_bytes = lay.lanes * lay.word_bytes
            row = b.gep(q, [b.mul(chunk, i64(groups * chunk_bytes))], source_etype=I8)
            for g in range(groups):
                p = b.gep(row, [i64(g * chunk_bytes)], source_etype=I8)
                word = b.load(p, typ=chunk_type, align=lay.word_bytes)
                for i in range(lay.per_word):
                    value = _offset_float(b, lay, word, i, vec)
                    slot = dots[g][i % len(dots[g])]
                    product = mul_add(ctx, b, cfg, xs[i], value, b.load(slot))
                    b.store(product, slot)
        block_sum = splat(b, b.load(b.gep(sums, [blk], source_etype=F32), typ=F32), vec)
        for g in range(groups):
            at = b.add(b.mul(blk, i64(groups * lay.lanes)), i64(g * lay.lanes))
            total = b.load(dots[g][0])
            for slot in dots[g][1:]:
                total = b.fadd(total, b.load(slot))
            # sum a (1 + q / L) = block sum + (sum a q) / L for L = 2^bits levels, so
            # sum a (q - zero) = L * total - (L + zero) * block sum
            levels = ir.Constant(vec, [float(1 << lay.bits)] * lay.lanes)
            offset = levels
            if lay.zero is not None:
                offset = b.fadd(_load_zero(b, lay, zeros, at, vec), levels)
            total = b.fsub(b.fmul(total, levels), b.fmul(offset, block_sum))
            scale = b.load(b.gep(scales, [b.mul(at, i64(4))], source_etype=I8), typ=vec, align=4)
            b.store(mul_add(ctx, b, cfg, scale, total, b.load(accs[g])), accs[g])
    for g in range(groups):
        p = b.gep(y, [i64(g * lay.lanes)], source_etype=F32)
        store_lanes(
            ctx, b, cfg, b.load(accs[g]), p, lanes_below(b, count, lay.lanes, g * lay.lanes)
        )
    b.ret_void()
    return function


def _pack_function(ctx, cfg: GemmConfig, lay: NBitsLayout, width: int) -> ir.Function:
    """`f(copy, p0, count, k0, kc, dst)`: the GEMM's panels of B (outputs p0.. of
    `width` each, k0..k0+kc) dequantized from the copy, rows past `count` zero."""
    name = f"{ctx.prefix}.nbits.pack.{lay.tag}.{width}"
    function, b = shared_function(ctx, name, [PTR, I64, I64, I64, I64, PTR])
    if b is None:
        return function
    base, p0, count, k0, kc, dst = function.args
    lanes = lay.lanes
    vectors = width // lanes
    panels = b.udiv(b.add(count, i64(width - 1)), i64(width))
    with for_range(b, panels, "npanel") as j:
        out = b.gep(dst, [b.mul(b.mul(j, i64(width)), kc)], source_etype=F32)
        for v in range(vectors):
            local = b.add(b.mul(j, i64(width)), i64(v * lanes))  # this vector's first row
            group = b.udiv(b.add(p0, local), i64(lanes))
            panel = b.udiv(group, i64(PANEL_GROUPS))
            g = b.urem(group, i64(PANEL_GROUPS))
            rest = b.sub(i64(lay.groups), b.mul(panel, i64(PANEL_GROUPS)))
            in_panel = smaller(b, i64(PANEL_GROUPS), rest)
            q, scales, zeros = _panel_pointers(b, lay, base, panel)
            keep = lanes_below(b, b.sub(count, local), lanes)

            # whole chunks of K where the slice holds them, single rows at its ends
            per = i64(lay.per_word)
            end = b.add(k0, kc)
            first = smaller(b, b.mul(b.udiv(b.add(k0, i64(lay.per_word - 1)), per), per), end)
            last = b.mul(b.udiv(end, per), per)
            last = b.select(b.icmp_signed("<", last, first), first, last)
            column = _Column(q, scales, zeros, in_panel, g, keep)
            target = b.gep(out, [b.sub(i64(v * lanes), b.mul(k0, i64(width)))], source_etype=F32)
            for start, stop in ((k0, first), (last, end)):
                with for_range(b, b.sub(stop, start), "krow") as t:
                    k = b.add(start, t)
                    _dequantized_rows(b, lay, column, k, [b.urem(k, per)], target, width)
            with for_range(b, b.udiv(b.sub(last, first), per), "kchunk") as t:
                k = b.add(first, b.mul(t, per))
                _dequantized_rows(b, lay, column, k, range(lay.per_word), target, width)
    b.ret_void()
    return function


@dataclass(frozen=True)
class _Column:
    """One vector of a B panel's outputs in the copy: its group's values, scales and
    zero points, the group's place in its panel, and the lanes that are outputs."""

    values: ir.Value
    scales: ir.Value
    zeros: ir.Value
    in_panel: ir.Value
    group: ir.Value
    keep: ir.Value


def _dequantized_rows(b, lay: NBitsLayout, column: _Column, k, fields, out, width: int):
    """B's rows k + i, for the fields i of k's chunk in `fields` (ints; or one i64, the
    field of k itself), dequantized into `out` (row r at r * width)."""
    lanes = lay.lanes
    vec = ir.VectorType(F32, lanes)
    chunk_bytes = lanes * lay.word_bytes
    chunk = b.udiv(k, i64(lay.per_word))
    at = b.mul(b.add(b.mul(chunk, column.in_panel), column.group), i64(chunk_bytes))
    raw = b.load(
        b.gep(column.values, [at], source_etype=I8),
        typ=ir.VectorType(ir.IntType(lay.word), lanes),
        align=lay.word_bytes,
    )
    where = b.mul(
        b.add(b.mul(b.udiv(k, i64(lay.block)), column.in_panel), column.group), i64(lanes)
    )
    scale = b.load(b.gep(column.scales, [b.mul(where, i64(4))], source_etype=I8), typ=vec, align=4)
    zero = None if lay.zero is None else _load_zero(b, lay, column.zeros, where, vec)
    for i in fields:
        w = b.sitofp(_field(b, lay, raw, i), vec)
        if zero is not None:
            w = b.fsub(w, zero)
        w = b.select(column.keep, b.fmul(w, scale), ir.Constant(vec, None))
        row = b.add(k, i64(i)) if isinstance(i, int) else k
        b.store(w, b.gep(out, [b.mul(row, i64(width))], source_etype=F32), align=4)


def nbits_weight(plan, fusion, operand) -> NBitsWeight | None:
    """Where the parts of a contraction operand in `fusion`'s body are when it is a
    block-dequantized weight of constants in row-major order (f32 scales), else None."""
    found = block_dequantization(operand)
    if found is None:
        return None
    parts = [found.values, found.scale] + ([found.zero] if found.zero is not None else [])
    slices = []
    for part in parts:
        view = fused_view(plan, fusion, part)
        if view is None or view.where.kind is not BufferKind.CONSTANT:
            return None
        if view.strides != (part.array_shape.dims[1], 1):
            return None
        slices.append(view.where)
    if found.scale.array_shape.dtype is not DType.F32:
        return None
    zero = slices[2] if found.zero is not None else None
    zero_type = found.zero.array_shape.dtype if found.zero is not None else None
    value_type = found.values.array_shape.dtype
    return NBitsWeight(slices[0], slices[1], zero, value_type, zero_type, found.block)
