import numpy as np
from aotc_testing import hlo_reducer
from pass_testing import check_pass, random_args

from aotc.ir import Direction, Op
from aotc.ir.evaluate import evaluate
from aotc.ir.text import parse_module
from aotc.passes.fusion import Fusion

CHAIN = """HloModule m
ENTRY %main (x: f32[4,8], b: f32[8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %b = f32[8]{0} parameter(1)
  %bb = f32[4,8]{1,0} broadcast(f32[8]{0} %b), dimensions={1}
  %a = f32[4,8]{1,0} add(f32[4,8]{1,0} %x, f32[4,8]{1,0} %bb)
  %z = f32[] constant(0)
  %zb = f32[4,8]{1,0} broadcast(f32[] %z), dimensions={}
  ROOT %r = f32[4,8]{1,0} maximum(f32[4,8]{1,0} %a, f32[4,8]{1,0} %zb)
}"""

CHAIN_FUSED = """HloModule m
%fused_r (param_0: f32[8], param_1: f32[4,8]) -> f32[4,8] {
  %param_0 = f32[8]{0} parameter(0)
  %bb = f32[4,8]{1,0} broadcast(f32[8]{0} %param_0), dimensions={1}
  %param_1 = f32[4,8]{1,0} parameter(1)
  %a = f32[4,8]{1,0} add(f32[4,8]{1,0} %param_1, f32[4,8]{1,0} %bb)
  %z = f32[] constant(0)
  %zb = f32[4,8]{1,0} broadcast(f32[] %z), dimensions={}
  ROOT %r = f32[4,8]{1,0} maximum(f32[4,8]{1,0} %a, f32[4,8]{1,0} %zb)
}

ENTRY %main (x: f32[4,8], b: f32[8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %b = f32[8]{0} parameter(1)
  ROOT %fusion = f32[4,8]{1,0} fusion(f32[8]{0} %b, f32[4,8]{1,0} %x), kind=kLoop, calls=%fused_r
}"""


def test_elementwise_chain_with_broadcasts_is_one_loop():
    check_pass(Fusion(), CHAIN, CHAIN_FUSED)


# exp has two users: recomputing it in both would double the transcendental work
SHARED_EXPENSIVE = (
    """HloModule m
"""
    + hlo_reducer("add_f32", "add")
    + """
ENTRY %main (x: f32[4,8]) -> (f32[4], f32[4,8]) {
  %x = f32[4,8]{1,0} parameter(0)
  %e = f32[4,8]{1,0} exponential(f32[4,8]{1,0} %x)
  %z = f32[] constant(0)
  %s = f32[4]{0} reduce(f32[4,8]{1,0} %e, f32[] %z), dimensions={1}, to_apply=%add_f32
  %n = f32[4,8]{1,0} negate(f32[4,8]{1,0} %e)
  ROOT %t = (f32[4]{0}, f32[4,8]{1,0}) tuple(f32[4]{0} %s, f32[4,8]{1,0} %n)
}"""
)


def test_shared_expensive_producer_is_not_duplicated():
    check_pass(Fusion(), SHARED_EXPENSIVE, None)


DOT_EPILOGUE = """HloModule m
ENTRY %main (x: f32[2,3], w: f32[3,4], b: f32[4], r: f32[2,4]) -> f32[2,4] {
  %x = f32[2,3]{1,0} parameter(0)
  %w = f32[3,4]{1,0} parameter(1)
  %b = f32[4]{0} parameter(2)
  %r = f32[2,4]{1,0} parameter(3)
  %d = f32[2,4]{1,0} dot(f32[2,3]{1,0} %x, f32[3,4]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bb = f32[2,4]{1,0} broadcast(f32[4]{0} %b), dimensions={1}
  %a = f32[2,4]{1,0} add(f32[2,4]{1,0} %d, f32[2,4]{1,0} %bb)
  %a2 = f32[2,4]{1,0} add(f32[2,4]{1,0} %a, f32[2,4]{1,0} %r)
  ROOT %t = f32[2,4]{1,0} tanh(f32[2,4]{1,0} %a2)
}"""


