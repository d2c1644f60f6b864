"""Every ONNX lowering through the real pipeline: compile, link a shared
object, call it through cffi, compare with onnx.reference.ReferenceEvaluator.

The cases (models, inputs, tolerances) are the frontend tests' list; here they
run as compiled code instead of through the IR evaluator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "frontends"))
from onnx_case_kit import assert_integers_match
from onnx_cases import CASES, expected_outputs

import aotc.backend


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_compiled_op_matches_reference(case):
    # onnx.reference, or numpy for the few cases where onnx.reference is wrong
    expected = expected_outputs(case)
    rep = aotc.backend.prepare(case.model)
    inputs = [case.inputs[i.name] for i in case.model.graph.input if i.name in case.inputs]
    got = rep.run(inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.shape == e.shape
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
        else:
            assert_integers_match(g, e, case.atol)
