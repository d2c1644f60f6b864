"""The ONNX node conformance suite, run through the real pipeline.

    python -m aotc.conformance [-j N] [-k SUBSTRING] [--bounded] [--write-expected FILE]

Every case of `onnx.backend.test.case.node.collect_testcases` is prepared
with `aotc.backend`, run on each of its data sets, and compared the way
`onnx.backend.test.runner` compares (same count, shape and dtype; allclose
with the case's rtol/atol, exact for integers and bools).  Prints the pass
count and the failures grouped by reason, and writes docs/onnx_coverage.md.
Cases run in worker processes so that a crash is reported, not fatal.

With --bounded, every dim of more than one element of every input is named
(`named_dims`), so that `aotc.backend` compiles the case once with those dims
bounded by the next power of two of their extents (an extent of 3 runs padded to 4),
falling back to a build per shape where the model's ops refuse bounded dims; the
count of cases that ran bounded is printed with the pass count.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class CaseResult:
    name: str
    passed: bool
    reason: str  # "" when passed
    bounded: bool = False  # it ran compiled once for bounded dims (--bounded)


def load_cases(substring: str = "") -> list:
    """The node test cases (about 1,900 with onnx 1.23), sorted by name."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return sorted((c for c in cases if substring in c.name), key=lambda c: c.name)


def check_outputs(expected, got, rtol: float, atol: float) -> None:
    """Raise AssertionError unless `got` matches `expected` as the ONNX runner requires."""
    np.testing.assert_equal(len(got), len(expected))
    for i, (ref, out) in enumerate(zip(expected, got)):
        if isinstance(ref, (list, tuple)):
            assert isinstance(out, (list, tuple)), f"output {i}: expected a sequence"
            check_outputs(ref, out, rtol, atol)
            continue
        ref, out = np.asarray(ref), np.asarray(out)
        np.testing.assert_array_equal(out.shape, ref.shape, err_msg=f"output {i} shape")
        np.testing.assert_equal(out.dtype, ref.dtype)
        output_rtol = rtol
        if out.dtype.name == "bfloat16":
            output_rtol = max(rtol, 2**-6)  # two bf16 ulps, as the runner allows
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        elif out.dtype.kind not in "fcbiu":  # float8 and other ml_dtypes types
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        np.testing.assert_allclose(out, ref, rtol=output_rtol, atol=atol)


def run_case(case, opt_level: int = 2, bounded: bool = False) -> CaseResult:
    """Compile and run one case on all its data sets (`bounded`: its dims named, see
    `named_dims`); never raises for case failures."""
    import onnx

    from . import backend
    from .errors import AotcError

    ran_bounded = False
    try:
        model = named_dims(case.model) if bounded else case.model
        rep = backend.prepare(model, "CPU", opt_level=opt_level)
        for inputs, expected in case.data_sets:
            inputs = [_to_array(x) for x in inputs]
            expected = [_to_array(x) for x in expected]
            check_outputs(expected, list(rep.run(inputs)), case.rtol, case.atol)
            ran_bounded = rep.ran_bounded
    except AssertionError as e:
        return CaseResult(case.name, False, "mismatch: " + _first_line(str(e)))
    except AotcError as e:
        return CaseResult(case.name, False, f"{type(e).__name__}: {_first_line(str(e))}")
    except onnx.checker.ValidationError as e:
        return CaseResult(case.name, False, "invalid model: " + _first_line(str(e)))
    except Exception as e:  # noqa: BLE001 - a compiler bug, reported per case
        return CaseResult(
            case.name, False, f"internal error {type(e).__name__}: {_first_line(str(e))}"
        )
    return CaseResult(case.name, True, "", ran_bounded)


def named_dims(model):
    """A copy of `model` whose inputs' and outputs' dims of more than one element are
    named (one name per tensor and dim; unit dims stay: they broadcast), its
    value_info left out."""
    import onnx

    named = onnx.ModelProto()
    named.CopyFrom(model)
    graph = named.graph
    initializers = {t.name for t in graph.initializer}
    for info in [*graph.input, *graph.output]:
        if info.name in initializers or not info.type.HasField("tensor_type"):
            continue
        for k, dim in enumerate(info.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 1:
                dim.dim_param = f"{info.name}_{k}"
    del graph.value_info[:]
    return named


def _to_array(value):
    import onnx

    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_to_array(v) for v in value]
    return value


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def reason_group(reason: str) -> str:
    """A short key to group failures by (the op or the kind of error)."""
    if reason.startswith("mismatch"):
        return "mismatch"
    if "unsupported ONNX ops:" in reason:
        return "unsupported op " + reason.split("unsupported ONNX ops:")[1].split("(")[0].strip()
    return reason.split(":")[0]


