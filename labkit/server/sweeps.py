"""The sweep handlers (``GET sweeps``, ``GET sweeps/ID``, ``POST sweeps/ID/stop|pause|resume``),
paired with ``extensions/labkit-runs/src/sweeps.ts``: what the Runs sidebar's Sweeps section shows.

Sweep ids have the form of run ids and are checked the same way; a sweep's ``settings`` leave
without its ``directory`` (no path crosses the API) and trial errors are scrubbed.
"""

from __future__ import annotations

import math

import tornado.ioloop

from .. import runs
from ..errors import RunStoreError
from ..runs import DEAD_AFTER, is_run_id
from ..runs import sweeps as S
from ..runs.checks import refuse
from .handlers import BadRequest, Base, _reader, endpoint, scrub

#: the most sweeps one ``GET sweeps`` answer lists (newest first)
MAX_SWEEPS = 200
#: the most trials one ``GET sweeps/ID`` answer holds (by trial number; ``total`` says all)
MAX_TRIALS = 10_000
#: the settings a sweep shows (its ``directory`` stays on the server)
SETTINGS = ("trials", "search", "metric", "mode", "seed", "early_stopping", "engine", "workers")


def sweep_or_404(sweep_id: str) -> dict:
    if not is_run_id(sweep_id):
        raise BadRequest(f"not a sweep id: {sweep_id[:40]!r}")
    try:
        return runs.store().get_sweep(sweep_id)
    except RunStoreError as e:
        if getattr(e, "reason", None) == "not_found":
            raise BadRequest(f"no sweep {sweep_id}", 404) from None
        raise


def shown_status(rec: dict) -> str:
    """``sweeps.shown_status``, with a heartbeat that is not a number (a damaged row) a 503
    naming it, not a 500."""
    beat = rec.get("heartbeat")
    if beat is not None and (isinstance(beat, bool) or not isinstance(beat, (int, float))):
        raise refuse(f"sweep {rec['id']!r} cannot be read (its heartbeat is not a number): "
                     "the run store is damaged there", "damaged")
    return S.shown_status(rec, DEAD_AFTER)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def public_trial(t: dict) -> dict:
    return {"trial": t["number"], "status": t["status"], "params": t["params"],
            "value": t["value"], "run_id": t["run_id"] if is_run_id(t["run_id"]) else None,
            "rung": t["rung"], "epoch": t["epoch"], "iteration": t["iteration"],
            "error": scrub(t["error"]) if t["error"] else None}


class Sweeps(Base):
    """``GET sweeps?limit=50``: the newest sweeps, each ``{id, name, status, counts, trials,
    done, best, metric, mode, created, error}`` (``status`` ``dead``: running, but its driver
    is gone), and ``total``. A sweep whose row cannot be read is listed with status
    ``damaged`` and ``damaged`` (why; ``sweeps/ID`` answers 503), not a 503 for the list."""

    @endpoint
    def get(self):
        limit = self.int_query("limit", 1, MAX_SWEEPS) or 50
        body = runs.store().sweep_summaries(limit)
        body["sweeps"] = [{**s, "error": scrub(s["error"]) if s["error"] else None,
                           **({"damaged": scrub(s["damaged"])} if "damaged" in s else {})}
                          for s in body["sweeps"] if is_run_id(s["id"])]
        self.write_json(body)


class Sweep(Base):
    """``GET sweeps/ID?limit=&best=``: the sweep's settings and trials (``trial, status,
    params, value, run_id, rung, epoch, iteration, error``), by trial number; ``best=N``: the
    ``N`` best trials that have a run, best first by the sweep's metric and mode (what the
    sidebar's Compare sends to the compare page, without the other trials)."""

    @endpoint
    async def get(self, sweep_id):
        rec = sweep_or_404(sweep_id)
        limit = self.int_query("limit", 1, MAX_TRIALS) or MAX_TRIALS
        best = self.int_query("best", 1, MAX_TRIALS)
        # NOTE: read and sorted off the event loop (100,000 trials: about 1 s, which stalled
        # every other request of the server; the sidebar polls an open sweep every 2 s)
        total, trials = await tornado.ioloop.IOLoop.current().run_in_executor(
            _reader(), lambda: _trials(rec, sweep_id, limit, best))
        self.write_json({
            "id": rec["id"], "name": rec["name"], "status": shown_status(rec),
            "created": rec["created"], "started": rec["started"], "ended": rec["ended"],
            "counts": rec["counts"], "request": rec["request"],
            "error": scrub(rec["error"]) if rec["error"] else None,
            "settings": {k: rec["settings"].get(k) for k in SETTINGS},
            "total": total, "trials": trials})


def _trials(rec, sweep_id, limit, best):
    """(how many trials, the ``limit`` to show: by number, or the ``best`` best first)."""
    total = sum(rec["counts"].values())
    if best is None:  # NOTE: only the rows shown are read (100,000 trials: 1.1 s for 200)
        return total, [public_trial(t) for t in runs.store().trials(sweep_id, limit)]
    sign = -1 if rec["settings"].get("mode") == "max" else 1
    trials = sorted((t for t in runs.store().trials(sweep_id) if is_run_id(t["run_id"])),
                    key=lambda t: (not _finite(t["value"]),
                                   sign * t["value"] if _finite(t["value"]) else 0, t["number"]))
    return total, [public_trial(t) for t in trials[:min(limit, best)]]


class SweepRequest(Base):
    """``POST sweeps/ID/stop|pause|resume``: ask the sweep's driver (in any process), as
    ``Sweep.stop()``, ``pause()`` and ``resume()`` and ``labkit sweep stop|pause|resume`` do
    (202). stop: its trials checkpoint and stop, the driver ends; pause: the same, but the
    driver waits; resume: a paused driver continues. 409 when no driver runs it in a state that
    takes the request (ended, or dead: ``lk.sweep.resume`` continues it)."""

    @endpoint
    def post(self, sweep_id, request):
        rec = sweep_or_404(sweep_id)
        self.body_object(())
        status = shown_status(rec)
        if status not in S.REQUEST_FROM[request]:
            raise BadRequest(f"sweep {sweep_id} is {status}: no driver runs it to {request} it"
                             + (" (lk.sweep.resume continues it)" if status == "dead" else ""),
                             409)
        runs.store().update_sweep(sweep_id, request=request)
        self.write_json({"id": sweep_id, "request": request}, 202)


class BadSweep(Base):
    """Anything under sweeps/ that is not a sweep id or one of its endpoints is refused."""

    @endpoint
    def get(self, what, rest=None):
        if is_run_id(what):
            raise BadRequest(f"no such endpoint: sweeps/{what}{(rest or '')[:40]}", 404)
        raise BadRequest(f"not a sweep id: {what[:40]!r}")

    delete = post = put = patch = get
