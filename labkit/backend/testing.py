"""Devices for tests that behave like hardware the test machine may lack.

Examples
--------
>>> import labkit as lk
>>> from labkit.backend.testing import device_without_fp64
>>> dev = device_without_fp64()
>>> dev.info.fp64, dev.supports_float64, dev == lk.device(dev.name)
(False, False, True)
"""

from __future__ import annotations

import functools

from .device import Device, device
from .opencl import context


@functools.cache
def device_without_fp64(base: str = "cl:0") -> Device:
    """An OpenCL device, in this process, that behaves exactly like a device without float64:
    ``info.fp64`` is False, float64 arrays are refused with the usual DTypeError and kernels
    are built without the fp64 pragma. It runs on ``base``'s hardware with a context, pool and
    kernel caches of its own, under a new index (``cl:N`` after every real device) and the
    name ``"<base name> [no fp64]"``. The same Device for every call with the same ``base``.
    """
    b = device(base)
    if b.kind != "cl":
        raise ValueError(f"device_without_fp64: base must be an OpenCL device, got {base!r}")
    return Device("cl", context.derive_device(b.index, fp64=False, label="no fp64"))
