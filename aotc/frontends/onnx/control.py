"""Control flow: If, Loop and Scan, lowered by unrolling static trip counts."""

from __future__ import annotations
