"""Regularisation selected by role and brick path, not by hand-listed parameters."""

from __future__ import annotations

import re

from . import functions as F
from . import roles as _roles
from .autograd import Tensor, no_grad
from .autograd.trace import host
from .backend.random import Generator

#: the name under which a model holds a WeightNoise's generator: this, then its role and seed
NOISE_PREFIX = "_lk_noise_"


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

    The noise generator is also the model's (a brick generator, as a ``Dropout``'s is), under
    ``NOISE_PREFIX + "<role>_<seed>"`` (``model._lk_noise_weight_0``): a MainLoop's checkpoint
    saves its counter, so a resumed run draws the noise the uninterrupted one drew. Two
    WeightNoise of one role and seed on one model (made again in a notebook, or nested) share
    it: one stream, saved once. Its draws are never batch-shaped (every rank of a
    data-parallel run draws the same noise). Make the WeightNoise before loading a checkpoint."""

    def __init__(self, model, std, role=_roles.WEIGHT, seed=0):
        from .bricks import Brick

        self.model, self.std, self.role = model, std, role
        generator = Generator(seed)
        if isinstance(model, Brick):
            name = NOISE_PREFIX + re.sub(r"\W", "_", f"{role.name.lower()}_{generator.seed}")
            held = model.__dict__.get(name)
            if isinstance(held, Generator) and held.seed == generator.seed:
                generator = held
            elif held is not None:
                raise ValueError(f"WeightNoise: {model.path}.{name} is taken by a "
                                 f"{type(held).__name__}; rename that attribute")
            else:
                setattr(model, name, generator)
        self.generator = generator

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
            with g.unsharded():  # NOTE: a weight is not a batch: the same on every rank
                noise = g.normal(shape, 0.0, self.std, dtype=dtype)
            if g.device != device:
                from .backend import asarray

                noise = asarray(noise, device=device)
            return noise
        return draw

    def __exit__(self, *exc):
        for p, d in self.saved:
            p.data = d
