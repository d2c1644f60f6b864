"""Recurrent ops RNN, LSTM and GRU, unrolled over the (static) sequence length.

One driver handles what the three share (layout, directions, biases, initial
states, sequence_lens, the Y / Y_h / Y_c outputs); a cell function per op
computes one time step.  The input projection X W^T + Wb (+ Rb where a gate
adds it unchanged) is one dot over all time steps; each step adds H R^T.
sequence_lens is honoured at run time: past a batch entry's length its state is
carried unchanged and its Y rows are zero (a reverse pass thus starts at the
entry's last valid step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, ShapeError, UnsupportedError
from ...ir import ComputationBuilder, Direction, DotDims, Instruction, Op
from ...ir.evaluate import evaluate_constant
from .helpers import Formula, full
from .registry import NodeContext, onnx_op

Activation = Callable[[Formula, Instruction, float, float], Instruction]

# name (lower case) -> (f(formula, x, alpha, beta), default alpha, default beta); None: unused
ACTIVATIONS: dict[str, tuple[Activation, float | None, float | None]] = {
    "relu": (lambda f, x, a, b: f.max(x, 0), None, None),
    "tanh": (lambda f, x, a, b: f.f(Op.TANH, x), None, None),
    "sigmoid": (lambda f, x, a, b: f.f(Op.LOGISTIC, x), None, None),
    "affine": (lambda f, x, a, b: f.add(f.mul(x, a), b), 1.0, 0.0),
    "leakyrelu": (lambda f, x, a, b: f.where(x, Direction.LT, 0, f.mul(x, a), x), 0.01, None),
    "thresholdedrelu": (lambda f, x, a, b: f.where(x, Direction.GT, a, x, 0), 1.0, None),
    "scaledtanh": (lambda f, x, a, b: f.mul(f.f(Op.TANH, f.mul(x, b)), a), 1.0, 1.0),
    "hardsigmoid": (lambda f, x, a, b: f.max(f.min(f.add(f.mul(x, a), b), 1), 0), 0.2, 0.5),
    "elu": (
        lambda f, x, a, b: f.where(x, Direction.GT, 0, x, f.mul(f.f(Op.EXPM1, x), a)),
        1.0,
        None,
    ),
    "softsign": (lambda f, x, a, b: f.div(x, f.add(f.f(Op.ABS, x), 1)), None, None),
    "softplus": (lambda f, x, a, b: f.f(Op.LOG1P, f.f(Op.EXP, x)), None, None),
}

DIRECTIONS = ("forward", "reverse", "bidirectional")


@dataclass(frozen=True)
class CellKind:
    gates: int  # gate blocks stacked in W and R
    folded: int  # leading gates whose recurrent bias Rb folds into the input projection
    activations: tuple[str, ...]  # the defaults, per direction


RNN_CELL = CellKind(1, 1, ("Tanh",))
GRU_CELL = CellKind(3, 2, ("Sigmoid", "Tanh"))  # GRU's Rbh sits inside the reset product
LSTM_CELL = CellKind(4, 4, ("Sigmoid", "Tanh", "Tanh"))


class Step:
    """What a cell needs for one direction: activations, clip, weights, slicing."""

    def __init__(self, b: ComputationBuilder, like: Instruction, hidden: int, clip, funcs):
        self.b, self.hidden, self.clip, self.funcs = b, hidden, clip, funcs
        self.f = Formula(b, like)  # formulas on [batch, hidden]

    def act(self, index: int, x: Instruction, clip: bool = True) -> Instruction:
        """Activation `index` of this direction, applied after the clip (if `clip`)."""
        if clip and self.clip is not None:
            x = self.f.min(self.f.max(x, -self.clip), self.clip)
        fn, alpha, beta = self.funcs[index]
        return fn(self.f, x, alpha, beta)

    def gate(self, x: Instruction, index: int) -> Instruction:
        """Gate block `index` of a [batch, gates * hidden] array."""
        batch, h = x.array_shape.dims[0], self.hidden
        return self.b.slice(x, [0, index * h], [batch, (index + 1) * h])

    def matmul_t(self, x: Instruction, w: Instruction) -> Instruction:
        """x W^T for x [rows, k] and W [n, k]."""
        return self.b.dot(x, w, DotDims((), (), (1,), (1,)))


def _activation_funcs(ctx: NodeContext, kind: CellKind, dirs: int) -> list[list[tuple]]:
    """Per direction, the activation functions with their alpha and beta."""
    # the schema's default lists two functions even for RNN; only given lists count
    given = any(a.name == "activations" for a in ctx.node.attribute)
    names = list(ctx.attr("activations")) if given else list(kind.activations * dirs)
    per_dir = len(kind.activations)
    if len(names) == per_dir and dirs == 2:
        names = names * 2
    if len(names) != per_dir * dirs:
        raise ModelError(f"activations lists {len(names)} functions, expected {per_dir * dirs}")
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    funcs = []
    for name in names:
        if name.lower() not in ACTIVATIONS:
            raise UnsupportedError(f"activation function '{name}' is not supported")
        fn, alpha, beta = ACTIVATIONS[name.lower()]
        # alphas and betas are consumed in order by the functions that take them
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        funcs.append((fn, alpha, beta))
    return [funcs[d * per_dir : (d + 1) * per_dir] for d in range(dirs)]


def _direction_slice(b: ComputationBuilder, x: Instruction, d: int) -> Instruction:
    """x[d] of a [dirs, ...] array."""
    dims = x.array_shape.dims
    return b.reshape(b.slice(x, [d] + [0] * (len(dims) - 1), [d + 1, *dims[1:]]), dims[1:])


def _full_lengths(seq_lens: Instruction, seq: int) -> bool:
    """Whether sequence_lens is a constant that covers every step (no masking needed)."""
    value = evaluate_constant(seq_lens)
    return value is not None and bool(np.all(np.asarray(value) >= seq))


def _recurrent(ctx: NodeContext, kind: CellKind, cell, x, w, r, bias, seq_lens, states, peep):
    """The shared driver; `cell(step, xw_t, states, weights) -> new states` (h first)."""
    b = ctx.b
    dtype = x.shape.dtype
    if not dtype.is_float:
        raise UnsupportedError(f"{ctx.node.op_type} input must be a float tensor")
    direction = ctx.choice("direction", DIRECTIONS)
    dirs = 2 if direction == "bidirectional" else 1
    layout = ctx.attr("layout", 0)
    if x.shape.rank != 3:
        raise ShapeError(f"X must be rank 3, got {list(x.shape.dims)}")
    if layout:
        x = b.transpose(x, [1, 0, 2])
        states = [None if s is None else b.transpose(s, [1, 0, 2]) for s in states]
    seq, batch, size = x.shape.dims
    hidden = ctx.attr("hidden_size") or r.shape.dims[-1]
    rows = kind.gates * hidden
    for name, value, dims in (("W", w, (dirs, rows, size)), ("R", r, (dirs, rows, hidden))):
        if value.shape.dims != dims:
            raise ShapeError(f"{name} has shape {list(value.shape.dims)}, expected {list(dims)}")
    if seq == 0:
        raise UnsupportedError("an empty sequence (seq_length 0)")
    mask_lengths = seq_lens is not None and not _full_lengths(seq_lens, seq)
    funcs = _activation_funcs(ctx, kind, dirs)
    clip = ctx.attr("clip")
    flat_x = b.reshape(x, [seq * batch, size])
    ys, finals = [], []
    for d in range(dirs):
        state_shape = [batch, hidden]
        own_bias = None if bias is None else _direction_slice(b, bias, d)
        weights = {
            "W": _direction_slice(b, w, d),
            "R": _direction_slice(b, r, d),
            "Rb": None if own_bias is None else b.slice(own_bias, [rows], [2 * rows]),
            "P": None if peep is None else _direction_slice(b, peep, d),
        }
        current = [
            full(b, 0, dtype, state_shape) if s is None else _direction_slice(b, s, d)
            for s in states
        ]
        step = Step(b, current[0], hidden, clip, funcs[d])
        xw = step.matmul_t(flat_x, weights["W"])
        if own_bias is not None:
            xw_bias = _input_bias(b, own_bias, rows, kind.folded * hidden)
            xw = b.binary(Op.ADD, xw, b.broadcast(xw_bias, [1], xw.array_shape.dims))
        xw = b.reshape(xw, [seq, batch, rows])
        reverse = direction == "reverse" or d == 1
        outputs: list[Instruction | None] = [None] * seq
        for t in reversed(range(seq)) if reverse else range(seq):
            xw_t = b.reshape(b.slice(xw, [t, 0, 0], [t + 1, batch, rows]), [batch, rows])
            new = cell(step, xw_t, current, weights)
            y_t = new[0]
            if mask_lengths:
                valid = _step_mask(b, seq_lens, t, state_shape)
                new = [b.select(valid, n, c) for n, c in zip(new, current)]
                y_t = b.select(valid, new[0], full(b, 0, dtype, state_shape))
            current = new
            outputs[t] = b.reshape(y_t, [1, 1, batch, hidden])
        ys.append(b.concatenate(outputs, 0) if ctx.output_used(0) else None)
        if mask_lengths:
            # an empty sequence's final states are zero, not the initial ones (as onnxruntime)
            ran = _step_mask(b, seq_lens, 0, state_shape)
            current = [b.select(ran, s, full(b, 0, dtype, state_shape)) for s in current]
        finals.append([b.reshape(s, [1, batch, hidden]) for s in current])
    y = b.concatenate(ys, 1) if ctx.output_used(0) else None
    per_state = [b.concatenate([f[i] for f in finals], 0) for i in range(len(states))]
    if layout:
        y = None if y is None else b.transpose(y, [2, 0, 1, 3])
        per_state = [b.transpose(s, [1, 0, 2]) for s in per_state]
    return [y, *per_state]


def _input_bias(b: ComputationBuilder, bias: Instruction, rows: int, folded: int):
    """Wb plus the first `folded` entries of Rb, from one direction's [Wb, Rb]."""
    wb = b.slice(bias, [0], [rows])
    if not folded:
        return wb
    rb = b.slice(bias, [rows], [rows + folded])
    rb = b.pad(rb, b.scalar(0, bias.array_shape.dtype), [0], [rows - folded])
    return b.binary(Op.ADD, wb, rb)


