"""labkit: a Jupyter-centric research environment for deep learning.

The public API, as explicit re-exports::

    import labkit as lk
    lk.devices()              # [Device('cpu'), Device('cl:0'), ...]
    dev = lk.device("cl")     # "cpu" | "cl" | "cl:N"; default from LABKIT_DEVICE
"""

from . import autograd
from .autograd import Function, Tensor, enable_grad, grad, no_grad, tensor
from .backend import Device, asarray, best_device, default_device, device, devices, get_array_module
from .backend.random import Generator
from .errors import (
    DeviceError,
    DeviceMismatchError,
    DTypeError,
    KernelBuildError,
    LabkitError,
    ShapeError,
)

__version__ = "0.1.0"

__all__ = [
    "Device", "DeviceError", "Function", "Tensor", "autograd", "enable_grad", "grad",
    "no_grad", "tensor", "DeviceMismatchError", "DTypeError", "Generator",
    "KernelBuildError", "LabkitError", "ShapeError", "__version__", "asarray", "best_device",
    "default_device", "device", "devices", "get_array_module",
]
