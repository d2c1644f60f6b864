"""Dead code elimination: drop instructions and computations nothing uses."""

from __future__ import annotations

from ..ir import Module


class DeadCodeElimination:
    name = "dce"

    def run(self, module: Module) -> bool:
        changed = False
        for computation in module.computations:
            changed |= computation.remove_dead()
        changed |= module.remove_unused_computations()
        return changed
