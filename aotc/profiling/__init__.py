"""`aotc profile`: where a compiled model's run spends its time, kernel by kernel.

- kernels.py: what each kernel is before it runs (ops, form, bytes moved, FLOPs);
- bound.py: this machine's bandwidth and f32 peak, measured once and cached;
- measure.py: compile with counters, run, read them (`profile_model` -> `Profile`);
- table.py: the table the command prints.
"""

from .bound import MachineBound, machine_bound
from .kernels import KernelCost, kernel_costs
from .measure import KernelProfile, Profile, profile_model, random_inputs
from .table import profile_table

__all__ = [
    "KernelCost",
    "KernelProfile",
    "MachineBound",
    "Profile",
    "kernel_costs",
    "machine_bound",
    "profile_model",
    "profile_table",
    "random_inputs",
]
