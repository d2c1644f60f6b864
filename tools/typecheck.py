#!/usr/bin/env python3
"""mypy against a committed baseline that only shrinks.

    python tools/typecheck.py            # fails on an error not in the baseline,
                                         # and on a baseline entry that is gone
    python tools/typecheck.py --update   # rewrite the baseline from the current code

mypy runs with the settings in pyproject.toml ([tool.mypy]).  Its errors are compared
without line numbers -- "path: [code] message", counted -- so an edit elsewhere in a file
does not churn the baseline (.ci/mypy-baseline.txt).  A fixed error must leave the
baseline in the same commit (run --update), so the count can only go down; a new error
is fixed, or, where it is a deliberate trade, written into the baseline with --update
where the reviewer sees it.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / ".ci" / "mypy-baseline.txt"

# path:line[:column]: error: message  [code]
_ERROR = re.compile(
    r"^(?P<path>[^:\s][^:]*?):(?:\d+:)?(?:\d+:)? error: (?P<message>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)
# mypy names other lines in some messages ("defined on line 12"): those move with edits too
_LINE_REFERENCE = re.compile(r"\bline \d+\b")
_BASELINE_ENTRY = re.compile(r"^\s*(?P<count>\d+) (?P<key>.+)$")

HEADER = """\
# mypy errors the code had when this was written: "count path: [code] message".
# Shrink it as errors are fixed; `python tools/typecheck.py --update` rewrites it.
"""


def run_mypy(extra_args: list[str]) -> tuple[collections.Counter[str], str]:
    """The errors mypy reports now, as normalized keys with their counts, and its output."""
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--no-error-summary",
        "--no-pretty",
        "--no-color-output",
        "--show-error-codes",
        "--hide-error-context",
        *extra_args,
    ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1):  # 2: mypy itself failed (bad configuration, crash)
        sys.exit(f"mypy failed (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    errors: collections.Counter[str] = collections.Counter()
    for line in result.stdout.splitlines():
        match = _ERROR.match(line)
        if match:
            errors[normalize(match["path"], match["code"], match["message"])] += 1
        elif " error: " in line:
            sys.exit(f"tools/typecheck.py cannot read this mypy line:\n{line}")
    return errors, result.stdout


def normalize(path: str, code: str | None, message: str) -> str:
    path = Path(path).as_posix()
    message = _LINE_REFERENCE.sub("line N", message)
    return f"{path}: [{code or 'error'}] {message}"


def read_baseline(path: Path) -> collections.Counter[str]:
    entries: collections.Counter[str] = collections.Counter()
    if not path.exists():
        return entries
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _BASELINE_ENTRY.match(line)
        if not match:
            sys.exit(f"{path}:{number}: not 'count path: [code] message': {line!r}")
        entries[match["key"]] += int(match["count"])
    return entries


def write_baseline(path: Path, errors: collections.Counter[str]) -> None:
    width = len(str(max(errors.values(), default=1)))
    lines = [f"{count:>{width}} {key}" for key, count in sorted(errors.items())]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(line + "\n" for line in lines))


def describe(entries: collections.Counter[str]) -> str:
    return "\n".join(
        f"  {key}" + (f"  (x{count})" if count > 1 else "")
        for key, count in sorted(entries.items())
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--update", action="store_true", help="rewrite the baseline from the current code"
    )
    parser.add_argument(
        "--baseline", type=Path, default=BASELINE, help=f"default: {BASELINE.relative_to(REPO)}"
    )
    parser.add_argument("mypy_args", nargs="*", help="passed to mypy (after --)")
    args = parser.parse_args(argv)

    current, _ = run_mypy(args.mypy_args)
    baseline = read_baseline(args.baseline)
    new = current - baseline
    gone = baseline - current
    total = sum(current.values())

    if args.update:
        write_baseline(args.baseline, current)
        print(
            f"{args.baseline.relative_to(REPO) if args.baseline.is_relative_to(REPO) else args.baseline}: "
            f"{total} errors ({sum(baseline.values())} before; {sum(gone.values())} gone, "
            f"{sum(new.values())} new)"
        )
        if new and baseline:
            print("the baseline grew by these (say why in the commit message):\n" + describe(new))
        return 0

    status = 0
    if new:
        status = 1
        print(f"mypy: {sum(new.values())} error(s) not in the baseline:\n{describe(new)}\n")
        print(
            "Fix them (run `python -m mypy` for the line numbers).  If a baseline entry below\n"
            "is the same error reworded (a dependency's type stubs changed), run\n"
            "`python tools/typecheck.py --update`.\n"
        )
    if gone:
        status = 1
        print(
            f"mypy: {sum(gone.values())} baseline error(s) are gone -- shrink the baseline:\n{describe(gone)}\n"
        )
        print("Run `python tools/typecheck.py --update` and commit .ci/mypy-baseline.txt.\n")
    if status == 0:
        print(f"mypy: {total} errors, all in the baseline")
    return status


if __name__ == "__main__":
    sys.exit(main())
