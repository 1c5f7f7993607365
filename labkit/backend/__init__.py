"""Devices and their array namespaces: NumPy on ``cpu``, labkit's OpenCL arrays on ``cl:N``."""

from __future__ import annotations

import numpy as np

from . import memory, opencl
from .device import Device, best_device, default_device, device, devices
from .device import device as _device  # NOTE: asarray's argument `device` shadows the name
from .opencl.shapes import split_bounds

memory.keep_freed_memory_unless_disabled()


def get_array_module(*arrays):
    """``numpy`` for NumPy arrays and scalars, ``labkit.backend.opencl`` for OpenCL arrays.

    One function body then serves both devices::

        def softplus(x):
            xp = get_array_module(x)
            return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))
    """
    for a in arrays:
        if isinstance(a, opencl.ndarray):
            return opencl
    return np


def full(shape, value, dtype, like):
    """An array of ``shape`` filled with ``value``, on the device of the array ``like``."""
    if isinstance(like, np.ndarray):
        return np.full(shape, value, dtype)
    return opencl.full(shape, value, dtype, device=like.rt)


def zeros(shape, dtype, like):
    """Zeros of ``shape`` on the device of the array ``like``."""
    return full(shape, 0, dtype, like)


def asarray(obj, device=None, dtype=None):
    """An array on ``device``: a NumPy array for ``cpu``, an OpenCL array for ``cl:N``."""
    dev = _device(device)
    if dev.kind == "cpu":
        if isinstance(obj, opencl.ndarray):
            obj = obj.get()
        return np.asarray(obj, dtype=dtype)
    return opencl.asarray(obj, dtype=dtype, device=dev)


__all__ = ["Device", "asarray", "best_device", "default_device", "device", "devices", "full",
           "get_array_module", "split_bounds", "zeros"]
