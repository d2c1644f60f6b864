"""A fixed-seed sample of bench/fuzz.py: every bad input ends in one line and exit 2.

Each mutation kind of `fuzz.MUTATORS` is a test over its cases of the sample: none may
end as an internal error, a crash or a hang, nor leave files behind.  The cases run
forked from this process (aotc imported once), two at a time.  Kinds that still fail are
listed in KNOWN_FAILURES with what they hit, and xfail (not strict: a fixed one passes);
the full run is `python bench/fuzz.py --cases 1500 --seed 1`.
"""

from __future__ import annotations

import collections
import random

import numpy as np
import onnx
import pytest
from aotc_testing import bench_module

SEED = 30
PER_KIND = 5
# kinds whose cases are slow to compile (or hang until the timeout): one case each
SLOW = {"graph.wide": 1, "graph.chain": 1}
TIMEOUT = 20.0

# graphs of 1,000 nodes (a node of 1,000 inputs) here, which compile in seconds; the full
# run's 20,000 show what stays slow
GRAPH_SIZE = 1_000
# kind -> what its cases hit now; each becomes an xfail naming it
KNOWN_FAILURES: dict[str, str] = {}


fuzz = bench_module("fuzz")
fuzz.GRAPH_SIZE = GRAPH_SIZE


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, list]:
    cases = []
    for kind in fuzz.MUTATORS:
        for case in fuzz.generate(SLOW.get(kind, PER_KIND), SEED, [kind]):
            if case.kind == kind:  # a prefix may match a longer kind too
                cases.append(case)
    ran = fuzz.run_cases(cases, tmp_path_factory.mktemp("fuzz"), jobs=2, timeout=TIMEOUT)
    by_kind = collections.defaultdict(list)
    for result in ran:
        by_kind[result.case.kind].append(result)
    return by_kind


def _describe(result) -> str:
    left = f", left behind {result.left_behind}" if result.left_behind else ""
    return (
        f"#{result.index} {result.cls} (exit {result.exit}{left}): {result.case.detail}\n"
        f"    {result.message}"
    )


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(k, marks=pytest.mark.xfail(reason=f"{k}: {KNOWN_FAILURES[k]}", strict=False))
        if k in KNOWN_FAILURES
        else k
        for k in fuzz.MUTATORS
    ],
)
def test_kind_ends_cleanly(results, kind):
    ran = results[kind]
    assert ran, f"no case of {kind} ran"
    bad = [r for r in ran if not r.clean]
    assert not bad, f"{len(bad)} of {len(ran)} {kind} cases:\n" + "\n".join(map(_describe, bad))


def test_seed_models_compile(tmp_path):
    """The harness's baseline: every unmutated seed model is accepted (so a refusal of a
    mutant is the mutation's doing), and its classes are what the CLI did."""
    cases = []
    for name, build in fuzz.SEEDS.items():
        graph = build(np.random.default_rng(0))
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=9
        )
        cases.append(fuzz._onnx_case("seed", name, model))
    cases.append(fuzz.MUTATORS["cli.missing_file"](random.Random(0)))
    ran = fuzz.run_cases(cases, tmp_path, jobs=2, timeout=60)
    assert [r.cls for r in ran] == ["accepted"] * len(fuzz.SEEDS) + ["refusal"], [
        _describe(r) for r in ran
    ]
    assert "no such file" in ran[-1].message
