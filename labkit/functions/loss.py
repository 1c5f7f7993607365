"""Losses and metrics: softmax_cross_entropy, sigmoid_cross_entropy, mean_squared_error,
accuracy."""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function, grad_enabled
from ..autograd.tensor import Tensor
from ..autograd.trace import host, tracer
from ..backend import full
from ..backend.opencl import ascontiguousarray
from ..backend.opencl import xent as _xent
from ..backend.opencl.lse import logsumexp_parts
from ..errors import ShapeError
from . import _check
from ._util import operands, row_max, xp_of
from .activation import Softmax
from .math import AddConstant, MulConstant, mul
from .reduction import mean, sum


def _labels(t, x, op, ignore_label, name="labels"):
    """Integer labels of the shape of ``x`` without its class axis 1, each a class in
    ``[0, C)`` or ``ignore_label``, on ``x``'s device.

    NOTE: labels given as NumPy arrays or lists are checked on the host before they are
    copied; labels already on an OpenCL device only when ``LABKIT_CHECK_INDICES`` is on (a
    device-to-host read of one flag)."""
    d = _check.integers(_check.data(t, x, op, name, move=False), op, name)
    if x.ndim < 2 or tuple(d.shape) != x.shape[:1] + x.shape[2:]:
        raise ShapeError(f"{op}: {name} of shape {tuple(d.shape)} do not match x of shape "
                         f"{x.shape}; expected {name} of shape {x.shape[:1] + x.shape[2:]} "
                         f"(x is (N, C, ...) with the classes on axis 1)")
    _check.indices(d, x.shape[1], op, name, f"x with {x.shape[1]} classes",
                   ignore=ignore_label)
    if isinstance(d, np.ndarray) and xp_of(x.data) is not np:
        from ..backend import opencl

        rt = x.data.rt
        d = host(lambda a: opencl.asarray(a, device=rt), d, name="upload labels")
    return d


def softmax_cross_entropy(logits, labels, reduce="mean", ignore_label=-1):
    """Cross-entropy of ``softmax(logits)`` (N, C, ...) against integer ``labels`` (N, ...).

    ``reduce``: "mean" (over labels that are not ``ignore_label``), "sum" or "none".
    Stable for logits of any magnitude (log_softmax through logsumexp). A label outside
    ``[0, C)`` that is not ``ignore_label`` (None: none is ignored) raises ``IndexError``.
    """
    op = "softmax_cross_entropy"
    _check.choice(reduce, ("mean", "sum", "none"), op, "reduce")
    _check.floating(logits, op, "logits")
    if ignore_label is not None:
        ignore_label = _check.integer(ignore_label, op, "ignore_label")
    t = _labels(labels, logits, op, ignore_label)
    # NOTE: with ignore_label=None every label is a class (checked), so -1 matches none
    return SoftmaxCrossEntropy(t, reduce, -1 if ignore_label is None else ignore_label).apply(
        (logits,))


