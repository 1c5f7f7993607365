"""Devices and their array namespaces: NumPy on ``cpu``, labkit's OpenCL arrays on ``cl:N``."""

from __future__ import annotations

import numpy as np

from . import memory
from .device import Device, best_device, default_device, device, devices

memory._at_import()


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


def full(shape, value, dtype, like):
    """An array of ``shape`` filled with ``value``, on the device of the array ``like``."""
    if isinstance(like, np.ndarray):
        return np.full(shape, value, dtype)
    from . import opencl

    return opencl.full(shape, value, dtype, device=like.rt)


def zeros(shape, dtype, like):
    """Zeros of ``shape`` on the device of the array ``like``."""
    return full(shape, 0, dtype, like)


def split_bounds(n: int, indices_or_sections, axis: int, op: str = "split") -> list:
    """The split points of an axis of length ``n``: NumPy's ``split`` arguments checked."""
    if isinstance(indices_or_sections, int):
        if n % indices_or_sections:
            from ..errors import ShapeError

            raise ShapeError(f"{op}: axis {axis} of size {n} does not divide into "
                             f"{indices_or_sections} equal sections")
        step = n // indices_or_sections
        return list(range(step, n, step))
    return list(indices_or_sections)


def asarray(obj, device=None, dtype=None):
    """An array on ``device``: a NumPy array for ``cpu``, an OpenCL array for ``cl:N``."""
    from . import opencl

    dev = globals()["device"](device)
    if dev.kind == "cpu":
        if isinstance(obj, opencl.ndarray):
            obj = obj.get()
        return np.asarray(obj, dtype=dtype)
    return opencl.asarray(obj, dtype=dtype, device=dev)


__all__ = ["Device", "asarray", "best_device", "default_device", "device", "devices", "full",
           "get_array_module", "split_bounds", "zeros"]
