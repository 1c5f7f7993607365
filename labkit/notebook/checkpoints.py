"""CheckpointBrowser: one run's checkpoints in one table; Restore, Fork, Delete on each row."""

from __future__ import annotations

import json
import threading

from ..training.events import Extension
from . import _bokeh
from .checkpoints_table import CSS, ROW_PX, esc, fork_changes, metric_keys, table_html


class CheckpointBrowser(_bokeh.WidgetRepr):
    """The checkpoints of a run, one table row each (iteration, epoch, the metrics recorded
    with it, size, valid), with **Restore**, **Fork** and **Delete** beside each row.

    - **Restore** loads the checkpoint into ``loop`` (refused while it trains: stop it first);
      without a loop, it rebuilds the run's loop with ``lk.resume(path, run=False)`` into
      ``browser.loop``.
    - **Fork** opens the run's config as JSON to edit; the keys changed go into the new run's
      config (lineage recorded); ``lk.resume(browser.last_fork)`` trains it.
    - **Delete** asks first, then deletes through ``lk.runs.delete_checkpoint`` (files only
      inside the run's own folder, never another run's checkpoint).

    With a ``loop``, new checkpoints appear as the loop writes them (and pruned ones go).

    Examples
    --------
    >>> browser = lk.notebook.CheckpointBrowser(loop)        # doctest: +SKIP
    >>> browser                                              # doctest: +SKIP
    """

    def __init__(self, loop=None, run_id: str | None = None):
        _bokeh.require()
        import ipywidgets as w

        self.loop = loop
        self.records: list[dict] = []
        #: the id of the highlighted checkpoint (the row whose action was used last)
        self.selected: int | None = None
        #: the run id of the last fork made here
        self.last_fork: str | None = None
        self._lock = threading.RLock()
        self._quiet = False
        self._watch = None
        #: follow the loop's run as it writes checkpoints (until another run is chosen)
        self._follow = loop is not None
        self._pending_delete: int | None = None
        self._fork_from: tuple[int, dict] | None = None
        self._rows: dict[int, tuple] = {}  # checkpoint id -> (box, restore, fork, delete)

        self.runs = w.Dropdown(description="run", layout=w.Layout(width="520px"))
        self.refresh_button = w.Button(description="Refresh", icon="refresh",
                                       tooltip="read the run list and checkpoints again")
        self.table = w.HTML(layout=w.Layout(margin="0"))
        self.table.add_class("labkit-rows")
        self.actions = w.VBox(layout=w.Layout(margin="0"))
        self.actions.add_class("labkit-rows")
        # NOTE: the action buttons line up with the table's rows by height (ROW_PX each,
        # this box beside the header): one <table> stays copyable and readable as a whole
        self._header = w.Box(layout=w.Layout(height=f"{ROW_PX}px", margin="0"))

        self.confirm_text = w.HTML()
        self.confirm_button = w.Button(description="Confirm", icon="trash",
                                       button_style="danger", layout=w.Layout(width="auto"))
        self.cancel_button = w.Button(description="Cancel", layout=w.Layout(width="auto"))
        self.confirm_panel = w.HBox([self.confirm_text, self.confirm_button,
                                     self.cancel_button],
                                    layout=w.Layout(display="none", width="max-content"))
        self.confirm_panel.add_class("labkit-panel")
        self.confirm_panel.add_class("labkit-confirm")

        self.fork_label = w.HTML()
        self.fork_config = w.Textarea(layout=w.Layout(width="520px"))
        self.fork_button = w.Button(description="Create fork", icon="code-branch",
                                    button_style="primary", layout=w.Layout(width="auto"))
        self.fork_cancel_button = w.Button(description="Cancel", layout=w.Layout(width="auto"))
        self.fork_panel = w.VBox([self.fork_label, self.fork_config,
                                  w.HBox([self.fork_button, self.fork_cancel_button])],
                                 layout=w.Layout(display="none", width="640px"))
        self.fork_panel.add_class("labkit-panel")
        self.fork_panel.add_class("labkit-fork")
        self.message = w.HTML()

        self.runs.observe(self._on_run, "value")
        self.refresh_button.on_click(lambda _: self._act(self._refreshed))
        self.confirm_button.on_click(lambda _: self._act(self._confirm_delete))
        self.cancel_button.on_click(lambda _: self._act(self._cancel_delete))
        self.fork_button.on_click(lambda _: self._act(self.fork))
        self.fork_cancel_button.on_click(lambda _: self._act(self._cancel_fork))
        self.widget = w.VBox([w.HTML(CSS), w.HBox([self.runs, self.refresh_button]),
                              w.HBox([self.table, self.actions]), self.confirm_panel,
                              self.fork_panel, self.message])
        self.widget.add_class("labkit-checkpoint-browser")
        self._attach(loop)
        if run_id is not None:
            from .. import runs

            runs.get(run_id)  # NOTE: an unknown id is refused (it showed another run's)
        self.refresh(select=run_id or (loop.run_id if loop is not None else None))

    # -- reading the store
    @property
    def run_id(self) -> str | None:
        """The run shown."""
        return self.runs.value

    def refresh(self, select: str | None = None) -> CheckpointBrowser:
        """Read the run list and the shown run's checkpoints again (``select``: show that
        run)."""
        from .. import runs
        from ..runs import printable

        with self._lock:
            rows = runs.list()
            current = select or self.runs.value
            ids = [r["id"] for r in rows]
            self._quiet = True
            try:
                # NOTE: option labels are shown as text (ipywidgets sets textContent), not HTML
                self.runs.options = [(f"{r['id']}  {printable(r['name'] or '')}  "
                                      f"[{r['status']}]", r["id"]) for r in rows]
                self.runs.value = current if current in ids else ids[0] if ids else None
            finally:
                self._quiet = False
            self._render()
        return self

    def _refreshed(self) -> str:
        self.refresh()
        return f"{len(self.records)} checkpoints in run {self.runs.value}"

    def _on_run(self, change):
        if self._quiet:
            return
        with self._lock:
            self._follow = self.loop is not None and change["new"] == self.loop.run_id
            self.selected = None
            self._close_panels()
            self._render()

    def _render(self):
        """The table and its action buttons from the store: rows added, changed, gone."""

        from .. import runs

        self.records = runs.checkpoints(self.runs.value) if self.runs.value else []
        ids = [c["id"] for c in self.records]
        if self.selected not in ids:
            self.selected = None
        self.table.value = table_html(self.records, metric_keys(self.records), self.selected)
        for cid in [i for i in self._rows if i not in ids]:
            for widget in self._rows.pop(cid):
                widget.close()
        boxes = []
        for c in self.records:
            if c["id"] not in self._rows:
                self._rows[c["id"]] = self._make_row(c["id"])
            box, restore, fork, delete = self._rows[c["id"]]
            it = c["iteration"]
            restore.disabled = fork.disabled = not c["valid"]
            restore.tooltip = (f"load iteration {it} into the loop" if c["valid"] else
                               "this checkpoint failed verification")
            fork.tooltip = f"a new run from iteration {it}, with a changed config"
            delete.tooltip = f"delete the checkpoint at iteration {it} (asks first)"
            boxes.append(box)
        self.actions.children = [self._header, *boxes] if boxes else []
        if self._pending_delete is not None and self._pending_delete not in ids:
            self._close_panels()
            self._say("that checkpoint is gone (deleted or pruned meanwhile): nothing to "
                      "delete")
        if self._fork_from is not None and self._fork_from[0] not in ids:
            self._close_panels()
            self._say("that checkpoint is gone (deleted or pruned meanwhile): fork another")

    def _make_row(self, cid: int) -> tuple:
        import ipywidgets as w

        def button(text, icon, fn):
            b = w.Button(description=text, icon=icon, layout=w.Layout(width="auto"))
            b.on_click(lambda _: self._act(lambda: fn(cid)))
            return b

        restore = button("Restore", "undo", self.restore)
        fork = button("Fork", "code-branch", self.ask_fork)
        delete = button("Delete", "trash", self.ask_delete)
        box = w.HBox([restore, fork, delete],
                     layout=w.Layout(height=f"{ROW_PX}px", margin="0", overflow="hidden"))
        box.add_class("labkit-actions")
        return box, restore, fork, delete

    def _record(self, checkpoint_id: int | None) -> dict:
        cid = self.selected if checkpoint_id is None else checkpoint_id
        for c in self.records:
            if c["id"] == cid:
                return c
        if cid is None:
            raise ValueError("choose a checkpoint: use the buttons on its row")
        raise ValueError(f"checkpoint {cid} is not one of run {self.runs.value}'s: Refresh")

    def select(self, checkpoint_id: int) -> dict:
        """Highlight the row of ``checkpoint_id``; returns its record."""
        c = self._record(checkpoint_id)
        self.selected = c["id"]
        self.table.value = table_html(self.records, metric_keys(self.records), self.selected)
        return c

    # -- actions
    def _act(self, fn):
        with self._lock:
            try:
                text = fn()
                if text:
                    self._say(text)
                else:
                    self.message.value = ""
            except Exception as e:  # noqa: BLE001 - shown in the widget, not lost in the log
                self._say(f"{type(e).__name__}: {e}", error=True)

    def _say(self, text, error=False):
        cls = "labkit-message labkit-error" if error else "labkit-message"
        self.message.value = f"<span class='{cls}'>{esc(text)}</span>"

    def _close_panels(self):
        self._pending_delete = self._fork_from = None
        self.confirm_panel.layout.display = self.fork_panel.layout.display = "none"

    def restore(self, checkpoint_id: int | None = None) -> str:
        """Load checkpoint ``checkpoint_id`` (default: the selected one) into the loop."""
        c = self.select(self._record(checkpoint_id)["id"])
        self._close_panels()
        it, loop = c["iteration"], self.loop
        if not c["valid"]:
            raise ValueError(f"the checkpoint at iteration {it} failed verification: it cannot "
                             "be restored (Delete it, or restore another)")
        if loop is not None and loop.run_id is not None and loop.run_id != c["run_id"]:
            raise ValueError(f"the checkpoint at iteration {it} is of run {c['run_id']}, not of "
                             f"this loop's run {loop.run_id}: Fork it, or browse it with "
                             f"CheckpointBrowser(run_id={c['run_id']!r}) to restore it there")
        if loop is not None:
            if loop.running:
                # NOTE: refused even when paused: the training thread holds its place in the
                # epoch, which a restore would change under it
                raise RuntimeError(f"the loop is training (iteration "
                                   f"{loop.status['iteration']}): stop it first (loop.stop(), "
                                   f"or the Dashboard's Stop), then Restore; or Fork this "
                                   f"checkpoint to train from it in a new run")
            loop.load_checkpoint(c["path"])
            return (f"restored iteration {it} into the loop (parameters, optimizer, data "
                    f"position, random state): loop.run() or loop.start() continues from there")
        from ..training import resume

        self.loop = resume(c["path"], run=False)
        self._attach(self.loop)
        self._follow = True
        return (f"restored iteration {it} of run {c['run_id']}: the loop is browser.loop "
                f"(browser.loop.start() continues it)")

    def ask_fork(self, checkpoint_id: int | None = None) -> str:
        """Open the fork editor for ``checkpoint_id``, prefilled with the run's config."""
        from .. import runs

        c = self.select(self._record(checkpoint_id)["id"])
        self._close_panels()
        config = runs.get(c["run_id"])["config"] or {}
        self._fork_from = (c["id"], config)
        self.fork_config.value = json.dumps(config, indent=2, sort_keys=True)
        self.fork_config.rows = min(max(len(config) + 2, 4), 16)
        self.fork_label.value = (
            f"<b>Fork from iteration {esc(c['iteration'])}</b> of run {esc(c['run_id'])}. "
            "Below is the run's config (JSON). Edit the values to change: the keys you change "
            "go into the new run's config, the rest is copied. The new run starts from this "
            "checkpoint; <code>lk.resume(new run id)</code> trains it.")
        self.fork_panel.layout.display = "flex"
        return ""

    def fork(self) -> str:
        """Create the fork the editor describes; returns what happened (the new run id is
        ``browser.last_fork``)."""
        from .. import runs

        if self._fork_from is None:
            raise ValueError("press Fork on a checkpoint's row first")
        cid, config = self._fork_from
        c = self._record(cid)
        changes = fork_changes(self.fork_config.value, config)
        child = runs.fork(c["run_id"], c["id"], changes)
        self.last_fork = child
        self._close_panels()
        self.refresh()
        what = json.dumps(changes, sort_keys=True) if changes else "no config change"
        return (f"forked run {child} from iteration {c['iteration']} of run {c['run_id']} "
                f"with {what}; train it with lk.resume({child!r})")

    def _cancel_fork(self) -> str:
        self._close_panels()
        return "fork cancelled: no run created"

    def ask_delete(self, checkpoint_id: int | None = None) -> str:
        """Ask to confirm deleting ``checkpoint_id`` (Confirm deletes, Cancel keeps it)."""
        c = self.select(self._record(checkpoint_id)["id"])
        self._close_panels()
        self._pending_delete = c["id"]
        self.confirm_text.value = (f"Delete checkpoint at iteration {esc(c['iteration'])}? "
                                   "This removes its files.")
        self.confirm_panel.layout.display = "flex"
        return ""

    def _confirm_delete(self) -> str:
        if self._pending_delete is None:
            raise ValueError("nothing to delete: press Delete on a checkpoint's row first")
        return self.delete(self._pending_delete)

    def _cancel_delete(self) -> str:
        self._close_panels()
        return "nothing deleted"

    def delete(self, checkpoint_id: int) -> str:
        """Delete checkpoint ``checkpoint_id`` of the run shown, at once (the Delete button
        asks first). Only through ``lk.runs.delete_checkpoint``: files only inside the run's
        own folder, and never another run's checkpoint."""
        from .. import runs

        c = self._record(checkpoint_id)
        self._close_panels()
        files, kept = runs.delete_checkpoint(c["id"], run_id=self.runs.value, explain=True)
        self._render()
        if files:
            return f"deleted the checkpoint at iteration {c['iteration']} (files and record)"
        if kept is None:
            return (f"deleted the record of the checkpoint at iteration {c['iteration']}; its "
                    f"files were already gone")
        return (f"deleted the record of the checkpoint at iteration {c['iteration']}; its files "
                f"were kept at {c['path']}: {kept}")

    # -- following a loop
    def _attach(self, loop):
        if loop is None or self._watch is not None:
            return
        self._watch = loop.add(_Watch(self))

    def _on_checkpoint(self, loop):
        with self._lock:
            if not self._follow:
                return
            # NOTE: on the training thread: the shown run's checkpoints only, when it is the
            # loop's (re-reading the whole run list took 60-90 ms a checkpoint with 5,000 runs)
            if self.runs.value == loop.run_id and loop.run_id is not None:
                self._render()
            else:
                self.refresh(select=loop.run_id)

    def close(self) -> None:
        """Stop following the loop and close the widgets."""
        if self._watch is not None and self.loop is not None and self._watch in \
                self.loop.extensions:
            self.loop.remove(self._watch)
        self._watch = None
        for row in self._rows.values():
            for widget in row:
                widget.close()
        self._rows.clear()
        self.widget.close()

    def __repr__(self):
        return f"CheckpointBrowser(run {self.runs.value}: {len(self.records)} checkpoints)"


class _Watch(Extension):
    """Refreshes a CheckpointBrowser after the loop writes (or prunes) a checkpoint."""

    transient = True  # a widget watching the loop: not part of its state
    every = None
    priority = -20  # after Checkpoint (-10): its pruning is done too

    def __init__(self, browser):
        super().__init__(name="CheckpointBrowser")
        self.browser = browser
        self.seen = None

    def after_batch(self, loop):
        mark = (loop.last_checkpoint, loop.last_checkpoint_iteration)
        if mark != self.seen and loop.last_checkpoint is not None:
            self.seen = mark
            self.browser._on_checkpoint(loop)

    # NOTE: on_unpause too: a checkpoint written while paused (the Dashboard's Checkpoint)
    # comes with no event of its own
    after_epoch = after_training = on_pause = on_unpause = on_interrupt = after_batch
