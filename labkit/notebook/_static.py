"""The Dashboard's static copy: self-contained HTML with inline SVG plots (no script, no
external file), for every viewer without labkit's live renderer — a notebook reopened without
a kernel elsewhere, nbconvert, GitHub. Text and axes are drawn in ``currentColor``, so the copy
reads on light and dark pages alike."""

from __future__ import annotations

import math
import sys

from ..runs.downsample import minmax_indices
from ..runs.html import esc, unit

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]
#: points drawn per curve (min/max per bucket: a spike survives)
POINTS = 600
_W, _H = 640, 190
_L, _R, _T, _B = 56, 10, 8, 30


def group_of(key: str) -> str:
    """The figure a metric goes on: ``train_loss``, ``valid_loss`` and ``loss`` share one."""
    for prefix in ("train_", "valid_", "test_"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def plottable(key: str) -> bool:
    return key not in ("iteration", "epoch") and not key.startswith(("time", "best_"))


def ordered_groups(keys) -> list[tuple[str, list[str]]]:
    """Figures in a stable order: loss first, then by name; in each, the per-batch curve, then
    train_, valid_, test_ (the order the live cockpit uses)."""
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(group_of(k), []).append(k)

    def rank(k):
        for i, p in enumerate(("train_", "valid_", "test_")):
            if k.startswith(p):
                return i + 1
        return 0
    return [(g, sorted(ks, key=lambda k: (rank(k), k)))
            for g, ks in sorted(groups.items(), key=lambda kv: (kv[0] != "loss", kv[0]))]


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    raw = (hi / 2 - lo / 2) / count * 2  # NOTE: hi - lo overflows for ±1e308
    if not 0 < raw < math.inf:
        return [lo]
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), 0.0)
    if not step:  # raw is below the smallest power of ten a float holds
        return [lo]
    first = math.ceil(lo / step)
    return [round(i * step, 12) for i in range(first, int(math.floor(hi / step)) + 1)]


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.2e}"
    return f"{v:.4g}"


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def figure(title: str, lines: list[tuple[str, list, list]]) -> str:
    """One SVG plot: ``lines`` of (key, iterations, values); the per-batch curve (key ==
    title) thin, the others thicker with dots."""
    pts, segs, bad, allx = [], [], [], []
    for key, xs, ys in lines:
        keep = minmax_indices(ys, POINTS)
        pts.append((key, [(xs[i], ys[i]) for i in keep if _finite(ys[i])]))
        # NOTE: the axis spans every iteration, finite or not (a loss that went NaN at 50 of
        # 100 ended the axis at 49, and nothing said why)
        allx += [xs[i] for i in keep]
        # NOTE: a gap (None, NaN, inf) breaks the curve, as the live plot does: a NaN stretch
        # was drawn as a line across it
        runs, cur = [], []
        for i in keep:
            if _finite(ys[i]):
                cur.append((xs[i], ys[i]))
            elif cur:
                runs, cur = runs + [cur], []
        segs.append(runs + ([cur] if cur else []))
        # NOTE: the store keeps NaN and inf as null: a null is a value that was not finite
        bad.append(sum(1 for y in ys if not _finite(y)))
    ally = [y for _, p in pts for _, y in p]
    legend = "".join(
        f'<tspan fill="{PALETTE[i % len(PALETTE)]}">\u25a0</tspan>'
        f'<tspan> {esc(k)}{f" ({bad[i]} not finite)" if bad[i] else ""}   </tspan>'
        for i, (k, _) in enumerate(pts))
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H + 16}" '
            f'style="width:100%;max-width:{_W + 260}px;font:11px sans-serif" role="img" '
            f'aria-label="{esc(title)}"><text x="{_L}" y="11" fill="currentColor">'
            f'{legend}</text><g transform="translate(0,16)">')
    if not ally:
        return head + (f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle" '
                       'fill="currentColor" opacity="0.6">no values yet</text></g></svg>')
    x0, x1 = min(allx), max(allx)
    y0, y1 = min(ally), max(ally)
    x1 = x1 if x1 > x0 else x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = (y1 / 2 - y0 / 2) * 0.1
    y0, y1 = max(y0 - pad, -sys.float_info.max), min(y1 + pad, sys.float_info.max)
    pw, ph = _W - _L - _R, _H - _T - _B

    def sx(x):
        return _L + (x - x0) / (x1 - x0) * pw

    def sy(y):
        return _T + (1 - unit(y, y0, y1)) * ph
    out = [head]
    for t in ticks(y0, y1, 4):
        out.append(f'<line x1="{_L}" x2="{_L + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" '
                   'stroke="currentColor" stroke-opacity="0.15"/>'
                   f'<text x="{_L - 4}" y="{sy(t) + 4:.1f}" text-anchor="end" '
                   f'fill="currentColor" opacity="0.75">{fmt(t)}</text>')
    for t in ticks(x0, x1, 6):
        out.append(f'<text x="{sx(t):.1f}" y="{_T + ph + 13}" text-anchor="middle" '
                   f'fill="currentColor" opacity="0.75">{fmt(t)}</text>')
    out.append(f'<rect x="{_L}" y="{_T}" width="{pw}" height="{ph}" fill="none" '
               'stroke="currentColor" stroke-opacity="0.5"/>'
               f'<text x="{_L + pw / 2}" y="{_H - 3}" text-anchor="middle" '
               'fill="currentColor">iteration</text>'
               f'<text transform="translate(12,{_T + ph / 2}) rotate(-90)" text-anchor="middle" '
               f'fill="currentColor">{esc(title)}</text>')
    for i, (key, p) in enumerate(pts):
        color = PALETTE[i % len(PALETTE)]
        dense = key == title
        for seg in segs[i]:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in seg)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="{1.2 if dense else 2}"/>')
        if not dense and len(p) <= 200:
            out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>'
                    for x, y in p]
    out.append("</g></svg>")
    return "".join(out)


