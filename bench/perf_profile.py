"""Where a compiled benchmark model spends its time, kernel by kernel (Linux `perf`).

    python bench/perf_profile.py MODEL [--runs N] [--threads T] [--top K]

Compiles MODEL of `models.BENCH_MODELS` as bench/run.py does, runs the C driver N
times under `perf record`, and prints the share of samples per symbol: each
kernel is a function named `MODEL.<instruction>` (its loop body `.body`), the
shared GEMM pieces `MODEL.gemm.kernel.f32.12x32`, `MODEL.gemm.pack...`,
`MODEL.im2col...`.  Exits 2 when perf is not installed.  (Not named profile.py: the
scripts here run with bench/ first on sys.path, where that name would hide the standard
library's profile module, which cProfile, and so torch, imports.)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from run import compile_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=10, help="runs of the model (default 10)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=25, help="symbols to print (default 25)")
    args = parser.parse_args(argv)
    if shutil.which("perf") is None:
        print("profile: `perf` is not installed (Debian: apt install linux-perf)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="aotc-profile-") as tmp:
        work = Path(tmp)
        model = compile_model(args.model, work)
        data = work / "perf.data"
        driver = [
            str(model.program),
            str(model.inputs_bin),
            str(work / "out.bin"),
            str(args.threads),
        ]
        subprocess.run(
            ["perf", "record", "-q", "-o", str(data), *driver],
            input=f"1 {args.runs}\nq\n",
            text=True,
            check=True,
            capture_output=True,
        )
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--sort", "symbol", "--stdio"],
            capture_output=True,
            text=True,
            check=True,
        )
    lines = [line for line in report.stdout.splitlines() if line.strip() and line[0] != "#"]
    print(
        f"{args.model}: compiled in {model.compile_s:.1f} s; {args.runs} runs, "
        f"{args.threads} thread(s); share of samples:"
    )
    for line in lines[: args.top]:
        print(line.rstrip(" -"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
