"""tinygrad on the OpenCL device labkit uses, for the benchmarks that compare with it.

tinygrad is a benchmark-only dependency (``pip install tinygrad``): labkit never imports it.
"""

from __future__ import annotations

import glob
import os

import labkit as lk


def load():
    """(the tinygrad module, a line that says which device), or (None, why not): tinygrad
    only where its CL device is the one labkit's ``cl`` is."""
    try:
        import pyopencl
        # NOTE: tinygrad loads libOpenCL by name; this PoCL comes with pyopencl's own ICD loader
        libs = glob.glob(os.path.join(os.path.dirname(pyopencl.__file__), ".libs",
                                      "libOpenCL*.so*"))
        if libs:
            os.environ.setdefault("OPENCL_PATH", libs[0])
        os.environ.setdefault("DEV", "CL")
        import tinygrad
        from tinygrad import Device
        name = Device["CL"].device_name
        ours = lk.device("cl").info.name
        if ours != name:
            return None, f"tinygrad's CL device is {name!r}, labkit's {ours!r}"
        from importlib.metadata import version
        return tinygrad, f"tinygrad {version('tinygrad')} on CL, {name}"
    except Exception as e:  # noqa: BLE001 - any failure only empties a column
        return None, f"{type(e).__name__}: {e}"
