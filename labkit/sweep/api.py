"""``lk.sweep.run``, ``lk.sweep.resume`` and the ``Sweep`` handle (reads the run store)."""

from __future__ import annotations

import math
import os
import socket
import time
import warnings
from pathlib import Path

from .. import runs
from .._proc import LockHeld, hold_lock, let_go
from ..config import runs_dir
from ..errors import RunStoreError, TrainingError
from ..runs.sweeps import MODES, driver_alive, shown_status
from ..training.resume import factory_name, load_factory
from . import engine as E
from . import space as S
from .asha import ASHA
from .space import SweepError
from .trial import picklable


class UnknownSweep(SweepError, RunStoreError):
    """No sweep of that id in the store (a ``SweepError``, and the store's ``RunStoreError``
    with reason ``"not_found"``)."""

    reason = "not_found"


class FactoryGone(SweepError, TrainingError):
    """A sweep's recorded make_loop cannot be imported anymore (a ``SweepError``, and the
    ``TrainingError`` that ``lk.resume`` raises for a run's)."""


def _record(sweep_id) -> dict:
    """The store's record of ``sweep_id``, or an ``UnknownSweep`` naming where ids are."""
    if not isinstance(sweep_id, str) or not sweep_id.strip():
        raise UnknownSweep(f"a sweep id is a non-empty string (lk.sweep.list() and `labkit "
                           f"sweep ls` list them), got {sweep_id!r:.60}")
    try:
        return runs.store().get_sweep(sweep_id)
    except RunStoreError as e:
        if getattr(e, "reason", None) != "not_found":
            raise
        raise UnknownSweep(str(e)) from None


class Sweep:
    """A sweep in the run store: ``status``, ``table()``, ``best()``, ``stop()``."""

    def __init__(self, sweep_id: str):
        _record(sweep_id)  # a clear error for an unknown id
        self.id = sweep_id

    @property
    def record(self) -> dict:
        return runs.store().get_sweep(self.id)

    @property
    def status(self) -> str:
        """running, finished, stopped, failed, interrupted, or dead (running, driver gone)."""
        return shown_status(self.record, runs.DEAD_AFTER)

    @property
    def metric(self) -> str:
        return self.record["settings"]["metric"]

    def table(self, sort: str | None = None) -> list[dict]:
        """One row per trial: ``trial``, ``status`` (``dead``: running when its driver went),
        the metric's value, ``rung``, ``epoch``, ``iteration``, each parameter, ``run_id`` and
        ``error``; by trial number, or ``sort="value"`` (best first, trials without a value
        last)."""
        rec = self.record
        settings = rec["settings"]
        # NOTE: a trial "running" under a driver that is gone trains no more: shown dead, as
        # its run is (a resume continues it from its checkpoint)
        gone = shown_status(rec, runs.DEAD_AFTER) == "dead"
        store = runs.store()
        try:
            trials = store.trials(self.id)
        except RunStoreError as e:
            if e.reason != "damaged":
                raise
            # NOTE: which file, as every other damage error says
            raise runs.refuse(f"{store.path}: {e}", "damaged") from e.__cause__
        rows = [{"trial": t["number"],
                 "status": "dead" if gone and t["status"] == "running" else t["status"],
                 settings["metric"]: t["value"],
                 "rung": t["rung"], "epoch": t["epoch"], "iteration": t["iteration"],
                 **t["params"], "run_id": t["run_id"], "error": t["error"]}
                for t in trials]
        if sort == "value":
            sign = -1 if settings["mode"] == "max" else 1
            rows.sort(key=lambda r: (_missing(r[settings["metric"]]),
                                     sign * (r[settings["metric"]] or 0), r["trial"]))
        elif sort is not None:
            raise SweepError(f"table: sort must be None or 'value', got {sort!r}")
        return rows

    def best(self) -> dict:
        """The best finished trial's row (the best stopped one if none finished)."""
        metric = self.metric
        rows = self.table(sort="value")
        for status in ("finished", "stopped"):
            for r in rows:
                if r["status"] == status and not _missing(r[metric]):
                    return r
        failed = [r for r in rows if r["status"] == "failed"]
        why = f"; trial {failed[0]['trial']} failed: {failed[0]['error']}" if failed else ""
        raise SweepError(f"sweep {self.id} has no trial with a value of {metric!r} yet "
                         f"(status {self.status}){why}")

    def show(self, sort: str = "value", rows: int = 50, every: float = 1.0):
        """The sweep's view (parallel coordinates, the metric against each parameter, the best
        so far, the trials sorted by ``sort``), refreshed every ``every`` s while it runs:
        the last line of a cell, or ``display(sw.show())``. See ``labkit.sweep.view``."""
        from .view import SweepView

        return SweepView(self, sort=sort, rows=rows, every=every)

    def stop(self) -> None:
        """Ask the sweep's driver (in any process) to checkpoint its trials and stop;
        ``lk.sweep.resume(id)`` continues it."""
        runs.store().update_sweep(self.id, request="stop")

    def pause(self) -> None:
        """Ask the sweep's driver (in any process) to checkpoint its training trials and stop
        them, and to start nothing new, until ``resume()``; the driver stays (``lk.sweep.run``
        keeps blocking), the status is ``paused``."""
        status = self.status
        if status not in ("running", "paused"):
            raise SweepError(f"sweep {self.id} is {status}: no driver runs it to pause it")
        runs.store().update_sweep(self.id, request="pause")

    def resume(self, **kwargs) -> Sweep:
        """A paused sweep: ask its driver to continue (returns at once). A sweep whose driver
        has ended (stopped, killed, interrupted): ``lk.sweep.resume(id, **kwargs)`` here,
        which drives it in this process until it is done."""
        if self.status == "paused" and not kwargs:
            runs.store().update_sweep(self.id, request="resume")
            return self
        return resume(self.id, **kwargs)

    def __repr__(self):
        rec = self.record
        counts = ", ".join(f"{k} {v}" for k, v in sorted(rec["counts"].items()))
        return f"Sweep({self.id}, {rec['name']!r}, {self.status}; trials: {counts})"


