"""The GPU as kernels see it: thread and block numbers, barriers, warp shuffles, shared
memory, mma and dp4a, math functions, and what makes a function a kernel.

Kernel emitters call a `Device` for these and emit plain LLVM IR otherwise, so the same
kernels can target NVPTX (`NvptxDevice`, what ships) or a CPU emulation of the thread
grid (tests/cuda/cuda_testing.py), which runs them where there is no GPU.
"""

from __future__ import annotations

from typing import Protocol

from llvmlite import ir

from ..llvm.context import EmitContext, MathLibrary
from ..llvm.lltypes import F16, F32, I8, I32, PTR, VOID
from .target import NVPTX_TRIPLE

WARP = 32
# mma.sync with f32 accumulators, by operand type (see mma_gemm.py for the fragments)
MMA_INTRINSICS = {
    "f16": "llvm.nvvm.mma.m16n8k16.row.col.f32.f32",
    "bf16": "llvm.nvvm.mma.m16n8k16.row.col.bf16",
    "tf32": "llvm.nvvm.mma.m16n8k8.row.col.tf32",
}

# dp4a by whether (a's, b's) bytes are signed
DOT4_INTRINSICS = {
    (False, False): "llvm.nvvm.idp4a.u.u",
    (False, True): "llvm.nvvm.idp4a.u.s",
    (True, False): "llvm.nvvm.idp4a.s.u",
    (True, True): "llvm.nvvm.idp4a.s.s",
}

# LLVM intrinsics the NVPTX back end cannot select (they would become libm calls), by the
# libm function that computes them: libdevice's __nv_ functions take their place
LIBDEVICE_INTRINSICS = {
    "llvm.exp": "exp",
    "llvm.log": "log",
    "llvm.pow": "pow",
    "llvm.sin": "sin",
    "llvm.cos": "cos",
}


class LibdeviceMath(MathLibrary):
    """libm names -> libdevice's (`erf` -> `__nv_erff` for float, `__nv_erf` for double)."""

    inline_f32_pow = False  # __nv_powf: no f64 (slow on most GPUs)

    def function_name(self, base: str, ty: ir.Type) -> str:
        return f"__nv_{base}f" if ty == F32 else f"__nv_{base}"


class Device(Protocol):
    """What kernels ask of the target besides plain LLVM IR (all values i32)."""

    triple: str
    math: MathLibrary

    def libm_for_intrinsic(self, name: str) -> str | None:
        """The math function replacing LLVM intrinsic `name`, or None to keep it."""

    def thread_index(self, ctx: EmitContext) -> ir.Value: ...

    def block_index(self, ctx: EmitContext) -> ir.Value: ...

    def barrier(self, ctx: EmitContext) -> None:
        """Wait until every thread of the block is here; shared memory writes before it
        are visible after it."""

    def shuffle_xor(self, ctx: EmitContext, value: ir.Value, lane_mask: int) -> ir.Value:
        """The i32 `value` of lane `lane ^ lane_mask` (every lane of the warp takes part)."""

    def shared_array(self, ctx: EmitContext, kernel: str, offset: int, size: int) -> ir.Value:
        """A generic pointer to `size` bytes of the block's shared memory at `offset`."""

    def mma(self, ctx: EmitContext, kind: str, a: list, b: list, c: list) -> list:
        """D = A B + C on one warp's fragments (mma_gemm.py): A 4 and B 2 i32 registers
        of `kind` ("f16", "bf16" or "tf32") operands, C and D 4 f32 registers."""

    def dot4(
        self, ctx: EmitContext, a: ir.Value, b: ir.Value, c: ir.Value, signed: tuple[bool, bool]
    ) -> ir.Value:
        """c + the four products of a's and b's bytes, byte i by byte i, each operand's
        bytes signed or not as `signed` (a's, b's) says (PTX dp4a); i32s, the sum wraps."""

    def to_tf32(self, ctx: EmitContext, value: ir.Value) -> ir.Value:
        """An f32 rounded to TF32 (nearest, ties away from zero), as i32 bits."""

    def define_kernel(self, module: ir.Module, name: str, params: int, block: int) -> ir.Function:
        """A kernel of `params` pointer parameters launched with `block` threads."""


