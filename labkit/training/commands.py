"""Commands from outside the process: pause, resume, stop and checkpoint requests that arrive
through the run store (``lk.runs.send``, the REST API behind the notebook Dashboard and the
JupyterLab run pages), taken while ``run()`` trains.

A thread reads the run's pending commands every ``POLL`` seconds (and writes the run's
heartbeat every ``BEAT`` seconds, however long a batch takes) and hands them to the loop's
``Control`` — the same requests ``loop.pause()`` makes — so they need neither the kernel's
message loop (a notebook cell blocked in ``loop.wait()`` does not delay them) nor the training
thread (a long batch does not). Each command is acknowledged in the store when the loop has
acted on it: a pause when the loop has paused, a checkpoint when it is written, a resume or a
stop when it is handed over. Commands left from before ``run()`` started are expired unread;
a pause or checkpoint taken but not done when training ends is undone and answered so, so that
it does not act on the next ``run()``. The store failing for a while does not end the listener
(it reads again a second later); the run being deleted does.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict

from ..errors import RunStoreError

#: seconds between two reads of the pending commands
POLL = 0.1
#: seconds between two heartbeats written while the run trains (the loop writes one with its
#: progress between batches; a batch or an evaluation longer than ``runs.DEAD_AFTER``, 60 s,
#: without these showed a live run as dead: deletable unforced, resumable by another process)
BEAT = 10.0


class Listener:
    """Takes ``run_id``'s commands from ``store`` into ``control`` until ``close()``."""

    def __init__(self, store, run_id: str, control, iteration=lambda: None,
                 started: float | None = None):
        self.store, self.run_id, self.control = store, run_id, control
        self._iteration = iteration
        self._waiting: dict[str, list[int]] = defaultdict(list)
        # NOTE: ids answered here whose answer may not be written yet: a poll that read them
        # as pending just before must not take them again (a pause answered "already paused")
        self._answered: set[int] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.error: BaseException | None = None
        started = time.time() if started is None else started
        for c in store.pending_commands(run_id):
            if c["created"] < started:
                store.ack_command(c["id"], "expired: it was sent before this run() started")
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"labkit-commands-{run_id}")
        self._thread.start()

    def _run(self):
        wait, beat = POLL, time.monotonic()
        while not self._closed.wait(wait):
            try:
                self.poll()
                if time.monotonic() - beat >= BEAT:
                    beat = time.monotonic()
                    self.store.update_run(self.run_id, heartbeat=time.time(),
                                          pid=os.getpid())
                wait = POLL
            except RunStoreError as e:
                self.error = e
                if getattr(e, "reason", None) in ("deleted", "not_found"):
                    return  # the run is gone: nothing more to read
                wait = 1.0  # locked or failing for now: read again a second later

    def poll(self) -> int:
        """Take the pending commands now; returns how many."""
        taken = 0
        pending = self.store.pending_commands(self.run_id)
        with self._lock:  # NOTE: an answer no longer pending is written: forget its id
            self._answered &= {c["id"] for c in pending}
        for c in pending:
            with self._lock:
                if c["id"] in self._answered or c["id"] in {
                        i for ids in self._waiting.values() for i in ids}:
                    continue  # taken already: waiting for the loop to act, or answered
                self._take(c["command"], c["id"])
            taken += 1
        return taken

    def _take(self, command: str, cid: int) -> None:
        it = self._iteration()
        if command in ("resume", "stop") or (command == "pause" and self.control.paused):
            self._answered.add(cid)  # NOTE: answered below, at once
        if command == "pause":
            if self.control.paused:
                self.store.ack_command(cid, "already paused", it)
            else:
                self._waiting["pause"].append(cid)
                self.control.pause()
        elif command == "resume":
            was = self.control.paused
            self.control.unpause()
            # NOTE: the loop may have paused a moment ago and not yet answered (it answers
            # after it records the pause): worded for both
            early = self._cancel_pauses("overtaken by a resume (the loop went on at once)", it)
            self.store.ack_command(cid, "resumed: the pause was overtaken" if early else
                                   "resumed" if was else "not paused: nothing to resume", it)
        elif command == "stop":
            self.control.stop("stopped by a command")
            self.control.unpause()
            self._cancel_pauses("cancelled: the run stops", it)
            self.store.ack_command(cid, "stopping after this batch", it)
        elif command == "checkpoint":
            self._waiting["checkpoint"].append(cid)
            self.control.request_checkpoint()

    def _cancel_pauses(self, why: str, it) -> bool:
        """Answer the pauses the loop has not acted on yet (a resume or stop came first: the
        loop will not pause for them, and they stayed unanswered until training ended);
        whether there were any."""
        ids, self._waiting["pause"] = self._waiting["pause"], []
        self._answered.update(ids)
        for cid in ids:
            self._ack(cid, why, it)
        return bool(ids)

    def acknowledge(self, command: str, result: str, iteration: int | None = None) -> None:
        """The loop did ``command`` (``"pause"``: it paused; ``"checkpoint"``: one is
        written): acknowledge every command of that kind waiting for it."""
        with self._lock:
            ids, self._waiting[command] = self._waiting[command], []
            self._answered.update(ids)
        for cid in ids:
            self._ack(cid, result, iteration)

    def _ack(self, cid, result, iteration):
        try:
            self.store.ack_command(cid, result, iteration)
        except RunStoreError:
            pass  # NOTE: the run was deleted or the store failed: nobody can read the answer

    def close(self, why: str = "training ended first") -> None:
        """Stop reading; commands taken but not done, and any still pending, are answered
        with ``why``."""
        self._closed.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            # what was asked but not done must not act on the next run()
            if self._waiting["pause"]:
                self.control.unpause()
            if self._waiting["checkpoint"]:
                self.control.take_checkpoint_request()
            waiting = [cid for ids in self._waiting.values() for cid in ids]
            self._waiting.clear()
        try:
            waiting += [c["id"] for c in self.store.pending_commands(self.run_id)]
        except RunStoreError:
            return
        for cid in waiting:
            self._ack(cid, f"not done: {why}", self._iteration())
