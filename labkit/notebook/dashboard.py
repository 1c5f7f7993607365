"""The Dashboard: the live cockpit of a training loop or a stored run, in a notebook.

It is an output of type ``application/vnd.labkit.dashboard+json`` that labkit's JupyterLab
extension draws (``extensions/labkit-runs/src/cockpit.ts``). The cockpit reads the run store
through the server's REST API — not through the kernel — so the training thread only appends
to its log (the recorder writes it to the store at most ``max_rate`` times a second), and
Pause, Resume, Stop and Checkpoint travel as commands through the store: they act while a cell
blocks in ``loop.wait()`` and for a run in another process.

The output also carries a static copy (HTML with SVG plots, ``_static.py``), written again at
the end of training and by ``snapshot()``: a notebook reopened without a kernel, nbconvert and
GitHub show it.
"""

from __future__ import annotations

import math
import time
import uuid
import warnings

from .. import runs
from ..errors import LabkitError
from ..runs.downsample import minmax_indices
from ..training import Extension, MainLoop
from ..training.log import fits_float, is_metric
from . import _static

MIME_TYPE = "application/vnd.labkit.dashboard+json"
#: the points per metric the output's snapshot holds (min/max-downsampled)
SNAPSHOT_POINTS = 1000
group_of = _static.group_of


class _Feed(Extension):
    """Writes the Dashboard's static copy again when training ends (never checkpointed)."""

    every = None
    priority = -200
    transient = True

    def __init__(self, dashboard):
        super().__init__(name=f"Dashboard-{id(dashboard):x}")
        self.dashboard = dashboard

    def _final(self, loop, status):
        # NOTE: the display must never change how training ends: its errors are only told
        try:
            loop.recorder.mirror(loop.progress, force=True, wait=True)  # the store has it all
            self.dashboard._final_status = (status, loop.status["iteration"])
            self.dashboard.snapshot()
        except Exception as e:  # noqa: BLE001
            warnings.warn(f"Dashboard: the static copy was not written ({type(e).__name__}: "
                          f"{e})", stacklevel=2)

    def after_training(self, loop):
        self._final(loop, "finished")

    def after_budget(self, loop):  # run(max_iterations=N) spent its budget: paused
        self._final(loop, "paused")

    def on_interrupt(self, loop):
        self._final(loop, "interrupted")

    def on_error(self, loop):
        self._final(loop, "failed")


class Snapshot:
    """A static copy of a Dashboard (what ``Dashboard.snapshot()`` returns): displays as HTML
    with SVG plots; ``html`` is the text."""

    def __init__(self, html: str, text: str):
        self.html, self._text = html, text

    def _repr_html_(self):
        return self.html

    def __repr__(self):
        return self._text


