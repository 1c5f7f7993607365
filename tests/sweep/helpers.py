"""Loops the sweep tests train (importable, so workers and resumed drivers rebuild them):
small MLPs on the digits data that ship with labkit, with dropout and shuffling (so exact
resume is tested with randomness in play)."""

import os
import signal
from pathlib import Path

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.data import DataStream, ScaleAndShift


def stream(split, shuffle, batch_size=128):
    s = DataStream(lk.data.get("digits", split=split, load_in_memory=True),
                   batch_size=batch_size, shuffle=shuffle, seed=0)
    return ScaleAndShift(s, 1 / 16, -0.5, which_sources="features")


def make_loop(config):
    """``config``: lr, hidden, epochs; ``crash_at`` (an iteration) with ``crash_file``: the
    worker process dies there, once per file (``crash_always``: every time)."""
    model = B.Sequence(B.Flatten(), B.Linear(64, config.get("hidden", 16)), B.ReLU(),
                       B.Dropout(0.1), B.Linear(config.get("hidden", 16), 10))
    opt = lk.optimizers.Adam(lr=config.get("lr", 0.01)).setup(model)

    def loss_fn(model, batch):
        logits = model(lk.tensor(batch["features"]))
        return {"loss": F.softmax_cross_entropy(logits, batch["targets"]),
                "accuracy": F.accuracy(logits, batch["targets"])}

    loop = T.MainLoop(model, opt, stream("train", True), loss_fn, config=config, extensions=[
        T.DataStreamMonitoring(stream("valid", False)),
        T.Checkpoint(keep_last=2),
        T.FinishAfter(epochs=config.get("epochs", 3))])
    if config.get("crash_at"):
        loop.add(_crash(config), event="after_batch")
    return loop


def _crash(config):
    def crash(loop):
        if loop.status["iteration"] != config["crash_at"]:
            return
        marker = Path(config["crash_file"])
        if config.get("crash_always") or not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    crash.transient = True
    return crash


def broken_loop(config):
    raise ValueError(f"no such layer size {config.get('hidden')}")
