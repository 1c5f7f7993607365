"""Initializers: seeded, drawn on the host by labkit's Philox generator, so a parameter has the
same bits on every device. Pass one to a brick's constructor (``Linear(784, 10,
weight_init=HeNormal())``)."""

from __future__ import annotations

import math

import numpy as np

from ..backend.random import Generator


def _fans(shape):
    if len(shape) < 2:
        return shape[0] if shape else 1, shape[0] if shape else 1
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    # W is (out, in, ...) as in PyTorch
    return shape[1] * receptive, shape[0] * receptive


class Initializer:
    def __call__(self, shape, dtype, rng: Generator) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({args})"


class Constant(Initializer):
    def __init__(self, value=0.0):
        self.value = value

    def __call__(self, shape, dtype, rng):
        return np.full(shape, self.value, dtype)


class Uniform(Initializer):
    def __init__(self, low=-0.05, high=0.05):
        self.low, self.high = low, high

    def __call__(self, shape, dtype, rng):
        return rng.uniform(shape, self.low, self.high, dtype=np.float64).astype(dtype)


class Normal(Initializer):
    def __init__(self, mean=0.0, std=0.05):
        self.mean, self.std = mean, std

    def __call__(self, shape, dtype, rng):
        return rng.normal(shape, self.mean, self.std, dtype=np.float64).astype(dtype)


class GlorotUniform(Initializer):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""

    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape, dtype, rng):
        fi, fo = _fans(shape)
        a = self.gain * math.sqrt(6.0 / (fi + fo))
        return Uniform(-a, a)(shape, dtype, rng)


class HeNormal(Initializer):
    """N(0, gain^2 * 2 / fan_in), for ReLU networks."""

    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape, dtype, rng):
        fi, _ = _fans(shape)
        return Normal(0.0, self.gain * math.sqrt(2.0 / fi))(shape, dtype, rng)


class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix scaled by ``gain`` (rows or columns orthonormal)."""

    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape, dtype, rng):
        rows = shape[0]
        cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        a = rng.normal((max(rows, cols), min(rows, cols)), dtype=np.float64)
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))  # a unique decomposition: the same q for the same a
        if rows < cols:
            q = q.T
        return (self.gain * q[:rows, :cols]).reshape(shape).astype(dtype)
