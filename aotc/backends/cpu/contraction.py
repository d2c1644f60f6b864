"""Contraction kernels: a dot or convolution with its elementwise epilogue, as GEMM.

`program._emit_kernel` asks `emit_contraction` first.  It takes a DOT or
CONVOLUTION kernel, or an OUTPUT fusion (aotc/ir/fusion_kinds.py: its root reaches
its contractions only through elementwise ops at their shape, as bias, residual and
activation do: each output element uses only the same element of each contraction;
the fusion pass makes them of one contraction, a hand-made one may sum two, as a
ResNet shortcut block), in f32/f64 (or s32 sums of 8/16-bit integers, see
pairs.py), when a form of forms.py's tables plans each (a `KernelPlan`, plans.py).
All but the last contraction are written to the workspace; the last one into the
output buffer, or into the workspace when the output cannot hold it (another
element type, or an epilogue operand computed in place there).  The epilogue then
runs per finished block of the last one, while it is in cache, the contractions'
generators replaced by loads of their values.

Operands are read through their generators, or directly from memory when
they are plain views of a buffer (a fused parameter, possibly transposed,
broadcast or reshaped): `Source.view` gives the strides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from llvmlite import ir

from ...buffers import BufferKind, BufferPlan, Slice
from ...ir import DType, Instruction, Op, Shape
from ...ir.fusion_kinds import CONTRACTION_OPS, output_contractions, widens_bytes
from ..llvm.alias import OutputScope
from ..llvm.context import EmitContext, Gen
from ..llvm.elemental import element_pointer, make_generator, memory_generator
from ..llvm.extents import clips_dot, dot_clip
from ..llvm.lltypes import from_storage, storage_type, store_element
from .blocking import aligned
from .forms import plan_contraction
from .gemm import Clipping, GemmPlan
from .gemm_config import fits_gemm
from .nbits import nbits_weight
from .plans import KernelPlan
from .prepackable import packed_workspace, use_packed
from .views import View, fused_view, memory_view
from .workspace import Budget, each_kernel, temporary_budget


@dataclass
class Source:
    """A contraction operand: its element generator; its memory layout if a plain view."""

    gen: Gen
    view: View | None


# -- which kernels ----------------------------------------------------------------


@dataclass
class _Kernel:
    """A kernel's contractions (in body order; the last one runs with the epilogue)."""

    contractions: list[Instruction]
    plans: list[KernelPlan]  # one per contraction
    last_in_place: bool  # the last contraction's values go to the output buffer itself

    @property
    def unit_values(self) -> bool:
        """The last plan keeps its values per unit of work (plane_conv.py's
        `with_unit_values`), each read by the unit's epilogue through its pointer."""
        return bool(self.plans) and getattr(self.plans[-1], "value_parts", 0) > 0

    @property
    def value_bytes(self) -> list[int]:
        """Workspace bytes for each contraction's values (0: in the output buffer)."""
        sizes = [aligned(c.array_shape.nbytes) for c in self.contractions]
        if self.last_in_place:
            sizes[-1] = 0
        elif self.unit_values:
            sizes[-1] = self.plans[-1].values_bytes  # type: ignore[attr-defined]
        return sizes

    @property
    def workspace_bytes(self) -> int:
        """The values, then packing space that the contractions take in turn."""
        return sum(self.value_bytes) + max(p.workspace_bytes for p in self.plans)

    @property
    def packed_workspace(self) -> int:
        """`workspace_bytes` once prepack.py has packed the constant operands (what a
        choice by the bytes free compares, prepackable.packed_workspace)."""
        return sum(self.value_bytes) + max(packed_workspace(p) for p in self.plans)


def contraction_workspace(target, plan: BufferPlan, instr: Instruction) -> int:
    """The workspace `instr`'s contraction kernel needs (0: none, or not a contraction)."""
    kernel = _analyze(target, plan, instr)
    return 0 if kernel is None else kernel.workspace_bytes


def contraction_kind(target, plan: BufferPlan, instr: Instruction) -> str | None:
    """How `instr` is emitted: the `kind` of its last contraction's plan ("gemm",
    "gemv.axpy", "gemv.dot", "direct", "depthwise", "planes", "winograd"), or None (by
    the element rules)."""
    kernel = _analyze(target, plan, instr)
    return None if kernel is None else kernel.plans[-1].kind