class SoftmaxCrossEntropy(Function):
    """A class, not log_softmax + pick + mean: one node instead of seven forward and a dozen
    backward, which is most of a small model's step. The backward is composed of labkit
    functions ((softmax(x) - onehot) * scale), so it is differentiable again."""

    name = "softmax_cross_entropy"

    def __init__(self, t, reduce, ignore_label):
        self.t, self.reduce, self.ignore = t, reduce, ignore_label

    # NOTE: _onehot and _scale read nothing but their arguments (the logits, for their shape
    # and dtype, and the labels): a compiled step on an OpenCL device replays their launches
    # when they run as its host steps (``lk_capture``, compile/capture.py)
    def _onehot(self, x, t=None):
        """The one-hot rows of the labels ``t`` (this call's, ``self.t``, when None)."""
        xp = xp_of(x)
        c = x.shape[1]
        t = self.t if t is None else t
        if xp is not np and x.ndim == 2 and _xent.labels_fit(t):
            return _xent.onehot(t, c, x.dtype)  # NOTE: one launch, not two
        # NOTE: on a device the class indices are made once and shared (not uploaded per call)
        classes = (np.arange(c) if xp is np else xp.class_indices(c, x.rt)).reshape(
            (1, c) + (1,) * (x.ndim - 2))
        # ignore_label matches no class: its row is all zeros
        return (classes == t.reshape(t.shape[:1] + (1,) + t.shape[1:])).astype(x.dtype)

    def _scale(self, x, t=None):
        """Per-label weight of the reduction: valid / count for "mean", valid otherwise (of the
        labels ``t``; this call's, ``self.t``, when None)."""
        xp = xp_of(x)
        t = self.t if t is None else t
        if xp is not np and _xent.labels_fit(t):  # NOTE: one launch, not six
            return _xent.row_weights(t, self.ignore, self.reduce == "mean", x.dtype)
        if t.dtype.kind == "u" and self.ignore < 0:  # NOTE: no unsigned label is ignored
            valid = full(t.shape, 1, x.dtype, x)
        else:
            valid = (t != self.ignore).astype(x.dtype)
        if self.reduce == "mean":
            count = xp.maximum(valid.sum(), 1).astype(x.dtype)
            valid = valid / count
        return valid

    def _nll(self, z, lse):
        """Each row's ``lse - z`` at its label (``z``: the logits, or the logits less their
        row's maximum, ``lse`` then its log-sum-exp); for an ignored label ``0 * lse``.
        Picked, not summed against a one-hot: a logit of -inf at another class (a mask) left
        the loss NaN (0 * inf) where it is finite, as in PyTorch. A NaN or +inf logit, or a
        row all -inf, still makes the row's loss NaN (through ``lse``), ignored or not."""
        t = self.t
        lse0 = lse.reshape(lse.shape[:1] + lse.shape[2:])
        if t.dtype.kind == "u" and self.ignore < 0:  # NOTE: no unsigned label is ignored
            valid = None
        else:
            valid = t != self.ignore
        if xp_of(z) is np:
            if valid is not None and valid.all():
                valid = None
            idx = t if valid is None else np.where(valid, t, 0)
            if z.ndim == 2:
                picked = z[np.arange(z.shape[0]), idx]
            else:
                picked = np.take_along_axis(
                    z, np.expand_dims(idx.astype(np.intp, copy=False), 1), axis=1)
            nll = lse0 - picked.reshape(lse0.shape)
        else:  # NOTE: logits a kernel does not take (strided, over 4,096 classes, N-d);
            # z is x less its finite shift, and lse - lse makes a row with a +inf logit (or
            # all -inf) NaN as x - max does on the CPU
            nll = (lse0 - xp_of(z).where(self._onehot(z) > 0, z, 0).sum(axis=1)) + (
                lse0 - lse0)
        return nll if valid is None else xp_of(z).where(valid, nll, lse0 * 0)

    _onehot.lk_capture = _scale.lk_capture = True

    def forward(self, x):
        xp = xp_of(x)
        self.p = None
        if xp is np:
            m = row_max(x)
            z = x - m
            lse = xp.log(xp.exp(z).sum(axis=1, keepdims=True))
            nll = self._nll(z, lse)
            if np.isfinite(m).all():
                # NOTE: the softmax the gradient needs, as softmax(x, axis=1) computes it
                # (activation._softmax_array: the same operations, so the same bits), from
                # this forward's sums: the backward does not compute it again
                self.p = np.exp(z - lse)
        elif _xent.fits(x, self.t):  # NOTE: one launch (backend/opencl/xent.py)
            return _xent.softmax_cross_entropy(x, self.t, self.ignore, self.reduce)
        else:  # NOTE: each row's shift and log-sum in one kernel (composed: five launches)
            shift, logsum = logsumexp_parts(x, 1)
            nll = self._nll(x - shift, logsum)
        if self.reduce == "none":
            return nll
        w = self._scale(x)
        return (nll * w).sum()

    def backward(self, inputs, gy):
        from .array import expand_dims
        from .math import broadcast_to

        (x,) = inputs
        xd = x.data
        if not grad_enabled() and xp_of(xd) is not np and _xent.grad_fits(
                xd, self.t, gy.data, self.reduce):
            # NOTE: one launch for what is five composed (a gradient not differentiated again)
            return _XentGrad(self.t, self.reduce, self.ignore).apply((x, gy))
        # NOTE: host: a compiled step computes these again from that call's labels, given as
        # an input (so that on a device it can replay their launches: compile/capture.py)
        w = host(self._scale, xd, self.t, name="cross_entropy.scale")
        if self.reduce == "none":
            g = gy * w
        else:
            g = MulConstant(w).apply((broadcast_to(gy, w.shape),))
        diff = _KeptSoftmax(self).apply((x,)) - Tensor(
            host(self._onehot, xd, self.t, name="cross_entropy.onehot"))
        return diff * expand_dims(g, 1)


class _XentGrad(Function):
    """The cross-entropy's gradient through its (N, C) logits on an OpenCL device, one launch
    (backend/opencl/xent.py ``grad``): what the composed backward computes, for a backward
    that does not record a graph (with ``create_graph`` the composed form runs: it is
    differentiable again). Its labels ``t`` are an attribute, as SoftmaxCrossEntropy's."""

    name = "softmax_cross_entropy_grad"

    def __init__(self, t, reduce, ignore):
        self.t, self.reduce, self.ignore = t, reduce, ignore

    def forward(self, x, gy):
        t = self.t
        if not _xent.grad_fits(x, t, gy, self.reduce):
            # NOTE: a compiled step's replay with arrays laid out otherwise (strided labels)
            x, t, gy = (ascontiguousarray(a) for a in (x, t, gy))
        return _xent.grad(x, t, gy, self.ignore, self.reduce)

    def backward(self, inputs, gy):
        raise RuntimeError("softmax_cross_entropy: its fused gradient was differentiated; it "
                           "is made only where no graph is recorded (a bug in labkit)")


