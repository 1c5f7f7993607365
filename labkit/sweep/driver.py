"""The driver: the one process that decides what trains next and writes the run store.

It keeps each trial's state in memory and in the store at once (the store first: a driver
killed at any point leaves a state ``resume`` continues from): submits chunks to Dask, records
progress messages and results, applies ASHA, answers a stop request, and beats the heartbeat
of the sweep and of every training trial's run. A resumed driver never reruns a finished
trial: it continues interrupted ones from their newest checkpoint and starts the rest.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import time
import uuid

from ..errors import LabkitError, RunStoreError
from ..runs.notes import traceback_tail
from . import trial as trial_mod
from .space import SweepError, TrialError

#: where a failed trial is reported in one line when no hook reports it (``labkit sweep`` prints
#: its own): Dask's "Compute Failed" report of it is dropped (``engine._TrialFailures``)
log = logging.getLogger("labkit.sweep")
#: seconds between two writes of the heartbeats (and reads of a stop request)
BEAT_EVERY = 1.0
#: seconds between two reads of the requests while a paused sweep has nothing in flight
PAUSED_POLL = 0.2
#: an all-failed start aborts the sweep after this many failures
ABORT_AFTER = 3
#: trials queued per worker thread beyond the one it trains, so that a worker starts its next
#: trial as soon as it ends one instead of waiting for the driver's round trip (a queued trial
#: stays ``pending`` until its worker reports that it began)
QUEUE_AHEAD = 1
#: Dask blames every task queued on a worker that dies; a trial blamed for deaths of workers
#: it was not training on is queued again, up to this many times, rather than failed
REQUEUE_LIMIT = 3
#: trials skipped in a row (workers saying the sweep is stopping or another driver's) before a
#: driver that meant them to train gives up
SKIPS_LIMIT = 20


class Driver:
    def __init__(self, store, sweep: dict, make_loop, dims, asha, client, capacity, hook=None):
        self.store, self.sweep, self.make_loop = store, sweep, make_loop
        self.id, self.settings = sweep["id"], sweep["settings"]
        self.dims, self.asha, self.client, self.capacity = dims, asha, client, capacity
        self.hook = hook or self._log
        self.trials = {t["number"]: t for t in store.trials(self.id)}
        self.token = uuid.uuid4().hex
        self.identity = trial_mod.driver_identity()  # NOTE: read from /proc once, not per trial
        self.events: queue.Queue = queue.Queue()
        self.in_flight: dict = {}  # future -> trial number
        self.queued: dict = {}  # trial number -> rung: submitted, not reported begun
        self._submitted = 0
        self.submission: dict = {}  # trial number -> its chunk in flight (a counter)
        self._version = 0  # of the state told to the trials: increases, whatever the clock
        self._skips = 0  # "skipped" chunks in a row while the driver wanted them to train
        self.began_on: dict = {}  # trial number -> the worker it last reported beginning on
        self.requeued: dict = {}  # trial number -> times queued again after a blameless death
        self._lost: set = set()  # trials queued again: their next beginning is no new attempt
        self.stopping = False
        self.paused = False
        self.first_error = None
        self._beat = 0.0

    def _log(self, kind: str, info: dict) -> None:
        if kind == "failed":
            log.warning("labkit sweep %s: trial %s failed: %s", self.id, info["trial"],
                        info["error"][:500])

    # -- the store, trial by trial
    def _set(self, n: int, **fields) -> None:
        self.store.update_trials(self.id, {n: fields})
        self.trials[n].update(fields)

    def _run_update(self, n: int, **fields) -> None:
        rid = self.trials[n]["run_id"]
        if rid is None:
            return
        self._recorded(self.store.update_run, rid, **fields)

    def _recorded(self, write, rid, *args, **kw):
        """``write(rid, ...)`` into the store; nothing where the trial's run was deleted by
        hand (``delete(force=True)``, or while the sweep was stopped): its trial goes on
        unrecorded, and the sweep with it."""
        try:
            return write(rid, *args, **kw)
        except RunStoreError as e:
            if e.reason not in ("deleted", "not_found"):
                raise
            return None

    # -- choosing work
    def _budget(self, rung):
        return None if self.asha is None else self.asha.budget(rung)

    def next_job(self):
        """``(trial number, rung)`` to train now, or None: interrupted trials first (what was
        training when a driver stopped), then ASHA's promotions, then new trials."""
        busy = set(self.in_flight.values())
        for n, t in self.trials.items():
            if t["status"] == "interrupted" and n not in busy:
                return n, t["rung"] or 0
        if self.asha is not None:
            # NOTE: a trial queued for its promotion is still "stopped" until it begins
            rungs = {n: ("queued" if n in busy else t["status"], t["results"])
                     for n, t in self.trials.items() if t["results"]}
            promoted = self.asha.next_promotion(rungs, self.settings["mode"])
            if promoted is not None:
                return promoted
        for n, t in self.trials.items():
            if t["status"] == "pending" and n not in busy:
                return n, 0
        return None

    def submit(self, n: int, rung: int) -> None:
        t = self.trials[n]
        cfg = dict(t["params"])
        if t["run_id"] is None:
            rid = self.store.start_trial_run(self.id, n, f"{self.sweep['name']}-{n}", cfg,
                                             self.sweep.get("factory"),
                                             self.settings["directory"])
            t["run_id"] = rid
        since = max(0, self.store.max_iteration(t["run_id"]))
        spec = {"sweep": self.id, "trial": n, "run_id": t["run_id"], "params": t["params"],
                "config": cfg, "name": f"{self.sweep['name']}-{n}",
                "directory": os.path.join(self.settings["directory"], t["run_id"]),
                "factory": self.sweep.get("factory"), "metric": self.settings["metric"],
                "budget": self._budget(rung), "seed": self.settings["seed"], "since": since,
                "token": self.token, "state_variable": self._state_name(),
                "began_key": self._began_key(n), "driver": self.identity}
        # NOTE: first submitted, first run (Dask may otherwise take a queued one first)
        self._submitted += 1
        spec["submission"] = self._submitted  # NOTE: a message of an earlier chunk is stale
        fut = self.client.submit(trial_mod.train, self.make_loop, spec, pure=False,
                                 priority=-self._submitted,
                                 key=f"labkit-trial-{self.id}-{n}-{uuid.uuid4().hex[:8]}")
        self.in_flight[fut] = n
        self.queued[n] = rung
        self.submission[n] = self._submitted
        self.began_on.pop(n, None)

    def began(self, n: int) -> None:
        """Trial ``n``'s worker reported that it began its chunk: it is running now."""
        rung = self.queued.pop(n)
        t = self.trials[n]
        now = time.time()
        attempts = (t["attempts"] or 0) + (0 if n in self._lost else 1)
        self._lost.discard(n)
        self._set(n, status="running", rung=rung, attempts=attempts)
        self._run_update(n, status="running", started=now, heartbeat=now, pid=os.getpid(),
                         host=socket.gethostname())

    # -- messages and results
    def _drain(self) -> None:
        latest: dict = {}
        rows: dict = {}
        while True:
            try:
                _, msg = self.events.get_nowait()
            except queue.Empty:
                break
            if not isinstance(msg, dict) or msg.get("attempt") != self.token:
                continue  # another sweep's, or a superseded driver's
            n = msg["trial"]
            if msg.get("started"):
                if msg.get("submission") != self.submission.get(n):
                    continue  # NOTE: an earlier chunk's, arriving late
                self.began_on[n] = msg.get("worker")
                if n in self.queued:
                    self.began(n)
                continue
            if self.trials.get(n, {}).get("status") != "running":
                continue
            rows.setdefault(n, []).extend(msg["rows"])
            latest[n] = msg["progress"]
        now = time.time()
        for n, prog in latest.items():
            rid = self.trials[n]["run_id"]
            self._recorded(self.store.add_metrics, rid,
                           [(it, ep, k, v, now) for it, ep, k, v in rows[n]])
            self._run_update(n, progress=prog, heartbeat=now)
            self.hook("progress", {"trial": n, "progress": prog})

    def _sync_checkpoints(self, rid: str, found: list) -> None:
        # NOTE: a damaged record (its path not believed) is left as it is
        have = {c["path"]: c for c in self.store.checkpoints(rid) if "damaged" not in c}
        on_disk = {c["path"] for c in found}
        for c in found:
            old = have.get(c["path"])
            if old is None:
                self._recorded(self.store.add_checkpoint, rid, c["iteration"], c["epoch"],
                               c["path"], c["size"], c["metrics"], c.get("valid", True))
            elif old.get("valid") and not c.get("valid", True):
                self.store.set_checkpoint(old["id"], valid=False)
        for path, c in have.items():
            if path not in on_disk:
                self.store.remove_checkpoint(c["id"])

    def finished(self, fut, n: int) -> None:
        t = self.trials[n]
        res = fut.result() if fut.status == "finished" else None  # NOTE: fetched once
        skipped = res is not None and res["outcome"] == "skipped"
        if skipped or (fut.status == "cancelled" and n in self.queued):
            self._skipped(n)
            return
        self._skips = 0
        if fut.status == "error" and self._blameless(n, fut.exception()):
            self.queued.pop(n, None)
            self.requeued[n] = self.requeued.get(n, 0) + 1
            if t["status"] == "running":  # NOTE: it trained before: on from its checkpoint
                self._lost.add(n)  # NOTE: and its next beginning continues this attempt
                self._set(n, status="interrupted")
                self._run_update(n, status="interrupted", ended=time.time())
            self.hook("requeued", {"trial": n})
            return
        if n in self.queued:  # NOTE: its "began" message is late or lost
            self.began(n)
        if res is not None:
            now = time.time()
            self._recorded(self.store.add_metrics, t["run_id"],
                           [(it, ep, k, v, now) for it, ep, k, v in res["rows"]])
            self._sync_checkpoints(t["run_id"], res["checkpoints"])
            results = dict(t["results"])
            rung, value = t["rung"] or 0, res["value"]
            budget = self._budget(rung)
            if budget is not None and res["epoch"] >= budget:
                results[rung] = value
            common = {"results": results, "value": value, "iteration": res["iteration"],
                      "epoch": res["epoch"]}
            if res.get("nonfinite"):  # NOTE: a value of NaN or inf: none, and why
                common["error"] = res["nonfinite"][:2000]
            progress = {**res["progress"], "training": False}
            if res["outcome"] == "rung":
                self._set(n, status="stopped", **common)
                self._run_update(n, status="paused", progress=progress, heartbeat=now)
            elif res["outcome"] == "finished":
                self._set(n, status="finished", **common)
                self._run_update(n, status="finished", progress=progress, ended=now,
                                 heartbeat=now)
            else:
                self._set(n, status="interrupted", **common)
                self._run_update(n, status="interrupted", progress=progress, ended=now)
            self.hook("result", {"trial": n, **res})
            return
        if fut.status == "cancelled":
            self._set(n, status="interrupted")
            self._run_update(n, status="interrupted", ended=time.time())
            return
        exc = fut.exception()
        if isinstance(exc, SweepError):  # the sweep's setup is wrong: every trial would fail
            self._set(n, status="failed", error=str(exc)[:2000])
            self._run_update(n, status="failed", error=str(exc)[:2000], ended=time.time())
            raise exc
        tb = fut.traceback()
        reason = f"{type(exc).__name__}: {exc}"
        if type(exc).__name__ == "KilledWorker":
            reason = (f"KilledWorker: every worker that ran trial {n} died (its process ended "
                      f"while training it, {t['attempts']} attempt(s)); the trial is dropped, "
                      "the sweep goes on. Look for a crash or memory blow-up with its "
                      f"params {t['params']}")
        self._set(n, status="failed", error=reason[:2000])
        self._run_update(n, status="failed", error=reason[:2000], ended=time.time(),
                         traceback=_tb_text(exc, tb))
        self.first_error = self.first_error or reason
        self.hook("failed", {"trial": n, "error": reason})
        done = [t for t in self.trials.values() if t["status"] in ("finished", "stopped")]
        failed = [t for t in self.trials.values() if t["status"] == "failed"]
        if not done and len(failed) >= min(ABORT_AFTER, len(self.trials)):
            raise TrialError(f"sweep {self.id}: the first {len(failed)} trials all failed, the "
                             f"first with {self.first_error}; fix make_loop, then "
                             f"lk.sweep.resume({self.id!r}) (failed trials are not rerun: "
                             "start a new sweep to retry them)")

    def _blameless(self, n: int, exc) -> bool:
        """Whether a ``KilledWorker`` for trial ``n`` came from deaths of workers it was only
        queued on: the last one to die is not where it last reported beginning."""
        if type(exc).__name__ != "KilledWorker" or self.requeued.get(n, 0) >= REQUEUE_LIMIT:
            return False
        last = getattr(getattr(exc, "last_worker", None), "address", None)
        if last is None:
            return False
        began = self.began_on.get(n)
        # NOTE: the start as the worker recorded it, waiting for the scheduler, before it
        # trained: its "started" message can still be in the worker's batched stream when
        # the trial kills the worker, and then a trial that killed its worker looked as if
        # it had only been queued there, and was queued again
        try:
            rec = self.client.get_metadata(self._began_key(n), default=None)
        except Exception:  # noqa: BLE001 - the scheduler is gone: the message alone
            rec = None
        if (isinstance(rec, dict) and rec.get("token") == self.token
                and rec.get("submission") == self.submission.get(n)):
            began = rec.get("worker")
        return last != began

    def _skipped(self, n: int) -> None:
        """A chunk that found the sweep stopping (or owned by another driver) as it began,
        and did nothing: still pending if it never began; interrupted if Dask reran a chunk
        that had begun, on another worker (it continues from its checkpoint)."""
        if self.queued.pop(n, None) is None and self.trials[n]["status"] == "running":
            self._lost.add(n)
            self._set(n, status="interrupted")
            self._run_update(n, status="interrupted", ended=time.time())
        if self.stopping or self.paused:
            return
        # NOTE: the workers hold a state this driver did not mean (a stale stop, or another
        # driver's): tell it again, and give up rather than resubmit forever
        self._skips += 1
        if self._skips > SKIPS_LIMIT:
            raise SweepError(f"sweep {self.id}: the workers skipped {self._skips} trials in a "
                             "row as stopped or owned by another driver; is another "
                             "lk.sweep.resume of it running on this cluster? Stop that one, "
                             f"then lk.sweep.resume({self.id!r})")
        self._tell_trials(stop=False)

    # -- the loop
    def _beat_now(self) -> None:
        now = time.time()
        self._beat = time.monotonic()
        self.store.update_sweep(self.id, heartbeat=now)
        for n in set(self.in_flight.values()) - set(self.queued):
            self._run_update(n, heartbeat=now)

    def _requested(self) -> None:
        if self.stopping:
            return
        request = self.store.get_sweep(self.id).get("request")
        if request == "stop":
            self.stop()
        elif request == "pause":
            # NOTE: cleared only if unchanged: a stop written meanwhile is read next time
            self.store.clear_sweep_request(self.id, "pause")
            if not self.paused:
                self.pause()
        elif request == "resume":
            self.store.clear_sweep_request(self.id, "resume")
            if self.paused:
                self.unpause()

    def _state_name(self) -> str:
        return f"labkit-sweep-{self.id}-state"

    def _began_key(self, n: int) -> list:
        """Where trial ``n``'s chunks record the worker they began on, in the scheduler's
        metadata (``trial._record_start``)."""
        return [f"labkit-sweep-{self.id}-began", str(n)]

    def _forget_starts(self) -> None:
        """Drop the chunks' start records (``_began_key``) from the scheduler's metadata: only
        this loop reads them, and a long-lived cluster would keep them, a few bytes a trial,
        for every sweep it ran. (A chunk of a stopped sweep that begins after this records
        its start again, and is then left.)"""
        try:
            self.client.set_metadata(self._began_key(0)[:1], None)
        except Exception:  # noqa: BLE001 - a scheduler already gone holds nothing
            pass

    def _tell_trials(self, stop: bool) -> None:
        """What every trial of this sweep reads at its checks: which driver owns the sweep
        (a task of any other stops as superseded) and whether to stop."""
        from distributed import Variable

        variable = Variable(self._state_name(), client=self.client)
        where = [self._state_name(), "version"]
        if not self._version:  # NOTE: newer than any earlier driver's, whatever our clock
            self._version = self.client.get_metadata(where, default=0)
        self._version = max(self._version + 1, time.time_ns())
        self.client.set_metadata(where, self._version)
        state = {"owner": self.token, "stop": stop, "version": self._version}
        # NOTE: the variable first: a worker that joins after the push reads it
        variable.set(state)
        # NOTE: a worker dying meanwhile must not end the sweep (its replacement reads the
        # variable)
        self.client.run(trial_mod.tell, self.id, state, on_error="ignore")

    def stop(self) -> None:
        """Ask every training trial to checkpoint and stop; start nothing new (queued trials
        end at once and stay pending)."""
        self.stopping = True
        self._tell_trials(stop=True)
        self.hook("stop", {})

    def pause(self) -> None:
        """As ``stop``, but the driver stays: the sweep is ``paused`` until a ``resume``
        request, which continues the interrupted trials from their checkpoints."""
        self.paused = True
        self._tell_trials(stop=True)
        self.store.update_sweep(self.id, status="paused")
        self.hook("pause", {})

    def unpause(self) -> None:
        self.paused = False
        self._tell_trials(stop=False)
        self.store.update_sweep(self.id, status="running")
        self.hook("resume", {})

    def run(self) -> str:
        from distributed import wait

        self._tell_trials(stop=False)
        self.client.subscribe_topic(trial_mod.TOPIC, self.events.put)
        try:
            while True:
                self._drain()
                self._requested()
                if time.monotonic() - self._beat >= BEAT_EVERY:
                    self._beat_now()
                limit = self.capacity * (1 + QUEUE_AHEAD)
                while not (self.stopping or self.paused) and len(self.in_flight) < limit:
                    job = self.next_job()
                    if job is None:
                        break
                    self.submit(*job)
                if not self.in_flight:
                    if self.paused and not self.stopping:
                        time.sleep(PAUSED_POLL)  # NOTE: beats and reads requests meanwhile
                        continue
                    break
                try:
                    done, _ = wait(list(self.in_flight), timeout=0.25,
                                   return_when="FIRST_COMPLETED")
                except TimeoutError:
                    done = [f for f in self.in_flight if f.done()]
                self._drain()
                for fut in sorted(done, key=lambda f: self.in_flight[f]):
                    self.finished(fut, self.in_flight.pop(fut))
            return "stopped" if self.stopping else "finished"
        finally:
            self.client.unsubscribe_topic(trial_mod.TOPIC)
            self._abandon()
            self._forget_starts()

    def _abandon(self) -> None:
        """However the loop ended: no trial stays running (those in flight are interrupted;
        a resumed sweep continues them from their checkpoints; queued ones stay pending)."""
        try:
            self._drain()  # NOTE: which of the queued ones began
        except Exception:  # noqa: BLE001 - the store failing here must not hide why it ended
            pass
        for fut, n in list(self.in_flight.items()):
            fut.release()
            if self.queued.pop(n, None) is not None:
                continue
            try:
                self._set(n, status="interrupted")
                self._run_update(n, status="interrupted", ended=time.time(),
                                 progress={**(self.store.get(self.trials[n]["run_id"])
                                              ["progress"] or {}), "training": False})
            except LabkitError:
                pass  # NOTE: the store failing here must not hide why the loop ended
        self.in_flight.clear()


def _tb_text(exc, tb) -> str | None:
    if isinstance(getattr(exc, "traceback_text", None), str):
        return exc.traceback_text  # NOTE: the trial's own (trial._travels)
    try:
        exc.__traceback__ = tb
        return traceback_tail(exc)
    except Exception:  # noqa: BLE001 - a traceback is a courtesy
        return None
