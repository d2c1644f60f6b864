"""Spatial resampling: Resize, GridSample, AffineGrid, RoiAlign, NonMaxSuppression, DeformConv."""

from __future__ import annotations
