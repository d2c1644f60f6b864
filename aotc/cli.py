"""`aotc` command line: argv -> CompileOptions -> driver.  Nothing imports this.

Every user-facing failure (AotcError, a bad flag) is printed as ONE line on
stderr with exit code 2; no traceback, no half-written output folder.  A bug
in aotc is one line too, with exit code 3; the environment variable
AOTC_TRACEBACK=1 (read here only) shows its traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import progress
from .errors import AotcError, one_line
from .ir.bounds import DimRange


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line instead of usage + message."""

    def error(self, message: str):
        self.exit(2, f"aotc: error: {message} (see 'aotc --help')\n")


def parse_shape(spec: str) -> tuple[str, tuple]:
    """`NAME=1x3x224x224` (or `NAME=` for a scalar) -> (name, dims); a dim written
    `LOW..HIGH` (`ids=1..8x1..512`) is a DimRange: any extent in it at run time."""
    name, sep, dims = spec.rpartition("=")
    if not sep or not name:
        raise AotcError(f"--input '{spec}': expected NAME=DIMS, e.g. input=1x3x224x224")
    parts = [p for p in dims.replace(",", "x").split("x")] if dims else []
    try:
        return name, tuple(_dim(p) for p in parts)
    except ValueError:
        raise AotcError(
            f"--input '{spec}': dims must be non-negative integers or ranges LOW..HIGH "
            "joined by 'x'"
        ) from None


def parse_dim(spec: str) -> tuple[str, int | DimRange]:
    """`--dim NAME=LOW..HIGH` (or `NAME=N`): the extent of the model's symbolic dim NAME
    in every input that names it."""
    name, sep, text = spec.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, _dim(text)
    except ValueError:
        raise AotcError(
            f"--dim '{spec}': expected NAME=N or NAME=LOW..HIGH, e.g. batch=1..8"
        ) from None


def _dim(text: str) -> int | DimRange:
    """`128` -> 128; `1..8` -> DimRange(1, 8); ValueError otherwise."""
    low, dots, high = text.partition("..")
    if not dots:
        if not text.isdigit():
            raise ValueError(text)
        return int(text)
    if not (low.isdigit() and high.isdigit()):
        raise ValueError(text)
    return DimRange(int(low), int(high))


def parse_values(spec: str) -> tuple[str, np.ndarray]:
    """`NAME=1,3,224,224` -> (name, values); the input's dtype and shape come from the model."""
    name, sep, text = spec.partition("=")
    if not sep or not name:
        raise AotcError(f"--const '{spec}': expected NAME=VALUES, e.g. shape=1,3,224,224")
    try:
        values = [float(v) if any(c in v for c in ".eEn") else int(v) for v in text.split(",") if v]
    except ValueError:
        raise AotcError(f"--const '{spec}': values must be numbers separated by ','") from None
    return name, np.array(values)


def parse_count(spec: str) -> tuple[str, int]:
    """`boxes=300` -> ("boxes", 300): the most results output NAME's node keeps."""
    name, sep, text = spec.partition("=")
    if not sep or not name or not text.isdigit():
        raise AotcError(f"--count '{spec}': expected NAME=N, e.g. selected=300")
    return name, int(text)


