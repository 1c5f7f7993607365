"""Downsampling a long series for drawing without losing what matters on a plot: the first
and last points, and in each of ``(max_points - 2) // 2`` buckets of equal length its lowest and
highest values, in their order (a spike or a dip of one point survives any zoom level; an
even pick, one point in every k, would drop it)."""

from __future__ import annotations

import math


def minmax_indices(values, max_points: int) -> list[int]:
    """The indices of ``values`` (numbers; None or NaN are never chosen as extremes) to keep so
    that at most ``max_points`` (at least 2) remain, in increasing order."""
    n = len(values)
    if n <= max_points:
        return list(range(n))
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    buckets = (max_points - 2) // 2
    keep = {0, n - 1}
    inner = n - 2
    for b in range(buckets):
        lo = 1 + (b * inner) // buckets
        hi = 1 + ((b + 1) * inner) // buckets
        best_lo = best_hi = None
        for i in range(lo, hi):
            v = values[i]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            if best_lo is None or v < values[best_lo]:
                best_lo = i
            if best_hi is None or v > values[best_hi]:
                best_hi = i
        if best_lo is None and lo < hi:  # nothing but gaps: keep one, the gap shows
            best_lo = best_hi = lo
        keep.update(i for i in (best_lo, best_hi) if i is not None)
    return sorted(keep)
