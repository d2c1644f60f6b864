"""Recurrent ops RNN, LSTM and GRU, unrolled over the (static) sequence length."""

from __future__ import annotations
