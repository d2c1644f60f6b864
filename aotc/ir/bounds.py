"""The padded signature of a module whose inputs had bounded dims, and the numpy side
of calling it: actual arrays padded to the bounds with their extents, outputs cut back
to theirs (the Python loader, the tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bounds:
    """What passes/bounded_dims.py made of a module whose inputs had bounded dims: the
    entry's parameter `input_dims` (s32) holds the actual extents of the inputs' bounded
    dims, in the order of `inputs`, where an input is bounded; its output `output_dims`
    (s32), where there is one,
    those of the outputs' bounded dims, in the order of `outputs`.  Every other input
    and output is a buffer at its bounds, the values at the first extents of each dim."""

    inputs: tuple[tuple[int, int, int], ...]  # (parameter number, dim, bound)
    outputs: tuple[tuple[int, int, int], ...]  # (output number, dim, bound)
    input_dims: int | None  # the parameter number of input_dims; None: no bounded input
    output_dims: int | None  # the output number of output_dims; None: no bounded output
    # the least extent of each of `inputs` (its range's low end); () or 0: none
    lows: tuple[int, ...] = ()

    def low(self, number: int, dim: int) -> int:
        """The least extent input `number`'s bounded `dim` takes."""
        for k, (n, d, _) in enumerate(self.inputs):
            if (n, d) == (number, dim):
                return self.lows[k] if k < len(self.lows) else 0
        return 0

    def check_dims(self, number: int, bounds: Sequence[int], dims: Sequence[int]) -> None:
        """Refuse actual `dims` for input `number` (whose shape at the bounds is
        `bounds`) that its bounded dims do not allow: ValueError in one line."""
        bounded = {dim for n, dim, _ in self.inputs if n == number}
        if len(dims) != len(bounds):
            raise ValueError(f"input {number} has rank {len(dims)}, expected {len(bounds)}")
        for dim, (extent, bound) in enumerate(zip(dims, bounds)):
            low = self.low(number, dim) if dim in bounded else bound
            if low <= extent <= bound:
                continue
            limit = f"{low}..{bound}" if low else f"at most {bound}"
            raise ValueError(
                f"input {number} dim {dim} is {extent}, expected {bound if low == bound else limit}"
            )

    def padded_args(self, shapes: Sequence[tuple[int, ...]], args: Sequence[np.ndarray], fill=0):
        """The entry's arguments for actual `args` (one per model input, `shapes` their
        dims at the bounds): each padded with `fill` to its bounds (no value ever reads
        the padding: NaN there checks that), then input_dims."""
        padded = []
        for number, (bounds, arg) in enumerate(zip(shapes, args)):
            arg = np.asarray(arg)
            self.check_dims(number, bounds, arg.shape)
            widths = [(0, bound - extent) for extent, bound in zip(arg.shape, bounds)]
            value = fill if np.can_cast(np.asarray(fill).dtype, arg.dtype, "same_kind") else 0
            if any(w for _, w in widths):
                arg = np.pad(arg, widths, constant_values=np.asarray(value).astype(arg.dtype))
            padded.append(arg)
        if self.input_dims is not None:
            dims = [np.shape(args[n])[dim] for n, dim, _ in self.inputs]
            padded.append(np.asarray(dims, dtype=np.int32))
        return padded

    def actual_outputs(self, outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The model's outputs cut to their actual extents (output_dims dropped)."""
        if self.output_dims is None:
            return list(outputs)
        extents = np.asarray(outputs[self.output_dims]).reshape(-1)
        results = [np.asarray(o) for i, o in enumerate(outputs) if i != self.output_dims]
        for (number, dim, _), extent in zip(self.outputs, extents):
            index = [slice(None)] * results[number].ndim
            index[dim] = slice(0, int(extent))
            results[number] = results[number][tuple(index)]
        return results


@dataclass(frozen=True)
class DimRange:
    """An input dim given as a range of extents, `LOW..HIGH` (`--input x=1..8x128`): the
    compiled model takes any extent in it, its buffers planned for HIGH."""

    low: int
    high: int

    def __post_init__(self):
        if not 0 <= self.low <= self.high:
            raise ValueError(f"{self}: expected 0 <= LOW <= HIGH")

    def __str__(self) -> str:
        return f"{self.low}..{self.high}"
