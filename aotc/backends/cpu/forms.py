"""The kernel forms of dots and convolutions, in priority order: the first that plans
and whose workspace fits the memory plan's room at its step wins.

A form is a way to compute one contraction on the CPU.  Its planner, in the form's own
module, takes the contraction's problem (conv.py's `ConvProblem`, dot.py's
`DotProblem`: the target, the instruction, its operands' memory views, its GEMM
blocking and extents) and returns a plan (plans.py's `KernelPlan`), or None when the
form does not take the contraction: the conditions on target, dtypes and shapes that
gate a form are in its planner.  `plan_contraction` asks the forms of a table in order;
a contraction no form takes runs by the element rules.  Given the bytes the memory plan
has free at the kernel's step (its `Budget`), it passes over a form whose workspace (its
constants pre-packed) would not fit for the next that fits, else takes the smallest.

Adding a convolution algorithm: a module with its plan class (`kind`,
`workspace_bytes`, `emit`) and its planner, and one row in CONV_FORMS at its priority.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ir import Instruction, Op
from . import conv, depthwise, direct_conv, dot, plane_conv, winograd
from .plans import KernelPlan
from .prepackable import packed_workspace
from .workspace import Budget

# a form's planner: its problem -> its plan, or None (the form does not take it)
Planner = Callable[[Any], KernelPlan | None]
Forms = tuple[tuple[str, Planner], ...]

# (name, planner(ConvProblem))
CONV_FORMS: Forms = (
    ("amx", conv.plan_amx_im2col),  # 8-bit by a constant kernel, NCHW: im2col on AMX tiles
    ("quads", conv.plan_quad_im2col),  # u8 x s8 on vpdpbusd, NCHW: im2col GEMMs of quads
    ("paired", conv.plan_paired_im2col),  # integers, NCHW: im2col GEMMs of 16-bit pairs
    ("direct", direct_conv.plan_direct),  # channels-last: the micro-kernel on the image
    ("depthwise", depthwise.plan_depthwise),  # one input channel per group: direct loops
    ("winograd", winograd.plan_winograd),  # 3x3 stride 1, constant kernel, -O2
    ("gemv", conv.plan_gemv),  # 1x1 over one pixel: weight rows by the channel vector
    ("planes", plane_conv.plan_planes),  # the micro-kernel on (phase) planes of the image
    ("im2col", conv.plan_im2col),  # GEMMs of the weights by the image's columns
    # AVX-512, padded: the image read in place, its padding masked; no workspace, so
    # where the others' does not fit the plan's room
    ("masked", plane_conv.plan_masked),
)

# (name, planner(DotProblem))
DOT_FORMS: Forms = (
    ("nbits", dot.plan_nbits_dot),  # by block-dequantized weights, from their packed values
    ("amx", dot.plan_amx_dot),  # 8-bit by constant 8-bit on AMX tiles
    ("quads", dot.plan_quad_dot),  # u8 x s8 on vpdpbusd: GEMMs of 8-bit quads
    ("paired", dot.plan_paired_dot),  # integers: GEMMs of 16-bit pairs
    ("gemv", dot.plan_gemv),  # matrix-vector products of operands in memory
    ("gemm", dot.plan_gemm),
)

# forms whose plan stands whatever its workspace: the later forms would not read its
# operands as it does (block-dequantized weights: their packed values), or the integer
# forms, each next one a narrower instruction (AMX tiles, byte dots, 16-bit pairs);
# quantized models' plans are planned for speed there
KEPT_FORMS = frozenset({"nbits", "amx", "quads", "paired"})

# forms that may write a convolution's output over its image (the image dies there and
# has the output's shape): Winograd writes a band's rows only after it read the next
# band's input (winograd.py), and the plan gives it those bytes only on its word
# (contraction.overwritable_image)
OVERWRITING_FORMS = frozenset({"winograd"})

# opcode -> (its problem maker(target, instruction, views, budget) -> problem | None, its
# forms)
CONTRACTION_FORMS: dict[Op, tuple[Callable[..., Any], Forms]] = {
    Op.DOT: (dot.dot_problem, DOT_FORMS),
    Op.CONVOLUTION: (conv.conv_problem, CONV_FORMS),
}


def plan_contraction(
    target,
    contraction: Instruction,
    views,
    budget: Budget | None = None,
    overwrites_image: bool = False,
) -> KernelPlan | None:
    """The plan of the first form that takes `contraction` (`views`: its operands' memory
    views, or None; `budget`: what its workspace may take, None: any;
    `overwrites_image`: its output takes its image's bytes, only OVERWRITING_FORMS), or
    None: the element rules compute it."""
    make_problem, forms = CONTRACTION_FORMS[contraction.op]
    problem = make_problem(target, contraction, views, budget)
    if problem is None:
        return None
    if overwrites_image:
        forms = tuple(form for form in forms if form[0] in OVERWRITING_FORMS)
    plans = ((name, plan) for name, planner in forms if (plan := planner(problem)) is not None)
    if budget is None or not budget.strict:
        return next((plan for _, plan in plans), None)
    # the first whose workspace fits what is free at its step (a later form is slower,
    # but a temporary past the room raises the plan's peak), else the smallest
    smallest = None
    for name, plan in plans:
        if name in KEPT_FORMS or packed_workspace(plan) <= budget.free:
            return plan
        if smallest is None or packed_workspace(plan) < packed_workspace(smallest):
            smallest = plan
    return smallest
