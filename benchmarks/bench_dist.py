"""Data-parallel training step at 1 and 2 MPI ranks with the same per-rank batch (weak scaling),
one BLAS thread per rank: per-step time, scaling efficiency, the all-reduce's cost, and how much
of it backward hides.

    python benchmarks/bench_dist.py [--steps 30] [--models mlp,cnn,lstm] [--bucket-mb 1]

Printed per model: the step in one process (no lk.dist), the step of 2 ranks that never
communicate (what sharing cores and memory costs alone), the step at 2 ranks, efficiency
(1-rank step / 2-rank step: 100% when communication costs nothing), the all-reduce of all the
model's buckets timed alone (blocking, no compute to hide behind), the wait left at the end of
backward (``synchronize()``), and overlap = 1 - wait / all-reduce alone. Target (issue 20):
>= 90% efficiency at 2 ranks where compute dominates (CNN, LSTM).

Run with ``--rank-job MODEL`` it is one rank of the job (the driver starts those through
``mpiexec -n N python -m mpi4py``) and prints one JSON line from rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F

#: model -> (per-rank batch, input shape, classes)
SHAPES = {"mlp": (128, (784,), 10), "cnn": (64, (1, 28, 28), 10), "lstm": (32, (20, 32), 10)}


class _LastStep(B.Brick):
    def __init__(self):
        super().__init__("lstm_net")
        self.add_child(B.LSTM(32, 128), "rnn")
        self.add_child(B.Linear(128, 10), "head")

    def forward(self, x):
        h = self.rnn(x)
        return self.head(h[:, -1])


def build(kind):
    lk.bricks.set_seed(0)
    if kind == "mlp":
        return B.MLP([784, 512, 512, 10])
    if kind == "cnn":
        return B.Sequence(B.Conv2D(1, 16, 3, pad=1), B.ReLU(), lambda x: F.max_pool2d(x, 2),
                          B.Conv2D(16, 32, 3, pad=1), B.ReLU(), lambda x: F.max_pool2d(x, 2),
                          B.Flatten(), B.Linear(32 * 7 * 7, 128), B.ReLU(), B.Linear(128, 10))
    return _LastStep()


def rank_job(kind, steps, bucket_mb, with_dp, progress=False):
    batch, shape, classes = SHAPES[kind]
    comm = lk.dist.world() if with_dp else None
    rng = np.random.default_rng(comm.rank if comm else 0)
    x = lk.tensor(rng.standard_normal((batch, *shape)).astype(np.float32))
    y = rng.integers(0, classes, batch)
    model = build(kind)
    model(x)
    opt = lk.optimizers.Momentum(lr=0.01).setup(model)
    dp = lk.dist.DataParallel(opt.params, comm=comm, bucket_mb=bucket_mb,
                              progress_thread=progress) if with_dp else None
    times, waits = [], []
    for i in range(steps + 5):
        t = time.perf_counter()
        opt.zero_grad()
        loss = F.softmax_cross_entropy(model(x), y)
        loss.backward()
        if dp is not None:
            dp.synchronize()
        opt.update()
        loss.item()
        if i >= 5:
            times.append(time.perf_counter() - t)
            waits.append(dp.stats["wait"] if dp else 0.0)
    out = {"step": statistics.median(times), "wait": statistics.median(waits)}
    if dp is not None:
        comm.barrier()
        alone = []
        for _ in range(steps):
            t = time.perf_counter()
            reqs = [comm.iallreduce_sum(b.buffer, b.index) for b in dp.buckets]
            comm.wait([r for r in reqs if r is not None])
            alone.append(time.perf_counter() - t)
        out["allreduce"] = statistics.median(alone)
        out["buckets"] = len(dp.buckets)
        out["mib"] = sum(b.buffer.nbytes for b in dp.buckets) / 2 ** 20
        if comm.rank != 0:
            return
    elif os.environ.get("PMI_RANK", "0") != "0":  # ranks without lk.dist: rank 0 reports
        return
    print(json.dumps(out), flush=True)


def run(n, kind, steps, bucket_mb, extra=(), dp=True):
    from labkit.dist.launch import command, environment

    extra = list(extra)
    args = ["--rank-job", kind, "--steps", steps, "--bucket-mb", bucket_mb] + extra
    here = Path(__file__)
    if n > 1:
        cmd = command(n, here, args + (["--dp"] if dp else []))
    else:
        cmd = [sys.executable, str(here), *map(str, args)]
    out = subprocess.run(cmd, env=environment(1), capture_output=True, text=True, timeout=600,
                         start_new_session=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} on {n} ranks failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank-job")
    ap.add_argument("--dp", action="store_true")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    ap.add_argument("--models", default="mlp,cnn,lstm")
    ap.add_argument("--progress", action="store_true",
                    help="DataParallel(progress_thread=True): a thread keeps all-reduces moving "
                    "during backward's NumPy calls")
    a = ap.parse_args()
    if a.rank_job:
        return rank_job(a.rank_job, a.steps, a.bucket_mb, a.dp, a.progress)
    print(f"data-parallel step, same per-rank batch, 1 BLAS thread per rank, bucket "
          f"{a.bucket_mb:g} MiB, median of {a.steps} steps, progress thread "
          f"{'on' if a.progress else 'off'}")
    print("  alone: 2 ranks that never communicate (what sharing the machine costs by itself)")
    print(f"{'model':6} {'batch/rank':>10} {'grads':>8} {'1 rank':>9} {'alone':>9} "
          f"{'2 ranks':>9} {'effic.':>7} {'allreduce':>10} {'wait':>8} {'overlap':>8}")
    for kind in a.models.split(","):
        one = run(1, kind, a.steps, a.bucket_mb)
        alone = run(2, kind, a.steps, a.bucket_mb, dp=False)
        two = run(2, kind, a.steps, a.bucket_mb, ["--progress"] if a.progress else [])
        eff = one["step"] / two["step"]
        overlap = max(0.0, 1 - two["wait"] / two["allreduce"]) if two["allreduce"] else 0.0
        print(f"{kind:6} {SHAPES[kind][0]:>10} {two['mib']:>6.2f}MB {one['step'] * 1e3:>7.2f}ms "
              f"{alone['step'] * 1e3:>7.2f}ms {two['step'] * 1e3:>7.2f}ms {eff:>6.0%} "
              f"{two['allreduce'] * 1e3:>8.2f}ms {two['wait'] * 1e3:>6.2f}ms {overlap:>7.0%}"
              f"   ({two['buckets']} buckets)")


if __name__ == "__main__":
    main()
