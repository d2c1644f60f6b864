"""The CPU rule tables: opcode -> rule building an element generator, or -> kernel.

One place lists every family's table; a backend for another target starts
from this dict and overrides entries.  Parameters have no rule: they are
bound by whoever binds the computation.
"""

from __future__ import annotations

from ...ir import Op
from .context import Rule
from .dot_conv import CONV_RULES, DOT_RULES
from .dynamic import DYNAMIC_RULES
from .elemental import ELEMENTAL_RULES
from .gather import GATHER_RULES
from .kernels import Kernel
from .movement import MOVEMENT_RULES
from .reduce import REDUCE_RULES
from .rng import RNG_KERNELS
from .scatter import SCATTER_KERNELS
from .sort import SORT_KERNELS

RULES: dict[Op, Rule] = {
    **ELEMENTAL_RULES,
    **MOVEMENT_RULES,
    **GATHER_RULES,
    **DYNAMIC_RULES,
    **REDUCE_RULES,
    **DOT_RULES,
    **CONV_RULES,
}

# opcodes emitted as whole kernels instead (see kernels.py)
KERNELS: dict[Op, Kernel] = {
    **SORT_KERNELS,
    **SCATTER_KERNELS,
    **RNG_KERNELS,
}