class _PrintCMakeDir(argparse.Action):
    """`aotc --cmake-dir`: where aotcConfig.cmake is (cmake -Daotc_DIR=...), then exit 0.
    An action, as argparse's --version is, so that no subcommand is needed."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(Path(__file__).resolve().parent / "cmake")
        parser.exit(0)


def _build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="aotc", description="Ahead-of-time neural network compiler.")
    parser.add_argument(
        "--cmake-dir",
        action=_PrintCMakeDir,
        nargs=0,
        help="print the directory of aotc's CMake package (aotcConfig.cmake) and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)

    compile_cmd = commands.add_parser(
        "compile", help="compile a model to NAME.h, NAME.o and libNAME.a"
    )
    compile_cmd.add_argument("model", help="model file: .onnx, or XLA HLO text")
    compile_cmd.add_argument("-o", "--output", default="build", help="output folder (build)")
    compile_cmd.add_argument("--name", help="symbol prefix (default: the file name)")
    compile_cmd.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="shape of an input, e.g. input=1x3x224x224; NAME= for a scalar; a dim "
        "LOW..HIGH takes any extent in that range at run time, e.g. ids=1..8x1..512 "
        "(repeatable)",
    )
    compile_cmd.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=RANGE",
        help="extent of the model's symbolic dim NAME in every input that uses it: N, or "
        "LOW..HIGH for any extent in that range at run time, e.g. batch=1..8 (repeatable)",
    )
    compile_cmd.add_argument(
        "--count",
        action="append",
        default=[],
        metavar="NAME=N",
        help="the most results of a count the data gives (NonZero, NonMaxSuppression, "
        "Compress, TopK by a k that is data) whose node outputs NAME: buffers sized for N "
        "instead of the model's bound, and a call whose data gives more keeps the first N "
        "(repeatable)",
    )
    compile_cmd.add_argument(
        "--const",
        action="append",
        default=[],
        metavar="NAME=VALUES",
        help="fix an input to values, e.g. shape=1,-1, or sr=16000 for a scalar input (it "
        "becomes a constant, of the model's shape where that is static; repeatable)",
    )
    compile_cmd.add_argument(
        "--target",
        default="host",
        help="host (default), x86_64:x86-64-v2, aarch64-linux-gnu:cortex-a72, ... (aotc "
        "targets), or NVIDIA GPUs: cuda:sm_90, cuda:sm_80,sm_90",
    )
    compile_cmd.add_argument(
        "-O",
        dest="opt_level",
        type=int,
        default=2,
        choices=range(4),
        metavar="{0..3}",
        help="optimization level (default 2; below 2, no Winograd convolutions)",
    )
    compile_cmd.add_argument(
        "--dump-hlo", type=Path, metavar="DIR", help="write the module after every pass"
    )
    compile_cmd.add_argument("--verify", action="store_true", help="verify the IR after every pass")
    compile_cmd.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="threads the model uses unless NAME_set_num_threads or $AOTC_NUM_THREADS say "
        "otherwise (default 1; 0: all CPUs)",
    )
    compile_cmd.add_argument(
        "--profile",
        action="store_true",
        help="time every kernel into counters the header declares (NAME_profile_ns...)",
    )
    compile_cmd.add_argument(
        "--weights",
        choices=("embedded", "external"),
        default="embedded",
        help="embedded (default): the weights inside NAME.o; external: in NAME.weights "
        "beside it, which the application maps and hands over (NAME_load_weights or "
        "NAME_set_weights) before NAME_run",
    )
    compile_cmd.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    inspect_cmd = commands.add_parser(
        "inspect", help="print the optimized HLO, the kernels and the memory plan"
    )
    inspect_cmd.add_argument("model", help="model file: .onnx, or XLA HLO text")
    inspect_cmd.add_argument("--name", help="symbol prefix (default: the file name)")
    inspect_cmd.add_argument("--input", action="append", default=[], metavar="NAME=DIMS")
    inspect_cmd.add_argument("--dim", action="append", default=[], metavar="NAME=RANGE")
    inspect_cmd.add_argument("--const", action="append", default=[], metavar="NAME=VALUES")
    inspect_cmd.add_argument("--target", default="host")
    inspect_cmd.add_argument(
        "-O", dest="opt_level", type=int, default=2, choices=range(4), metavar="{0..3}"
    )
    inspect_cmd.add_argument(
        "--memory-plan",
        type=Path,
        metavar="PLAN.svg",
        help="also draw the memory plan as an SVG picture",
    )

    profile_cmd = commands.add_parser(
        "profile", help="run the model and print the time, bytes and FLOPs of every kernel"
    )
    profile_cmd.add_argument("model", help="model file: .onnx, or XLA HLO text")
    profile_cmd.add_argument("--input", action="append", default=[], metavar="NAME=DIMS")
    profile_cmd.add_argument("--const", action="append", default=[], metavar="NAME=VALUES")
    profile_cmd.add_argument("--target", default="host", help="a target this machine runs")
    profile_cmd.add_argument(
        "-O", dest="opt_level", type=int, default=2, choices=range(4), metavar="{0..3}"
    )
    profile_cmd.add_argument(
        "--threads", type=int, default=1, metavar="N", help="threads (default 1; 0: all CPUs)"
    )
    profile_cmd.add_argument(
        "--runs", type=_positive, default=10, metavar="N", help="timed runs (default 10)"
    )
    profile_cmd.add_argument(
        "--top", type=_positive, metavar="N", help="print the N slowest kernels only"
    )
    profile_cmd.add_argument(
        "--remeasure",
        action="store_true",
        help="measure this machine's bandwidth and peak again (else cached)",
    )

    for command in (compile_cmd, inspect_cmd, profile_cmd):
        command.add_argument(
            "--max-memory",
            metavar="SIZE",
            help="refuse a model whose tensors, arena and weights need more than SIZE, e.g. "
            "64G (default: this machine's memory)",
        )
        command.add_argument(
            "--plan-for",
            choices=("memory", "speed"),
            default="memory",
            help="memory (default): a kernel whose fastest form's temporary would raise "
            "the memory plan's peak takes a shorter band of it or a slower form that fits "
            "(the smallest plan); speed: every kernel its fastest form",
        )

    commands.add_parser(
        "targets", help="list the supported targets, what each implies, and the C compilers found"
    )
    return parser


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not '{text}'")
    return int(text)


def _options(args):
    from .driver import CompileOptions
    from .memory_limits import parse_size

    shapes = dict(parse_shape(spec) for spec in args.input)
    values = dict(parse_values(spec) for spec in args.const)
    return CompileOptions(
        name=getattr(args, "name", None),
        input_shapes=shapes,
        dim_extents=dict(parse_dim(spec) for spec in getattr(args, "dim", [])),
        count_caps=dict(parse_count(spec) for spec in getattr(args, "count", [])),
        input_values=values,
        target=args.target,
        opt_level=args.opt_level,
        verify=getattr(args, "verify", False),
        dump_hlo=getattr(args, "dump_hlo", None),
        threads=getattr(args, "threads", 1),
        profile=getattr(args, "profile", False),
        max_memory=None if args.max_memory is None else parse_size(args.max_memory),
        weights=getattr(args, "weights", "embedded"),
        plan_for=getattr(args, "plan_for", "memory"),
    )


def _compile(args) -> None:
    from .driver import compile_model

    started = time.perf_counter()
    # a progress line on a terminal, for compiles long enough to wonder about
    shown = sys.stderr.isatty() and not args.quiet
    with progress.reporting(sys.stderr) if shown else contextlib.nullcontext():
        compiled = compile_model(args.model, _options(args))
        paths = compiled.write(args.output)
    if paths.library is None:  # no C compiler for the target: the object is still useful
        library = f"lib{compiled.name}.a"
        print(
            f"aotc: warning: {paths.missing}: wrote the runtime sources instead of "
            f"{library}; to build it run the command below",
            file=sys.stderr,
        )
        print(paths.finish)
    if not args.quiet:
        print(summary(compiled, paths, time.perf_counter() - started))


def _targets() -> None:
    """`aotc targets`: each backend's notable targets, how to name any other, its tools."""
    from .driver import describe_targets

    print(describe_targets())