def _missing(v) -> bool:
    return v is None or not math.isfinite(v)


def _check(metric, mode, early_stopping):
    if not isinstance(metric, str) or not metric:
        raise SweepError(f"metric must be the name of a value the loop reports (e.g. "
                         f"'valid_loss'), got {metric!r}")
    if mode not in MODES:
        raise SweepError(f"mode must be 'min' or 'max' (is a lower {metric} better?), got "
                         f"{mode!r}")
    if early_stopping is not None and not isinstance(early_stopping, ASHA):
        raise SweepError(f"early_stopping must be lk.sweep.ASHA(...) or None, got "
                         f"{early_stopping!r}")


def run(make_loop, space, trials=None, *, search="random", metric="valid_loss", mode="min",
        early_stopping=None, engine="local", workers=None, seed=0, name=None, directory=None,
        show=False, _factory=None, _hook=None) -> Sweep:
    """Train ``trials`` configurations of ``space`` with ``make_loop(config)`` on Dask and
    return the ``Sweep`` (the call blocks until every trial is done or the sweep is stopped).

    Each trial is a run in the store (``lk.runs``), linked to the sweep, with its parameters
    as config; ``metric`` (a value the loop logs) is read when each chunk ends, and ``mode``
    says whether lower or higher is better. ``early_stopping=lk.sweep.ASHA(grace, reduction)``
    stops the worse trials at rungs and continues the better ones from their checkpoints.
    ``engine``: ``"local"`` (``workers`` processes on this machine, default 2),
    ``"inprocess"`` (one worker thread here: tests, debugging), a
    scheduler address or a ``distributed.Client``. Killed at any point, the sweep continues
    with ``lk.sweep.resume(id)``. ``show=True``: in a notebook, the sweep's live view
    (``Sweep.show``) appears while it runs.
    """
    if not callable(make_loop):
        raise SweepError(f"make_loop must be a function config -> MainLoop, got "
                         f"{make_loop!r:.80}")
    dims = S.check(space)
    n = S.check_search(dims, search, trials)
    _check(metric, mode, early_stopping)
    if early_stopping is not None and n < early_stopping.reduction:
        warnings.warn(f"lk.sweep.run: {early_stopping} with {n} trial(s) promotes none (a rung "
                      f"keeps its best 1/{early_stopping.reduction}): every trial stops at "
                      f"epoch {early_stopping.grace}; run at least {early_stopping.reduction} "
                      "trials, or early_stopping=None", stacklevel=2)
    S.check_names(dims, metric)
    workers = E.default_workers(engine) if workers is None else workers
    E.check(engine, workers)  # NOTE: before anything is written to the store
    picklable(make_loop)  # NOTE: else Dask's "Could not serialize ...", at the first trial
    seed = S.check_seed(search, seed, n)  # NOTE: a NumPy integer as a Python int
    S.check_sizes(dims)
    if name is not None and not isinstance(name, str):
        raise SweepError(f"name must be a string (or None: make_loop's name), got {name!r:.60}")
    params = [S.draw(dims, search, i, seed) for i in range(n)]
    settings = {"trials": n, "search": search, "metric": metric, "mode": mode, "seed": seed,
                "early_stopping": early_stopping.to_json() if early_stopping else None,
                "engine": engine if isinstance(engine, str) else "client",
                "workers": workers, "directory": _directory(directory)}
    factory = _factory or factory_name(make_loop)
    name = name or getattr(make_loop, "__name__", "sweep")
    # NOTE: the engine first: a scheduler that does not answer leaves no sweep behind
    conn = E.connect(engine, workers)
    try:
        sid = runs.store().create_sweep(name, factory, S.to_json(dims), settings, params)
    except BaseException:
        conn[1]()
        raise
    if show:
        _show_live(sid)
    return _drive(sid, make_loop, conn, _hook)


