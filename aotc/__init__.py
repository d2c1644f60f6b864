"""aotc: an ahead-of-time compiler for neural networks."""
