"""`aotc profile`'s table: one line per kernel, slowest first, and the totals."""

from __future__ import annotations

from .measure import KernelProfile, Profile

NAME_WIDTH = 28

# (heading, width, the cell of a kernel): the numeric columns, right-aligned
COLUMNS = (
    ("calls", 6, lambda k: f"{k.calls:,}"),
    ("total ms", 9, lambda k: _ms(k.total_ns)),
    ("% run", 6, lambda k: f"{100 * k.share:.1f}"),
    ("MB", 8, lambda k: f"{k.cost.bytes_moved / 1e6:.2f}"),
    ("MFLOP", 9, lambda k: f"{k.cost.flops / 1e6:.1f}"),
    ("GB/s", 7, lambda k: f"{k.gbs:.1f}"),
    ("GFLOP/s", 8, lambda k: f"{k.gflops:.1f}"),
    ("% bound", 8, lambda k: f"{100 * k.bound_share:.1f}"),
)


def profile_table(profile: Profile, top: int | None = None) -> str:
    """The table of `profile`'s kernels (the `top` slowest, or all) and its total line."""
    header = f"{'kernel':<{NAME_WIDTH}}" + "".join(f" {h:>{w}}" for h, w, _ in COLUMNS)
    lines = [_title(profile), header + "  ops [form]"]
    shown = profile.kernels if top is None else profile.kernels[:top]
    lines += [_row(k) for k in shown]
    if len(shown) < len(profile.kernels):
        lines.append(f"... {len(profile.kernels) - len(shown)} more kernels")
    lines += _totals(profile)
    return "\n".join(lines)


def _title(profile: Profile) -> str:
    threads = "thread" if profile.threads == 1 else "threads"
    return (
        f"{profile.model}: {profile.runs} runs, {profile.threads} {threads}, "
        f"{profile.target}; kernels by total time"
    )


def _row(kernel: KernelProfile) -> str:
    name = kernel.name if len(kernel.name) <= NAME_WIDTH else kernel.name[: NAME_WIDTH - 1] + "~"
    cells = "".join(f" {cell(kernel):>{w}}" for _, w, cell in COLUMNS)
    return f"{name:<{NAME_WIDTH}}{cells}  {kernel.cost.label}"


def _totals(profile: Profile) -> list[str]:
    """The kernels against the run end to end, and the roof they are measured against."""
    kernels_ns, run_ns = profile.kernel_ns, profile.run_ns
    flops = sum(k.cost.flops * k.calls for k in profile.kernels) / profile.runs
    moved = sum(k.cost.bytes_moved * k.calls for k in profile.kernels) / profile.runs
    roofline_ns = sum(k.bound_share * k.total_ns for k in profile.kernels) / profile.runs
    roof = profile.bound
    kernels = (
        f"total: {len(profile.kernels)} kernels {_ms(kernels_ns)} ms per run = "
        f"{100 * kernels_ns / max(run_ns, 1):.1f}% of {_ms(run_ns)} ms measured end to end"
    )
    work = (
        f"  {moved / 1e6:.2f} MB, {flops / 1e6:.1f} MFLOP per run, "
        f"{flops / max(kernels_ns, 1):.1f} GFLOP/s; the kernels' roofline {_ms(roofline_ns)} ms"
    )
    bound = (
        f"bound: {roof.bandwidth_gbs:.1f} GB/s (one thread streaming), "
        f"{roof.peak_gflops:.1f} GFLOP/s per core x {profile.threads} (f32 FMA)"
    )
    legend = (
        "  % bound = roofline time / measured time; over 100: data from caches, or fewer "
        "operations than counted (Winograd)"
    )
    return [kernels, work, bound, legend]


def _ms(ns: float) -> str:
    """Milliseconds to 4 significant digits."""
    return f"{ns / 1e6:.4g}"
