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
A wait that cannot end is not left to run forever: after half a second of waiting the table is
read every quarter of a second, and a rank that has left the job without reaching this collective
(its script ended: another number of steps), one whose process is gone, or one that sits in
another collective at the same count (a collective inside an ``if``) ends the wait with a
``DistError`` naming it (``python -m mpi4py`` then ends every rank). A rank alive but stuck
outside any collective (a deadlock in the script, a hung read) is seen by no such check: past
``timeout`` seconds in one collective (``LABKIT_DIST_TIMEOUT``, default 1800, as PyTorch's
default for its collectives) the wait ends with a ``DistError`` naming the ranks that have not
arrived, instead of a job that hangs forever.
"""

from __future__ import annotations

import atexit
import os
import pickle
import sys
import threading
import time

import numpy as np

from .._proc import alive
from ..errors import LabkitError


class DistError(LabkitError):
    """Ranks that disagree (models, steps, checkpoints), or MPI that cannot be used."""


_ops = {}  # "sum" | "max" | "min" -> MPI.Op, filled when MPI is loaded
#: the collectives the stall inspector can name (an id per name in the shared table)
OPS = ("none", "barrier", "broadcast", "allreduce", "gradient bucket", "agreement", "checkpoint")
#: the shared table's columns, per rank
SEQ, OP, DETAIL, PID, STATE = range(5)
#: STATE: 1 once the rank's script has ended (it left the job); 2 once its loop's run() ended
#: in an exception (rank 0 has recorded the run: see ``ended``)
LEFT, ENDED = 1, 2
#: a wait this long reads the table for ranks that cannot come, then reads it again this often
CHECK_AFTER, CHECK_EVERY = 0.5, 0.25


def _seconds_or_never(name: str) -> float:
    """Setting ``name`` in seconds; inf (never) where it is 0."""
    from ..config import get

    v = get(name)
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

    def __init__(self, mpi_comm=None, stall_seconds: float | None = None,
                 timeout: float | None = None):
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
        self.stall_seconds = (_seconds_or_never("LABKIT_DIST_STALL") if stall_seconds is None
                              else stall_seconds)
        #: seconds in one collective before the wait ends with a DistError (inf: never)
        self.timeout = _seconds_or_never("LABKIT_DIST_TIMEOUT") if timeout is None else timeout
        self.seq = 0  # collectives entered on this rank (the same sequence on every rank)
        #: this rank's weight in the gradient average of the current step (DataParallel sets
        #: it: the examples of its shard); AllReduceSum's gradient is weighted by it
        self.loss_weight = 1.0
        self._table = None  # the shared-memory table of (seq, op, detail, pid, state) per rank
        self._stalls = 0
        self._odd: dict = {}  # rank -> its row seen in another collective at this count

    def __repr__(self):
        kind = "MPI" if self.comm is not None else "no MPI"
        return f"Communicator(rank={self.rank}, size={self.size}, {kind})"

    # -- the stall inspector
    def _enter(self, op: str, detail: int = -1) -> None:
        self.seq += 1
        if self.size > 1:
            table = self._table if self._table is not None else self._make_table()
            if table is not False:
                table[self.rank, :PID] = (self.seq, OPS.index(op), detail)

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
            nbytes = self.size * 5 * 8 if node.Get_rank() == 0 else 0
            win = MPI.Win.Allocate_shared(nbytes, 8, comm=node)
            buf, _ = win.Shared_query(0)
            table = np.ndarray((self.size, 5), dtype=np.int64, buffer=buf)
            table[self.rank, PID:] = (os.getpid(), 0)
            node.Barrier()
            self._win, self._node = win, node
            self._table = table
            # NOTE: before MPI's own finalization (atexit runs the last registered first)
            atexit.register(self._leave)
        except Exception:  # noqa: BLE001 - the inspector is a diagnostic: never fail a job for it
            self._table = False
        return self._table

    def training(self) -> None:
        """This rank's loop is training (``DataParallelLoop.run`` began)."""
        table = self._table
        if table is not None and table is not False and table[self.rank, STATE] == ENDED:
            table[self.rank, STATE] = 0

    def ended(self, grace: float = 5.0) -> None:
        """This rank's ``run()`` ends in an exception that ``python -m mpi4py`` turns into an
        abort of every rank: rank 0 says its run is recorded; the others wait (at most
        ``grace`` seconds) until rank 0 has said so, has left or is gone, or sits in a
        collective (the exception was this rank's alone), so that their abort does not kill
        rank 0 while it records why the run ended."""
        table = self._table
        if table is None or table is False:
            return
        if self.rank == 0:
            table[0, STATE] = ENDED
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            s, o, _, pid, state = (int(v) for v in table[0])
            if state in (LEFT, ENDED) or not alive(pid) or s > self.seq:
                return
            time.sleep(0.01)

    def _leave(self) -> None:
        """Mark this rank as gone from the job (its script ended) for the others' waits."""
        table = self._table
        if table is not None and table is not False:
            table[self.rank, STATE] = LEFT

    def wait(self, requests, op: str = "allreduce", detail: int = -1) -> None:
        """Wait for mpi4py requests; past ``stall_seconds``, report who has not arrived."""
        if not requests:
            return
        MPI = self.mpi
        try:
            if MPI.Request.Testall(requests):
                return
            self._wait(requests, op, detail)
        except MPI.Exception as e:
            raise DistError(f"rank {self.rank}/{self.size}: MPI failed in "
                            f"{_what(op, detail)} (collective {self.seq} of this rank): {e}. "
                            "The ranks may be in different collectives (buffers of other "
                            "sizes, a collective inside an if on some ranks)") from e

    def _wait(self, requests, op, detail) -> None:
        MPI = self.mpi
        start = time.monotonic()
        warn_at = start + self.stall_seconds
        give_up = start + self.timeout
        nap_after = start + 0.2
        check_at = start + CHECK_AFTER
        nap, spins = 0.0, 0
        self._odd.clear()
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
                if now >= check_at:
                    self._check_peers(op, detail)
                    check_at = now + CHECK_EVERY
                if now >= give_up:
                    head, *rest = self._stall_lines(op, detail, now - start)
                    raise DistError(f"{head[len('[labkit dist] '):]}, past LABKIT_DIST_TIMEOUT "
                                    f"({self.timeout:g} s); {rest[0].strip()}: it is stuck "
                                    "outside the job's collectives or took another path. "
                                    "Set LABKIT_DIST_TIMEOUT higher where a rank works alone "
                                    "that long (0: never)")
                if now >= nap_after:
                    nap = min(max(nap * 2, 1e-4), 2e-3)
                    time.sleep(nap)

    def _check_peers(self, op, detail) -> None:
        """Raise ``DistError`` for a rank that cannot reach this rank's collective: it left the
        job before it, its process is gone, or it waits in another collective at the same
        count (seen twice in a row: a row is written while it is read)."""
        table = self._table
        if table is None or table is False:
            return
        mine = tuple(int(v) for v in table[self.rank, :PID])
        here = (f"rank {self.rank} waits in {_what(op, detail)} (collective {self.seq} of "
                "this rank)")
        for r in range(self.size):
            if r == self.rank:
                continue
            s, o, d, pid, state = (int(v) for v in table[r])
            theirs = f"its collective {s}: {_named(o, d)}"
            if state == LEFT and s < self.seq:
                raise DistError(f"rank {r} has left the job (its script ended after {theirs}) "
                                f"while {here}: the ranks ran different numbers of steps or "
                                "collectives (a rank with fewer batches, a collective inside "
                                "an if on some ranks)")
            if state != LEFT and pid > 0 and not alive(pid):
                # NOTE: one gone after this collective may have sent its part: seen twice
                if s < self.seq or self._odd.get(r) == "gone":
                    raise DistError(f"rank {r} (pid {pid}) is gone (killed, or it crashed) "
                                    f"while {here}; it was at {theirs}")
                self._odd[r] = "gone"
            elif s == mine[0] and (o, d) != mine[1:]:
                if self._odd.get(r) == (s, o, d):
                    raise DistError(f"the ranks are in different collectives: rank {r} in "
                                    f"{_named(o, d)} and rank {self.rank} in "
                                    f"{_named(*mine[1:])}, both their collective {s}: a "
                                    "collective inside an if on some ranks, or another "
                                    "number of steps")
                self._odd[r] = (s, o, d)
            elif s > mine[0] and self._odd.get(r) != "ahead":
                self._odd[r] = "ahead"  # NOTE: it may have just finished this collective
            elif s > mine[0]:
                raise DistError(f"rank {r} has gone past this collective (it is in {theirs}) "
                                f"while {here}: the ranks reduced buffers of other sizes (an "
                                "array of another shape on some ranks) or MPI paired other "
                                "collectives")
            else:
                self._odd.pop(r, None)

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
        print("\n".join(self._stall_lines(op, detail, waited)), file=sys.stderr, flush=True)

    def _stall_lines(self, op, detail, waited) -> list[str]:
        what = _what(op, detail)
        lines = [f"[labkit dist] rank {self.rank}/{self.size} has waited {waited:.0f} s in "
                 f"{what} (collective {self.seq} of this rank)"]
        table = self._table
        if table is not None and table is not False:
            late = []
            for r in range(self.size):
                s, o, d = (int(v) for v in table[r, :PID])
                if s < self.seq:
                    late.append(f"rank {r} (at collective {s}: {_named(o, d)})")
            lines.append("  not arrived: " + (", ".join(late) if late else
                                              "none (every rank is in it: a slow transfer?)"))
        else:
            lines.append("  the other ranks' positions are unknown (ranks on several nodes)")
        lines.append("  a rank that never arrives is stuck or took another path (a different "
                     "number of steps, a collective inside an if on one rank)")
        return lines

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

        self._check_root(root, "broadcast")
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

    def _check_root(self, root, what: str) -> None:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or \
                not 0 <= root < self.size:
            raise DistError(f"{what}: root must be a rank, 0 to {self.size - 1}, got {root!r}")

    def allreduce(self, x, op: str = "sum"):
        """The elementwise ``op`` (``"sum"``, ``"mean"``, ``"max"``, ``"min"``) of ``x`` over
        every rank, as a new array (a Tensor for a Tensor) on ``x``'s device."""
        from ..autograd import Tensor

        if op not in ("sum", "mean", "max", "min"):
            raise DistError(f"allreduce: op must be 'sum', 'mean', 'max' or 'min', got {op!r}")
        if isinstance(x, Tensor):
            return Tensor(self.allreduce(x.data, op))
        self._enter("allreduce")
        src = _host(x)
        if self.size == 1:
            host = np.array(src, copy=True)
        elif _tag_limit(src.dtype) is None:
            host = np.array(src, copy=True)
            self.wait([self.comm.Iallreduce(self.mpi.IN_PLACE, host,
                                            _ops["sum" if op == "mean" else op])], "allreduce")
        else:
            host = self._tagged_allreduce(src, op)
        if op == "mean":
            host = (host / self.size).astype(host.dtype, copy=False)
        return _like(host, x)

    def _tagged_allreduce(self, src: np.ndarray, op: str) -> np.ndarray:
        """The all-reduce of ``src`` with a slot per rank after it: each rank writes a tag of
        this collective (its number in the sequence and the array's size) in its own slot and
        the neutral value of ``op`` in the others, so after the reduction every slot must hold
        the tag. A rank whose array has another size, or that is in another collective, leaves
        another value there (MPI sums arrays of different sizes into garbage): a DistError."""
        limit = _tag_limit(src.dtype)
        tag = 1 + (self.seq * 1000003 + src.size) % (limit - 2)
        buf = np.empty(src.size + self.size, src.dtype)
        buf[:src.size] = src.reshape(-1)
        buf[src.size:] = limit - 1 if op == "min" else 0
        buf[src.size + self.rank] = tag
        self.wait([self.comm.Iallreduce(self.mpi.IN_PLACE, buf,
                                        _ops["sum" if op == "mean" else op])], "allreduce")
        bad = [r for r, v in enumerate(buf[src.size:].tolist()) if v != tag]
        if bad:
            raise DistError(f"allreduce on rank {self.rank}: ranks {bad} did not reduce an array "
                            f"like this rank's ({src.size} values of {src.dtype}, collective "
                            f"{self.seq}): an array of another shape on some ranks, or another "
                            "collective (one inside an if on some ranks)")
        return buf[:src.size].reshape(src.shape)

    def iallreduce_sum(self, buffer: np.ndarray, detail: int = -1):
        """Start summing the NumPy ``buffer`` in place over every rank; returns a request for
        ``wait`` (None on one rank)."""
        self._enter("gradient bucket", detail)
        if self.size == 1:
            return None
        return self.comm.Iallreduce(self.mpi.IN_PLACE, buffer, _ops["sum"])

    def bcast_object(self, obj, root: int = 0):
        """A small JSON-like control value from ``root`` (pickled in memory only, between the
        ranks of this job; through ``wait``, as every collective here)."""
        self._check_root(root, "bcast_object")
        self._enter("broadcast")
        if self.size == 1:
            return obj
        data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL) if self.rank == root else b""
        n = np.array([len(data)], np.int64)
        self.wait([self.comm.Ibcast(n, root=root)], "broadcast")
        buf = np.frombuffer(data, np.uint8).copy() if self.rank == root else \
            np.empty(int(n[0]), np.uint8)
        self.wait([self.comm.Ibcast(buf, root=root)], "broadcast")
        return obj if self.rank == root else pickle.loads(buf.tobytes())

    def allgather_object(self, obj, what: str = "agreement") -> list:
        """Every rank's small control value, in rank order."""
        self._enter(what)
        if self.size == 1:
            return [obj]
        data = np.frombuffer(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL), np.uint8).copy()
        sizes = np.zeros(self.size, np.int64)
        self.wait([self.comm.Iallgather(np.array([data.size], np.int64), sizes)], what)
        counts = [int(v) for v in sizes]
        starts = [0, *np.cumsum(counts)[:-1].tolist()]
        out = np.empty(sum(counts), np.uint8)
        self.wait([self.comm.Iallgatherv(data, [out, counts, starts, self.mpi.BYTE])], what)
        return [pickle.loads(out[a:a + c].tobytes()) for a, c in zip(starts, counts)]

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now (after an error only this rank saw)."""
        if self.comm is not None and self.size > 1:
            self.comm.Abort(code)
        raise SystemExit(code)


def _tag_limit(dtype) -> int | None:
    """The integers a reduction of ``dtype`` keeps exactly (up to 2**24), or None where no tag
    fits (booleans, 8-bit types, anything not a number)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype.itemsize >= 4:
        return min(2 ** (np.finfo(dtype).nmant + 1), 2 ** 24)
    if dtype.kind in "iu" and dtype.itemsize >= 4:
        return min(int(np.iinfo(dtype).max), 2 ** 24)
    return None


def _what(op: str, detail: int) -> str:
    return op + (f" #{detail}" if detail >= 0 else "")


def _named(op_id: int, detail: int) -> str:
    """A collective as the shared table holds it, in words."""
    return _what(OPS[op_id], detail) if 0 <= op_id < len(OPS) else "?"


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
