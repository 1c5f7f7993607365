"""The main loop's overhead per batch against a hand-written loop over the same step, and
checkpoint save/load of a 100 MB model against a plain file write/read of the same bytes (and
safetensors' and PyTorch's own save/load), in one run.

    python benchmarks/bench_training.py

Targets: loop overhead <= 5%; checkpoint save and load <= 1.5x the plain file.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import checkpoint
from labkit import training as T
from labkit.data import DataStream, IndexableDataset

try:
    import torch
except ImportError:
    torch = None


def digits_like(n=2048):
    rng = np.random.default_rng(0)
    return IndexableDataset({"features": rng.standard_normal((n, 64)).astype(np.float32),
                             "targets": rng.integers(0, 10, n)})


def setup(seed=0):
    lk.bricks.set_seed(seed)
    model = B.MLP([64, 128, 10])
    opt = lk.optimizers.Adam(1e-3).setup(model)
    stream = DataStream(digits_like(), batch_size=64, shuffle=True, seed=1)

    def loss_fn(model, batch):
        return F.softmax_cross_entropy(model(lk.tensor(batch["features"])), batch["targets"])
    model(lk.tensor(np.zeros((1, 64), np.float32)))
    return model, opt, stream, loss_fn


def hand_written(batches):
    model, opt, stream, loss_fn = setup()
    t = time.perf_counter()
    done = 0
    while done < batches:
        for batch in stream:
            opt.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            opt.update()
            loss.item()
            done += 1
            if done == batches:
                break
    return (time.perf_counter() - t) / batches


def main_loop(batches, store):
    model, opt, stream, loss_fn = setup()
    loop = T.MainLoop(model, opt, stream, loss_fn, extensions=[T.FinishAfter(iterations=batches)],
                      store=store)
    t = time.perf_counter()
    loop.run()
    return (time.perf_counter() - t) / batches


def checkpoint_bench(tmp: Path, reps=5):
    rng = np.random.default_rng(0)
    state = {f"layer{i}.W": rng.standard_normal((1000, 2500)).astype(np.float32)
             for i in range(10)}  # 10 x 10 MB = 100 MB
    raw = b"".join(memoryview(v).cast("B") for v in state.values())
    res = {k: [] for k in ("save", "load", "write", "read", "st_save", "st_load", "pt_save",
                           "pt_load")}
    from safetensors.numpy import load_file, save_file

    for r in range(reps):
        t = time.perf_counter()
        p = checkpoint.save(tmp / "ck", state, iteration=r)
        res["save"].append(time.perf_counter() - t)
        t = time.perf_counter()
        checkpoint.load(p)
        res["load"].append(time.perf_counter() - t)
        f = tmp / f"plain{r}.bin"
        t = time.perf_counter()
        with open(f, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        res["write"].append(time.perf_counter() - t)
        t = time.perf_counter()
        f.read_bytes()
        res["read"].append(time.perf_counter() - t)
        t = time.perf_counter()
        save_file(state, str(tmp / f"st{r}.safetensors"))
        res["st_save"].append(time.perf_counter() - t)
        t = time.perf_counter()
        load_file(str(tmp / f"st{r}.safetensors"))
        res["st_load"].append(time.perf_counter() - t)
        if torch is not None:
            ts = {k: torch.from_numpy(v) for k, v in state.items()}
            t = time.perf_counter()
            torch.save(ts, tmp / f"pt{r}.pt")
            res["pt_save"].append(time.perf_counter() - t)
            t = time.perf_counter()
            torch.load(tmp / f"pt{r}.pt", weights_only=True)
            res["pt_load"].append(time.perf_counter() - t)
        for old in (f, tmp / f"st{r}.safetensors", tmp / f"pt{r}.pt"):
            old.unlink(missing_ok=True)
        checkpoint.remove(p)
    return {k: statistics.median(v) * 1e3 if v else float("nan") for k, v in res.items()}


def main():
    print(f"labkit {lk.__version__}; PyTorch {torch.__version__ if torch else 'not installed'}\n")
    n = 2000  # about 0.7 s: the run's fixed costs (creating it in the store) are amortized
    hand_written(50)
    times = {"hand": [], "quiet": [], "stored": []}
    with tempfile.TemporaryDirectory() as tmp, lk.runs.use_store(Path(tmp) / "runs.sqlite"):
        for _ in range(7):  # interleaved, so drifts in the machine's speed hit all three
            times["hand"].append(hand_written(n))
            times["quiet"].append(main_loop(n, store=False))
            times["stored"].append(main_loop(n, store=True))
    # NOTE: the minimum: on this noisy 2-core machine medians of one run vary by +-5%
    hand, quiet, stored = (min(times[k]) for k in ("hand", "quiet", "stored"))
    print(f"MLP 64-128-10 Adam step, batch 64, {n} batches, best of 7 interleaved runs:")
    print(f"  hand-written loop          {hand * 1e3:7.3f} ms/batch")
    print(f"  MainLoop, no run store     {quiet * 1e3:7.3f} ms/batch  overhead "
          f"{(quiet / hand - 1) * 100:+5.1f}%  (target <= 5%)")
    print(f"  MainLoop with the run store {stored * 1e3:6.3f} ms/batch  overhead "
          f"{(stored / hand - 1) * 100:+5.1f}%")
    with tempfile.TemporaryDirectory() as tmp:
        r = checkpoint_bench(Path(tmp))
    print("\ncheckpoint of a 100 MB model (10 float32 arrays), median of 5:")
    print(f"  labkit save (atomic, fsync, CRC-32)  {r['save']:6.0f} ms   plain write+fsync "
          f"{r['write']:5.0f} ms   ratio {r['save'] / r['write']:.2f}  (target <= 1.5)")
    print(f"  labkit load (checked)                {r['load']:6.0f} ms   plain read        "
          f"{r['read']:5.0f} ms   ratio {r['load'] / r['read']:.2f}  (target <= 1.5)")
    print(f"  safetensors save_file / load_file    {r['st_save']:6.0f} / {r['st_load']:.0f} ms")
    print(f"  torch.save / torch.load              {r['pt_save']:6.0f} / {r['pt_load']:.0f} ms")


if __name__ == "__main__":
    main()
