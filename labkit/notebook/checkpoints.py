"""CheckpointBrowser: runs and their checkpoints; Restore, Fork, Delete."""

from __future__ import annotations

import html
import json
import time
from pathlib import Path

from . import _bokeh


class CheckpointBrowser(_bokeh.WidgetRepr):
    """Runs from the run store and their checkpoints with metrics.

    **Restore** loads the selected checkpoint into ``loop`` (or, without one, rebuilds the run's
    loop with ``lk.resume(..., run=False)``: see ``.loop``); **Fork** creates a new run from it
    with the config changes typed as JSON (lineage recorded; ``lk.resume(new_id)`` trains it);
    **Delete** removes the checkpoint's files and its record.
    """

    def __init__(self, loop=None, run_id: str | None = None):
        _bokeh.require()
        import ipywidgets as w

        self.loop = loop
        self.runs = w.Dropdown(description="run", layout=w.Layout(width="460px"))
        self.checkpoints = w.Select(description="checkpoint", rows=6,
                                    layout=w.Layout(width="460px"))
        self.table = w.HTML()
        self.changes = w.Text(description="changes", placeholder='{"lr": 0.001}',
                              layout=w.Layout(width="460px"))
        self.restore_button = w.Button(description="Restore", icon="undo")
        self.fork_button = w.Button(description="Fork", icon="code-branch")
        self.delete_button = w.Button(description="Delete", icon="trash")
        self.refresh_button = w.Button(description="Refresh", icon="refresh")
        self.message = w.HTML()
        self.runs.observe(lambda ch: self._show_run(), "value")
        self.restore_button.on_click(lambda _: self._act(self.restore))
        self.fork_button.on_click(lambda _: self._act(self.fork))
        self.delete_button.on_click(lambda _: self._act(self.delete))
        self.refresh_button.on_click(lambda _: self.refresh())
        buttons = w.HBox([self.restore_button, self.fork_button, self.delete_button,
                          self.refresh_button])
        self.widget = w.VBox([self.runs, self.table, self.checkpoints, self.changes, buttons,
                              self.message])
        self.widget.add_class("labkit-checkpoint-browser")
        self.refresh(select=run_id or (loop.run_id if loop is not None else None))

    def refresh(self, select=None):
        from .. import runs
        from ..runs import printable

        rows = runs.list()
        current = select or self.runs.value
        # NOTE: option labels are shown as text (ipywidgets sets textContent), not HTML
        self.runs.options = [(f"{r['id']}  {printable(r['name'] or '')}  [{r['status']}]",
                              r["id"]) for r in rows]
        ids = [r["id"] for r in rows]
        if current in ids:
            self.runs.value = current
        elif ids:
            self.runs.value = ids[0]
        self._show_run()

    def _records(self):
        from .. import runs

        if not self.runs.value:
            return []
        return runs.checkpoints(self.runs.value)

    def _show_run(self):
        recs = self._records()
        keys = []
        for c in recs:
            keys += [k for k in c["metrics"] if k not in keys and not str(k).startswith("time")]
        keys = keys[:6]
        # NOTE: every value is escaped here, at the boundary: names and metric keys are data
        head = "".join(f"<th>{_cell(k)}</th>" for k in ["iteration", "epoch", *keys, "MB",
                                                       "valid", "written"])
        body = ""
        for c in recs:
            cells = [c["iteration"], c["epoch"], *[_fmt(c["metrics"].get(k)) for k in keys],
                     f"{c['size'] / 1e6:.2f}", "yes" if c["valid"] else "NO",
                     time.strftime("%H:%M:%S", time.localtime(c["created"]))]
            body += "<tr>" + "".join(f"<td>{_cell(cell)}</td>" for cell in cells) + "</tr>"
        self.table.value = (f"<table class='labkit-checkpoints'><tr>{head}</tr>{body}</table>"
                            if recs else "<i>no checkpoints</i>")
        self.checkpoints.options = [(f"iteration {c['iteration']}  {Path(c['path']).name}",
                                     c["id"]) for c in recs]
        if recs:
            self.checkpoints.value = recs[-1]["id"]

    def _selected(self) -> dict:
        from .. import runs

        if self.checkpoints.value is None:
            raise ValueError("select a checkpoint first")
        return runs.store().checkpoint(self.checkpoints.value)

    def _act(self, fn):
        try:
            self._say(fn())
        except Exception as e:  # noqa: BLE001 - shown in the widget, not lost in the log
            self._say(f"{type(e).__name__}: {e}", error=True)

    def _say(self, text, error=False):
        style = "color:#d62728" if error else ""
        self.message.value = (f"<span class='labkit-message' style='{style}'>"
                              f"{html.escape(text)}</span>")

    def restore(self) -> str:
        c = self._selected()
        if self.loop is not None:
            if self.loop.running:
                raise RuntimeError("the loop is training; pause or stop it before restoring")
            self.loop.load_checkpoint(c["path"])
            return f"restored iteration {c['iteration']} into the loop"
        from ..training import resume

        self.loop = resume(c["path"], run=False)
        return f"restored iteration {c['iteration']}: the loop is browser.loop"

    def fork(self) -> str:
        from .. import runs

        c = self._selected()
        text = self.changes.value.strip()
        try:
            changes = json.loads(text) if text else {}
        except ValueError as e:
            raise ValueError(f"changes must be a JSON object, e.g. {{\"lr\": 0.001}} ({e})") \
                from None
        if not isinstance(changes, dict):
            raise ValueError('changes must be a JSON object, e.g. {"lr": 0.001}')
        child = runs.fork(c["run_id"], c["id"], changes)
        self.last_fork = child
        self.refresh(select=self.runs.value)
        return f"forked run {child}; train it with lk.resume({child!r})"

    def delete(self) -> str:
        from .. import runs

        c = self._selected()
        files = runs.delete_checkpoint(c["id"])
        self._show_run()
        kept = "" if files else " (its files were kept: see the log)"
        return f"deleted checkpoint {c['id']} (iteration {c['iteration']}){kept}"

    def __repr__(self):
        n = len(self.checkpoints.options)
        return f"CheckpointBrowser(run {self.runs.value}: {n} checkpoints)"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else "" if v is None else str(v)


def _cell(v) -> str:
    """``v`` as HTML text: ``<``, ``&`` and quotes escaped."""
    return html.escape(str(v), quote=True)
