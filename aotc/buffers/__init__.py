"""Buffer assignment: schedule, liveness, heap simulation -> BufferPlan."""

from .assign import ALIGNMENT, assign_buffers
from .plan import BufferKind, BufferPlan, Slice

__all__ = ["ALIGNMENT", "BufferKind", "BufferPlan", "Slice", "assign_buffers"]
