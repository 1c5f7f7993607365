"""OpenCL platforms and devices: probed once, each with a context, queue and memory pool made on
first use (thread-safe: two threads that first use a device together get one runtime).

``cl:N`` is the N-th device of all platforms. :func:`derive_device` adds further indices that
reuse a probed device under changed facts (a device without fp64, for tests); they are reached by
name (``cl:N``) but not listed by ``labkit.devices()``.

This is the bottom of the OpenCL package: it imports nothing from the rest of labkit's backend.

NOTE: here and throughout the package, pyopencl is imported inside the functions that need it:
its import takes ~0.6 s, which a cpu-only session never pays. Those are the package's only
imports inside functions.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field, replace

import numpy as np

from ... import config
from ...errors import DeviceError, DTypeError

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
    #: the physical device and its driver, the same for a device ``derive_device`` makes
    #: from this one: kernel binaries and GEMM tunings are kept per hardware, not per name
    hardware: str = field(repr=False, default="")

    @property
    def is_cpu(self) -> bool:
        """A CPU device (PoCL here): the vector kernels and chunked reductions are for it."""
        return "CPU" in self.type.split("/")

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d.pop("extensions")
        d.pop("hardware")
        return d


# NOTE: one lock for the probe, the derived devices and runtime creation: each happens once per
# process and takes milliseconds, so nothing is gained by finer locks.
_lock = threading.RLock()
_derived: list = []  # (DeviceInfo, pyopencl.Device) added by derive_device, indices after probe()
_runtimes: dict = {}


def _device_type_name(t: int) -> str:
    import pyopencl as cl

    names = [n for n in ("GPU", "CPU", "ACCELERATOR") if t & getattr(cl.device_type, n)]
    return "/".join(names) or "OTHER"


@functools.lru_cache(maxsize=1)
def _probe() -> tuple:
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
            found.append((DeviceInfo(
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
                fp64=bool(d.double_fp_config) or "cl_khr_fp64" in exts,
                host_unified_memory=bool(getattr(d, "host_unified_memory", False)),
                extensions=exts,
                hardware="|".join(x.strip() for x in (p.name, p.version, d.name, d.version,
                                                      d.driver_version)),
            ), d))
    return tuple(found)


def probe() -> tuple[tuple[DeviceInfo, object], ...]:
    """All OpenCL devices of all platforms, in a fixed order: ``cl:N`` is the N-th."""
    with _lock:
        return _probe()


def known() -> tuple[tuple[DeviceInfo, object], ...]:
    """The probed devices followed by the derived ones: every valid ``cl:N``."""
    with _lock:
        return _probe() + tuple(_derived)


def derive_device(base: int = 0, *, fp64: bool | None = None, label: str = "derived") -> int:
    """A new device index that reuses device ``cl:base`` with changed facts, e.g.
    ``fp64=False`` to behave exactly as a device without float64 (arrays refuse float64 and
    kernels are built without the fp64 pragma). It gets its own context, queue, pool and
    kernel caches, and the name ``"<base name> [label]"``. Meant for tests.
    """
    with _lock:
        devs = known()
        if not 0 <= base < len(devs):
            raise DeviceError(f"derive_device: no device cl:{base} to derive from "
                              f"({len(devs)} known)")
        info, d = devs[base]
        changes = {"index": len(devs), "name": f"{info.name} [{label}]"}
        if fp64 is not None:
            changes["fp64"] = fp64
            if not fp64:
                changes["extensions"] = tuple(e for e in info.extensions if e != "cl_khr_fp64")
        _derived.append((replace(info, **changes), d))
        return len(devs)


def no_fp64_error(info: DeviceInfo, op: str) -> DTypeError:
    """The error for float64 on a device without fp64 (arrays and kernels say the same)."""
    return DTypeError(f"{op}: cl:{info.index} ({info.name}) has no float64 support "
                      "(cl_khr_fp64); use float32 (x.astype(np.float32)) or run on the cpu "
                      "device")


#: small launches released to a CPU device together (``Runtime.tick``)
BATCH = 32
#: elementwise launches after the gate was opened that go to the device at once (no gate):
#: a GEMM with a few small ops around it (an MLP's layer, an LSTM's time step) costs no
#: gate (a user event, a barrier: host time), only longer runs of small ops are batched
UNGATED = 8
#: the largest elementwise launch (in elements) that is held back: a larger one runs long
#: enough that waking the device's threads for it costs little, and holding it back gives up
#: its overlap with the host's next ops (with every elementwise launch held, the MLP step at
#: batch 32, whose bias and relu launches are 32 x 512, took 1.10-1.13x in two runs of three),
#: so it opens the gate as any other kernel does
HELD_MAX = 1024


class _Releasing:
    """A runtime's launch lock that opens its gate (``Runtime._release``) once taken."""

    __slots__ = ("_lock", "_rt")

    def __init__(self, rt):
        self._lock, self._rt = rt.launch_lock, rt

    def __enter__(self):
        self._lock.acquire()
        try:
            self._rt._release()
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc):
        self._lock.release()


