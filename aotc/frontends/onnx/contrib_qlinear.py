"""onnxruntime's QLinear elementwise and pooling ops (domain com.microsoft)."""

from __future__ import annotations
