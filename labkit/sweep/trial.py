"""What runs on a Dask worker: one chunk of one trial.

``train(make_loop, spec)`` builds the trial's loop, loads its newest valid checkpoint (if any:
a promoted trial, a rescheduled one, a resumed sweep), trains until the chunk's end — the next
ASHA rung (an epoch), the loop's own end, or a stop request — and returns what the driver
records. The loop has no run store here: the driver is the store's one writer, and workers
only send it messages (progress while training, through Dask's event log; the result at the
end). Checkpoints are files in the trial's run folder, which workers and driver share.

A chunk ends at a rung just after that epoch's extensions ran and a checkpoint was written:
the state is exactly what a process killed right after that checkpoint leaves, which resume
continues bit for bit.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path

from .. import checkpoint as ckpt
from .._proc import alive, start_time
from ..training import Checkpoint, Extension, MainLoop
from ..training.log import is_metric
from .space import SweepError, TrialError

#: the Dask event topic trials report progress on
TOPIC = "labkit-sweep"
#: seconds between two progress messages of a training trial (and two stop checks)
REPORT_EVERY = 1.0


class _Halt(Exception):
    """Ends a chunk after its checkpoint (never seen outside this module)."""


class _Reporter(Extension):
    """Sends the log's new values and the progress to the driver; ends the chunk at its rung
    (after every other extension of that epoch) or when the sweep is stopped."""

    priority = -1000
    every = None
    transient = True

    def __init__(self, loop, spec, send, should_stop):
        super().__init__(name="SweepReporter")
        self.spec, self.send, self.should_stop = spec, send, should_stop
        # NOTE: from what the log holds now on (a loaded checkpoint's rows are the result's)
        self.cursor = loop.log.cursor(at_end=True)
        self.last = time.monotonic()

    def rows(self, loop):
        return [[it, ep, k, v] for it, ep, k, v in self.cursor.read()
                if is_metric(v) and math.isfinite(v)]

    def flush(self, loop):
        self.last = time.monotonic()
        self.send({"sweep": self.spec["sweep"], "trial": self.spec["trial"],
                   "attempt": self.spec["token"], "rows": self.rows(loop),
                   "progress": loop.progress()})

    def _halt(self, loop, why):
        # NOTE: a trial taken over by another driver writes nothing more: that driver's task
        # for it may be writing its checkpoints now
        if why != "superseded" and loop.last_checkpoint_iteration != loop.status["iteration"]:
            # NOTE: through the loop's Checkpoint extension where it has one, so that its
            # keep_last counts (and later prunes) this checkpoint too
            saver = next((e for e in loop.extensions if isinstance(e, Checkpoint)), None)
            if saver is not None:
                saver.save(loop)
            else:
                loop.save_checkpoint()
        raise _Halt(why)

    def after_batch(self, loop):
        if time.monotonic() - self.last >= REPORT_EVERY:
            self.flush(loop)
            why = self.should_stop()
            if why:
                self._halt(loop, why)

    def after_epoch(self, loop):
        budget = self.spec.get("budget")
        ending = _ending(loop)
        rung = budget is not None and loop.status["epoch"] >= budget and not ending
        if not (ending or rung):
            # NOTE: not at the chunk's last epoch: its result, with these rows, follows at
            # once (a message per trial less: short trials' messages cost the driver's and
            # the scheduler's event loops more than their store writes)
            self.flush(loop)
        why = self.should_stop()
        if why:
            self._halt(loop, why)
        if rung:
            self._halt(loop, "rung")


def _ending(loop) -> bool:
    """Whether the loop's own stopping rules end it now: a rung that falls on its last epoch
    is its end, and the trial is finished, not stopped."""
    plan = loop.planned()
    st = loop.status
    return ((plan["epochs"] is not None and st["epoch"] >= plan["epochs"])
            or (plan["iterations"] is not None and st["iteration"] >= plan["iterations"]))


def _fresh_random_state(seed: int) -> None:
    """A new trial starts from the same random state on whichever worker runs it."""
    from ..bricks import set_seed
    from ..functions import noise

    set_seed(seed)
    for g in noise.default_generators().values():
        g.load_state_dict({"seed": 0, "counter": 0})


def build_loop(make_loop, spec) -> MainLoop:
    """The trial's loop, without a store, in its run's folder."""
    _fresh_random_state(spec["seed"])
    try:
        loop = make_loop(dict(spec["config"]))
    except Exception as e:
        raise TrialError(f"make_loop raised {type(e).__name__} for trial {spec['trial']} "
                         f"(params {spec['params']}): {e}") from e
    if not isinstance(loop, MainLoop):
        raise SweepError(f"make_loop returned {type(loop).__name__}, not a MainLoop, for trial "
                         f"{spec['trial']}: it must return lk.training.MainLoop(...)")
    loop.config = dict(spec["config"])
    loop.name = spec["name"]
    loop.factory = spec.get("factory")
    loop.recorder.enabled = False  # NOTE: the driver writes the store (one writer)
    loop.attach({"id": spec["run_id"], "directory": spec["directory"]})
    return loop


def _checkpoints(loop) -> list[dict]:
    out = []
    for p in ckpt.list_checkpoints(loop.checkpoint_dir):
        try:
            m = ckpt.manifest(p)
            sizes = {f.name: f.stat().st_size for f in Path(p).iterdir()}
        except (OSError, ckpt.CheckpointError):
            continue
        # NOTE: a file of another size than its manifest says (truncated) will not load: it
        # is recorded invalid (a resume that passed it over left it listed as valid); the
        # checksums are read when it is loaded, not at every chunk
        valid = all(sizes.get(name) == info.get("size") for name, info in m["files"].items())
        out.append({"path": str(p), "iteration": m["iteration"], "epoch": m.get("epoch", 0),
                    "size": sum(sizes.values()), "metrics": m.get("metrics") or {},
                    "valid": valid})
    return out


def picklable(make_loop) -> None:
    """A ``SweepError`` saying what to change if ``make_loop`` cannot be pickled for the
    workers (by reference where it is importable, else by value, as Dask does: a task graph
    is pickled for every engine, the in-process one too)."""
    import cloudpickle

    try:
        cloudpickle.dumps(make_loop)
    except Exception as e:  # noqa: BLE001 - pickling an arbitrary closure raises anything
        raise SweepError(f"make_loop cannot be sent to the workers ({type(e).__name__}: "
                         f"{str(e)[:200]}): keep what it refers to picklable (no locks, open "
                         "files, clients or generators in its closure or globals; define "
                         "those inside make_loop)") from None


def train(make_loop, spec: dict, send=None, should_stop=None) -> dict:
    """One chunk of trial ``spec["trial"]`` (``_train``); ``sys.exit`` anywhere in it (in
    make_loop, in training) fails the trial instead of ending the worker process."""
    try:
        return _train(make_loop, spec, send, should_stop)
    except SystemExit as e:
        raise TrialError(f"trial {spec['trial']} called sys.exit({e.code!r}); raise an "
                         "exception to fail a trial") from None
    except KeyboardInterrupt:
        # NOTE: the trial's own code raised it: a worker process ignores SIGINT and a worker
        # thread never receives one (Ctrl-C stops the sweep through its driver). Let through,
        # it hung the in-process engine and killed a local worker four times ("KilledWorker")
        raise TrialError(f"trial {spec['trial']} raised KeyboardInterrupt (in make_loop or "
                         "training; Ctrl-C at the driver stops the sweep); raise another "
                         "exception to fail a trial") from None
    except Exception as e:
        if _travels(e):
            raise
        # NOTE: an exception the worker cannot send back (it, or one it was raised from,
        # cannot be pickled, or not rebuilt from its args): Dask logged "Failed to
        # serialize" with its traceback, and the trial's error named a wrapper. Sent as a
        # TrialError with its message and traceback instead, raised outside this block so
        # that it carries no chain
        from ..runs.notes import traceback_tail

        err = TrialError(str(e) if isinstance(e, TrialError) else f"{type(e).__name__}: {e}")
        err.traceback_text = traceback_tail(e)
    raise err


def _travels(e: BaseException) -> bool:
    """Whether ``e`` survives the trip from a worker to the driver: it and the exceptions it
    was raised from or during (Dask sends the chain) pickled, then rebuilt (with tblib's
    reducers, which Dask installs, where it has: they rebuild an exception without calling
    its ``__init__``)."""
    import pickle

    seen = 0
    while e is not None and seen < 16:
        try:
            pickle.loads(pickle.dumps(e))  # noqa: S301 - our own bytes, made just now
        except Exception:  # noqa: BLE001 - pickling an arbitrary exception raises anything
            return False
        e = e.__cause__ or e.__context__
        seen += 1
    return True


def _train(make_loop, spec: dict, send=None, should_stop=None) -> dict:
    """One chunk of trial ``spec["trial"]`` (see the module's doc); returns its outcome
    (``"rung"``, ``"finished"``, ``"stopped"``, or ``"skipped"`` for a chunk that found the
    sweep stopping before it began and did nothing), the metric rows from ``spec["since"]`` on,
    the progress, the checkpoints on disk and the metric's last value."""
    send = send or _dask_send
    should_stop = should_stop or _dask_stop_check(spec)
    # NOTE: the driver queues a trial on a busy worker ahead of time; one that starts after a
    # stop or pause (or a takeover) leaves without touching its folder, and stays pending
    if should_stop():
        return {"outcome": "skipped", "loaded": None, "iteration": None, "epoch": None,
                "rows": [], "progress": {}, "checkpoints": [], "value": None}
    _record_start(spec)
    send({"sweep": spec["sweep"], "trial": spec["trial"], "attempt": spec["token"],
          "started": True, "worker": _worker_address(), "submission": spec.get("submission")})
    loop = build_loop(make_loop, spec)
    try:
        loaded = None
        if ckpt.list_checkpoints(loop.checkpoint_dir):
            loop.load_checkpoint()
            loaded = loop.status["iteration"]
        st, budget = loop.status, spec.get("budget")
        if st["finished"]:
            outcome = "finished"
        elif (budget is not None and st["epoch"] >= budget and not st["epoch_started"]
              and not _ending(loop)):
            # NOTE: the driver missed this chunk's end: report it again (a rung on the last
            # epoch is the trial's end: the loop below finishes it at once, as it did)
            outcome = "rung"
        else:
            loop.add(_Reporter(loop, spec, send, should_stop))
            try:
                loop.run()
                outcome = "finished"
            except _Halt as h:
                outcome = str(h)
        metric = spec["metric"]
        keys = {k for r in loop.log.rows for k in r}
        # NOTE: a trial stopped or paused before its first evaluation has no value yet. One
        # that reached a rung or its end without one fails, the sweep goes on (a sweep whose
        # first trials all fail this way stops with this message)
        if metric not in keys and outcome in ("rung", "finished"):
            known = sorted(k for k in keys if k not in ("iteration", "epoch"))
            raise TrialError(f"metric {metric!r} is not in the log of trial {spec['trial']} "
                             f"at epoch {st['epoch']} (it reports {known}); pass metric= one "
                             "of them, or report it by each rung and the end (e.g. "
                             "DataStreamMonitoring(valid_stream) reports valid_loss)")
        value = next((r[metric] for r in reversed(loop.log.rows) if metric in r), None)
        if value is not None and not is_metric(value) and outcome in ("rung", "finished"):
            raise TrialError(f"metric {metric!r} of trial {spec['trial']} is "
                             f"{type(value).__name__} {value!r:.40}, not a number: report it "
                             "as a float (a tensor's .item(), float(x))")
        since = spec.get("since") or 0
        rows = [[r["iteration"], r["epoch"], k, v] for r in loop.log.rows
                if r["iteration"] >= since for k, v in r.items()
                if k not in ("iteration", "epoch") and is_metric(v) and math.isfinite(v)]
        return {"outcome": outcome, "loaded": loaded, "iteration": st["iteration"],
                "epoch": st["epoch"], "rows": rows, "progress": loop.progress(),
                "checkpoints": _checkpoints(loop),
                "value": float(value) if is_metric(value) and math.isfinite(value) else None,
                "nonfinite": None if not is_metric(value) or math.isfinite(value)
                else f"{metric} was {float(value)} at epoch {st['epoch']} (diverged?)"}
    finally:
        loop.close()


def _worker():
    """The Dask worker running this code, or None (``train`` called directly)."""
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None


def _worker_address() -> str | None:
    w = _worker()
    return None if w is None else w.address


def _record_start(spec) -> None:
    """Record in the scheduler's metadata, and wait until it holds it, that this chunk began on
    this worker (``Driver._blameless`` reads it when the worker dies). The ``started`` message
    goes through the worker's batched stream, which a trial that kills its worker a moment
    later can take down with it. Off a Dask worker, or without the driver's key, nothing."""
    key, w = spec.get("began_key"), _worker()
    if key is None or w is None:
        return
    rec = {"worker": w.address, "token": spec.get("token"), "submission": spec.get("submission")}
    try:
        from distributed.utils import sync

        # NOTE: through the worker's own connection to the scheduler, not a client of its
        # own (get_client): that client outlived a driver killed with its scheduler and
        # logged its failed reconnections from every worker
        sync(w.loop, w.scheduler.set_metadata, keys=key, value=rec, callback_timeout=60)
    except Exception:  # noqa: BLE001 - the driver goes by the started message alone
        pass


def _dask_send(message) -> None:
    w = _worker()
    if w is not None:  # NOTE: off a worker nobody listens
        w.log_event(TOPIC, message)


#: what each sweep's driver last told this process: sweep id -> {"owner", "stop", "version"}
_TOLD: dict = {}


def tell(sweep: str, state: dict) -> None:
    """Keep ``state`` (from the driver, pushed to every worker with ``client.run``) if it is
    newer than what this process holds: the trials' checks read it without a round trip."""
    held = _TOLD.get(sweep)
    if held is None or state["version"] > held["version"]:
        _TOLD[sweep] = dict(state)


def _pid_namespace():
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def driver_identity() -> list:
    """This process as a driver: host name, pid namespace, pid and start time, which a
    worker compares with its own before it looks for the driver's process."""
    return [socket.gethostname(), _pid_namespace(), os.getpid(), start_time(os.getpid())]


def _driver_gone(spec) -> bool:
    """Whether the driver that submitted this chunk is gone: where the worker sees the
    driver's processes (same host and pid namespace), its process ended; elsewhere, this
    worker lost its scheduler (which lives and dies with a driver's own local cluster; a
    cluster's scheduler outlives a driver, and then only a takeover is noticed). Without this
    a chunk went on training for the scheduler's death timeout, into folders a resumed sweep
    may be training too."""
    ident = spec.get("driver")
    if isinstance(ident, list) and len(ident) == 4 and ident[1] is not None:
        host, ns, pid, start = ident
        if host == socket.gethostname() and ns == _pid_namespace():
            return not alive(pid, start)
    comm = getattr(getattr(_worker(), "batched_stream", None), "comm", None)
    return comm is not None and comm.closed()


def _task_released():
    """A check of whether the scheduler let go of the Dask task running this code (its
    driver's client disconnected, or released the future): the worker then marks the task
    ``cancelled``, but cannot stop a running thread. This is how a chunk on a cluster's
    scheduler, which outlives a driver, learns of the driver's death where no pid tells it
    (another host or pid namespace): within a second of it, where before it trained on until
    a resumed driver took the sweep over. Always False off a worker."""
    w = _worker()
    try:
        from distributed.worker import thread_state

        key = thread_state.key
        tasks = w.state.tasks
    except AttributeError:  # NOTE: off a worker (or a Dask without the worker's state)
        return lambda: False

    def released():
        ts = tasks.get(key)
        return ts is None or ts.state in ("cancelled", "released", "forgotten")
    return released


#: seconds a worker waits for the driver's state before it takes the driver for gone: the
#: scheduler answers in milliseconds when idle, but it runs in the driver's process, which a
#: loaded machine (a notebook's kernel training beside it, a test suite) may hold for seconds;
#: a check that gave up after 5 s stopped its trial as superseded, and the driver, finding it
#: skipped, queued it again (SKIPS_LIMIT of those in a row end the sweep)
STATE_WAIT = 60.0


def _read_state(variable):
    """The driver's state from its ``Variable``, waiting up to ``STATE_WAIT`` seconds while the
    scheduler is there but slow; None where it is gone (or the state never came)."""
    deadline = time.monotonic() + STATE_WAIT
    while True:
        try:
            return variable.get(timeout=5)
        except TimeoutError:
            if time.monotonic() >= deadline:
                return None
        except Exception:  # noqa: BLE001 - the scheduler is gone
            return None


def _dask_stop_check(spec):
    """Whether the sweep asked its trials to stop, or another driver took the sweep over (a
    task left running by a driver that died stops within ``REPORT_EVERY`` seconds).

    The driver pushes each change to every worker before it goes on (``Driver._tell_trials``),
    so a check is a dictionary lookup. A worker that joined after the last push (a restarted
    one) reads the driver's Dask ``Variable`` once, the same state, and holds it from then on.
    """
    from distributed import Variable

    try:
        variable = Variable(spec["state_variable"])
    except ValueError:
        return lambda: None
    released = _task_released()

    def check():
        if _driver_gone(spec) or released():
            return "superseded"  # NOTE: stop, writing nothing: a resume takes the trial on
        now = _TOLD.get(spec["sweep"])
        if now is None:
            state = _read_state(variable)
            if state is None:  # NOTE: the scheduler is gone, and so is the driver
                return "superseded"
            tell(spec["sweep"], state)
            now = _TOLD[spec["sweep"]]
        if now["owner"] != spec["token"]:
            return "superseded"
        return "stopped" if now["stop"] else None
    return check
