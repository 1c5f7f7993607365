"""The sweep's view in a notebook (``sw.show()``): self-contained HTML with inline SVG, read
from the run store and refreshed while the sweep runs.

What it shows: the status and the best trial; parallel coordinates (one line per trial with a
value, from each parameter's axis to the metric's, coloured by the metric); the metric against
each parameter; the best value so far against time; and the trials as a table, sorted by
``sort`` (the metric, best first, by default; ``view.sort("lr")`` re-sorts). It is plain HTML
(no script), so it also reads in nbconvert and on GitHub, and a sweep in another process shows
as well as one in this one: the view only reads the store. Every name and value is escaped.
In JupyterLab, the labkit extension makes it act: its Pause, Resume and Stop buttons ask the
sweep's driver (as ``sw.pause()`` etc.), and a click on a trial's row opens its run page.

Large sweeps are drawn downsampled, and say so: at most ``LINES`` lines (the best tenth of
them, the rest spread evenly over the trials) and ``ROWS`` table rows.
"""

from __future__ import annotations

import math
import threading

from ..runs.html import esc, lerp, unit
from ..runs.ids import is_run_id

#: the most trials drawn as lines and dots (the best first, then an even spread of the rest)
LINES = 1000
#: the shortest refresh period of a live view, in seconds (each refresh reads the store)
MIN_EVERY = 0.1
#: table rows shown unless ``rows=``
ROWS = 50
CELL = 'style="padding:1px 8px;text-align:right"'
# NOTE: worst -> best, from viridis' blue (its 0.25) to its yellow end: its dark purple end was
# nearly invisible on JupyterLab's dark theme
_LOW, _HIGH = (59, 82, 139), (253, 231, 37)
_STATUS_COLOR = {"finished": "#2ca02c", "stopped": "#ff7f0e", "running": "#1f77b4",
                 "failed": "#d62728", "interrupted": "#9467bd", "pending": "#7f7f7f"}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return esc(v)
    if isinstance(v, int):
        return str(v)
    if v == 0:
        return "0"
    return f"{v:.2e}" if abs(v) >= 1e5 or abs(v) < 1e-3 else f"{v:.4g}"


def _color(t: float) -> str:
    r, g, b = (round(lo + (hi - lo) * t) for lo, hi in zip(_LOW, _HIGH))
    return f"#{r:02x}{g:02x}{b:02x}"