def _step_mask(b: ComputationBuilder, seq_lens: Instruction, t: int, dims) -> Instruction:
    """[batch, hidden] pred: t < sequence_lens[batch]."""
    if seq_lens.array_shape.rank != 1 or seq_lens.array_shape.dims[0] != dims[0]:
        raise ShapeError(
            f"sequence_lens has shape {list(seq_lens.array_shape.dims)}, not [{dims[0]}]"
        )
    lengths = b.broadcast(seq_lens, [0], dims)
    step = full(b, t, seq_lens.array_shape.dtype, dims)
    return b.compare(step, lengths, Direction.LT)


def _rnn_cell(step: Step, xw_t, states: Sequence[Instruction], weights) -> list[Instruction]:
    """H = f(X W^T + H R^T + Wb + Rb), the biases already in `xw_t`."""
    (h,) = states
    return [step.act(0, step.f.add(xw_t, step.matmul_t(h, weights["R"])))]


def _gru_cell(step: Step, xw_t, states: Sequence[Instruction], weights, linear: bool):
    """z, r = f(.); h~ = g(X Wh^T + (r * H) Rh^T + Rbh), or with linear_before_reset
    g(X Wh^T + r * (H Rh^T + Rbh)); H' = (1 - z) h~ + z H."""
    b, f, hidden = step.b, step.f, step.hidden
    (h,) = states
    batch = h.array_shape.dims[0]
    r_zr = b.slice(weights["R"], [0, 0], [2 * hidden, hidden])
    r_h = b.slice(weights["R"], [2 * hidden, 0], [3 * hidden, hidden])
    # Wb and Rb of z and r are in xw_t already; Rbh is added here
    zr = f.add(b.slice(xw_t, [0, 0], [batch, 2 * hidden]), step.matmul_t(h, r_zr))
    z, reset = step.act(0, step.gate(zr, 0)), step.act(0, step.gate(zr, 1))
    recurrent_h = step.matmul_t(h if linear else f.mul(reset, h), r_h)
    if weights["Rb"] is not None:
        rbh = b.slice(weights["Rb"], [2 * hidden], [3 * hidden])
        recurrent_h = f.add(recurrent_h, b.broadcast(rbh, [1], recurrent_h.array_shape.dims))
    if linear:
        recurrent_h = f.mul(reset, recurrent_h)
    candidate = step.act(1, f.add(step.gate(xw_t, 2), recurrent_h))
    return [f.add(f.mul(f.add(f.mul(z, -1), 1), candidate), f.mul(z, h))]


