"""labkit's OpenCL array namespace: NumPy's names over :class:`ndarray` (see api.py)."""

from .api import *  # noqa: F401,F403
from .api import __all__ as _api_all
from .context import DeviceInfo, probe, runtime
from .ndarray import ndarray

__all__ = list(_api_all) + ["DeviceInfo", "probe", "runtime", "ndarray"]
