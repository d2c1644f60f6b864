"""The rewrite engine: rule lists applied to a fixpoint.

A rule is a set of opcodes it looks at and a function that, given an
instruction, returns its replacement (built with the context's builder) or
None.  `rewrite(module, rules)` visits every computation, replaces each
matched instruction's uses, drops what became dead and restores topological
order; it repeats until no rule fires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..ir import Computation, ComputationBuilder, Instruction, Module, Op


class InsertingBuilder(ComputationBuilder):
    """A builder that adds instructions to an existing computation."""

    def __init__(self, module: Module, computation: Computation):
        self.module = module
        self.computation = computation
        self.origin = None


@dataclass(frozen=True)
class Rule:
    ops: frozenset[Op]
    fn: Callable[[InsertingBuilder, Instruction], Instruction | None]


def rule(*ops: Op):
    """Decorator: make `fn(builder, instr)` a Rule over `ops`."""

    def wrap(fn) -> Rule:
        return Rule(frozenset(ops), fn)

    return wrap


MAX_ROUNDS = 50


def rewrite(module: Module, rules: Iterable[Rule]) -> bool:
    """Apply `rules` everywhere until none fires; True if anything changed."""
    by_op: dict[Op, list[Rule]] = {}
    for r in rules:
        for op in r.ops:
            by_op.setdefault(op, []).append(r)
    changed = False
    for computation in module.computations:
        for _ in range(MAX_ROUNDS):
            if not _rewrite_once(module, computation, by_op):
                break
            changed = True
    return changed


def _rewrite_once(module: Module, computation: Computation, by_op) -> bool:
    builder = InsertingBuilder(module, computation)
    # rewritten instruction -> its replacement; later users read through it
    replaced: dict[Instruction, Instruction] = {}
    for instr in list(computation.instructions):
        if replaced:
            instr.operands = [replaced.get(o, o) for o in instr.operands]
        for r in by_op.get(instr.op, ()):
            builder.origin = instr.origin
            replacement = r.fn(builder, instr)
            if replacement is not None and replacement is not instr:
                assert replacement.shape == instr.shape, (r.fn.__name__, instr, replacement)
                replaced[instr] = replacement
                break
    fired = bool(replaced)
    if fired:
        computation.replace_uses(replaced)
        computation.sort_topologically()
        computation.remove_dead()
    return fired