def _directory(directory) -> str:
    """Where the trials' run folders go, checked: a path whose nearest existing part is a
    folder."""
    if directory is None:
        return str(Path(runs_dir()).resolve())
    if not isinstance(directory, (str, os.PathLike)) or not str(directory):
        raise SweepError(f"directory must be a folder's path (a string), got "
                         f"{directory!r:.60}")
    path = Path(os.fsdecode(directory)).expanduser().resolve()
    there = next(p for p in (path, *path.parents) if p.exists())
    if not there.is_dir():
        raise SweepError(f"directory={str(directory)!r:.80}: {there} is not a folder (the "
                         "trials' run folders go in it)")
    return str(path)


def _show_live(sid) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is not None:
        display(Sweep(sid).show())


def resume(sweep_id: str, make_loop=None, *, trials=None, engine=None, workers=None,
           _factory=None, _hook=None) -> Sweep:
    """Continue a sweep whose driver stopped (killed, interrupted, stopped): finished and
    failed trials stay as they are, interrupted ones continue from their newest checkpoint,
    the others start. ``trials=N``: grow the sweep to N trials (the search's next points:
    random and Sobol' draws continue their sequences; a grid has as many as it has).
    ``make_loop``: needed when the sweep's was not importable (a notebook cell), or no longer
    loads (moved, renamed); an importable one given here is recorded as the sweep's from then
    on, so that the next resume (and its trials' runs) find it without being told again;
    ``engine``/``workers``: default as the sweep was started. A sweep with nothing left to
    train (every trial done, no promotion due) is returned as it is, no cluster started.

    A *paused* sweep whose driver still runs is continued by that driver (``Sweep.resume``):
    this asks it to, and returns at once."""
    store = runs.store()
    rec = _record(sweep_id)
    alive = driver_alive(rec, runs.DEAD_AFTER) and rec.get("pid") != os.getpid()
    if rec["status"] == "paused" and alive and trials is None:
        store.update_sweep(sweep_id, request="resume")
        return Sweep(sweep_id)
    _not_driven(rec)
    settings = rec["settings"]
    if workers is None:  # NOTE: as it ran, unless on another engine: then that one's default
        workers = settings["workers"] if engine in (None, settings["engine"]) else \
            E.default_workers(engine)
    engine = settings["engine"] if engine is None else engine
    if engine == "client":
        raise SweepError(f"sweep {sweep_id} ran on a Client; pass engine=<a Client or an "
                         "address>")
    E.check(engine, workers)  # NOTE: before anything is written to the store
    grown = [] if trials is None else _grown(store, rec, trials)
    idle = not grown and _all_done(store, rec)
    given = make_loop
    if make_loop is not None or rec.get("factory") or not idle:
        # NOTE: a recorded make_loop that no longer loads is an error even with nothing left
        # to train: the sweep could not grow or continue
        make_loop = _make_loop(rec, make_loop)
        if not idle:
            picklable(make_loop)
    if idle:
        moved = _new_factory(rec, given, _factory)
        if moved:
            store.update_sweep(sweep_id, **moved)
        # NOTE: nothing to train: no cluster to start; a sweep whose driver ended just after
        # its last trial is marked finished, as that driver would have. A failed sweep whose
        # trials all failed stays failed, with its error
        failed = rec["status"] == "failed" and not any(
            t["status"] in ("finished", "stopped") for t in store.trials(sweep_id))
        if rec["status"] != "finished" and not failed:
            now = time.time()
            store.claim_sweep(sweep_id, _not_driven, status="finished", ended=now,
                              heartbeat=now, request=None, error=None)
        if _hook is not None:
            _hook("done", {"sweep": sweep_id})
        return Sweep(sweep_id)
    # NOTE: before the engine starts: a driver that still lives here keeps the sweep, even
    # one whose heartbeat is old (suspended, or stuck on a filesystem)
    held = hold(rec)
    # NOTE: the engine before the store: a scheduler that does not answer changes nothing
    try:
        conn = E.connect(engine, workers)
    except BaseException:
        let_go(held)
        raise
    try:
        # NOTE: checked again and taken in one transaction: of two drivers resuming at once,
        # one is refused; a refused resume adds nothing
        store.claim_sweep(sweep_id, _not_driven, status="running", pid=os.getpid(),
                          host=socket.gethostname(), heartbeat=time.time(), request=None,
                          ended=None, error=None, **_new_factory(rec, given, _factory))
        if grown:
            store.add_trials(sweep_id, grown)
        changes = {t["number"]: {"status": "interrupted"} for t in store.trials(sweep_id)
                   if t["status"] == "running"}
        if changes:
            store.update_trials(sweep_id, changes)
    except BaseException:  # NOTE: the lock and the engine go with it (a store error here)
        let_go(held)
        conn[1]()
        raise
    return _drive(sweep_id, make_loop, conn, _hook, held)


