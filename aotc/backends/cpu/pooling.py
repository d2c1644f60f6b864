"""Pooling kernels: reduce-window by max/min/add over the last two (or one) dims, and
whole-plane reductions (global pooling), in f32/f64, read straight from memory.

`program._emit_kernel` asks `emit_pooling` after the contractions.  It takes a
REDUCE_WINDOW whose window is trivial on the leading dims (size 1, stride 1, no
padding) with no base dilation, or a REDUCE over the trailing dims, whose
reducer is one max/min/add of its two parameters and whose init is a constant;
or a loop FUSION whose root reads one such value only elementwise at its own
shape (the average pool's division by the counts), possibly through a reshape
to that shape (global pooling's keepdims).  Its input must be a plain view of
a buffer (`views.fused_view`); anything else stays with the element rules.

A window kernel runs per output plane and row, a vector of output columns at a
time, all taps folded in registers and stored once.  Each tap's valid columns
are known at compile time (row_chunks.py): the chunks every tap fills
run in a loop with plain loads (stride-2 columns: one wide load, shuffled);
the edge chunks are emitted one by one with constant lane masks, a masked lane
holding the init value, as do window rows in the padding.  That is what the
padding would fold in anyway: max/min already hold it and a zero adds nothing
(add with a nonzero init and padding is left to the rules).  Max/min compare
and select, NaN tracked per lane (see `_Fold`).  A whole-plane reduction is one
strided loop per plane.  The fused epilogue then runs on the output buffer
while it is in cache: per row, or per plane through a reshape.  Planes are
shared out to the threads; a plane is computed the same way whatever the
thread count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ...buffers import BufferPlan, Slice
from ...ir import DType, Instruction, Op, Shape, Trait
from ...ir.index_maps import read_elementwise_only
from ..llvm.context import EmitContext, Gen, type_suffix
from ..llvm.elemental import (
    bind_instructions,
    delinearize,
    element_pointer,
    linearize,
    memory_generator,
)
from ..llvm.lltypes import constant, i64, literal_value, register_type, store_element
from ..llvm.loops import for_range
from ..llvm.scalar import FLOAT_BINARY_INTRINSIC  # max/min: NaN-propagating, as the rules
from .gemm_config import GemmConfig, gemm_config
from .parallel import parallel_loop_nest
from .row_chunks import RowChunks
from .vectors import (
    bits,
    i32_lanes,
    masked_gather,
    masked_load,
    pick_lanes,
    splat,
    store_first,
    vector_gep,
)
from .views import View, affine, fused_view, memory_view, merged_stride

POOLING_OPS = frozenset({Op.REDUCE_WINDOW, Op.REDUCE})
POOLING_DTYPES = frozenset({DType.F32, DType.F64})
REDUCERS = frozenset({Op.MAXIMUM, Op.MINIMUM, Op.ADD})

# taps unrolled per window row, and in all (each emitted once per edge chunk of a row):
# larger windows stay with the rules
MAX_WINDOW_WIDTH = 32
MAX_TAPS = 256


@dataclass(frozen=True)
class _Window:
    """A window over [planes..., height, width] (1-D windows: height 1), in elements."""

    height: int
    width: int
    out_height: int
    out_width: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    h_stride: int
    w_stride: int


@dataclass(frozen=True)
class _Pooling:
    """One pooling kernel: the pooled instruction and how its values are computed."""

    pool: Instruction  # the REDUCE_WINDOW or REDUCE
    value: Instruction  # what the fused root reads at its shape: `pool` or a reshape of it
    reducer: Op
    init: float
    view: View  # the input
    planes: tuple[int, ...]  # leading output dims: one (window or reduction) each
    window: _Window | None  # None: a whole-plane reduction
    count: int = 0  # whole-plane: elements reduced per plane, `stride` apart
    stride: int = 0

    @property
    def dtype(self) -> DType:
        return self.pool.array_shape.dtype

    @property
    def kind(self) -> str:
        return "global" if self.window is None else "window"

    @property
    def plane_outputs(self) -> int:
        w = self.window
        return 1 if w is None else w.out_height * w.out_width

    @property
    def work(self) -> int:
        w = self.window
        per_plane = self.count if w is None else self.plane_outputs * w.kh * w.kw
        return math.prod(self.planes) * per_plane


def pooling_kind(plan: BufferPlan, instr: Instruction) -> str | None:
    """How `instr` is emitted here: "window", "global" (whole planes), or None (rules)."""
    pooling = _analyze(plan, instr)
    return None if pooling is None else pooling.kind


def emit_pooling(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> bool:
    """Emit `instr` as a pooling kernel if it is one; False leaves it to the rules."""
    pooling = _analyze(ctx.plan, instr)
    if pooling is None:
        return False
    out_shape, out = instr.array_shape, ctx.plan.slice_of(instr)
    root = None
    if instr.op is Op.FUSION:
        body = instr.called[0]
        values = {id(pooling.value): memory_generator(ctx, out, out_shape)}
        root = bind_instructions(ctx, body, operands, values)[id(body.root)]
    _emit(ctx, pooling, out, out_shape, root)
    return True


# -- which kernels ----------------------------------------------------------------


def _analyze(plan: BufferPlan, instr: Instruction) -> _Pooling | None:
    found = _find_pool(instr)
    if found is None:
        return None
    pool, value = found
    dtype = pool.array_shape.dtype
    if dtype not in POOLING_DTYPES or instr.array_shape.dtype is not dtype:
        return None
    if len(pool.operands) != 2 or pool.operands[0].array_shape.dtype is not dtype:
        return None
    if pool.operands[0].array_shape.size == 0 or pool.array_shape.size == 0:
        return None
    reducer, init = _reducer(pool), _init(pool)
    if reducer is None or init is None:
        return None
    out = plan.slice_of(instr)
    # the pooled values wait in the output buffer for the epilogue: it must not hold
    # anything the epilogue reads (nor the input)
    if any(isinstance(o.shape, Shape) and plan.slice_of(o).overlaps(out) for o in instr.operands):
        return None
    if instr is pool:
        view = memory_view(plan, pool.operands[0])
    else:
        view = fused_view(plan, instr, pool.operands[0])
    view = affine(view)
    if view is None:
        return None
    if pool.op is Op.REDUCE:
        return _plan_reduce(pool, value, reducer, init, view)
    return _plan_window(pool, value, reducer, init, view)


def _find_pool(instr: Instruction) -> tuple[Instruction, Instruction] | None:
    """(pooling instruction, the value at the kernel's shape) of a pooling kernel."""
    if not isinstance(instr.shape, Shape):
        return None
    if instr.op in POOLING_OPS:
        return instr, instr
    if instr.op is not Op.FUSION:
        return None
    body = instr.called[0]
    pools = [i for i in body.instructions if i.op in POOLING_OPS]
    if len(pools) != 1 or not isinstance(pools[0].shape, Shape):
        return None
    pool, dims = pools[0], instr.array_shape.dims
    value = pool
    if pool.array_shape.dims != dims:  # keepdims: a reshape adding unit dims
        users = pool.users
        if len(users) != 1 or Trait.VIEW not in users[0].op.traits:
            return None
        value = users[0]
        if value.array_shape.dims != dims or value.array_shape.dtype is not pool.array_shape.dtype:
            return None
    if not read_elementwise_only(value, dims):
        return None
    return pool, value


def _reducer(pool: Instruction) -> Op | None:
    """The op of a reducer that is one max/min/add of its two parameters."""
    reducer = pool.called[0]
    root = reducer.root
    if root.op not in REDUCERS or len(reducer.parameters) != 2:
        return None
    if sorted(o.index for o in root.operands if o.op is Op.PARAMETER) != [0, 1]:
        return None
    return root.op


def _init(pool: Instruction) -> float | None:
    init = pool.operands[1]
    if init.op is not Op.CONSTANT or init.array_shape.size != 1:
        return None
    return float(literal_value(init.literal, init.array_shape.dtype))


def _plan_reduce(pool, value, reducer, init, view: View) -> _Pooling | None:
    """A REDUCE over the trailing dims whose elements a single stride walks."""
    rank = pool.operands[0].shape.rank
    reduced = sorted(pool.dimensions)
    if not reduced or reduced != list(range(rank - len(reduced), rank)):
        return None
    stride = merged_stride([view.dims[d] for d in reduced], [view.strides[d] for d in reduced])
    if stride is None:
        return None
    count = math.prod(view.dims[d] for d in reduced)
    planes = tuple(view.dims[: rank - len(reduced)])
    return _Pooling(pool, value, reducer, init, view, planes, None, count, stride)


def _plan_window(pool, value, reducer, init, view: View) -> _Pooling | None:
    """A REDUCE_WINDOW over the last two (or one) dims, trivial on the others."""
    w, dims = pool.window, view.dims
    rank = len(dims)
    if rank == 0 or any(d != 1 for d in w.lhs_dilation):
        return None
    spatial = min(rank, 2)
    lead = rank - spatial
    trivial = (w.size[:lead], w.stride[:lead], w.pad_low[:lead], w.pad_high[:lead])
    if any(v != 1 for v in (*trivial[0], *trivial[1])) or any((*trivial[2], *trivial[3])):
        return None
    padded = any(p > 0 for p in (*w.pad_low[lead:], *w.pad_high[lead:]))
    if reducer is Op.ADD and init != 0 and padded:
        return None
    out = pool.array_shape.dims

    def per_dim(values, default):
        return (default, *values[lead:]) if spatial == 1 else tuple(values[lead:])

    height, width = per_dim(dims, 1)
    out_height, out_width = per_dim(out, 1)
    kh, kw = per_dim(w.size, 1)
    sh, sw = per_dim(w.stride, 1)
    ph, pw = per_dim(w.pad_low, 0)
    dh, dw = per_dim(w.rhs_dilation, 1)
    h_stride, w_stride = per_dim(view.strides, 0)
    if kw > MAX_WINDOW_WIDTH or kh * kw > MAX_TAPS:
        return None
    window = _Window(
        height, width, out_height, out_width, kh, kw, sh, sw, ph, pw, dh, dw, h_stride, w_stride
    )
    return _Pooling(pool, value, reducer, init, view, tuple(dims[:lead]), window)


# -- emission ---------------------------------------------------------------------


def _emit(ctx: EmitContext, p: _Pooling, out: Slice, out_shape: Shape, root: Gen | None):
    """Per plane: the pooled values into `out`, then the epilogue `root` over them."""
    ty = register_type(p.dtype)
    cfg = gemm_config(ctx.target, p.dtype)
    per_row = root is not None and p.value is p.pool  # the root indexes the plane's rows
    with parallel_loop_nest(ctx, list(p.planes), "plane", work=p.work) as plane:
        b = ctx.builder
        in_offset = i64(0)
        for position, stride in zip(plane, p.view.strides):
            in_offset = b.add(in_offset, b.mul(position, i64(stride)))
        plane_in = p.view.pointer(ctx, in_offset)
        first = b.mul(linearize(b, plane, p.planes), i64(p.plane_outputs))
        plane_out = b.gep(ctx.slice_pointer(out), [first], source_etype=ty)
        if p.window is None:
            _reduce_plane(ctx, p, ty, plane_in, plane_out)
            if per_row:
                _store_root(ctx, root, out_shape, out, list(plane))
        else:
            with for_range(b, p.window.out_height, "oh") as oh:
                row = b.gep(plane_out, [b.mul(oh, i64(p.window.out_width))], source_etype=ty)
                _window_row(ctx, p, cfg, row, plane_in, oh)
                if per_row:  # while the row is in cache
                    with for_range(b, p.window.out_width, "ow") as ow:
                        index = [*plane, oh, ow] if out_shape.rank > 1 else [ow]
                        _store_root(ctx, root, out_shape, out, index)
        if root is not None and not per_row:  # through a reshape: by linear position
            with for_range(ctx.builder, p.plane_outputs, "k") as k:
                index = delinearize(ctx.builder, ctx.builder.add(first, k), out_shape.dims)
                _store_root(ctx, root, out_shape, out, index)


def _store_root(ctx: EmitContext, root: Gen, shape: Shape, out: Slice, index) -> None:
    pointer = element_pointer(ctx, ctx.slice_pointer(out), shape, index)
    store_element(ctx.builder, shape.dtype, root(index), pointer)


def _combine(ctx: EmitContext, op: Op, x: ir.Value, y: ir.Value, reassociate: bool = False):
    """op(x, y) on scalars or vectors; max/min propagate NaN as the rules' do."""
    if op is Op.ADD:
        return ctx.builder.fadd(x, y, flags=("reassoc", "nsz") if reassociate else ())
    ty = x.type
    vector = isinstance(ty, ir.VectorType)
    suffix = f"v{ty.count}{type_suffix(ty.element)}" if vector else type_suffix(ty)
    args = [x, y]
    return ctx.builder.call(ctx.declare(f"{FLOAT_BINARY_INTRINSIC[op]}.{suffix}", ty, args), args)


class _Fold:
    """A vector of running max/min/sum values.  Max and min compare and select (one
    instruction on x86, where llvm.maximum takes six) and track NaN lanes apart: a NaN
    anywhere in a window makes its value NaN, as the rules' llvm.maximum/minimum (the
    sign of a zero result may differ from theirs)."""

    def __init__(self, ctx: EmitContext, op: Op, init: ir.Value):
        self.ctx, self.op, self.acc = ctx, op, init
        self.nan = None

    def add(self, x: ir.Value) -> None:
        b = self.ctx.builder
        if self.op is Op.ADD:
            self.acc = b.fadd(self.acc, x)
            return
        better = b.fcmp_ordered(">" if self.op is Op.MAXIMUM else "<", x, self.acc)
        self.acc = b.select(better, x, self.acc)
        nan = b.fcmp_unordered("uno", x, x)
        self.nan = nan if self.nan is None else b.or_(self.nan, nan)

    def result(self) -> ir.Value:
        if self.nan is None:
            return self.acc
        nan = ir.Constant(self.acc.type, [float("nan")] * self.acc.type.count)
        return self.ctx.builder.select(self.nan, nan, self.acc)


def _reduce_plane(ctx: EmitContext, p: _Pooling, ty, plane_in, plane_out) -> None:
    """The plane's `count` elements folded into one value (sums reassociated, so that
    the loop vectorizes: a reduction's order is unspecified)."""
    b = ctx.builder
    slot = ctx.alloca(ty)
    b.store(constant(p.dtype, p.init), slot)
    with for_range(b, p.count, "r") as r:
        x = b.load(b.gep(plane_in, [b.mul(r, i64(p.stride))], source_etype=ty), typ=ty)
        b.store(_combine(ctx, p.reducer, b.load(slot, typ=ty), x, True), slot)
    b.store(b.load(slot, typ=ty), plane_out)


def _window_row(ctx: EmitContext, p: _Pooling, cfg: GemmConfig, row, plane_in, oh) -> None:
    """One output row, a vector of columns at a time: the init value folded with every
    tap, a tap's lanes outside its valid columns (or in a padded row) the init value.

    The chunks whose lanes every tap reaches run in a loop; the others (the edges, the
    partial last chunk) are emitted one by one, their lane masks known here.
    """
    w, b, lanes = p.window, ctx.builder, cfg.lanes
    init = splat(b, constant(p.dtype, p.init), ir.VectorType(cfg.element, lanes))
    lines = []  # per window row: the input row (row 0 where padded), whether it is real
    for kh in range(w.kh):
        ih = b.sub(b.add(b.mul(oh, i64(w.sh)), i64(kh * w.dh)), i64(w.ph))
        top, bottom = kh * w.dh - w.ph, (w.out_height - 1) * w.sh + kh * w.dh - w.ph
        real = None
        if top < 0 or bottom >= w.height:  # some output rows see padding here
            real = b.icmp_unsigned("<", ih, i64(w.height))
            ih = b.select(real, ih, i64(0))
        line = b.gep(plane_in, [b.mul(ih, i64(w.h_stride))], source_etype=cfg.element)
        lines.append((line, real))
    taps = [kw * w.dw - w.pw for kw in range(w.kw)]  # input column of output column 0
    row_chunks = RowChunks(tuple(taps), w.sw, w.width, w.out_width, lanes)
    whole = row_chunks.whole

    def emit(ow0: ir.Value, masks: list, count: int) -> None:
        fold = _Fold(ctx, p.reducer, init)
        for line, real in lines:
            for shift, mask, inside in zip(taps, masks, whole):
                if mask is not None and not any(mask):
                    continue
                x = _load_tap(ctx, p, cfg, line, ow0, shift, mask, inside, init)
                if real is not None:
                    x = b.select(real, x, init)
                fold.add(x)
        acc = fold.result()
        store_first(ctx, cfg, acc, b.gep(row, [ow0], source_etype=cfg.element), count)

    row_chunks.emit(b, emit)


def _load_tap(ctx, p: _Pooling, cfg: GemmConfig, line, ow0, shift: int, mask, inside, init):
    """Lanes l: line[((ow0 + l) * sw + shift) * w_stride], or `init` where not mask[l]
    (mask None: every lane valid).  Strided columns come from one contiguous load
    shuffled (masked to the span used unless `inside`), other layouts from a gather."""
    w, b, lanes, ty = p.window, ctx.builder, cfg.lanes, cfg.element
    start = b.add(b.mul(ow0, i64(w.sw)), i64(shift))
    wanted = [True] * lanes if mask is None else mask
    if w.w_stride == 1:
        pointer = b.gep(line, [start], source_etype=ty)
        width = lanes * w.sw
        # the span from the first to the last lane wanted (a gap-free mask, which LLVM
        # keeps a masked load; it would gather the wanted lanes alone)
        first = wanted.index(True) * w.sw
        last = (lanes - 1 - wanted[::-1].index(True)) * w.sw
        used = [first <= j <= last for j in range(width)]
        if all(used) or (mask is None and inside):
            x = b.load(pointer, typ=ir.VectorType(ty, width), align=cfg.itemsize)
        else:
            x = masked_load(ctx, b, cfg, pointer, bits(used))
        if w.sw > 1:
            x = pick_lanes(b, x, (l * w.sw for l in range(lanes)))
    else:
        pointer = b.gep(line, [b.mul(start, i64(w.w_stride))], source_etype=ty)
        offsets = i32_lanes(l * w.sw * w.w_stride for l in range(lanes))
        x = masked_gather(ctx, b, cfg, vector_gep(b, pointer, offsets, ty), bits(wanted))
    return x if all(wanted) else b.select(bits(wanted), x, init)
