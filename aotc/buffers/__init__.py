"""Buffer assignment: schedule, liveness, heap simulation -> BufferPlan."""
