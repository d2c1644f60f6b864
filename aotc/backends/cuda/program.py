"""The kernels of one model: its entry schedule as GPU kernels, with launch configurations.

Every instruction of the schedule that computes something becomes one kernel (a
multi-output fusion whose outputs differ in shape, one per output), chosen in this
order: sorts a block per row (sort.py) where a row fits in shared memory, and other
sorts and scatters on one thread (serial.py); dots and convolutions, with
their fused producers and elementwise epilogue, are tiled shared-memory GEMMs
(contraction.py); row fusions (softmax, layer norm) take a block per row and
reductions a warp or block per output (reduction.py); everything else takes one
thread per output element (elementwise.py).  Grids and blocks are fixed here, at
compile time; the host launcher (templates/cuda_model.c.j2) launches the kernels in
schedule order on one stream, then makes the plan's output copies.

while, conditional and call are refused (one line) for now.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llvmlite import ir

from ...buffers import BufferKind, BufferPlan, Slice
from ...errors import UnsupportedError
from ...ir import Instruction, Module, Op
from ...names import check_c_identifier
from ..llvm.elemental import ELEMENTWISE_EMITTERS, make_elementwise_rule
from ..llvm.extents import input_dims_slice
from ..llvm.lltypes import F32, F64
from ..llvm.rules import KERNELS, RULES
from .context import GpuContext
from .contraction import emit_contraction, partial_sums
from .device import Device, NvptxDevice
from .elementwise import emit_elementwise
from .kernel import KernelLaunch, output_slices
from .packing import pack_constants
from .reduction import emit_reduce, emit_rows
from .serial import emit_serial
from .sort import emit_sort
from .target import CudaTarget

# tried in order; each returns its launches, or None when the instruction is not its kind
EMITTERS = (emit_contraction, emit_rows, emit_reduce)


@dataclass
class KernelProgram:
    """The LLVM module of the kernels, and what the host launcher needs to run them."""

    module: ir.Module
    launches: list[KernelLaunch]
    output_copies: list[tuple[Slice, Slice]]
    inputs: int
    outputs: int
    weights: bytes  # the blob the kernels read (sub-byte constants packed: packing.py)


def kernel_rules() -> dict:
    """The CPU's rule table with what differs on GPUs: float remainder is libdevice's
    exact fmod (NVPTX lowers `frem` as x - trunc(x/y)*y, which rounds)."""

    def remainder(ctx, instr, values):
        x, y = values
        if x.type in (F32, F64):
            return ctx.libm("fmod", [x, y])
        return ELEMENTWISE_EMITTERS[Op.REMAINDER](ctx, instr, values)

    return {**RULES, Op.REMAINDER: make_elementwise_rule(remainder)}


def build_program(
    module: Module,
    plan: BufferPlan,
    name: str,
    target: CudaTarget,
    device: Device | None = None,
) -> KernelProgram:
    """The kernels of `module`'s entry laid out by `plan` (its workspace set there), over
    the weights with sub-byte constants packed, for `device` (NVPTX default)."""
    check_c_identifier(name, "model name")
    device = device or NvptxDevice()
    llmod = ir.Module(name=name)
    llmod.triple = device.triple
    needs = partial_sums(target, plan)
    plan.workspace_bytes = plan.beyond_temporaries(needs)
    packed = pack_constants(plan)
    plan = packed.plan
    ctx = GpuContext(llmod, plan, name, kernel_rules(), device, target)
    ctx.packed = packed.fields
    inputs = len(module.entry.parameters)
    root = module.entry.root
    outputs = len(root.operands) if root.op is Op.TUPLE else 1
    ctx.inputs, ctx.outputs = inputs, outputs
    after_arena = Slice(BufferKind.ARENA, 0, plan.workspace_offset, plan.workspace_bytes)
    ctx.input_dims = input_dims_slice(module, plan)  # elementwise kernels clip to extents
    launches: list[KernelLaunch] = []
    for instr in plan.schedule:
        if not plan.needs_code(instr):
            continue
        if instr.op.is_control_flow:
            raise UnsupportedError(
                f"{instr.name}: the CUDA backend does not run {instr.op.text} yet "
                "(compile this model for the CPU)"
            )
        ctx.workspace = plan.workspace_of(instr, needs.get(id(instr), 0), after_arena)
        launches += emit_instruction(ctx, instr, f"{name}_k{len(launches)}_{_c_name(instr)}")
    return KernelProgram(
        llmod, launches, list(plan.output_copies), inputs, outputs, bytes(plan.weights)
    )


def _c_name(instr: Instruction) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", instr.name)


def emit_instruction(ctx: GpuContext, instr: Instruction, name: str) -> list[KernelLaunch]:
    """The kernel(s) computing `instr`, by the first emitter that takes it."""
    outputs = output_slices(ctx.plan, instr)
    if 0 in (shape.size for shape, _ in outputs):
        return []
    if instr.op in KERNELS:
        launch = emit_sort(ctx, instr, name, outputs)
        return [launch or emit_serial(ctx, instr, name, outputs)]
    for emitter in EMITTERS:
        launches = emitter(ctx, instr, name, outputs)
        if launches is not None:
            return launches
    return emit_elementwise(ctx, instr, name, outputs)
