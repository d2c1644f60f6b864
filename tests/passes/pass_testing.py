"""Pass test harness: HLO text in, expected HLO text out, evaluator equivalence."""

from __future__ import annotations

import re

import numpy as np

from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module, print_module
from aotc.ir.types import DType
from aotc.ir.verify import verify


def canonical(text: str) -> str:
    """Printed module with instruction names renumbered by first appearance.

    Passes name new instructions with fresh counters; tests compare structure.
    """
    names: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        name = match.group(1)
        names.setdefault(name, f"v{len(names)}")
        return "%" + names[name]

    return re.sub(r"%([A-Za-z_][\w.\-]*)", rename, text)


def random_args(module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = []
    for p in module.entry.parameters:
        dtype = p.shape.dtype
        if dtype.is_float:
            args.append(rng.uniform(-2, 2, p.shape.dims).astype(dtype.numpy))
        elif dtype is DType.PRED:
            args.append(rng.random(p.shape.dims) < 0.5)
        else:
            args.append(rng.integers(-5, 6, p.shape.dims).astype(dtype.numpy))
    return args


def check_pass(pass_, before: str, after: str | None, rtol: float = 0.0) -> None:
    """Run `pass_` on `before`; compare with `after` (None: no change expected).

    Results before and after must agree exactly, or to `rtol` for passes that
    reassociate floating-point arithmetic.
    """
    module = parse_module(before)
    original = print_module(module)
    reference = parse_module(before)
    changed = pass_.run(module)
    verify(module)
    printed = print_module(module)
    if after is None:
        assert not changed, "pass reported a change where none was expected"
        assert printed == original, "a pass that reports no change must not touch the module"
        return
    assert changed, "pass reported no change"
    assert canonical(printed) == canonical(print_module(parse_module(after))), printed
    for seed in range(3):
        args = random_args(reference, seed)
        want, got = evaluate(reference, args), evaluate(module, args)
        for w, g in zip(
            want if isinstance(want, tuple) else [want], got if isinstance(got, tuple) else [got]
        ):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
