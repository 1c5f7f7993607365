"""The data pipeline's throughput with 0, 1 and 2 worker processes, beside PyTorch's DataLoader
over the same file and transforms, the cost of restoring a state mid-epoch, and the rate an MLP
training step consumes batches (does the pipeline keep up?).

    python benchmarks/bench_data.py

Workers are warmed up (started, first batch) before timing; compare ratios within one run.
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
from labkit.data import (
    DataStream,
    H5Dataset,
    Normalize,
    Parallel,
    RandomCrop,
    RandomFlip,
    ScaleAndShift,
    write_h5,
)

try:
    import torch
    import torch.utils.data as tud
except ImportError:
    torch = None


def rate(stream, n_batches: int, warm: int = 6) -> float:
    """Batches per second over ``n_batches``, after ``warm`` batches (every worker started and
    has delivered)."""
    it = _forever(stream)
    for _ in range(warm):
        next(it)
    t = time.perf_counter()
    for _ in range(n_batches):
        next(it)
    return n_batches / (time.perf_counter() - t)


def _forever(stream):
    while True:
        yield from stream


def digits_pipeline(workers):
    ds = lk.data.get("digits", split="train")
    s = DataStream(ds, batch_size=128, shuffle=True, seed=0)
    return Parallel(Normalize(s, 4.9, 6.0, which_sources="features"), workers=workers)


def image_file(tmp: Path) -> Path:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (60_000, 1, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 60_000)
    return write_h5(tmp / "images.h5", {"features": x, "targets": y}, {"train": (0, 60_000)})


def image_pipeline(path, workers, in_memory=False):
    ds = H5Dataset(path, load_in_memory=in_memory)
    s = DataStream(ds, batch_size=128, shuffle=True, seed=0)
    s = ScaleAndShift(RandomFlip(RandomCrop(s, 24, seed=1), seed=2), 1 / 255, -0.5,
                      which_sources="features")
    return Parallel(s, workers=workers)


if torch is not None:
    class TorchImages(tud.Dataset):
        """The same work for DataLoader: one shuffled batch of indices per item."""

        def __init__(self, path, batch_size=128):
            self.path, self.batch_size, self.f = path, batch_size, None
            self.perm = np.random.default_rng(0).permutation(60_000)

        def __len__(self):
            return 60_000 // self.batch_size

        def __getitem__(self, k):
            import h5py

            if self.f is None:
                self.f = h5py.File(self.path, "r")
            idx = np.sort(self.perm[k * self.batch_size:(k + 1) * self.batch_size])
            x = self.f["features"][idx]
            g = np.random.default_rng(k)
            oy, ox = g.integers(0, 5, 128), g.integers(0, 5, 128)
            win = np.lib.stride_tricks.sliding_window_view(x, (24, 24), axis=(-2, -1))
            x = win[np.arange(128), :, oy, ox]
            flip = g.random(128) < 0.5
            x[flip] = x[flip][..., ::-1]
            return torch.from_numpy(x.astype(np.float32) / 255 - 0.5), torch.from_numpy(
                self.f["targets"][idx])


def torch_rate(path, workers, n_batches):
    loader = tud.DataLoader(TorchImages(path), batch_size=None, shuffle=False,
                            num_workers=workers, prefetch_factor=2 if workers else None,
                            persistent_workers=bool(workers))
    return rate(loader, n_batches)


def mlp_steps_per_second(device, reps=30):
    lk.bricks.set_seed(0)
    model = B.Sequence(B.Flatten(), B.MLP([576, 256, 10])).to(device)
    x = lk.tensor(np.random.default_rng(0).standard_normal((128, 1, 24, 24), dtype=np.float32),
                  device=device)
    y = np.random.default_rng(1).integers(0, 10, 128)
    model(x)
    opt = lk.optimizers.Adam(1e-3).setup(model)

    def step():
        opt.zero_grad()
        loss = F.softmax_cross_entropy(model(x), y)
        loss.backward()
        opt.update()
        return loss.item()

    step()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t)
    return 1 / statistics.median(ts)


def restore_ms(path):
    s = image_pipeline(path, 0)
    n = s.num_items(0)
    it = iter(s)
    for _ in range(3):
        next(it)
    state = s.state_dict()
    state["position"] = n - 20
    fresh = image_pipeline(path, 0)
    t = time.perf_counter()
    fresh.load_state_dict(state)
    next(iter(fresh))
    far = time.perf_counter() - t
    other = image_pipeline(path, 0)
    t = time.perf_counter()
    next(iter(other))
    first = time.perf_counter() - t
    return far * 1e3, first * 1e3, n


def main():
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"labkit {lk.__version__}; cores: {os.cpu_count()}; "
          f"PyTorch: {torch.__version__ if torch else 'not installed'}\n")
    print(f"{'pipeline':44s} {'workers':>7s} {'labkit b/s':>11s} {'DataLoader b/s':>15s} "
          f"{'ratio':>6s}")
    for w in (0, 1, 2):
        with digits_pipeline(w) as s:
            r = rate(s, 60)
        print(f"{'digits -> normalize -> batch 128':44s} {w:7d} {r:11.0f} {'':>15s}")
    with tempfile.TemporaryDirectory() as tmp:
        path = image_file(Path(tmp))
        mb = path.stat().st_size / 1e6
        for w in (0, 1, 2):
            with image_pipeline(path, w) as s:
                r = rate(s, 80)
            tr = torch_rate(path, w, 80) if torch else float("nan")
            print(f"{f'60k x 28x28 HDF5 ({mb:.0f} MB): crop 24 + flip':44s} {w:7d} {r:11.0f} "
                  f"{tr:15.0f} {r / tr:6.2f}")
        with image_pipeline(path, 0, in_memory=True) as s:
            r = rate(s, 80)
        print(f"{'  same, load_in_memory=True':44s} {0:7d} {r:11.0f}")
        far, first, n = restore_ms(path)
        print(f"\nrestore at batch {n - 20} of {n} and read it: {far:.1f} ms "
              f"(the first batch of a fresh stream: {first:.1f} ms)")
    print("\nMLP 576-256-10 Adam step, batch 128 (what the pipeline must keep up with):")
    for dev in ("cpu", "cl"):
        print(f"  {dev}: {mlp_steps_per_second(dev):.0f} steps/s")


if __name__ == "__main__":
    main()