def _json_safe(v):
    """``v`` with non-finite floats as None (JSON has none; the bundle was invalid JSON)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


class Dashboard:
    """``Dashboard(loop)`` or ``Dashboard(run_id)``: progress, whole-run ETA, live plots of the
    metrics (training and validation on one figure per metric, loss first; log-y, smoothing,
    x as iteration, epoch or wall time), the newest records, and **Pause**, **Resume**,
    **Stop** and **Checkpoint** buttons that work while a cell is busy. Display it (or make it
    a cell's value; ``loop.show()`` does both).

    ``metrics``: the keys or groups to plot (default all); ``max_rate``: plot updates a second;
    ``tail``: records in the table. ``pause()``, ``resume()``, ``stop()`` and ``checkpoint()``
    do what the buttons do, from Python, for a loop here or a run training elsewhere.
    """

    def __init__(self, source, metrics=None, max_rate: float = 4.0, tail: int = 5):
        if isinstance(max_rate, bool) or not isinstance(max_rate, (int, float)) \
                or not 0.1 <= max_rate <= 20:
            raise LabkitError(f"Dashboard: max_rate must be a number of updates a second from "
                              f"0.1 to 20, got {max_rate!r}")
        self.loop = source if isinstance(source, MainLoop) else None
        #: how training last ended, and at which iteration (stale once it trains on)
        self._final_status: tuple[str, int] | None = None
        if self.loop is not None:
            self.run_id = self.loop.ensure_run()  # the run exists (status "created") already
            if not self.loop.recorder.enabled:
                warnings.warn("Dashboard: this loop records no run store (store=False), so the "
                              "cockpit cannot follow it live; its plots appear when training "
                              "ends (or on dash.snapshot())", stacklevel=2)
            rec = self.loop.recorder
            rec.flush_every = min(rec.flush_every, 1.0 / max_rate)
            self._feed = self.loop.add(_Feed(self))
        else:
            self.run_id = str(source)
            if not runs.is_run_id(self.run_id):
                raise LabkitError(f"Dashboard: give a MainLoop or a run id, got "
                                  f"{str(source)[:60]!r}")
            runs.get(self.run_id)  # RunStoreError now if there is no such run
            self._feed = None
        # NOTE: one name as a string ("loss") was read as its letters
        self.metrics = None if metrics is None else [str(m) for m in (
            [metrics] if isinstance(metrics, str) else metrics)]
        self.max_rate, self.tail = float(max_rate), int(tail)
        self._display_ids: list[str] = []

    # -- what the notebook shows
    def _record(self) -> dict:
        try:
            return runs.get(self.run_id)
        except runs.RunStoreError:
            return {"id": self.run_id, "status": "unknown", "progress": {}}

    def _series(self) -> dict:
        """Every metric's points (min/max-downsampled to ``SNAPSHOT_POINTS``): from the store,
        or from the loop's log when it records no store."""
        if self.loop is not None and self.loop.recorder.store is None:
            out: dict = {}
            for it, ep, k, v in self.loop.log.cursor().read():
                if _static.plottable(k) and is_metric(v):  # what the store would keep
                    s = out.setdefault(k, {"iteration": [], "epoch": [], "time": [],
                                           "value": []})
                    s["iteration"].append(it)
                    s["epoch"].append(ep)
                    s["time"].append(None)
                    # NOTE: as the store keeps them: JSON has no NaN, a gap is null
                    f = float(v) if fits_float(v) else None
                    s["value"].append(f if f is not None and math.isfinite(f) else None)
            # NOTE: at most SNAPSHOT_POINTS a series, as the store's (20,000 iterations were
            # 1.5 MB in the notebook), picked as the store picks them
            for s in out.values():
                keep = minmax_indices(s["value"], SNAPSHOT_POINTS)
                if len(keep) < len(s["value"]):
                    for f in ("iteration", "epoch", "time", "value"):
                        s[f] = [s[f][i] for i in keep]
            return out
        try:
            data = runs.metrics(self.run_id, max_points=SNAPSHOT_POINTS)
        except runs.RunStoreError:
            return {}
        return {k: {f: list(m[f]) for f in ("iteration", "epoch", "time", "value")}
                for k, m in data.items()}

    def _status(self, rec: dict) -> tuple[str, str]:
        pr = rec.get("progress") or {}
        status = rec.get("status", "unknown")
        if self.loop is not None:
            st = self.loop.status
            ended = self._final_status
            status = ("finished" if st["finished"] else ended[0] if ended and
                      ended[1] == st["iteration"] else
                      "paused" if self.loop.paused and self.loop.running else
                      "running" if self.loop.running else status)
            pr = self.loop.progress()
        # NOTE: a stored progress of other shapes (a store edited by hand, another version)
        # is shown as far as it reads, not an AttributeError
        pr = pr if isinstance(pr, dict) else {}
        planned = pr.get("planned") if isinstance(pr.get("planned"), dict) else {}
        parts = [f"epoch {pr.get('epoch', 0)}" + (f"/{planned['epochs']}"
                                                   if planned.get("epochs") else ""),
                 f"iteration {pr.get('iteration', 0)}" + (f"/{planned['iterations']}" if
                                                          planned.get("iterations") else "")]
        if isinstance(pr.get("elapsed"), (int, float)):
            parts.append(f"elapsed {pr['elapsed']:.1f} s")
        last = pr.get("last") if isinstance(pr.get("last"), dict) else {}
        parts += [f"{k} {float(v):.4g}" for k, v in last.items()
                  if _static.plottable(k) and isinstance(v, (int, float))
                  and abs(v) <= 2 ** 1023][:6]
        return status, " · ".join(parts)

    def _bundle(self) -> dict:
        rec = self._record()
        series = self._series()
        status, info = self._status(rec)
        title = f"{rec.get('name') + ' · ' if rec.get('name') else ''}run {self.run_id}"
        run = {k: rec.get(k) for k in ("id", "name", "status", "progress")}
        run["status"] = status
        run["progress"] = _json_safe(run["progress"])  # NOTE: FinishAfter(seconds=inf)
        data = {"version": 1, "run_id": self.run_id, "metrics": self.metrics,
                "max_rate": self.max_rate, "tail": self.tail,
                "snapshot": {"run": run, "series": series, "time": time.time()}}
        static = _static.render(title, status, info, series, self.metrics, self.tail)
        return {MIME_TYPE: data, "text/html": static, "text/plain": self._text(status, info)}

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self._bundle()

    def _ipython_display_(self):
        from IPython.display import display

        did = uuid.uuid4().hex
        self._display_ids.append(did)
        display(self._bundle(), raw=True, display_id=did)

    def snapshot(self) -> Snapshot:
        """Write the static copy into every place this Dashboard is shown (what a notebook
        reopened without a kernel shows), and return it."""
        bundle = self._bundle()
        if self._display_ids:
            from IPython.display import update_display

            for did in self._display_ids:
                update_display(bundle, raw=True, display_id=did)
        return Snapshot(bundle["text/html"], bundle["text/plain"])

    def _text(self, status: str, info: str) -> str:
        return f"Dashboard(run {self.run_id}: {status}; {info})"

    def __repr__(self):
        return self._text(*self._status(self._record()))

    # -- controls
    def _send(self, command: str) -> str:
        rec = runs.send(self.run_id, command)
        return rec["result"] or f"{command} sent; the loop has not answered yet"

    def pause(self) -> str:
        """Pause after the current batch."""
        if self.loop is not None:
            if not self.loop.running:  # NOTE: it paused the next run, silently
                return "not training: nothing to pause"
            self.loop.pause()
            return "pausing after this batch"
        return self._send("pause")

    def resume(self) -> str:
        if self.loop is not None:
            self.loop.resume()
            return "resumed"
        return self._send("resume")

    def stop(self) -> str:
        if self.loop is not None:
            self.loop.stop("stopped from the dashboard")
            self.loop.resume()
            return "stopping after this batch"
        return self._send("stop")

    def checkpoint(self) -> str:
        if self.loop is not None:
            running = self.loop.running
            self.loop.request_checkpoint()
            if running:
                return "checkpoint after this batch"
            last = self.loop.last_checkpoint
            return f"checkpoint {last.name}" if last is not None else "no checkpoint written"
        return self._send("checkpoint")

    def close(self):
        """Detach from the loop (its output stays as it is)."""
        if self.loop is not None and self._feed in self.loop.extensions:
            self.loop.remove(self._feed)