def _bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} EiB"  # pragma: no cover - the loop returns


class Runtime:
    """The context, in-order queue and memory pool of one OpenCL device.

    NOTE: the queue is in-order and buffers return to the pool, never to the driver, while
    work is queued: a pooled buffer reused by a later kernel is only touched after the
    earlier kernels that used it, so dropping an array right after an enqueue is safe.

    On a CPU device (PoCL), unless ``LABKIT_CL_BATCH=off``, small elementwise launches (up
    to ``HELD_MAX`` elements) are released ``BATCH`` at a time: each launch enqueued into an
    idle queue wakes PoCL's worker threads (a ``pthread_cond_broadcast``, half of
    ``clEnqueueNDRangeKernel``'s time in a chain of small ops), which for a kernel of a few
    microseconds costs more than its work. Any other launch (a GEMM, a reduction) and any
    larger elementwise one opens the gate as it takes ``lock`` and runs at once, overlapping
    the host's next ops, and the ``UNGATED`` small launches after an opened gate pass too.
    Measured on the idle 2-core machine, batched against not, alternated in one process
    (``bench_autograd.py batching``): the 100-op autograd chain 0.85-0.87x the time, eager
    MLP, CNN and LSTM steps 0.98-1.02x. (Without the size limit, the MLP step at batch 32 took
    1.10-1.13x in two runs of three; before a GEMM opened the gate, eager MLP steps took
    1.06-1.15x.)

    The queue holds a barrier on a user event (the gate); ``tick`` counts launches, and every
    ``BATCH`` of them enqueues the next gate and opens the last. Every wait for the device
    opens the gate first: ``finish``, a read (``ndarray.get``, ``download_later``), and
    ``upload``, whose pending copy pyopencl waits for, holding the GIL, if its event is
    dropped. Work behind a closed gate runs at the latest when the host next waits; a GPU's
    queue is never gated.
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
        # threads (a training thread and the notebook's) must not interleave them.
        # ``launch_lock`` is the lock itself, taken by elementwise launches; ``lock``, taken
        # by every other launch and wait, also opens the gate when batching (``batching``)
        self.launch_lock = threading.Lock()
        self.lock = self.launch_lock
        self.build_lock = threading.RLock()  # cache misses: one thread builds, others wait
        self.tuned: dict = {}  # per-device tuning choices (GEMM blocking), see gemm.py
        #: times the host waited for this device's queue (finish, a read, a blocking copy):
        #: a training step should need none (tests/backend/test_syncs.py counts them)
        self.syncs = 0
        # NOTE: pyopencl's event for a non-blocking upload holds the host buffer alive and,
        # when dropped before the copy ran, waits for it: uploads keep theirs here until done
        self._uploads: list = []
        self._gate = None  # NOTE: the user event the queue's last barrier waits for
        self._left = 0  # launches until the next gate
        #: whether small launches are batched (``tick``): on CPU devices, with
        #: ``LABKIT_CL_BATCH`` on
        self.batching = info.is_cpu and config.get("LABKIT_CL_BATCH")

    @property
    def batching(self) -> bool:
        return self._batching

    @batching.setter
    def batching(self, on: bool) -> None:
        # NOTE: only elementwise launches are held: any other kernel (a GEMM, a reduction,
        # a convolution) opens the gate as it takes ``lock`` and runs at once, with the small
        # launches before it, overlapping the host's next ops as it does unbatched
        self._batching = bool(on)
        self.lock = _Releasing(self) if on else self.launch_lock

    def tick(self) -> None:
        """Count a small launch just enqueued (under ``lock``): every ``BATCH``-th enqueues
        a new gate and releases the launches held behind the last one."""
        self._left -= 1
        if self._left <= 0 and self.batching:
            import pyopencl as cl

            old, self._gate = self._gate, cl.UserEvent(self.context)
            cl.enqueue_barrier(self.queue, wait_for=[self._gate])
            if old is not None:
                old.set_status(cl.command_execution_status.COMPLETE)
            self._left = BATCH

    def _release(self) -> None:
        """Open the gate (under ``lock``): the launches held run now. Called before anything
        the host waits for is queued."""
        if self._gate is not None:
            import pyopencl as cl

            self._gate.set_status(cl.command_execution_status.COMPLETE)
            self._gate = None
        self._left = UNGATED

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
        nbytes = int(nbytes)
        if nbytes > self.info.max_alloc_size:
            # NOTE: pyopencl's own errors named neither (INVALID_BUFFER_SIZE, or a TypeError
            # past 2**63)
            raise DeviceError(f"cannot allocate {_bytes(nbytes)} ({nbytes:,} bytes) on "
                              f"{self.info.name}: one buffer may hold at most "
                              f"{_bytes(self.info.max_alloc_size)} "
                              "(CL_DEVICE_MAX_MEM_ALLOC_SIZE); use smaller arrays (a smaller "
                              "batch), or the cpu device")
        return self.pool.allocate(max(nbytes, 1))

    def finish(self) -> None:
        """Wait for the work queued so far (by any thread)."""
        import pyopencl as cl

        self.syncs += 1
        # NOTE: the gate opened and the marker queued at once: a gate another thread closes
        # meanwhile is behind the marker
        with self.lock:
            self._release()
            done = cl.enqueue_marker(self.queue)
        done.wait()
        with self.lock:
            self._drop_done_uploads()

    def _drop_done_uploads(self) -> None:
        """Forget the uploads that have completed (under ``lock``; a status query does not
        wait)."""
        import pyopencl as cl

        done = cl.command_execution_status.COMPLETE
        self._uploads = [e for e in self._uploads if e.command_execution_status != done]

    def read_into(self, host, buf, offset: int) -> None:
        """Copy ``buf`` from byte ``offset`` into the NumPy array ``host`` (C-contiguous, of
        the bytes to read), after the work queued before; waits for it."""
        import pyopencl as cl

        with self.lock:  # NOTE: as finish: the read is queued in front of any later gate
            self._release()
            done = cl.enqueue_copy(self.queue, host, buf, src_offset=offset, is_blocking=False)
        done.wait()

    def upload(self, buf, host) -> None:
        """Copy the C-contiguous NumPy array ``host`` into ``buf`` without waiting for the
        queue: the copy runs after the work queued before it. ``host`` must not change
        afterwards (callers pass a private copy)."""
        import pyopencl as cl

        # NOTE: under the launch lock, like a kernel: a non-blocking copy enqueued while
        # another thread launched crashed NVIDIA's driver (a blocking one had not)
        with self.lock:
            self._release()  # NOTE: a dropped upload event waits for its copy (class doc)
            if len(self._uploads) >= 32:
                self._drop_done_uploads()
            self._uploads.append(cl.enqueue_copy(self.queue, buf, host, is_blocking=False))

    def download_later(self, a, host):
        """Queue a copy of the contiguous array ``a`` into the NumPy array ``host`` (of its
        size and dtype) without waiting; returns the copy's event. Keep ``a`` and ``host``
        alive until it has completed."""
        import pyopencl as cl

        with self.lock:
            self._release()  # NOTE: its event is waited for
            return cl.enqueue_copy(self.queue, host, a.data,
                                   src_offset=a.offset * a.dtype.itemsize, is_blocking=False)

    def __repr__(self) -> str:
        return f"<Runtime cl:{self.info.index} {self.info.name}>"


# ---- deferred checks ----------------------------------------------------------------------
# A compiled step's replay checks index arrays and labels without waiting for the device: a
# check queues its flag, a non-blocking read brings the flag back, and the replay looks at the
# flags (``resolve_checks``) before it changes any state and before it returns.

_deferred = threading.local()


class deferred_checks:
    """``with deferred_checks():`` checks made inside (``deferring()`` is true) are queued with
    ``defer_check`` instead of waiting; they are resolved on exit. When the block raises, a
    check queued before that fails is raised instead (it came first: its error is the cause),
    chained to the block's error. Not reentrant: an inner block joins the outer one."""

    def __enter__(self):
        self.outer = getattr(_deferred, "on", False)
        if not self.outer:
            _deferred.on, _deferred.pending = True, []
        return self

    def __exit__(self, kind, value, tb):
        if self.outer:
            return False
        try:
            if kind is None or issubclass(kind, Exception):
                resolve_checks()
        finally:
            _deferred.on, _deferred.pending = False, []
        return False


