"""One rank of the data-parallel tests (run by tests/dist under mpiexec, or alone).

    python -m mpi4py worker.py OUT_DIR --model mlp --steps 20 [--ckpt-every 5 --die-at 8]
                               [--resume CKPT] [--fail-rank 1 --fail-at 3] [--bucket-mb 0.001]

``--die-at K`` SIGKILLs a rank (``--die-rank``, default the last) at iteration K: after the
batch (``--die-in after``), inside the step before backward (``step``), while it waits for a
gradient bucket's all-reduce (``allreduce``), or, on rank 0, inside the checkpoint it writes at
K, before the checkpoint is renamed into place (``checkpoint``).

Writes OUT_DIR/rank<R>.npz: the CRC-32 of the parameters after each step, this rank's sample
indices per step, its losses and the final parameters (NumPy's npz: arrays only, no pickle).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import zlib
from pathlib import Path

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit.bricks.initializers import Constant
from labkit.data import DataStream, IndexableDataset

N_EXAMPLES, BATCH, FEATURES, CLASSES = 96, 16, 8, 4


class Tied(B.Brick):
    """One Linear applied twice (a parameter shared between layers) and, with ``spare``, a
    parameter no step uses."""

    def __init__(self, spare=False, extra=0, seed=None):
        super().__init__("tied", seed)
        self.add_child(B.Linear(FEATURES, FEATURES), "enc")
        self.add_child(B.Linear(FEATURES + extra, CLASSES), "head")
        self.extra = extra
        if spare:
            self.add_param("spare", (5,), Constant(0.5))

    def forward(self, x):
        h = F.relu(self.enc(x))
        h = F.tanh(self.enc(h))
        if self.extra:
            h = F.concat([h, h[:, :self.extra]], axis=1)
        return self.head(h)


def dataset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N_EXAMPLES, FEATURES)).astype(np.float32)
    y = (x[:, :CLASSES].argmax(axis=1)).astype(np.int32)
    return IndexableDataset({"x": x, "y": y, "index": np.arange(N_EXAMPLES)})


def build(kind: str, seed: int, rank: int = 0):
    B.set_seed(seed)  # NOTE: child bricks draw their seeds from this, not the parent's seed
    if kind == "mlp":
        model = B.MLP([FEATURES, 16, CLASSES], seed=seed)
    elif kind == "tied":
        model = Tied(spare=True, seed=seed)
    elif kind == "mismatch":  # rank 1 builds a different head
        model = Tied(extra=1 if rank == 1 else 0, seed=seed)
    elif kind == "dropout":  # a Dropout brick's generator and F.dropout's default one
        model = B.Sequence(B.Linear(FEATURES, 16), F.relu, B.Dropout(0.3),
                           lambda h: F.dropout(h, 0.2), B.Linear(16, CLASSES))
    elif kind in ("bn", "syncbn"):
        model = B.Sequence(B.Linear(FEATURES, 16), B.BatchNorm(16), F.relu,
                           B.Linear(16, CLASSES))
        if kind == "syncbn":  # the same parameters, normalized by the global batch
            lk.dist.convert_sync_batchnorm(model)
    else:
        raise SystemExit(f"unknown model {kind}")
    model(lk.tensor(np.zeros((2, FEATURES), np.float32)))
    return model


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--die-at", type=int, default=0)
    ap.add_argument("--die-rank", type=int, default=-1)
    ap.add_argument("--die-in", default="after",
                    choices=["after", "step", "allreduce", "checkpoint"])
    ap.add_argument("--resume")
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-at", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--progress-thread", action="store_true")
    ap.add_argument("--sigint-rank", type=int, default=-1)
    ap.add_argument("--sigint-at", type=int, default=0)
    ap.add_argument("--stop-thread-at", type=int, default=0)
    ap.add_argument("--pause-at", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args(argv)
    comm = lk.dist.world()
    out = Path(a.out)
    dying = comm.rank == (a.die_rank if a.die_rank >= 0 else comm.size - 1) and a.die_at > 0

    def die(where):
        if dying and a.die_in == where:
            os.kill(os.getpid(), signal.SIGKILL)
    # NOTE: each rank starts from other parameters: the loop must broadcast rank 0's
    model = build(a.model, seed=1 + comm.rank, rank=comm.rank).to(a.device)
    opt = lk.optimizers.Momentum(lr=0.1, momentum=0.9).setup(model)
    stream = DataStream(dataset(), batch_size=BATCH, shuffle=True, seed=3 + comm.rank)
    crcs, indices, losses, first_buffers = [], [], [], {}

    def loss_fn(model, batch):
        if not a.compile:  # NOTE: lk.compile refuses a step that grows a list (a replay would not)
            indices.append(np.array(batch["index"]))
        x, y = lk.tensor(batch["x"], device=a.device), lk.tensor(batch["y"], device=a.device)
        return F.softmax_cross_entropy(model(x), y)

    if dying and a.die_in == "step":  # NOTE: a step of its own (lk.compile guards what it reads)
        plain_loss = loss_fn

        def loss_fn(model, batch):
            if loop.status["iteration"] == a.die_at - 1:
                die("step")
            return plain_loss(model, batch)

    loop = lk.dist.DataParallelLoop(model, opt, stream, loss_fn, bucket_mb=a.bucket_mb,
                                    progress_thread=a.progress_thread, store=False,
                                    compile=a.compile)

    if dying and a.die_in == "allreduce":  # in the wait for a gradient bucket of step K
        wait = comm.wait

        def wait_then_die(requests, op="allreduce", detail=-1):
            if op == "gradient bucket" and loop.status["iteration"] == a.die_at - 1:
                die("allreduce")
            return wait(requests, op, detail)
        comm.wait = wait_then_die
    if dying and a.die_in == "checkpoint":  # the checkpoint of iteration K is half written
        from labkit.checkpoint import _directory

        install = _directory._install

        def install_then_die(tmp, final, olds):
            if final.name == f"ckpt-{a.die_at:08d}":
                die("checkpoint")
            return install(tmp, final, olds)
        _directory._install = install_then_die

    def record(loop):
        it = loop.status["iteration"]
        if it == a.fail_at and comm.rank == a.fail_rank:
            raise RuntimeError(f"rank {comm.rank} fails on purpose at iteration {it}")
        crc = 0
        for p in opt.params.values():
            crc = zlib.crc32(np.ascontiguousarray(p.numpy()), crc)
        crcs.append(crc)
        losses.append(loop.log.rows[-1]["loss"])
        if not first_buffers:
            first_buffers.update({k: np.array(v) for k, v in model.state_dict().items()
                                  if k in model.buffers()})
        if a.ckpt_every and it % a.ckpt_every == 0:
            loop.save_checkpoint(out / "ckpt")
        if it == a.die_at:
            die("after")
        if it == a.sigint_at and comm.rank == a.sigint_rank:  # Ctrl-C on this rank only
            os.kill(os.getpid(), signal.SIGINT)
        if it == a.stop_thread_at and comm.rank == 0:  # as the run store's listener would
            in_thread(loop.stop, "asked from another thread")
        if it == a.pause_at and comm.rank == 0:
            in_thread(loop.pause)

    def in_thread(fn, *args):
        t = threading.Thread(target=fn, args=args)
        t.start()
        t.join()

    def on_pause(loop):  # every rank pauses; rank 0 is asked for a checkpoint, then resumed
        paused.append(loop.status["iteration"])
        if comm.rank == 0:
            in_thread(loop.request_checkpoint)
            in_thread(loop.resume)

    paused = []
    loop.add(on_pause, event="on_pause")

    loop.add(record, event="after_batch", priority=-100)
    if a.resume:
        loop.load_checkpoint(a.resume)
    first = loop.status["iteration"]
    loop.run(max_iterations=a.steps - first)
    np.savez(out / f"rank{comm.rank}.npz", crc=np.array(crcs, np.uint32),
             stopped=np.array(str(loop.stop_reason)), paused=np.array(paused, np.int64),
             last_ckpt=np.array(str(loop.last_checkpoint)),
             indices=np.array(indices), loss=np.array(losses), first=first,
             replays=np.array(loop.compiled.stats["replays"] if loop.compiled else 0),
             **{f"param:{k}": p.numpy() for k, p in opt.params.items()},
             **{f"buffer1:{k}": v for k, v in first_buffers.items()},
             **{f"buffer:{k}": np.array(v) for k, v in model.state_dict().items()
                if k in model.buffers()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