def _make_loop(rec, make_loop):
    """``make_loop`` given to ``resume``, or the sweep's own, imported again; a
    ``FactoryGone`` (before anything is written) if it cannot be."""
    sid = rec["id"]
    if make_loop is not None:
        if not callable(make_loop):
            raise SweepError(f"make_loop must be a function config -> MainLoop, got "
                             f"{make_loop!r:.80}")
        return make_loop
    if not rec.get("factory"):
        raise FactoryGone(f"sweep {sid}: its make_loop was not importable (defined in a "
                          f"notebook?); pass make_loop=<the function>: lk.sweep.resume({sid!r}, "
                          "make_loop=f)")
    try:
        fn = load_factory(rec["factory"])
    except (Exception, SystemExit) as e:  # NOTE: a script that no longer imports raises anything
        why = str(e) if isinstance(e, TrainingError) else f"{type(e).__name__}: {e}"
        raise FactoryGone(f"sweep {sid}: its make_loop {rec['factory']} cannot be loaded "
                          f"({why[:300]}); pass make_loop=<the function>: lk.sweep.resume("
                          f"{sid!r}, make_loop=f), or `labkit sweep resume {sid} --target "
                          "path/to/script.py:make_loop`") from None
    if not callable(fn):
        raise FactoryGone(f"sweep {sid}: {rec['factory']} is now {type(fn).__name__}, not a "
                          f"function; pass make_loop=<the function>")
    return fn


def _new_factory(rec, make_loop, target) -> dict:
    """``{"factory": name}`` where a ``make_loop`` given to ``resume`` is importable by a name
    other than the one recorded (``target``: the CLI's ``--target``), else ``{}``; a
    notebook's function (no name to import it by) leaves the recorded one as it is."""
    name = target or (factory_name(make_loop) if make_loop is not None else None)
    return {"factory": name} if name and name != rec.get("factory") else {}


def _all_done(store, rec) -> bool:
    """Whether every trial of the sweep is done: none pending, running or interrupted, and
    none that ASHA would promote."""
    trials = store.trials(rec["id"])
    if any(t["status"] in ("pending", "running", "interrupted") for t in trials):
        return False
    asha = ASHA.from_json(rec["settings"]["early_stopping"])
    rungs = {t["number"]: (t["status"], t["results"]) for t in trials if t["results"]}
    return asha is None or asha.next_promotion(rungs, rec["settings"]["mode"]) is None


