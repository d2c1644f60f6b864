"""The CUDA backend: IR + BufferPlan -> nvptx64 kernels -> PTX -> cubin, plus a host object.

`parse_cuda_target` reads `--target cuda:sm_80,sm_90`; `compile_cuda` lowers a module
laid out by a buffer plan to one kernel per scheduled instruction (program.py), PTX per
architecture through llvmlite, cubins through ptxas (tools.py), and a host object with
the blobs and the weights (codegen.py).  The host launcher that loads and runs them is
generated C (templates/cuda_model.c.j2, written by artifacts.py) on top of
runtime_c/aotc_cuda.c, which opens libcuda at run time.  backend.py puts these behind
the `Backend` protocol (backends/base.py) for the driver.
"""

from .codegen import CudaProgram, compile_cuda
from .program import KernelLaunch
from .target import CudaTarget, CudaTargetError, is_cuda_target, parse_cuda_target

__all__ = [
    "CudaProgram",
    "CudaTarget",
    "CudaTargetError",
    "KernelLaunch",
    "compile_cuda",
    "is_cuda_target",
    "parse_cuda_target",
]
