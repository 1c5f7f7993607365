"""Sweeps: what the machinery costs, and how fast a large sweep opens.

    python benchmarks/bench_sweep.py [--trials 20] [--epochs 2] [--big 10000]

(a) ``--trials`` short trials (an MLP on the digits) run one after another as plain loops,
then as a sweep on ``engine="local", workers=2`` (the cluster started first and timed on its
own): wall time against the ideal (the plain loops' time / workers) and the overhead per trial,
``(wall - ideal) * workers / trials``; and against the trials' own training times as
their runs recorded them in the sweep (summed, / workers): what the sweep adds around its
trials; and against the trials' wall times in the sweep (their runs' started -> ended, the
issue's "sum of trial times / workers"): the time no trial was running. On a 2-core machine
the driver shares the cores with the
two workers, so part of the overhead is that sharing.
Also: the same trials as bare loops in as many processes at once, without Dask: on a small
machine two busy processes slow each other down, a cost no scheduler removes.
(b) a store seeded with ``--big`` finished trials (written directly, no training): building
``sw.table(sort="value")`` and the view's HTML (``sw.show().html()``). Target <= 2 s.

Printed, not asserted (run it three times).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import labkit as lk  # noqa: E402
import labkit.bricks as B  # noqa: E402
import labkit.functions as F  # noqa: E402
from labkit import training as T  # noqa: E402
from labkit.data import DataStream, ScaleAndShift  # noqa: E402
from labkit.sweep import engine as E  # noqa: E402
from labkit.sweep import space as S  # noqa: E402

SPACE = {"lr": lk.sweep.loguniform(1e-3, 3e-2), "hidden": [16, 32], "epochs": 2}


def stream(split, shuffle):
    s = DataStream(lk.data.get("digits", split=split, load_in_memory=True), batch_size=64,
                   shuffle=shuffle, seed=0)
    return ScaleAndShift(s, 1 / 16, -0.5, which_sources="features")


def make_loop(config):
    model = B.Sequence(B.Flatten(), B.Linear(64, config["hidden"]), B.ReLU(),
                       B.Linear(config["hidden"], 10))
    opt = lk.optimizers.Adam(lr=config["lr"]).setup(model)

    def loss_fn(model, batch):
        logits = model(lk.tensor(batch["features"]))
        return {"loss": F.softmax_cross_entropy(logits, batch["targets"]),
                "accuracy": F.accuracy(logits, batch["targets"])}

    return T.MainLoop(model, opt, stream("train", True), loss_fn, extensions=[
        T.DataStreamMonitoring(stream("valid", False)), T.Checkpoint(keep_last=1),
        T.FinishAfter(epochs=config["epochs"])])


def _configs(trials: int, epochs: int) -> list[dict]:
    dims = S.check({**SPACE, "epochs": epochs})
    return [S.draw(dims, "random", i) for i in range(trials)]


def plain_loops(configs, directory) -> float:
    """Seconds to train ``configs`` one after another as bare loops (no store, no sweep)."""
    t = time.perf_counter()
    for i, cfg in enumerate(configs):
        loop = make_loop(dict(cfg))
        loop.recorder.enabled = False  # NOTE: a bare loop (no run store)
        loop.attach({"id": f"plain-{i}", "directory": os.path.join(directory, f"plain-{i}")})
        loop.run()  # NOTE: with its checkpoints, as a trial writes them
        loop.close()
    return time.perf_counter() - t


def concurrent_plain(trials: int, epochs: int, workers: int) -> float:
    """The machine's own ideal: ``workers`` processes each training its share of the trials as
    bare loops at the same time (no Dask); the slowest one's loop time (imports excluded)."""
    procs = [subprocess.Popen([sys.executable, __file__, "--plain-part", str(k), "--of",
                               str(workers), "--trials", str(trials), "--epochs", str(epochs)],
                              stdout=subprocess.PIPE, text=True) for k in range(workers)]
    times = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"a plain-loop process failed ({p.returncode})")
        times.append(float(out.split()[-1]))
    return max(times)


