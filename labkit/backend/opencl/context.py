"""OpenCL platforms and devices: probed once, each with a lazily created context, queue and pool."""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from ...errors import DeviceError

NO_PLATFORM_HELP = (
    "no OpenCL platform was found. Install PoCL's CPU device with "
    "`pip install pocl-binary-distribution` (labkit's set-up does this), or install your GPU "
    "vendor's OpenCL driver. If a driver is installed but not found, point the ICD loader at "
    "its .icd files with OCL_ICD_VENDORS=/etc/OpenCL/vendors (or the folder that holds them)."
)


@dataclass(frozen=True)
class DeviceInfo:
    """What labkit needs to know about one OpenCL device, read once when it is probed."""

    index: int
    name: str
    vendor: str
    platform: str
    version: str
    driver_version: str
    type: str
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: tuple
    local_mem_size: int
    global_mem_size: int
    max_alloc_size: int
    fp64: bool
    host_unified_memory: bool
    extensions: tuple = field(repr=False, default=())

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d.pop("extensions")
        return d


def _device_type_name(t: int) -> str:
    import pyopencl as cl

    names = [n for n in ("GPU", "CPU", "ACCELERATOR") if t & getattr(cl.device_type, n)]
    return "/".join(names) or "OTHER"


@functools.lru_cache(maxsize=1)
def probe() -> tuple[tuple[DeviceInfo, object], ...]:
    """All OpenCL devices of all platforms, in a fixed order: ``cl:N`` is the N-th."""
    try:
        import pyopencl as cl
    except ImportError as e:  # pragma: no cover - pyopencl is a hard dependency
        raise DeviceError(f"pyopencl cannot be imported ({e}); `pip install pyopencl`") from e
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    found = []
    for p in platforms:
        try:
            devs = p.get_devices()
        except cl.Error:
            continue
        for d in devs:
            exts = tuple(d.extensions.split())
            fp64 = bool(d.double_fp_config) or "cl_khr_fp64" in exts
            info = DeviceInfo(
                index=len(found),
                name=d.name.strip(),
                vendor=d.vendor.strip(),
                platform=p.name.strip(),
                version=d.version.strip(),
                driver_version=d.driver_version.strip(),
                type=_device_type_name(d.type),
                compute_units=d.max_compute_units,
                max_work_group_size=d.max_work_group_size,
                max_work_item_sizes=tuple(d.max_work_item_sizes),
                local_mem_size=d.local_mem_size,
                global_mem_size=d.global_mem_size,
                max_alloc_size=d.max_mem_alloc_size,
                fp64=fp64,
                host_unified_memory=bool(getattr(d, "host_unified_memory", False)),
                extensions=exts,
            )
            found.append((info, d))
    return tuple(found)


class Runtime:
    """The context, in-order queue and memory pool of one OpenCL device.

    NOTE: the queue is in-order and buffers return to the pool, never to the driver, while
    work is queued: a pooled buffer reused by a later kernel is only touched after the
    earlier kernels that used it, so dropping an array right after an enqueue is safe.
    """

    def __init__(self, info: DeviceInfo, cl_device):
        import pyopencl as cl
        from pyopencl.tools import ImmediateAllocator, MemoryPool

        self.info = info
        self.cl_device = cl_device
        self.context = cl.Context([cl_device])
        self.queue = cl.CommandQueue(self.context)
        self.pool = MemoryPool(ImmediateAllocator(self.queue))
        self.kernels: dict = {}  # in-memory kernel cache, see program.py
        # NOTE: a cached kernel object is shared, and a launch is set_args + enqueue: two
        # threads (a training thread and the notebook's) must not interleave them
        self.lock = threading.Lock()
        self.build_lock = threading.RLock()  # cache misses: one thread builds, others wait
        self.tuned: dict = {}  # per-device tuning choices (GEMM blocking), see gemm.py

    def cached(self, key, make):
        """``self.kernels[key]``, made by ``make()`` on the first use. Double-checked under
        ``build_lock``, so two threads that miss together build once; a hit is one lookup."""
        value = self.kernels.get(key)
        if value is None:
            with self.build_lock:
                value = self.kernels.get(key)
                if value is None:
                    value = self.kernels[key] = make()
        return value

    def allocate(self, nbytes: int):
        return self.pool.allocate(max(int(nbytes), 1))

    def finish(self) -> None:
        self.queue.finish()


@functools.cache
def runtime(index: int) -> Runtime:
    devs = probe()
    if not devs:
        raise DeviceError(f"device cl:{index}: {NO_PLATFORM_HELP}")
    if not 0 <= index < len(devs):
        raise DeviceError(
            f"device cl:{index} does not exist: {len(devs)} OpenCL device(s) found "
            f"(cl:0..cl:{len(devs) - 1}); run `labkit doctor` to list them"
        )
    info, d = devs[index]
    return Runtime(info, d)


def supports_dtype(info: DeviceInfo, dtype: np.dtype) -> bool:
    return np.dtype(dtype) != np.float64 or info.fp64


def env_flag(name: str, default: bool = True) -> bool:
    v = os.environ.get(name)
    if v is None:
        return default
    return v.strip().lower() not in ("0", "false", "no", "off", "")
