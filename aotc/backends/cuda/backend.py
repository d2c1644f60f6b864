"""The CUDA backend behind the `Backend` protocol: `--target cuda:sm_80,sm_90` specs,
kernels as cubins in a host object, and artifacts with a generated C launcher.  Its code
runs on a GPU through libNAME.a, never in the compiling process.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...artifacts import ArtifactPaths, MemoryStats, TensorSpec, WeightsFile
from ...buffers import Blob, BufferPlan
from ...errors import AotcError, one_line
from ...ir import Module
from ..base import Backend, CompiledCode
from .artifacts import write_cuda_artifacts
from .codegen import CudaProgram, compile_cuda
from .contraction import partial_sums
from .target import PREFIX, CudaTarget, arch_number, known_archs, parse_cuda_target
from .tools import find_ptxas, ptxas_version


class CudaBackend(Backend[CudaTarget]):
    prefix = PREFIX
    label = "CUDA"
    loadable = False
    computes_chains = False  # attention stays three kernels
    weights_modes = ("embedded",)  # the host object uploads them

    def parse_target(self, spec: str, opt_level: int = 2) -> CudaTarget:
        return parse_cuda_target(spec)  # no kernel depends on the optimization level

    def byte_dot_signs(self, target: CudaTarget) -> str:
        return "mixed"  # dp4a takes any signs: the products stay u8 x s8 as MLAS makes them

    def overwrites(self, target: CudaTarget, plan: BufferPlan) -> dict[int, int]:
        return {}  # every kernel writes apart from what it reads out of place

    def temporaries(self, target: CudaTarget, plan: BufferPlan) -> dict[int, int]:
        return partial_sums(target, plan)

    def compile(
        self,
        module: Module,
        plan: BufferPlan,
        name: str,
        target: CudaTarget,
        threads: int = 1,
        profile: bool = False,
        weights: str = "embedded",
    ) -> CompiledCode:
        del weights  # always "embedded" (weights_modes)
        if profile:
            raise AotcError("profiling times CPU kernels; CUDA code has no counters")
        program = compile_cuda(module, plan, name, target)
        return CompiledCode(Blob.of(program.host_object), len(program.launches), program)

    def peak_gflops(self, target: CudaTarget) -> float:
        raise AotcError(f"cannot measure the peak of {target}: its code runs on a GPU")

    def write_artifacts(
        self,
        out_dir: Path,
        name: str,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        obj: Blob,
        stats: MemoryStats,
        target: CudaTarget,
        source: str,
        program: CudaProgram | None = None,
        weights_file: WeightsFile | None = None,
    ) -> ArtifactPaths:
        """NAME.h, aotc_cuda.h, NAME.o and libNAME.a (see artifacts.py); `obj` is
        `program`'s host object."""
        assert weights_file is None, "CUDA weights are embedded (weights_modes)"
        assert program is not None, "CUDA artifacts are written from the CudaProgram"
        return write_cuda_artifacts(out_dir, name, inputs, outputs, program, stats, source)

    def kernel_forms(self, target: CudaTarget, plan: BufferPlan) -> dict[str, str]:
        return {}  # each launch says its kind (CudaProgram.launches)

    def describe_targets(self) -> str:
        """The GPU architectures and the ptxas that assembles them."""
        archs = ", ".join(sorted(known_archs(), key=lambda a: (arch_number(a), a)))
        try:
            ptxas = find_ptxas()
            found = f"{ptxas} ({ptxas_version(ptxas)})"
        except AotcError as error:
            found = one_line(str(error))
        return (
            f"NVIDIA GPUs: --target cuda:sm_80,sm_90 (one cubin each, PTX of the newest; "
            f"+tf32: f32 contractions on TF32 tensor cores); architectures: {archs}."
            f"\nptxas: {found}"
        )
