"""Devices: ``cpu`` (NumPy) and ``cl:N`` (OpenCL), with the default from ``LABKIT_DEVICE``."""

from __future__ import annotations

import functools

import numpy

from .. import config
from ..errors import DeviceError
from . import opencl
from .opencl import context


class Device:
    """A place where arrays live and ops run: ``Device("cpu")`` or ``Device("cl", 0)``.

    Examples
    --------
    >>> import labkit as lk
    >>> lk.device("cpu")
    Device('cpu')
    """

    __slots__ = ("kind", "index")

    def __init__(self, kind: str, index: int = 0):
        self.kind = kind
        self.index = index

    @property
    def name(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cl:{self.index}"

    @property
    def info(self):
        """The probed OpenCL facts (name, vendor, fp64, ...); ``None`` for the cpu."""
        if self.kind == "cpu":
            return None
        return context.runtime(self.index).info

    @property
    def supports_float64(self) -> bool:
        return self.kind == "cpu" or self.info.fp64

    @property
    def xp(self):
        """The array namespace of this device: numpy, or labkit.backend.opencl."""
        return numpy if self.kind == "cpu" else opencl

    def synchronize(self) -> None:
        """Wait until the work queued on this device has finished."""
        if self.kind == "cl":
            context.runtime(self.index).finish()

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except DeviceError:
                return False
        return isinstance(other, Device) and (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self) -> int:
        return hash((self.kind, self.index))

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    def __str__(self) -> str:
        return self.name


# NOTE: the OpenCL ndarray sits below this module, so its `device` (a Device) is attached here.
opencl.ndarray.device = property(lambda a: Device("cl", a.rt.info.index),
                                 doc="The Device this array lives on.")


def devices() -> list[Device]:
    """Every device found: ``cpu`` first, then ``cl:0``, ``cl:1``, ... (all OpenCL platforms)."""
    return [Device("cpu")] + [Device("cl", info.index) for info, _ in context.probe()]


@functools.lru_cache(maxsize=64)
def _parse(spec: str) -> Device:
    s = spec.strip().lower()
    if s == "cpu":
        return Device("cpu")
    if s == "cl" or s.startswith("cl:"):
        return Device("cl", context.cl_index(spec))
    raise DeviceError(f"unknown device {spec!r}: use 'cpu', 'cl' (the first GPU, else the first "
                      "OpenCL device) or 'cl:N'; `labkit doctor` lists them")


def device(spec=None) -> Device:
    """Pick a device: ``"cpu"``, ``"cl"``, ``"cl:N"``, a Device, or None for the default."""
    if spec is None:
        return default_device()
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise DeviceError(f"device: expected 'cpu', 'cl' or 'cl:N', got {spec!r}")
    return _parse(spec)


def default_device() -> Device:
    """The device named by ``LABKIT_DEVICE`` (``cpu`` when unset); a ConfigError for a value
    that names no kind of device, a DeviceError for a device that does not exist."""
    spec = config.get("LABKIT_DEVICE")
    try:
        return _parse(spec)
    except DeviceError as e:
        raise DeviceError(f"LABKIT_DEVICE={spec!r} is not usable: {e}") from None


def best_device() -> Device:
    """A GPU through OpenCL if there is one, else the cpu (NumPy's BLAS beats PoCL)."""
    gpus = [info.index for info, _ in context.probe() if "GPU" in info.type]
    return Device("cl", gpus[0]) if gpus else Device("cpu")
