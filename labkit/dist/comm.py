"""The communicator: rank, size and collectives on labkit arrays, over MPI (mpi4py + MPICH).

mpi4py is imported the first time a communicator is made, never by ``import labkit``. Without
``mpiexec`` the same script runs as one process (MPI's singleton mode; without mpi4py installed, a
one-rank communicator that needs no MPI at all). Arrays travel as buffers (``Bcast``,
``Allreduce``, ``Iallreduce``): a NumPy array directly, an OpenCL array through host memory.
Python objects (``bcast_object``, ``allgather_object``) go through mpi4py's pickling and are only
for small control messages between ranks of the same job, never for anything on disk.

Every wait on a collective goes through ``wait``, the stall inspector: when it has waited
``stall_seconds`` (``LABKIT_DIST_STALL``, default 60), the rank prints which collective it is in
and which ranks have not reached it yet (read from a table in shared memory that every rank on the
node updates as it enters a collective), then keeps waiting. Horovod's stall warning is the model.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

from ..errors import LabkitError


class DistError(LabkitError):
    """Ranks that disagree (models, steps, checkpoints), or MPI that cannot be used."""


_ops = {}  # "sum" | "max" | "min" -> MPI.Op, filled when MPI is loaded
#: the collectives the stall inspector can name (an id per name in the shared table)
OPS = ("none", "barrier", "broadcast", "allreduce", "gradient bucket", "agreement", "checkpoint")


def _stall_seconds() -> float:
    from ..config import get

    v = get("LABKIT_DIST_STALL")
    return v if v > 0 else float("inf")


def _host(a) -> np.ndarray:
    """A C-contiguous NumPy array with ``a``'s values (a copy for OpenCL arrays)."""
    if isinstance(a, np.ndarray):
        return np.ascontiguousarray(a)
    get = getattr(a, "get", None)
    if get is None:
        raise DistError(f"lk.dist: expected a labkit array or Tensor (NumPy or OpenCL), got "
                        f"{type(a).__name__}")
    return get()


def _like(host: np.ndarray, a):
    """``host`` as an array on ``a``'s device."""
    if isinstance(a, np.ndarray):
        return host
    from ..backend import opencl

    return opencl.asarray(host, device=a.device)


