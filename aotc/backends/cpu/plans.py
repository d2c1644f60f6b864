"""The protocol of kernel plans: how one dot or convolution is computed on the CPU.

A plan is made at compile time, before any code is emitted, by the first form of
forms.py's tables that takes the contraction; contraction.py sizes the workspace from
the plans and emits each one, its epilogue applied per finished block.  The plans:
GemmPlan (gemm.py: im2col, dots, matrix-vector products), DirectConvPlan
(direct_conv.py), DepthwisePlan (depthwise.py), PlaneConvPlan (plane_conv.py) and
WinogradPlan (winograd.py).  Plans whose operands prepack.py may pack at compile
time also subclass gemm.py's `Prepackable`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ...buffers import Slice
from ..llvm.context import EmitContext


class KernelPlan(Protocol):
    """One contraction's kernel, decided at compile time."""

    @property
    def kind(self) -> str:
        """How it runs, as `aotc inspect` prints it: "gemm", "gemv.axpy", "gemv.dot",
        "direct", "depthwise", "planes", "winograd"."""
        ...

    @property
    def workspace_bytes(self) -> int:
        """Arena bytes it packs or transforms operands in (the workspace's share)."""
        ...

    def emit(
        self,
        ctx: EmitContext,
        sources: list,
        c: Slice,
        workspace: Slice,
        epilogue: Callable[[list], None] | None,
    ) -> None:
        """Compute the contraction into `c` from its operands' `sources` (contraction.py's
        `Source`: generator and memory view), in `workspace`; then, when given, call
        `epilogue` (which stores the fused root there) at each output index."""
        ...
