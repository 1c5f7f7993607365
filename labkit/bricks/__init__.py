"""Bricks (imported as ``B``): parameterised, composable pieces of a model."""

from .base import Brick, Parameter, set_seed
from .initializers import (
    Constant,
    GlorotUniform,
    HeNormal,
    Initializer,
    Normal,
    Orthogonal,
    Uniform,
)
from .layers import (
    GELU,
    GRU,
    LSTM,
    MLP,
    Activation,
    BatchNorm,
    Conv2D,
    ConvTranspose2D,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    ReLU,
    Sequence,
    Sigmoid,
    Softmax,
    Tanh,
)
from .residual import BasicBlock, Residual

__all__ = ["GELU", "GRU", "LSTM", "MLP", "Activation", "BasicBlock", "BatchNorm", "Brick",
           "Constant", "Conv2D", "ConvTranspose2D", "Dropout", "Embedding", "Flatten",
           "GlorotUniform", "HeNormal", "Initializer", "LayerNorm", "Linear", "Normal",
           "Orthogonal", "Parameter", "ReLU", "Residual", "Sequence", "Sigmoid", "Softmax", "Tanh",
           "Uniform", "set_seed"]
