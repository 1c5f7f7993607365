"""Worker processes: ``Parallel(stream, workers=N)`` prepares items of an indexed stream in N
spawned processes, with a bounded window of items in flight, and delivers them in order.

Item ``k`` of epoch ``e`` goes to worker ``k % N`` and is a pure function of ``(e, k)`` and the
stages' seeds, so the sequence is the same for any N (0 runs in this process). The state is the
wrapped stream's own state, so a state saved with 2 workers loads with 0, 1 or 4.

Workers are started with ``spawn`` (safe in notebooks and on macOS) on the first item. A worker
that dies, raises or exceeds ``timeout`` seconds on one item becomes a ``WorkerError`` naming it;
workers ignore Ctrl-C (the main process handles it and shuts them down), exit when the main
process dies, and are stopped by ``close()``, by garbage collection or at interpreter exit.

In a script, create the stream under ``if __name__ == "__main__":``; with ``spawn`` each worker
imports the script's module again.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
import weakref

from ..errors import DataError, WorkerError
from .streams import Stream
from .transformers import _walk, check_sendable

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _worker_main(index, stream, tasks, results, parent_pid):
    """A worker's loop: ('get', gen, epoch, k) -> results; ('state', gen, stages); None stops."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stages = stream.stages()
    while True:
        try:
            task = tasks.get(timeout=0.5)
        except queue.Empty:
            if os.getppid() != parent_pid:  # the main process died: do not linger as an orphan
                return
            continue
        if task is None:
            # NOTE: results not yet read are not wanted any more; without this the worker would
            # block on exit, flushing them into a pipe nobody reads.
            results.cancel_join_thread()
            break
        if task[0] == "state":
            for s, own in zip(stages, task[2]):
                s._load_own_state(own)
            continue
        _, gen, epoch, k = task
        try:
            item = stream.get_item(epoch, k)
            results.put((gen, epoch, k, item, None))
        except BaseException as e:  # noqa: BLE001 - sent to the main process with its traceback
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            results.put((gen, epoch, k, None, f"{type(e).__name__}: {e}\n{tb}"))
    stream.close()


def _shutdown(procs, task_queues, results):
    for q in task_queues:
        try:
            q.put_nowait(None)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
    deadline = time.monotonic() + 2.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(1.0)
        if p.is_alive():
            p.kill()
            p.join(1.0)
    for q in [*task_queues, results]:
        q.cancel_join_thread()
        q.close()


def _describe_exit(code) -> str:
    if code is None:
        return "is not responding"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class Parallel(Stream):
    """Prepare the items of an indexed ``stream`` in ``workers`` processes.

    Parameters
    ----------
    stream : an indexed stream (a ``DataStream`` and per-item transformers over it). Sequential
        stages (``Batch``, ``Filter``, ...) go on top of ``Parallel``, not under it.
    workers : number of processes; 0 computes in this process (same items, same order).
    prefetch : items in flight at most (default ``2 * workers``).
    timeout : seconds one item may take before the worker preparing it is reported as hung.
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
        if workers < 0:
            raise DataError(f"Parallel: workers must be >= 0, got {workers}")
        self.stream, self.workers = stream, int(workers)
        self.prefetch = max(1, int(prefetch if prefetch is not None else 2 * max(1, workers)))
        self.timeout = float(timeout)
        self.sources, self.produces_examples = stream.sources, stream.produces_examples
        if self.workers:
            check_sendable(stream)
        self._procs: list = []
        self._tasks: list = []
        self._results = None
        self._gen = 0
        self._pending: dict = {}   # (epoch, k) -> (worker, time sent)
        self._done: dict = {}      # (epoch, k) -> item
        self._finalizer = None

    # -- the Stream interface
    def num_items(self, epoch):
        return self.stream.num_items(epoch)

    def get_item(self, epoch, k):
        if not self.workers:
            return self.stream.get_item(epoch, k)
        if not self._procs:
            self._start()
        n = self.num_items(epoch)
        for j in range(k, min(n, k + self.prefetch)):
            if (epoch, j) not in self._pending and (epoch, j) not in self._done:
                self._submit(epoch, j)
        return self._wait(epoch, k)

    def _reset(self):
        if self._procs:
            self._gen += 1
            self._pending.clear()
            self._done.clear()
            own = [s._own_state() for s in self.stream.stages()]
            for q in self._tasks:
                q.put(("state", self._gen, own))

    def close(self):
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._procs, self._tasks, self._results = [], [], None
        self._pending.clear()
        self._done.clear()
        self.stream.close()

    def __repr__(self):
        return f"Parallel({self.stream!r}, workers={self.workers})"

    # -- workers
    def _start(self):
        ctx = mp.get_context("spawn")
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(self.workers)]
        saved = {v: os.environ.get(v) for v in _THREAD_VARS}
        # NOTE: one BLAS thread per worker, or N workers fight over the cores.
        os.environ.update({v: "1" for v in _THREAD_VARS})
        try:
            for i in range(self.workers):
                p = ctx.Process(target=_worker_main, name=f"labkit-data-worker-{i}",
                                args=(i, self.stream, self._tasks[i], self._results,
                                      os.getpid()), daemon=True)
                p.start()
                self._procs.append(p)
        except Exception as e:
            _shutdown(self._procs, self._tasks, self._results)
            self._procs = []
            raise DataError(f"Parallel: could not start worker processes: {e}") from e
        finally:
            for v, old in saved.items():
                if old is None:
                    os.environ.pop(v, None)
                else:
                    os.environ[v] = old
        self._finalizer = weakref.finalize(self, _shutdown, list(self._procs), list(self._tasks),
                                           self._results)

    def _submit(self, epoch, k):
        w = k % self.workers
        self._tasks[w].put(("get", self._gen, epoch, k))
        self._pending[(epoch, k)] = (w, time.monotonic())

    def _fail(self, message):
        self.close()
        raise WorkerError(message)

    def _wait(self, epoch, k):
        key = (epoch, k)
        while key not in self._done:
            try:
                gen, e, j, item, err = self._results.get(timeout=0.2)
            except queue.Empty:
                self._check(key)
                continue
            if gen != self._gen:
                continue  # from before a load_state_dict
            w, _ = self._pending.pop((e, j), (j % self.workers, 0))
            if err is not None:
                self._fail(f"data worker {w} (pid {self._procs[w].pid}) raised while preparing "
                           f"item {j} of epoch {e}:\n{err}")
            self._done[(e, j)] = item
        return self._done.pop(key)

    def _check(self, key):
        for i, p in enumerate(self._procs):
            if not p.is_alive():
                self._fail(f"data worker {i} (pid {p.pid}) {_describe_exit(p.exitcode)} while "
                           f"preparing items; the item awaited was {key[1]} of epoch {key[0]}. "
                           "Out of memory, or a crash in native code? Try workers=0 to see the "
                           "error in this process.")
        w, sent = self._pending[key]
        if time.monotonic() - sent > self.timeout:
            self._fail(f"data worker {w} (pid {self._procs[w].pid}) has not returned item "
                       f"{key[1]} of epoch {key[0]} after {self.timeout:.0f} s (timeout="
                       f"{self.timeout:g}); it is hung or the item is very slow to prepare")