class _Axis:
    """One axis: numbers on a linear (or log, for loguniform) scale; anything else placed as
    categories in the order first seen."""

    def __init__(self, name, values, log=False):
        self.name = name
        nums = [v for v in values if _finite(v)]
        self.numeric = len(nums) == len([v for v in values if v is not None])
        self.log = log and self.numeric and nums and min(nums) > 0
        if self.numeric:
            tv = [math.log10(v) if self.log else v for v in nums] or [0.0]
            self.lo, self.hi = min(tv), max(tv)
            if self.hi == self.lo:
                self.lo, self.hi = self.lo - 0.5, self.hi + 0.5
        else:
            self.cats: dict = {}
            for v in values:
                self.cats.setdefault(_key(v), len(self.cats))

    def pos(self, v):
        """Where ``v`` sits on the axis, 0 (bottom) to 1 (top); None when it cannot be drawn."""
        if self.numeric:
            if not _finite(v) or (self.log and v <= 0):
                return None
            return unit(math.log10(v) if self.log else v, self.lo, self.hi)
        n = len(self.cats)
        return 0.5 if n == 1 else self.cats.get(_key(v), 0) / (n - 1)

    def labels(self):
        if self.numeric:
            out = []
            for t in (0.0, 0.5, 1.0):
                x = lerp(t, self.lo, self.hi)
                out.append((t, _fmt(_pow10(x) if self.log else x)))
            return out
        n = len(self.cats)
        step = max(1, n // 8)
        return [(0.5 if n == 1 else i / (n - 1), esc(k, 14))
                for k, i in list(self.cats.items())[::step]]


def _pow10(x: float) -> float:
    try:
        return 10 ** x
    except OverflowError:  # NOTE: an axis widened past 1e308 (one value near the largest)
        return math.inf


def _key(v) -> str:
    return v if isinstance(v, str) else repr(v)


def _sample(rows, metric, mode):
    """At most ``LINES`` rows with a value: the best tenth of them, then an even spread."""
    valued = [r for r in rows if _finite(r[metric])]
    if len(valued) <= LINES:
        return valued, len(valued)
    ranked = sorted(valued, key=lambda r: r[metric], reverse=mode == "max")
    best = ranked[:LINES // 10]
    rest = ranked[LINES // 10:]
    step = len(rest) / (LINES - len(best))
    return best + [rest[int(i * step)] for i in range(LINES - len(best))], len(valued)


def parallel(rows, params, metric, mode, axes) -> str:
    """Parallel coordinates: an axis per parameter, then the metric's."""
    w, h, top, bottom, left, right = 760, 230, 22, 34, 40, 70
    names = [*params, metric]
    gap = (w - left - right) / max(1, len(names) - 1)
    vals = [r[metric] for r in rows]
    lo, hi = (min(vals), max(vals)) if vals else (0, 1)

    def y(t):
        return top + (1 - t) * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" style="width:100%;'
           f'max-width:{w}px;font:10px sans-serif" role="img" aria-label="parallel coordinates'
           '">']
    drawn = sorted(rows, key=lambda r: r[metric], reverse=mode == "min")  # the best on top
    for r in drawn:
        pts = []
        for i, k in enumerate(names):
            p = axes[k].pos(r[k])
            if p is not None:
                pts.append(f"{left + i * gap:.1f},{y(p):.1f}")
        t = unit(r[metric], lo, hi)
        t = t if mode == "max" else 1 - t
        out.append(f'<polyline class="trial" data-trial="{r["trial"]}" points="{" ".join(pts)}" '
                   f'fill="none" stroke="{_color(t)}" stroke-opacity="0.7"/>')
    for i, k in enumerate(names):
        x = left + i * gap
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{h - bottom}" '
                   'stroke="currentColor" stroke-opacity="0.6"/>'
                   f'<text x="{x:.1f}" y="{h - bottom + 14}" text-anchor="middle" '
                   f'fill="currentColor" font-weight="bold">{esc(k, 20)}</text>')
        for t, label in axes[k].labels():
            out.append(f'<text x="{x + 3:.1f}" y="{y(t) + 3:.1f}" fill="currentColor" '
                       f'opacity="0.75">{label}</text>')
    out.append("</svg>")
    return "".join(out)


def scatter(rows, name, metric, axis_x, axis_y) -> str:
    """The metric against one parameter."""
    w, h, pad = 220, 150, 26
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" style="width:{w}px;'
           f'font:10px sans-serif" role="img" aria-label="{esc(metric)} against '
           f'{esc(name)}"><rect x="{pad}" y="4" width="{w - pad - 4}" '
           f'height="{h - pad - 4}" fill="none" stroke="currentColor" stroke-opacity="0.4"/>']
    for r in rows:
        px, py = axis_x.pos(r[name]), axis_y.pos(r[metric])
        if px is None or py is None:
            continue
        out.append(f'<circle class="point" cx="{pad + 4 + px * (w - pad - 12):.1f}" '
                   f'cy="{8 + (1 - py) * (h - pad - 12):.1f}" r="2" fill="#1f77b4" '
                   'fill-opacity="0.6"/>')
    out.append(f'<text x="{(w + pad) / 2}" y="{h - 8}" text-anchor="middle" '
               f'fill="currentColor">{esc(name, 30)}</text></svg>')
    return "".join(out)


def best_so_far(trials, metric, mode, started) -> str:
    """The best value among the trials done so far, against seconds since the sweep began."""
    done = sorted((t["updated"] or 0, t["value"]) for t in trials
                  if t["status"] in ("finished", "stopped") and _finite(t["value"]))
    w, h, left, pad = 380, 150, 48, 22
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" style="width:{w}px;'
            'font:10px sans-serif" role="img" aria-label="best so far">')
    if not done:
        return head + (f'<text x="{w / 2}" y="{h / 2}" text-anchor="middle" fill="currentColor" '
                       'opacity="0.6">no trial done yet</text></svg>')
    better = max if mode == "max" else min
    steps, best = [], None
    for when, v in done:
        nb = v if best is None else better(best, v)
        if nb != best:
            steps.append((when, nb))
            best = nb
    end = done[-1][0]
    t0 = min(started or steps[0][0], steps[0][0])
    x1 = max(end - t0, 1e-9)
    ys = [v for _, v in steps]
    lo, hi = min(ys), max(ys)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5

    def sx(t):
        return left + (t - t0) / x1 * (w - left - 8)

    def sy(v):
        return 6 + (1 - unit(v, lo, hi)) * (h - pad - 12)
    pts = []
    for i, (t, v) in enumerate(steps):
        if i:
            pts.append(f"{sx(t):.1f},{sy(steps[i - 1][1]):.1f}")
        pts.append(f"{sx(t):.1f},{sy(v):.1f}")
    pts.append(f"{sx(end):.1f},{sy(steps[-1][1]):.1f}")
    # NOTE: a dot per improvement: one done trial is a point, not an invisible line
    dots = "".join(f'<circle cx="{sx(t):.1f}" cy="{sy(v):.1f}" r="2.5" fill="#2ca02c"/>'
                   for t, v in steps)
    frame = (f'<rect x="{left}" y="2" width="{w - left - 4}" height="{h - pad - 4}" '
             'fill="none" stroke="currentColor" stroke-opacity="0.3"/>')
    return head + frame + dots + (
        f'<polyline class="best" points="{" ".join(pts)}" fill="none" stroke="#2ca02c" '
        f'stroke-width="2"/><text x="{left - 4}" y="{sy(hi):.1f}" text-anchor="end" '
        f'fill="currentColor">{_fmt(hi)}</text><text x="{left - 4}" y="{sy(lo) + 8:.1f}" '
        f'text-anchor="end" fill="currentColor">{_fmt(lo)}</text><text x="{(w + left) / 2}" '
        f'y="{h - 6}" text-anchor="middle" fill="currentColor">seconds ({len(done)} done, '
        f'best {esc(metric)} {_fmt(steps[-1][1])})</text></svg>')


