"""The kernel forms' tables (cpu/forms.py) and the plan protocol (cpu/plans.py)."""

from __future__ import annotations

import inspect

from aotc.backends.cpu import forms
from aotc.backends.cpu.amx import AmxPlan
from aotc.backends.cpu.depthwise import DepthwisePlan
from aotc.backends.cpu.direct_conv import DirectConvPlan
from aotc.backends.cpu.gemm import GemmPlan
from aotc.backends.cpu.nbits import NBitsPlan
from aotc.backends.cpu.plane_conv import PlaneConvPlan
from aotc.backends.cpu.plans import KernelPlan
from aotc.backends.cpu.winograd import WinogradPlan

PLANS = (GemmPlan, DirectConvPlan, DepthwisePlan, PlaneConvPlan, WinogradPlan, NBitsPlan, AmxPlan)


def test_forms_in_priority_order():
    conv = [name for name, _ in forms.CONV_FORMS]
    assert conv == [
        "amx",
        "quads",
        "paired",
        "direct",
        "depthwise",
        "winograd",
        "gemv",
        "planes",
        "im2col",
        "masked",
    ]
    assert [name for name, _ in forms.DOT_FORMS] == [
        "nbits",
        "amx",
        "quads",
        "paired",
        "gemv",
        "gemm",
    ]


def test_planners_take_the_problem_only():
    for _, planner in (*forms.CONV_FORMS, *forms.DOT_FORMS):
        assert list(inspect.signature(planner).parameters) == ["problem"], planner


def test_every_plan_has_the_protocols_members():
    members = ("kind", "workspace_bytes", "emit")
    assert all(hasattr(KernelPlan, m) for m in members)
    for plan in PLANS:
        assert all(hasattr(plan, m) for m in members), plan
        emit = inspect.signature(plan.emit).parameters
        assert list(emit) == ["self", "ctx", "sources", "c", "workspace", "epilogue"], plan
