"""``lk.sweep.run``, ``lk.sweep.resume`` and the ``Sweep`` handle (reads the run store)."""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path

from .. import runs
from ..config import runs_dir
from ..runs.sweeps import MODES, driver_alive, shown_status
from ..training.resume import factory_name, load_factory
from . import engine as E
from . import space as S
from .asha import ASHA
from .space import SweepError


class Sweep:
    """A sweep in the run store: ``status``, ``table()``, ``best()``, ``stop()``."""

    def __init__(self, sweep_id: str):
        self.id = sweep_id
        runs.store().get_sweep(sweep_id)  # a clear error for an unknown id

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
        """One row per trial: ``trial``, ``status``, the metric's value, ``rung``, ``epoch``,
        ``iteration``, each parameter, ``run_id`` and ``error``; by trial number, or
        ``sort="value"`` (best first, trials without a value last)."""
        settings = self.record["settings"]
        rows = [{"trial": t["number"], "status": t["status"], settings["metric"]: t["value"],
                 "rung": t["rung"], "epoch": t["epoch"], "iteration": t["iteration"],
                 **t["params"], "run_id": t["run_id"], "error": t["error"]}
                for t in runs.store().trials(self.id)]
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
        early_stopping=None, engine="local", workers=2, seed=0, name=None, directory=None,
        show=False, _factory=None, _hook=None) -> Sweep:
    """Train ``trials`` configurations of ``space`` with ``make_loop(config)`` on Dask and
    return the ``Sweep`` (the call blocks until every trial is done or the sweep is stopped).

    Each trial is a run in the store (``lk.runs``), linked to the sweep, with its parameters
    as config; ``metric`` (a value the loop logs) is read when each chunk ends, and ``mode``
    says whether lower or higher is better. ``early_stopping=lk.sweep.ASHA(grace, reduction)``
    stops the worse trials at rungs and continues the better ones from their checkpoints.
    ``engine``: ``"local"`` (``workers`` processes on this machine), ``"inprocess"``, a
    scheduler address or a ``distributed.Client``. Killed at any point, the sweep continues
    with ``lk.sweep.resume(id)``. ``show=True``: in a notebook, the sweep's live view
    (``Sweep.show``) appears while it runs.
    """
    if not callable(make_loop):
        raise SweepError(f"make_loop must be a function config -> MainLoop, got {make_loop!r}")
    dims = S.check(space)
    n = S.check_search(dims, search, trials)
    _check(metric, mode, early_stopping)
    S.check_names(dims, metric)
    E.check(engine, workers)  # NOTE: before anything is written to the store
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SweepError(f"seed must be an integer >= 0, got {seed!r}")
    params = [S.draw(dims, search, i, seed) for i in range(n)]
    settings = {"trials": n, "search": search, "metric": metric, "mode": mode, "seed": seed,
                "early_stopping": early_stopping.to_json() if early_stopping else None,
                "engine": engine if isinstance(engine, str) else "client",
                "workers": workers, "directory": str(Path(directory or runs_dir()).resolve())}
    factory = _factory or factory_name(make_loop)
    name = name or getattr(make_loop, "__name__", "sweep")
    sid = runs.store().create_sweep(name, factory, S.to_json(dims), settings, params)
    if show:
        _show_live(sid)
    return _drive(sid, make_loop, engine, workers, _hook)


def _show_live(sid) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is not None:
        display(Sweep(sid).show())


def resume(sweep_id: str, make_loop=None, *, trials=None, engine=None, workers=None,
           _hook=None) -> Sweep:
    """Continue a sweep whose driver stopped (killed, interrupted, stopped): finished and
    failed trials stay as they are, interrupted ones continue from their newest checkpoint,
    the others start. ``trials=N``: grow the sweep to N trials (the search's next points:
    random and Sobol' draws continue their sequences; a grid has as many as it has).
    ``make_loop``: needed when the sweep's was not importable (a notebook cell);
    ``engine``/``workers``: default as the sweep was started.

    A *paused* sweep whose driver still runs is continued by that driver (``Sweep.resume``):
    this asks it to, and returns at once."""
    store = runs.store()
    rec = store.get_sweep(sweep_id)
    alive = driver_alive(rec, runs.DEAD_AFTER) and rec.get("pid") != os.getpid()
    if rec["status"] == "paused" and alive and trials is None:
        store.update_sweep(sweep_id, request="resume")
        return Sweep(sweep_id)
    _not_driven(rec)
    if make_loop is None:
        if not rec.get("factory"):
            raise SweepError(f"sweep {sweep_id}: its make_loop was not importable (defined in "
                             "a notebook?); pass make_loop=<the function>")
        make_loop = load_factory(rec["factory"])
    settings = rec["settings"]
    engine = settings["engine"] if engine is None else engine
    workers = settings["workers"] if workers is None else workers
    if engine == "client":
        raise SweepError(f"sweep {sweep_id} ran on a Client; pass engine=<a Client or an "
                         "address>")
    E.check(engine, workers)  # NOTE: before anything is written to the store
    grown = [] if trials is None else _grown(store, rec, trials)
    # NOTE: checked again and taken in one transaction: of two drivers resuming at once, one
    # is refused; a refused resume adds nothing
    store.claim_sweep(sweep_id, _not_driven, status="running", pid=os.getpid(),
                      host=socket.gethostname(), heartbeat=time.time(), request=None,
                      ended=None, error=None)
    if grown:
        store.add_trials(sweep_id, grown)
    changes = {t["number"]: {"status": "interrupted"} for t in store.trials(sweep_id)
               if t["status"] == "running"}
    if changes:
        store.update_trials(sweep_id, changes)
    return _drive(sweep_id, make_loop, engine, workers, _hook)


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
    return [S.draw(dims, settings["search"], i, settings["seed"]) for i in range(have, n)]


def _drive(sid, make_loop, engine, workers, hook) -> Sweep:
    from .driver import Driver

    store = runs.store()
    rec = store.get_sweep(sid)
    dims = S.from_json(rec["space"])
    asha = ASHA.from_json(rec["settings"]["early_stopping"])
    status, error = "failed", None
    if hook is not None:
        hook("start", {"sweep": sid, "name": rec["name"], "trials": rec["settings"]["trials"]})
    try:
        client, close = E.connect(engine, workers)
        try:
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
        store.update_sweep(sid, status=status, ended=time.time(), request=None,
                           error=error[:2000] if error else None)
    return Sweep(sid)


def get(sweep_id: str) -> Sweep:
    """The sweep ``sweep_id`` (see ``list()`` for the ids)."""
    return Sweep(sweep_id)


def list() -> list[dict]:  # noqa: A001 - lk.sweep.list(), as lk.runs.list()
    """Every sweep in the store, newest first, with its trials counted by status (one whose
    row cannot be read: status ``"damaged"`` and ``"damaged"``, why)."""
    return runs.store().list_sweeps()
