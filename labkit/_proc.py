"""Processes of this host: is one still running, and when did it start (so a pid the system
gave to a later process is told apart). One answer for the run store (a run whose trainer is
gone shows as dead) and the checkpoint writer (a killed writer's leftovers are cleaned up).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import threading
import time
import weakref
import zlib

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None

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


#: whether this system has a /proc with processes' stat (Linux)
_PROC = os.path.exists(f"/proc/{os.getpid()}/stat")
#: this machine, in names of files other machines may see (a CRC of its host name: pids of
#: other machines mean nothing here)
HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"


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
    other = False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        other = True  # another user's process: it exists (/proc may hide it)
    fields = _stat(pid)
    if fields is None:
        # NOTE: no /proc (not Linux): existence is all that is known; where there is one, a
        # pid of ours whose stat cannot be read (ESRCH) is a process being torn down: a rank
        # SIGKILLed a moment ago passed `os.kill(pid, 0)`, and its run was taken for a live one
        return other or not _PROC
    if fields[:1] == [b"Z"]:
        return False
    return not start or start_time(pid) in (0, start)


def cpu_ticks(pid: int) -> int | None:
    """The CPU time process ``pid`` has used (user and system, in clock ticks), or None where
    it is not known (no /proc)."""
    fields = _stat(pid)
    try:
        return int(fields[11]) + int(fields[12]) if fields else None
    except (ValueError, IndexError):
        return None


class ReadWatch:
    """A watchdog for reading a message from another process: one that uses no CPU time for
    ``timeout`` seconds while this process waits in the middle of its message (stopped by
    SIGSTOP or a debugger as it wrote) is killed, so the read ends (with EOFError) instead of
    blocking for good. One thread, started at the first read; ``killed`` holds their pids.
    Without /proc nothing is known, and nothing is killed."""

    def __init__(self, timeout: float):
        self.timeout = float(timeout)
        self.killed: set = set()
        self._slot = None  # (process, since, its CPU ticks then)
        self._stop = threading.Event()
        self._thread = None

    def reading(self, proc):
        """Context manager around the read of a message from ``proc``."""
        if self._thread is None and self.timeout == self.timeout and self.timeout < 1e9:
            self._thread = threading.Thread(target=self._run, name="labkit-read-watch",
                                            daemon=True)
            self._thread.start()

        @contextlib.contextmanager
        def watched():
            self._slot = (proc, time.monotonic(), cpu_ticks(proc.pid))
            try:
                yield
            finally:
                self._slot = None
        return watched()

    def _run(self):
        while not self._stop.wait(min(1.0, self.timeout / 4)):
            slot = self._slot
            if slot is None or time.monotonic() - slot[1] < self.timeout:
                continue
            proc, _, ticks = slot
            now = cpu_ticks(proc.pid)
            if now is not None and now == ticks and self._slot is slot:
                self.killed.add(proc.pid)
                proc.kill()
            elif self._slot is slot:  # NOTE: it works (a large item): watch from now
                self._slot = (proc, time.monotonic(), now)

    def close(self):
        self._stop.set()

    def __reduce__(self):  # NOTE: a copy (a stream sent to a process) is a fresh, idle one
        return ReadWatch, (self.timeout,)


# ---- process locks ------------------------------------------------------------------------
#: the locks this process holds; a child forked without exec closes its copies (a flock
#: belongs to the open file, which the child shares: a multiprocessing pool forked while a
#: run trained kept the run locked after this process let go, or died)
_HELD: weakref.WeakSet = weakref.WeakSet()


def _close_held_in_child() -> None:
    for f in list(_HELD):
        try:
            f.close()
        except OSError:
            pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_in_child)


class LockHeld(Exception):
    """Another process (or another open file of this one) holds the lock; ``holder``: the pid
    it wrote, as text ("?" when unknown); ``forked``: the pid is this process's, which does
    not hold it: a process forked from it while it did holds the open file still."""

    def __init__(self, holder: str, forked: bool = False):
        super().__init__(holder)
        self.holder, self.forked = holder, forked


#: seconds ``hold_lock`` waits for a child forked while this process held the lock to close
#: its copy of the open file (it does as it starts, ``_close_held_in_child``, unless it is
#: not scheduled yet: a loop that forked a worker mid-run, run again at once on a busy
#: machine, found its own claim held)
FORKED_WAIT = 5.0


def _held_here(path) -> bool:
    """Whether this process holds the lock on ``path`` (through ``hold_lock``)."""
    p = os.path.realpath(path)
    return any(not f.closed and os.path.realpath(f.name) == p for f in list(_HELD))


def hold_lock(path):
    """An OS lock (``flock``) on the file ``path``, taken without waiting: the open file,
    which holds it until ``let_go`` (or the process's end, killed or not; a child it forks
    keeps no copy: it closes it as it starts, and this waits up to ``FORKED_WAIT`` s for one
    that has not yet), with this process's pid written in it. ``LockHeld`` where another holds
    it; ``OSError`` where none can be taken (the file cannot be made, a filesystem without
    locks: NFS ``nolock``, some Lustre); None on a system without ``flock`` (Windows: a second
    process is refused by liveness only)."""
    if fcntl is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + FORKED_WAIT
    while True:
        f = open(path, "a+")  # noqa: SIM115 - held until let_go
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as e:
            f.seek(0)
            holder = f.read().strip()[:40] or "?"
            f.close()
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise
            forked = holder == str(os.getpid()) and not _held_here(path)
            if not forked or time.monotonic() >= deadline:
                raise LockHeld(holder, forked) from None
            time.sleep(0.01)  # NOTE: a child forked while this process held it, not closed yet
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    _HELD.add(f)
    return f


def let_go(f) -> None:
    """Release a lock ``hold_lock`` took (None: nothing)."""
    if f is not None:
        _HELD.discard(f)
        f.close()  # NOTE: closing the file releases its lock
