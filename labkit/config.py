"""Every ``LABKIT_*`` setting, parsed and checked in one place, and the directories labkit uses.

=============================  ===================================================  ==========
setting                        what it does                                         default
=============================  ===================================================  ==========
``LABKIT_HOME``                datasets, the run store, run directories             ``~/.labkit``
``LABKIT_CACHE_DIR``           compiled kernels and GEMM tuning (``kernels/``)      the user cache
``LABKIT_DEVICE``              the default device: ``cpu``, ``cl`` or ``cl:N``      ``cpu``
``LABKIT_KERNEL_CACHE``        keep compiled OpenCL programs on disk                on
``LABKIT_CHECK_INDICES``       bounds-check index arrays on OpenCL devices          on
``LABKIT_GEMM_CONFIG``         force the GEMM blocking ``RM,VN,VW`` (skip tuning)   tuned
``LABKIT_KEEP_FREED_MEMORY``   keep freed host memory for reuse (glibc)             on
``LABKIT_NUMPY_BLAS``          call NumPy's own BLAS for SGD and outer products     on
``LABKIT_CL_BATCH``            release small launches to a CPU OpenCL device in 32s  on
``LABKIT_DIST_STALL``          seconds in an MPI collective before a stall report   60
``LABKIT_DIST_TIMEOUT``        seconds in an MPI collective before the job ends     1800
``LABKIT_CONVERT_MAX_BYTES``   data a converter reads from one source, unpacked     ``4G``
=============================  ===================================================  ==========

Switches accept ``1/0``, ``true/false``, ``yes/no`` and ``on/off`` (any case); anything else is
an error that names the setting, so a typo never silently keeps the default. Values are read
from the environment each time they are asked for, so a test or a notebook can change them.

Examples
--------
>>> import os
>>> import labkit as lk
>>> from labkit import config
>>> os.environ["LABKIT_CHECK_INDICES"] = "off"
>>> config.get("LABKIT_CHECK_INDICES")
False
>>> os.environ["LABKIT_CHECK_INDICES"] = "maybe"
>>> try:
...     config.get("LABKIT_CHECK_INDICES")
... except lk.ConfigError as e:
...     print(e)
LABKIT_CHECK_INDICES='maybe': expected a switch (1/0, true/false, yes/no, on/off)
>>> del os.environ["LABKIT_CHECK_INDICES"]
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def _switch(raw: str) -> bool:
    v = raw.strip().lower()
    if v in _ON:
        return True
    if v in _OFF:
        return False
    raise ValueError("expected a switch (1/0, true/false, yes/no, on/off)")


def _path(raw: str) -> Path:
    return Path(raw).expanduser()


_DEVICE = re.compile(r"^(cpu|cl|cl:[0-9]+)$")


def _device(raw: str) -> str:
    v = raw.strip()
    if not _DEVICE.match(v):
        raise ValueError("expected cpu, cl or cl:N (N a device index, see `labkit doctor`)")
    return v


def _gemm(raw: str) -> tuple[int, int, int]:
    parts = [p.strip() for p in raw.split(",")]
    try:
        vals = tuple(int(p) for p in parts)
    except ValueError:
        vals = ()
    # NOTE: a work-item holds RM x VN vectors of VW in registers: past 16 x 8 the kernel
    # spills (99999999,2,16 took 16 s for a 512^3 product) or does not build
    if (len(vals) != 3 or not all(v > 0 for v in vals) or vals[2] not in (1, 2, 4, 8, 16)
            or vals[0] > 16 or vals[1] > 8):
        raise ValueError("expected three positive integers RM,VN,VW (rows per work-item "
                         "1-16, vectors per row 1-8, vector width 1/2/4/8/16), e.g. 8,2,16")
    return vals  # type: ignore[return-value]


_BYTES = re.compile(r"^([0-9]+(?:\.[0-9]*)?)\s*([kmgt]?)(?:i?b)?$")


def _bytes(raw: str) -> int:
    m = _BYTES.match(raw.strip().lower())
    v = int(float(m[1]) * 1024 ** " kmgt".index(m[2] or " ")) if m else 0
    if v < 1:
        raise ValueError("expected a size in bytes, e.g. 4G, 512M or 1000000 (K, M, G, T are "
                         "powers of 1024)")
    return v


def _seconds(raw: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not v >= 0:
        raise ValueError("expected a number of seconds >= 0")
    return v


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("LABKIT_HOME", _path, None, "datasets, the run store and run directories "
            "(default ~/.labkit)"),
    Setting("LABKIT_CACHE_DIR", _path, None, "compiled kernels and GEMM tuning (default: the "
            "user cache directory)"),
    Setting("LABKIT_DEVICE", _device, "cpu", "the default device: cpu, cl or cl:N"),
    Setting("LABKIT_KERNEL_CACHE", _switch, True, "keep compiled OpenCL programs on disk"),
    Setting("LABKIT_CHECK_INDICES", _switch, True, "bounds-check index arrays on OpenCL "
            "devices (one device-to-host read per indexing op)"),
    Setting("LABKIT_GEMM_CONFIG", _gemm, None, "force the OpenCL GEMM blocking RM,VN,VW "
            "instead of tuning it"),
    Setting("LABKIT_KEEP_FREED_MEMORY", _switch, True, "keep freed host memory for reuse "
            "(fewer page faults per training step; up to 256 MiB stays in the process)"),
    Setting("LABKIT_NUMPY_BLAS", _switch, True, "call NumPy's bundled OpenBLAS directly for "
            "SGD's update (one axpy) and batch-1 weight gradients (backend/blas.py)"),
    Setting("LABKIT_CL_BATCH", _switch, True, "release small OpenCL launches (up to 1024 "
            "elements) to a CPU device (PoCL) 32 at a time, behind a gate every wait opens "
            "(read when the device is first used; a chain of small ops: 0.85-0.87x the time)"),
    Setting("LABKIT_DIST_STALL", _seconds, 60.0, "seconds a data-parallel rank waits in a "
            "collective before it reports which ranks have not arrived (0: never)"),
    Setting("LABKIT_DIST_TIMEOUT", _seconds, 1800.0, "seconds a data-parallel rank waits in "
            "one collective before it ends the job with an error naming the ranks that have "
            "not arrived (0: never)"),
    Setting("LABKIT_CONVERT_MAX_BYTES", _bytes, 4 * 1024 ** 3, "the most bytes of data a "
            "dataset converter reads from one source once unpacked (all its files and archive "
            "members together; refused beyond it, so a decompression bomb is never unpacked)"),
)}


def get(name: str):
    """The value of setting ``name`` from the environment, parsed and checked (its default when
    it is unset or empty). Raises ``ConfigError`` naming the setting and what it accepts."""
    try:
        s = SETTINGS[name]
    except KeyError:
        raise ConfigError(f"no setting {name!r}; the settings are "
                          f"{', '.join(SETTINGS)}") from None
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return s.default
    return _parsed(name, raw)


@functools.lru_cache(maxsize=64)
def _parsed(name: str, raw: str):
    # NOTE: read each time (a test or a notebook may change it), parsed once per value: some
    # settings are asked for on every op
    try:
        return SETTINGS[name].parse(raw)
    except ValueError as e:
        raise ConfigError(f"{name}={raw!r}: {e}") from None


def describe() -> list[tuple[str, str, str]]:
    """``(name, value, help)`` for every setting, as ``labkit doctor`` prints them: the value
    in effect, ``(default)`` when unset, or ``INVALID: ...``."""
    out = []
    for name, s in SETTINGS.items():
        try:
            v = get(name)
        except ConfigError as e:
            out.append((name, f"INVALID: {e}", s.help))
            continue
        if isinstance(v, tuple):
            shown = ",".join(map(str, v))
        elif v is None:
            shown = ""
        else:
            shown = str(v)
        if not os.environ.get(name, "").strip():
            shown = f"{shown} (default)".strip()
        out.append((name, shown, s.help))
    return out


def home() -> Path:
    """``$LABKIT_HOME`` (default ``~/.labkit``): datasets, the run store, run directories."""
    return get("LABKIT_HOME") or Path.home() / ".labkit"


def cache_dir() -> Path:
    """``$LABKIT_CACHE_DIR`` (default: the user cache directory, e.g. ``~/.cache/labkit``)."""
    d = get("LABKIT_CACHE_DIR")
    if d is not None:
        return d
    import platformdirs

    return Path(platformdirs.user_cache_dir("labkit"))


def kernel_cache_dir() -> Path:
    """Where compiled OpenCL programs and GEMM tuning results are kept."""
    return cache_dir() / "kernels"


def runs_dir() -> Path:
    """``$LABKIT_HOME/runs``: one directory per run (its checkpoints)."""
    return home() / "runs"


def datasets_dir() -> Path:
    """``$LABKIT_HOME/datasets``: the standard dataset files."""
    return home() / "datasets"


__all__ = ["SETTINGS", "Setting", "cache_dir", "datasets_dir", "describe", "get", "home",
           "kernel_cache_dir", "runs_dir"]
