"""Loss functions and normalizations added for conformance: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, RMS/Group/Lp normalization, MeanVarianceNormalization, LpPool, Hardmax, training optimizers."""

from __future__ import annotations