def _inspect(args) -> None:
    from . import artifacts, report
    from .driver import compile_model
    from .ir.text import print_module

    compiled = compile_model(args.model, _options(args))
    print(print_module(compiled.module, elide_constants_over=16))
    print(report.kernel_table(report.kernels(compiled.plan), compiled.kernel_forms()))
    print()
    print(compiled.plan.to_text(), end="")
    if args.memory_plan is not None:
        svg = artifacts.render_memory_plan_svg(compiled.name, compiled.plan)
        try:
            args.memory_plan.write_text(svg)
        except OSError as e:
            raise AotcError(f"cannot write {args.memory_plan}: {e.strerror or e}") from None


def _profile(args) -> None:
    """`aotc profile`: an instrumented build run here, its kernels by time."""
    from . import profiling

    profile = profiling.profile_model(
        args.model, _options(args), args.runs, remeasure=args.remeasure
    )
    print(profiling.profile_table(profile, args.top))


def summary(compiled, paths, seconds: float) -> str:
    """The few lines a user wants after a compile."""
    s = compiled.stats
    built = [paths.library] if paths.library is not None else list(paths.runtime_sources)
    written = [paths.header, paths.object, *filter(None, [paths.weights]), *built]
    lines = [f"aotc: {compiled.source} -> {paths.header.parent}/ ({compiled.target})"]
    for kind, specs in (("input ", compiled.inputs), ("output", compiled.outputs)):
        for spec in specs:  # a bounded dim as its bound, <=N
            lines.append(f"  {kind} {spec.name}: {spec.type_text}")
    lines += [
        f"  kernels       {s.kernel_count}",
        (
            f"  arena         {s.arena_bytes:,} bytes "
            f"(lower bound {s.lower_bound:,}, naive {s.naive_total:,})"
        ),
    ]
    if s.workspace_bytes:  # scratch beyond the arena: GEMM packing buffers
        lines.append(f"  workspace     {s.workspace_bytes:,} bytes")
    lines += [
        f"  weights       {s.weight_bytes:,} bytes",
        f"  wrote         {', '.join(p.name for p in written)}",
        f"  time          {seconds:.2f} s",
    ]
    lines += [f"  note          {note}" for note in compiled.module.notes]
    if paths.link:
        lines.append(f"  link with     {paths.link}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "compile":
            _compile(args)
        elif args.command == "inspect":
            _inspect(args)
        elif args.command == "profile":
            _profile(args)
        elif args.command == "targets":
            _targets()
    except AotcError as error:
        print(f"aotc: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a compiler bug: still one line, never a traceback
        if os.environ.get("AOTC_TRACEBACK"):
            raise
        print(
            f"aotc: internal error: {type(error).__name__}: {one_line(str(error))} "
            "(a bug in aotc; rerun with AOTC_TRACEBACK=1 for details)",
            file=sys.stderr,
        )
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