def contraction_plans(target, plan: BufferPlan, instr: Instruction):
    """(contractions, their plans) of a GEMM-based kernel, or None (by the element rules)."""
    kernel = _analyze(target, plan, instr)
    return None if kernel is None else (kernel.contractions, kernel.plans)


def emit_contraction(ctx: EmitContext, instr: Instruction, operands: list[Gen]) -> bool:
    """Emit `instr` as a GEMM-based kernel if it is one; False leaves it to the rules."""
    kernel = _analyze(ctx.target, ctx.plan, instr)
    if kernel is None:
        return False
    workspace = _workspace_slice(ctx, kernel.workspace_bytes)
    out_where = ctx.plan.slice_of(instr)
    places, offset = [], workspace.offset
    for size in kernel.value_bytes:
        places.append(Slice(BufferKind.ARENA, 0, offset, size) if size else out_where)
        offset += size
    packing = Slice(BufferKind.ARENA, 0, offset, workspace.offset + workspace.size - offset)
    if instr.op in CONTRACTION_OPS:
        views = [memory_view(ctx.plan, o) for o in instr.operands]
        sources = [[Source(gen, view) for gen, view in zip(operands, views)]]
        epilogue = None
    else:
        body = instr.called[0]
        assert ctx.builder is not None
        scope = OutputScope(ctx.module, ctx.builder.function.name)
        operands = _outside_output(ctx, instr, operands, scope)
        # the values in the workspace are apart from the output (alias.py)
        values = {
            id(c): memory_generator(
                ctx, where, c.array_shape, None if where.overlaps(out_where) else scope
            )
            for c, where in zip(kernel.contractions, places)
        }
        unit_value = _UnitValue(ctx, kernel.contractions[-1].array_shape.dtype, scope)
        if kernel.unit_values:
            values[id(kernel.contractions[-1])] = unit_value.load
        gens = _bind(ctx, body, operands, values)
        sources = [
            [Source(gens[id(o)], operand_view(ctx.plan, instr, o)) for o in c.operands]
            for c in kernel.contractions
        ]
        epilogue = _epilogue(ctx, gens[id(body.root)], instr.array_shape, out_where, scope)
        if kernel.unit_values:
            epilogue = unit_value.epilogue(epilogue)
    last = len(kernel.plans) - 1
    for n, (plan, where) in enumerate(zip(kernel.plans, places)):
        finish = epilogue if n == last else None  # the others are operands of its epilogue
        if n == last and isinstance(plan, GemmPlan):  # other forms compute whole
            clip = _clipping(instr, kernel.contractions[n], len(plan.batch))
            plan = replace(plan, clip=clip) if clip is not None else plan
        plan.emit(ctx, sources[n], where, packing, finish)
    return True


@dataclass
class _UnitValue:
    """The last contraction's value in a kernel with unit values: the plan calls the
    epilogue with each element's index and the pointer to its value in the unit's
    region, and the fused body loads it from there."""

    ctx: EmitContext
    dtype: DType
    scope: OutputScope  # the regions are apart from the output
    pointer: ir.Value | None = None

    def load(self, index) -> ir.Value:
        b = self.ctx.builder
        assert b is not None and self.pointer is not None, "the epilogue passes the pointer"
        loaded = b.load(self.pointer, typ=storage_type(self.dtype))
        self.scope.load(loaded)
        return from_storage(b, self.dtype, loaded)

    def epilogue(self, store: Callable) -> Callable:
        def apply(index: list[ir.Value], pointer: ir.Value) -> None:
            self.pointer = pointer
            store(index)
            self.pointer = None

        return apply


def _clipping(instr: Instruction, dot: Instruction, batch: int) -> Clipping | None:
    """What of the kernel's last contraction its readers need (llvm/extents.dot_clip),
    as GemmPlan clips it: `batch` leading dims run as GEMM batch dims."""
    if not clips_dot(instr, dot):
        return None
    return lambda ctx: dot_clip(ctx, instr, dot, batch)


