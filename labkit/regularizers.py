"""Regularisation selected by role and brick path, not by hand-listed parameters."""

from __future__ import annotations

from . import functions as F
from . import roles as _roles
from .autograd import Tensor, no_grad
from .autograd.trace import host
from .backend.random import Generator


def l2_norms(model, role=_roles.WEIGHT):
    """``{brick path: sum of squares of its parameters with role}`` as Tensors (differentiable;
    add ``rate * sum(...)`` to a cost as an AUXILIARY term)."""
    out = {}
    for name, p in model.params(role=role).items():
        path = name.rsplit(".", 1)[0]
        term = F.sum(p * p)
        out[path] = term if path not in out else out[path] + term
    for v in out.values():
        v.role = _roles.AUXILIARY
    return out


def l2_penalty(model, rate, role=_roles.WEIGHT):
    """``rate * sum of squares`` over the parameters with ``role``: an auxiliary cost."""
    norms = list(l2_norms(model, role).values())
    if not norms:  # NOTE: an IndexError before
        has = sorted({str(getattr(p, "role", None)) for p in model.params().values()})
        raise ValueError(f"l2_penalty: no parameter of the model has the role {role} (its "
                         f"parameters' roles: {has}); pick one of those, e.g. lk.roles.WEIGHT")
    total = norms[0]
    for n in norms[1:]:
        total = total + n
    out = total * rate
    out.role = _roles.AUXILIARY
    return out


class WeightNoise:
    """Context manager: Gaussian noise of ``std`` on parameters with ``role`` inside the block
    (gradients are taken at the noisy weights); the exact weights come back on exit.

    Inside a compiled step (``lk.compile``) each replay draws fresh noise, and the weights are
    noisy exactly inside the block, as in an eager call.

    The noise generator is also the model's (a brick's generator, as a ``Dropout``'s is):
    ``model.weight_noise`` (``model.weight_noise_<role>`` for another role than WEIGHT), so a
    MainLoop's checkpoint saves its counter and a resumed run draws the noise the
    uninterrupted one drew. Make the WeightNoise once, with the model, before loading a
    checkpoint (one made at every step would start again from ``seed`` each time)."""

    def __init__(self, model, std, role=_roles.WEIGHT, seed=0):
        from .bricks import Brick

        self.model, self.std, self.role = model, std, role
        self.generator = Generator(seed)
        if isinstance(model, Brick):
            name = "weight_noise" + ("" if role is _roles.WEIGHT
                                     else "_" + role.name.lower().replace("-", "_"))
            setattr(model, name, self.generator)

    def __enter__(self):
        self.saved = []
        for p in self.model.params(role=self.role).values():
            self.saved.append((p, p.data))
            # NOTE: a host draw and a labkit op, so that a compiled step draws anew at each
            # replay (raw array code was refused by lk.compile)
            noise = host(self._draw(p.shape, p.dtype, p.device), name="WeightNoise.draw",
                         effect=True)
            with no_grad():
                p.data = (p + Tensor(noise)).data
        return self

    def _draw(self, shape, dtype, device):
        def draw():
            # NOTE: std and the generator read when it runs: a compiled step's replay draws
            # with those of its call (an annealed std was the traced call's)
            g = self.generator
            noise = g.normal(shape, 0.0, self.std, dtype=dtype)
            if g.device != device:
                from .backend import asarray

                noise = asarray(noise, device=device)
            return noise
        return draw

    def __exit__(self, *exc):
        for p, d in self.saved:
            p.data = d
