"""The CPU backend: IR + BufferPlan -> LLVM IR (llvmlite) -> ELF object.

`parse_target` reads a `--target` spec; `emit_object` compiles a module laid
out by a buffer plan into a relocatable object whose symbols are prefixed
with the model name:

    int NAME_run(void *in0, ..., void *out0, ..., void *scratch);
    int NAME_run_generic(void *const *inputs, void *const *outputs, void *scratch);

Both return 0, or 1 (computing nothing) when scratch is not 64-byte aligned, or 2
(computing nothing) where Linux refuses the AMX tile state that the kernels use;
scratch == NULL uses NAME_static_arena, which makes such calls non-reentrant.
NAME_weights holds the constants in a read-only section.  See program.py.
`contraction_kind` says how a dot or convolution kernel is emitted ("gemm",
"winograd", ...).  backend.py puts these behind the `Backend` protocol (backends/base.py)
for the driver.
"""

from .codegen import emit_llvm_ir, emit_object
from .contraction import contraction_kind
from .target import CpuTarget, TargetError, parse_target

__all__ = [
    "CpuTarget",
    "TargetError",
    "contraction_kind",
    "emit_llvm_ir",
    "emit_object",
    "parse_target",
]
