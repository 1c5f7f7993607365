"""Devices and their array namespaces: NumPy on ``cpu``, labkit's OpenCL arrays on ``cl:N``."""

from __future__ import annotations

import numpy as np

from .device import Device, best_device, default_device, device, devices


def get_array_module(*arrays):
    """``numpy`` for NumPy arrays and scalars, ``labkit.backend.opencl`` for OpenCL arrays.

    One function body then serves both devices::

        def softplus(x):
            xp = get_array_module(x)
            return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))
    """
    from . import opencl

    for a in arrays:
        if isinstance(a, opencl.ndarray):
            return opencl
    return np


def asarray(obj, device=None, dtype=None):
    """An array on ``device``: a NumPy array for ``cpu``, an OpenCL array for ``cl:N``."""
    from . import opencl

    dev = globals()["device"](device)
    if dev.kind == "cpu":
        if isinstance(obj, opencl.ndarray):
            obj = obj.get()
        return np.asarray(obj, dtype=dtype)
    return opencl.asarray(obj, dtype=dtype, device=dev)


__all__ = ["Device", "asarray", "best_device", "default_device", "device", "devices",
           "get_array_module"]