def sort_rows(rows, sort, metric, mode) -> list[dict]:
    """``sort``: "value" (best first, no value last), or a column (ascending, blanks last)."""
    if sort == "value":
        sign = -1 if mode == "max" else 1
        return sorted(rows, key=lambda r: (not _finite(r[metric]),
                                           sign * r[metric] if _finite(r[metric]) else 0,
                                           r["trial"]))
    return sorted(rows, key=lambda r: (r.get(sort) is None, not _finite(r.get(sort)),
                                       r.get(sort) if _finite(r.get(sort)) else
                                       _key(r.get(sort)), r["trial"]))


def table(rows, columns, sort, limit) -> str:
    cell = CELL
    head = "".join(f"<th {cell}>{esc(c)}{' ▼' if c == sort else ''}</th>"
                   for c in columns)
    body = []
    for r in rows[:limit]:
        tds = []
        for c in columns:
            v = r.get(c)
            if c == "status":
                tds.append(f'<td {cell}><span style="color:{_STATUS_COLOR.get(v, "inherit")}">'
                           f"{esc(str(v))}</span></td>")
            else:
                tds.append(f"<td {cell}>{_fmt(v)}</td>")
        run = r.get("_run")
        # NOTE: data-labkit-press: what a press does, so that a click across the view's
        # refresh still lands (extensions/labkit-runs/src/clicks.ts)
        link = (f' data-run-id="{esc(run)}" data-labkit-press="run {esc(run)}" '
                f'title="open run {esc(run)}" style="cursor:pointer"' if is_run_id(run) else "")
        body.append(f'<tr class="trial-row" data-trial="{r["trial"]}"{link}>{"".join(tds)}</tr>')
    more = (f'<div style="opacity:0.7">{len(rows) - limit} more trials (sw.table() has them '
            "all)</div>" if len(rows) > limit else "")
    return (f'<table style="border-collapse:collapse;font-size:11px;font-variant-numeric:'
            f'tabular-nums"><tr>{head}</tr>{"".join(body)}</table>{more}')


#: the view's buttons by the sweep's status: (request, label)
ACTIONS = {"running": (("pause", "Pause"), ("stop", "Stop")),
           "paused": (("resume", "Resume"), ("stop", "Stop"))}


def actions(status: str, sweep: str = "") -> str:
    """The buttons for a sweep in ``status``. In JupyterLab the labkit extension sends their
    request (``POST sweeps/ID/<request>``, as the Runs sidebar's buttons) and opens a trial's
    run page when its table row is clicked; elsewhere they do nothing (``sw.pause()`` etc.)."""
    return "".join(
        f' <button class="labkit-sweep-view-action" data-labkit-request="{req}" '
        f'data-labkit-press="{esc(sweep)} {req}" '
        f'title="{label} the sweep (needs the labkit JupyterLab extension; else sw.{req}())" '
        f'style="font-size:11px;padding:0 6px;cursor:pointer">{label}</button>'
        for req, label in ACTIONS.get(status, ()))


