"""A small CNN on the 8x8 digits: conv 32 - conv 32 - pool - conv 64 - pool - linear 10.

    python -m labkit.models.cnn [--device cl] [--epochs 20] [--save]

trains it with the main loop (Adam, a cosine schedule, validation each epoch) and prints the
test accuracy; ``lk.models.load("cnn-digits")`` gives the shipped weights it produced.
"""

from __future__ import annotations

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T

from . import common

DEFAULTS = {"channels": 32, "dropout": 0.25, "lr": 0.003, "epochs": 20, "batch_size": 64,
            "weight_decay": 1e-4, "seed": 0, "device": "cpu"}


def pool(x):
    return F.max_pool2d(x, 2)


def build(config=None):
    """The network: logits (N, 10) from images (N, 1, 8, 8) in [0, 1]."""
    cfg = {**DEFAULTS, **(config or {})}
    c = cfg["channels"]
    return B.Sequence(
        B.Conv2D(1, c, 3, pad=1), B.ReLU(),
        B.Conv2D(c, c, 3, pad=1), B.ReLU(), pool,          # 8x8 -> 4x4
        B.Conv2D(c, 2 * c, 3, pad=1), B.ReLU(), pool,      # 4x4 -> 2x2
        B.Flatten(), B.Dropout(cfg["dropout"]), B.Linear(8 * c, 10))


def loss_fn(model, batch):
    logits = model(lk.tensor(batch["features"], device=model.device))
    y = batch["targets"]
    return {"loss": F.softmax_cross_entropy(logits, y), "accuracy": F.accuracy(logits, y)}


def make_loop(config=None, extensions=()):
    """The training run as a main loop (``T.build(make_loop, config)`` records it in the store,
    so it can be resumed and forked)."""
    cfg = {**DEFAULTS, **(config or {})}
    lk.bricks.set_seed(cfg["seed"])
    model = build(cfg).to(cfg["device"])
    steps = cfg["epochs"] * -(-1297 // cfg["batch_size"])
    opt = lk.optimizers.chain(
        lk.optimizers.WeightDecay(cfg["weight_decay"]),
        lk.optimizers.Adam(lr=lk.optimizers.Cosine(cfg["lr"], total=steps))).setup(model)
    train = common.digits("train", cfg["batch_size"], shuffle=True, seed=cfg["seed"])
    return T.MainLoop(model, opt, train, loss_fn, name="cnn-digits", config=cfg, extensions=[
        T.TrainingDataMonitoring(), T.DataStreamMonitoring(common.digits("valid", 200)),
        T.FinishAfter(epochs=cfg["epochs"]), *extensions])


def train(config=None):
    """Train; return the model and its results (test accuracy on the 300 test images)."""
    loop = make_loop(config, extensions=[T.Printing(every=5)])
    loop.run()
    loop.close()
    return loop.model, {"test_accuracy": common.accuracy(loop.model),
                        "valid_accuracy": loop.log.last("valid_accuracy")}


if __name__ == "__main__":
    raise SystemExit(common.main("cnn", train, DEFAULTS))
