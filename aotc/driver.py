"""The driver: the one module that wires frontend -> passes -> plan -> backend.

`compile_model` turns a model (ONNX file or proto, or XLA HLO text) into a
`CompiledModel`: the optimized module, its buffer plan and the object code.
Writing artifacts and loading the code into Python are methods on that.  The
backend comes from the table in aotc.backends, by the target's prefix; this module
names none.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import artifacts, memory_limits, progress
from .artifacts.runtime import MAX_THREADS
from .artifacts.weights import WeightsFile
from .backends import BACKENDS, Backend, backend_for
from .buffers import Blob, BufferPlan, assign_buffers
from .errors import AotcError, ModelError
from .ir import Module, Op, Shape
from .ir.bounds import DimRange
from .names import check_c_identifier, to_c_identifier
from .passes.pipeline import make_pipeline


@dataclass(frozen=True)
class CompileOptions:
    """Everything that steers a compile; the CLI and the Python API fill it."""

    name: str | None = None
    # input -> its dims, each an extent or a DimRange (any extent in it at run time)
    input_shapes: dict[str, tuple[int | DimRange, ...]] = field(default_factory=dict)
    # the model's symbolic dim names -> their extent or DimRange, in every input
    dim_extents: dict[str, int | DimRange] = field(default_factory=dict)
    # outputs of nodes whose counts the data gives -> the most results kept (--count)
    count_caps: dict[str, int] = field(default_factory=dict)
    # inputs fixed to values (they become constants): shape-determining inputs
    input_values: dict[str, np.ndarray] = field(default_factory=dict)
    # ONNX sequence inputs: name -> length; their tensors are the inputs "NAME.0",
    # "NAME.1"... (keys of input_shapes/input_values too); an optional input that holds
    # no value: name -> None (see frontends/onnx/boundary.py)
    input_structure: dict[str, int | None] = field(default_factory=dict)
    target: str = "host"
    opt_level: int = 2
    dump_hlo: Path | None = None
    verify: bool = False
    threads: int = 1  # default thread count of the compiled model (<= 0: all CPUs)
    profile: bool = False  # per-kernel time and call counters in the code (aotc profile)
    # bytes every tensor and the memory plan must fit (None: this machine's memory)
    max_memory: int | None = None
    # "embedded": the weights inside NAME.o; "external": in NAME.weights beside it, which
    # the application hands over (NAME_set_weights / NAME_load_weights) before NAME_run
    weights: str = "embedded"
    # "memory": a kernel whose fastest form's temporary would raise the memory plan's
    # peak takes a shorter band of it, else a slower form that fits (the smallest plan:
    # at most the plain order's values on every bench model, 0.99-1.02 of the time at
    # one thread but ResNet-50's 1.07); "speed": each kernel its fastest form, in bands
    # where its temporary would raise the peak
    plan_for: str = "memory"


PLAN_FOR = ("memory", "speed")


@dataclass
class CompiledModel:
    """The result of a compile: what the artifacts are made from."""

    name: str
    source: str
    module: Module
    plan: BufferPlan
    object: Blob  # NAME.o, in pieces (the weights' as the plan holds them)
    inputs: list[artifacts.TensorSpec]
    outputs: list[artifacts.TensorSpec]
    stats: artifacts.MemoryStats
    target: artifacts.Target  # str(target) describes it
    seconds: float
    backend: Backend[Any]  # the one that compiled it (and writes its artifacts)
    program: Any = None  # the backend's own record of its kernels (CompiledCode.program)
    # a profiled build's kernels, in the order of its NAME_profile_ns/_calls counters
    profile_kernels: tuple[str, ...] = ()
    # the weights outside the object (CompileOptions.weights "external"), else None
    weights_file: WeightsFile | None = None

    @property
    def object_bytes(self) -> bytes:
        """NAME.o joined (the pieces of `object`)."""
        return bytes(self.object)

    def write(self, out_dir: str | Path) -> artifacts.ArtifactPaths:
        """Write NAME.h, NAME.o and libNAME.a (and NAME.weights, external) into
        `out_dir` (all or nothing; see artifacts.write_artifacts for a target without a
        C compiler)."""
        return self.backend.write_artifacts(
            Path(out_dir),
            self.name,
            self.inputs,
            self.outputs,
            self.object,
            # the file name only: a header must not depend on where the build ran
            self.stats,
            self.target,
            Path(self.source).name,
            self.program,
            self.weights_file,
        )

    def kernel_forms(self) -> dict[str, str]:
        """Kernel name -> how the backend emits that kernel ("gemm", "winograd",
        "depthwise", ...); empty where it tells none."""
        return self.backend.kernel_forms(self.target, self.plan)

    def load(self):
        """Link a shared object and return a callable `LoadedModel` (cffi)."""
        from .runner import LoadedModel

        if not self.backend.loadable:
            raise AotcError(
                f"{self.name} is compiled for {self.backend.label}: link libNAME.a into a program"
            )
        return LoadedModel(self)


def _sized_temporaries(backend, target, plan: BufferPlan) -> tuple[dict, dict]:
    """The kernels' temporaries (id(instruction) -> bytes) and the rooms they were sized
    in.  Each kernel at its smallest first (no room anywhere): the least peak any sizing
    reaches; then each as large as the largest gap its step leaves below that peak in
    the plan's arena, where its temporary will go (a kernel takes short bands, or a
    form without temporaries, only where the peak is at stake)."""
    smallest = backend.temporaries(target, plan.with_rooms(plan.rooms_below(0)))
    peak = max(
        [plan.arena_bytes] + [plan.live_bytes(i) + smallest.get(id(i), 0) for i in plan.schedule]
    )
    rooms = plan.gaps_below(peak)
    return backend.temporaries(target, plan.with_rooms(rooms)), rooms


def compile_model(model, options: CompileOptions | None = None) -> CompiledModel:
    """Compile an ONNX model (path or ModelProto) or an HLO text file."""
    options = options or CompileOptions()
    if options.threads > MAX_THREADS:
        raise AotcError(
            f"--threads {options.threads}: the runtime's thread pool holds at most "
            f"{MAX_THREADS} threads"
        )
    started = time.perf_counter()
    backend = backend_for(options.target)
    _check_weights_mode(options.weights, backend)
    target = backend.parse_target(options.target, options.opt_level)
    progress.stage("import")
    module, source = _import(model, options, backend.byte_dot_signs(target))
    limit = options.max_memory or memory_limits.machine_memory()
    memory_limits.check_tensors(module, limit)
    name = _model_name(options.name, source, module)
    module.name = name
    pipeline = make_pipeline(
        options.opt_level, options.dump_hlo, options.verify, chains=backend.computes_chains
    )
    pipeline.run(module)
    memory_limits.check_tensors(module, limit)
    progress.stage("memory plan")
    if options.plan_for not in PLAN_FOR:
        raise AotcError(f"plan_for {options.plan_for!r}: one of {', '.join(PLAN_FOR)}")
    fit_forms = options.plan_for == "memory"
    plan = assign_buffers(module, fit_forms=fit_forms)
    # kernels that may write over an operand they read out of place (Winograd over its
    # image), found on a first plan
    overwrites = backend.overwrites(target, plan)
    if overwrites:
        plan = assign_buffers(module, None, fit_forms, overwrites)
    # the kernels' temporaries (packing panels, split-K partials) as buffers of the plan,
    # live while their kernel runs: sized on a first plan, then packed with the rest
    temporaries, rooms = _sized_temporaries(backend, target, plan)
    if temporaries:
        plan = assign_buffers(module, temporaries, fit_forms, overwrites)
    if rooms:  # the kernels are emitted as they were sized, with or without temporaries
        plan = plan.with_rooms(rooms)
    # the arena and weights are known here: refuse a plan past the limit before any code
    memory_limits.check_plan(plan.arena_bytes, 0, plan.weight_bytes, limit)
    threads = max(options.threads, 0)  # <= 0: all CPUs
    code = backend.compile(module, plan, name, target, threads, options.profile, options.weights)
    memory_limits.check_plan(plan.arena_bytes, plan.workspace_bytes, plan.weight_bytes, limit)
    inputs, outputs = _tensor_specs(module)
    stats = artifacts.MemoryStats(
        arena_bytes=plan.arena_bytes,
        alignment=plan.alignment,
        lower_bound=plan.lower_bound,
        naive_total=plan.naive_total,
        weight_bytes=plan.weight_bytes,
        kernel_count=code.kernel_count,
        workspace_bytes=plan.workspace_bytes,
        arena_section=code.arena_section,
        weights_section=code.weights_section,
    )
    return CompiledModel(
        name,
        source,
        module,
        plan,
        code.object,
        inputs,
        outputs,
        stats,
        target,
        time.perf_counter() - started,
        backend,
        code.program,
        code.profile_kernels,
        code.weights_file,
    )


def _check_weights_mode(mode: str, backend: Backend[Any]) -> None:
    """Refuse, in one line, a --weights the backend does not take."""
    if mode not in backend.weights_modes:
        raise AotcError(
            f"--weights {mode}: {backend.label} code takes {' or '.join(backend.weights_modes)}"
        )


def describe_targets() -> str:
    """What `aotc targets` prints: each backend's targets and the tools it found."""
    return "\n\n".join(backend.describe_targets() for backend in BACKENDS.values())