def _analyze(target, plan: BufferPlan, instr: Instruction) -> _Kernel | None:
    contractions = output_contractions(instr)
    if not contractions:
        return None
    image = _overwritten_image(plan, instr, contractions)
    in_place = _can_compute_in_place(plan, instr, contractions[-1], image)
    values = _Kernel(contractions, [], in_place).value_bytes
    room = temporary_budget(plan, instr)
    kernel = _plan_kernel(target, plan, instr, contractions, in_place, image, sum(values), room)
    if kernel is None or not kernel.unit_values:
        return kernel
    # the forms were given the room left beside the whole values; with the last one's
    # values per unit, the smallest regions leave them more (a faster form may fit)
    least = kernel.plans[-1].least_values_bytes  # type: ignore[attr-defined]
    retry = _plan_kernel(
        target, plan, instr, contractions, in_place, image, sum(values[:-1]) + least, room
    )
    if retry is None or not retry.unit_values:
        return kernel
    fits = retry.packed_workspace <= max(room.free, kernel.packed_workspace)
    return retry if fits else kernel


def _plan_kernel(
    target, plan: BufferPlan, instr, contractions, in_place: bool, image, values: int, room
) -> _Kernel | None:
    """The kernel's plans, its forms given what `room` has free beside `values` bytes of
    the contractions' values."""
    budget = Budget(max(room.free - values, 0), room.strict)
    plans = []
    for contraction in contractions:
        operand_types = [o.array_shape.dtype for o in contraction.operands]
        if not fits_gemm(contraction.array_shape.dtype, operand_types):
            return None
        if instr is contraction:
            views = [memory_view(plan, o) for o in instr.operands]
        else:
            views = [operand_view(plan, instr, o) for o in contraction.operands]
        planned = plan_contraction(target, contraction, views, budget, image is not None)
        if planned is None:
            assert image is None, f"%{instr.name} was given its image's bytes: no form writes so"
            return None
        plans.append(use_packed(planned, plan.slices, instr, len(plans)))  # see prepack.py
    kernel = _Kernel(contractions, plans, in_place)
    if not in_place:
        plans[-1] = _values_per_unit(kernel, room.free)
    return kernel


def _values_per_unit(kernel: _Kernel, free: int) -> KernelPlan:
    """The last plan keeping its values per unit of work where it can, in what `free`
    leaves beside the other values and the plans' workspace (an epilogue operand
    computed in place: whole values would be a temporary the size of the output)."""
    last = kernel.plans[-1]
    with_unit_values = getattr(last, "with_unit_values", None)
    if with_unit_values is None:
        return last
    others = sum(kernel.value_bytes[:-1]) + max(packed_workspace(p) for p in kernel.plans)
    return with_unit_values(max(free - others, 0)) or last


def operand_view(plan: BufferPlan, fusion: Instruction, operand: Instruction):
    """The memory view of a contraction operand in `fusion`'s body; for 8-bit integers
    widened to 16 bits, that of the 8-bit values (the integer GEMM's packers widen them,
    and its pre-packed weights are read from them); for a block-dequantized weight of
    constants, where its parts are (nbits.NBitsWeight)."""
    weight = nbits_weight(plan, fusion, operand)
    if weight is not None:
        return weight
    if widens_to_pairs(operand):
        operand = operand.operands[0]
    return fused_view(plan, fusion, operand)


def widens_to_pairs(instr: Instruction) -> bool:
    """Whether `instr` converts 8-bit integers to s16 exactly, as an integer GEMM's
    packers do on the way."""
    return widens_bytes(instr) and instr.array_shape.dtype is DType.S16


def _can_compute_in_place(
    plan: BufferPlan, instr: Instruction, contraction, image: int | None = None
) -> bool:
    """Can the output buffer hold the contraction until the epilogue overwrites it?

    Not when its element size differs, nor when an epilogue operand shares the
    output's bytes (computed in place): the contraction would overwrite it
    before the epilogue reads it.  (Operand `image`, the convolution's image the
    output was given, is read by the contraction's form alone, as it writes.)
    """
    if instr is contraction:
        return True
    if instr.array_shape.dtype is not contraction.array_shape.dtype:
        return False
    out = plan.slice_of(instr)
    return not any(
        isinstance(o.shape, Shape) and plan.slice_of(o).overlaps(out)
        for k, o in enumerate(instr.operands)
        if k != image
    )


# -- an output over its image -------------------------------------------------------


def image_overwrites(target, plan: BufferPlan) -> dict[int, int]:
    """id(kernel) -> the image operand `overwritable_image` names, over `plan` and its
    nested plans."""
    found = {}
    for frame, instr in each_kernel(plan):
        k = overwritable_image(target, frame, instr)
        if k is not None:
            found[id(instr)] = k
    return found


