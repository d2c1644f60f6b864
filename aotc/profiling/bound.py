"""This machine's bound for `aotc profile`'s roofline, measured once and cached.

- memory bandwidth: the best of a few streaming copies and adds over arrays far larger
  than the last-level cache, on one thread, counting bytes read and written (as the
  profile counts a kernel's bytes);
- f32 peak: the backend's multiply-add chains on one core for the target
  (backends/cpu/peak.py); T threads are bounded by T times it.

Cached in $XDG_CACHE_HOME/aotc/machine.json (else ~/.cache/aotc/machine.json), keyed by
the CPU's model name and the target, so each is measured once per machine.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..driver import describe_target, measure_peak_gflops

STREAM_BYTES = 128 << 20  # per array: 4x a large server's L3 share
STREAM_RUNS = 5
CACHE_FILE = "machine.json"
# /proc/cpuinfo's line naming the CPU, by architecture (x86; aarch64 has no name)
CPU_NAME_KEYS = ("model name", "cpu model", "CPU part")


@dataclass(frozen=True)
class MachineBound:
    """How fast this machine moves bytes and computes f32 multiply-adds."""

    bandwidth_gbs: float  # one thread streaming, read + written bytes
    peak_gflops: float  # one core, f32 multiply-adds at the target's vector width

    def attainable_ns(self, bytes_moved: float, flops: float, threads: int = 1) -> float:
        """The roofline: the least time that moving `bytes_moved` and computing `flops`
        can take (bandwidth of one thread; `threads` times the peak)."""
        return max(bytes_moved / self.bandwidth_gbs, flops / (self.peak_gflops * threads))


def machine_bound(
    target: str = "host", cache_dir: Path | None = None, remeasure: bool = False
) -> MachineBound:
    """The bound for code of `target` on this machine: from the cache, else measured
    (about a second) and cached."""
    key = f"{cpu_name()} | {describe_target(target)}"
    path = (cache_dir or default_cache_dir()) / CACHE_FILE
    cached = _read(path)
    if not remeasure and key in cached:
        try:
            return MachineBound(**cached[key])
        except TypeError:  # written by another version: measure again
            pass
    bound = MachineBound(stream_bandwidth_gbs(), measure_peak_gflops(target))
    cached[key] = asdict(bound)
    _write(path, cached)
    return bound


def stream_bandwidth_gbs() -> float:
    """Best GB/s of a copy (2 bytes moved per byte) and an add (3 per byte) over arrays
    of STREAM_BYTES, one thread."""
    source = np.ones(STREAM_BYTES // 4, np.float32)
    other = np.ones_like(source)
    result = np.empty_like(source)
    kernels = (
        (lambda: np.copyto(result, source), 2 * STREAM_BYTES),
        (lambda: np.add(source, other, out=result), 3 * STREAM_BYTES),
    )
    best = 0.0
    for kernel, moved in kernels:
        kernel()  # first touch: page faults are not bandwidth
        for _ in range(STREAM_RUNS):
            start = time.perf_counter()
            kernel()
            best = max(best, moved / (time.perf_counter() - start) / 1e9)
    return best


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what Python knows of it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for key in CPU_NAME_KEYS:
        for line in lines:
            name, _, value = line.partition(":")
            if name.strip() == key and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "aotc"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    """Replace the file whole, so that a profile running beside it reads all or none;
    a cache that cannot be written is only not kept."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(f.name, path)
    except OSError:
        pass