class NvptxDevice:
    """NVIDIA GPUs through LLVM's NVPTX back end."""

    triple = NVPTX_TRIPLE
    math = LibdeviceMath()

    def libm_for_intrinsic(self, name: str) -> str | None:
        return LIBDEVICE_INTRINSICS.get(name)

    def thread_index(self, ctx: EmitContext) -> ir.Value:
        return _special_register(ctx, "tid.x")

    def block_index(self, ctx: EmitContext) -> ir.Value:
        return _special_register(ctx, "ctaid.x")

    def barrier(self, ctx: EmitContext) -> None:
        function = ctx.declare("llvm.nvvm.barrier0", VOID, [])
        function.attributes.add("convergent")
        ctx.builder.call(function, [])

    def shuffle_xor(self, ctx: EmitContext, value: ir.Value, lane_mask: int) -> ir.Value:
        args = [ir.Constant(I32, -1), value, ir.Constant(I32, lane_mask), ir.Constant(I32, 31)]
        function = ctx.declare("llvm.nvvm.shfl.sync.bfly.i32", I32, args)
        function.attributes.add("convergent")
        return ctx.builder.call(function, args)

    def shared_array(self, ctx: EmitContext, kernel: str, offset: int, size: int) -> ir.Value:
        # one global per array, so that LLVM knows which accesses can alias
        array = ir.GlobalVariable(
            ctx.module, ir.ArrayType(I8, size), f"{kernel}.shared.{offset}", addrspace=3
        )
        array.linkage = "internal"
        array.initializer = ir.Constant(array.value_type, ir.Undefined)
        array.align = 16
        with ctx.builder.goto_entry_block():
            return ctx.builder.addrspacecast(array, PTR)

    def mma(self, ctx: EmitContext, kind: str, a: list, b: list, c: list) -> list:
        builder = ctx.builder
        if kind == "f16":  # the intrinsic takes f16 pairs as <2 x half>
            pair = ir.VectorType(F16, 2)
            a, b = ([builder.bitcast(r, pair) for r in regs] for regs in (a, b))
        args = [*a, *b, *c]
        function = ctx.declare(MMA_INTRINSICS[kind], ir.LiteralStructType([F32] * 4), args)
        function.attributes.add("convergent")
        d = builder.call(function, args)
        return [builder.extract_value(d, k) for k in range(4)]

    def dot4(
        self, ctx: EmitContext, a: ir.Value, b: ir.Value, c: ir.Value, signed: tuple[bool, bool]
    ) -> ir.Value:
        builder: ir.IRBuilder = ctx.builder
        function = ctx.declare(DOT4_INTRINSICS[signed], I32, [a, b, c], pure=True)
        return builder.call(function, [a, b, c])

    def to_tf32(self, ctx: EmitContext, value: ir.Value) -> ir.Value:
        function = ctx.declare("llvm.nvvm.f2tf32.rna", I32, [value], pure=True)
        return ctx.builder.call(function, [value])

    def define_kernel(self, module: ir.Module, name: str, params: int, block: int) -> ir.Function:
        function = ir.Function(module, ir.FunctionType(VOID, [PTR] * params), name)
        function.calling_convention = "ptx_kernel"
        function.attributes.add("nounwind")
        for arg in function.args:
            arg.add_attribute("noalias")  # buffers that a kernel reads and writes never overlap
        # the block size, so that ptxas allocates registers for it (.maxntid)
        annotations = module.add_named_metadata("nvvm.annotations")  # created once
        annotations.add(module.add_metadata([function, "maxntidx", ir.Constant(I32, block)]))
        return function


def _special_register(ctx: EmitContext, name: str) -> ir.Value:
    function = ctx.declare(f"llvm.nvvm.read.ptx.sreg.{name}", I32, [], pure=True)
    return ctx.builder.call(function, [])
