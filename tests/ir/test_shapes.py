"""Shape helpers: a reshape's runs of dims of equal size."""

from __future__ import annotations

import math

import pytest

from aotc.ir.shapes import reshape_groups


@pytest.mark.parametrize(
    "in_dims, out_dims, groups",
    [
        ((4, 6), (4, 6), [((0,), (0,)), ((1,), (1,))]),
        ((6, 4), (6, 2, 2), [((0,), (0,)), ((1,), (1, 2))]),  # a split
        ((2, 3, 5), (6, 5), [((0, 1), (0,)), ((2,), (1,))]),  # a merge
        ((2, 3), (3, 2), [((0, 1), (0, 1))]),  # neither: one run
        # the stride phases of a transposed convolution, interleaved (conv_phases.py)
        (
            (1, 128, 80, 80),
            (1, 1, 2, 2, 32, 80, 80),
            [((0, 1), (0, 1, 2, 3, 4)), ((2,), (5,)), ((3,), (6,))],
        ),
        (
            (1, 1, 32, 80, 2, 80, 2),
            (1, 32, 160, 160),
            [((0, 1, 2), (0, 1)), ((3, 4), (2,)), ((5, 6), (3,))],
        ),
        # unit dims join the run after them; trailing ones make their own
        ((1, 1, 6), (1, 1, 6, 1), [((0, 1, 2), (0, 1, 2)), ((), (3,))]),
        ((), (1, 1), [((), (0, 1))]),
        ((0, 3), (3, 0), [((0, 1), (0, 1))]),  # empty: one run
    ],
)
def test_reshape_groups(in_dims, out_dims, groups):
    assert reshape_groups(in_dims, out_dims) == groups
    for ins, outs in groups:
        assert math.prod(in_dims[i] for i in ins) == math.prod(out_dims[o] for o in outs)
