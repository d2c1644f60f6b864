"""Attention-family ops: Attention, RotaryEmbedding, LinearAttention, FlexAttention, SwiGLU, CausalConvWithState."""

from __future__ import annotations
