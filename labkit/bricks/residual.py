"""Residual blocks (He et al., 2016): ``Residual(body, shortcut)`` computes
``activation(body(x) + shortcut(x))``; ``BasicBlock`` is ResNet's two 3x3 convolutions with
batch normalization, projected by a 1x1 convolution when the shape changes."""

from __future__ import annotations

from .. import functions as F
from .base import Brick
from .layers import BatchNorm, Conv2D, ReLU, Sequence


class Residual(Brick):
    """``activation(body(x) + shortcut(x))``; ``shortcut=None`` is the identity and
    ``activation=None`` leaves the sum as it is.

    Examples
    --------
    >>> import numpy as np, labkit as lk, labkit.bricks as B
    >>> block = B.Residual(B.Linear(4, 4))
    >>> block(lk.tensor(np.ones((2, 4), np.float32))).shape
    (2, 4)
    """

    def __init__(self, body, shortcut=None, activation=F.relu, name=None):
        super().__init__(name)
        self.body = self.add_child(body, "body") if isinstance(body, Brick) else body
        self.shortcut = shortcut
        if isinstance(shortcut, Brick):
            self.add_child(shortcut, "shortcut")
        self.activation = activation
        self.built = True

    def forward(self, x):
        y = self.body(x) + (x if self.shortcut is None else self.shortcut(x))
        return y if self.activation is None else self.activation(y)


class BasicBlock(Residual):
    """conv 3x3 (stride) - BN - ReLU - conv 3x3 - BN, plus the input (through conv 1x1 - BN
    when ``stride != 1`` or the channels change), then ReLU. NCHW in and out."""

    def __init__(self, in_channels, out_channels, stride=1, name=None):
        body = Sequence(
            Conv2D(in_channels, out_channels, 3, stride=stride, pad=1, bias=False),
            BatchNorm(out_channels), ReLU(),
            Conv2D(out_channels, out_channels, 3, pad=1, bias=False), BatchNorm(out_channels))
        shortcut = None
        if stride != 1 or in_channels != out_channels:
            shortcut = Sequence(Conv2D(in_channels, out_channels, 1, stride=stride, bias=False),
                                BatchNorm(out_channels))
        super().__init__(body, shortcut, name=name)