def test_dot_with_bias_residual_and_activation_is_one_kernel():
    module = parse_module(DOT_EPILOGUE)
    reference = parse_module(DOT_EPILOGUE)
    assert Fusion().run(module)
    entry = module.entry
    kernels = [i for i in entry.instructions if i.op not in (Op.PARAMETER, Op.CONSTANT)]
    assert [k.op for k in kernels] == [Op.FUSION]
    fused_ops = {i.op for i in kernels[0].called[0].instructions}
    assert {Op.DOT, Op.ADD, Op.TANH, Op.BROADCAST} <= fused_ops
    args = random_args(reference)
    assert (evaluate(module, args) == evaluate(reference, args)).all()


# a broadcast reads its operand many times: an expensive producer stays outside
BROADCAST_OF_EXPENSIVE = """HloModule m
ENTRY %main (x: f32[8]) -> f32[4,8] {
  %x = f32[8]{0} parameter(0)
  %e = f32[8]{0} exponential(f32[8]{0} %x)
  ROOT %b = f32[4,8]{1,0} broadcast(f32[8]{0} %e), dimensions={1}
}"""


def test_expensive_producer_not_recomputed_through_broadcast():
    check_pass(Fusion(), BROADCAST_OF_EXPENSIVE, None)


# the mean joins the variance's kernel as a row value: computed once per row there
VARIANCE = (
    """HloModule var
"""
    + hlo_reducer("add", "add")
    + """
ENTRY %main (x: f32[5,9]) -> f32[5] {
  %x = f32[5,9]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %s = f32[5]{0} reduce(f32[5,9]{1,0} %x, f32[] %zero), dimensions={1}, to_apply=%add
  %sb = f32[5,9]{1,0} broadcast(f32[5]{0} %s), dimensions={0}
  %d = f32[5,9]{1,0} subtract(f32[5,9]{1,0} %x, f32[5,9]{1,0} %sb)
  %sq = f32[5,9]{1,0} multiply(f32[5,9]{1,0} %d, f32[5,9]{1,0} %d)
  ROOT %v = f32[5]{0} reduce(f32[5,9]{1,0} %sq, f32[] %zero), dimensions={1}, to_apply=%add
}"""
)

VARIANCE_FUSED = (
    """HloModule var
"""
    + hlo_reducer("add", "add")
    + """
%fused_v (param_0: f32[5,9]) -> f32[5] {
  %param_0 = f32[5,9]{1,0} parameter(0)
  %constant = f32[] constant(0)
  %s.1 = f32[5]{0} reduce(f32[5,9]{1,0} %param_0, f32[] %constant), dimensions={1}, to_apply=%add
  %sb = f32[5,9]{1,0} broadcast(f32[5]{0} %s.1), dimensions={0}
  %d = f32[5,9]{1,0} subtract(f32[5,9]{1,0} %param_0, f32[5,9]{1,0} %sb)
  %sq = f32[5,9]{1,0} multiply(f32[5,9]{1,0} %d, f32[5,9]{1,0} %d)
  ROOT %v = f32[5]{0} reduce(f32[5,9]{1,0} %sq, f32[] %constant), dimensions={1}, to_apply=%add
}

ENTRY %main (x: f32[5,9]) -> f32[5] {
  %x = f32[5,9]{1,0} parameter(0)
  ROOT %fusion = f32[5]{0} fusion(f32[5,9]{1,0} %x), kind=kInput, calls=%fused_v
}"""
)


def test_reduction_read_by_its_row_joins_the_consumer():
    check_pass(Fusion(), VARIANCE, VARIANCE_FUSED)


# a reduction read at a transposed index is not a row of the consumer's loop
TRANSPOSED_ROW = (
    """HloModule tr
"""
    + hlo_reducer("add", "add")
    + """
ENTRY %main (x: f32[4,6]) -> f32[6,4] {
  %x = f32[4,6]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %s = f32[4]{0} reduce(f32[4,6]{1,0} %x, f32[] %zero), dimensions={1}, to_apply=%add
  %sb = f32[6,4]{1,0} broadcast(f32[4]{0} %s), dimensions={1}
  %xt = f32[6,4]{1,0} transpose(f32[4,6]{1,0} %x), dimensions={1,0}
  ROOT %y = f32[6,4]{1,0} divide(f32[6,4]{1,0} %xt, f32[6,4]{1,0} %sb)
}"""
)


