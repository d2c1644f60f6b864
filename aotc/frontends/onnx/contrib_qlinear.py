"""onnxruntime's QLinear elementwise and pooling ops (domain com.microsoft): QLinearAdd,
QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearConcat,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearWhere.

Each dequantizes its int8/uint8 inputs to f32 ((q - zero_point) * scale), computes in f32
and requantizes (x / scale rounded half to even, plus the zero point, saturated), as the
definition says. onnxruntime computes several of them through 256-entry tables or MLAS's
fixed-point and vector kernels (its logistic is a polynomial), so its results may differ
from these by one quantum where a value falls near a rounding tie. Scales and zero points
are per tensor (one element), as onnxruntime's kernels require; a missing zero point is 0.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...errors import ModelError, ShapeError
from ...ir import ComputationBuilder, Direction, DType, Instruction, Op
from ...ir.evaluate import evaluate_constant
from .helpers import Formula, broadcast_all, normalize_axis, reduce, softmax
from .nn import average_pool
from .quantize import check_int8, round_to_int
from .registry import MICROSOFT, NodeContext, onnx_op


def _scalar(ctx: NodeContext, p: Instruction, what: str) -> Instruction:
    if p.array_shape.size != 1:
        raise ShapeError(
            f"{what} has shape {list(p.array_shape.dims)}; only per-tensor (one "
            "element) quantization parameters are supported"
        )
    return ctx.b.reshape(p, [])


def _centered(ctx: NodeContext, q: Instruction, zero_point) -> Instruction:
    """q - zero_point in f32 (exact)."""
    b = ctx.b
    value = b.convert(q, DType.F32)
    if zero_point is None:
        return value
    zp = b.convert(_scalar(ctx, zero_point, "a zero point"), DType.F32)
    return b.binary(Op.SUBTRACT, value, b.broadcast(zp, [], q.array_shape.dims))


def _f32_scalar(ctx: NodeContext, scale: Instruction) -> Instruction:
    return ctx.b.convert(_scalar(ctx, scale, "a scale"), DType.F32)


def dequantized(ctx: NodeContext, x: Instruction, scale: Instruction, zero_point) -> Instruction:
    """(x - zero_point) * scale in f32, with per-tensor parameters."""
    scale = ctx.b.broadcast(_f32_scalar(ctx, scale), [], x.array_shape.dims)
    return ctx.b.binary(Op.MULTIPLY, _centered(ctx, x, zero_point), scale)


def requantized(ctx: NodeContext, value: Instruction, scale, zero_point, out: DType):
    """f32 `value` quantized to `out` with per-tensor `scale` and `zero_point`."""
    b = ctx.b
    dims = value.array_shape.dims
    q = b.binary(Op.DIVIDE, value, b.broadcast(_f32_scalar(ctx, scale), [], dims))
    zp = None
    if zero_point is not None:
        zp = b.broadcast(_scalar(ctx, zero_point, "a zero point"), [], dims)
    return round_to_int(b, q, zp, out)


def _same_constants(*pairs: tuple[Instruction | None, Instruction | None]) -> bool:
    """Whether each pair holds equal compile-time values (None: a missing zero point, 0)."""
    for x, y in pairs:
        xv, yv = (np.zeros(()) if p is None else evaluate_constant(p) for p in (x, y))
        if xv is None or yv is None or not np.array_equal(np.ravel(xv), np.ravel(yv)):
            return False
    return True


def rescaled(
    ctx: NodeContext, q: Instruction, scale, zero_point, y_scale, y_zero_point, out: DType
) -> Instruction:
    """`q` requantized from (scale, zero_point) to (y_scale, y_zero_point); unchanged where
    both are the same constants (onnxruntime copies those too)."""
    if q.array_shape.dtype is out and _same_constants((scale, y_scale), (zero_point, y_zero_point)):
        return q
    value = dequantized(ctx, q, scale, zero_point)
    return requantized(ctx, value, y_scale, y_zero_point, out)


# -- elementwise: dequantize, compute in f32, requantize ----------------------------------


# QLinearAdd and QLinearMul in units of C's scale, as MLAS computes them (the scale ratios
# first, then per element), which matches onnxruntime's rounding exactly; a and b are
# centered (q - zero point), the scales f32 scalars
def _add_in_c_units(b: ComputationBuilder, a, bm, sa, sb, sc) -> Instruction:
    """a * (sa / sc) + b * (sb / sc)"""
    terms = [
        b.binary(Op.MULTIPLY, x, b.broadcast(b.binary(Op.DIVIDE, s, sc), [], x.shape.dims))
        for x, s in ((a, sa), (bm, sb))
    ]
    return b.binary(Op.ADD, *terms)


def _mul_in_c_units(b: ComputationBuilder, a, bm, sa, sb, sc) -> Instruction:
    """a * b * (sa * sb / sc)"""
    ratio = b.binary(Op.DIVIDE, b.binary(Op.MULTIPLY, sa, sb), sc)
    product = b.binary(Op.MULTIPLY, a, bm)
    return b.binary(Op.MULTIPLY, product, b.broadcast(ratio, [], a.shape.dims))


QLINEAR_BINARY = {"QLinearAdd": _add_in_c_units, "QLinearMul": _mul_in_c_units}


def make_qlinear_binary(in_c_units):
    def lower(ctx: NodeContext, a, a_scale, a_zp, bm, b_scale, b_zp, c_scale, c_zp=None):
        check_int8("QLinear binary op", a, bm)
        b = ctx.b
        x, y = broadcast_all(b, _centered(ctx, a, a_zp), _centered(ctx, bm, b_zp))
        scales = (_f32_scalar(ctx, s) for s in (a_scale, b_scale, c_scale))
        value = in_c_units(b, x, y, *scales)
        if c_zp is not None:
            # MLAS adds the zero point before rounding (unlike QuantizeLinear): ties differ
            zp = b.broadcast(_scalar(ctx, c_zp, "a zero point"), [], x.array_shape.dims)
            value = b.binary(Op.ADD, value, b.convert(zp, value.shape.dtype))
        return round_to_int(b, value, None, a.shape.dtype)

    return lower


for _name, _fn in QLINEAR_BINARY.items():
    onnx_op(_name, domain=MICROSOFT, since=1, arity=((7, 8), (1, 1)))(make_qlinear_binary(_fn))


def _sigmoid(ctx: NodeContext, f: Formula, x: Instruction) -> Instruction:
    return f.f(Op.LOGISTIC, x)


def _leaky_relu(ctx: NodeContext, f: Formula, x: Instruction) -> Instruction:
    return f.where(x, Direction.GE, 0.0, x, f.mul(x, ctx.attr("alpha", 0.01)))


QLINEAR_UNARY = {"QLinearSigmoid": _sigmoid, "QLinearLeakyRelu": _leaky_relu}


def make_qlinear_unary(fn):
    def lower(ctx: NodeContext, x, x_scale, x_zp, y_scale, y_zp=None):
        check_int8("QLinear activation", x)
        value = dequantized(ctx, x, x_scale, x_zp)
        y = fn(ctx, Formula(ctx.b, value), value)
        return requantized(ctx, y, y_scale, y_zp, x.shape.dtype)

    return lower


for _name, _fn in QLINEAR_UNARY.items():
    onnx_op(_name, domain=MICROSOFT, since=1, arity=((4, 5), (1, 1)))(make_qlinear_unary(_fn))


@onnx_op("QLinearSoftmax", domain=MICROSOFT, since=1, arity=((4, 5), (1, 1)))
def qlinear_softmax(ctx: NodeContext, x, x_scale, x_zp, y_scale, y_zp=None) -> Instruction:
    """Softmax over `axis` (opset >= 13) or over all dims from `axis` on (before 13).

    onnxruntime scales the probabilities by floor(1 / y_scale), not 1 / y_scale (equal for
    the usual 1/256); that is kept. Its int8 kernel wraps a result above 127 around instead
    of saturating; aotc saturates.
    """
    check_int8("QLinearSoftmax", x)
    b = ctx.b
    opset = ctx.required_attr("opset")
    rank = x.shape.rank
    axis = normalize_axis(ctx.attr("axis", 1 if opset < 13 else -1), rank)
    value = dequantized(ctx, x, x_scale, x_zp)
    if opset < 13:
        row = int(np.prod(x.shape.dims[axis:], dtype=np.int64))
        flat = b.reshape(value, [value.array_shape.size // max(row, 1), row])
        probs = b.reshape(softmax(b, flat, [1]), x.shape.dims)
    else:
        probs = softmax(b, value, [axis])
    # y = round(p * floor(1 / y_scale)) + y_zp
    f = Formula(b, b.convert(_scalar(ctx, y_scale, "y_scale"), DType.F32))
    levels = b.broadcast(f.f(Op.FLOOR, f.div(1.0, f.like)), [], x.shape.dims)
    zp = None if y_zp is None else b.broadcast(_scalar(ctx, y_zp, "a zero point"), [], x.shape.dims)
    return round_to_int(b, b.binary(Op.MULTIPLY, probs, levels), zp, x.shape.dtype)


@onnx_op("QLinearWhere", domain=MICROSOFT, since=1, arity=((9, 9), (1, 1)))
def qlinear_where(ctx: NodeContext, cond, x, x_scale, x_zp, y, y_scale, y_zp, z_scale, z_zp):
    """X where cond, else Y, each requantized to Z's parameters."""
    check_int8("QLinearWhere", x, y)
    out = x.shape.dtype
    x = rescaled(ctx, x, x_scale, x_zp, z_scale, z_zp, out)
    y = rescaled(ctx, y, y_scale, y_zp, z_scale, z_zp, out)
    return ctx.b.select(*broadcast_all(ctx.b, cond, x, y))