def deferring() -> bool:
    """Whether checks are being deferred (inside ``deferred_checks``)."""
    return getattr(_deferred, "on", False)


def defer_check(flag, on_bad) -> None:
    """Queue the read of the 0-d bool device array ``flag``; ``resolve_checks`` calls
    ``on_bad()`` (which raises) if it was true."""
    host = np.zeros((), np.bool_)
    event = flag.rt.download_later(flag, host)
    _deferred.pending.append((event, host, flag, on_bad))


def resolve_checks() -> None:
    """Wait for the flags of the checks deferred so far and raise the first failing one's
    error; nothing to do when none is pending."""
    pending = getattr(_deferred, "pending", None)
    if not pending:
        return
    _deferred.pending = []
    for event, host, _flag, on_bad in pending:
        event.wait()
        if host[()]:
            on_bad()


def runtime(index: int) -> Runtime:
    """The runtime of ``cl:index``, made on first use; the same object for every caller."""
    rt = _runtimes.get(index)
    if rt is not None:
        return rt
    with _lock:  # double-checked: two threads that miss together make one runtime
        rt = _runtimes.get(index)
        if rt is None:
            devs = known()
            if not devs:
                raise DeviceError(f"device cl:{index}: {NO_PLATFORM_HELP}")
            if not 0 <= index < len(devs):
                raise DeviceError(
                    f"device cl:{index} does not exist: {len(devs)} OpenCL device(s) found "
                    f"(cl:0..cl:{len(devs) - 1}); run `labkit doctor` to list them")
            rt = _runtimes[index] = Runtime(*devs[index])
        return rt


@functools.lru_cache(maxsize=256)
def cl_index(spec: str) -> int:
    """The device index that ``"cl"`` (the first GPU, else the first device) or ``"cl:N"``
    names; a DeviceError that says what exists otherwise. (Cached: an index, once valid,
    stays valid; errors are not cached, so a device derived later is found.)"""
    s = spec.strip().lower()
    if s != "cl" and not s.startswith("cl:"):
        raise DeviceError(f"{spec!r} is not an OpenCL device; use 'cl' or 'cl:N' (NumPy serves "
                          "the cpu device)")
    devs = known()
    if not devs:
        raise DeviceError(f"device {spec!r}: {NO_PLATFORM_HELP}")
    if s == "cl":
        gpus = [info.index for info, _ in devs[:len(probe())] if "GPU" in info.type]
        return gpus[0] if gpus else 0
    try:
        idx = int(s[3:])
    except ValueError:
        raise DeviceError(f"device {spec!r}: expected 'cl:N' with an integer N") from None
    if not 0 <= idx < len(devs):
        names = ", ".join(f"cl:{i.index} ({i.name})" for i, _ in devs)
        raise DeviceError(f"device {spec!r} does not exist; found {names}. Run "
                          "`labkit doctor` to see every platform and device")
    return idx