def describe_target(target_spec: str = "host") -> str:
    """The target a `--target` spec names, in words (its triple and CPU)."""
    return str(backend_for(target_spec).parse_target(target_spec))


def measure_peak_gflops(target_spec: str = "host") -> float:
    """The f32 multiply-add peak of one core of this machine in code for the target (GFLOP/s)."""
    backend = backend_for(target_spec)
    return backend.peak_gflops(backend.parse_target(target_spec))


def _import(model, options: CompileOptions, byte_dot_signs: str) -> tuple[Module, str]:
    """Pick the frontend: HLO text is sniffed by content, everything else is ONNX, whose
    quantized products get the operand types the target's byte dots take."""
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise ModelError(f"{path}: no such file")
        stablehlo = _is_stablehlo(path)
        if stablehlo or _is_hlo_text(path):
            from .frontends.hlo import import_hlo
            from .frontends.stablehlo import import_stablehlo

            if options.input_values:
                raise AotcError(f"{path}: --const does not apply to HLO text")
            if options.count_caps:
                raise AotcError(f"{path}: --count does not apply to HLO text")
            if options.dim_extents or _has_ranges(options.input_shapes):
                raise AotcError(
                    f"{path}: --dim and dim ranges do not apply to HLO text (write bounded "
                    "dims in its shapes, f32[<=8,128])"
                )
            importer = import_stablehlo if stablehlo else import_hlo
            return importer(path, options.input_shapes), str(path)
        source = str(path)
    else:
        source = getattr(getattr(model, "graph", None), "name", None) or "model"
    from .frontends.onnx import import_onnx

    module = import_onnx(
        model,
        options.input_shapes,
        input_values=options.input_values,
        dim_extents=options.dim_extents,
        count_caps=options.count_caps,
        input_structure=options.input_structure,
        byte_dot_signs=byte_dot_signs,
    )
    return module, source