@onnx_op("QLinearConcat", domain=MICROSOFT, since=1, arity=((5, 2**31 - 1), (1, 1)))
def qlinear_concat(ctx: NodeContext, y_scale, y_zp, *triples) -> Instruction:
    """The inputs (tensor, scale, zero point triples) requantized to Y's and concatenated."""
    if len(triples) % 3:
        raise ModelError(
            f"QLinearConcat takes (tensor, scale, zero point) triples after "
            f"y_scale and y_zero_point; got {len(triples)} inputs"
        )
    check_int8("QLinearConcat", y_zp, *triples[::3])
    out = y_zp.shape.dtype
    parts = [
        rescaled(ctx, q, s, z, y_scale, y_zp, out)
        for q, s, z in zip(triples[::3], triples[1::3], triples[2::3])
    ]
    axis = normalize_axis(ctx.required_attr("axis"), parts[0].array_shape.rank)
    return ctx.b.concatenate(parts, axis)


def _channels_first(ctx: NodeContext, x: Instruction) -> Instruction:
    """NHWC... as NCHW... where channels_last is set."""
    if not ctx.attr("channels_last", 0):
        return x
    rank = x.array_shape.rank
    return ctx.b.transpose(x, [0, rank - 1, *range(1, rank - 1)])


def _channels_back(ctx: NodeContext, y: Instruction) -> Instruction:
    if not ctx.attr("channels_last", 0):
        return y
    rank = y.array_shape.rank
    return ctx.b.transpose(y, [0, *range(2, rank), 1])


