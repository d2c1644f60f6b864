"""The emission context of GPU kernels: the CPU's, with the device's math and grid.

The elemental rules emit through an `EmitContext`; this one sends the intrinsics that
the device cannot lower and the libm calls to the device's math library (libdevice on
NVPTX), and carries the device and the kernel being emitted.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ...buffers import Slice
from ...ir import DType
from ..llvm.context import EmitContext
from .device import Device


class GpuContext(EmitContext):
    """An `EmitContext` whose intrinsics and math calls go through `device`."""

    def __init__(
        self, module: ir.Module, plan, prefix: str, rules: dict, device: Device, target
    ) -> None:
        super().__init__(module, plan, prefix, rules, math=device.math, target=target)
        self.device = device
        self.kernel = None  # the program.Kernel being emitted
        self.inputs = self.outputs = 0  # the model's caller buffers (kernel parameters)
        self.packed: dict[Slice, DType] = {}  # constants stored packed (packing.py)

    def intrinsic(
        self, name: str, args: Sequence[ir.Value], ret: ir.Type | None = None
    ) -> ir.Value:
        base = self.device.libm_for_intrinsic(name)
        if base is not None:
            return self.libm(base, args)
        return super().intrinsic(name, args, ret)