# -- running many cases in worker processes -------------------------------------


def _worker(names: list[str], opt_level: int, bounded: bool) -> None:
    """Run the named cases, printing one JSON line as each starts and ends."""
    wanted = set(names)
    for case in load_cases():
        if case.name not in wanted:
            continue
        print(json.dumps({"start": case.name}), flush=True)
        result = run_case(case, opt_level, bounded)
        print(json.dumps(dataclasses.asdict(result)), flush=True)


def run_all(
    names: list[str], jobs: int, opt_level: int = 2, bounded: bool = False
) -> list[CaseResult]:
    """Run cases in `jobs` subprocesses; a case that kills its process is a 'crash'."""
    results: dict[str, CaseResult] = {}
    threads = [
        threading.Thread(target=_run_chunk, args=(names[i::jobs], results, opt_level, bounded))
        for i in range(jobs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[n] for n in names]


def _run_chunk(
    chunk: list[str], results: dict[str, CaseResult], opt_level: int, bounded: bool
) -> None:
    """One worker process at a time over `chunk`, restarted after a crash."""
    while chunk:
        proc = _spawn(chunk, opt_level, bounded)
        started = None
        for line in proc.stdout:
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results[record["name"]] = CaseResult(**record)
                started = None
        proc.wait()
        if started is not None:
            results[started] = CaseResult(started, False, f"crash (exit {proc.returncode})")
        elif proc.returncode != 0:
            for name in chunk:
                results.setdefault(name, CaseResult(name, False, "worker failed"))
        chunk = [n for n in chunk if n not in results]


def _spawn(names: list[str], opt_level: int, bounded: bool) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aotc.conformance",
            "-O",
            str(opt_level),
            *(["--bounded"] if bounded else []),
            "--worker",
            ",".join(names),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def coverage_table(cases, results: list[CaseResult]) -> str:
    """Markdown: per op type, cases passed / total, and the failing cases."""
    by_op: dict[str, list[CaseResult]] = collections.defaultdict(list)
    ops = {c.name: sorted({n.op_type for n in c.model.graph.node}) for c in cases}
    for result in results:
        for op in ops[result.name] or ["(none)"]:
            by_op[op].append(result)
    passed = sum(r.passed for r in results)
    lines = [
        "# ONNX node conformance",
        "",
        f"Generated by `python -m aotc.conformance`: {passed} of {len(results)} cases pass.",
        "",
        "| op | passed | cases | failing cases |",
        "|---|---:|---:|---|",
    ]
    for op in sorted(by_op):
        rs = by_op[op]
        failing = ", ".join(r.name for r in rs if not r.passed)
        lines.append(f"| {op} | {sum(r.passed for r in rs)} | {len(rs)} | {failing} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aotc.conformance")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("-O", dest="opt_level", type=int, default=2, choices=range(4))
    parser.add_argument("--bounded", action="store_true", help="name the inputs' dims")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--coverage", type=Path, default=Path("docs/onnx_coverage.md"))
    parser.add_argument("--write-expected", type=Path, help="write the expected-failure file")
    args = parser.parse_args(argv)
    if args.worker is not None:
        _worker(args.worker.split(","), args.opt_level, args.bounded)
        return 0
    cases = load_cases(args.k)
    names = [c.name for c in cases]
    results = run_all(names, max(1, args.jobs), args.opt_level, args.bounded)
    failures = [r for r in results if not r.passed]
    groups = collections.Counter(reason_group(r.reason) for r in failures)
    print(f"passed {len(results) - len(failures)} of {len(results)}")
    if args.bounded:
        print(
            f"  ran bounded: {sum(r.bounded for r in results)} ({sum(r.bounded and r.passed for r in results)} passed)"
        )
    for group, count in groups.most_common():
        print(f"  {count:5d}  {group}")
    if not args.k and not args.bounded:
        args.coverage.parent.mkdir(parents=True, exist_ok=True)
        args.coverage.write_text(coverage_table(cases, results))
    if args.write_expected:
        args.write_expected.write_text("".join(f"{r.name}\t{r.reason}\n" for r in failures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
