"""A model's profile: compiled with kernel counters, loaded, run, the counters read.

The model is compiled with `profile=True` (backends/cpu/profile_counters.py), linked
into this process and fed random inputs: floats uniform in [0, 1), integers and
booleans zero (an integer input may be an index or a shape, where zero is safe).  After
a few warm-up runs the counters are zeroed, the model runs `runs` times, and each
kernel's time and calls are read; the end-to-end time is that of the same runs, taken
around them in Python.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

import numpy as np

from ..artifacts import TensorSpec
from ..driver import CompileOptions, compile_model
from ..errors import AotcError
from .bound import MachineBound, machine_bound
from .kernels import KernelCost, kernel_costs

WARMUP_RUNS = 3


@dataclass(frozen=True)
class KernelProfile:
    """One kernel's cost and measured time over the profiled runs."""

    cost: KernelCost
    calls: int
    total_ns: int
    share: float  # of the measured end-to-end time of the runs (0..1)
    bound_share: float  # roofline time / measured time (0..1; 0 when nothing is counted)

    @property
    def name(self) -> str:
        return self.cost.name

    @property
    def gbs(self) -> float:
        return self.cost.bytes_moved * self.calls / max(self.total_ns, 1)

    @property
    def gflops(self) -> float:
        return self.cost.flops * self.calls / max(self.total_ns, 1)


@dataclass(frozen=True)
class Profile:
    """Where one model's runs spent their time, kernel by kernel (slowest first)."""

    model: str
    target: str
    threads: int
    runs: int
    kernels: list[KernelProfile]
    run_ns: float  # measured end to end, per run
    bound: MachineBound

    @property
    def kernel_ns(self) -> float:
        """The kernels' time per run."""
        return sum(k.total_ns for k in self.kernels) / self.runs


def profile_model(
    model,
    options: CompileOptions | None = None,
    runs: int = 10,
    bound: MachineBound | None = None,
    seed: int = 0,
    remeasure: bool = False,
) -> Profile:
    """Compile `model` with kernel counters for `options`' target and thread count, run
    it `runs` times on random inputs and profile the runs.  The roofline is `bound`, else
    this machine's (bound.py; `remeasure`: measured again, not read from the cache)."""
    if runs < 1:
        raise AotcError(f"--runs {runs}: at least one run")
    options = replace(options or CompileOptions(), profile=True)
    compiled = compile_model(model, options)
    bound = bound or machine_bound(options.target, remeasure=remeasure)
    loaded = compiled.load()
    threads = options.threads if options.threads > 0 else os.cpu_count() or 1
    loaded.set_num_threads(threads)
    run = loaded.repeater(random_inputs(compiled.inputs, seed))
    for _ in range(WARMUP_RUNS):
        run()
    loaded.reset_profile()
    start = time.perf_counter_ns()
    for _ in range(runs):
        run()
    elapsed_ns = time.perf_counter_ns() - start
    nanoseconds, calls = loaded.profile_counters()
    kernels = [
        _kernel_profile(cost, int(n), int(c), elapsed_ns, bound, threads)
        for cost, n, c in zip(kernel_costs(compiled), nanoseconds, calls)
    ]
    kernels.sort(key=lambda k: k.total_ns, reverse=True)
    return Profile(
        compiled.name, str(compiled.target), threads, runs, kernels, elapsed_ns / runs, bound
    )


def _kernel_profile(
    cost: KernelCost, ns: int, calls: int, elapsed_ns: int, bound: MachineBound, threads: int
) -> KernelProfile:
    attainable = bound.attainable_ns(cost.bytes_moved, cost.flops, threads) * calls
    return KernelProfile(cost, calls, ns, ns / max(elapsed_ns, 1), attainable / max(ns, 1))


def random_inputs(specs: list[TensorSpec], seed: int = 0) -> list[np.ndarray]:
    """Floats uniform in [0, 1); integers and booleans zero."""
    rng = np.random.default_rng(seed)
    return [
        rng.random(spec.dims).astype(np.float32)
        if spec.dtype.is_float
        else np.zeros(spec.dims, spec.dtype.storage)
        for spec in specs
    ]