class Communicator:
    """Ranks of one job and collectives between them (``lk.dist.world()`` is every rank).

    Examples
    --------
    >>> import numpy as np
    >>> import labkit as lk
    >>> comm = lk.dist.world()                 # one process: rank 0 of 1
    >>> comm.rank, comm.size
    (0, 1)
    >>> comm.allreduce(np.array([1.0, 2.0]), op="mean").tolist()
    [1.0, 2.0]
    """

    def __init__(self, mpi_comm=None, stall_seconds: float | None = None):
        self.mpi = None  # the mpi4py module's MPI, or None for the MPI-less single rank
        self.comm = None
        if mpi_comm is not None:
            from mpi4py import MPI

            self.mpi, self.comm = MPI, mpi_comm
        else:
            try:
                from mpi4py import MPI
            except ImportError:
                pass
            else:
                self.mpi, self.comm = MPI, MPI.COMM_WORLD
        if self.mpi is not None and not _ops:
            _ops.update(sum=self.mpi.SUM, max=self.mpi.MAX, min=self.mpi.MIN)
        self.rank = 0 if self.comm is None else self.comm.Get_rank()
        self.size = 1 if self.comm is None else self.comm.Get_size()
        self.stall_seconds = _stall_seconds() if stall_seconds is None else stall_seconds
        self.seq = 0  # collectives entered on this rank (the same sequence on every rank)
        #: this rank's weight in the gradient average of the current step (DataParallel sets
        #: it: the examples of its shard); AllReduceSum's gradient is weighted by it
        self.loss_weight = 1.0
        self._table = None  # the shared-memory table of (seq, op, detail) per rank
        self._stalls = 0

    def __repr__(self):
        kind = "MPI" if self.comm is not None else "no MPI"
        return f"Communicator(rank={self.rank}, size={self.size}, {kind})"

    # -- the stall inspector
    def _enter(self, op: str, detail: int = -1) -> None:
        self.seq += 1
        if self.size > 1:
            table = self._table if self._table is not None else self._make_table()
            if table is not False:
                table[self.rank] = (self.seq, OPS.index(op), detail)

    def _make_table(self):
        """Each rank's (collective count, op, detail) in memory shared by the ranks of a node;
        ``False`` where ranks span nodes (the inspector then names only its own collective)."""
        MPI = self.mpi
        try:
            node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
            if node.Get_size() != self.size:
                node.Free()
                self._table = False
                return False
            nbytes = self.size * 3 * 8 if node.Get_rank() == 0 else 0
            win = MPI.Win.Allocate_shared(nbytes, 8, comm=node)
            buf, _ = win.Shared_query(0)
            table = np.ndarray((self.size, 3), dtype=np.int64, buffer=buf)
            node.Barrier()
            self._win, self._node = win, node
            self._table = table
        except Exception:  # noqa: BLE001 - the inspector is a diagnostic: never fail a job for it
            self._table = False
        return self._table

    def wait(self, requests, op: str = "allreduce", detail: int = -1) -> None:
        """Wait for mpi4py requests; past ``stall_seconds``, report who has not arrived."""
        if not requests:
            return
        MPI = self.mpi
        if MPI.Request.Testall(requests):
            return
        start = time.monotonic()
        warn_at = start + self.stall_seconds
        nap_after = start + 0.2
        nap, spins = 0.0, 0
        # NOTE: MPICH moves a non-blocking collective on only inside MPI calls: spin on Testall
        # (a 2.5 MB all-reduce took 11 ms with sleeps between tests, 2-3 ms spinning); only a
        # wait longer than 0.2 s naps, so a rank stuck behind a slow one frees its core
        while not MPI.Request.Testall(requests):
            spins += 1
            if nap or spins % 256 == 0:
                now = time.monotonic()
                if now >= warn_at:
                    self._report_stall(op, detail, now - start)
                    warn_at = now + self.stall_seconds
                if now >= nap_after:
                    nap = min(max(nap * 2, 1e-4), 2e-3)
                    time.sleep(nap)

    def progress_thread(self, interval: float = 5e-5):
        """A ``Progress``: a thread that keeps MPI's started collectives moving while this rank
        computes (made on every rank at once: it duplicates the communicator)."""
        return Progress(self, interval)

    def progress(self, requests) -> None:
        """Let MPI move started collectives on (called between pieces of other work)."""
        if requests:
            self.mpi.Request.Testall(requests)

    def _report_stall(self, op, detail, waited) -> None:
        self._stalls += 1
        what = op + (f" #{detail}" if detail >= 0 else "")
        lines = [f"[labkit dist] rank {self.rank}/{self.size} has waited {waited:.0f} s in "
                 f"{what} (collective {self.seq} of this rank)"]
        table = self._table
        if table is not None and table is not False:
            late = []
            for r in range(self.size):
                s, o, d = (int(v) for v in table[r])
                if s < self.seq:
                    at = OPS[o] + (f" #{d}" if d >= 0 else "") if 0 <= o < len(OPS) else "?"
                    late.append(f"rank {r} (at collective {s}: {at})")
            lines.append("  not arrived: " + (", ".join(late) if late else
                                              "none (every rank is in it: a slow transfer?)"))
        else:
            lines.append("  the other ranks' positions are unknown (ranks on several nodes)")
        lines.append("  a rank that never arrives is stuck or took another path (a different "
                     "number of steps, a collective inside an if on one rank)")
        print("\n".join(lines), file=sys.stderr, flush=True)

    # -- collectives
    def barrier(self) -> None:
        """Wait until every rank is here."""
        self._enter("barrier")
        if self.size > 1:
            self.wait([self.comm.Ibarrier()], "barrier")

    def broadcast(self, x, root: int = 0):
        """``x`` as rank ``root`` has it, on every rank. A Tensor is updated in place (its
        ``.data``) and returned; an array comes back as a new array on its device (a C-contiguous
        NumPy array is overwritten in place and returned)."""
        from ..autograd import Tensor

        self._enter("broadcast")
        if self.size == 1:
            return x
        if isinstance(x, Tensor):
            x.data = self.broadcast(x.data, root)
            return x
        if isinstance(x, np.ndarray) and x.flags.c_contiguous:
            self.wait([self.comm.Ibcast(x, root=root)], "broadcast")
            return x
        host = _host(x)
        self.wait([self.comm.Ibcast(host, root=root)], "broadcast")
        return _like(host, x)

    def allreduce(self, x, op: str = "sum"):
        """The elementwise ``op`` (``"sum"``, ``"mean"``, ``"max"``, ``"min"``) of ``x`` over
        every rank, as a new array (a Tensor for a Tensor) on ``x``'s device."""
        from ..autograd import Tensor

        if op not in ("sum", "mean", "max", "min"):
            raise DistError(f"allreduce: op must be 'sum', 'mean', 'max' or 'min', got {op!r}")
        if isinstance(x, Tensor):
            return Tensor(self.allreduce(x.data, op))
        self._enter("allreduce")
        host = np.array(_host(x), copy=True)
        if self.size > 1:
            self.wait([self.comm.Iallreduce(self.mpi.IN_PLACE, host,
                                            _ops["sum" if op == "mean" else op])], "allreduce")
        if op == "mean":
            host = (host / self.size).astype(host.dtype, copy=False)
        return _like(host, x)

    def iallreduce_sum(self, buffer: np.ndarray, detail: int = -1):
        """Start summing the NumPy ``buffer`` in place over every rank; returns a request for
        ``wait`` (None on one rank)."""
        self._enter("gradient bucket", detail)
        if self.size == 1:
            return None
        return self.comm.Iallreduce(self.mpi.IN_PLACE, buffer, _ops["sum"])

    def bcast_object(self, obj, root: int = 0):
        """A small JSON-like control value from ``root`` (pickled by mpi4py in memory only)."""
        self._enter("broadcast")
        return obj if self.size == 1 else self.comm.bcast(obj, root=root)

    def allgather_object(self, obj, what: str = "agreement") -> list:
        """Every rank's small control value, in rank order."""
        self._enter(what)
        return [obj] if self.size == 1 else self.comm.allgather(obj)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now (after an error only this rank saw)."""
        if self.comm is not None and self.size > 1:
            self.comm.Abort(code)
        raise SystemExit(code)


class Progress:
    """While ``on()``: a thread probing a private copy of the communicator every ``interval``
    seconds, which runs MPICH's progress engine, so a non-blocking all-reduce moves on while
    NumPy (which releases the GIL) computes. It probes, never tests requests: only the thread
    that waits completes them (MPI forbids two threads completing one request)."""

    def __init__(self, comm: Communicator, interval: float):
        self.interval = interval
        self._probe = comm.comm.Dup() if comm.size > 1 else None
        self._active = threading.Event()
        self._thread = None

    def on(self) -> None:
        if self._probe is None or self._active.is_set():
            return
        self._active.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="labkit-mpi-progress",
                                            daemon=True)
            self._thread.start()

    def off(self) -> None:
        self._active.clear()

    def _run(self):
        probe, active, nap = self._probe.Iprobe, self._active, self.interval
        while True:
            active.wait()
            probe()
            time.sleep(nap)


_world: Communicator | None = None


def world() -> Communicator:
    """The communicator of every rank of this job (made, and MPI started, on first use)."""
    global _world
    if _world is None:
        _world = Communicator()
    return _world


def rank() -> int:
    """This process's rank (0 without MPI)."""
    return world().rank


def size() -> int:
    """How many ranks the job has (1 without MPI)."""
    return world().size


def barrier() -> None:
    world().barrier()


def broadcast(x, root: int = 0):
    return world().broadcast(x, root)


def allreduce(x, op: str = "sum"):
    return world().allreduce(x, op)
