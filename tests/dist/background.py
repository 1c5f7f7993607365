"""The job tests/dist/test_job.py starts from Python, as a notebook cell would: a small
DataParallelLoop that trains until it is stopped (a command through the store), each rank
printing when it pauses and resumes; ``--fail-rank R`` makes rank R raise at iteration 3;
``--iterations N`` ends it after N iterations; ``--pause-at K`` pauses it after iteration K;
``--ckpt-every K`` checkpoints every K iterations; ``--die-rank R --die-at K`` SIGKILLs rank R
after iteration K (``--die-in checkpoint``: rank 0 while its checkpoint of iteration K is not in
place yet), unless the job was resumed; ``--started FILE`` writes FILE when rank 0 has trained a
batch."""

import argparse
import os
import signal
import threading
from pathlib import Path

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.data import DataStream, IndexableDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--iterations", type=int, default=10**6)
    parser.add_argument("--pause-at", type=int, default=0)
    parser.add_argument("--ckpt-every", type=int, default=0)
    parser.add_argument("--die-rank", type=int, default=-1)
    parser.add_argument("--die-at", type=int, default=0)
    parser.add_argument("--die-in", choices=["after", "checkpoint"], default="after")
    parser.add_argument("--started")
    opts = parser.parse_args()

    comm = lk.dist.world()
    rng = np.random.default_rng(0)
    data = IndexableDataset({"x": rng.standard_normal((128, 8)).astype(np.float32),
                             "y": rng.integers(0, 3, 128)})
    model = B.MLP([8, 8, 3])
    opt = lk.optimizers.Adam(lr=1e-2).setup(model)
    stream = DataStream(data, batch_size=16, shuffle=True, seed=0)

    def loss_fn(model, batch):
        if comm.rank == opts.fail_rank and loop.status["iteration"] == 3:
            raise RuntimeError(f"rank {comm.rank} fails on purpose")
        return F.softmax_cross_entropy(model(lk.tensor(batch["x"])), batch["y"])

    def say(what):
        def report(loop):
            print(f"rank {comm.rank} {what} at iteration {loop.status['iteration']}", flush=True)
        return report

    extensions = [T.FinishAfter(iterations=opts.iterations)]
    if opts.ckpt_every:
        extensions.append(T.Checkpoint(every=opts.ckpt_every, unit="iterations"))
    loop = lk.dist.DataParallelLoop(model, opt, stream, loss_fn, name="background-dp",
                                    config={"lr": 1e-2}, extensions=extensions)

    def dying(it, where):
        return comm.rank == opts.die_rank and it == opts.die_at and opts.die_in == where \
            and not loop.status.get("resumed_from")  # NOTE: a resumed job trains on

    def chaos(loop):
        it = loop.status["iteration"]
        if opts.started and comm.rank == 0 and it == 1:
            Path(opts.started).write_text(str(os.getpid()))
        if dying(it, "after"):
            os.kill(os.getpid(), signal.SIGKILL)
    loop.add(chaos, event="after_batch", name="chaos", priority=-100)
    if opts.die_in == "checkpoint":  # rank 0, its checkpoint of --die-at written, not in place
        from labkit.checkpoint import _directory

        install = _directory._install

        def install_then_die(tmp, final, olds):
            if dying(loop.status["iteration"], "checkpoint"):
                os.kill(os.getpid(), signal.SIGKILL)
            return install(tmp, final, olds)
        _directory._install = install_then_die
    loop.add(say("paused"), event="on_pause", name="say-paused")
    loop.add(say("resumed"), event="on_unpause", name="say-resumed")
    if opts.pause_at and comm.rank == 0:
        def pause(loop):  # as the Dashboard's Pause would, from another thread
            if loop.status["iteration"] == opts.pause_at:
                t = threading.Thread(target=loop.pause)
                t.start()
                t.join()
        loop.add(pause, event="after_batch", name="pause-at")
    loop.run()
    print(f"rank {comm.rank} ended at iteration {loop.status['iteration']}", flush=True)


if __name__ == "__main__":  # NOTE: pytest's --doctest-modules imports this file too
    main()
