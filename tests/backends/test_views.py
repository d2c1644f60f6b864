"""views.py: the strides (or mixed-radix digits) of re-indexed buffers.

Random chains of transposes and reshapes of an arange are walked through the
view rules and compared with numpy doing the same to the array: element
`index` of the view must sit at the offset numpy's result holds there.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from aotc.backends.cpu import views
from aotc.ir import DType


def _offsets(view: views.View) -> np.ndarray:
    """The offset of every element of `view` from its dims' digits (row-major walk)."""
    out = np.zeros(view.dims, np.int64)
    for index in itertools.product(*(range(e) for e in view.dims)):
        total = 0
        for dim, position in enumerate(index):
            digits = view.dim_digits(dim)
            inner = int(np.prod([e for e, _ in digits]))
            for extent, stride in digits:
                inner //= extent
                total += (position // inner) % extent * stride
        out[index] = total
    return out


def _transposed(view: views.View, perm) -> views.View:
    digits = [view.dim_digits(d) for d in perm]
    strides = [views._merged(d) for d in digits]
    dims = tuple(view.dims[d] for d in perm)
    return views.View(None, dims, tuple(strides), DType.F32, tuple(digits))


def _reshaped(view: views.View, dims) -> views.View | None:
    digits = views._reshaped_digits(view, dims)
    if digits is None:
        return None
    strides = [views._merged(d) for d in digits]
    return views.View(None, tuple(dims), tuple(strides), DType.F32, tuple(digits))


def _factorizations(rng, total: int) -> tuple[int, ...]:
    dims = []
    while total > 1:
        divisors = [d for d in range(2, total + 1) if total % d == 0]
        d = int(rng.choice(divisors))
        dims.append(d)
        total //= d
    rng.shuffle(dims)
    return tuple(dims) or (1,)


@pytest.mark.parametrize("seed", range(40))
def test_random_transpose_reshape_chains(seed):
    rng = np.random.default_rng(seed)
    total = int(rng.choice([12, 24, 36, 60, 64]))
    dims = _factorizations(rng, total)
    array = np.arange(total).reshape(dims)
    strides = tuple(int(s) // 8 for s in array.strides)
    view = views.View(None, dims, strides, DType.F32)
    for _ in range(4):
        if rng.random() < 0.5 and len(view.dims) > 1:
            perm = tuple(rng.permutation(len(view.dims)))
            view, array = _transposed(view, perm), array.transpose(perm)
        else:
            new_dims = _factorizations(rng, total)
            reshaped = _reshaped(view, new_dims)
            if reshaped is None:  # a new dim cuts a digit unevenly: refused, not wrong
                continue
            view, array = reshaped, array.reshape(new_dims)
        np.testing.assert_array_equal(_offsets(view), array)


def test_channel_shuffle_is_one_digit_pair():
    """[4*34] -> [4, 34] -> transposed -> [136]: stride None, digits (34: 784), (4: 26656)."""
    view = views.View(None, (1, 136, 28, 28), (136 * 784, 784, 28, 1), DType.F32)
    view = _reshaped(view, (1, 4, 34, 28, 28))
    view = _reshaped(_transposed(view, (0, 2, 1, 3, 4)), (1, 136, 28, 28))
    assert view.strides[1:] == (None, 28, 1)
    assert view.dim_digits(1) == ((34, 784), (4, 34 * 784))