@onnx_op("QLinearGlobalAveragePool", domain=MICROSOFT, since=1, arity=((5, 5), (1, 1)))
def qlinear_global_average_pool(ctx: NodeContext, x, x_scale, x_zp, y_scale, y_zp):
    """The mean over the spatial dims (kept as 1s): the s32 sum of x - x_zp times
    x_scale / (y_scale * count), requantized."""
    check_int8("QLinearGlobalAveragePool", x)
    b = ctx.b
    x = _channels_first(ctx, x)
    if x.shape.rank < 3:
        raise ShapeError(f"input must be N x C x spatial dims, got {list(x.shape.dims)}")
    axes = list(range(2, x.shape.rank))
    count = int(np.prod([x.shape.dims[a] for a in axes], dtype=np.int64))
    zp = b.broadcast(b.convert(_scalar(ctx, x_zp, "x_zero_point"), DType.S32), [], x.shape.dims)
    total = reduce(b, b.binary(Op.SUBTRACT, b.convert(x, DType.S32), zp), Op.ADD, axes, True)
    f = Formula(b, b.convert(_scalar(ctx, x_scale, "x_scale"), DType.F32))
    ratio = f.div(f.like, f.mul(b.convert(_scalar(ctx, y_scale, "y_scale"), DType.F32), count))
    mean = b.binary(
        Op.MULTIPLY, b.convert(total, DType.F32), b.broadcast(ratio, [], total.array_shape.dims)
    )
    y_zp = b.broadcast(_scalar(ctx, y_zp, "y_zero_point"), [], total.array_shape.dims)
    return _channels_back(ctx, round_to_int(b, mean, y_zp, x.shape.dtype))


@onnx_op("QLinearAveragePool", domain=MICROSOFT, since=1, arity=((4, 5), (1, 1)))
def qlinear_average_pool(ctx: NodeContext, x, x_scale, x_zp, y_scale, y_zp=None):
    """AveragePool of the dequantized input (its attributes), requantized; with
    count_include_pad, onnxruntime divides by the kernel's size even where ceil_mode's last
    window hangs past the padding."""
    check_int8("QLinearAveragePool", x)
    value = dequantized(ctx, _channels_first(ctx, x), x_scale, x_zp)
    pool_ctx = dataclasses.replace(ctx, attrs={"auto_pad": "NOTSET", **ctx.attrs})
    y = requantized(
        ctx, average_pool(pool_ctx, value, whole_kernel=True), y_scale, y_zp, x.shape.dtype
    )
    return _channels_back(ctx, y)