class _KeptSoftmax(Softmax):
    """softmax(x) over axis 1 for the cross-entropy's gradient: the one its forward kept (a
    compiled step replays that forward first), else computed (as Softmax, also its
    gradient)."""

    def __init__(self, xent):
        super().__init__(1)
        self.xent = xent

    def forward(self, x):
        p = getattr(self.xent, "p", None)
        if p is not None and p.shape == x.shape and p.dtype == x.dtype:
            return p
        return super().forward(x)


def sigmoid_cross_entropy(x, t, reduce="mean"):
    """Binary cross-entropy of sigmoid(x) against targets t in [0, 1], stable for any x:
    max(x, 0) - x t + log(1 + e^-|x|)."""
    op = "sigmoid_cross_entropy"
    _check.floating(x, op)
    _check.choice(reduce, ("mean", "sum", "none"), op, "reduce")
    td = _check.data(t, x, op, "t", move=False)
    if tuple(td.shape) != x.shape:
        raise ShapeError(f"sigmoid_cross_entropy: targets of shape {tuple(td.shape)} do not "
                         f"match x of shape {x.shape}")
    if td.dtype != x.dtype:
        # NOTE: host: a compiled step casts each call's targets again (a cast outside the
        # trace was a value the replay could not recompute: the step was refused); NumPy
        # targets before they are copied to the device below (float64 ones to a device
        # without it)
        dtype = x.dtype
        td = host(lambda a: a.astype(dtype), td, name="targets.astype")
    td = _check.data(td, x, op, "t")  # NOTE: NumPy targets copied to x's device (a host step)
    loss = SigmoidCrossEntropy(td).apply((x,))
    return mean(loss) if reduce == "mean" else (sum(loss) if reduce == "sum" else loss)


class SigmoidCrossEntropy(Function):
    """Each element's ``max(x, 0) - x t + log1p(e^-|x|)``; the gradient is ``sigmoid(x) - t``
    everywhere. Composed of relu, abs and log1p (as it was), the gradient at x = 0 exactly was
    ``-t`` instead of ``1/2 - t`` (relu's and abs's gradients there are conventions), so a
    zero-initialised classifier took a wrong first step; and an infinite logit gave
    ``inf - inf``: NaN, where the loss is 0 for a target that agrees with it (1 for +inf, 0
    for -inf) and inf otherwise."""

    name = "sigmoid_cross_entropy"

    def __init__(self, t):
        self.t = t  # NOTE: the targets, on x's device in x's dtype; not differentiated

    def forward(self, x):
        xp, t = xp_of(x), self.t
        with np.errstate(invalid="ignore"):  # NOTE: inf - inf where x is infinite: replaced
            loss = xp.maximum(x, 0) - x * t + xp.log1p(xp.exp(-xp.abs(x)))
        w = xp.where(x > 0, 1 - t, t)  # NOTE: the weight of an infinite logit's term
        return xp.where(xp.isinf(x), xp.where(w == 0, w, xp.abs(x)), loss)

    def backward(self, inputs, gy):
        from .math import sigmoid

        # NOTE: sigmoid(x) + (-t); host: a compiled step negates each call's targets
        minus_t = host(lambda a: -a, self.t, name="targets.neg")
        return gy * AddConstant(minus_t).apply((sigmoid(inputs[0]),))


def mean_squared_error(a, b):
    """mean((a - b) ** 2) over every element; one of ``a``, ``b`` may be a constant (an array
    or a list, as for ``sub``)."""
    a, b = operands(a, b, "mean_squared_error")
    if a.shape != b.shape:
        raise ShapeError(f"mean_squared_error: shapes {a.shape} and {b.shape} differ")
    d = a - b
    return mean(d * d)


def accuracy(y, t, ignore_label=None):
    """Fraction of rows whose argmax matches ``t`` (not differentiable); a float."""
    _check.tensor(y, "accuracy", "y")
    td = _labels(t, y, "accuracy", ignore_label, "t")
    if tracer() is not None:
        # NOTE: inside lk.compile's trace a float would be this call's value at every replay:
        # the fraction is a 0-d tensor computed again at each call (the loop reports either)
        # NOTE: float64, the eager float's value (0.2, not float32's 0.20000000298)
        return Tensor(host(lambda yd, tt: np.asarray(_accuracy(yd, tt, ignore_label),
                                                      np.float64), y.data, td,
                           name="accuracy"))
    return _accuracy(y.data, td, ignore_label)


def _accuracy(yd, td, ignore_label):
    pred = yd.argmax(axis=1)
    hit = pred == td
    if ignore_label is not None:
        valid = td != ignore_label
        n = int(valid.sum())
        return float((hit & valid).sum() if xp_of(hit) is np else
                     xp_of(hit).logical_and(hit, valid).sum()) / max(n, 1)
    return float(hit.mean() if xp_of(hit) is np else hit.astype(np.float32).mean())


_ = mul  # re-exported by __init__
