"""Signal processing and linear algebra: DFT, STFT, window functions, MelWeightMatrix, Einsum, Det."""

from __future__ import annotations
