"""An image in memory and a convolution window over it, as the packers see them.

Every field is a compile-time constant, so that the generated code folds it.  Spatial
dims are listed outermost first, at least two of them (a 1-D convolution is a 2-D one
of height 1): the innermost is the columns, the outer ones the rows (`split` turns a
flat row or tap index into one coordinate per dim).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from llvmlite import ir

from ..llvm.lltypes import i64
from .vectors import splat


@dataclass(frozen=True)
class ImageGeometry:
    c_stride: int  # elements from one channel to the next
    strides: tuple[int, ...]  # elements, per spatial dim
    sizes: tuple[int, ...]  # the image's extents
    kernel: tuple[int, ...]  # the window's extents
    stride: tuple[int, ...]
    pad: tuple[int, ...]  # low padding (negative: cropping)
    dilation: tuple[int, ...]
    out: tuple[int, ...]  # the output's extents

    @property
    def rank(self) -> int:
        return len(self.sizes)

    @property
    def name(self) -> str:
        """The geometry as a symbol suffix: one function per geometry."""
        c_stride, *per_dim = astuple(self)
        return "_".join(str(v) for v in (c_stride, *(v for dims in per_dim for v in dims)))

    @property
    def unit_columns(self) -> bool:
        """Taps of neighbouring output columns are neighbours in memory."""
        return self.stride[-1] == 1 and self.strides[-1] == 1

    @property
    def dense(self) -> bool:
        """Neighbouring output pixels' taps are neighbours in memory across row ends too
        (the image stored at the output's size, stride 1): pixel p's tap is p + shift."""
        if not self.unit_columns:
            return False
        outer = range(self.rank - 1)
        return all(
            self.stride[i] == 1 and self.strides[i] == self.strides[i + 1] * self.out[i + 1]
            for i in outer
        )

    def plane(self) -> dict[str, int]:
        """A 2-D geometry under the names of the row-by-row kernels (depthwise.py)."""
        assert self.rank == 2, self.rank
        fields = {name: getattr(self, field)[dim] for name, (field, dim) in PLANE_NAMES.items()}
        return {"c_stride": self.c_stride, **fields}


# the row-by-row kernels' names for a 2-D geometry's fields: (field, dim), dim 0 the rows
PLANE_NAMES = {
    "h_stride": ("strides", 0),
    "w_stride": ("strides", 1),
    "height": ("sizes", 0),
    "width": ("sizes", 1),
    "kh": ("kernel", 0),
    "kw": ("kernel", 1),
    "sh": ("stride", 0),
    "sw": ("stride", 1),
    "ph": ("pad", 0),
    "pw": ("pad", 1),
    "dh": ("dilation", 0),
    "dw": ("dilation", 1),
    "out_width": ("out", 1),
}


def split(b: ir.IRBuilder, flat: ir.Value, extents) -> list[ir.Value]:
    """`flat` (an i64, or a vector of lanes) as one coordinate per extent, the last
    fastest; the first coordinate is not reduced modulo its extent (it may run past it:
    lanes past the last pixel)."""
    coordinates = []
    inner = 1
    for i in reversed(range(len(extents))):
        value = flat if inner == 1 else b.udiv(flat, _constant(b, inner, flat))
        if i > 0:
            value = b.urem(value, _constant(b, extents[i], flat))
        coordinates.append(value)
        inner *= extents[i]
    return coordinates[::-1]


def _constant(b: ir.IRBuilder, value: int, like: ir.Value) -> ir.Value:
    if isinstance(like.type, ir.VectorType):
        return splat(b, ir.Constant(like.type.element, value), like.type)
    return i64(value)
