"""labkit's OpenCL array namespace: NumPy's names over :class:`ndarray` (see api.py).

The modules, bottom up: ``context`` (devices and runtimes), ``program`` (kernel sources,
headers, builds, caches), ``shapes`` (strides, broadcasting, dimension collapsing),
``ndarray`` (the array: data and views), ``elementwise`` (generated kernels), ``core``
(creation and elementwise ops), then ``reduce``, ``gemm`` and ``indexing`` on top of it,
``methods`` (the ndarray's methods and operators) and ``api`` (the public names).
"""

from . import methods as _methods
from .api import *  # noqa: F401,F403
from .api import __all__ as _api_all
from .context import DeviceInfo, probe, runtime
from .ndarray import ndarray

_methods.install()

__all__ = [*_api_all, "DeviceInfo", "ndarray", "probe", "runtime"]
