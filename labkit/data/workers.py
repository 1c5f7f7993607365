"""Worker processes: ``Parallel(stream, workers=N)`` prepares items of an indexed stream in N
spawned processes, with a bounded window of items in flight, and delivers them in order.

Item ``k`` of epoch ``e`` goes to worker ``k % N`` and is a pure function of ``(e, k)`` and the
stages' seeds, so the sequence is the same for any N (0 runs in this process). The state is the
wrapped stream's own state, so a state saved with 2 workers loads with 0, 1 or 4.

Workers are started with ``spawn`` (safe in notebooks and on macOS) on the first item. A worker
that dies, raises, returns an item that cannot be sent back, or spends more than ``timeout``
seconds on one item becomes a ``WorkerError`` naming it and the item it was preparing. Workers
ignore Ctrl-C (the main process handles it: Ctrl-C while it starts them, waits for an item or
loads a state shuts them down, and the next item starts new ones) and are stopped by ``close()``,
by garbage collection or at interpreter exit. They never outlive the main process, even when it
is killed while they are inside a long transformer call: on Linux the kernel kills them with it
(``PR_SET_PDEATHSIG``); everywhere, a thread in each worker exits the process as soon as the
pipe from the main process closes. Nothing else is left behind: the pipes and the small shared
progress table need no resource tracker (multiprocessing's own tracker process, started with
the first workers, lives as long as the main process and ends with it).

One thread at a time reads a stream: another thread that reads it or loads a state into it
meanwhile gets a ``DataError``, and ``close()`` from another thread stops the reader with one.

Items travel between labkit's own processes as pickles over pipes (the main process only ever
unpickles what its own workers sent).

In a script, create the stream under ``if __name__ == "__main__":``; with ``spawn`` each worker
imports the script's module again.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import numbers
import os
import queue
import signal
import sys
import threading
import time
import traceback
import weakref
from multiprocessing import connection
from multiprocessing.reduction import ForkingPickler

from .._proc import THREAD_VARS, ReadWatch
from ..errors import DataError, WorkerError
from .streams import Stream
from .transformers import _walk, check_sendable

#: ask the kernel to kill each worker when the main process dies (Linux); tests turn it off to
#: exercise the fallback (the worker's pipe-watching thread)
_PDEATHSIG = True
_PR_SET_PDEATHSIG = 1
#: a worker's exit code when its result pipe failed other than by the main process closing it
_SEND_FAILED = 75
# The progress table: per worker [sequence number, generation, epoch, item, phase], written by
# the worker before and after each item, so the main process knows what a dead or slow worker
# was doing (a result already sent can be lost with a crashed process; this cannot).
_SLOTS = 5
_STARTING, _IDLE, _BUSY = 0, 1, 2


# ---- the worker side ------------------------------------------------------------------------
def _die_with_parent(parent_pid: int, use_prctl: bool) -> None:
    if use_prctl and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the fallback remains
            pass
    # NOTE: a parent that died before prctl took effect sent no signal; we are re-parented then.
    if os.getppid() != parent_pid:
        os._exit(0)


def _receive(tasks, inbox, parent_pid, latest):
    """Thread: move tasks from the pipe to ``inbox`` at once (so the main process never blocks
    sending them, whatever the worker is doing) and end the process when the main one is gone."""
    try:
        while True:
            if not tasks.poll(1.0):
                if os.getppid() != parent_pid:
                    os._exit(0)
                continue
            task = tasks.recv()
            if task is not None and task[0] == "state":
                latest[0] = task[1]
            inbox.put(task)
            if task is None:
                return
    except (EOFError, OSError):
        os._exit(0)  # the main process closed the pipe: it died or is shutting us down
    except BaseException:  # noqa: BLE001 - a worker that cannot receive must not wait forever
        traceback.print_exc()
        os._exit(_SEND_FAILED)


def _send(results, outbox):
    """Thread: send pickled results, so the worker prepares its next item meanwhile."""
    while True:
        payload = outbox.get()
        if payload is None:
            return
        try:
            for part in payload:  # its header, then the item (see Parallel._receive)
                results.send_bytes(part)
        except BrokenPipeError:
            os._exit(0)  # the main process is gone or closed the pipe
        except BaseException:  # noqa: BLE001 - reported through the exit code
            traceback.print_exc()
            os._exit(_SEND_FAILED)


def _format(e: BaseException) -> str:
    try:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        return f"{type(e).__name__}: {e}\n{tb}"
    except Exception:  # noqa: BLE001 - an exception whose str() raises: name it, not a crash
        return f"{type(e).__name__} (its message could not be formatted)"


def _worker_main(index, stream, tasks, results, progress, parent_pid, use_prctl):
    """A worker: ('get', gen, epoch, k) -> a result; ('state', gen, stages); None stops."""
    _die_with_parent(parent_pid, use_prctl)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox, outbox, latest = queue.SimpleQueue(), queue.SimpleQueue(), [0]
    threading.Thread(target=_receive, args=(tasks, inbox, parent_pid, latest),
                     name="labkit-worker-receive", daemon=True).start()
    threading.Thread(target=_send, args=(results, outbox), name="labkit-worker-send",
                     daemon=True).start()
    base = index * _SLOTS
    stages = stream.stages()
    progress[base + 4] = _IDLE
    while True:
        task = inbox.get()
        if task is None:
            break
        if task[0] == "state":
            for s, own in zip(stages, task[2]):
                s._load_own_state(own)
            continue
        _, gen, epoch, k = task
        if gen < latest[0]:
            continue  # asked for before a load_state_dict: nobody wants it any more
        # NOTE: the sequence number first, then BUSY: a reader that sees BUSY sees the new item's
        # number too, and never times a fresh item by an old one's start
        progress[base] += 1
        progress[base + 1], progress[base + 2], progress[base + 3] = gen, epoch, k
        progress[base + 4] = _BUSY
        # NOTE: the header (which item, or why not) and the item's pickle travel as two
        # messages, so that an item this process can pickle but the main process cannot read
        # back is reported with its number, in its turn
        header, body = (gen, epoch, k, None, None), b""
        try:
            item = stream.get_item(epoch, k)
        except BaseException as e:  # noqa: BLE001 - sent to the main process with its traceback
            header = (gen, epoch, k, "raised", _format(e))
        else:
            try:
                body = ForkingPickler.dumps(item)
            except BaseException as e:  # noqa: BLE001 - unpicklable, too large: say so at once
                header = (gen, epoch, k, "unsendable", _format(e))
            del item
        progress[base + 4] = _IDLE
        outbox.put((bytes(ForkingPickler.dumps(header)), body))
    stream.close()


# ---- the main-process side ------------------------------------------------------------------
_launcher_lock = threading.Lock()
_launcher: tuple | None = None  # (pid, queue) of the thread that starts workers


def _launch_loop(jobs):
    while True:
        fn, box, done = jobs.get()
        try:
            box.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box.append(e)
        done.set()


def _on_long_lived_thread(fn):
    """Run ``fn()`` on a thread that lives as long as this process.

    The kernel's parent-death signal fires when the *thread* that started a worker ends, not the
    process; workers started from a thread that may end (a notebook's training thread) would die
    with it. The main thread ends only with the process, so it starts workers itself."""
    global _launcher
    if threading.current_thread() is threading.main_thread():
        return fn()
    with _launcher_lock:
        if _launcher is None or _launcher[0] != os.getpid():
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_launch_loop, args=(jobs,), name="labkit-worker-launcher",
                             daemon=True).start()
            _launcher = (os.getpid(), jobs)
        jobs = _launcher[1]
    box: list = []
    done = threading.Event()
    jobs.put((fn, box, done))
    done.wait()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


#: seconds the workers get to end on their own at shutdown before they are terminated (one
#: stuck in a transformer, or stopped, is)
SHUTDOWN_GRACE = 2.0


def _shutdown(procs, tasks, results):
    for c in tasks:
        try:
            c.send(None)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
    # NOTE: closing the result pipes unblocks a worker stuck sending a result nobody will read.
    for c in [*tasks, *results]:
        c.close()
    deadline = time.monotonic() + SHUTDOWN_GRACE
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(1.0)
        if p.is_alive():
            p.kill()
            p.join(1.0)


class _Failed:
    """An item a worker could not prepare or send: its error, raised in its turn."""

    __slots__ = ("message",)

    def __init__(self, message):
        self.message = message


def _describe_exit(code) -> str:
    if code is None:
        return "is not responding"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code == _SEND_FAILED:
        return (f"exited with code {code} (its result pipe failed; its error is on the main "
                "process's stderr)")
    return f"exited with code {code}"


class Parallel(Stream):
    """Prepare the items of an indexed ``stream`` in ``workers`` processes.

    Parameters
    ----------
    stream : an indexed stream (a ``DataStream`` and per-item transformers over it). Sequential
        stages (``Batch``, ``Filter``, ...) go on top of ``Parallel``, not under it.
    workers : number of processes; 0 computes in this process (same items, same order).
    prefetch : items in flight at most (default ``2 * workers``).
    timeout : seconds a worker may spend on one item (counted from when it starts the item)
        before it is reported as hung, or stay idle while an item of its waits (stopped); a
        worker gets ``max(timeout, 60)`` seconds to start.
    """

    indexed = True
    # NOTE: left out of the state, so a state saved with N workers loads with any other N.
    transparent = True

    def __init__(self, stream: Stream, workers: int = 2, prefetch: int | None = None,
                 timeout: float = 120.0):
        super().__init__()
        if not isinstance(stream, Stream):
            raise DataError(f"Parallel: expected a stream, got {type(stream).__name__}")
        if not stream.indexed:
            seq = next(s for s in _walk(stream) if not s.indexed)
            raise DataError(f"Parallel: {type(seq).__name__} is a sequential stage, which worker "
                            f"processes cannot split; put Parallel below it, e.g. "
                            f"{type(seq).__name__}(Parallel(...))")
        for what, v, low in (("workers", workers, 0), ("prefetch", prefetch, 1)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)
                                  or v < low):
                raise DataError(f"Parallel: {what} must be an integer >= {low}, got {v!r}")
        if (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                or not 0 < timeout < float("inf")):
            # NOTE: nan turned hang detection off silently; None was a raw TypeError
            raise DataError(f"Parallel: timeout must be a positive number of seconds, got "
                            f"{timeout!r}")
        inner = next((s for s in _walk(stream) if isinstance(s, Parallel) and s.workers), None)
        if workers and inner is not None:
            raise DataError(f"Parallel: the stream already has {inner!r} in it, and worker "
                            "processes cannot start their own; keep one Parallel, above all the "
                            "per-item stages")
        self.stream, self.workers = stream, int(workers)
        self.prefetch = max(1, int(prefetch if prefetch is not None else 2 * max(1, workers)))
        self.timeout = float(timeout)
        self._watch = ReadWatch(self.timeout)
        self.sources, self.produces_examples = stream.sources, stream.produces_examples
        if self.workers:
            check_sendable(stream)
        self._procs: list = []
        self._tasks: list = []     # per worker: the pipe tasks go down
        self._results: list = []   # per worker: the pipe results come up
        self._progress = None
        self._seen: list = []      # per worker: (sequence number, since, item waiting)
        self._started = 0.0
        self._gen = 0
        self._pending: set = set()  # (epoch, k) asked for and not yet received
        self._done: dict = {}       # (epoch, k) -> item
        self._finalizer = None
        # NOTE: the pipes serve one thread at a time: the one reading items holds the lock; a
        # second reader is refused, a close() from another thread asks the reader to stop
        self._lock = threading.RLock()
        self._reader = None
        self._closing = False

    def __getstate__(self):
        return {**self.__dict__, "_lock": None}

    def __setstate__(self, state):
        self.__dict__.update(state, _lock=threading.RLock())

    # -- the Stream interface
    def num_items(self, epoch):
        return self.stream.num_items(epoch)

    def get_item(self, epoch, k):
        if not self.workers:
            return self.stream.get_item(epoch, k)
        with self._reading("read"):
            if not self._procs:
                self._start()
            n = self.num_items(epoch)
            for j in range(k, min(n, k + self.prefetch)):
                if (epoch, j) not in self._pending and (epoch, j) not in self._done:
                    self._submit(epoch, j)
            return self._wait(epoch, k)

    @contextlib.contextmanager
    def _reading(self, what):
        if not self._lock.acquire(blocking=False):
            raise DataError(f"Parallel: cannot {what} this stream in thread "
                            f"{threading.current_thread().name!r} while thread {self._reader!r} "
                            "reads it; a stream is read by one thread at a time (wait for the "
                            "other to stop, e.g. loop.wait(), or build a second stream)")
        try:
            self._reader = threading.current_thread().name
            yield
        finally:
            self._lock.release()

    def _reset(self):
        if not self._procs:
            return
        with self._reading("load a state into"):
            self._gen += 1
            self._pending.clear()
            self._done.clear()
            own = [s._own_state() for s in self.stream.stages()]
            try:
                for w in range(self.workers):
                    self._send(w, ("state", self._gen, own), None)
            except BaseException:
                # NOTE: Ctrl-C between two sends leaves a worker with the old state, which
                # would prepare items of the new generation from it: new workers instead
                self._stop_workers()
                raise

    def _stop_workers(self):
        """Shut the workers down and forget the items in flight (the next item starts new
        workers, with the stages' state as it is then)."""
        # NOTE: forget first: an interrupted shutdown must not leave closed pipes to use
        finalizer, self._finalizer = self._finalizer, None
        self._procs, self._tasks, self._results, self._progress = [], [], [], None
        self._watch.close()
        self._pending.clear()
        self._done.clear()
        if finalizer is not None:
            finalizer()

    def close(self):
        if not self._lock.acquire(blocking=False):
            self._closing = True  # NOTE: the reader sees it within 0.2 s and stops
            self._lock.acquire()
        try:
            self._closing = False
            self._stop_workers()
        finally:
            self._lock.release()
            self.stream.close()

    def __repr__(self):
        return f"Parallel({self.stream!r}, workers={self.workers})"

    # -- workers
    def _start(self):
        self._watch = ReadWatch(self.timeout)
        ctx = mp.get_context("spawn")
        self._progress = ctx.RawArray("q", _SLOTS * self.workers)
        self._seen = [(0, 0.0, None)] * self.workers
        ends = []

        def start():
            saved = {v: os.environ.get(v) for v in THREAD_VARS}
            # NOTE: one BLAS thread per worker, or N workers fight over the cores.
            os.environ.update({v: "1" for v in THREAD_VARS})
            try:
                for i in range(self.workers):
                    task_r, task_w = ctx.Pipe(duplex=False)
                    result_r, result_w = ctx.Pipe(duplex=False)
                    self._tasks.append(task_w)
                    self._results.append(result_r)
                    ends.extend([task_r, result_w])
                    p = ctx.Process(target=_worker_main, name=f"labkit-data-worker-{i}",
                                    args=(i, self.stream, task_r, result_w, self._progress,
                                          os.getpid(), _PDEATHSIG), daemon=True)
                    p.start()
                    self._procs.append(p)
            finally:
                for v, old in saved.items():
                    if old is None:
                        os.environ.pop(v, None)
                    else:
                        os.environ[v] = old
                # NOTE: the workers hold these ends now; ours would keep the pipes open after
                # a worker dies (no end-of-file to see) or after we die (no exit for it).
                for c in ends:
                    c.close()

        try:
            _on_long_lived_thread(start)
        except BaseException as e:
            # NOTE: Ctrl-C while starting too: half a set of workers would be used next time
            started = self._procs, self._tasks, self._results
            self._procs, self._tasks, self._results = [], [], []
            _shutdown(*started)
            if not isinstance(e, Exception):
                raise
            raise DataError(f"Parallel: could not start worker processes: {e}") from e
        self._started = time.monotonic()
        self._finalizer = weakref.finalize(self, _shutdown, list(self._procs), list(self._tasks),
                                           list(self._results))

    def _send(self, w, message, key):
        try:
            self._tasks[w].send(message)
        except OSError:
            self._died(w, key)

    def _submit(self, epoch, k):
        self._send(k % self.workers, ("get", self._gen, epoch, k), (epoch, k))
        self._pending.add((epoch, k))

    def _fail(self, message):
        self.close()
        raise WorkerError(message)

    def _name(self, w) -> str:
        return f"data worker {w} (pid {self._procs[w].pid})"

    def _doing(self, w) -> str:
        """What worker ``w`` is doing, from the progress table."""
        base = w * _SLOTS
        seq, gen, epoch, k, phase = self._progress[base:base + _SLOTS]
        if phase == _STARTING:
            return "while starting (importing modules and receiving the stream)"
        if phase == _IDLE:
            return "between items" if seq else "before its first item"
        when = "" if gen == self._gen else " (asked for before the last load_state_dict)"
        return f"while preparing item {k} of epoch {epoch}{when}"

    def _died(self, w, key):
        p = self._procs[w]
        p.join(5.0)
        awaited = f"; the main process was waiting for item {key[1]} of epoch {key[0]}" if key \
            else ""
        self._fail(f"{self._name(w)} {_describe_exit(p.exitcode)} {self._doing(w)}{awaited}. "
                   "Out of memory, or a crash in native code? Try workers=0 to see the error in "
                   "this process.")

    def _receive(self, w, key):
        pipe = self._results[w]
        try:
            # NOTE: watched: a worker stopped in the middle of sending blocked this read for
            # good, and the timeout (checked between reads) never came
            with self._watch.reading(self._procs[w]):
                gen, e, j, kind, err = ForkingPickler.loads(pipe.recv_bytes())
                body = pipe.recv_bytes()
        except (EOFError, OSError):
            if self._procs[w].pid in self._watch.killed:
                self._fail(f"{self._name(w)} stopped in the middle of sending an item and used "
                           f"no CPU for {self.timeout:g} s (timeout={self.timeout:g}): it was "
                           "stopped (SIGSTOP, a debugger) or is stuck; it was killed")
            self._died(w, key)
        if gen != self._gen:
            return  # from before a load_state_dict
        self._pending.discard((e, j))
        if kind is None:
            try:
                item = ForkingPickler.loads(body)
            except Exception as exc:  # noqa: BLE001 - e.g. a class the worker alone can import
                kind, err = "unreadable", f"{type(exc).__name__}: {exc}"
        if kind == "unreadable":
            item = _Failed(f"{self._name(w)} sent item {j} of epoch {e}, which this process "
                           f"cannot read back ({err}); an item's classes must import in the "
                           "main process too: send arrays, numbers, strings, and lists and "
                           "dicts of them")
        elif kind == "raised":
            item = _Failed(f"{self._name(w)} raised while preparing item {j} of epoch {e}:"
                           f"\n{err}")
        elif kind == "unsendable":
            item = _Failed(f"{self._name(w)} prepared item {j} of epoch {e} but could not send "
                           "it to the main process (items must pickle: arrays, numbers, "
                           f"strings, and lists and dicts of them):\n{err}")
        # NOTE: a failed item is raised when its turn comes: the items before it are delivered
        # first, as workers=0 would (the same batches for any number of workers)
        self._done[(e, j)] = item

    def _wait(self, epoch, k):
        try:
            return self._wait_for(epoch, k)
        except Exception:
            raise
        except BaseException:
            # NOTE: Ctrl-C can land inside a result being read (the pipe is left in its middle)
            # or just after it (the item is lost, and waited for forever): new workers prepare
            # the items from the next one asked for
            self._stop_workers()
            raise

    def _wait_for(self, epoch, k):
        key = (epoch, k)
        index = {c: w for w, c in enumerate(self._results)}
        index.update({p.sentinel: w for w, p in enumerate(self._procs)})
        while key not in self._done:
            ready = connection.wait(list(index), timeout=0.2)
            dead = []
            for obj in ready:
                w = index[obj]
                if obj is self._results[w]:
                    self._receive(w, key)
                else:
                    dead.append(w)
            for w in dead:
                while self._results[w].poll(0):  # what it sent before it died
                    self._receive(w, key)
                if key not in self._done:  # else it is reported with the next item awaited
                    self._died(w, key)
            if key not in self._done:
                self._check(key)
            if self._closing:
                raise DataError(f"Parallel: thread {threading.current_thread().name!r} was "
                                f"waiting for item {k} of epoch {epoch} when another thread "
                                "closed the stream")
        item = self._done.pop(key)
        if isinstance(item, _Failed):
            self._fail(item.message)
        return item

    def _check(self, key):
        now = time.monotonic()
        for w in range(self.workers):
            base = w * _SLOTS
            seq, gen, epoch, k, phase = self._progress[base:base + _SLOTS]
            if phase == _STARTING:
                limit = max(self.timeout, 60.0)
                if now - self._started > limit:
                    self._fail(f"{self._name(w)} has not started after {limit:.0f} s (importing "
                               "modules or receiving the stream); the main process was waiting "
                               f"for item {key[1]} of epoch {key[0]}")
                continue
            # NOTE: an idle worker with an item waiting is timed too (from when the item is
            # seen waiting): one stopped (SIGSTOP, a debugger) or stuck between items never
            # starts it
            busy = phase == _BUSY
            waiting = None if busy else min(
                (j for j in self._pending if j[1] % self.workers == w), default=None)
            if not busy and waiting is None:
                # NOTE: the table is read without a lock; an idle worker restarts its clock, so
                # a busy phase read together with an old sequence number times from now
                self._seen[w] = (seq, now, None)
            elif self._seen[w][0] != seq or self._seen[w][2] != waiting:
                self._seen[w] = (seq, now, waiting)
            elif now - self._seen[w][1] > self.timeout and waiting:
                self._fail(f"{self._name(w)} has been idle {self.timeout:.0f} s (timeout="
                           f"{self.timeout:g}) while item {waiting[1]} of epoch {waiting[0]} "
                           "waits on it; it is stopped (SIGSTOP, a debugger) or stuck between "
                           "items")
            elif now - self._seen[w][1] > self.timeout:
                self._fail(f"{self._name(w)} has not returned item {k} of epoch {epoch} after "
                           f"{self.timeout:.0f} s (timeout={self.timeout:g}); it is hung or "
                           "the item is very slow to prepare")
