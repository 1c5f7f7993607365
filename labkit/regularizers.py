"""Regularisation selected by role and brick path, not by hand-listed parameters."""

from __future__ import annotations

from . import functions as F
from . import roles as _roles
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
    (gradients are taken at the noisy weights); the exact weights come back on exit."""

    def __init__(self, model, std, role=_roles.WEIGHT, seed=0):
        self.model, self.std, self.role = model, std, role
        self.generator = Generator(seed)

    def __enter__(self):
        self.saved = []
        for p in self.model.params(role=self.role).values():
            self.saved.append((p, p.data))
            noise = self.generator.normal(p.shape, 0.0, self.std, dtype=p.dtype)
            if not isinstance(p.data, type(noise)):
                from .backend import asarray

                noise = asarray(noise, device=p.device)
            p.data = p.data + noise
        return self

    def __exit__(self, *exc):
        for p, d in self.saved:
            p.data = d
