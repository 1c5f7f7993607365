"""The run store at scale, in one run: a series of 1,000,000 points downsampled to 2,000 for a
plot (from its summary blocks, ``labkit/runs/blocks.py``) against reading every row and
downsampling in Python (what labkit did before), and the incremental read a live plot makes.

    python benchmarks/bench_runs.py [--points 1000000]

Target: <= 200 ms for 1,000,000 points. Printed, not asserted (run it three times).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

from labkit.runs.downsample import minmax_indices
from labkit.runs.store import RunStore


def timed(fn, n=5):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out), min(out), max(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.points
    with tempfile.TemporaryDirectory() as d:
        s = RunStore(Path(d) / "runs.sqlite")
        rid = s.create_run("big")
        t = time.perf_counter()
        chunk = 50_000
        for a in range(1, n + 1, chunk):  # as a recorder writes it: in batches
            s.add_metrics(rid, [(i, i // 1000, "loss", math.exp(-i / (n / 3)) + (i % 7) * 0.01,
                                 0.0) for i in range(a, min(n + 1, a + chunk))])
        print(f"{n:,} points written in {time.perf_counter() - t:.1f} s (with their blocks)")
        c = s._conn()

        def rows_then_python():
            rows = c.execute("SELECT iteration, epoch, value, time FROM metrics WHERE run_id = ? "
                             "AND key = 'loss' ORDER BY iteration", (rid,)).fetchall()
            return [rows[i] for i in minmax_indices([r[2] for r in rows], 2000)]

        def blocks():
            return s.metrics(rid, ["loss"], max_points=2000)

        def live_tail():
            return s.metrics(rid, ["loss"], since_iteration=n - 250, max_points=8000)

        assert len(blocks()["loss"]["iteration"]) <= 2000
        for name, fn in (("every row, downsampled in Python", rows_then_python),
                         ("from the blocks (labkit)", blocks),
                         ("a live plot's next read (250 new points)", live_tail)):
            med, lo, hi = timed(fn)
            print(f"  {name:42s} {1000 * med:8.1f} ms  ({1000 * lo:.1f}-{1000 * hi:.1f})")
        r = timed(rows_then_python)[0] / timed(blocks)[0]
        print(f"  blocks are {r:.0f}x faster; target <= 200 ms for {n:,} points")


if __name__ == "__main__":
    main()
