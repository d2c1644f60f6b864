"""Training ops: the losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, and
the optimizer updates of the ai.onnx.preview.training domain (Adagrad, Adam, Momentum).

A loss picks, per element, the input at its target class with a one-hot compare
(class iota == target) and a sum over the class axis: exact, and an out-of-range
target (an ignore_index outside [0, C)) simply picks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...errors import ModelError, ShapeError
from ...ir import ComputationBuilder, Direction, DType, Instruction, Op, Shape
from .helpers import Formula, full, full_like, reduce, softmax
from .registry import NodeContext, onnx_op

TRAINING = "ai.onnx.preview.training"


def _class_mask(b: ComputationBuilder, target: Instruction, dims: Sequence[int]) -> Instruction:
    """pred of `dims` (N, C, d...): true where the class index equals the target."""
    rank = len(dims)
    classes = b.iota(Shape(DType.S64, dims), 1)
    spread = b.broadcast(b.convert(target, DType.S64), [0, *range(2, rank)], dims)
    return b.compare(classes, spread, Direction.EQ)


def _pick(b: ComputationBuilder, values: Instruction, mask: Instruction) -> Instruction:
    """The sum over the class axis of `values` where `mask` holds (N, d...)."""
    chosen = b.select(mask, values, full_like(b, 0, values))
    return reduce(b, chosen, Op.ADD, [1], keepdims=False)


def _nll(ctx: NodeContext, x: Instruction, target: Instruction, weight) -> Instruction:
    """-x[n, target[n, d...], d...] weighted, with ignore_index and the reduction."""
    b = ctx.b
    reduction = ctx.choice("reduction", ("none", "sum", "mean"))
    if x.array_shape.rank < 2:
        raise ShapeError(f"input must be N x C x ..., got {list(x.array_shape.dims)}")
    n, c, *rest = x.array_shape.dims
    if target.array_shape.dims != (n, *rest):
        raise ShapeError(f"target has shape {list(target.array_shape.dims)}, expected {[n, *rest]}")
    if target.array_shape.dtype.is_float:
        raise ModelError("target must hold integer class indices")
    dims = x.array_shape.dims
    loss = b.unary(Op.NEGATE, _pick(b, x, _class_mask(b, target, dims)))
    per_element = None  # each element's weight; None means all 1
    if weight is not None:
        if weight.shape.dims != (c,):
            raise ShapeError(f"weight has shape {list(weight.shape.dims)}, expected [{c}]")
        # an out-of-range target takes the nearest class's weight (the reference's
        # np.take(mode="clip")); only an ignored element can have one, and it gets 0
        wide = b.convert(target, DType.S64)
        clipped = b.clamp(full_like(b, 0, wide), wide, full_like(b, c - 1, wide))
        spread = b.broadcast(b.convert(weight, x.array_shape.dtype), [1], dims)
        per_element = _pick(b, spread, _class_mask(b, clipped, dims))
    ignore_index = ctx.attr("ignore_index")
    if ignore_index is not None:
        kept = b.compare(
            target,
            full(b, ignore_index, target.array_shape.dtype, target.array_shape.dims),
            Direction.NE,
        )
        zeros = full_like(b, 0, loss)
        loss = b.select(kept, loss, zeros)
        ones = per_element if per_element is not None else full_like(b, 1, loss)
        per_element = b.select(kept, ones, zeros)
    if per_element is not None:
        loss = b.binary(Op.MULTIPLY, loss, per_element)
    if reduction == "none":
        return loss
    every = list(range(loss.array_shape.rank))
    total = reduce(b, loss, Op.ADD, every, keepdims=False)
    if reduction == "sum":
        return total
    # mean: divided by the sum of the applied weights (ignored elements weigh 0)
    if per_element is None:
        return Formula(b, total).div(total, loss.array_shape.size)
    return b.binary(Op.DIVIDE, total, reduce(b, per_element, Op.ADD, every, keepdims=False))


@onnx_op("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(ctx: NodeContext, x, target, weight=None) -> Instruction:
    return _nll(ctx, x, target, weight)


@onnx_op("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(ctx: NodeContext, x, target, weight=None) -> list[Instruction]:
    """The NLL loss of log_softmax(x) over the class axis; also returns log_prob."""
    if x.shape.rank < 2:
        raise ShapeError(f"input must be N x C x ..., got {list(x.shape.dims)}")
    log_prob = softmax(ctx.b, x, [1], log=True)
    return [_nll(ctx, log_prob, target, weight), log_prob]


# -- optimizers ---------------------------------------------------------------------
#
# Inputs: the scalars R (learning rate) and T (step count), then n tensors per role
# (X, G, ...); outputs: the updated tensors, grouped by role likewise.


def _update_groups(inputs: Sequence[Instruction], roles: int) -> list[list[Instruction]]:
    """[X, G, ...] rows for each optimized tensor, from the role-major input list."""
    if len(inputs) % roles:
        raise ModelError(f"expected a multiple of {roles} tensors after R and T")
    n = len(inputs) // roles
    return [[inputs[role * n + i] for role in range(roles)] for i in range(n)]


Rule = Callable[[Formula, Instruction, Instruction, list[Instruction], NodeContext], list]


def make_optimizer(roles: int, rule: Rule):
    """A lowering applying `rule(f, r, t, [x, g, ...], ctx) -> new tensors` per tensor."""

    def lower(ctx: NodeContext, r: Instruction, t: Instruction, *tensors) -> list[Instruction]:
        b = ctx.b
        if r.array_shape.size != 1 or t.array_shape.size != 1:
            raise ShapeError("R and T must be scalars")
        results = []
        for group in _update_groups(tensors, roles):
            x = group[0]
            f = Formula(b, x)
            # the scalars in x's type, broadcast to x's shape
            r_x, t_x = (
                b.broadcast_to(b.convert(b.reshape(s, []), x.array_shape.dtype), x.array_shape.dims)
                for s in (r, t)
            )
            results.append(rule(f, r_x, t_x, group, ctx))
        # outputs: every tensor's first result, then every tensor's second...
        return [outs[k] for k in range(len(results[0])) for outs in results]

    return lower


def _regularized(f: Formula, x: Instruction, g: Instruction, ctx: NodeContext) -> Instruction:
    """The gradient plus that of the L2 term: norm_coefficient * x + g."""
    return f.add(f.mul(x, ctx.required_attr("norm_coefficient")), g)


def _adagrad(f: Formula, r, t, group, ctx: NodeContext) -> list[Instruction]:
    x, g, h = group
    rate = f.div(r, f.add(f.mul(t, ctx.attr("decay_factor")), 1))
    g = _regularized(f, x, g, ctx)
    h_new = f.add(h, f.mul(g, g))
    scale = f.add(f.f(Op.SQRT, h_new), ctx.attr("epsilon"))
    return [f.sub(x, f.div(f.mul(rate, g), scale)), h_new]


def _adam(f: Formula, r, t, group, ctx: NodeContext) -> list[Instruction]:
    x, g, v, h = group
    alpha, beta = ctx.attr("alpha"), ctx.attr("beta")
    g = _regularized(f, x, g, ctx)
    v_new = f.add(f.mul(v, alpha), f.mul(g, 1 - alpha))
    h_new = f.add(f.mul(h, beta), f.mul(f.mul(g, g), 1 - beta))
    scale = f.add(f.f(Op.SQRT, h_new), ctx.attr("epsilon"))
    # bias correction of both momenta from the second step on (t > 0)
    beta_t, alpha_t = (f.b.binary(Op.POWER, f.k(base), t) for base in (beta, alpha))
    corrected = f.div(f.mul(r, f.f(Op.SQRT, f.sub(1, beta_t))), f.sub(1, alpha_t))
    rate = f.where(t, Direction.GT, 0, corrected, r)
    x_new = f.sub(x, f.mul(rate, f.div(v_new, scale)))
    return [f.mul(x_new, 1 - ctx.attr("norm_coefficient_post")), v_new, h_new]


def _momentum(f: Formula, r, t, group, ctx: NodeContext) -> list[Instruction]:
    x, g, v = group
    alpha = ctx.required_attr("alpha")
    mode = ctx.choice("mode", ("standard", "nesterov"))
    g = _regularized(f, x, g, ctx)
    # the gradient's coefficient is 1 at the first step (t == 0)
    beta = f.where(t, Direction.GT, 0, ctx.required_attr("beta"), 1)
    v_new = f.add(f.mul(v, alpha), f.mul(g, beta))
    step = v_new if mode == "standard" else f.add(g, f.mul(v_new, alpha))
    return [f.sub(x, f.mul(r, step)), v_new]


onnx_op("Adagrad", domain=TRAINING, since=1)(make_optimizer(3, _adagrad))
onnx_op("Adam", domain=TRAINING, since=1)(make_optimizer(4, _adam))
onnx_op("Momentum", domain=TRAINING, since=1)(make_optimizer(3, _momentum))
