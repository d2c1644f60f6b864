"""Which ONNX nodes take values with bounded dims (`--input x=1..8x128`, `--dim`).

A bounded value is computed at its bounds, its values at the first extents of each
bounded dim (passes/bounded_dims.py).  A lowering is right for it where it never reads
a bounded dim's extent as a number: the ops listed here build only elementwise math,
broadcasts, reshapes, transposes, dots, convolutions, reductions and gathers, whose
shape rules refuse the index maps that would read an extent (ir/shapes.py) and whose
reductions the padder masks; the means among them divide by `helpers.element_count`,
the product of the extents at run time; Shape and Size give the run-time extents, and the ops
that take a shape as data read it through extents.py.  Any other op with a bounded
input is refused by name (NonZero, TopK... would compute at the bound where the extent
is meant).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import UnsupportedError
from ...ir import Instruction, Shape

_ELEMENTWISE = """
Abs Acos Acosh Add And Asin Asinh Atan Atanh BitShift BitwiseAnd BitwiseNot BitwiseOr
BitwiseXor Cast CastLike Ceil Celu Clip Cos Cosh Div Dropout Elu Equal Erf Exp Floor
Gelu Greater GreaterOrEqual HardSigmoid HardSwish Identity IsInf IsNaN LeakyRelu Less
LessOrEqual Log Max Mean Min Mish Mod Mul Neg Not Or Pow PRelu Reciprocal Relu Round
Selu Shrink Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Sub Sum Tan Tanh
ThresholdedRelu Where Xor QuantizeLinear DequantizeLinear
"""
_STRUCTURE = """
Concat Expand Flatten Gather GatherElements GatherND Reshape Slice Split Squeeze Transpose Trilu
Unsqueeze Pad
Shape Size
"""
_CONTRACTIONS = """
MatMul Gemm MatMulInteger Conv ConvInteger MaxPool AveragePool GlobalMaxPool
GlobalAveragePool BatchNormalization
"""
_REDUCTIONS = """
ArgMax ArgMin ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean
ReduceMin ReduceProd ReduceSum ReduceSumSquare Softmax LogSoftmax LayerNormalization
RMSNormalization MeanVarianceNormalization InstanceNormalization TopK NonMaxSuppression
NonZero Compress Unique CumSum CumProd
"""
_MICROSOFT = """
FastGelu BiasGelu Gelu QuickGelu SkipLayerNormalization SkipSimplifiedLayerNormalization
SimplifiedLayerNormalization
"""

# (domain, op type) of the nodes whose lowerings take bounded inputs
BOUNDED_OPS = frozenset(
    {
        ("", op)
        for text in (_ELEMENTWISE, _STRUCTURE, _CONTRACTIONS, _REDUCTIONS)
        for op in text.split()
    }
    | {("com.microsoft", op) for op in _MICROSOFT.split()}
)


def check_bounded(domain: str, op_type: str, inputs: Sequence[object]) -> None:
    """Refuse a node outside BOUNDED_OPS with an input of bounded dims."""
    if (domain or "", op_type) in BOUNDED_OPS:
        return
    for number, value in enumerate(inputs):
        shape = value.shape if isinstance(value, Instruction) else None
        if isinstance(shape, Shape) and not shape.is_static:
            raise UnsupportedError(
                f"input {number} has bounded dims {list(shape.bounded_dims)}, which "
                f"{op_type} does not take yet (give that input a fixed shape)"
            )
