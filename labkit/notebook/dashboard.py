"""The Dashboard: live progress, plots and controls for a training loop or a stored run."""

from __future__ import annotations

import html
import math
import threading
import time

from ..training import Extension, MainLoop
from . import _bokeh

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f"]
_SKIP = ("iteration", "epoch")


def _plottable(key, value) -> bool:
    return (key not in _SKIP and not key.startswith(("time", "best_"))
            and isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def group_of(key: str) -> str:
    """The figure a metric goes on: ``train_loss``, ``valid_loss`` and ``loss`` share one."""
    for prefix in ("train_", "valid_", "test_"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


class _Feed(Extension):
    """Forwards the loop's events to a Dashboard (never saved in checkpoints)."""

    every = None
    priority = -200
    transient = True

    def __init__(self, dashboard):
        super().__init__(name=f"Dashboard-{id(dashboard):x}")
        self.dashboard = dashboard

    def after_batch(self, loop):
        self.dashboard._update(loop)

    def after_epoch(self, loop):
        self.dashboard._update(loop)

    def after_training(self, loop):
        self.dashboard._update(loop, force=True)

    def on_interrupt(self, loop):
        self.dashboard._update(loop, force=True)

    def on_error(self, loop):
        self.dashboard._update(loop, force=True)

    def on_pause(self, loop):
        self.dashboard._update(loop, force=True)

    def on_unpause(self, loop):
        self.dashboard._update(loop, force=True)


def _widgets():
    _bokeh.require()
    import ipywidgets

    return ipywidgets


class Dashboard(_bokeh.WidgetRepr):
    """``Dashboard(loop)`` or ``Dashboard(run_id)``: progress, live plots of the metrics
    (training and validation on one figure per metric), the tail of the log, and **Pause**,
    **Resume**, **Stop** and **Checkpoint** buttons that work while ``loop.start()`` trains.

    Plots update in place through ``ColumnDataSource.stream``, at most ``max_rate`` times a
    second however fast batches are, keeping the newest ``max_points`` points per curve. For a
    run id the history comes from the run store (so a new kernel redraws the full curves), and
    a run still training elsewhere is followed by polling the store.
    """

    plots = True

    def __init__(self, source, metrics=None, max_rate: float = 4.0, max_points: int = 2000,
                 tail: int = 5, poll: float = 1.0):
        w = _widgets()
        from bokeh.models import ColumnDataSource  # noqa: F401 - fail early without bokeh

        self.loop = source if isinstance(source, MainLoop) else None
        if self.loop is not None:
            self.loop.ensure_run()  # the run exists (status "created") before it trains
        self.run_id = source.run_id if self.loop is not None else str(source)
        self.metrics = None if metrics is None else list(metrics)
        self.max_rate, self.max_points, self.tail = float(max_rate), int(max_points), int(tail)
        self.pushes = 0
        self._lock = threading.RLock()
        self._figures: dict = {}
        self._groups: dict[str, list[str]] = {}
        self._sources: dict = {}
        self._last_push = 0.0
        self._cursor = None  # a read cursor on the loop's log: each value is sent once
        self._rate = (time.perf_counter(), 0)
        self._last_step: dict[str, int] = {}
        self._stopped_polling = threading.Event()

        self.title = w.HTML()
        self.progress = w.IntProgress(min=0, max=1, value=0, layout=w.Layout(width="60%"))
        self.info = w.HTML()
        self.pause_button = w.Button(description="Pause", icon="pause")
        self.resume_button = w.Button(description="Resume", icon="play")
        self.stop_button = w.Button(description="Stop", icon="stop")
        self.checkpoint_button = w.Button(description="Checkpoint", icon="save")
        self.message = w.HTML()
        self.pause_button.on_click(lambda _: self.pause())
        self.resume_button.on_click(lambda _: self.resume())
        self.stop_button.on_click(lambda _: self.stop())
        self.checkpoint_button.on_click(lambda _: self.checkpoint())
        self.plots = w.VBox()
        self.log_tail = w.HTML()
        controls = w.HBox([self.pause_button, self.resume_button, self.stop_button,
                           self.checkpoint_button, self.message])
        self.widget = w.VBox([self.title, w.HBox([self.progress, self.info]), controls,
                              self.plots, self.log_tail])
        self.widget.add_class("labkit-dashboard")
        if self.loop is not None:
            self._feed = self.loop.add(_Feed(self))
            self._cursor = self.loop.log.cursor()
            self._load_history()
            self._update(self.loop, force=True)
        else:
            self._load_store()
            self._poller = threading.Thread(target=self._poll, args=(poll,), daemon=True,
                                            name="labkit-dashboard-poll")
            self._poller.start()

    # -- display
    def __repr__(self):
        st = self._status_text()
        last = ", ".join(f"{k} {v:.4g}" for k, v in self._last_values().items())
        return f"Dashboard(run {self.run_id}: {st}{'; ' + last if last else ''})"

    def _last_values(self) -> dict:
        out = {}
        for key, src in self._sources.items():
            ys = src.data["y"]
            if len(ys):
                out[key] = float(ys[-1])
        return out

    def _status_text(self) -> str:
        if self.loop is not None:
            loop = self.loop
            st = loop.status
            state = ("finished" if st["finished"] else
                     "paused" if loop.paused and loop.running else
                     "training" if loop.running else "idle")
            return f"{state}, epoch {st['epoch']}, iteration {st['iteration']}"
        from .. import runs

        try:
            rec = runs.get(self.run_id)
        except runs.RunStoreError:
            return "not in the run store"
        pr = rec["progress"] or {}
        return (f"{rec['status']}, epoch {pr.get('epoch', 0)}, iteration "
                f"{pr.get('iteration', 0)}")

    # -- controls
    def pause(self):
        if self.loop is not None:
            self.loop.pause()
            self._say("pausing after this batch")

    def resume(self):
        if self.loop is not None:
            self.loop.resume()
            self._say("resumed")

    def stop(self):
        if self.loop is not None:
            self.loop.stop("stopped from the dashboard")
            self.loop.resume()
            self._say("stopping after this batch")

    def checkpoint(self):
        if self.loop is None:
            return
        before = self.loop.last_checkpoint
        self.loop.request_checkpoint()
        if not self.loop.running:
            self._say(f"checkpoint {self.loop.last_checkpoint.name}")
        else:
            self._say("checkpoint after this batch")
            threading.Thread(target=self._await_checkpoint, args=(before,), daemon=True).start()

    def _await_checkpoint(self, before, timeout=600.0):
        t = time.monotonic()
        while self.loop.last_checkpoint == before and time.monotonic() - t < timeout:
            time.sleep(0.05)
        if self.loop.last_checkpoint != before:
            self._say(f"checkpoint {self.loop.last_checkpoint.name} written")

    def _say(self, text):
        self.message.value = f"<span class='labkit-message'>{html.escape(text)}</span>"
        self._refresh_controls()

    def _refresh_controls(self):
        loop = self.loop
        live = loop is not None and loop.running
        self.pause_button.disabled = not live or loop.paused
        self.resume_button.disabled = not live or not loop.paused
        self.stop_button.disabled = not live
        self.checkpoint_button.disabled = loop is None

    # -- data
    def _build_group(self, g, new_points):
        """(Re)build the figure of metric group ``g`` with all its curves: the points so far
        plus ``new_points`` (key: (xs, ys)).

        NOTE: a curve added to a figure already shown did not always reach the browser (seen in
        JupyterLab with jupyter_bokeh 4.1), so a new curve rebuilds its figure's widget; after
        that, points arrive by ``ColumnDataSource.stream``."""
        from bokeh.models import ColumnDataSource, HoverTool
        from bokeh.plotting import figure

        fig = figure(height=220, sizing_mode="stretch_width", title=g,
                     x_axis_label="iteration", tools="pan,wheel_zoom,box_zoom,reset,save")
        fig.add_tools(HoverTool(tooltips=[("metric", "$name"), ("iteration", "@x"),
                                          ("value", "@y{0.0000}")]))
        fig.toolbar.logo = None
        for i, key in enumerate(self._groups[g]):
            old = self._sources.get(key)
            xs, ys = (list(old.data["x"]), list(old.data["y"])) if old is not None else ([], [])
            more_x, more_y = new_points.get(key, ((), ()))
            n = self.max_points
            xs, ys = (xs + list(more_x))[-n:], (ys + list(more_y))[-n:]
            src = ColumnDataSource(data={"x": xs, "y": ys})
            color = PALETTE[i % len(PALETTE)]
            dense = key == g  # the per-batch curve: thin; epoch-level ones: lines with dots
            fig.line("x", "y", source=src, legend_label=key, color=color, name=key,
                     line_width=1 if dense else 2, alpha=0.6 if dense else 1.0)
            if not dense:
                fig.scatter("x", "y", source=src, color=color, size=5, name=key)
            self._sources[key] = src
        fig.legend.location = "top_right"
        fig.legend.click_policy = "hide"
        widget = _bokeh.model(fig, self._lock)
        children = list(self.plots.children)
        if g in self._figures:
            old_widget = self._figures[g][1]
            children[children.index(old_widget)] = widget
        else:
            children.append(widget)
        self._figures[g] = (fig, widget)
        self.plots.children = tuple(children)

    def _wanted(self, key) -> bool:
        return self.metrics is None or key in self.metrics or group_of(key) in self.metrics

    def _stream(self, points: dict) -> None:
        with self._lock:
            points = {k: v for k, v in points.items() if v[0] and self._wanted(k)}
            rebuild = set()
            for key in points:
                keys = self._groups.setdefault(group_of(key), [])
                if key not in keys:
                    keys.append(key)
                    rebuild.add(group_of(key))
            for g in rebuild:  # these figures get this push's points when they are built
                self._build_group(g, points)
            for key, (xs, ys) in points.items():
                if group_of(key) not in rebuild:
                    self._sources[key].stream({"x": xs, "y": ys}, rollover=self.max_points)
            self.pushes += 1

    def _load_history(self):
        """The whole log so far (read through the cursor, so nothing is sent twice)."""
        points = self._collect()
        # NOTE: long histories are thinned to max_points evenly (the newest point kept)
        for k, (xs, ys) in points.items():
            if len(xs) > self.max_points:
                step = len(xs) / self.max_points
                pick = sorted({min(len(xs) - 1, round(i * step)) for i in range(self.max_points)}
                              | {len(xs) - 1})
                points[k] = ([xs[i] for i in pick], [ys[i] for i in pick])
        self._stream(points)

    def _collect(self) -> dict:
        points: dict = {}
        for it, _, k, v in self._cursor.read():
            if _plottable(k, v):
                xs, ys = points.setdefault(k, ([], []))
                xs.append(it)
                ys.append(v)
        return points

    def _update(self, loop, force=False):
        now = time.perf_counter()
        if not force and now - self._last_push < 1.0 / self.max_rate:
            return
        self._last_push = now
        with self._lock:
            self._stream(self._collect())
            self._show_progress(loop, now)
            self._show_tail(loop.log.rows)
        self._refresh_controls()

    def _show_progress(self, loop, now):
        st = loop.status
        try:
            n = loop.stream.num_items(loop.stream.epoch) if loop.stream.indexed else None
        except Exception:  # noqa: BLE001 - a stream without a length
            n = None
        t0, it0 = self._rate
        rate = (st["iteration"] - it0) * max(loop.batch_size, 1) / max(now - t0, 1e-9)
        self._rate = (now, st["iteration"])
        if n:
            self.progress.max = n
            self.progress.value = min(st["epoch_iteration"], n)
        parts = [f"epoch {st['epoch'] + (0 if st['epoch_iteration'] == 0 else 1)}"]
        if n:
            parts.append(f"batch {st['epoch_iteration']}/{n}")
            if rate > 0 and loop.running and not loop.paused:
                eta = (n - st["epoch_iteration"]) * max(loop.batch_size, 1) / rate
                parts.append(f"ETA {eta:.0f} s")
        if rate > 0 and loop.running:
            parts.append(f"{rate:,.0f} samples/s")
        loss = loop.log.last("loss")
        if isinstance(loss, float):
            parts.append(f"loss {loss:.4g}")
        self.info.value = f"<span class='labkit-progress'>{' · '.join(parts)}</span>"
        self._show_title()

    def _show_title(self):
        self.title.value = (f"<b>run {html.escape(self.run_id or '(not started)')}</b> "
                            f"<span class='labkit-status'>{html.escape(self._status_text())}"
                            "</span>")

    def _show_tail(self, rows):
        keys = []
        for r in rows[-self.tail:]:
            keys += [k for k in r if k not in keys and not k.startswith("time")]
        cells = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
        body = ""
        for r in rows[-self.tail:]:
            body += "<tr>" + "".join(
                f"<td>{_fmt(r.get(k))}</td>" for k in keys) + "</tr>"
        self.log_tail.value = (f"<table class='labkit-log'><tr>{cells}</tr>{body}</table>"
                               if rows else "")

    # -- a run from the store
    def _load_store(self):
        from .. import runs

        data = runs.metrics(self.run_id, max_points=self.max_points)
        points = {k: (m["iteration"], m["value"]) for k, m in data.items()
                  if m["value"] and _plottable(k, m["value"][-1])}
        for k, m in data.items():
            if m["iteration"]:
                self._last_step[k] = m["iteration"][-1]
        self._stream(points)
        self._refresh_controls()
        self._show_title()

    def _poll(self, every):
        from .. import runs

        while not self._stopped_polling.wait(every):
            try:
                rec = runs.get(self.run_id)
            except runs.RunStoreError:
                return
            points = {}
            for k in runs.store().metric_keys(self.run_id):
                m = runs.metrics(self.run_id, [k],
                                 since_iteration=self._last_step.get(k, -1))[k]
                if m["iteration"]:
                    self._last_step[k] = m["iteration"][-1]
                    points[k] = (m["iteration"], m["value"])
            if points:
                self._stream(points)
            self._show_title()
            if rec["status"] not in ("running", "paused", "created"):
                return

    def close(self):
        """Stop following the run and detach from the loop."""
        self._stopped_polling.set()
        if self.loop is not None and self._feed in self.loop.extensions:
            self.loop.remove(self._feed)
        self.widget.close()


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape("" if v is None else str(v))
