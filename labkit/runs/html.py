"""What labkit's own HTML and SVG (the sweep view, the Dashboard's static copy, a sweep's trend
plot, GraphView's details) need: ``esc`` for every name and value shown (one rule for all), and
``unit`` and ``lerp`` to place any number on an axis: every finite float, 1e20 and ±1e308.

NOTE: ``hi - lo`` overflows to inf for ±1e308, and ``lo - 0.5``, ``hi + 0.5`` (the widening of
an axis whose values are all one) is ``lo`` again from about 1e16 up, which left nothing to
divide by: a sweep whose only value was 1e20 raised ZeroDivisionError instead of showing."""

from __future__ import annotations

import html

from .checks import printable

#: the most characters of one name or value shown; the rest is cut (a sweep's choice, a metric
#: key or a brick name can be any length, and each is shown in every row that has it)
LIMIT = 200


def esc(value, limit: int | None = LIMIT) -> str:
    """``value`` as HTML text, also inside a quoted attribute: control and format characters
    (NUL, escape sequences, bidi overrides that would reverse the text after them, line
    separators) become visible escapes like ``\\u202e`` (``printable``, as the CLI shows
    them), at most ``limit`` characters are kept (the last one "…"), then ``& < > " '`` are
    escaped."""
    text = printable(value)
    if limit is not None and len(text) > limit:
        text = text[:max(limit - 1, 0)] + "…"
    return html.escape(text, quote=True)


def unit(v: float, lo: float, hi: float) -> float:
    """Where ``v`` sits from ``lo`` (0) to ``hi`` (1); 0.5 where ``lo`` and ``hi`` are one
    value (or not numbers). Halved before subtracting: no finite floats overflow."""
    span = hi / 2 - lo / 2
    return (v / 2 - lo / 2) / span if span > 0 else 0.5


def lerp(t: float, lo: float, hi: float) -> float:
    """The value a fraction ``t`` of the way from ``lo`` to ``hi`` (without ``hi - lo``)."""
    return lo * (1 - t) + hi * t
