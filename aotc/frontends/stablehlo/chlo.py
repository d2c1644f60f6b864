"""The CHLO ops JAX leaves in its StableHLO, expanded into IR ops as XLA's
legalization (chlo -> stablehlo) expands them, or refused by name.

`erf_inv` is XLA's single-precision polynomial (M. Giles, "Approximating the
erfinv function"), computed in f32 for narrower floats; `top_k` the HLO
frontend's topk expansion (a sort of values with their indices).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir import Direction, DType, Instruction, Op, TupleShape
from ..hlo.expansions import full
from .lowering import OpSite

LowerOp = Callable[[OpSite, list[Instruction]], "Instruction | list[Instruction]"]

# Giles' coefficients, highest power first: for w = -log(1 - x^2) below 5 (in w - 2.5)
# and from 5 on (in sqrt(w) - 3)
_ERF_INV_SMALL_W = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_ERF_INV_LARGE_W = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)


def _erf_inv(site: OpSite, args):
    (x,) = args
    b = site.b
    dtype, dims = x.array_shape.dtype, x.array_shape.dims
    x32 = b.convert(x, DType.F32)

    def const(c: float) -> Instruction:
        return full(b, c, DType.F32, dims)

    one = const(1.0)
    w = b.unary(
        Op.NEGATE,
        b.unary(
            Op.LOG,
            b.binary(Op.MULTIPLY, b.binary(Op.SUBTRACT, one, x32), b.binary(Op.ADD, one, x32)),
        ),
    )
    small = b.compare(w, const(5.0), Direction.LT)
    w_small = b.binary(Op.SUBTRACT, w, const(2.5))
    w_large = b.binary(Op.SUBTRACT, b.unary(Op.SQRT, w), const(3.0))
    w = b.select(small, w_small, w_large)
    p = b.select(small, const(_ERF_INV_SMALL_W[0]), const(_ERF_INV_LARGE_W[0]))
    for c_small, c_large in zip(_ERF_INV_SMALL_W[1:], _ERF_INV_LARGE_W[1:]):
        p = b.binary(
            Op.ADD, b.select(small, const(c_small), const(c_large)), b.binary(Op.MULTIPLY, p, w)
        )
    result = b.binary(Op.MULTIPLY, p, x32)
    # erfinv(+-1) = +-inf, which the polynomial does not reach
    at_one = b.compare(b.unary(Op.ABS, x32), one, Direction.EQ)
    result = b.select(at_one, b.binary(Op.MULTIPLY, x32, const(np.inf)), result)
    return b.convert(result, dtype)


def _top_k(site: OpSite, args):
    shape = TupleShape(tuple(site.op.result_types))
    topk = site.expand("topk", shape, args, {"largest": True})
    return [site.b.get_tuple_element(topk, i) for i in range(2)]


def _square(site: OpSite, args):
    return site.b.binary(Op.MULTIPLY, args[0], args[0])


def _half_sum(sign: Op) -> LowerOp:
    """sinh, cosh: (e^x -+ e^-x) / 2, from expm1 for sinh (no cancellation near 0)."""

    def lower(site: OpSite, args):
        b, (x,) = site.b, args
        unary = Op.EXPM1 if sign is Op.SUBTRACT else Op.EXP
        both = b.binary(sign, b.unary(unary, x), b.unary(unary, b.unary(Op.NEGATE, x)))
        return b.binary(Op.MULTIPLY, both, full(b, 0.5, x.array_shape.dtype, x.array_shape.dims))

    return lower


def _atan(site: OpSite, args):
    (x,) = args
    return site.b.binary(Op.ATAN2, x, full(site.b, 1.0, x.array_shape.dtype, x.array_shape.dims))


def _one_and_root(b, x):
    """1 and sqrt(1 - x^2), of x's shape: the parts of XLA's asin and acos."""
    one = full(b, 1.0, x.array_shape.dtype, x.array_shape.dims)
    return one, b.unary(Op.SQRT, b.binary(Op.SUBTRACT, one, b.binary(Op.MULTIPLY, x, x)))


def _asin(site: OpSite, args):
    """2 atan2(x, 1 + sqrt(1 - x^2)), as XLA."""
    b, (x,) = site.b, args
    one, root = _one_and_root(b, x)
    half = b.binary(Op.ATAN2, x, b.binary(Op.ADD, one, root))
    return b.binary(Op.ADD, half, half)


def _acos(site: OpSite, args):
    """2 atan2(sqrt(1 - x^2), 1 + x), as XLA (x = -1: pi)."""
    b, (x,) = site.b, args
    one, root = _one_and_root(b, x)
    half = b.binary(Op.ATAN2, root, b.binary(Op.ADD, one, x))
    return b.binary(Op.ADD, half, half)


def _is_inf(direction: str | None) -> LowerOp:
    """is_inf (|x| = inf), is_pos_inf, is_neg_inf."""

    def lower(site: OpSite, args):
        b, (x,) = site.b, args
        dims, dtype = x.array_shape.dims, x.array_shape.dtype
        if direction is None:
            return b.compare(b.unary(Op.ABS, x), full(b, np.inf, dtype, dims), Direction.EQ)
        return b.compare(x, full(b, float(direction + "inf"), dtype, dims), Direction.EQ)

    return lower


def _refused(name: str) -> LowerOp:
    def refuse(site: OpSite, args):
        raise site.lowering.fail(site.op, f"chlo.{name} is not supported")

    return refuse


CHLO_LOWERINGS: dict[str, LowerOp] = {
    "chlo.erf": lambda site, args: site.b.unary(Op.ERF, args[0]),
    "chlo.erf_inv": _erf_inv,
    "chlo.tan": lambda site, args: site.b.unary(Op.TAN, args[0]),
    "chlo.top_k": _top_k,
    "chlo.square": _square,
    "chlo.sinh": _half_sum(Op.SUBTRACT),
    "chlo.cosh": _half_sum(Op.ADD),
    "chlo.atan": _atan,
    "chlo.asin": _asin,
    "chlo.acos": _acos,
    "chlo.is_inf": _is_inf(None),
    "chlo.is_pos_inf": _is_inf("+"),
    "chlo.is_neg_inf": _is_inf("-"),
    **{
        f"chlo.{name}": _refused(name)
        for name in (
            "lgamma",
            "digamma",
            "polygamma",
            "zeta",
            "erfc",
            "asinh",
            "acosh",
            "atanh",
            "bessel_i1e",
            "next_after",
            "conj",
            "ragged_dot",
        )
    },
}
