"""Buffer assignment: schedule, liveness, heap simulation -> BufferPlan."""

from .assign import ALIGNMENT, assign_buffers
from .blob import Blob, Deferred
from .plan import BufferKind, BufferPlan, Slice

__all__ = ["ALIGNMENT", "Blob", "BufferKind", "BufferPlan", "Deferred", "Slice", "assign_buffers"]