def test_reduction_read_across_rows_stays_apart():
    module = parse_module(TRANSPOSED_ROW)
    Fusion().run(module)
    kernels = [i for i in module.entry.instructions if i.op not in (Op.PARAMETER, Op.CONSTANT)]
    assert [k.op for k in kernels] == [Op.REDUCE, Op.FUSION]


# a dot's epilogue read through a concatenate stays with the dot (its tiled kernel)
DOTS_INTO_CONCAT = """HloModule m
ENTRY %main (x: f32[4,8], w: f32[8,6], v: f32[8,6], b: f32[6]) -> f32[4,12] {
  %x = f32[4,8]{1,0} parameter(0)
  %w = f32[8,6]{1,0} parameter(1)
  %v = f32[8,6]{1,0} parameter(2)
  %b = f32[6]{0} parameter(3)
  %bb = f32[4,6]{1,0} broadcast(f32[6]{0} %b), dimensions={1}
  %zero = f32[] constant(0)
  %zb = f32[4,6]{1,0} broadcast(f32[] %zero), dimensions={}
  %d1 = f32[4,6]{1,0} dot(f32[4,8]{1,0} %x, f32[8,6]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %a1 = f32[4,6]{1,0} add(f32[4,6]{1,0} %d1, f32[4,6]{1,0} %bb)
  %r1 = f32[4,6]{1,0} maximum(f32[4,6]{1,0} %a1, f32[4,6]{1,0} %zb)
  %d2 = f32[4,6]{1,0} dot(f32[4,8]{1,0} %x, f32[8,6]{1,0} %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %a2 = f32[4,6]{1,0} add(f32[4,6]{1,0} %d2, f32[4,6]{1,0} %bb)
  ROOT %c = f32[4,12]{1,0} concatenate(f32[4,6]{1,0} %r1, f32[4,6]{1,0} %a2), dimensions={1}
}"""


def test_contractions_fuse_only_with_their_elementwise_epilogue():
    module = parse_module(DOTS_INTO_CONCAT)
    reference = parse_module(DOTS_INTO_CONCAT)
    assert Fusion().run(module)
    kernels = [i for i in module.entry.instructions if i.op not in (Op.PARAMETER, Op.CONSTANT)]
    assert [k.op for k in kernels] == [Op.FUSION, Op.FUSION, Op.CONCATENATE]
    for fusion in kernels[:2]:
        ops = [i.op for i in fusion.called[0].instructions]
        assert ops.count(Op.DOT) == 1 and Op.ADD in ops
    args = random_args(reference)
    assert (evaluate(module, args) == evaluate(reference, args)).all()


# attention scores: the scaled dot is its own kernel, the softmax over it one more
SCORES_SOFTMAX = (
    """HloModule m
"""
    + hlo_reducer("add", "add")
    + """"""
    + hlo_reducer("max", "maximum")
    + """
ENTRY %main (q: f32[6,4], k: f32[4,6]) -> f32[6,6] {
  %q = f32[6,4]{1,0} parameter(0)
  %k = f32[4,6]{1,0} parameter(1)
  %d = f32[6,6]{1,0} dot(f32[6,4]{1,0} %q, f32[4,6]{1,0} %k), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %half = f32[] constant(0.5)
  %hb = f32[6,6]{1,0} broadcast(f32[] %half), dimensions={}
  %s = f32[6,6]{1,0} multiply(f32[6,6]{1,0} %d, f32[6,6]{1,0} %hb)
  %ninf = f32[] constant(-inf)
  %mx = f32[6]{0} reduce(f32[6,6]{1,0} %s, f32[] %ninf), dimensions={1}, to_apply=%max
  %mxb = f32[6,6]{1,0} broadcast(f32[6]{0} %mx), dimensions={0}
  %sub = f32[6,6]{1,0} subtract(f32[6,6]{1,0} %s, f32[6,6]{1,0} %mxb)
  %e = f32[6,6]{1,0} exponential(f32[6,6]{1,0} %sub)
  %z = f32[] constant(0)
  %sum = f32[6]{0} reduce(f32[6,6]{1,0} %e, f32[] %z), dimensions={1}, to_apply=%add
  %sb = f32[6,6]{1,0} broadcast(f32[6]{0} %sum), dimensions={0}
  ROOT %y = f32[6,6]{1,0} divide(f32[6,6]{1,0} %e, f32[6,6]{1,0} %sb)
}"""
)


