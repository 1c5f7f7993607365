"""Noise: dropout from the device's counter-based generator (reproducible, checkpointable)."""

from __future__ import annotations

from ..autograd.trace import host
from ..backend.random import Generator
from ..errors import DeviceMismatchError, DTypeError
from . import _check
from .math import MulConstant

_default: dict = {}


def default_generator(device) -> Generator:
    """The generator dropout uses on ``device`` when none is given (seed 0; its
    ``state_dict()`` goes into checkpoints)."""
    key = str(device)
    if key not in _default:
        _default[key] = Generator(0, device)
    return _default[key]


def default_generators() -> dict[str, Generator]:
    """The default generators made so far, by device name (what a checkpoint saves)."""
    return dict(_default)


def dropout(x, ratio=0.5, training=True, generator=None):
    """Zero each element with probability ``ratio`` and scale the rest by 1/(1-ratio)."""
    _check.floating(x, "dropout")
    _check.scalar(ratio, "dropout", "ratio")
    if generator is not None and not isinstance(generator, Generator):
        raise DTypeError(f"dropout: generator must be a labkit Generator, got "
                         f"{type(generator).__name__}")
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"dropout: ratio must be in [0, 1), got {ratio}")
    if not training or ratio == 0.0:
        return x
    g = generator if generator is not None else default_generator(x.device)
    if g.device != x.device:
        raise DeviceMismatchError(f"dropout: the generator is on {g.device} but x on "
                                  f"{x.device}; create it with Generator(seed, x.device)")
    shape, dtype = x.shape, x.dtype

    def mask():  # NOTE: a compiled step draws a fresh mask at each replay (host)
        keep = g.bernoulli(shape, 1.0 - ratio)
        return keep.astype(dtype) * dtype.type(1.0 / (1.0 - ratio))

    # NOTE: effect: drawing advances the generator, so a compiled replay draws it even where
    # the dropout's result is unused (pruned, the masks after it and the generator's state
    # differed from eager)
    return MulConstant(host(mask, name="dropout.mask", effect=True)).apply((x,))
