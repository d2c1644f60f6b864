"""The LLVM module of one model: globals, one kernel per scheduled instruction, entries.

Symbols (all prefixed with the model name, so models link side by side):

- `NAME_weights`: the constant blob, a zero placeholder in section
  `.rodata.NAME_weights` patched with the real bytes after emission (see
  elf.py); a non-constant global so LLVM cannot fold loads from zeros.
- `NAME_static_arena`: the arena used when the caller passes scratch = NULL
  (so calls with NULL scratch are not reentrant).
- Both blobs, when big, are placed after all other data (sections.py).
- `int NAME_run(in0, ..., out0, ..., scratch)` and
  `int NAME_run_generic(inputs[], outputs[], scratch)`: return 0, or 1 when
  scratch is neither NULL nor 64-byte aligned.

With external weights (`--weights external`, artifacts/weights.py) there is no
`NAME_weights`: the kernels read the internal pointer `NAME_weights_base`, once in each
kernel's entry block (known 64-byte aligned, as the blob is), which
`int NAME_set_weights(weights, size)` and `int NAME_load_weights(path)` set through the
runtime's checks (aotc_runtime.h); the entries return 4 while it is NULL.

Each kernel is an internal function `(inputs[], outputs[], arena, frame)` computing one
scheduled instruction; the plan says where every operand and result lives, the frame
(a constant table per call) at which offsets its arena and weights slices are, so that
the kernels of repeated blocks are one function (shared_kernels.py).  A while
or conditional's kernel calls its computations' kernels (control.py); any other's
body comes from the first row of EMITTERS that takes the instruction: attention
chains block by block (attention.py), dots and
convolutions with their epilogues (contraction.py), pooling (pooling.py), tiled
transposes (transpose.py), sorts (sort.py: scratch for merging long rows), ops with
kernel rules of their own (scatter, rng), row fusions (rows.py), and else loop nests
storing the element generator's values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from ... import progress
from ...buffers import BufferKind, BufferPlan, Slice
from ...ir import Instruction, Module, Op, Shape
from ...ir.module import reached
from ...ir.value_ranges import integer_ranges
from ...names import check_c_identifier
from ..llvm.context import EmitContext, Gen
from ..llvm.elemental import (
    bind_instructions,
    compose_index,
    constant_rule,
    element_pointer,
    invariant_generator,
    make_generator,
    memory_generator,
    split_index,
)
from ..llvm.extents import input_dims_slice, limits, span
from ..llvm.kernels import kernel_outputs
from ..llvm.lltypes import I8, I32, I64, PTR, VOID, i64, store_element
from ..llvm.loops import if_then
from ..llvm.rules import KERNELS, RULES
from .amx import PERMIT_FUNCTION
from .attention import attention_workspace, emit_attention
from .concatenate import emit_wide_concatenate
from .contraction import contraction_workspace, emit_contraction
from .control import CONTROL_KERNELS
from .loop_dims import RESHAPES, loop_dims
from .parallel import parallel_loop_nest
from .pooling import emit_pooling
from .prepack import DROPPED
from .profile_counters import KernelCall, counted_calls, plain_call
from .rows import emit_row_fusion
from .sections import arena_linkage, blob_global, check_blobs, weights_sections
from .shared_kernels import FRAMED, Frame, Kernel, SharedKernels
from .sort import emit_sort, sort_workspace
from .target import CpuTarget, parse_target
from .transpose import emit_transpose
from .workspace import kernel_workspaces

if TYPE_CHECKING:
    from ...artifacts.weights import WeightsFile

ARENA_ALIGNMENT = 64
ENTRY_ARGS = ("inputs", "outputs", "arena")
KERNEL_ARGS = (*ENTRY_ARGS, "frame")  # the offsets of its arena and weights slices
# the kernels that take scratch from the workspace, each sizing its own
WORKSPACE_SIZERS = (contraction_workspace, sort_workspace, attention_workspace)


def build_module(
    module: Module,
    plan: BufferPlan,
    name: str,
    target: CpuTarget | None = None,
    threads: int = 1,
    profile: bool = False,
    weights_file: WeightsFile | None = None,
) -> ir.Module:
    """The unoptimized LLVM module for `module` laid out by `plan`; with `profile`, the
    entry function times its kernels into counters (profile_counters.py); with
    `weights_file`, the weights are outside the object, in that file."""
    check_c_identifier(name, "model name")
    llmod = ir.Module(name=name)
    target = target or parse_target()
    if weights_file is None:
        weights: Weights = EmbeddedWeights.define(llmod, target.arch, name, len(plan.weights))
    else:
        weights = ExternalWeights.define(llmod, name, weights_file)
    ctx = EmitContext(llmod, plan, name, RULES, target=target)
    ctx.value_ranges = integer_ranges(module)
    ctx.input_dims = input_dims_slice(module, plan)
    needs = kernel_workspaces(ctx.target, plan, WORKSPACE_SIZERS)
    plan.workspace_bytes = plan.beyond_temporaries(needs)
    after_arena = Slice(BufferKind.ARENA, 0, plan.workspace_offset, plan.workspace_bytes)
    ctx.workspace = after_arena
    ctx.workspace_of = lambda frame, instr: frame.workspace_of(
        instr, needs.get(id(instr), 0), after_arena
    )
    check_blobs(target.arch, plan.scratch_bytes, weights.object_bytes)
    arena_bytes = max(plan.scratch_bytes, 1)
    arena = _global_bytes(llmod, target.arch, f"{name}_static_arena", arena_bytes)
    arena.linkage = arena_linkage(target.arch, arena_bytes)

    kernels = emit_computation(ctx, Emission(weights, SharedKernels(llmod)), plan)
    impl = _function(llmod, f"{name}_impl", VOID, ENTRY_ARGS, internal=True)
    b = ir.IRBuilder(impl.append_basic_block("entry"))
    call: KernelCall = plain_call
    if profile:
        call = counted_calls(llmod, name, [k.name for k in kernels])
    for k, kernel in enumerate(kernels):
        call(b, k, kernel.function, [*impl.args, kernel.frame])
    _bind_buffers(ctx, b, impl, weights)
    for source, destination in plan.output_copies:
        ctx.memcpy(ctx.slice_pointer(destination), ctx.slice_pointer(source), i64(source.size))
    b.ret_void()

    inputs = len(module.entry.parameters)
    outputs = _output_count(module)
    run_all = _emit_configured_impl(llmod, name, impl, threads)
    _emit_run(llmod, name, run_all, arena, weights, inputs, outputs)
    _emit_run_generic(llmod, name, run_all, arena, weights)
    _emit_set_num_threads(llmod, name)
    weights.emit_setters(llmod, name)
    return llmod


# -- where the kernels find the weights ------------------------------------------


class EmbeddedWeights:
    """The weights inside NAME.o: the kernels address the blob `NAME_weights` itself."""

    def __init__(self, blob: ir.GlobalVariable):
        self.blob = blob
        self.object_bytes = blob.value_type.count

    @classmethod
    def define(cls, llmod, arch: str, name: str, size: int) -> EmbeddedWeights:
        size = max(size, 1)
        blob = _global_bytes(llmod, arch, f"{name}_weights", size)
        blob.section = weights_sections(arch, name, size)[0]
        return cls(blob)

    def base(self, b: ir.IRBuilder) -> ir.Value:
        return self.blob

    def refuse_unset(self, b: ir.IRBuilder) -> None:
        """Nothing to refuse: the weights are always there."""

    def emit_setters(self, llmod, name: str) -> None:
        """None: nothing to set."""


class ExternalWeights:
    """Weights the application hands over: the kernels read the pointer that
    NAME_set_weights / NAME_load_weights set (NULL until then)."""

    object_bytes = 0  # nothing of them in the object (no big weights section)

    def __init__(self, pointer: ir.GlobalVariable, weights_file: WeightsFile):
        self.pointer = pointer
        self.file = weights_file

    @classmethod
    def define(cls, llmod, name: str, weights_file: WeightsFile) -> ExternalWeights:
        pointer = ir.GlobalVariable(llmod, PTR, f"{name}_weights_base")
        pointer.linkage = "internal"
        pointer.initializer = ir.Constant(PTR, None)
        return cls(pointer, weights_file)

    def base(self, b: ir.IRBuilder) -> ir.Value:
        """The pointer, loaded where `b` is (a kernel's entry block), with what the blob
        global told LLVM: not NULL, aligned like the arena."""
        llmod = b.module
        load = b.load(self.pointer, typ=PTR)
        load.set_metadata("nonnull", llmod.add_metadata([]))
        load.set_metadata("align", llmod.add_metadata([i64(ARENA_ALIGNMENT)]))
        return load

    def refuse_unset(self, b: ir.IRBuilder) -> None:
        """Return 4 from the entry while no weights are set."""
        unset = b.icmp_unsigned("==", b.load(self.pointer, typ=PTR), ir.Constant(PTR, None))
        with if_then(b, unset):
            b.ret(ir.Constant(I32, 4))

    def emit_setters(self, llmod, name: str) -> None:
        """`int NAME_set_weights(const void *weights, size_t size)` and
        `int NAME_load_weights(const char *path)`: the runtime's checks against the size
        and checksum of the file, on this model's pointer."""
        expected = [i64(self.file.size), i64(_signed64(self.file.checksum))]
        for suffix, params in (("set_weights", [PTR, I64]), ("load_weights", [PTR])):
            setter = ir.Function(llmod, ir.FunctionType(I32, params), f"{name}_{suffix}")
            setter.attributes.add("nounwind")
            runtime_type = ir.FunctionType(I32, [PTR, *params, I64, I64])
            runtime = ir.Function(llmod, runtime_type, f"aotc_{suffix}")
            b = ir.IRBuilder(setter.append_basic_block("entry"))
            b.ret(b.call(runtime, [self.pointer, *setter.args, *expected]))


Weights = EmbeddedWeights | ExternalWeights


def _signed64(value: int) -> int:
    """An unsigned 64-bit value as the signed one of its bits (an LLVM i64 literal)."""
    return value - 2**64 if value >= 2**63 else value


def _output_count(module: Module) -> int:
    root = module.entry.root
    return len(root.operands) if root.op is Op.TUPLE else 1


# -- kernels ------------------------------------------------------------------


@dataclass(frozen=True)
class Emission:
    """What every kernel of the module is emitted with."""

    weights: Weights
    shared: SharedKernels  # the kernels so far, by their code


def emit_computation(
    ctx: EmitContext, emission: Emission, plan: BufferPlan, scope: str = ""
) -> list[Kernel]:
    """The kernel calls of a computation's schedule laid out by `plan`, in run order.

    Kernel names are `NAME.<scope><instruction>`: a computation that a while or
    conditional runs is emitted once per instruction running it, each with its plan.
    A kernel of the same code as an earlier one is that one (shared_kernels.py).
    """
    outer, ctx.plan = ctx.plan, plan
    instructions = kernel_instructions(plan)
    kernels = []
    for number, instr in enumerate(instructions, start=1):
        if not scope:  # the entry's (a called computation's run inside one of them)
            progress.step("kernels", number, len(instructions))
        kernels.append(_emit_kernel(ctx, emission, instr, scope))
    ctx.plan = outer
    return kernels


def kernel_instructions(plan: BufferPlan) -> list[Instruction]:
    """The instructions of `plan`'s schedule that get a kernel, in run order."""
    return [instr for instr in plan.schedule if plan.needs_code(instr)]


def _emit_control(ctx: EmitContext, emission: Emission, instr: Instruction, scope: str) -> Kernel:
    """A while or conditional: its computations' kernels, and one kernel calling them."""
    nested = ctx.plan.nested[instr.name]
    programs = [
        emit_computation(ctx, emission, plan, f"{scope}{instr.name}.{k}.")
        for k, plan in enumerate(nested.plans)
    ]
    kernel = _function(
        ctx.module, f"{ctx.prefix}.{scope}{instr.name}", VOID, KERNEL_ARGS, internal=True
    )
    b = ir.IRBuilder(kernel.append_basic_block("entry"))
    frame = Frame()
    _bind_buffers(ctx, b, kernel, emission.weights, frame)

    def caller(kernels: list[Kernel]):
        def call_all() -> None:
            for k in kernels:
                k.call(b, kernel.args)

        return call_all

    CONTROL_KERNELS[instr.op](ctx, instr, nested, [caller(p) for p in programs])
    b.ret_void()
    return Kernel(kernel, frame.table(ctx.module, kernel.name), instr.name)


def _emit_kernel(ctx: EmitContext, emission: Emission, instr: Instruction, scope="") -> Kernel:
    """The kernel computing `instr` and its frame: a control-flow kernel calling its
    computations' kernels, or one whose body the first of EMITTERS that takes `instr`
    emits, shared with an earlier kernel of the same code."""
    if instr.op in CONTROL_KERNELS:
        return _emit_control(ctx, emission, instr, scope)
    if ctx.workspace_of is not None:
        ctx.workspace = ctx.workspace_of(ctx.plan, instr)
    mark, frame = emission.shared.mark(), Frame()
    function = _function(
        ctx.module, f"{ctx.prefix}.{scope}{instr.name}", VOID, KERNEL_ARGS, internal=True
    )
    b = ir.IRBuilder(function.append_basic_block("entry"))
    _bind_buffers(ctx, b, function, emission.weights, frame)
    operands = [_operand_generator(ctx, o) for o in instr.operands]
    for _, emit in EMITTERS:
        if emit(ctx, instr, operands):
            break
    b.ret_void()
    shared = emission.shared.share(function, mark)  # before the frame: not its text
    return Kernel(shared, frame.table(ctx.module, function.name), instr.name)


def _emit_rule_kernel(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> bool:
    """An op with a kernel rule of its own (llvm/rules.py's KERNELS: sort, scatter...)."""
    rule = KERNELS.get(instr.op)
    if rule is None:
        return False
    rule(ctx, instr, operands, kernel_outputs(ctx, instr))
    return True


def _emit_loops(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> bool:
    """Anything: its element generator stored by loop nests over the output."""
    if reshapes := _operand_reshapes(instr):
        # each reads its operand's (row-major) buffer at its own index: no digits
        replaced = {
            id(r): memory_generator(ctx, _operand_slice(ctx, instr, r.operands[0]), r.array_shape)
            for r in reshapes
        }
        fused = instr.called[0]
        gen = bind_instructions(ctx, fused, operands, replaced)[id(fused.root)]
    else:
        gen = make_generator(ctx, instr, operands)
    if isinstance(instr.shape, Shape):
        _store_loop(ctx, instr, gen, [(instr.shape, ctx.plan.slice_of(instr))])
        return True
    elements = instr.shape.elements
    assert all(isinstance(e, Shape) for e in elements), f"nested tuple in {instr.name}"
    outputs = [(e, ctx.plan.slice_of(instr, (k,))) for k, e in enumerate(elements)]
    if len({e.dims for e in elements}) == 1:
        _store_loop(ctx, instr, gen, outputs)
    else:  # a multi-output fusion with differently shaped outputs: one nest each
        for k, output in enumerate(outputs):
            _store_loop(ctx, instr, _element_generator(ctx, instr, gen, k), [output])
    return True


# (name, emit(ctx, instr, operand generators) -> whether it emitted the kernel's body),
# tried in order; the last takes every instruction
EMITTERS = (
    ("attention", emit_attention),  # a kChain fusion: attention block by block
    ("contraction", emit_contraction),  # dot/conv (+ epilogue): forms.py's kernels
    ("pooling", emit_pooling),  # max/avg/global pooling (+ epilogue)
    ("transpose", emit_transpose),  # a transpose moving the last dim, tile by tile
    ("concatenate", emit_wide_concatenate),  # of many buffers: a loop over a table of them
    ("sort", emit_sort),  # the kernel rule of a sort, given scratch for merging long rows
    ("kernel", _emit_rule_kernel),  # scatter, rng...: a rule that emits a whole kernel
    ("rows", emit_row_fusion),  # a row fusion: its reductions once per row
    ("loops", _emit_loops),  # element generators stored in loop nests
)


def _operand_generator(ctx: EmitContext, operand: Instruction) -> Gen:
    """Operands are read from their buffers, except one-element constants (immediates);
    other one-element operands once per kernel."""
    if operand.op is Op.CONSTANT and operand.array_shape.size == 1:
        return constant_rule(ctx, operand, [])
    if operand.array_shape.size == 1:
        return invariant_generator(ctx, ctx.plan.slice_of(operand), operand.array_shape)
    return memory_generator(ctx, ctx.plan.slice_of(operand), operand.array_shape)


def _element_generator(ctx: EmitContext, instr: Instruction, gen: Gen, k: int) -> Gen:
    """Element k of a tuple-valued instruction; for a fused tuple root, its k-th operand's."""
    if instr.op is Op.FUSION and instr.called[0].root.op is Op.TUPLE:
        fused = instr.called[0]
        params = [_operand_generator(ctx, o) for o in instr.operands]
        return bind_instructions(ctx, fused, params)[id(fused.root.operands[k])]
    return lambda index: gen(index)[k]


def _store_loop(
    ctx: EmitContext, instr: Instruction, gen: Gen, outputs: list[tuple[Shape, Slice]]
) -> None:
    """One loop nest over the (shared) output dims, storing each output's element."""
    dims = outputs[0][0].dims
    start = _elementwise_from(instr)
    flat = start == 0 and len(dims) > 1
    inner = start if start and len(dims) - start >= 2 else None  # merged from `inner` on
    clipped = _last_clipped(instr)
    if clipped and (flat or (inner is not None and inner < clipped)):
        # merged from the last dim clipped to an extent on: the merged loop covers just
        # the box (merged over an earlier clipped dim, it would cover the rows between)
        flat, inner = False, clipped if len(dims) - clipped >= 2 else None
    digits: list[tuple[int, ...]] = []
    if flat:
        loop = [math.prod(dims)]
    elif inner is not None:
        loop = [*dims[:inner], math.prod(dims[inner:])]
    else:  # each dim as the digits a reshape at the root splits it into, if one does
        digits = loop_dims(instr) if isinstance(instr.shape, Shape) else [(d,) for d in dims]
        loop = [extent for extents in digits for extent in extents]
    counts = _loop_counts(ctx, instr, dims, flat, inner, digits)
    with parallel_loop_nest(ctx, loop, counts=counts) as index:
        if flat:  # one loop over the linear position: row-major index (0, ..., 0, linear)
            index = [i64(0)] * (len(dims) - 1) + index
        elif inner is not None:
            index = [*index[:inner], *split_index(ctx.builder, index[inner], dims[inner:])]
        else:
            place = iter(index)
            index = [compose_index(ctx, [next(place) for _ in e], e) for e in digits]
        values = gen(index)
        if len(outputs) == 1 and not isinstance(values, tuple):
            values = (values,)
        for (shape, where), value in zip(outputs, values):
            pointer = element_pointer(ctx, ctx.slice_pointer(where), shape, index)
            store_element(ctx.builder, shape.dtype, value, pointer)


def _last_clipped(instr: Instruction) -> int:
    """The last dim of `instr`'s output that its extents clip (0: none, or the first)."""
    extents = instr.extents if isinstance(instr.shape, Shape) else None
    return max((d for d, e in enumerate(extents or ()) if e is not None), default=0)


def _loop_counts(ctx: EmitContext, instr: Instruction, dims, flat, inner, digits):
    """Per loop of `_store_loop`'s nest, the i64 count its output's extents need (None:
    the whole loop), or None: every loop whole.  A merged loop runs the positions that
    cover the box; a dim split into digits clips its leading digit."""
    clipped = limits(ctx, instr)
    if clipped is None:
        return None
    b = ctx.builder
    assert b is not None

    def whole_or(value):
        return None if isinstance(value, int) else value

    if flat:
        return [whole_or(span(b, clipped, dims))]
    if inner is not None:
        return [*clipped[:inner], whole_or(span(b, clipped[inner:], dims[inner:]))]
    counts: list[ir.Value | None] = []
    for count, extents in zip(clipped, digits):
        rest = math.prod(extents[1:])
        if count is not None and rest > 1:  # leading digit: ceil(count / rest)
            count = b.udiv(b.add(count, i64(rest - 1)), i64(rest))
        counts += [count] + [None] * (len(extents) - 1)
    return counts


def _operand_slice(ctx: EmitContext, fusion: Instruction, parameter: Instruction) -> Slice:
    """Where the fusion's operand that `parameter` (of its computation) stands for is."""
    assert parameter.index is not None
    return ctx.plan.slice_of(fusion.operands[parameter.index])


def _operand_reshapes(instr: Instruction) -> list[Instruction]:
    """The reshapes of a fused kernel's operands (its parameters, not one-element ones)."""
    if instr.op is not Op.FUSION:
        return []
    return [
        m
        for m in instr.called[0].instructions
        if m.op in RESHAPES
        and m.operands[0].op is Op.PARAMETER
        and m.operands[0].array_shape.size > 1
    ]


def _elementwise_from(instr: Instruction) -> int | None:
    """The first output dim from which on `instr` (fused or not) reads every operand at
    its own element: 0 when it is elementwise over its output dims throughout (scalars
    aside), then one loop over the linear position serves, which LLVM vectorizes
    whatever the dims (a nest over e.g. 64x7x7 would not); else the dim past the last
    one that an operand broadcast along leading dims keeps (per-channel parameters of an
    NCHW batch norm, a squeeze-excite's channel scales, reshaped or computed in the
    kernel), the dims after it then one loop with those operands invariant in it; None
    when neither holds."""
    dims = instr.shape.dims if isinstance(instr.shape, Shape) else None
    if dims is None:
        return None
    members = instr.called[0].instructions if instr.op is Op.FUSION else [instr]
    # what a broadcast reads is indexed by the dims it keeps alone: any computation
    below_broadcasts = {
        id(i) for i in reached(m.operands[0] for m in members if m.op is Op.BROADCAST)
    }
    # an operand reshaped to the output's dims is read at the output's own index
    reshaped = {id(r) for r in _operand_reshapes(instr) if r.array_shape.dims == dims}
    start = 0
    for member in members:
        if (
            member.op in (Op.PARAMETER, Op.TUPLE)
            or id(member) in reshaped
            or (member.op is Op.CONSTANT and member.array_shape.size == 1)
            or (id(member) in below_broadcasts and member.array_shape.dims != dims)
        ):
            continue
        if member.array_shape.dims != dims:
            return None
        if member.op is Op.BROADCAST:
            kept = list(member.dimensions)
            if kept != sorted(kept):
                return None
            start = max(start, kept[-1] + 1 if kept else 0)
        elif not member.op.is_elementwise or any(
            o.array_shape.rank and o.array_shape.dims != dims for o in member.operands
        ):
            return None
    return start


def _bind_buffers(
    ctx: EmitContext, b: ir.IRBuilder, function, weights, frame: Frame | None = None
) -> None:
    """Point the context at `function` (a kernel with its frame, or the entry): its
    builder and its buffers."""
    ctx.bind = lambda builder, pointers: _bind_pointers(ctx, builder, pointers, weights, frame)
    ctx.bind(b, function.args)


def _bind_pointers(
    ctx: EmitContext, b: ir.IRBuilder, pointers, weights, frame: Frame | None
) -> None:
    """Point the context at builder `b` whose function reaches the buffers through
    `pointers` = (inputs table, outputs table, arena[, frame]).

    Caller buffer pointers and the frame's offsets are loaded once, in the entry block:
    stores to outputs could alias the tables, so LLVM would not hoist them.  Without a
    frame (the entry), arena and weights slices are at constant offsets.
    """
    inputs, outputs, arena, *framed = pointers
    ctx.builder = b
    ctx.kernel_pointers = tuple(pointers)
    bases: dict[tuple[BufferKind, int], ir.Value] = {(BufferKind.ARENA, 0): arena}
    offsets: dict[int, ir.Value] = {}

    def slice_pointer(where: Slice) -> ir.Value:
        if where == DROPPED:  # a read prepack.py did not foresee: a bug, never wrong numbers
            raise AssertionError("a kernel reads a constant dropped from the weights blob")
        key = (where.kind, where.index)
        if key not in bases:
            with b.goto_entry_block():
                bases[key] = _base_pointer(b, where, inputs, outputs, weights)
        if frame is None or where.kind not in FRAMED:
            return ctx.byte_pointer(bases[key], where.offset)
        slot = frame.slot(where)
        if slot not in offsets:
            with b.goto_entry_block():
                entry = b.gep(framed[0], [i64(slot)], inbounds=True, source_etype=I64)
                offsets[slot] = b.load(entry, typ=I64)
        return b.gep(bases[key], [offsets[slot]], inbounds=True, source_etype=I8)

    ctx.slice_pointer = slice_pointer


def _base_pointer(b: ir.IRBuilder, where: Slice, inputs, outputs, weights: Weights) -> ir.Value:
    """Where `where`'s buffer starts: the weights, or a caller's pointer from its table."""
    if where.kind is BufferKind.CONSTANT:
        return weights.base(b)
    table = inputs if where.kind is BufferKind.PARAMETER else outputs
    slot = b.gep(table, [i64(where.index)], inbounds=True, source_etype=PTR)
    return b.load(slot, typ=PTR)


# -- entry points ---------------------------------------------------------------


def _emit_configured_impl(llmod, name: str, impl, threads: int) -> ir.Function:
    """`impl` preceded by choosing the thread count on first use (see aotc_runtime.h)."""
    run_all = _function(llmod, f"{name}_impl_threaded", VOID, ENTRY_ARGS, internal=True)
    b = ir.IRBuilder(run_all.append_basic_block("entry"))
    configure = ir.Function(llmod, ir.FunctionType(VOID, [I32]), "aotc_configure_threads")
    b.call(configure, [ir.Constant(I32, threads)])
    b.call(impl, run_all.args)
    b.ret_void()
    return run_all


def _emit_set_num_threads(llmod, name: str) -> None:
    """`void NAME_set_num_threads(int n)`: the pool's thread count (shared by all models)."""
    setter = ir.Function(llmod, ir.FunctionType(VOID, [I32]), f"{name}_set_num_threads")
    b = ir.IRBuilder(setter.append_basic_block("entry"))
    runtime = ir.Function(llmod, ir.FunctionType(VOID, [I32]), "aotc_set_num_threads")
    b.call(runtime, setter.args)
    b.ret_void()


def _emit_run(llmod, name: str, impl, arena, weights: Weights, inputs: int, outputs: int):
    """`int NAME_run(void *in..., void *out..., void *scratch)`."""
    params = [f"in{i}" for i in range(inputs)] + [f"out{i}" for i in range(outputs)]
    run = _function(llmod, f"{name}_run", I32, [*params, "scratch"])
    b = ir.IRBuilder(run.append_basic_block("entry"))
    tables = []
    for first, count in ((0, inputs), (inputs, outputs)):
        table = b.alloca(PTR, size=max(count, 1))
        for i in range(count):
            slot = b.gep(table, [i64(i)], inbounds=True, source_etype=PTR)
            b.store(run.args[first + i], slot)
        tables.append(table)
    _checked_call(b, impl, arena, weights, tables, run.args[-1])


def _emit_run_generic(llmod, name: str, impl, arena, weights: Weights) -> None:
    """`int NAME_run_generic(void *const *inputs, void *const *outputs, void *scratch)`."""
    run = _function(llmod, f"{name}_run_generic", I32, ["inputs", "outputs", "scratch"])
    b = ir.IRBuilder(run.append_basic_block("entry"))
    _checked_call(b, impl, arena, weights, run.args[:2], run.args[2])


def _checked_call(b: ir.IRBuilder, impl, arena, weights: Weights, tables, scratch) -> None:
    """Return 1 for a misaligned scratch, 2 where the system refuses the AMX tile state
    that kernels of the module use (amx.py), 4 where external weights are not set; else
    run `impl` on scratch or the static arena."""
    address = b.ptrtoint(scratch, I64)
    misaligned = b.icmp_unsigned("!=", b.and_(address, i64(ARENA_ALIGNMENT - 1)), i64(0))
    with if_then(b, misaligned):
        b.ret(ir.Constant(I32, 1))
    permit = b.module.globals.get(PERMIT_FUNCTION)
    if permit is not None:
        with if_then(b, b.icmp_unsigned("!=", b.call(permit, []), ir.Constant(I32, 0))):
            b.ret(ir.Constant(I32, 2))
    weights.refuse_unset(b)
    is_null = b.icmp_unsigned("==", address, i64(0))
    b.call(impl, [*tables, b.select(is_null, arena, scratch)])
    b.ret(ir.Constant(I32, 0))


# -- helpers ------------------------------------------------------------------


def _function(llmod, name: str, ret, arg_names, internal: bool = False) -> ir.Function:
    """A function of pointer arguments; internal ones stay out of line, so that O3
    optimizes kernel by kernel and the two entries share one body."""
    fn = ir.Function(llmod, ir.FunctionType(ret, [PTR] * len(arg_names)), name)
    for arg, arg_name in zip(fn.args, arg_names):
        arg.name = arg_name
    fn.attributes.add("nounwind")
    if internal:
        fn.linkage = "internal"
        fn.attributes.add("noinline")
    return fn


def _global_bytes(llmod, arch: str, name: str, size: int) -> ir.GlobalVariable:
    variable = blob_global(llmod, arch, name, size)
    variable.initializer = ir.Constant(variable.value_type, None)
    variable.align = ARENA_ALIGNMENT
    return variable
