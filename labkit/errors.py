"""labkit's exceptions.

Each message names the operation, what it expected, what it got, and the fix.
"""

from __future__ import annotations


class LabkitError(Exception):
    """Base class of every error labkit raises on purpose."""


class DeviceError(LabkitError):
    """No such device, or the device cannot do what was asked (e.g. float64 without fp64)."""


class DeviceMismatchError(DeviceError, ValueError):
    """An operation got arrays on two different devices."""


class DTypeError(LabkitError, TypeError):
    """A dtype the operation or the device does not support, or an argument of the wrong Python
    type (a list where a Tensor is needed)."""


class IndexingError(LabkitError, IndexError):
    """An index, label or id out of bounds for its axis or class count, or something that is not
    an index (NumPy raises IndexError for the same)."""


class ShapeError(LabkitError, ValueError):
    """Shapes that do not broadcast, or do not fit the operation."""


class KernelBuildError(LabkitError):
    """An OpenCL program failed to build; carries the device and the compiler's log."""

    def __init__(self, message: str, *, device: str, log: str, source_name: str):
        super().__init__(message)
        self.device = device
        self.log = log
        self.source_name = source_name


class BrickError(LabkitError, ValueError):
    """A brick put together wrongly: two children of one name, a name with a path separator."""


class DataError(LabkitError, ValueError):
    """A dataset file, split, source or request that cannot be read as asked."""


class WorkerError(LabkitError, RuntimeError):
    """A data worker process died, hung or raised; the message names the worker and the batch."""


class CheckpointError(LabkitError, ValueError):
    """A checkpoint that is incomplete, corrupted, of another format, or a state it cannot hold."""


class ConfigError(LabkitError, ValueError):
    """A ``LABKIT_*`` setting with a value labkit cannot use; names the setting and what it
    accepts (see ``labkit.config``)."""


class TrainingError(LabkitError):
    """The loop cannot run as configured (no stop condition, a bad extension, ...)."""


class CompileError(LabkitError, RuntimeError):
    """``lk.compile`` cannot compile a step as written (it reads a tensor's value into Python,
    or does something else at each call); the message names the line and the fix."""


class NonFiniteError(LabkitError, FloatingPointError):
    """A loss, parameter or gradient became NaN or infinite (raised by NaNGuard)."""


class RunStoreError(LabkitError, KeyError):
    """No such run or checkpoint, a request the store refuses, or a store file that cannot be
    read (the message names the file and what to do). ``reason`` says which, for programs
    (the REST API maps it to an HTTP status): ``"not_found"``, ``"deleted"`` (the run was
    deleted meanwhile), ``"invalid"``, ``"live"`` (it is training), ``"damaged"`` or
    ``"failed"``."""

    reason = "failed"

    def __str__(self):  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""