def _not_driven(rec) -> None:
    """Refuse a sweep that a live driver (another process's) runs or holds paused."""
    alive = driver_alive(rec, runs.DEAD_AFTER) and rec.get("pid") != os.getpid()
    if rec["status"] in ("running", "paused") and alive:
        raise SweepError(f"sweep {rec['id']} is {rec['status']} (driver pid {rec['pid']} on "
                         f"{rec['host']}): stop it first (`labkit sweep stop {rec['id']}`)")


def _grown(store, rec, trials) -> list:
    """The search's next points, so that the sweep has ``trials`` trials."""
    settings, have = rec["settings"], len(store.trials(rec["id"]))
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < have:
        raise SweepError(f"resume: trials must be a whole number >= the sweep's {have} trials "
                         f"(the total to reach, not how many to add), got {trials!r}")
    dims = S.from_json(rec["space"])
    n = S.check_search(dims, settings["search"], trials)
    S.check_seed(settings["search"], settings["seed"], n)
    return [S.draw(dims, settings["search"], i, settings["seed"]) for i in range(have, n)]


def lock_path(rec) -> Path:
    """The file whose OS lock the driver of sweep record ``rec`` holds while it drives."""
    return Path(rec["settings"]["directory"]) / f".labkit-sweep-{rec['id']}.lock"


def hold(rec):
    """Take the driver's lock of sweep ``rec`` (see ``lock_path``): the open file, or None
    where the filesystem has no locks. A process that holds it drives the sweep, whatever
    its heartbeat says: a driver suspended (SIGSTOP, a laptop's sleep) or stuck past
    ``DEAD_AFTER`` showed ``dead``, a resume took the sweep, and the first driver, woken,
    drove it on beside the second (two trainers in each trial's folder). The lock goes with
    the process, killed or not, and a child it forks does not keep it."""
    try:
        return hold_lock(lock_path(rec))
    except LockHeld as e:
        beat = rec.get("heartbeat")
        age = (f"; its heartbeat is {time.time() - beat:,.0f} s old: suspended or stuck?"
               if type(beat) in (int, float) else "")
        where = ("this machine" if rec.get("host") in (None, socket.gethostname())
                 else f"{rec['host']} (a lock shared through the filesystem)")
        raise SweepError(f"sweep {rec['id']} is still driven by process {e.holder} on "
                         f"{where}{age}. Stop it (labkit sweep stop {rec['id']}, or kill "
                         f"{e.holder}), then resume it") from None
    except OSError:
        return None  # NOTE: no lock here (a filesystem without locks): the heartbeat decides


def _drive(sid, make_loop, conn, hook, held=None) -> Sweep:
    """Drive sweep ``sid`` on ``conn`` (``engine.connect``'s client and close, which this
    calls) until it ends, holding its driver's lock (``held``, or taken here)."""
    from .driver import Driver

    store = runs.store()
    client, close = conn
    status, error = "failed", None
    if held is None:
        try:
            held = hold(store.get_sweep(sid))
        except BaseException:
            close()
            raise
    try:
        try:
            rec = store.get_sweep(sid)
            dims = S.from_json(rec["space"])
            asha = ASHA.from_json(rec["settings"]["early_stopping"])
            if hook is not None:
                hook("start", {"sweep": sid, "name": rec["name"],
                               "trials": rec["settings"]["trials"]})
            driver = Driver(store, rec, make_loop, dims, asha, client, E.capacity(client),
                            hook)
            status = driver.run()
        finally:
            close()
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        try:
            store.update_sweep(sid, status=status, ended=time.time(), request=None,
                               error=error[:2000] if error else None)
        finally:
            let_go(held)
    return Sweep(sid)


def get(sweep_id: str) -> Sweep:
    """The sweep ``sweep_id`` (see ``list()`` for the ids)."""
    return Sweep(sweep_id)


def list() -> list[dict]:  # noqa: A001 - lk.sweep.list(), as lk.runs.list()
    """Every sweep in the store, newest first, with its trials counted by status (one whose
    row cannot be read: status ``"damaged"`` and ``"damaged"``, why)."""
    return runs.store().list_sweeps()
