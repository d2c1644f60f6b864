"""The ONNX backend node test suite, every case through compiled code (static, and with
its inputs' dims bounded).

Cases come from `onnx.backend.test.case.node.collect_testcases`; each is
compiled, linked, loaded and compared as onnx's own runner compares
(aotc.conformance.run_case).  tests/onnx_node_expected_failures.txt lists the
cases known to fail, one per line with the reason; the list is strict: a
listed case that passes fails the run, so the list stays true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aotc.conformance import load_cases, run_case

EXPECTED_FILE = Path(__file__).parent / "onnx_node_expected_failures.txt"


def expected_failures() -> dict[str, str]:
    table = {}
    for line in EXPECTED_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.partition("\t")
            table[name.strip()] = reason.strip()
    return table


CASES = {case.name: case for case in load_cases()}
EXPECTED = expected_failures()


def test_expected_failures_name_real_cases():
    assert not set(EXPECTED) - set(CASES), sorted(set(EXPECTED) - set(CASES))
    assert all(EXPECTED.values()), "every expected failure needs a reason"


# every case at -O0 (no passes) and at the default level: passes must not change results
@pytest.mark.parametrize("opt_level", [0, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name, opt_level):
    result = run_case(CASES[name], opt_level)
    if name in EXPECTED:
        assert not result.passed, f"{name} passes now: remove it from {EXPECTED_FILE.name}"
        pytest.xfail(EXPECTED[name])
    assert result.passed, result.reason


# every case again with its inputs' dims named, so that aotc.backend compiles it once with
# those dims bounded (padded to the next power of two) where its ops allow: padding
# must not change results either
@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case_with_bounded_dims(name):
    result = run_case(CASES[name], 2, bounded=True)
    if name in EXPECTED:
        assert not result.passed, f"{name} passes now: remove it from {EXPECTED_FILE.name}"
        pytest.xfail(EXPECTED[name])
    assert result.passed, result.reason
