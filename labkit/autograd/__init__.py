"""Define-by-run autograd: Tensor, Function, backward, grad, hvp, jvp, no_grad."""

from __future__ import annotations

from . import engine
from .function import Function, enable_grad, grad_enabled, no_grad, set_grad_enabled
from .tensor import Tensor, output_grad, tensor
from .tensor import ones_like as _ones_like


def _zeros_like(t: Tensor) -> Tensor:
    from ..backend import full

    return Tensor(full(t.shape, 0, t.dtype, t.data))


def grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None,
         allow_unused=False):
    """Gradients of ``outputs`` w.r.t. ``inputs`` (lists of Tensors), without touching
    ``.grad``. With ``create_graph=True`` the result is differentiable again.

    Examples
    --------
    >>> import labkit as lk
    >>> x = lk.tensor([3.0], requires_grad=True)
    >>> gx, = lk.grad([x ** 3], [x], create_graph=True)   # 3 x^2 = 27
    >>> ggx, = lk.grad([gx], [x])                          # 6 x = 18
    >>> float(gx.item()), float(ggx.item())
    (27.0, 18.0)
    """
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    gys = [output_grad(y, g, "grad") for y, g in zip(outputs, grad_outputs)]
    if retain_graph is None:
        retain_graph = create_graph
    found = engine.run(outputs, gys, targets=inputs, retain_graph=retain_graph,
                       create_graph=create_graph)
    if not allow_unused:
        for k, f in enumerate(found):
            if f is None:
                raise RuntimeError(f"grad: input {k} (shape {inputs[k].shape}) is not used to "
                                   "compute the outputs; pass allow_unused=True to get None")
    return found


def hvp(f, xs, vs):
    """Hessian-vector product of the scalar function ``f(*xs)``: H(xs) @ vs (double backprop).
    Where the Hessian is zero (``f`` linear or piecewise linear in ``xs``, or not reading
    one of them) its product is zeros, as PyTorch's ``hvp`` gives."""
    xs = [x if x.requires_grad else Tensor(x.data, requires_grad=True) for x in xs]
    y = f(*xs)
    gs = grad([y], xs, create_graph=True, allow_unused=True)
    from .. import functions as F

    dot = None
    for g, v in zip(gs, vs):
        if g is None or not g.requires_grad:
            continue  # NOTE: a gradient that is a constant: its part of the product is 0
        term = F.sum(g * v)
        dot = term if dot is None else dot + term
    out = [None] * len(xs) if dot is None else grad([dot], xs, allow_unused=True)
    return [o if o is not None else _zeros_like(x) for o, x in zip(out, xs)]


def jvp(f, xs, vs):
    """Forward-mode directional derivative J(xs) @ vs (Theano's R-op), by differentiating a
    vector-Jacobian product w.r.t. its cotangent (the double-backward trick)."""
    xs = [x if x.requires_grad else Tensor(x.data, requires_grad=True) for x in xs]
    ys = f(*xs)
    single = isinstance(ys, Tensor)
    ys = [ys] if single else list(ys)
    us = [Tensor(_ones_like(y).data * 0, requires_grad=True) for y in ys]
    if not any(y.requires_grad for y in ys):  # NOTE: no x reaches them: the derivative is 0
        return _zeros_like(ys[0]) if single else [_zeros_like(y) for y in ys]
    gs = grad(ys, xs, grad_outputs=us, create_graph=True, allow_unused=True)
    from .. import functions as F

    dot = None
    for g, v in zip(gs, vs):
        if g is None:
            continue
        term = F.sum(g * v)
        dot = term if dot is None else dot + term
    out = ([None] * len(us) if dot is None or not dot.requires_grad
           else grad([dot], us, allow_unused=True))
    out = [o if o is not None else _zeros_like(u) for o, u in zip(out, us)]
    return out[0] if single else out


def gradcheck(fn, inputs, device="cpu", eps=1e-3, rtol=2e-2, atol=1e-3, seed=0) -> float:
    """Check ``fn``'s backward against float64 central differences; returns the worst error.

    ``fn(*tensors)`` returns a Tensor; ``inputs`` are NumPy arrays. The analytic gradient of
    ``sum(fn(*xs) * r)`` (``r`` random) is taken on ``device`` in the inputs' dtype; the numeric
    one evaluates ``fn`` in float64 on the cpu. Raises ``AssertionError`` naming the input and
    the element that disagree.

    Examples
    --------
    >>> import numpy as np, labkit as lk, labkit.functions as F
    >>> err = lk.autograd.gradcheck(lambda x: F.tanh(x) * x, [np.linspace(-2, 2, 5)])
    >>> err < 1e-6
    True
    """
    import numpy as np

    xs64 = [np.asarray(x, dtype=np.float64) for x in inputs]
    ts = [tensor(np.asarray(x), device=device, requires_grad=True) for x in inputs]
    y = fn(*ts)
    r = np.random.default_rng(seed).standard_normal(y.shape)
    rt = tensor(r.astype(y.dtype), device=device)
    from .. import functions as F

    F.sum(y * rt).backward()

    def f64(*arrays):
        with no_grad():
            out = fn(*[tensor(a) for a in arrays]).numpy().astype(np.float64)
        return float((out * r).sum())

    worst = 0.0
    for k, (t, x) in enumerate(zip(ts, xs64)):
        got = np.zeros_like(x) if t.grad is None else t.grad.numpy().astype(np.float64)
        want = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            hi, lo = x.copy(), x.copy()
            hi[i] += eps
            lo[i] -= eps
            args_hi = [*xs64[:k], hi, *xs64[k + 1:]]
            args_lo = [*xs64[:k], lo, *xs64[k + 1:]]
            want[i] = (f64(*args_hi) - f64(*args_lo)) / (2 * eps)
        err = np.abs(got - want) / (atol + rtol * np.abs(want))
        if err.max(initial=0) > 1:
            j = np.unravel_index(int(err.argmax()), err.shape)
            raise AssertionError(f"gradcheck: input {k}, element {tuple(int(v) for v in j)}: "
                                 f"backward gives {got[j]:.6g}, central differences "
                                 f"{want[j]:.6g} (eps={eps}, device {device})")
        scale = np.abs(want).max(initial=0) + atol
        worst = max(worst, float(np.abs(got - want).max(initial=0) / scale))
    return worst


__all__ = ["Function", "Tensor", "enable_grad", "grad", "grad_enabled", "gradcheck", "hvp",
           "jvp", "no_grad", "set_grad_enabled", "tensor"]
