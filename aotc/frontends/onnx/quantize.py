"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger."""

from __future__ import annotations
