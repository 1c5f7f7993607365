"""One quantity of a sweep's trials against one parameter, with a least-squares line and its R²
(``lk.sweep.trend(sw, "depth", "time")``): the seed's finding that training time grows
linearly with depth, checked on any sweep.

``y`` is a column of ``sw.table()`` (the metric, a parameter) or ``"time"``: each trial's
training time, from its run's progress (``elapsed``, seconds of training, waits excluded).
The result shows as an SVG scatter plot in a notebook (plain HTML, escaped) and carries the
numbers: ``slope``, ``intercept``, ``r2``, ``points``.
"""

from __future__ import annotations

import math
import numbers

from ..runs.html import esc, unit
from .space import SweepError


def linear_fit(xs, ys) -> tuple[float, float, float]:
    """``(slope, intercept, r2)`` of the least-squares line through the points; R² is 1 for
    points on a line and 0 for a line no better than their mean. Needs two distinct x, all
    finite. Computed on x and y scaled to at most 1 in size, so values near the float limits
    (1e308) give the line (or an infinite slope, where it is too steep for a float) rather
    than an overflow."""
    n = len(xs)
    if n != len(ys) or n < 2:
        raise SweepError(f"linear_fit: needs two points or more of (x, y), got {n}")
    for i, (x, y) in enumerate(zip(xs, ys)):
        if not (_real(x) and _real(y)):
            raise SweepError(f"linear_fit: point {i} is ({x!r}, {y!r}); every x and y must be "
                             "a finite number")
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    sx = max(abs(x) for x in xs) or 1.0
    sy = max(abs(y) for y in ys) or 1.0
    us, vs = [x / sx for x in xs], [y / sy for y in ys]
    mu, mv = math.fsum(us) / n, math.fsum(vs) / n
    suu = math.fsum((u - mu) ** 2 for u in us)
    if suu == 0:
        raise SweepError("linear_fit: every x is the same: a line through them has no slope")
    slope = math.fsum((u - mu) * (v - mv) for u, v in zip(us, vs)) / suu
    intercept = mv - slope * mu
    svv = math.fsum((v - mv) ** 2 for v in vs)
    resid = math.fsum((v - (intercept + slope * u)) ** 2 for u, v in zip(us, vs))
    r2 = 1.0 if svv == 0 else 1 - resid / svv
    return slope * (sy / sx), intercept * sy, r2


def _real(v) -> bool:
    """A finite real number: a Python or NumPy int or float, not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class Trend:
    """Points (x, y), their line and R²; an SVG scatter plot in a notebook."""

    def __init__(self, x: str, y: str, points: list[tuple[float, float]]):
        self.x, self.y, self.points = x, y, points
        self.slope, self.intercept, self.r2 = linear_fit([p[0] for p in points],
                                                         [p[1] for p in points])

    def __repr__(self):
        return (f"<Trend {self.y} = {self.slope:.4g} * {self.x} + {self.intercept:.4g}, "
                f"R² {self.r2:.3f}, {len(self.points)} points>")

    def _repr_html_(self) -> str:
        return self.svg()

    def svg(self, width: int = 360, height: int = 220) -> str:
        pad = 40
        xs, ys = [p[0] for p in self.points], [p[1] for p in self.points]
        line = [self.intercept + self.slope * x for x in (min(xs), max(xs))]
        drawn = all(map(math.isfinite, line))  # not a line too steep for a float
        x0, x1 = min(xs), max(xs)
        y0, y1 = min(ys + line * drawn), max(ys + line * drawn)
        y1 = y1 if y1 > y0 else y0 + 1

        def px(x):
            return pad + unit(x, x0, x1) * (width - pad - 10)

        def py(y):
            return 10 + (1 - unit(y, y0, y1)) * (height - pad - 10)
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
               f'style="width:{width}px;font:11px sans-serif" role="img" aria-label="'
               f'{esc(self.y)} against {esc(self.x)}">',
               f'<rect x="{pad}" y="10" width="{width - pad - 10}" height="{height - pad - 10}" '
               'fill="none" stroke="currentColor" stroke-opacity="0.4"/>']
        for x, y in self.points:
            out.append(f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" '
                       'fill="#1f77b4" fill-opacity="0.7"/>')
        if drawn:
            out.append(f'<line class="fit" x1="{px(x0):.1f}" y1="{py(line[0]):.1f}" '
                       f'x2="{px(x1):.1f}" y2="{py(line[1]):.1f}" stroke="#d62728" '
                       'stroke-width="1.5"/>')
        for v, anchor, xx, yy in ((y0, "end", pad - 4, py(y0)), (y1, "end", pad - 4, py(y1) + 8),
                                  (x0, "middle", px(x0), height - pad + 14),
                                  (x1, "middle", px(x1), height - pad + 14)):
            out.append(f'<text x="{xx:.1f}" y="{yy:.1f}" text-anchor="{anchor}" '
                       f'fill="currentColor">{v:.3g}</text>')
        ylabel = "time (s)" if self.y == "time" else self.y
        out.append(f'<text x="{(width + pad) / 2:.1f}" y="{height - 6}" text-anchor="middle" '
                   f'fill="currentColor">{esc(ylabel)} = {self.slope:.3g} · {esc(self.x)} + '
                   f'{self.intercept:.3g}, R² {self.r2:.3f}</text></svg>')
        return "".join(out)


def trend(sweep, x: str, y: str = "time") -> Trend:
    """``y`` against ``x`` over the sweep's trials that have both (finished or stopped ones;
    ``"time"``: training seconds from each trial's run), with its least-squares line.
    ``sweep``: a ``Sweep`` or its id."""
    from .. import runs
    from .api import Sweep

    if isinstance(sweep, str):  # NOTE: an id, as lk.sweep.get takes
        sweep = Sweep(sweep)
    if not callable(getattr(sweep, "table", None)):
        raise SweepError(f"trend: sweep must be a Sweep (lk.sweep.run's, lk.sweep.get(id)) or "
                         f"its id, got {sweep!r:.60}")
    rows = sweep.table()
    if rows and x not in rows[0]:
        raise SweepError(f"trend: no column {x!r} in the sweep's table; its columns are "
                         f"{sorted(rows[0])}")
    points = []
    for r in rows:
        if r["status"] not in ("finished", "stopped") or not _number(r.get(x)):
            continue
        if y == "time":
            progress = (runs.get(r["run_id"]) or {}).get("progress") or {}
            v = progress.get("elapsed")
        elif y in r:
            v = r[y]
        else:
            raise SweepError(f"trend: y must be 'time' or a column of the sweep's table "
                             f"{sorted(r)}, got {y!r}")
        if _number(v):
            points.append((float(r[x]), float(v)))
    if len({p[0] for p in points}) < 2:
        raise SweepError(f"trend: needs finished trials at two values of {x!r} or more, got "
                         f"{len(points)} trial(s)")
    return Trend(x, y, points)