def table(series: dict, keys: list[str], tail: int) -> str:
    """The newest ``tail`` epoch-level records (per-batch ones when there are none)."""
    sparse = [k for k in keys if group_of(k) != k] or keys
    rows: dict[int, dict] = {}
    for k in sparse:
        s = series[k]
        for i in range(max(0, len(s["iteration"]) - tail), len(s["iteration"])):
            row = rows.setdefault(s["iteration"][i], {"epoch": (s.get("epoch") or [None] *
                                                                (i + 1))[i]})
            row[k] = s["value"][i]
    its = sorted(rows)[-tail:]
    if not its:
        return ""
    cell = 'style="padding:1px 8px;text-align:right"'
    head = "".join(f"<th {cell}>{esc(k)}</th>" for k in ["iteration", "epoch", *sparse])
    body = "".join(
        "<tr>" + "".join(f"<td {cell}>{fmt(v) if _finite(v) else ''}</td>"
                         for v in [it, rows[it].get("epoch"), *(rows[it].get(k)
                                                               for k in sparse)]) + "</tr>"
        for it in its)
    return (f'<table style="border-collapse:collapse;font-size:11px;'
            f'font-variant-numeric:tabular-nums"><tr>{head}</tr>{body}</table>')


def render(title: str, status: str, info: str, series: dict, metrics=None,
           tail: int = 5) -> str:
    """The whole static copy: title and status, progress text, one figure per metric group,
    the log's tail."""
    keys = [k for k in series if plottable(k) and (
        metrics is None or k in metrics or group_of(k) in metrics)]
    figs = "".join(
        f"<div>{figure(g, [(k, series[k]['iteration'], series[k]['value']) for k in ks])}</div>"
        for g, ks in ordered_groups(keys))
    return (f'<div class="labkit-dashboard-static" style="color:inherit">'
            f"<div><b>{esc(title, 300)}</b> · <span>{esc(status)}</span></div>"
            f'<div style="opacity:0.75">{esc(info, 2000)}</div>'
            f"{figs or '<div>no values yet</div>'}{table(series, keys, tail)}</div>")