def render(record: dict, trials: list[dict], sort: str = "value", rows: int = ROWS,
           status: str | None = None) -> str:
    """The whole view for a sweep's store record and its trials (``store.trials``)."""
    from .space import from_json

    st = record["settings"]
    metric, mode = st["metric"], st["mode"]
    dims = from_json(record["space"])
    params = [k for k, d in dims.items() if d.kind != "value"]
    table_rows = [{"trial": t["number"], "status": t["status"], metric: t["value"],
                   "rung": t["rung"], "epoch": t["epoch"], **t["params"], "_run": t["run_id"]}
                  for t in trials]
    columns = ["trial", "status", metric, "rung", "epoch", *dims]
    if sort != "value" and sort not in columns:
        from .space import SweepError

        raise SweepError(f"show: sort must be 'value' or a column ({', '.join(columns)}), "
                         f"got {sort!r}")
    drawn, valued = _sample(table_rows, metric, mode)
    axes = {k: _Axis(k, [r[k] for r in drawn], log=dims[k].kind == "loguniform")
            for k in params}
    axes[metric] = _Axis(metric, [r[metric] for r in drawn])
    counts: dict = {}
    for t in trials:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    ordered = sort_rows(table_rows, sort, metric, mode)
    best = next((r for r in ordered if r["status"] in ("finished", "stopped")
                 and _finite(r[metric])), None) if sort == "value" else \
        next((r for r in sort_rows(table_rows, "value", metric, mode)
              if r["status"] in ("finished", "stopped") and _finite(r[metric])), None)
    best_text = (f"best: trial {best['trial']}, {esc(metric)} {_fmt(best[metric])} "
                 f"({', '.join(f'{esc(k)}={_fmt(best[k])}' for k in params)})"
                 if best else "best: none yet")
    note = (f" · lines: {len(drawn)} of {valued} trials (the best tenth and an even spread)"
            if len(drawn) < valued else "")
    scatters = "".join(scatter(drawn, k, metric, axes[k], axes[metric]) for k in params)
    status = status or record["status"]
    return (
        f'<div class="labkit-sweep-view" data-sweep-id="{esc(record["id"])}" '
        f'style="color:inherit">'
        f"<div><b>sweep {esc(record['name'])}</b> · {esc(record['id'])}"
        f" · <span>{esc(status)}</span>{actions(status, record['id'])} · "
        + ", ".join(f"{esc(k)} {v}" for k, v in sorted(counts.items()))
        + f" of {len(trials)}</div><div>{best_text}{note}</div>"
        f"<div>{parallel(drawn, params, metric, mode, axes)}</div>"
        f'<div style="display:flex;flex-wrap:wrap;gap:8px">'
        f"{best_so_far(trials, metric, mode, record.get('started'))}{scatters}</div>"
        f"{table(ordered, columns, sort, rows)}</div>")


class SweepView:
    """``sw.show()``: the sweep's view, refreshed every ``every`` seconds while it runs (the
    last line of a cell, or ``display(sw.show())``); ``sort(column)`` re-sorts the table,
    ``close()`` stops refreshing. Plain HTML: it reads in any viewer."""

    def __init__(self, sweep, sort="value", rows=ROWS, every=1.0):
        from .space import SweepError

        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise SweepError(f"show: rows must be an integer >= 1 (table rows shown), got "
                             f"{rows!r:.40}")
        if isinstance(every, bool) or not isinstance(every, (int, float)) or \
                not MIN_EVERY <= every < math.inf:
            raise SweepError(f"show: every must be a number of seconds >= {MIN_EVERY} (between "
                             f"two refreshes), got {every!r:.40}")
        self.sweep, self._sort, self.rows, self.every = sweep, sort, rows, every
        self._handle = None
        self._closed = threading.Event()
        self._thread = None
        self._last = None
        self.html()  # a bad sort fails here, not in the thread

    def html(self) -> str:
        from .. import runs

        return render(self.sweep.record, runs.store().trials(self.sweep.id), self._sort,
                      self.rows, status=self.sweep.status)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.html(), "text/plain": repr(self.sweep)}

    def _ipython_display_(self):
        from IPython.display import display

        self._handle = display(self._repr_mimebundle_(), raw=True, display_id=True)
        self.start()

    def sort(self, column: str) -> SweepView:
        """Sort the table by ``column`` ("value": the metric, best first)."""
        old, self._sort = self._sort, column
        try:
            self.html()
        except Exception:
            self._sort = old
            raise
        self.refresh(force=True)
        return self

    def refresh(self, force=False) -> bool:
        """Render again if a trial or the sweep changed; whether it did."""
        from .. import runs

        trials = runs.store().trials(self.sweep.id)
        stamp = (self.sweep.status, max((t["updated"] or 0 for t in trials), default=0),
                 len(trials))
        if stamp == self._last and not force:
            return False
        self._last = stamp
        if self._handle is not None:
            self._handle.update(self._repr_mimebundle_(), raw=True)
        return True

    def start(self, handle=None) -> None:
        """Refresh ``handle`` (the display, by default) from a thread until the sweep stops
        running or ``close()``."""
        self._handle = handle or self._handle
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._loop, name="labkit-sweep-view",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._closed.is_set():
            running = self.sweep.status in ("running", "paused")  # NOTE: paused may resume
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a view must never take the kernel down
                return
            if not running:
                return  # NOTE: this refresh saw the final state
            self._closed.wait(self.every)

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __repr__(self):
        return f"SweepView({self.sweep!r})"
