"""A small ResNet on the 8x8 digits, trained with random shifts of up to one pixel:
conv 3x3 (24) - BN - ReLU, residual blocks of 24, 48 (stride 2) and 48 channels, global
average pool, linear 10.

    python -m labkit.models.resnet [--device cl] [--epochs 30] [--save]

prints the test accuracy; ``lk.models.load("resnet-digits")`` gives the shipped weights.
"""

from __future__ import annotations

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.data import Mapping, RandomCrop

from . import common

DEFAULTS = {"width": 24, "lr": 0.003, "epochs": 30, "batch_size": 64, "weight_decay": 5e-4,
            "seed": 0, "device": "cpu"}


def global_pool(x):
    return F.mean(x, axis=(2, 3))


def build(config=None):
    w = {**DEFAULTS, **(config or {})}["width"]
    return B.Sequence(
        B.Conv2D(1, w, 3, pad=1, bias=False), B.BatchNorm(w), B.ReLU(),
        B.BasicBlock(w, w),
        B.BasicBlock(w, 2 * w, stride=2),                  # 8x8 -> 4x4
        B.BasicBlock(2 * w, 2 * w),
        global_pool, B.Linear(2 * w, 10))


def pad_one(batch):
    """Zero-pad the images by one pixel on each side (10x10), for a random 8x8 crop."""
    x = batch["features"]
    width = [(0, 0)] * (x.ndim - 2) + [(1, 1), (1, 1)]
    return {**batch, "features": np.pad(x, width)}


def augmented(batch_size, seed):
    """Training batches, each image shifted by -1, 0 or 1 pixel in each direction."""
    s = Mapping(common.digits("train", batch_size, shuffle=True, seed=seed), pad_one)
    return RandomCrop(s, 8, seed=seed + 1)


def loss_fn(model, batch):
    logits = model(lk.tensor(batch["features"], device=model.device))
    y = batch["targets"]
    return {"loss": F.softmax_cross_entropy(logits, y), "accuracy": F.accuracy(logits, y)}


def make_loop(config=None, extensions=()):
    cfg = {**DEFAULTS, **(config or {})}
    lk.bricks.set_seed(cfg["seed"])
    model = build(cfg).to(cfg["device"])
    steps = cfg["epochs"] * -(-1297 // cfg["batch_size"])
    opt = lk.optimizers.chain(
        lk.optimizers.WeightDecay(cfg["weight_decay"]),
        lk.optimizers.Adam(lr=lk.optimizers.Cosine(cfg["lr"], total=steps))).setup(model)
    train = augmented(cfg["batch_size"], cfg["seed"])
    return T.MainLoop(model, opt, train, loss_fn, name="resnet-digits", config=cfg, extensions=[
        T.TrainingDataMonitoring(), T.DataStreamMonitoring(common.digits("valid", 200)),
        T.FinishAfter(epochs=cfg["epochs"]), *extensions])


def train(config=None):
    loop = make_loop(config, extensions=[T.Printing(every=5)])
    loop.run()
    loop.close()
    return loop.model, {"test_accuracy": common.accuracy(loop.model),
                        "valid_accuracy": loop.log.last("valid_accuracy")}


if __name__ == "__main__":
    raise SystemExit(common.main("resnet", train, DEFAULTS))
