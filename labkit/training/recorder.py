"""The recorder: a loop's one connection to the run store.

It creates the run (or attaches to one being resumed), keeps its status, progress and
heartbeat, sends the log's metrics through a ``Cursor`` from a background thread (SQLite
releases the GIL, so a step never waits for the disk), takes the commands sent to the run
(``commands.Listener``) while it trains, and records and deletes the run's checkpoints. With
``store=False`` the loop still gets a run id and directory, and nothing is written to the
store.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import warnings
from pathlib import Path

from .. import checkpoint as ckpt
from .._proc import LockHeld, hold_lock, let_go
from ..config import runs_dir
from ..errors import CheckpointError, RunStoreError, TrainingError
from .log import is_metric

#: metrics and progress reach the store at most this often (seconds), unless forced
FLUSH_EVERY = 1.0
#: ... or when this many metric rows are waiting
FLUSH_ROWS = 5000
#: a write the store refused because another process held its lock (each try waits
#: ``runs._db.BUSY_TIMEOUT``) is tried this many times in all before training fails
LOCKED_TRIES = 10
#: the file in a run's folder that the process training the run holds locked
CLAIM = ".labkit-training.lock"


class _Writer:
    """Store writes on a background thread, in order; ``drain()`` waits for them and re-raises
    the first error; ``close()`` ends the thread."""

    def __init__(self):
        self._q: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="labkit-run-store", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            job = self._q.get()
            try:
                if job is None:
                    return
                if self._error is None:  # after an error, the rest is dropped (re-raised once)
                    fn, args, kwargs = job
                    _patient(fn, *args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised in the training thread
                self._error = e
            finally:
                self._q.task_done()

    def submit(self, fn, *args, **kwargs):
        self.check()
        self._q.put((fn, args, kwargs))

    def drain(self):
        self._q.join()
        self.check()

    def check(self):
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def close(self):
        self._q.put(None)
        self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


class RunBusyError(TrainingError):
    """The run is being trained by another process (or another loop of this one)."""


_WARNED_NO_CLAIM: set = set()


def _no_claim(directory, e) -> None:
    """Training goes on without a claim where the filesystem takes no locks (once a folder)."""
    if str(directory) not in _WARNED_NO_CLAIM:
        _WARNED_NO_CLAIM.add(str(directory))
        warnings.warn(f"labkit: cannot lock {directory} ({e}); a second process training this "
                      "run is refused only while its heartbeat is fresh", stacklevel=3)


def _patient(fn, *args, **kwargs):
    """``fn(...)``, tried again while the store is locked by another process (a sqlite3
    shell left inside a transaction): training goes on meanwhile, its metrics wait in order
    (a 35 s lock failed the run, and its failure was not recorded)."""
    for attempt in range(LOCKED_TRIES):
        try:
            return fn(*args, **kwargs)
        except RunStoreError as e:
            if not getattr(e, "locked", False) or attempt == LOCKED_TRIES - 1:
                raise
            if attempt == 0:
                print(f"[labkit] {e}; training goes on, and what it records is written when "
                      "the store is free", file=sys.stderr, flush=True)


class Recorder:
    """Mirrors one loop into the run store (``enabled``) or only names its run (not)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.store = None
        self.run_id: str | None = None
        self.directory: Path | None = None
        #: set when the run was deleted from the store while training
        self.deleted = False
        self.parent_checkpoint: str | None = None
        self._cursor = None
        self._pending: list = []
        self._writer: _Writer | None = None
        self._last_flush = 0.0
        self._last_heartbeat = 0.0
        #: seconds between two writes of metrics and progress (a Dashboard asks for less)
        self.flush_every = FLUSH_EVERY
        self.listener = None
        self._claim = None

    # -- the run
    def ensure_run(self, name, config, factory) -> str:
        """Create the run (status ``created``) on first use; returns its id."""
        if self.run_id is not None:
            return self.run_id
        if self.enabled:
            from .. import runs

            self.store = runs.store()
            self.run_id = self.store.create_run(name=name, config=config, source=_source(),
                                                factory=factory)
        else:
            from ..runs.store import new_run_id

            self.run_id = new_run_id()
        self.directory = runs_dir() / self.run_id
        if self.store is not None:
            self.store.update_run(self.run_id, directory=str(self.directory))
        return self.run_id

    def attach(self, record: dict) -> None:
        """Record into the existing run ``record`` (a run being resumed)."""
        from .. import runs

        self.run_id = record["id"]
        self.directory = Path(record["directory"]) if record.get("directory") else \
            runs_dir() / self.run_id
        #: where a fork starts when it has no checkpoint of its own yet
        self.parent_checkpoint = record.get("parent_checkpoint")
        self.store = runs.store() if self.enabled else None
        if self.store is not None:
            # NOTE: before anything is written: a second process resuming the run at the
            # same moment is refused here, not after it rewrote the run's metrics
            self.claim()
            self.store.update_run(self.run_id, directory=str(self.directory), pid=os.getpid())

    def claim(self) -> None:
        """Hold the run's claim (an OS lock on a file in its folder) while it trains: a
        second process that resumes the run at the same time, or trains it while this one is
        busy in a long batch, is refused here, before it records anything. The lock goes
        with the process, even a killed one. Without a store, nothing is claimed."""
        if self.store is None or self._claim is not None:
            return
        try:
            self._claim = hold_lock(self.directory / CLAIM)
        except LockHeld as e:
            if e.forked:
                who = ("a process forked from this one while it trained (it still holds the "
                       "claim's open file: end it, or fork without the run's files open)")
            elif e.holder == str(os.getpid()):
                who = "another loop in this process"
            else:
                who = f"another process (pid {e.holder} on this machine)"
            raise RunBusyError(
                f"run {self.run_id} is being trained by {who}; wait for it to end, or stop it "
                f"(lk.runs.send({self.run_id!r}, 'stop')), then train it here") from None
        except OSError as e:  # NOTE: no lock here (NFS nolock, some Lustre): a warning
            _no_claim(self.directory, e)

    def release(self) -> None:
        f, self._claim = self._claim, None
        let_go(f)

    @property
    def checkpoint_dir(self) -> Path | None:
        return None if self.directory is None else self.directory / "checkpoints"

    def check_alive(self) -> bool:
        """Whether the run still exists in the store (always, without a store); asked before
        each checkpoint, so a run deleted while training writes no more files."""
        if self.store is not None and not self._guard(self.store.exists, self.run_id,
                                                      default=True):
            self._run_deleted()
        return not self.deleted

    def set_status(self, status: str, progress: dict, flush: bool = True, **fields) -> None:
        """Write ``status`` with ``progress``, after what is queued and (``flush``) with every
        metric logged so far: a queued write carried older progress and landed after the
        status (a paused run's cockpit said iteration 411, then 415, while it stayed paused).
        A store error writing the metrics is raised after the status is written."""
        failed = None
        if flush and self.store is not None and self._writer is not None:
            try:
                self.mirror(lambda: progress, force=True, wait=True)
            except RunStoreError as e:
                failed = e
        if self.store is not None:
            self._guard(self.store.update_run, self.run_id, status=status,
                        heartbeat=time.time(), pid=os.getpid(), progress=progress, **fields)
        if failed is not None:
            raise failed

    # -- commands
    def listen(self, control, iteration, started: float) -> None:
        """Take the run's commands (those sent from ``started`` on) into ``control`` until
        ``stop_listening``."""
        from .commands import Listener

        if self.store is not None:
            self.listener = self._guard(Listener, self.store, self.run_id, control, iteration,
                                        started)

    def acknowledge(self, command: str, result: str, iteration: int) -> None:
        if self.listener is not None:
            self.listener.acknowledge(command, result, iteration)

    def stop_listening(self, why: str) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.close(why)

    # -- metrics
    def follow(self, log, at_end: bool = False) -> None:
        """Send ``log``'s values from now on (``at_end``: not those it already holds)."""
        self._cursor = log.cursor(at_end=at_end)

    def mirror(self, progress, force: bool = False, wait: bool = False) -> None:
        """Queue the log's new values; write them (and ``progress()``) every second, or now with
        ``force``; ``wait`` until they are written."""
        if self.store is None:
            return
        now = time.time()
        if self._cursor is not None:
            self._pending += [(it, ep, k, v, now) for it, ep, k, v in self._cursor.read()
                              if is_metric(v)]
        mono = time.monotonic()
        writer = self._writer
        if writer is None:
            writer = self._writer = _Writer()
        try:
            if self._pending and (force or len(self._pending) >= FLUSH_ROWS
                                  or mono - self._last_flush > self.flush_every):
                writer.submit(self.store.add_metrics, self.run_id, self._pending)
                self._pending = []
                self._last_flush = mono
            # progress once a second, with the metrics: what the Runs sidebar and widgets show
            if force or mono - self._last_heartbeat > self.flush_every:
                writer.submit(self.store.update_run, self.run_id, heartbeat=time.time(),
                              progress=progress())
                self._last_heartbeat = mono
            if wait:
                writer.drain()
        except RunStoreError as e:
            self._store_failed(e)

    def sync_to_log(self, log, iteration: int) -> None:
        """After loading a checkpoint at ``iteration``: make the store's metrics match the log
        (rows logged after the checkpoint by a killed process go; rows up to it are written
        again, once each: the store keeps one value per run, key and iteration)."""
        self.follow(log, at_end=True)
        if self.store is None:
            return
        self._guard(self.store.truncate_metrics, self.run_id, after_iteration=iteration)
        now = time.time()
        rows = [(it, ep, k, v, now) for it, ep, k, v in log.cursor().read() if is_metric(v)]
        self._guard(self.store.add_metrics, self.run_id, rows)

    def finish(self, status: str, progress, error: str | None = None,
               traceback: str | None = None) -> None:
        """Write what is pending, then the final status (with a failed run's error and the
        tail of its traceback)."""
        if self.store is None:
            return
        try:
            self.mirror(progress, force=True, wait=True)
            failed = None
        except RunStoreError as e:  # NOTE: the status still says how the run ended
            failed = e
        if self.store is None:  # deleted meanwhile
            return
        in_flight = sys.exc_info()[0] is not None or error is not None
        if failed is not None:  # NOTE: what it trained was not all recorded: say so
            note = f"{type(failed).__name__}: {failed}"
            status, error = "failed", f"{error} (and then {note})" if error else note
        fields = {"ended": time.time()} if status in ("finished", "failed", "interrupted") \
            else {}
        if error:
            fields["error"] = error
        if traceback:
            fields["traceback"] = traceback
        self.set_status(status, progress(), flush=False, **fields)  # NOTE: flushed above
        if failed is not None and not in_flight:  # NOTE: never in place of the run's own error
            raise failed

    def close(self) -> None:
        """Wait for pending writes, end the writer thread and release the run's claim."""
        w, self._writer = self._writer, None
        try:
            if w is not None:
                try:
                    w.drain()
                except RunStoreError as e:
                    self._store_failed(e)
                finally:
                    w.close()
        finally:
            self.release()

    # -- checkpoints
    def add_checkpoint(self, path: Path, iteration: int, epoch: int, metrics: dict) -> None:
        if self.store is not None:
            size = sum(f.stat().st_size for f in path.iterdir())
            self._guard(self.store.add_checkpoint, self.run_id, iteration, epoch, path, size,
                        metrics)

    def mark_invalid(self, skipped, loaded_iteration: int) -> None:
        """Say in the store which of this run's checkpoints a resume passed over: those that
        failed their checks (``skipped``) and newer ones whose directory is gone."""
        if self.store is None:
            return
        skipped = {Path(p) for p in skipped}
        for c in self._records():
            path = Path(c["path"])
            if c["valid"] and (path in skipped or (c["iteration"] > loaded_iteration
                                                    and not path.exists())):
                self._guard(self.store.set_checkpoint, c["id"], valid=0)

    def adopt_checkpoint(self, path, directory=None) -> None:
        """Record ``path`` in the store as this run's where it is one this run wrote (see
        ``_wrote``), whole, but has no record: its writer was killed before it recorded it."""
        path = Path(path)
        if self.store is None or self.owns_checkpoint(path, directory):
            return
        m = self._wrote(path, directory)
        try:
            whole = m is not None and ckpt.verify(path) is None
        except OSError:
            return
        if whole:
            self.add_checkpoint(path, m.get("iteration", 0), m.get("epoch", 0),
                                m.get("metrics") or {})

    def _wrote(self, path: Path, directory=None) -> dict | None:
        """The manifest of ``path`` where this run wrote it: directly inside ``directory``
        (this run's checkpoint directory by default; not through a link), its manifest naming
        this run; else None."""
        directory = Path(directory) if directory is not None else self.checkpoint_dir
        try:
            if directory is None or path.is_symlink() or \
                    path.parent.resolve() != directory.resolve():
                return None
            m = ckpt.manifest(path)
        except (OSError, CheckpointError):
            return None
        return m if m.get("run_id") == self.run_id else None

    def owns_checkpoint(self, path, directory=None) -> bool:
        """Whether ``path`` is a checkpoint this run wrote (``_wrote``) and — with a store —
        recorded as this run's."""
        path = Path(path)
        if self._wrote(path, directory) is None:
            return False
        return self.store is None or any(Path(c["path"]) == path for c in self._records())

    def delete_checkpoint(self, path, directory=None) -> bool:
        """Delete ``path`` and its record if this run owns it (see ``owns_checkpoint``);
        False only where a run forked from it still starts from it (kept: a later prune
        deletes it once that run has checkpoints of its own)."""
        if not self.owns_checkpoint(path, directory):
            return True  # NOTE: not ours to delete: nothing more to do with it
        from .. import runs

        if self.store is None:
            try:
                ckpt.remove(path)
            except CheckpointError as e:  # not a checkpoint after all: keep it, say so
                warnings.warn(f"kept {path}: {e}", stacklevel=3)
            return True
        done = True
        for c in self._records():
            if Path(c["path"]) == Path(path):
                out = self._guard(runs.delete_checkpoint, c["id"], run_id=self.run_id,
                                  inside=directory or self.checkpoint_dir, in_store=self.store,
                                  explain=True, unless_forked=True)
                if out is not None and out[0] is None:
                    done = False  # NOTE: a fork starts from it: kept (pruned once it need not)
        return done

    def _records(self) -> list[dict]:
        """This run's checkpoint records, less damaged ones (their paths are not believed)."""
        return [c for c in self._guard(self.store.checkpoints, self.run_id, default=[])
                if "damaged" not in c]

    # -- failures
    def _guard(self, fn, *args, default=None, **kwargs):
        if self.store is None:
            return default
        try:
            return _patient(fn, *args, **kwargs)
        except RunStoreError as e:
            self._store_failed(e)
            return default

    def _store_failed(self, error: RunStoreError) -> None:
        """A store error while training: a deleted run stops the recording (the loop stops
        after this batch); anything else is raised."""
        if getattr(error, "reason", None) != "deleted":
            raise error
        self._run_deleted()

    def _run_deleted(self) -> None:
        if not self.deleted:
            self.deleted = True
            print(f"[labkit] run {self.run_id} was deleted from the run store while it trained; "
                  "training stops after this batch and nothing more is recorded or written",
                  file=sys.stderr, flush=True)
        self.store = None
        self._pending = []


def _source() -> str:
    nb = os.environ.get("JPY_SESSION_NAME")
    if nb:
        return nb
    main = sys.modules.get("__main__")
    f = getattr(main, "__file__", None)
    return str(Path(f).resolve()) if f else "<interactive>"
