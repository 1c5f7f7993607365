"""What labkit's own HTML and SVG (the sweep view, the Dashboard's static copy, a sweep's trend
plot) need to place any number on an axis: every finite float, 1e20 and ±1e308 included.

NOTE: ``hi - lo`` overflows to inf for ±1e308, and ``lo - 0.5``, ``hi + 0.5`` (the widening of
an axis whose values are all one) is ``lo`` again from about 1e16 up, which left nothing to
divide by: a sweep whose only value was 1e20 raised ZeroDivisionError instead of showing."""

from __future__ import annotations


def unit(v: float, lo: float, hi: float) -> float:
    """Where ``v`` sits from ``lo`` (0) to ``hi`` (1); 0.5 where ``lo`` and ``hi`` are one
    value (or not numbers). Halved before subtracting: no finite floats overflow."""
    span = hi / 2 - lo / 2
    return (v / 2 - lo / 2) / span if span > 0 else 0.5


def lerp(t: float, lo: float, hi: float) -> float:
    """The value a fraction ``t`` of the way from ``lo`` to ``hi`` (without ``hi - lo``)."""
    return lo * (1 - t) + hi * t
