"""Attention block by block: a kChain fusion (aotc/ir/attention_chain.py) as one kernel.

For each batch element (batch and heads) and block of `rows` query rows, in a
per-thread part of the workspace:

1. S's block = Q's rows times K^T: blocked_gemm.py's GEMM into the part's score block
   (rows x keys), the first kernel's epilogue (a scale) applied per finished sliver;
2. the row fusion (softmax, with what it holds: a mask read at S's index) on each row
   of the block, in place (rows.py's `row_emitter`);
3. O's rows = the block times V: the GEMM again, into the output (or, when the last
   kernel has an epilogue, into the part's output block, then the epilogue stores).

The block of scores stays in L2 between the three steps, where the three kernels
wrote the whole of S to memory and read it back twice.  Each row of S is the same
whole row as the three kernels' (its softmax from the whole row, no rescaling); only
the GEMMs' blocking differs, so results match theirs up to the reassociation that
GEMM blocking does.  Blocks are independent: `share_out` runs them on the threads, a
fixed partition, so results are the same for any thread count.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir

from ...buffers import BufferPlan
from ...ir import FusionKind, Instruction, Op
from ...ir.attention_chain import AttentionChain, chain_dot, chain_parts, score_parameter
from ...ir.fusion_kinds import fusion_kind
from ..llvm.context import EmitContext, Gen
from ..llvm.elemental import bind_instructions, element_pointer, linearize, split_index
from ..llvm.extents import contraction_depth, inside, limits, span
from ..llvm.lltypes import I8, i64, load_element, store_element
from ..llvm.loops import for_range, if_then
from .blocked_gemm import emit_gemm_on_b, emit_region, pack_whole_b, whole_b_bytes
from .blocking import Blocking, aligned, blocking
from .contraction import Source
from .dot import DotProblem, dot_problem
from .gemm_split import MAX_PARTS, share_out
from .panels import Panels, StridedPanels
from .rows import row_emitter
from .vectors import smaller
from .views import fused_view

# a block of scores takes at most this much: with K's or V's packed panels (keys x 64
# floats: 384 KB at 1,500 keys) and the block of Q it stays in a core's 1 MiB of L2
SCORE_BLOCK_BYTES = 256 << 10


@dataclass(frozen=True)
class AttentionPlan:
    """How a kChain fusion's blocks are computed: units of `per_unit` blocks of `rows`
    query rows of one batch element, each unit packing K^T and V once."""

    chain: AttentionChain
    scores: DotProblem  # S = Q K^T
    values: DotProblem  # O = P V
    rows: int  # query rows per block
    per_unit: int  # blocks per unit
    first: Blocking  # of a block's S
    second: Blocking  # of a block's O

    kind = "attention"

    @property
    def blocks(self) -> int:
        """Blocks of query rows per batch element."""
        return -(-self.scores.m // self.rows)

    @property
    def grid(self) -> tuple[int, ...]:
        """The units: batch elements, then runs of blocks."""
        return (*self.scores.batch, -(-self.blocks // self.per_unit))

    @property
    def parts(self) -> int:
        return min(math.prod(self.grid), MAX_PARTS)

    @property
    def layout(self) -> tuple[int, ...]:
        """Bytes of a part's regions: K^T packed, V packed, the score block, the output
        block (where the last kernel has an epilogue), Q's or P's packed rows."""
        first, second = self.first, self.second
        itemsize = self.scores.config.itemsize
        out = aligned(self.rows * self.values.n * itemsize)
        return (
            whole_b_bytes(first),
            whole_b_bytes(second),
            aligned(self.rows * self.scores.n * itemsize),
            out if _has_epilogue(self.chain.values) else 0,
            max(first.a_bytes, second.a_bytes),
        )

    @property
    def part_bytes(self) -> int:
        return sum(self.layout)

    @property
    def workspace_bytes(self) -> int:
        return self.parts * self.part_bytes


def plan_attention(target, plan: BufferPlan, instr: Instruction) -> AttentionPlan | None:
    """The plan of a kChain fusion, or None (not one)."""
    if instr.op is not Op.FUSION or fusion_kind(instr.called[0]) is not FusionKind.CHAIN:
        return None
    chain = chain_parts(instr.called[0])
    problems = [
        dot_problem(target, chain_dot(part), _views(plan, instr, part))
        for part in (chain.scores, chain.values)
    ]
    scores, values = problems
    if scores is None or values is None or scores.config.paired:
        return None
    # rows a whole number of register tiles, as many as the score budget holds
    per_row = scores.n * scores.config.itemsize
    rows = min(max(SCORE_BLOCK_BYTES // per_row, 1), scores.m)
    mr = blocking(scores.config, rows, scores.n, scores.k).mr
    rows = min(max(rows // mr * mr, mr), scores.m)
    # enough units to share out to MAX_PARTS threads, each packing K^T and V once
    blocks = -(-scores.m // rows)
    runs = min(-(-MAX_PARTS // math.prod(scores.batch)), blocks)
    first = blocking(scores.config, rows, scores.n, scores.k)
    second = blocking(values.config, rows, values.n, values.k)
    return AttentionPlan(chain, scores, values, rows, -(-blocks // runs), first, second)


def attention_kind(target, plan: BufferPlan, instr: Instruction) -> str | None:
    """ "attention" for a kChain fusion (aotc inspect's form), else None."""
    return None if plan_attention(target, plan, instr) is None else AttentionPlan.kind


def attention_workspace(target, plan: BufferPlan, instr: Instruction) -> int:
    """The workspace `instr`'s attention kernel needs (0: not a kChain fusion)."""
    attention = plan_attention(target, plan, instr)
    return 0 if attention is None else attention.workspace_bytes


def emit_attention(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> bool:
    """Emit a kChain fusion's kernel; False leaves other instructions to the next."""
    attention = plan_attention(ctx.target, ctx.plan, instr)
    if attention is None:
        return False
    workspace = ctx.workspace
    assert workspace is not None and workspace.size >= attention.workspace_bytes
    batches = len(attention.scores.batch)

    def unit(index, slot, _):
        b = ctx.builder
        needed = _Needed.of(ctx, instr, attention)
        with if_then(b, inside(b, index[:batches], needed.batch)):
            start = b.mul(slot, i64(attention.part_bytes))
            part = b.gep(ctx.slice_pointer(workspace), [start], source_etype=I8)
            block = _Block(ctx, instr, operands, attention, index[:batches], part, needed)
            block.pack_operands()
            first = b.mul(index[batches], i64(attention.per_unit))
            blocks = needed.blocks(b, attention)
            count = smaller(b, i64(attention.per_unit), b.sub(blocks, first))
            with for_range(b, _at_least_zero(b, count), "qblock") as n:
                block.start(b.add(first, n))
                block.scores()
                block.softmax()
                block.values()

    share_out(ctx, attention.grid, attention.parts, unit)
    return True


@dataclass
class _Needed:
    """What of the chain its readers need (llvm/extents.py; None: all): batch positions
    per batch dim, the query rows (covering the query dims' extents), the keys (the
    score kernel's last dim: the row fusion masks the rest of each row)."""

    batch: list[ir.Value | None]
    rows: ir.Value | None
    keys: ir.Value | None
    depth: ir.Value | None  # of P V: the keys past which P and V hold masked zeros

    @staticmethod
    def of(ctx: EmitContext, instr: Instruction, attention: AttentionPlan) -> _Needed:
        batches = len(attention.scores.batch)
        counts = limits(ctx, instr)
        keys = limits(ctx, attention.chain.scores)
        key_count = None if keys is None else keys[-1]
        depth = contraction_depth(ctx, chain_dot(attention.chain.values))
        if counts is None:
            return _Needed([None] * batches, None, key_count, depth)
        q_dims = attention.chain.rows.array_shape.dims[batches:-1]
        q_counts = counts[batches : batches + len(q_dims)]
        rows = span(ctx.builder, q_counts, q_dims)
        rows = None if isinstance(rows, int) else rows
        return _Needed(counts[:batches], rows, key_count, depth)

    def blocks(self, b: ir.IRBuilder, attention: AttentionPlan) -> ir.Value:
        """Blocks of query rows per batch element that hold needed rows."""
        if self.rows is None:
            return i64(attention.blocks)
        return b.udiv(b.add(self.rows, i64(attention.rows - 1)), i64(attention.rows))

    def query_rows(self, attention: AttentionPlan) -> ir.Value:
        return i64(attention.scores.m) if self.rows is None else self.rows


def _at_least_zero(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", value, i64(0)), i64(0), value)


class _Block:
    """The blocks of query rows of one unit, emitted step by step (`start` moves on)."""

    def __init__(self, ctx, instr, operands, attention: AttentionPlan, batch, part, needed):
        self.ctx, self.instr, self.attention, self.batch = ctx, instr, attention, batch
        self.needed: _Needed = needed
        self.chain = attention.chain
        offsets = itertools.accumulate(attention.layout, initial=0)
        self.k_packed, self.v_packed, self.s_block, self.o_block, self.packing = (
            ctx.byte_pointer(part, offset) for offset in itertools.islice(offsets, 5)
        )
        self.q0 = self.count = i64(0)
        body = instr.called[0]
        self.outer = {id(p): operands[p.index] for p in body.parameters}
        self.q_dims = list(self.chain.rows.array_shape.dims[len(batch) : -1])

    def start(self, number: ir.Value) -> None:
        """Move on to block `number` of the batch element."""
        b, rows = self.ctx.builder, self.attention.rows
        self.q0 = b.mul(number, i64(rows))
        total = self.needed.query_rows(self.attention)
        self.count = smaller(b, i64(rows), b.sub(total, self.q0))

    def pack_operands(self) -> None:
        """K^T and V packed whole, for all the unit's blocks."""
        ctx = self.ctx
        for part, problem, blocks, dst in (
            (self.chain.scores, self.attention.scores, self.attention.first, self.k_packed),
            (self.chain.values, self.attention.values, self.attention.second, self.v_packed),
        ):
            dot = chain_dot(part)
            sources = self._sources(part, dot, self._bind(part, {}))
            operand = problem.rhs.factory()(ctx, sources, self.batch)
            if part is self.chain.scores:  # K^T: the keys are its columns
                pack_whole_b(ctx, blocks, operand, dst, cols=self.needed.keys)
            else:  # V: its rows
                pack_whole_b(ctx, blocks, operand, dst, depth=self.needed.depth)

    # -- S's block --------------------------------------------------------------------

    def score_pointer(self, index: Sequence[ir.Value]) -> ir.Value:
        """Where S's element at `index` (S's dims) is in the block."""
        b = self.ctx.builder
        q = linearize(b, index[len(self.batch) : -1], self.q_dims)
        local = b.add(b.mul(b.sub(q, self.q0), i64(self.attention.scores.n)), index[-1])
        return b.gep(self.s_block, [local], source_etype=self.attention.scores.config.element)

    def score(self, index: Sequence[ir.Value]) -> ir.Value:
        dtype = self.chain.rows.array_shape.dtype
        return load_element(self.ctx.builder, dtype, self.score_pointer(index))

    def scores(self) -> None:
        """S's block = Q's rows times K^T, the first kernel's epilogue applied in place."""
        ctx, part = self.ctx, self.chain.scores
        dot = chain_dot(part)
        gens = self._bind(part, {id(dot): self.score})
        problem = self.attention.scores
        sources = self._sources(part, dot, gens)
        a = _Shifted(problem.lhs.factory()(ctx, sources, self.batch), self.q0)
        root = part.called[0].root
        epilogue = None
        if root is not dot:

            def epilogue(m0, rows, n0, cols):
                def element(m, n):
                    index = self._index(self.q_dims, m, [problem.n], n)
                    value = gens[id(root)](index)
                    store_element(
                        ctx.builder, root.array_shape.dtype, value, self.score_pointer(index)
                    )

                emit_region(ctx, m0, rows, n0, cols, element)

        emit_gemm_on_b(
            ctx, self.attention.first, a, self.k_packed, self.s_block, problem.n,
            self.packing, self.count, epilogue, cols=self.needed.keys,
        )  # fmt: skip

    # -- the rows ---------------------------------------------------------------------

    def softmax(self) -> None:
        """The row fusion on each row of the block, in place."""
        part = self.chain.rows
        scores = score_parameter(self.chain)
        params: list[Gen] = [
            self.score if p is scores else self.outer[id(o)]
            for p, o in zip(part.called[0].parameters, part.operands)
        ]
        emit_row = row_emitter(self.ctx, part, params, self.score_pointer)
        b = self.ctx.builder
        with for_range(b, self.count, "qrow") as r:
            q = split_index(b, b.add(self.q0, r), self.q_dims)
            # P V reads P's columns to its depth only (the keys past it are masked)
            emit_row([*self.batch, *q], self.needed.depth)

    # -- O's rows ---------------------------------------------------------------------

    def values(self) -> None:
        """O's rows = the block times V, into the output (or the output block, then the
        last kernel's epilogue)."""
        ctx, b, part = self.ctx, self.ctx.builder, self.chain.values
        dot = chain_dot(part)
        problem = self.attention.values
        ty = problem.config.element
        out_where, shape = ctx.plan.slice_of(self.instr), self.instr.array_shape
        v_dims = list(shape.dims[len(self.batch) + len(self.q_dims) :])

        def value(index: Sequence[ir.Value]) -> ir.Value:
            n = linearize(b, index[len(self.batch) + len(self.q_dims) :], v_dims)
            q = linearize(
                b, index[len(self.batch) : len(self.batch) + len(self.q_dims)], self.q_dims
            )
            local = b.add(b.mul(b.sub(q, self.q0), i64(problem.n)), n)
            pointer = b.gep(self.o_block, [local], source_etype=ty)
            return load_element(b, dot.array_shape.dtype, pointer)

        gens = self._bind(part, {id(dot): value})
        a = StridedPanels(self.s_block, self.attention.scores.n, 1)
        root = part.called[0].root
        epilogue = None
        if root is dot:
            first = b.add(b.mul(linearize(b, self.batch, problem.batch), i64(problem.m)), self.q0)
            c = b.gep(ctx.slice_pointer(out_where), [b.mul(first, i64(problem.n))], source_etype=ty)
        else:
            c = self.o_block

            def epilogue(m0, rows, n0, cols):
                def element(m, n):
                    index = self._index(self.q_dims, m, v_dims, n)
                    pointer = element_pointer(ctx, ctx.slice_pointer(out_where), shape, index)
                    store_element(ctx.builder, shape.dtype, gens[id(root)](index), pointer)

                emit_region(ctx, m0, rows, n0, cols, element)

        emit_gemm_on_b(
            ctx, self.attention.second, a, self.v_packed, c, problem.n, self.packing,
            self.count, epilogue, depth=self.needed.depth,
        )  # fmt: skip

    # -- helpers ----------------------------------------------------------------------

    def _index(self, q_dims, m: ir.Value, n_dims, n: ir.Value) -> list[ir.Value]:
        """The output index of local row `m`, column `n` of a block."""
        b = self.ctx.builder
        q = split_index(b, b.add(self.q0, m), q_dims)
        return [*self.batch, *q, *split_index(b, n, n_dims)]

    def _bind(self, part: Instruction, replaced: dict[int, Gen]) -> dict[int, Gen]:
        """Generators of a kernel's body: parameters read from the chain's operands (a
        sibling's value is read through the block, never by these)."""
        params = [self.outer.get(id(o), _unread(o)) for o in part.operands]
        return bind_instructions(self.ctx, part.called[0], params, replaced)

    def _sources(self, part: Instruction, dot: Instruction, gens) -> list[Source]:
        views = _views(self.ctx.plan, self.instr, part)
        return [Source(gens[id(o)], view) for o, view in zip(dot.operands, views)]


def _views(plan: BufferPlan, instr: Instruction, part: Instruction):
    """The memory views of the dot operands of a kernel of the chain `instr`."""
    dot = chain_dot(part)
    entry = [
        instr.operands[o.index] if o.op is Op.PARAMETER and o.index is not None else None
        for o in part.operands
    ]
    return [fused_view(plan, part, o, entry) for o in dot.operands]


def _has_epilogue(part: Instruction) -> bool:
    return part.called[0].root is not chain_dot(part)


def _unread(instr: Instruction) -> Gen:
    def gen(index):
        raise AssertionError(f"{instr.name} is read through the block only")

    return gen


@dataclass
class _Shifted:
    """An operand's panels from panel `first` on (a block's query rows)."""

    panels: Panels
    first: ir.Value

    def pack(self, ctx, blocks, dst, p0, count, k0, kc, width):
        p0 = ctx.builder.add(p0, self.first)
        return self.panels.pack(ctx, blocks, dst, p0, count, k0, kc, width)
