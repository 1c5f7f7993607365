"""Recurrent steps: lstm (Chainer's convention: the four gates concatenated)."""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..backend.opencl import lstm as _cl_lstm
from ..errors import ShapeError
from . import _check
from ._util import sigmoid_array, xp_of
from .array import concat, split
from .math import sigmoid, tanh


def _gate_sigmoid(x):
    """The gates' sigmoid on the CPU: ``1 / (1 + exp(-x))`` in four NumPy passes, where the
    stable ``sigmoid_array`` takes twelve (an LSTM step's (32, 384) gates: 28 -> 13 us).
    Within 3.5 ulp of the exact value wherever that is a normal number (the stable form:
    3.1; ``exp(-x)`` loses no relative precision); where it is subnormal (x below -87 in
    float32), 0, as ``exp(-x)`` overflows to inf (quietly). No log is taken of a gate, so
    that is all the precision it needs; float16 (overflow from x = -11) takes the stable
    form."""
    if x.dtype not in (np.float32, np.float64):
        return sigmoid_array(x)
    with np.errstate(over="ignore"):
        e = np.negative(x)
        np.exp(e, out=e)
        e += 1
        return np.divide(1, e, out=e)


def _gates(c_prev, x):
    """The gate activations a, i, f, o and the new cell c of one step, on device arrays."""
    n = c_prev.shape[1]
    a = xp_of(x).tanh(x[:, :n])
    s = _gate_sigmoid(x[:, n:]) if isinstance(x, np.ndarray) else sigmoid_array(x[:, n:])
    i, f, o = s[:, :n], s[:, n:2 * n], s[:, 2 * n:]
    return a, i, f, o, a * i + f * c_prev


# NOTE: one node per step, not the ~12 of composing tanh, sigmoid, split, mul and add: the
# composed step's backward was ~40 ops a step, the larger part of an eager LSTM's time. The
# backward is LSTMGrad, whose own backward is written in labkit functions (double backprop).
class LSTM(Function):
    name = "lstm"
    n_out = 2

    def forward(self, c_prev, x):
        self.gates = None
        if _cl_lstm.fits(c_prev, x):  # NOTE: one launch (backend/opencl/lstm.py)
            return _cl_lstm.forward(c_prev, x)
        return self._cell(c_prev, x)

    def forward_into(self, j, out, c_prev, x):
        """``forward`` with its output ``j`` (1: h) written into the NumPy array ``out`` (a
        compiled step's stack of the hidden states: compile/stacked.py)."""
        assert j == 1 and isinstance(x, np.ndarray)
        return self._cell(c_prev, x, out)

    def _cell(self, c_prev, x, out=None):
        a, i, f, o, c = _gates(c_prev, x)
        tc = xp_of(x).tanh(c)
        self.gates = (a, i, f, o, c, tc)  # NOTE: kept for the gradient (not recomputed)
        return c, (o * tc if out is None else np.multiply(o, tc, out=out))

    def backward(self, inputs, grads):
        return LSTMGrad(self).apply(tuple(inputs) + tuple(grads))


class LSTMGrad(Function):
    """(c_prev, x, gc, gh) -> (gc_prev, gx): the gradient of lstm's (c, h)."""

    name = "lstm_grad"
    n_out = 2

    def __init__(self, step=None):
        self.step = step  # the LSTM node whose gates it reuses (None: recomputed)

    def forward(self, c_prev, x, gc, gh):
        # NOTE: the gates are those the forward node kept (lk.compile replays that node
        # before this one, and reads its attribute then); on cl one kernel recomputes them
        if _cl_lstm.fits(c_prev, x, gc, gh):
            return _cl_lstm.grad(c_prev, x, gc, gh)
        return self._grads(c_prev, x, gc, gh)

    def forward_into(self, j, out, c_prev, x, gc, gh):
        """``forward`` with its output ``j`` (1: the gates' gradient) written into the NumPy
        array ``out`` (a compiled step's stack of them: compile/stacked.py)."""
        assert j == 1 and isinstance(x, np.ndarray)
        return self._grads(c_prev, x, gc, gh, out)

    def _grads(self, c_prev, x, gc, gh, out=None):
        kept = getattr(self.step, "gates", None) if self.step is not None else None
        if kept is not None:
            a, i, f, o, c, tc = kept
        else:
            a, i, f, o, c = _gates(c_prev, x)
            tc = xp_of(x).tanh(c)
        one = x.dtype.type(1)
        g = gc + gh * o * (one - tc * tc)
        gi = g * i
        ga = gi * (one - a * a)
        gi = gi * a * (one - i)
        gf = g * f
        gf_ = gf * c_prev * (one - f)
        go = gh * tc * o * (one - o)
        if out is not None:
            return gf, np.concatenate([ga, gi, gf_, go], axis=1, out=out)
        return gf, xp_of(x).concatenate([ga, gi, gf_, go], axis=1)

    def backward(self, inputs, grads):
        # the derivative of <gg_c_prev, gc_prev> + <gg_x, gx> with respect to each input,
        # by hand: through the gates, the new cell c and g = gc + gh * o * (1 - tanh(c)^2)
        c_prev, x, gc, gh = inputs
        gg_cp, gg_x = grads
        gA, gI, gF, gO = split(gg_x, 4, axis=1)
        xa, xi, xf, xo = split(x, 4, axis=1)
        a, i, f, o = tanh(xa), sigmoid(xi), sigmoid(xf), sigmoid(xo)
        da, di, df, do = 1 - a * a, i * (1 - i), f * (1 - f), o * (1 - o)
        c = a * i + f * c_prev
        tc = tanh(c)
        dtc = 1 - tc * tc
        g = gc + gh * o * dtc
        # the derivative through g, and through c (in g and in the output gate's gradient)
        G = gg_cp * f + gA * i * da + gI * a * di + gF * c_prev * df
        Gc = gh * dtc * (gO * do - 2 * G * o * tc)
        ga = (gI * di - 2 * gA * i * a) * g + Gc * i
        gi = (gA * da + gI * a * (1 - 2 * i)) * g + Gc * a
        gf = (gg_cp + gF * c_prev * (1 - 2 * f)) * g + Gc * c_prev
        go = G * gh * dtc + gO * gh * tc * (1 - 2 * o)
        g_cp = gF * g * df + Gc * f
        g_x = concat([ga * da, gi * di, gf * df, go * do], axis=1)
        return g_cp, g_x, G, G * o * dtc + gO * tc * do


def lstm(c_prev, x):
    """One LSTM step. ``x`` (N, 4H) holds the pre-activations of the cell input a and of the
    input, forget and output gates i, f, o; returns (c, h), each (N, H):
    ``c = tanh(a) * sigmoid(i) + sigmoid(f) * c_prev``, ``h = sigmoid(o) * tanh(c)``."""
    _check.tensor(c_prev, "lstm", "c_prev")
    _check.tensor(x, "lstm", "x")
    _check.same_dtype("lstm", c_prev=c_prev, x=x)
    if x.ndim != 2:
        raise ShapeError(f"lstm: x must be (N, 4H), got x.shape={x.shape}")
    n, h4 = x.shape
    if h4 % 4 or c_prev.shape != (n, h4 // 4):
        raise ShapeError(f"lstm: x must be (N, 4H) and c_prev (N, H); got x.shape={x.shape}, "
                         f"c_prev.shape={c_prev.shape}")
    return LSTM().apply((c_prev, x))