def _lstm_cell(step: Step, xw_t, states, weights, input_forget: bool) -> list[Instruction]:
    """Gates i, o, f, c (in W's order) with peepholes P = (Pi, Po, Pf):
    C' = f * C + i * g(c); H' = o * h(C'), o seeing C' through its peephole."""
    b, f = step.b, step.f
    h, c = states
    gates = f.add(xw_t, step.matmul_t(h, weights["R"]))  # biases are in xw_t
    peep = weights["P"]

    def peephole(x: Instruction, index: int, cell: Instruction) -> Instruction:
        if peep is None:
            return x
        p = b.slice(peep, [index * step.hidden], [(index + 1) * step.hidden])
        return f.add(x, f.mul(b.broadcast(p, [1], cell.array_shape.dims), cell))

    i = step.act(0, peephole(step.gate(gates, 0), 0, c))
    if input_forget:
        forget = f.add(f.mul(i, -1), 1)
    else:
        forget = step.act(0, peephole(step.gate(gates, 2), 2, c))
    c_new = f.add(f.mul(forget, c), f.mul(i, step.act(1, step.gate(gates, 3))))
    o = step.act(0, peephole(step.gate(gates, 1), 1, c_new))
    # the clip bounds gate inputs, not the cell state fed to h (as onnxruntime)
    return [f.mul(o, step.act(2, c_new, clip=False)), c_new]


@onnx_op("RNN")
def rnn(ctx: NodeContext, x, w, r, bias=None, seq_lens=None, initial_h=None):
    return _recurrent(ctx, RNN_CELL, _rnn_cell, x, w, r, bias, seq_lens, [initial_h], None)


@onnx_op("GRU")
def gru(ctx: NodeContext, x, w, r, bias=None, seq_lens=None, initial_h=None):
    linear = bool(ctx.attr("linear_before_reset", 0))

    def cell(step, xw_t, states, weights):
        return _gru_cell(step, xw_t, states, weights, linear)

    return _recurrent(ctx, GRU_CELL, cell, x, w, r, bias, seq_lens, [initial_h], None)


@onnx_op("LSTM")
def lstm(
    ctx: NodeContext,
    x,
    w,
    r,
    bias=None,
    seq_lens=None,
    initial_h=None,
    initial_c=None,
    peepholes=None,
):
    input_forget = bool(ctx.attr("input_forget", 0))

    def cell(step, xw_t, states, weights):
        return _lstm_cell(step, xw_t, states, weights, input_forget)

    states = [initial_h, initial_c]
    return _recurrent(ctx, LSTM_CELL, cell, x, w, r, bias, seq_lens, states, peepholes)