def overwritable_image(target, plan: BufferPlan, instr: Instruction) -> int | None:
    """The operand of kernel `instr` whose bytes its output may take where it dies there
    (assign_buffers' `overwrites`): the image of its one convolution, of the output's
    shape and read by nothing else of the kernel, where a form that writes over it
    (forms.OVERWRITING_FORMS) takes the convolution."""
    contractions = output_contractions(instr)
    k = _image_operand(instr, contractions)
    if k is None:
        return None
    image, conv = instr.operands[k], contractions[0]
    if not isinstance(image.shape, Shape) or image.shape.dims != instr.array_shape.dims:
        return None
    d = conv.conv
    assert d is not None, conv.name
    same_layout = (d.input_batch, d.input_feature, d.input_spatial) == (
        d.output_batch,
        d.output_feature,
        d.output_spatial,
    )  # each element of the image where the output's of the same index goes
    if not same_layout:
        return None
    if image.array_shape.dtype is not instr.array_shape.dtype:
        return None
    if instr is conv:
        views = [memory_view(plan, o) for o in instr.operands]
    else:
        views = [operand_view(plan, instr, o) for o in conv.operands]
    return k if plan_contraction(target, conv, views, None, True) is not None else None


def _overwritten_image(plan: BufferPlan, instr: Instruction, contractions) -> int | None:
    """The operand `overwritable_image` names where the plan gave the output its bytes."""
    k = _image_operand(instr, contractions)
    if k is None or not isinstance(instr.operands[k].shape, Shape):
        return None
    return k if plan.slice_of(instr.operands[k]).overlaps(plan.slice_of(instr)) else None


def _image_operand(instr: Instruction, contractions) -> int | None:
    """The operand of `instr` that is its one contraction's image, if a convolution's
    and read by nothing else of the kernel."""
    if len(contractions) != 1 or contractions[0].op is not Op.CONVOLUTION:
        return None
    conv = contractions[0]
    if instr is conv:
        return 0
    image = conv.operands[0]
    if image.op is not Op.PARAMETER or conv.operands[1] is image:
        return None
    body = instr.called[0]
    readers = [u for u in body.instructions if any(o is image for o in u.operands)]
    return image.index if readers == [conv] and body.root is not image else None


# -- operands ---------------------------------------------------------------------


def _bind(ctx, body, params: list[Gen], values: dict[int, Gen]) -> dict[int, Gen]:
    """Generators of the fused body, those of the contractions replaced by `values`."""
    gens: dict[int, Gen] = {}
    for instr in body.instructions:
        if instr.op is Op.PARAMETER:
            gens[id(instr)] = params[instr.index]
        elif id(instr) in values:
            gens[id(instr)] = values[id(instr)]
        else:
            gens[id(instr)] = make_generator(ctx, instr, [gens[id(o)] for o in instr.operands])
    return gens


# -- epilogue and workspace ---------------------------------------------------------


def _outside_output(
    ctx: EmitContext, fusion: Instruction, operands: list[Gen], scope: OutputScope
) -> list[Gen]:
    """The fusion's operand generators, those reading buffers disjoint from its output
    loading under `scope` (alias.py): the epilogue's stores then do not keep LLVM from
    hoisting and vectorizing their loads (a per-row value read from the arena did)."""
    out = ctx.plan.slice_of(fusion)
    gens = []
    for operand, gen in zip(fusion.operands, operands):
        shape = operand.shape
        if isinstance(shape, Shape) and shape.size > 1:
            where = ctx.plan.slice_of(operand)
            if not where.overlaps(out):
                gen = memory_generator(ctx, where, shape, outside=scope)
        gens.append(gen)
    return gens


def _epilogue(
    ctx: EmitContext, root: Gen, shape: Shape, where: Slice, scope: OutputScope
) -> Callable:
    """Store the fused root's value at an output index (a store into `scope`)."""

    def apply(index: list[ir.Value]) -> None:
        pointer = element_pointer(ctx, ctx.slice_pointer(where), shape, index)
        scope.store(store_element(ctx.builder, shape.dtype, root(index), pointer))

    return apply


def _workspace_slice(ctx: EmitContext, size: int) -> Slice:
    workspace = ctx.workspace
    assert workspace is not None and size <= workspace.size, "workspace sized before emission"
    return Slice(BufferKind.ARENA, 0, workspace.offset, size)
