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
    """``config``: lr, hidden, epochs; ``crash``: "once" or "always" with ``crash_at`` (an
    iteration) and ``crash_dir``: the worker process dies there (once: the first time)."""
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
    if config.get("gate"):  # wait there, before epoch 2, until the test opens the gate
        loop.add(_gate(config["gate"]), event="before_epoch").transient = True
    if config.get("crash") in ("once", "always"):
        loop.add(_crash(config), event="after_batch").transient = True  # not in checkpoints
    return loop


def _crash(config):
    def crash(loop):
        if loop.status["iteration"] != config["crash_at"]:
            return
        marker = Path(config["crash_dir"]) / config["crash"]
        if config["crash"] == "always" or not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    return crash


def _gate(name):
    def gate(loop):
        if loop.status["epoch"] == 1:
            from distributed import Event

            assert Event(name).wait(60), "the test never opened the gate"
    return gate


def broken_loop(config):
    raise ValueError(f"no such layer size {config.get('hidden')}")


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("cannot pickle this")


class TwoArgs(Exception):
    """Pickles, but cannot be rebuilt from its args (one message for two parameters)."""

    def __init__(self, a, b):
        super().__init__(f"two args {a} {b}")


def odd_loop(config):
    """make_loop's loop, changed by ``config["kind"]``: "nometric" reports no valid_accuracy,
    "nan" reports it as NaN, "exit" calls sys.exit(3) in training, "ok" is make_loop's."""
    import math
    import sys

    kind = config.get("kind", "ok")
    if kind == "exit_in_make_loop":
        sys.exit(4)
    if kind == "kbint_in_make_loop":
        raise KeyboardInterrupt
    if kind == "unpicklable_in_make_loop":
        raise Unpicklable("not sent as it is")
    loop = make_loop(config)
    if kind == "nometric":
        loop.remove(next(e for e in loop.extensions
                         if isinstance(e, T.DataStreamMonitoring)))
    elif kind == "nan":
        loop.add(lambda lp: lp.log.report(valid_accuracy=math.nan),
                 event="after_epoch", priority=-10).transient = True
    elif kind == "exit":
        loop.add(lambda lp: sys.exit(3), event="after_batch").transient = True
    elif kind == "two_args":
        def two(lp):
            raise TwoArgs(3, 4)
        loop.add(two, event="after_batch").transient = True
    elif kind == "kbint":
        def interrupt(lp):
            raise KeyboardInterrupt
        loop.add(interrupt, event="after_batch").transient = True
    return loop
