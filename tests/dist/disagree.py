"""Ranks that disagree by mistake, for tests/dist/test_failures.py: ``disagree.py MODE`` on 2
ranks must end with a ``DistError`` naming what differs, never hang or train on.

data: each rank draws its own random dataset (a seed per rank);
epoch: rank 1's stream has one batch fewer per epoch;
diverge: rank 1 changes a parameter after iteration 3 (its own update);
nan: rank 1's batch of iteration 2 is NaN;
fewer: a loop of one's own (DataParallel), rank 0 takes 3 steps and rank 1 takes 4;
collective: rank 0 calls a barrier in its second step that rank 1 does not;
shape: rank 1 all-reduces an array of another shape (MPI sums them into garbage, or waits);
settings: rank 1's DataParallelLoop has shard_random=False;
bucket: rank 1's DataParallelLoop has another bucket_mb.
"""

import sys

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.data import DataStream, IndexableDataset


class Shorter(DataStream):
    """A DataStream with one batch fewer per epoch."""

    def num_items(self, epoch):
        return super().num_items(epoch) - 1


def main(mode):
    comm = lk.dist.world()
    rank = comm.rank
    rng = np.random.default_rng(rank if mode == "data" else 0)
    x = rng.standard_normal((96, 8)).astype(np.float32)
    y = rng.integers(0, 3, 96)
    model = B.MLP([8, 8, 3])
    opt = lk.optimizers.Momentum(lr=0.1).setup(model)

    if mode == "shape":
        lk.dist.allreduce(np.ones(3 if rank == 0 else 100_000, np.float32))
        print(f"rank {rank} trained on", flush=True)
        return
    if mode in ("fewer", "collective"):
        dp = lk.dist.DataParallel(model)
        for step in range(3 if mode == "fewer" and rank == 0 else 4):
            if mode == "collective" and rank == 0 and step == 1:
                lk.dist.barrier()
            opt.zero_grad()
            F.softmax_cross_entropy(model(lk.tensor(x[:16])), y[:16]).backward()
            dp.synchronize()
            opt.update()
        print(f"rank {rank} trained on", flush=True)
        return

    def loss_fn(model, batch):
        xb = batch["x"]
        if mode == "nan" and rank == 1 and loop.status["iteration"] == 1:
            xb = xb * np.float32("nan")
        return F.softmax_cross_entropy(model(lk.tensor(xb)), batch["y"])

    kind = Shorter if mode == "epoch" and rank == 1 else DataStream
    stream = kind(IndexableDataset({"x": x, "y": y}), batch_size=16, shuffle=True, seed=0)
    odd = {"settings": {"shard_random": False}, "bucket": {"bucket_mb": 0.5}}
    loop = lk.dist.DataParallelLoop(model, opt, stream, loss_fn, store=False,
                                    extensions=[T.FinishAfter(iterations=10)],
                                    **(odd.get(mode, {}) if rank == 1 else {}))

    def diverge(loop):
        if mode == "diverge" and rank == 1 and loop.status["iteration"] == 3:
            W = model.linears[0].W
            W.data = W.data + 1
    loop.add(diverge, event="after_batch", priority=-100)
    loop.run()
    print(f"rank {rank} trained on", flush=True)


if __name__ == "__main__":  # NOTE: pytest's --doctest-modules imports this file too
    main(sys.argv[1])