def test_softmax_after_a_dot_is_one_kernel_beside_the_dots():
    module = parse_module(SCORES_SOFTMAX)
    reference = parse_module(SCORES_SOFTMAX)
    assert Fusion().run(module)
    kernels = [i for i in module.entry.instructions if i.op not in (Op.PARAMETER, Op.CONSTANT)]
    assert [k.op for k in kernels] == [Op.FUSION, Op.FUSION]
    contents = [{i.op for i in k.called[0].instructions} for k in kernels]
    assert Op.DOT in contents[0] and Op.REDUCE not in contents[0]
    assert Op.REDUCE in contents[1] and Op.DOT not in contents[1]
    args = random_args(reference)
    np.testing.assert_allclose(evaluate(module, args), evaluate(reference, args), rtol=1e-6)


# conv_layout.py's transposes around a convolution, before the simplifier cancels them:
# index maps compose the two to the identity, but the GEMM epilogue reads its result
# elementwise only, so the convolution stays a kernel of its own
CONV_BETWEEN_TRANSPOSES = """HloModule m
ENTRY %main (x: f32[1,3,6,6], w: f32[4,3,3,3], bias: f32[4]) -> f32[1,4,4,4] {
  %x = f32[1,3,6,6]{3,2,1,0} parameter(0)
  %w = f32[4,3,3,3]{3,2,1,0} parameter(1)
  %bias = f32[4]{0} parameter(2)
  %c = f32[1,4,4,4]{3,2,1,0} convolution(f32[1,3,6,6]{3,2,1,0} %x, f32[4,3,3,3]{3,2,1,0} %w), window={size=3x3}, dim_labels=bf01_oi01->bf01
  %t = f32[1,4,4,4]{3,2,1,0} transpose(f32[1,4,4,4]{3,2,1,0} %c), dimensions={0,2,3,1}
  %bb = f32[1,4,4,4]{3,2,1,0} broadcast(f32[4]{0} %bias), dimensions={3}
  %a = f32[1,4,4,4]{3,2,1,0} add(f32[1,4,4,4]{3,2,1,0} %t, f32[1,4,4,4]{3,2,1,0} %bb)
  ROOT %back = f32[1,4,4,4]{3,2,1,0} transpose(f32[1,4,4,4]{3,2,1,0} %a), dimensions={0,3,1,2}
}"""


def test_convolution_is_not_fused_through_transposes():
    module = parse_module(CONV_BETWEEN_TRANSPOSES)
    reference = parse_module(CONV_BETWEEN_TRANSPOSES)
    Fusion().run(module)
    for kernel in module.entry.instructions:
        if kernel.op is Op.FUSION:
            ops = {i.op for i in kernel.called[0].instructions}
            assert not (Op.CONVOLUTION in ops and Op.TRANSPOSE in ops), ops
    assert any(i.op is Op.CONVOLUTION for i in module.entry.instructions)
    args = random_args(reference)
    assert (evaluate(module, args) == evaluate(reference, args)).all()


