"""What every backend offers the driver: the `Backend` protocol and `CompiledCode`.

A backend owns the `--target` specs that start with its `prefix`: it parses them,
compiles a module laid out by a buffer plan, writes the artifacts of the result and
describes its kernels and its targets.  `aotc.backends.BACKENDS` is the table of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..artifacts import ArtifactPaths, MemoryStats, Target, TensorSpec
from ..artifacts.weights import WeightsFile
from ..buffers import Blob, BufferPlan
from ..ir import Module


@dataclass(frozen=True)
class CompiledCode:
    """What a backend made of a planned module."""

    object: Blob  # the relocatable object of NAME.o (CUDA: the host blobs), in pieces
    kernel_count: int  # the kernels one run executes
    program: Any = None  # the backend's own record of its kernels (CUDA: a CudaProgram)
    # a profiled build's kernels, in the order of its NAME_profile_ns/_calls counters
    profile_kernels: tuple[str, ...] = ()
    # where the object holds a big static arena and big weights ("" = where small ones go)
    arena_section: str = ""
    weights_section: str = ""
    # external weights (--weights external): NAME.weights, outside the object
    weights_file: WeightsFile | None = None

    @property
    def object_bytes(self) -> bytes:
        return bytes(self.object)


# a backend's own target class (CpuTarget, CudaTarget)
T = TypeVar("T", bound=Target)


class Backend(Protocol[T]):
    """One code generator: the `--target` specs it reads and what it makes of a module."""

    prefix: str  # the specs it owns start with this ("": every spec no other one owns)
    label: str  # how messages name its code, e.g. "CUDA"
    loadable: bool  # whether its code runs in this process (CompiledModel.load)
    # whether it computes kChain fusions (aotc/ir/attention_chain.py): the pipeline then
    # makes them
    computes_chains: bool
    # the --weights it takes: "embedded" (in the object), "external" (NAME.weights)
    weights_modes: tuple[str, ...]

    def parse_target(self, spec: str, opt_level: int = 2) -> T:
        """The target `spec` names, as compiled at `opt_level`; one-line error otherwise."""
        ...

    def byte_dot_signs(self, target: T) -> str:
        """The 8-bit operand types that the quantized products of a model compiled for
        `target` should have, as its byte dot products take them: "mixed" (one u8 and
        one s8) or "same" (two s8 or two u8).  The frontend flips one operand's sign to
        make them so, which leaves the exact sums unchanged."""
        ...

    def overwrites(self, target: T, plan: BufferPlan) -> dict[int, int]:
        """id(instruction) -> the operand whose bytes its kernel may write its result over
        where that operand dies there, though the kernel reads it elsewhere than at the
        output's index (assign_buffers' `overwrites`), over `plan` and its nested plans."""
        ...

    def temporaries(self, target: T, plan: BufferPlan) -> dict[int, int]:
        """id(instruction) -> the scratch bytes its kernel needs while it runs (packing
        panels, split-K partials...), over `plan` and its nested plans: the driver plans
        them into the arena (`assign_buffers`), and `compile` finds them there with
        `BufferPlan.temporary` (a kernel needing more takes the workspace after it)."""
        ...

    def compile(
        self,
        module: Module,
        plan: BufferPlan,
        name: str,
        target: T,
        threads: int = 1,
        profile: bool = False,
        weights: str = "embedded",
    ) -> CompiledCode:
        """The code of `module` laid out by `plan`, its symbols prefixed with `name`;
        `threads` is the compiled model's default thread count where it has threads;
        `profile` asks for per-kernel time and call counters (one-line error where the
        backend has none); `weights` is one of `weights_modes`."""
        ...

    def peak_gflops(self, target: T) -> float:
        """Measured f32 multiply-add peak of one core of this machine in code for
        `target` (GFLOP/s); one-line error where that code cannot run here."""
        ...

    def write_artifacts(
        self,
        out_dir: Path,
        name: str,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        obj: Blob,
        stats: MemoryStats,
        target: T,
        source: str,
        program: Any = None,
        weights_file: WeightsFile | None = None,
    ) -> ArtifactPaths:
        """Write the artifacts of compiled code (NAME.h, NAME.o, libNAME.a...) into
        `out_dir`, all or nothing; `source` is shown in the header as given;
        `weights_file`: CompiledCode's, written as NAME.weights."""
        ...

    def kernel_forms(self, target: T, plan: BufferPlan) -> dict[str, str]:
        """Kernel name -> how this backend emits it ("gemm", "winograd"...), for the
        kernels whose form it tells."""
        ...

    def describe_targets(self) -> str:
        """Its part of `aotc targets`: the targets it offers and the tools it found."""
        ...