def overhead(trials: int, epochs: int, workers: int = 2) -> None:
    space = {**SPACE, "epochs": epochs}
    configs = _configs(trials, epochs)
    together = concurrent_plain(trials, epochs, workers)
    with tempfile.TemporaryDirectory() as d:
        plain = plain_loops(configs, d)
        t = time.perf_counter()
        client, close = E.connect("local", workers)
        start = time.perf_counter() - t
        try:
            t = time.perf_counter()
            sw = lk.sweep.run(make_loop, space, trials, metric="valid_accuracy", mode="max",
                              engine=client, directory=Path(d) / "runs")
            wall = time.perf_counter() - t
        finally:
            close()
        assert sw.status == "finished", sw
        # NOTE: each trial's own training time, as its run recorded it (seconds of training,
        # waits excluded), while it ran in the sweep beside the other worker
        recs = [lk.runs.get(r["run_id"]) or {} for r in sw.table()]
        own = sum((r.get("progress") or {}).get("elapsed") or 0.0 for r in recs)
        # NOTE: each trial's wall time as the store recorded it: from the driver reading that
        # its worker began it to the driver recording its result (the loop built, trained,
        # checkpointed, closed, and the messages both ways)
        spans = sum((r["ended"] - r["started"]) for r in recs
                    if r.get("ended") and r.get("started"))
    ideal = plain / workers
    print(f"  {trials} trials of {epochs} epochs: plain loops {plain:.2f} s "
          f"({plain / trials * 1e3:.0f} ms/trial); sweep on {workers} local workers "
          f"{wall:.2f} s, ideal {ideal:.2f} s: {wall / ideal:.2f}x; overhead "
          f"{(wall - ideal) * workers / trials * 1e3:.0f} ms/trial; cluster start-up "
          f"{start:.2f} s")
    print(f"  the trials' own training times in the sweep (their runs' elapsed), summed: "
          f"{own:.2f} s; / {workers} workers = {own / workers:.2f} s: the sweep's wall time is "
          f"{wall / (own / workers):.2f}x that (what the sweep adds around its trials)")
    print(f"  the trials' wall times in the sweep (their runs' started -> ended), summed: "
          f"{spans:.2f} s; / {workers} workers = {spans / workers:.2f} s: the sweep's wall time "
          f"is {wall / (spans / workers):.2f}x that (the time no trial was running)")
    print(f"  the same trials as bare loops in {workers} processes at once (no Dask): "
          f"{together:.2f} s, {together / ideal:.2f}x the ideal (what sharing the machine "
          f"costs by itself); the sweep is {wall / together:.2f}x that")


def big(n: int) -> None:
    store = lk.runs.store()
    dims = S.check({"lr": lk.sweep.loguniform(1e-4, 1e-1), "hidden": [64, 128, 256],
                    "depth": lk.sweep.range(1, 16), "dropout": lk.sweep.uniform(0, 0.5)})
    t = time.perf_counter()
    params = [S.draw(dims, "sobol", i) for i in range(n)]
    sid = store.create_sweep("big", None, S.to_json(dims),
                             {"metric": "valid_accuracy", "mode": "max", "trials": n,
                              "search": "sobol", "engine": "local"}, params)
    store.update_trials(sid, {i: {"status": "finished", "value": (i * 7919 % n) / n,
                                  "epoch": 3, "iteration": 99, "updated": 1e9 + i}
                              for i in range(n)})
    store.update_sweep(sid, status="finished", started=1e9)
    seeded = time.perf_counter() - t
    sw = lk.sweep.get(sid)
    t = time.perf_counter()
    rows = sw.table(sort="value")
    table = time.perf_counter() - t
    t = time.perf_counter()
    text = sw.show().html()
    view = time.perf_counter() - t
    assert len(rows) == n and text.count('class="trial"') > 0
    print(f"  {n} trials (seeded in {seeded:.2f} s): sw.table(sort='value') {table:.3f} s; "
          f"the view's HTML {view:.3f} s ({len(text) / 1e6:.2f} MB; target <= 2 s); "
          f"together {table + view:.3f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plain-part", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--of", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--big", type=int, default=10_000)
    args = ap.parse_args()
    if args.plain_part is not None:  # one of concurrent_plain's processes
        configs = _configs(args.trials, args.epochs)[args.plain_part::args.of]
        with tempfile.TemporaryDirectory() as d:
            plain_loops(configs[:1], d)  # NOTE: warm (imports, first kernels), not timed
            print(plain_loops(configs, d))
        return
    with tempfile.TemporaryDirectory() as d, lk.runs.use_store(Path(d) / "runs.sqlite"):
        print("sweep machinery against plain loops:")
        overhead(args.trials, args.epochs)
        if args.big:  # NOTE: --big 0 skips it
            print("a large sweep's table and view:")
            big(args.big)


if __name__ == "__main__":
    main()