# tokens [1, H*W, C] made an NCHW image for a depthwise convolution (SegFormer's Mix-FFN),
# and a layer norm's sum of squares over the channels of an NCHW image read as tokens:
# the transposes move the last dim, so each is stored for the convolution to read whole
# image rows and the reduction whole rows, not gather them with a stride of H*W
TOKENS_AS_IMAGE = (
    """HloModule ti
"""
    + hlo_reducer("add", "add")
    + """
ENTRY %main (x: f32[1,16,8], w: f32[8,1,3,3], y: f32[1,8,16]) -> (f32[1,8,4,4], f32[1,16]) {
  %x = f32[1,16,8]{2,1,0} parameter(0)
  %w = f32[8,1,3,3]{3,2,1,0} parameter(1)
  %y = f32[1,8,16]{2,1,0} parameter(2)
  %xt = f32[1,8,16]{2,1,0} transpose(f32[1,16,8]{2,1,0} %x), dimensions={0,2,1}
  %image = f32[1,8,4,4]{3,2,1,0} reshape(f32[1,8,16]{2,1,0} %xt)
  %c = f32[1,8,4,4]{3,2,1,0} convolution(f32[1,8,4,4]{3,2,1,0} %image, f32[8,1,3,3]{3,2,1,0} %w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=8
  %sq = f32[1,8,16]{2,1,0} multiply(f32[1,8,16]{2,1,0} %y, f32[1,8,16]{2,1,0} %y)
  %sqt = f32[1,16,8]{2,1,0} transpose(f32[1,8,16]{2,1,0} %sq), dimensions={0,2,1}
  %zero = f32[] constant(0)
  %s = f32[1,16]{1,0} reduce(f32[1,16,8]{2,1,0} %sqt, f32[] %zero), dimensions={2}, to_apply=%add
  ROOT %out = (f32[1,8,4,4]{3,2,1,0}, f32[1,16]{1,0}) tuple(f32[1,8,4,4]{3,2,1,0} %c, f32[1,16]{1,0} %s)
}"""
)


def test_transposes_moving_rows_are_stored_for_convolutions_and_reductions():
    module = parse_module(TOKENS_AS_IMAGE)
    reference = parse_module(TOKENS_AS_IMAGE)
    Fusion().run(module)
    kernels = [
        {i.op for i in k.called[0].instructions} if k.op is Op.FUSION else {k.op}
        for k in module.entry.instructions
    ]
    assert sum(Op.TRANSPOSE in ops for ops in kernels) == 2
    assert sum(bool(ops & {Op.CONVOLUTION, Op.REDUCE}) for ops in kernels) == 2
    for ops in kernels:
        assert Op.TRANSPOSE not in ops or not ops & {Op.CONVOLUTION, Op.REDUCE}, ops
    args = random_args(reference)
    for got, want in zip(evaluate(module, args), evaluate(reference, args)):
        np.testing.assert_array_equal(got, want)


# an RBF kernel exp(-(|x|^2 - 2 x.w)): the row norms are a reduction beside the dot
RBF = (
    """HloModule rbf
"""
    + hlo_reducer("add", "add")
    + """
ENTRY %main (x: f32[4,8], w: f32[8,6]) -> f32[4,6] {
  %x = f32[4,8]{1,0} parameter(0)
  %w = f32[8,6]{1,0} parameter(1)
  %sq = f32[4,8]{1,0} multiply(f32[4,8]{1,0} %x, f32[4,8]{1,0} %x)
  %zero = f32[] constant(0)
  %n = f32[4]{0} reduce(f32[4,8]{1,0} %sq, f32[] %zero), dimensions={1}, to_apply=%add
  %d = f32[4,6]{1,0} dot(f32[4,8]{1,0} %x, f32[8,6]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %two = f32[] constant(2)
  %twob = f32[4,6]{1,0} broadcast(f32[] %two), dimensions={}
  %d2 = f32[4,6]{1,0} multiply(f32[4,6]{1,0} %d, f32[4,6]{1,0} %twob)
  %nb = f32[4,6]{1,0} broadcast(f32[4]{0} %n), dimensions={0}
  %s = f32[4,6]{1,0} subtract(f32[4,6]{1,0} %nb, f32[4,6]{1,0} %d2)
  %neg = f32[4,6]{1,0} negate(f32[4,6]{1,0} %s)
  ROOT %e = f32[4,6]{1,0} exponential(f32[4,6]{1,0} %neg)
}"""
)


