"""Processes of this host: is one still running, and when did it start (so a pid the system
gave to a later process is told apart). One answer for the run store (a run whose trainer is
gone shows as dead) and the checkpoint writer (a killed writer's leftovers are cleaned up).
"""

from __future__ import annotations

import os

#: the variables that set a process's BLAS/OpenMP thread count, for the processes labkit starts
#: to run beside others (data workers, sweep workers, MPI ranks: one thread each by default)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int:
    """The start time of process ``pid`` in clock ticks since boot, or 0 if unknown."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields else 0
    except (ValueError, IndexError):
        return 0


def alive(pid, start: int | None = None) -> bool:
    """Whether process ``pid`` runs on this host: it exists, is not a zombie, and (when
    ``start`` is given and known) is the process that started then, not a later one that was
    given the same pid."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass  # another user's process: it exists
    fields = _stat(pid)
    if fields is None:
        return True  # no /proc (not Linux): existence is all that is known
    if fields[:1] == [b"Z"]:
        return False
    return not start or start_time(pid) in (0, start)
