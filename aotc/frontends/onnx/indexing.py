"""Index-driven ops: GatherElements, GatherND, Scatter*, OneHot, EyeLike, CumProd, TopK, Unique, NonZero, Compress, depth/space rearrangements and friends."""

from __future__ import annotations