def test_a_row_value_stays_out_of_a_contractions_kernel():
    """The dot takes the exp as its epilogue; the norms, which the epilogue would compute
    again per element, are a kernel of their own."""
    module = parse_module(RBF)
    reference = parse_module(RBF)
    assert Fusion().run(module)
    kernels = [i for i in module.entry.instructions if i.op not in (Op.PARAMETER, Op.CONSTANT)]
    contents = [{i.op for i in k.called[0].instructions} for k in kernels]
    assert len(kernels) == 2
    assert Op.REDUCE in contents[0] and Op.DOT not in contents[0]
    assert Op.DOT in contents[1] and Op.EXP in contents[1] and Op.REDUCE not in contents[1]
    args = random_args(reference)
    np.testing.assert_allclose(evaluate(module, args), evaluate(reference, args), rtol=1e-6)


def _forest_levels(levels: int, leaf_tables: int = 0):
    """A tree traversal, level by level: node' = select(x[feature[node]] <= split[node],
    left[node], right[node]) over (rows, trees), as ml_trees.reached_leaves builds it;
    then `leaf_tables` lookups of the leaves reached (their weights, their targets)."""
    from aotc.ir import ComputationBuilder, DType, GatherDims, Module, Shape

    rng = np.random.default_rng(0)
    nodes, rows, trees, features = 15, 4, 3, 5
    module = Module("forest")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (rows, features)))

    def table(values, dtype):
        return b.constant(np.asarray(values), dtype)

    feature = table(rng.integers(0, features, nodes).astype(np.int32), DType.S32)
    split = table(rng.random(nodes).astype(np.float32), DType.F32)
    left = table(np.minimum(2 * np.arange(nodes) + 1, nodes - 1).astype(np.int32), DType.S32)
    right = table(np.minimum(2 * np.arange(nodes) + 2, nodes - 1).astype(np.int32), DType.S32)

    def lookup(t, index):
        return b.gather(t, index, GatherDims((), (0,), (0,), 2, (1,)))

    row_dims = GatherDims((), (1,), (1,), 2, (1, 1), (0,), (0,))
    node = b.broadcast(table(np.zeros(trees, np.int32), DType.S32), [1], (rows, trees))
    for _ in range(levels):
        value = b.gather(x, lookup(feature, node), row_dims)
        goes_left = b.compare(value, lookup(split, node), Direction.LE)
        node = b.select(goes_left, lookup(left, node), lookup(right, node))
    if leaf_tables:
        leaves = [table(rng.random(nodes).astype(np.float32), DType.F32) for _ in range(2)]
        node = b.tuple([lookup(t, node) for t in leaves[:leaf_tables]])
    b.build(node, entry=True)
    return module


def test_lookups_fuse_with_their_indices_one_level_per_kernel():
    """A level's lookups join the kernel computing from its node numbers, x[feature[node]]
    included; the node numbers of the level before are stored (MAX_CHASE): a chain of
    levels in one loop would wait on each load in turn."""
    module, reference = _forest_levels(3), _forest_levels(3)
    assert Fusion().run(module)
    kernels = [i for i in module.entry.instructions if i.op not in (Op.PARAMETER, Op.CONSTANT)]
    assert len(kernels) == 3
    for kernel in kernels:
        ops = [i.op for i in kernel.called[0].instructions]
        assert ops.count(Op.GATHER) == 5 and Op.SELECT in ops
    args = random_args(reference)
    np.testing.assert_array_equal(evaluate(module, args), evaluate(reference, args))


def test_node_numbers_read_by_several_kernels_are_stored_once():
    """The last level's node numbers feed two leaf lookups in two kernels: stored once,
    not computed again (with the lookups they come from) in each copy, nor in the next
    level's kernels."""
    module, reference = _forest_levels(3, leaf_tables=2), _forest_levels(3, leaf_tables=2)
    assert Fusion().run(module)
    kernels = [i for i in module.entry.instructions if i.op is Op.FUSION]
    selects = [sum(i.op is Op.SELECT for i in k.called[0].instructions) for k in kernels]
    assert sum(selects) == 3 and max(selects) == 1  # each level's select in one kernel
    args = random_args(reference)
    for got, want in zip(evaluate(module, args), evaluate(reference, args), strict=True):
        np.testing.assert_array_equal(got, want)
