"""Host memory: freed blocks are kept for reuse, so training steps do not page-fault.

glibc's malloc gives large freed blocks back to the operating system: blocks above its mmap
threshold at once, and the top of the heap beyond its trim threshold. A training step frees
and allocates arrays of the same sizes every step, so each step then faults in fresh pages,
which the kernel zeroes. Measured on the CNN benchmark (``benchmarks/bench_autograd.py cnn``,
2 cores): 6,800 minor page faults and 43 ms per step; with freed memory kept, none and 32 ms.
(PyTorch's CPU tuning guides recommend jemalloc or tcmalloc for the same reason.)

``import labkit`` calls ``keep_freed_memory()`` unless ``LABKIT_KEEP_FREED_MEMORY=off``. The
cost: up to ``trim_threshold`` bytes of freed memory stay in the process instead of going back
to the system, and blocks up to ``mmap_threshold`` come from the heap.
"""

from __future__ import annotations

import ctypes
import platform

from .. import config

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: what ``keep_freed_memory`` last applied: None (not yet or not glibc) or its two thresholds
applied: dict | None = None


def keep_freed_memory(mmap_threshold: int = 64 << 20, trim_threshold: int = 256 << 20) -> bool:
    """Ask glibc's malloc to serve blocks up to ``mmap_threshold`` bytes from its heap and to
    keep up to ``trim_threshold`` bytes of freed memory. Returns False (and changes nothing)
    where the C library is not glibc."""
    global applied
    for name, v in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if not 0 < v < 2**31:
            raise ValueError(f"keep_freed_memory: {name} must be between 1 and 2**31 - 1 bytes, "
                             f"got {v}")
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1
    ok = libc.mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1 and ok
    applied = {"mmap_threshold": mmap_threshold, "trim_threshold": trim_threshold} if ok else None
    return ok


def keep_freed_memory_unless_disabled() -> bool:
    """``keep_freed_memory()`` unless the ``LABKIT_KEEP_FREED_MEMORY`` switch is off (run by
    ``import labkit``); a value that is no switch is a ConfigError naming the setting."""
    if config.get("LABKIT_KEEP_FREED_MEMORY"):
        return keep_freed_memory()
    return False
