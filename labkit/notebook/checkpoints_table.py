"""The CheckpointBrowser's table as HTML (every value escaped), its theme-following CSS, and the
reading of an edited fork config. Pure functions: no widgets, no store."""

from __future__ import annotations

import html
import json
import math
import time

from ..runs import html as _html

#: the table's fixed columns around the metrics (one name per concept: ``iteration``)
COLUMNS = ("iteration", "epoch")
#: at most this many metric columns (the rest are in each row's tooltip)
MAX_METRICS = 6
#: one table row, and one row of action buttons beside it, is this tall: they line up by it
ROW_PX = 28

# NOTE: only JupyterLab's CSS variables, no colours of our own: the widget then follows the
# light and dark themes (and any other). Scoped to the widget's class: the <style> element is
# global once the browser has it.
CSS = f"""<style>
.labkit-checkpoint-browser {{ color: var(--jp-ui-font-color1);
  font-family: var(--jp-ui-font-family); font-size: var(--jp-ui-font-size1); }}
.labkit-checkpoint-browser .labkit-rows {{ margin: 0; padding: 0; overflow: visible; }}
.labkit-checkpoint-browser table.labkit-checkpoints {{ border-collapse: collapse;
  border-spacing: 0; font-variant-numeric: tabular-nums; color: var(--jp-ui-font-color1);
  background: var(--jp-layout-color1); }}
.labkit-checkpoint-browser table.labkit-checkpoints th,
.labkit-checkpoint-browser table.labkit-checkpoints td {{ height: {ROW_PX}px;
  box-sizing: border-box; padding: 0 10px; text-align: right; white-space: nowrap;
  line-height: {ROW_PX - 1}px; border: none; box-shadow: inset 0 -1px var(--jp-border-color2); }}
.labkit-checkpoint-browser table.labkit-checkpoints th {{ background: var(--jp-layout-color2);
  color: var(--jp-ui-font-color1); font-weight: 600; }}
.labkit-checkpoint-browser table.labkit-checkpoints td:last-child {{ text-align: center; }}
.labkit-checkpoint-browser tr.labkit-selected td {{
  background: var(--jp-notebook-multiselected-color); }}
.labkit-checkpoint-browser tr.labkit-invalid td {{ color: var(--jp-ui-font-color2); }}
.labkit-checkpoint-browser tr.labkit-invalid td:last-child {{ color: var(--jp-warn-color0);
  font-weight: 600; }}
.labkit-checkpoint-browser .labkit-actions {{ margin: 0; }}
.labkit-checkpoint-browser .labkit-actions .jupyter-button {{ height: {ROW_PX - 4}px;
  line-height: {ROW_PX - 4}px; margin: 2px 2px; padding: 0 8px;
  font-size: var(--jp-ui-font-size1); }}
.labkit-checkpoint-browser .labkit-panel {{ border: 1px solid var(--jp-border-color2);
  background: var(--jp-layout-color2); color: var(--jp-ui-font-color1); padding: 4px 8px;
  margin: 6px 0; }}
.labkit-checkpoint-browser .labkit-fork .widget-html-content {{ white-space: normal;
  line-height: 1.4; padding: 4px 0; }}
.labkit-checkpoint-browser .labkit-panel textarea {{ font-family: var(--jp-code-font-family);
  font-size: var(--jp-code-font-size); }}
.labkit-checkpoint-browser .labkit-hint {{ color: var(--jp-ui-font-color2); }}
.labkit-checkpoint-browser .labkit-error {{ color: var(--jp-error-color1); }}
</style>"""


def esc(v) -> str:
    """``v`` as HTML text: ``<``, ``>``, ``&`` and both quotes escaped."""
    return html.escape(str(v), quote=True)


def human_size(n) -> str:
    """Bytes as a short human-readable size: ``812 B``, ``14.2 kB``, ``3.10 MB``."""
    if not isinstance(n, (int, float)) or isinstance(n, bool) or n < 0:
        return "?"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            break
        n /= 1000
    if unit == "B":
        return f"{int(n)} B"
    return f"{n:.0f} {unit}" if n >= 100 else f"{n:.2f} {unit}" if n < 10 else f"{n:.1f} {unit}"


def fmt(v) -> str:
    """A metric value, compact: 4 significant digits for floats."""
    if isinstance(v, float):
        return str(v) if math.isnan(v) or math.isinf(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def metric_keys(records) -> list:
    """The metric columns: every key the checkpoints recorded, in first-seen order, without
    times and the columns the table has anyway."""
    keys: list = []
    for c in records:
        metrics = c.get("metrics") if isinstance(c.get("metrics"), dict) else {}
        keys += [k for k in metrics if k not in keys and k not in COLUMNS
                 and not str(k).startswith("time")]
    return keys[:MAX_METRICS]


def table_html(records, keys, selected=None) -> str:
    """One ``<tr>`` per checkpoint (``records`` from ``lk.runs.checkpoints``), oldest first;
    ``selected``: the id of the highlighted row. Every value is escaped here (a cell as
    ``_html.esc``: hidden characters shown, cut at 200 characters)."""
    if not records:
        return "<i class='labkit-hint'>no checkpoints yet</i>"
    head = "".join(f"<th>{_html.esc(k)}</th>" for k in [*COLUMNS, *keys, "size", "valid"])
    body = []
    for c in records:
        metrics = c["metrics"] if isinstance(c.get("metrics"), dict) else {}
        cells = [c["iteration"], c["epoch"], *[fmt(metrics.get(k)) for k in keys],
                 human_size(c.get("size")), "yes" if c.get("valid") else "NO"]
        classes = " ".join(n for n, on in (("labkit-selected", c["id"] == selected),
                                            ("labkit-invalid", not c.get("valid"))) if on)
        written = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["created"]))
                   if isinstance(c.get("created"), (int, float)) else "?")
        title = f"checkpoint {c['id']}, written {written}\n{c.get('path')}"
        if not c.get("valid"):
            title += "\nfailed verification: it cannot be restored or forked"
        body.append(f"<tr class='{classes}' title='{esc(title)}'>"
                    + "".join(f"<td>{_html.esc(v)}</td>" for v in cells) + "</tr>")
    return (f"<table class='labkit-checkpoints'><tr>{head}</tr>{''.join(body)}</table>")


def fork_changes(text: str, config: dict) -> dict:
    """The config changes of a fork from ``text``, the run's ``config`` as the user edited it
    (a JSON object): the keys whose value differs. Raises ``ValueError`` with a message that
    says what is wrong and how to fix it."""
    from .._json import loads_strict

    if not text.strip():
        raise ValueError('the config is empty: it must be a JSON object, e.g. {"lr": 0.001}')
    try:
        new = loads_strict(text)
    except ValueError as e:
        raise ValueError(f"the config is not valid JSON ({e}); it must be a JSON object, "
                         'e.g. {"lr": 0.001}') from None
    if not isinstance(new, dict):
        raise ValueError(f"the config must be a JSON object {{...}}, got a JSON "
                         f"{type(new).__name__ if new is not None else 'null'}")
    removed = [k for k in config if k not in new]
    if removed:
        raise ValueError(f"keys removed: {removed}; a fork keeps every key of its run's "
                         "config: put them back (change their values instead)")
    added = [k for k in new if k not in config]
    if added and config:
        raise ValueError(f"unknown keys: {added}; a fork can change only the keys of its "
                         f"run's config ({sorted(config)})")
    # NOTE: compared as JSON text: 1 == True in Python, yet a changed type is a change
    def text(v):
        return json.dumps(v, sort_keys=True)

    return {k: v for k, v in new.items() if k not in config or text(config[k]) != text(v)}
