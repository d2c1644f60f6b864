"""Sequence and optional values, held as static lists of instructions in the frontend."""

from __future__ import annotations