def _has_ranges(input_shapes) -> bool:
    return any(isinstance(d, DimRange) for dims in input_shapes.values() for d in dims)


def _is_hlo_text(path: Path) -> bool:
    """Sniffed from the content (`HloModule` after comments), whatever the extension."""
    from .frontends.hlo import is_hlo_text

    try:
        with open(path, "rb") as f:
            return is_hlo_text(f.read(4096))
    except OSError as error:
        raise ModelError(f"{path}: cannot read: {error.strerror or error}") from None


def _is_stablehlo(path: Path) -> bool:
    """A `.mlir` or `.jaxexport` file, or text starting `module` / `func.func`."""
    from .frontends.stablehlo import JAX_EXPORT_SUFFIX, is_stablehlo_text

    if path.suffix in (".mlir", JAX_EXPORT_SUFFIX):
        return True
    try:
        with open(path, "rb") as f:
            return is_stablehlo_text(f.read(4096))
    except OSError as error:
        raise ModelError(f"{path}: cannot read: {error.strerror or error}") from None


def _model_name(requested: str | None, source: str, module: Module) -> str:
    """The symbol prefix: --name, else the file's stem made into a C identifier."""
    if requested is not None:
        check_c_identifier(requested, "--name")
        return requested
    stem = Path(source).stem if source else module.name
    return to_c_identifier(stem or "model", lead="m_")


def _tensor_specs(module: Module):
    """The C-facing inputs (entry parameters) and outputs (root tuple elements)."""
    entry = module.entry
    params = entry.parameters
    input_names = module.input_names or [p.name for p in params]
    inputs = [
        replace(_spec(n, p.shape), labels=module.labels.get(n, ()))
        for n, p in zip(input_names, params)
    ]
    root = entry.root
    elements = root.operands if root.op is Op.TUPLE else [root]
    output_names = module.output_names or [e.name for e in elements]
    outputs = [
        replace(_spec(n, e.shape), labels=module.labels.get(n, ()))
        for n, e in zip(output_names, elements)
    ]
    if module.bounds is not None:
        inputs = _bounded_specs(inputs, module.bounds.inputs, module.bounds.lows)
        outputs = _bounded_specs(outputs, module.bounds.outputs)
        # the header's NAME_run_bounded takes input_dims and output_dims as the last ones
        assert module.bounds.input_dims in (None, len(inputs) - 1)
        assert module.bounds.output_dims in (None, len(outputs) - 1)
    return inputs, outputs


def _bounded_specs(specs, bounded, lows=()) -> list[artifacts.TensorSpec]:
    """`specs` with the bounded dims of Bounds' (number, dim, bound) entries marked, and
    their least extents (`lows`, one per entry) where above 0."""
    flags = [[False] * spec.rank for spec in specs]
    least = [[0] * spec.rank for spec in specs]
    for k, (number, dim, _) in enumerate(bounded):
        flags[number][dim] = True
        least[number][dim] = lows[k] if k < len(lows) else 0
    return [
        replace(spec, bounded=tuple(f) if any(f) else (), lows=tuple(low) if any(low) else ())
        for spec, f, low in zip(specs, flags, least)
    ]


def _spec(name: str, shape: Shape) -> artifacts.TensorSpec:
    if not isinstance(shape, Shape):
        raise AotcError(f"output '{name}' is a nested tuple; only arrays can be returned")
    return artifacts.TensorSpec.make(name, shape.dtype, shape.dims)
